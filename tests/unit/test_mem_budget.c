/* test_mem_budget.c: tests the memory budget's shares and its tally (proxy/mem_budget.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mem_budget.h"

#define MIB (INT64_C(1) << 20)

/* The default budget: a quarter for librdkafka, three quarters shared by the windows. */
static void test_split(void **state)
{
    (void)state;
    assert_int_equal(ks_mem_kafka_part(256 * MIB), 64 * MIB);
    assert_int_equal(ks_mem_window_part(256 * MIB), 192 * MIB);
    assert_int_equal(ks_mem_kafka_part(256 * MIB) + ks_mem_window_part(256 * MIB), 256 * MIB);
    /* odd sizes lose nothing */
    assert_int_equal(ks_mem_kafka_part(1001) + ks_mem_window_part(1001), 1001);
}

/* The share is the window part split evenly over the partitions assigned now. */
static void test_share_follows_partitions(void **state)
{
    (void)state;
    assert_int_equal(ks_mem_window_share(256 * MIB, 1), 192 * MIB);
    assert_int_equal(ks_mem_window_share(256 * MIB, 8), 24 * MIB);
    assert_int_equal(ks_mem_window_share(256 * MIB, 64), 3 * MIB);
    assert_int_equal(ks_mem_window_share(256 * MIB, 256), 768 * 1024);
    assert_int_equal(ks_mem_window_share(256 * MIB, 1024), 192 * 1024);
    /* 0 partitions: as if one (a window may exist before the tally counts it) */
    assert_int_equal(ks_mem_window_share(256 * MIB, 0), 192 * MIB);
    /* the shares never add up to more than the window part while above the floor */
    for (size_t n = 1; n <= 3072; n += 7)
        assert_true(ks_mem_window_share(256 * MIB, n) * (int64_t)n <= 192 * MIB);
}

/* Past the floor, every partition still gets the floor, so each makes progress. */
static void test_share_floor(void **state)
{
    (void)state;
    assert_int_equal(ks_mem_window_share(256 * MIB, 3072), KS_MEM_WINDOW_FLOOR);
    assert_int_equal(ks_mem_window_share(256 * MIB, 3073), KS_MEM_WINDOW_FLOOR);
    assert_int_equal(ks_mem_window_share(256 * MIB, 1000000), KS_MEM_WINDOW_FLOOR);
    assert_int_equal(ks_mem_window_share(16 * MIB, 1000), KS_MEM_WINDOW_FLOOR);
    /* the floor holds a record's overhead many times over */
    assert_true(KS_MEM_WINDOW_FLOOR > 100 * ks_mem_record_overhead());
}

/* librdkafka's per-partition queue limit: for 1,024 partitions, 100-byte records (plus
 * librdkafka's own cost of each) filling its per-partition part, within librdkafka's range
 * and never above its default. */
static void test_kafka_limits(void **state)
{
    (void)state;
    /* 64 MiB / 1024 = 64 KiB a partition, of which 100/520 as key and value: 12,603 bytes,
     * 12 in librdkafka's units of 1000 bytes */
    assert_int_equal(ks_mem_kafka_queue_kbytes(256 * MIB), 12);
    int64_t per = ks_mem_kafka_part(256 * MIB) / KS_MEM_KAFKA_PARTS;
    /* what librdkafka's queue holds at that limit, in 100-byte records, fits its part */
    int64_t recs = ks_mem_kafka_queue_kbytes(256 * MIB) * 1000 / 100;
    assert_true(recs * (100 + KS_MEM_KAFKA_RECORD_OVERHEAD) <= per);
    /* small budgets: librdkafka's minimum */
    assert_int_equal(ks_mem_kafka_queue_kbytes(16 * MIB), 1);
    assert_int_equal(ks_mem_kafka_queue_kbytes(INT64_C(1) << 20), 1);
    /* huge budgets: librdkafka's default */
    assert_int_equal(ks_mem_kafka_queue_kbytes(INT64_C(1) << 40), 2048);
}

/* The tally is shared and adds up deltas. */
static void test_tally(void **state)
{
    (void)state;
    size_t p0 = ks_mem_parts();
    int64_t u0 = ks_mem_used();
    ks_mem_parts_add(3);
    ks_mem_used_add(1000);
    assert_int_equal(ks_mem_parts(), p0 + 3);
    assert_int_equal(ks_mem_used(), u0 + 1000);
    ks_mem_parts_add(-3);
    ks_mem_used_add(-1000);
    assert_int_equal(ks_mem_parts(), p0);
    assert_int_equal(ks_mem_used(), u0);
    /* never negative, whatever a caller does */
    ks_mem_parts_add(-5);
    assert_int_equal(ks_mem_parts(), 0);
    ks_mem_parts_add(5);
}

