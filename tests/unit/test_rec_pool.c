/* test_rec_pool.c: tests the per-thread cache of record copies (proxy/rec_pool.c). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "rec_pool.h"

/* A block has room for what was asked, in whole grains; a freed block of a class is the
 * next one handed out for that class, and leaves the cache's count. */
static void test_reuse_by_class(void **state)
{
    (void)state;
    ks_rec_pool_start(1 << 20);
    uint16_t c1, c2, c3, c4;
    char *a = ks_rec_pool_alloc(150, &c1);
    assert_int_equal(c1, 10); /* 150 bytes and malloc's 8-byte header: 10 grains of 16 */
    memset(a, 'x', 150);      /* ASan: all 150 bytes are the block's */
    char *b = ks_rec_pool_alloc(152, &c2);
    assert_int_equal(c2, 10); /* the most class 10 holds */
    assert_ptr_not_equal(a, b);
    ks_rec_pool_free(a, c1);
    assert_int_equal(ks_rec_pool_held(), 160);
    char *c = ks_rec_pool_alloc(145, &c3);
    assert_ptr_equal(c, a);
    assert_int_equal(c3, 10);
    assert_int_equal(ks_rec_pool_held(), 0);
    /* another class does not take it */
    ks_rec_pool_free(c, c3);
    char *d = ks_rec_pool_alloc(153, &c4);
    assert_int_equal(c4, 11);
    assert_ptr_not_equal(d, c);
    assert_int_equal(ks_rec_pool_held(), 160);
    ks_rec_pool_free(b, c2);
    ks_rec_pool_free(d, c4);
    assert_int_equal(ks_rec_pool_held(), 160 + 160 + 176);
    ks_rec_pool_stop();
    assert_int_equal(ks_rec_pool_held(), 0);
}

/* The cache never holds more than its bound: past it, blocks are freed. */
static void test_bounded(void **state)
{
    (void)state;
    ks_rec_pool_start(1000);
    void *p[20];
    uint16_t cls[20];
    for (int i = 0; i < 20; i++)
        p[i] = ks_rec_pool_alloc(100, &cls[i]); /* chunks of 112 bytes */
    for (int i = 0; i < 20; i++) {
        ks_rec_pool_free(p[i], cls[i]);
        assert_true(ks_rec_pool_held() <= 1000);
    }
    assert_int_equal(ks_rec_pool_held(), 8 * 112);
    ks_rec_pool_stop();
}

/* A block above the largest class is plain malloc: class 0, never cached. Zero bytes still
 * gets a block. */
static void test_large_and_empty(void **state)
{
    (void)state;
    ks_rec_pool_start(1 << 20);
    uint16_t c;
    char *big = ks_rec_pool_alloc(KS_REC_POOL_MAX_BLOCK + 1, &c);
    assert_int_equal(c, 0);
    memset(big, 1, KS_REC_POOL_MAX_BLOCK + 1);
    ks_rec_pool_free(big, c);
    assert_int_equal(ks_rec_pool_held(), 0);
    void *z = ks_rec_pool_alloc(0, &c);
    assert_non_null(z);
    assert_int_equal(c, 1);
    char *top = ks_rec_pool_alloc(KS_REC_POOL_MAX_BLOCK - 8, &c);
    assert_int_equal(c, KS_REC_POOL_MAX_BLOCK / KS_REC_POOL_GRAIN); /* the largest class */
    memset(top, 2, KS_REC_POOL_MAX_BLOCK - 8);
    ks_rec_pool_free(top, c);
    assert_int_equal(ks_rec_pool_held(), KS_REC_POOL_MAX_BLOCK);
    ks_rec_pool_free(z, 1);
    assert_int_equal(ks_rec_pool_held(), KS_REC_POOL_MAX_BLOCK + 16);
    ks_rec_pool_free(NULL, 3); /* nothing */
    ks_rec_pool_stop();
}

typedef struct {
    void *blk;
    uint16_t cls;
} handed_t;

static void *other_thread(void *arg)
{
    handed_t *h = arg;
    ks_rec_pool_free(h->blk, h->cls); /* no cache on this thread: freed */
    return (void *)(intptr_t)ks_rec_pool_held();
}

/* A thread that never started a cache frees at once; its count stays 0. So does this one
 * after stop. */
static void test_no_cache_frees(void **state)
{
    (void)state;
    ks_rec_pool_start(1 << 20);
    handed_t arg;
    arg.blk = ks_rec_pool_alloc(200, &arg.cls);
    pthread_t t;
    void *held;
    assert_int_equal(pthread_create(&t, NULL, other_thread, &arg), 0);
    assert_int_equal(pthread_join(t, &held), 0);
    assert_int_equal((intptr_t)held, 0);
    assert_int_equal(ks_rec_pool_held(), 0);
    ks_rec_pool_stop();
    uint16_t c;
    void *x = ks_rec_pool_alloc(64, &c);
    ks_rec_pool_free(x, c);
    assert_int_equal(ks_rec_pool_held(), 0);
}

static void *fill_other(void *arg)
{
    (void)arg;
    ks_rec_pool_start(1000);
    uint16_t c[8];
    void *b[8];
    for (int i = 0; i < 8; i++)
        b[i] = ks_rec_pool_alloc(100, &c[i]);
    for (int i = 0; i < 8; i++)
        ks_rec_pool_free(b[i], c[i]); /* 8 x 112 = 896 kept */
    intptr_t held = ks_rec_pool_held();
    ks_rec_pool_stop();
    return (void *)held;
}

/* The bound is over every thread's cache together: what another thread keeps leaves this
 * one less room. */
static void test_bound_is_the_process(void **state)
{
    (void)state;
    ks_rec_pool_start(1000);
    uint16_t c1, c2;
    void *x = ks_rec_pool_alloc(100, &c1), *y = ks_rec_pool_alloc(100, &c2);
    ks_rec_pool_free(x, c1);
    assert_int_equal(ks_rec_pool_held(), 112);
    /* The other thread keeps what fits beside this one's 112: 7 blocks, 784 bytes. */
    pthread_t t;
    void *held;
    assert_int_equal(pthread_create(&t, NULL, fill_other, NULL), 0);
    assert_int_equal(pthread_join(t, &held), 0);
    assert_int_equal((intptr_t)held, 7 * 112);
    /* Its stop gave its share back: this one keeps another block. */
    ks_rec_pool_free(y, c2);
    assert_int_equal(ks_rec_pool_held(), 224);
    ks_rec_pool_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_by_class),       cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_large_and_empty),      cmocka_unit_test(test_no_cache_frees),
        cmocka_unit_test(test_bound_is_the_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
