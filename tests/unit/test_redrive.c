/* test_redrive.c: the dead-letter redrive's header rules: the redriven count, what a dead
 * letter's headers say, and the headers a redriven record carries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "redrive.h"

static ks_header_t hdr(const char *name, const char *value)
{
    return (ks_header_t){.name = name, .value = value, .value_len = value ? strlen(value) : 0};
}

static void test_count(void **state)
{
    (void)state;
    assert_int_equal(ks_redrive_parse_count("0", 1), 0);
    assert_int_equal(ks_redrive_parse_count("3", 1), 3);
    assert_int_equal(ks_redrive_parse_count("2147483647", 10), INT32_MAX);
    assert_int_equal(ks_redrive_parse_count("2147483648", 10), -1);
    assert_int_equal(ks_redrive_parse_count("12", 1), 1); /* only len bytes count */
    assert_int_equal(ks_redrive_parse_count("", 0), -1);
    assert_int_equal(ks_redrive_parse_count(NULL, 0), -1);
    assert_int_equal(ks_redrive_parse_count("-1", 2), -1);
    assert_int_equal(ks_redrive_parse_count(" 1", 2), -1);
    assert_int_equal(ks_redrive_parse_count("1x", 2), -1);
    assert_int_equal(ks_redrive_parse_count("00000000001", 11), -1);
}

static void test_meta(void **state)
{
    (void)state;
    ks_redrive_meta_t m;
    ks_redrive_meta_read(NULL, 0, &m);
    assert_false(m.has_topic);
    assert_int_equal(m.partition, -1);
    assert_int_equal(m.redriven, 0);

    ks_header_t hs[] = {hdr("app", "x"), hdr(KS_HDR_ORIG_TOPIC, "orders"),
                        hdr(KS_HDR_ORIG_PART, "2"), hdr("ksidecar.attempts", "5"),
                        hdr(KS_HDR_REDRIVEN, "1")};
    ks_redrive_meta_read(hs, 5, &m);
    assert_true(m.has_topic && m.topic_ok);
    assert_string_equal(m.topic, "orders");
    assert_int_equal(m.partition, 2);
    assert_int_equal(m.redriven, 1);

    ks_header_t bad[] = {hdr(KS_HDR_ORIG_TOPIC, "no spaces"), hdr(KS_HDR_ORIG_PART, "-1"),
                         hdr(KS_HDR_REDRIVEN, "one")};
    ks_redrive_meta_read(bad, 3, &m);
    assert_true(m.has_topic);
    assert_false(m.topic_ok);
    assert_string_equal(m.topic, "");
    assert_int_equal(m.partition, -1);
    assert_int_equal(m.redriven, -1);

    ks_header_t empty[] = {hdr(KS_HDR_ORIG_TOPIC, NULL)};
    ks_redrive_meta_read(empty, 1, &m);
    assert_true(m.has_topic);
    assert_false(m.topic_ok);

    /* A NUL inside the value is not cut short into another name. */
    ks_header_t nul[] = {{.name = KS_HDR_ORIG_TOPIC, .value = "ab\0cd", .value_len = 5}};
    ks_redrive_meta_read(nul, 1, &m);
    assert_false(m.topic_ok);
}

static void test_headers(void **state)
{
    (void)state;
    ks_header_t in[] = {hdr("trace", "t1"),
                        hdr(KS_HDR_ORIG_TOPIC, "orders"),
                        hdr(KS_HDR_ORIG_PART, "0"),
                        hdr("ksidecar.last_error", "boom"),
                        hdr(KS_HDR_REDRIVEN, "1"),
                        hdr("user", NULL),
                        hdr("ksidecarish", "kept: not the prefix")};
    ks_header_t out[8];
    char buf[KS_REDRIVE_COUNT_BUF];
    size_t n = ks_redrive_headers(in, 7, 2, buf, out);
    assert_int_equal(n, 4);
    assert_string_equal(out[0].name, "trace");
    assert_memory_equal(out[0].value, "t1", 2);
    assert_string_equal(out[1].name, "user");
    assert_null(out[1].value);
    assert_string_equal(out[2].name, "ksidecarish");
    assert_string_equal(out[3].name, KS_HDR_REDRIVEN);
    assert_int_equal(out[3].value_len, 1);
    assert_memory_equal(out[3].value, "2", 1);

    n = ks_redrive_headers(NULL, 0, INT32_MAX, buf, out);
    assert_int_equal(n, 1);
    assert_string_equal(buf, "2147483647");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count),
        cmocka_unit_test(test_meta),
        cmocka_unit_test(test_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
