/* test_calloc.c: the process's calloc (daemon/calloc.c), as every executable linking the
 * engine gets it: it is the one the process's libraries call, clears what it returns, reuses
 * a block the thread just freed, and refuses an overflowing size. */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "calloc.h"

static void assert_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            fail_msg("byte %zu of %zu is 0x%02x, not 0", i, n, p[i]);
}

/* A block of n bytes written all over and freed; returns where it was. The barrier keeps the
 * compiler from dropping the writes as dead before free. */
static uintptr_t free_dirty(size_t n, int fill)
{
    unsigned char *p = malloc(n);
    assert_non_null(p);
    memset(p, fill, n);
    __asm__ volatile("" : : "r"(p) : "memory");
    uintptr_t at = (uintptr_t)p;
    free(p);
    return at;
}

/* Whether this process's malloc gives back the block of n bytes the thread just freed
 * (glibc's per-thread cache does; valgrind, a preloaded allocator or
 * GLIBC_TUNABLES=glibc.malloc.tcache_count=0 may not). */
static bool malloc_reuses(size_t n)
{
    uintptr_t at = free_dirty(n, 0x11);
    void *p = malloc(n);
    bool same = (uintptr_t)p == at;
    free(p);
    return same;
}

/* This test links only the engine's library, as the other unit tests do: the calloc that
 * every library of the process finds first is daemon/calloc.c's, not glibc's, unless the
 * build keeps glibc's (a sanitizer's runtime, or -DKSIDECAR_OWN_CALLOC=OFF). */
static void test_the_process_calloc_comes_with_the_engine(void **state)
{
    (void)state;
    if (!KS_OWN_CALLOC)
        skip();
    void *first = dlsym(RTLD_DEFAULT, "calloc");
    void *next = dlsym(RTLD_NEXT, "calloc"); /* glibc's, after the executable */
    assert_non_null(first);
    assert_non_null(next);
    assert_ptr_equal(first, (void *)calloc);
    assert_ptr_not_equal(first, next);
}

/* A block freed dirty comes back cleared, and (where malloc itself reuses it) it is the very
 * block just freed: the thread's cache served it, as glibc 2.36's own calloc never does. */
static void test_small_blocks_are_cleared_and_come_from_the_thread_cache(void **state)
{
    (void)state;
    for (size_t n = 1; n <= KS_CALLOC_TCACHE_MAX; n += 37) {
        bool reuses = malloc_reuses(n);
        uintptr_t at = free_dirty(n, 0xa5);
        unsigned char *p = calloc(1, n);
        assert_non_null(p);
        assert_zero(p, n);
        if (KS_OWN_CALLOC && reuses && (uintptr_t)p != at)
            fail_msg("calloc(1, %zu) did not reuse the block just freed, as malloc does", n);
        free(p);
    }
    (void)free_dirty(KS_CALLOC_TCACHE_MAX, 0xa5);
    unsigned char *p = calloc(4, KS_CALLOC_TCACHE_MAX / 4); /* n x size at the bound exactly */
    assert_non_null(p);
    assert_zero(p, KS_CALLOC_TCACHE_MAX);
    free(p);
}

/* Large blocks freed dirty, then asked for again: a heap chunk comes back cleared. */
static void test_large_blocks_are_cleared(void **state)
{
    (void)state;
    size_t sizes[] = {KS_CALLOC_TCACHE_MAX + 1, 5000, (size_t)200 << 10, (size_t)1 << 20,
                      (size_t)40 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        /* A smaller block after it keeps the dirty one from merging into the heap's top. */
        unsigned char *dirty = malloc(sizes[i]);
        assert_non_null(dirty);
        void *fence = malloc(64);
        memset(dirty, 0x5a, sizes[i]);
        __asm__ volatile("" : : "r"(dirty) : "memory");
        free(dirty);
        unsigned char *p = calloc(1, sizes[i]);
        assert_non_null(p);
        assert_zero(p, sizes[i]);
        free(p);
        free(fence);
    }
}

/* Sanitizer runtimes abort on an overflowing calloc unless told otherwise: the check is this
 * calloc's own. */
static void test_overflow_and_zero_sizes(void **state)
{
    (void)state;
    if (KS_OWN_CALLOC) {
        volatile size_t half = SIZE_MAX / 2 + 1; /* hidden from the compiler's size check */
        errno = 0;
        assert_null(calloc(half, 2));
        assert_int_equal(errno, ENOMEM);
        errno = 0;
        assert_null(calloc(2, half));
        assert_int_equal(errno, ENOMEM);
    }
    void *p = calloc(0, 0); /* like glibc: a block that free takes */
    assert_non_null(p);
    free(p);
    p = calloc(0, 100);
    assert_non_null(p);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_process_calloc_comes_with_the_engine),
        cmocka_unit_test(test_small_blocks_are_cleared_and_come_from_the_thread_cache),
        cmocka_unit_test(test_large_blocks_are_cleared),
        cmocka_unit_test(test_overflow_and_zero_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
