/* calloc.c: the process's calloc, so that glibc's per-thread cache serves small blocks.
 *
 * glibc 2.36 (Debian 12's) serves malloc from a per-thread cache (tcache) of freed blocks
 * up to 1,032 bytes, but its calloc never looks there: each call takes the arena's lock and
 * walks its bins. librdkafka 2.0.2 callocs twice a record: a 296-byte op for each message
 * on its broker thread, and in rd_kafka_message_headers a 512-byte buffer that it frees
 * again at once, on the group loop (about 360 instructions a call; callgrind, 100-byte
 * records). Defined in the executable, this calloc is the one every library of the process
 * calls: malloc, where the thread's own frees wait, then cleared here. Whatever malloc the
 * process has (glibc's, or one preloaded) is the one called, so free always matches. Large
 * blocks are cleared here too; glibc's calloc skips clearing only a chunk fresh from the
 * system, and ksidecar raises the mmap threshold (daemon/main.c), so nearly every block
 * comes from a heap and is cleared either way. Sanitizer builds keep their runtime's
 * calloc (calloc.h). */
#include "calloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if KS_OWN_CALLOC

/* Called through a pointer the compiler cannot see through: it would otherwise turn
 * malloc and a clearing memset back into a call of calloc, this very function. */
static void *(*volatile ks_malloc)(size_t) = malloc;

void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = ks_malloc(total);
    if (p)
        memset(p, 0, total);
    return p;
}

#endif
