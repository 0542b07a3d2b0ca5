/* test_commit_track.c: tests commits sent versus confirmed and the acks they cover
 * (proxy/commit_track.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "commit_track.h"

static void test_confirm_covers_the_acks_sent(void **state)
{
    (void)state;
    ks_commit_track_t t;
    ks_commit_track_init(&t, 100);
    assert_int_equal(t.confirmed, 100);
    assert_int_equal(ks_commit_track_in_flight(&t), -1);
    t.acks += 5;
    ks_commit_track_sent(&t, 105, "ks1:a", 5);
    assert_int_equal(ks_commit_track_in_flight(&t), 105);
    t.acks += 3; /* accepted after the commit was built */
    assert_int_equal(ks_commit_track_unconfirmed(&t), 8);
    ks_commit_track_confirmed(&t, 105, "ks1:a", 5);
    assert_int_equal(t.confirmed, 105);
    assert_int_equal(ks_commit_track_in_flight(&t), -1);
    assert_int_equal(ks_commit_track_unconfirmed(&t), 3);
}

/* Two in flight: the older one's confirmation moves the offset, but covers no more acks
 * than it may (conservative), and the newer stays in flight. */
static void test_older_confirmation(void **state)
{
    (void)state;
    ks_commit_track_t t;
    ks_commit_track_init(&t, -1);
    t.acks = 2;
    ks_commit_track_sent(&t, 10, "x", 1);
    t.acks = 4;
    ks_commit_track_sent(&t, 10, "xy", 2); /* same offset, more metadata */
    ks_commit_track_confirmed(&t, 10, "x", 1);
    assert_int_equal(t.confirmed, 10);
    assert_int_equal(ks_commit_track_in_flight(&t), 10);
    assert_int_equal(ks_commit_track_unconfirmed(&t), 4);
    ks_commit_track_confirmed(&t, 10, "xy", 2);
    assert_int_equal(ks_commit_track_unconfirmed(&t), 0);
    assert_int_equal(ks_commit_track_in_flight(&t), -1);
}

static void test_failure_keeps_the_confirmed(void **state)
{
    (void)state;
    ks_commit_track_t t;
    ks_commit_track_init(&t, 50);
    t.acks = 7;
    ks_commit_track_sent(&t, 57, NULL, 0);
    ks_commit_track_failed(&t);
    assert_int_equal(t.confirmed, 50);
    assert_int_equal(ks_commit_track_in_flight(&t), -1);
    assert_int_equal(ks_commit_track_unconfirmed(&t), 7);
    /* A late confirmation of the failed one still moves the offset only. */
    ks_commit_track_confirmed(&t, 57, NULL, 0);
    assert_int_equal(t.confirmed, 57);
    assert_int_equal(ks_commit_track_unconfirmed(&t), 7);
}

/* An older commit answered after a newer one (librdkafka retried it past the newer, across
 * a broker's restart): the broker wrote it last, so the group holds it; the confirmed
 * offset says so and the caller is told to commit again. */
static void test_older_answered_after_a_newer(void **state)
{
    (void)state;
    ks_commit_track_t t;
    ks_commit_track_init(&t, 244);
    t.acks = 256;
    ks_commit_track_sent(&t, 500, "a", 1);
    t.acks = 1000;
    ks_commit_track_sent(&t, 1244, "b", 1);
    assert_false(ks_commit_track_confirmed(&t, 1244, "b", 1));
    assert_int_equal(t.confirmed, 1244);
    assert_int_equal(ks_commit_track_in_flight(&t), -1);
    assert_true(ks_commit_track_confirmed(&t, 500, "a", 1));
    assert_int_equal(t.confirmed, 500);
    /* The same commit reported twice (a sync commit's call and callback) is not behind. */
    assert_false(ks_commit_track_confirmed(&t, 500, "a", 1));
    ks_commit_track_sent(&t, 1244, "b", 1);
    assert_false(ks_commit_track_confirmed(&t, 1244, "b", 1));
    assert_int_equal(t.confirmed, 1244);
    assert_int_equal(ks_commit_track_unconfirmed(&t), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_confirm_covers_the_acks_sent),
        cmocka_unit_test(test_older_confirmation),
        cmocka_unit_test(test_failure_keeps_the_confirmed),
        cmocka_unit_test(test_older_answered_after_a_newer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
