/* doc_file.c: print, write or check a generated doc file (doc_file.h). */
#include "doc_file.h"

#include <stdlib.h>
#include <string.h>

/* The whole of path (caller frees), or NULL. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len == cap) {
            cap = cap ? 2 * cap : 8192;
            char *nb = realloc(buf, cap);
            if (!nb)
                abort();
            buf = nb;
        }
        size_t got = fread(buf + *len, 1, cap - *len, f);
        if (got == 0)
            break;
        *len += got;
    }
    fclose(f);
    return buf;
}

int ks_doc_file_main(int argc, char **argv, void (*write)(FILE *f), const char *what,
                     const char *regen)
{
    if (argc == 1) {
        write(stdout);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "-o")) {
        FILE *f = fopen(argv[2], "w");
        if (!f) {
            perror(argv[2]);
            return 1;
        }
        write(f);
        return fclose(f) ? 1 : 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--check")) {
        char *want = NULL;
        size_t want_len = 0;
        FILE *m = open_memstream(&want, &want_len);
        if (!m)
            abort();
        write(m);
        fclose(m);
        size_t have_len;
        char *have = read_all(argv[2], &have_len);
        int stale = !have || have_len != want_len || memcmp(have, want, want_len) != 0;
        if (stale)
            fprintf(stderr, "%s is not what %s makes: regenerate it with\n  %s\n", argv[2], what,
                    regen);
        free(have);
        free(want);
        return stale;
    }
    fprintf(stderr, "usage: %s [-o FILE | --check FILE]\n", argv[0]);
    return 2;
}
