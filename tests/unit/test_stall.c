/* test_stall.c: the stall reason: none without lag or before stall_ms, then each cause. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "stall.h"

/* A partition with lag, idle past stall_ms, one subscriber with credits, nothing else. */
static ks_stall_in_t base(void)
{
    ks_stall_in_t in = {.lag = 5,
                        .idle_ms = 2000,
                        .stall_ms = 1000,
                        .head_attempts = 1,
                        .subs = 1,
                        .subs_credited = 1};
    return in;
}

static void test_not_stalled(void **state)
{
    (void)state;
    ks_stall_in_t in = base();
    in.idle_ms = 999;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_NONE);
    in = base();
    in.lag = 0;
    in.subs = 0;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_NONE);
    in.lag = -1; /* unknown: not called stalled */
    assert_int_equal(ks_stall_reason(&in), KS_STALL_NONE);
    assert_string_equal(ks_stall_str(KS_STALL_NONE), "");
}

static void test_each_reason(void **state)
{
    (void)state;
    ks_stall_in_t in = base();
    assert_int_equal(ks_stall_reason(&in), KS_STALL_UNKNOWN);
    in.subs_credited = 0;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_NO_CREDITS);
    in.subs = 0;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_NO_SUBSCRIBER);
    in.memory_paused = true;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_MEMORY);
    in.schema_wait = true;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_SCHEMA);
    in.held_back = true;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_METADATA);
    in.head_attempts = 2;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_POISON);
    in.kafka_error = true;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_KAFKA);
    assert_string_equal(ks_stall_str(KS_STALL_KAFKA), "kafka");
    assert_string_equal(ks_stall_str(KS_STALL_POISON), "poison");
    assert_string_equal(ks_stall_str(KS_STALL_METADATA), "metadata");
    assert_string_equal(ks_stall_str(KS_STALL_MEMORY), "memory");
    assert_string_equal(ks_stall_str(KS_STALL_SCHEMA), "schema_registry");
    assert_string_equal(ks_stall_str(KS_STALL_NO_SUBSCRIBER), "no_subscriber");
    assert_string_equal(ks_stall_str(KS_STALL_NO_CREDITS), "no_credits");
}

/* A record delivered once and out now is not poison: it has not come back. */
static void test_first_delivery_not_poison(void **state)
{
    (void)state;
    ks_stall_in_t in = base();
    in.subs_credited = 0;
    in.head_attempts = 1;
    assert_int_equal(ks_stall_reason(&in), KS_STALL_NO_CREDITS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_stalled),
        cmocka_unit_test(test_each_reason),
        cmocka_unit_test(test_first_delivery_not_poison),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
