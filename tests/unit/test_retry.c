/* test_retry.c: tests the retry policy's delays (proxy/retry.c): exponential, capped, jittered
 * within its bounds, and the list form whose last entry repeats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "retry.h"

static void test_no_policy_is_no_delay(void **state)
{
    (void)state;
    ks_retry_t r = {.initial_ms = 0, .max_ms = 60000, .multiplier = 2.0};
    for (unsigned a = 0; a < 100; a++)
        assert_int_equal(ks_retry_delay_ms(&r, a, 0.5), 0);
}

static void test_exponential_to_the_cap(void **state)
{
    (void)state;
    ks_retry_t r = {.initial_ms = 100, .max_ms = 1000, .multiplier = 3.0};
    assert_int_equal(ks_retry_delay_ms(&r, 0, 0), 100); /* read as the first */
    assert_int_equal(ks_retry_delay_ms(&r, 1, 0), 100);
    assert_int_equal(ks_retry_delay_ms(&r, 2, 0), 300);
    assert_int_equal(ks_retry_delay_ms(&r, 3, 0), 900);
    assert_int_equal(ks_retry_delay_ms(&r, 4, 0), 1000);
    assert_int_equal(ks_retry_delay_ms(&r, 1000000, 0), 1000);
    r.multiplier = 1.0; /* constant, and no long loop for a large count */
    assert_int_equal(ks_retry_delay_ms(&r, 4000000000u, 0), 100);
    r.max_ms = 50; /* a cap under the first delay caps it too */
    assert_int_equal(ks_retry_delay_ms(&r, 1, 0), 50);
}

static void test_jitter_stays_within_its_bounds(void **state)
{
    (void)state;
    ks_retry_t r = {.initial_ms = 1000, .max_ms = 8000, .multiplier = 2.0, .jitter = 0.25};
    assert_int_equal(ks_retry_delay_ms(&r, 2, 0.0), 2000);
    assert_int_equal(ks_retry_delay_ms(&r, 2, 0.999999), 1500);
    srand(7);
    int64_t lo = INT64_MAX, hi = 0;
    for (int i = 0; i < 10000; i++) {
        int64_t d = ks_retry_delay_ms(&r, 3, rand() / ((double)RAND_MAX + 1));
        assert_true(d >= 3000 && d <= 4000);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
    }
    assert_true(lo < 3100 && hi > 3900); /* spread over the range, not one value */
    r.jitter = 1.0;
    assert_true(ks_retry_delay_ms(&r, 1, 0.999) <= 1);
}

static void test_list_form_last_entry_repeats(void **state)
{
    (void)state;
    char err[256];
    ks_retry_t r = {.initial_ms = 5, .max_ms = 10, .multiplier = 2.0};
    assert_int_equal(ks_retry_parse_list(&r, " 100, 1000 ,5000", err, sizeof(err)), 0);
    assert_int_equal(r.list_cnt, 3);
    assert_int_equal(ks_retry_delay_ms(&r, 1, 0), 100); /* the list wins over initial_ms */
    assert_int_equal(ks_retry_delay_ms(&r, 2, 0), 1000);
    assert_int_equal(ks_retry_delay_ms(&r, 3, 0), 5000);
    assert_int_equal(ks_retry_delay_ms(&r, 4, 0), 5000);
    assert_int_equal(ks_retry_delay_ms(&r, 90000, 0), 5000);
    r.jitter = 0.5;
    assert_int_equal(ks_retry_delay_ms(&r, 1, 0.5), 75);
    assert_int_equal(ks_retry_parse_list(&r, "", err, sizeof(err)), 0);
    assert_int_equal(r.list_cnt, 0);
}

static void test_list_errors_name_the_entry(void **state)
{
    (void)state;
    char err[256];
    ks_retry_t r = {0};
    assert_int_equal(ks_retry_parse_list(&r, "100,soon", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "entry 2"));
    assert_int_equal(ks_retry_parse_list(&r, "100;200", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not a comma"));
    assert_int_equal(ks_retry_parse_list(&r, "-1", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "entry 1"));
    assert_int_equal(ks_retry_parse_list(&r, "100,", err, sizeof(err)), -1);
    char many[400] = "1";
    for (int i = 0; i < KS_RETRY_LIST_MAX; i++)
        strcat(many, ",1");
    assert_int_equal(ks_retry_parse_list(&r, many, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "at most"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_policy_is_no_delay),
        cmocka_unit_test(test_exponential_to_the_cap),
        cmocka_unit_test(test_jitter_stays_within_its_bounds),
        cmocka_unit_test(test_list_form_last_entry_repeats),
        cmocka_unit_test(test_list_errors_name_the_entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
