/* fuzz_file.h: hands a fuzz input to code that reads a file by path, through one memfd. */
#ifndef KS_FUZZ_FILE_H
#define KS_FUZZ_FILE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Replaces the memfd's content with data (n bytes) and returns a path that opens it, in a
 * static buffer. Aborts if the kernel refuses: the harness cannot run without it. */
static const char *fuzz_file(const void *data, size_t n)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz_input", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) < 0 || pwrite(fd, data, n, 0) != (ssize_t)n)
        abort();
    return path;
}

#endif
