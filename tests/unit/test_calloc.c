/* test_calloc.c: the daemon's calloc (daemon/calloc.c) clears what it returns, reuses a
 * block the thread just freed, refuses an overflowing size, and leaves large ones to glibc. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
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

/* A block freed dirty comes back cleared, and (with the daemon's calloc) it is the very
 * block just freed: the thread's cache served it, as glibc's own calloc never does. */
static void test_small_blocks_are_cleared_and_come_from_the_thread_cache(void **state)
{
    (void)state;
    for (size_t n = 1; n <= KS_CALLOC_TCACHE_MAX; n += 37) {
        unsigned char *dirty = malloc(n);
        assert_non_null(dirty);
        memset(dirty, 0xa5, n);
        free(dirty);
        unsigned char *p = calloc(1, n);
        assert_non_null(p);
        assert_zero(p, n);
        if (KS_OWN_CALLOC && p != dirty)
            fail_msg("calloc(1, %zu) did not reuse the block just freed", n);
        free(p);
    }
    unsigned char *p = calloc(4, KS_CALLOC_TCACHE_MAX / 4); /* n x size at the bound exactly */
    assert_non_null(p);
    assert_zero(p, KS_CALLOC_TCACHE_MAX);
    free(p);
}

static void test_large_blocks_are_cleared(void **state)
{
    (void)state;
    size_t sizes[] = {KS_CALLOC_TCACHE_MAX + 1, 5000, (size_t)200 << 10, (size_t)1 << 20,
                      (size_t)40 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        unsigned char *dirty = malloc(sizes[i]);
        assert_non_null(dirty);
        memset(dirty, 0x5a, sizes[i]);
        free(dirty);
        unsigned char *p = calloc(1, sizes[i]);
        assert_non_null(p);
        assert_zero(p, sizes[i]);
        free(p);
    }
}

static void test_overflow_and_zero_sizes(void **state)
{
    (void)state;
    volatile size_t half = SIZE_MAX / 2 + 1; /* hidden from the compiler's size check */
    errno = 0;
    assert_null(calloc(half, 2));
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_null(calloc(2, half));
    assert_int_equal(errno, ENOMEM);
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
        cmocka_unit_test(test_small_blocks_are_cleared_and_come_from_the_thread_cache),
        cmocka_unit_test(test_large_blocks_are_cleared),
        cmocka_unit_test(test_overflow_and_zero_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