/* Pressure starts at a quarter of the budget, windows and librdkafka's queues together. */
static void test_pressed(void **state)
{
    (void)state;
    int64_t max = INT64_C(256) << 20, half = max / 4; /* a quarter, in two halves */
    int64_t u0 = ks_mem_used(), q0 = ks_mem_queued();
    ks_mem_used_add(-u0);
    ks_mem_queued_add(-q0);
    assert_false(ks_mem_pressed(max));
    ks_mem_used_add(half / 2);
    ks_mem_queued_add(half / 2 - 1);
    assert_false(ks_mem_pressed(max));
    ks_mem_queued_add(1);
    assert_true(ks_mem_pressed(max));
    assert_false(ks_mem_pressed(max * 4));
    ks_mem_used_add(u0 - half / 2);
    ks_mem_queued_add(q0 - half / 2);
    assert_int_equal(ks_mem_used(), u0);
    assert_int_equal(ks_mem_queued(), q0);
}

/* Each group's fetch.max.bytes comes from the fetch part (half the librdkafka quarter): one
 * group gets the cap, ten started together split it, groups past it get the floor, and what a
 * stopped group gives back goes to the next. */
static void test_fetch_shares(void **state)
{
    (void)state;
    int64_t max = 256 * MIB, part = ks_mem_fetch_part(max), got[40];
    assert_int_equal(part, 32 * MIB);
    got[0] = ks_mem_fetch_take(max, 0);
    assert_int_equal(got[0], KS_MEM_FETCH_CAP);
    ks_mem_fetch_give(got[0]);
    /* 32 static groups: a 32nd each, all within the part */
    int64_t sum = 0;
    for (int i = 0; i < 32; i++)
        sum += got[i] = ks_mem_fetch_take(max, 32);
    assert_int_equal(got[0], MIB);
    assert_int_equal(got[31], MIB);
    assert_true(sum <= part);
    /* more than the part holds: the floor */
    got[32] = ks_mem_fetch_take(max, 33);
    assert_int_equal(got[32], KS_MEM_FETCH_FLOOR);
    for (int i = 0; i <= 32; i++)
        ks_mem_fetch_give(got[i]);
    /* groups started one at a time: never more than what is left */
    sum = 0;
    for (int i = 0; i < 40; i++) {
        got[i] = ks_mem_fetch_take(max, 0);
        assert_true(got[i] >= KS_MEM_FETCH_FLOOR && got[i] <= KS_MEM_FETCH_CAP);
        if (sum + got[i] > part)
            assert_int_equal(got[i], KS_MEM_FETCH_FLOOR);
        sum += got[i];
    }
    /* one stops: the next started gets its share back (up to what the running ones expect) */
    ks_mem_fetch_give(got[0]);
    int64_t again = ks_mem_fetch_take(max, 0);
    assert_true(again >= KS_MEM_FETCH_FLOOR && again <= got[0]);
    ks_mem_fetch_give(again);
    for (int i = 1; i < 40; i++)
        ks_mem_fetch_give(got[i]);
    assert_int_equal(ks_mem_fetch_take(max, 0), KS_MEM_FETCH_CAP);
    ks_mem_fetch_give(KS_MEM_FETCH_CAP);
    /* a partition's part of a response: half, at most librdkafka's 1 MiB */
    assert_int_equal(ks_mem_fetch_part_bytes(KS_MEM_FETCH_CAP), MIB);
    assert_int_equal(ks_mem_fetch_part_bytes(MIB), MIB / 2);
    assert_int_equal(ks_mem_fetch_part_bytes(KS_MEM_FETCH_FLOOR), KS_MEM_FETCH_FLOOR / 2);
    /* a floor librdkafka takes (fetch.max.bytes >= message.max.bytes, 1,000,000) */
    assert_true(KS_MEM_FETCH_FLOOR >= 1000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),        cmocka_unit_test(test_share_follows_partitions),
        cmocka_unit_test(test_share_floor),  cmocka_unit_test(test_kafka_limits),
        cmocka_unit_test(test_tally),        cmocka_unit_test(test_pressed),
        cmocka_unit_test(test_fetch_shares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
