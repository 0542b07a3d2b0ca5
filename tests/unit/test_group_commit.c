/* test_group_commit.c: tests how a partition's commit metadata is built from its window and
 * from restored metadata (build_meta, static in proxy/group_commit.c, which this test
 * includes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "group_commit.c"
#include "group_fixture.h"

static char buf[4096];

/* Builds p's metadata at its commit point and decodes it back into m. */
static int build_and_decode(ks_group_t *g, part_t *p, size_t size, ks_commit_meta_t *m)
{
    int64_t cp = ks_ack_window_commit_point(&p->win);
    int len = build_meta(g, p, cp, buf, size);
    assert_true(len > 0);
    assert_int_equal(ks_commit_meta_decode(buf, (size_t)len, cp, m), 0);
    return len;
}

static void test_acks_and_attempts_above_the_commit_point(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 10, 20);
    /* 10..14 delivered once; 12 and 14 acked; 11 delivered a second time. */
    for (int i = 0; i < 5; i++)
        assert_non_null(ks_ack_window_lease_next(&p->win));
    ks_ack_window_get(&p->win, 11)->attempts = 2;
    assert_int_equal(ks_ack_window_ack(&p->win, 12), KS_ACK_OK);
    assert_int_equal(ks_ack_window_ack(&p->win, 14), KS_ACK_OK);
    /* 13 is leased but not sent yet: its attempt does not count. */
    ks_ack_window_get(&p->win, 13)->flags |= KS_WIN_F_UNSENT;
    ks_commit_meta_t m = {0};
    build_and_decode(g, p, sizeof(buf), &m);
    assert_int_equal(m.commit_offset, 10);
    assert_int_equal(m.acked_cnt, 2);
    assert_int_equal(m.acked[0], 12);
    assert_int_equal(m.acked[1], 14);
    assert_int_equal(m.attempt_cnt, 2);
    assert_int_equal(m.attempts[0].offset, 10);
    assert_int_equal(m.attempts[0].attempts, 1);
    assert_int_equal(m.attempts[1].offset, 11);
    assert_int_equal(m.attempts[1].attempts, 2);
    assert_false(p->held_back);
    ks_commit_meta_free(&m);
    fx_group_free(g);
}

/* Attempt counts restored into the window (handle_message does so as it takes a record the
 * last process delivered) above everything delivered since: the walk reaches them. */
static void test_restored_attempts_above_the_last_delivery(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 10, 20);
    assert_non_null(ks_ack_window_lease_next(&p->win));
    assert_non_null(ks_ack_window_lease_next(&p->win));
    ks_ack_window_get(&p->win, 15)->attempts = 3;
    ks_ack_window_touched(&p->win, 15);
    ks_commit_meta_t m = {0};
    build_and_decode(g, p, sizeof(buf), &m);
    assert_int_equal(m.commit_offset, 10);
    assert_int_equal(m.acked_cnt, 0);
    assert_int_equal(m.attempt_cnt, 3);
    assert_int_equal(m.attempts[0].offset, 10);
    assert_int_equal(m.attempts[1].offset, 11);
    assert_int_equal(m.attempts[2].offset, 15);
    assert_int_equal(m.attempts[2].attempts, 3);
    ks_commit_meta_free(&m);
    fx_group_free(g);
}

static void test_restored_metadata_beyond_the_window(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 0, 5); /* fetched 0..4; what was read back covers 0..29 */
    p->restore.commit_offset = 0;
    p->restore.acked = malloc(3 * sizeof(int64_t));
    p->restore.attempts = malloc(2 * sizeof(ks_meta_attempt_t));
    assert_non_null(p->restore.acked);
    assert_non_null(p->restore.attempts);
    p->restore.acked[0] = 3;  /* inside the window: the window's own state counts */
    p->restore.acked[1] = 20; /* not fetched yet: kept */
    p->restore.acked[2] = 25;
    p->restore.acked_cnt = 3;
    p->restore.attempts[0] = (ks_meta_attempt_t){2, 4};
    p->restore.attempts[1] = (ks_meta_attempt_t){21, 3};
    p->restore.attempt_cnt = 2;
    ks_commit_meta_t m = {0};
    build_and_decode(g, p, sizeof(buf), &m);
    assert_int_equal(m.acked_cnt, 2);
    assert_int_equal(m.acked[0], 20);
    assert_int_equal(m.acked[1], 25);
    assert_int_equal(m.attempt_cnt, 1);
    assert_int_equal(m.attempts[0].offset, 21);
    assert_int_equal(m.attempts[0].attempts, 3);
    ks_commit_meta_free(&m);
    fx_group_free(g);
}

static void test_metadata_that_does_not_fit_holds_back(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 0, 400);
    for (int i = 0; i < 400; i++)
        assert_non_null(ks_ack_window_lease_next(&p->win));
    for (int64_t off = 2; off < 400; off += 2) /* every other one: one run each */
        assert_int_equal(ks_ack_window_ack(&p->win, off), KS_ACK_OK);
    ks_commit_meta_t m = {0};
    int len = build_and_decode(g, p, 64, &m);
    assert_true(len <= 64);
    assert_true(p->held_back);
    assert_true(p->meta_cut > 0);
    assert_int_equal(p->meta_truncations, 1);
    for (size_t i = 0; i < m.acked_cnt; i++)
        assert_true(m.acked[i] < p->meta_cut);
    ks_commit_meta_free(&m);
    /* With room again it fits, and deliveries are no longer held back. */
    build_and_decode(g, p, sizeof(buf), &m);
    assert_false(p->held_back);
    assert_int_equal(m.acked_cnt, 199);
    ks_commit_meta_free(&m);
    fx_group_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acks_and_attempts_above_the_commit_point),
        cmocka_unit_test(test_restored_attempts_above_the_last_delivery),
        cmocka_unit_test(test_restored_metadata_beyond_the_window),
        cmocka_unit_test(test_metadata_that_does_not_fit_holds_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
