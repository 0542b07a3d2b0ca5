/* ksbench_ordered.c: ksbench's handling log for the ordered-delivery benchmark. The log is
 * kept in memory while the clock runs and written after, so the file costs the measured
 * run nothing. */
#include "ksbench_ordered.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys longer than this are cut in the log: the benchmark's are "k<n>". Two records whose
 * keys differ only past it would share a chain in the count, so it would only overcount. */
#define KSB_KEY_MAX 23

typedef struct {
    int32_t partition;
    int8_t key_len; /* -1: null key */
    char key[KSB_KEY_MAX];
    int64_t offset;
    uint64_t chain;
} ksb_entry_t;

static const char *log_path; /* NULL: not logging */
static ksb_entry_t *entries;
static size_t n_entries, cap_entries;
static size_t n_chained; /* records that came with an ordering_chain */

int ksb_order_log_open(const char *path)
{
    cap_entries = 65536;
    entries = malloc(cap_entries * sizeof(*entries));
    if (!entries)
        return -ENOMEM;
    log_path = path;
    n_entries = n_chained = 0;
    return 0;
}

void ksb_order_log_add(int32_t partition, int64_t offset, const void *key, size_t key_len,
                       uint64_t chain)
{
    if (!log_path)
        return;
    if (n_entries == cap_entries) {
        ksb_entry_t *e = realloc(entries, cap_entries * 2 * sizeof(*entries));
        if (!e)
            abort(); /* a benchmark without its log is no result */
        entries = e;
        cap_entries *= 2;
    }
    ksb_entry_t *e = &entries[n_entries++];
    e->partition = partition;
    e->offset = offset;
    e->chain = chain;
    if (!key) {
        e->key_len = -1;
    } else {
        size_t n = key_len < KSB_KEY_MAX ? key_len : KSB_KEY_MAX;
        memcpy(e->key, key, n);
        e->key_len = (int8_t)n;
    }
    if (chain)
        n_chained++;
}

int ksb_order_log_write(void)
{
    if (!log_path)
        return 0;
    int rc = 0;
    FILE *f = fopen(log_path, "w");
    if (!f) {
        rc = -errno;
        goto out_free;
    }
    for (size_t i = 0; i < n_entries; i++) {
        const ksb_entry_t *e = &entries[i];
        if (e->key_len < 0)
            fprintf(f, "%d\t%lld\t\\N\t%llu\n", e->partition, (long long)e->offset,
                    (unsigned long long)e->chain);
        else
            fprintf(f, "%d\t%lld\t%.*s\t%llu\n", e->partition, (long long)e->offset, e->key_len,
                    e->key, (unsigned long long)e->chain);
    }
    if (fclose(f) != 0)
        rc = -errno;
    printf("order_log=%s records=%zu chained=%zu\n", log_path, n_entries, n_chained);
    fflush(stdout);
out_free:
    free(entries);
    entries = NULL;
    log_path = NULL;
    return rc;
}
