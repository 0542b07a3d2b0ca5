/* calloc.c: the process's calloc, so that glibc's per-thread cache serves small blocks.
 *
 * glibc 2.36 (Debian 12's) serves malloc from a per-thread cache (tcache) of freed blocks
 * up to 1,032 bytes, but its calloc never looks there: each call takes the arena's lock and
 * walks its bins. librdkafka 2.0.2 callocs twice a record: a 296-byte op for each message
 * on its broker thread, and in rd_kafka_message_headers a 512-byte buffer that it frees
 * again at once, on the group loop (360-440 instructions a call; callgrind, 100-byte
 * records). Defined in the executable, this calloc is the one every library of the process
 * calls. A small block comes from malloc, where the thread's own frees wait, and is cleared
 * here. A larger one goes to glibc's calloc, which does not clear memory fresh from the
 * system (untouched pages stay out of RSS), as long as malloc is glibc's; under an
 * allocator preloaded in its place it comes from that malloc and is cleared here, so free
 * always matches. Sanitizer builds keep their runtime's calloc (calloc.h).
 *
 * It is built into the engine's library (CMake option KSIDECAR_OWN_CALLOC, on by default),
 * and every executable linking the engine takes it: the daemon, and the unit tests and tools,
 * so what they run is what the daemon runs. */
#include "calloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if KS_OWN_CALLOC

/* glibc's own allocator, exported under these names (malloc is an alias of the first). */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);

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
    void *(*m)(size_t) = ks_malloc;
    if (total > KS_CALLOC_TCACHE_MAX && m == __libc_malloc)
        return __libc_calloc(n, size);
    void *p = m(total);
    if (p)
        memset(p, 0, total);
    return p;
}

#endif
