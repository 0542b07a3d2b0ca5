/* test_json_out.c: tests the HTTP edge's JSON writer (codec/json_out.c), partly against
 * jansson as the reference: what it calls UTF-8 and how its parser reads our output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_out.h"

/* Writes s as a JSON string and reads it back with jansson; checks the bytes survive. */
static void round_trip(const char *s, size_t n)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 8);
    ks_jbuf_lit(&b, "[");
    assert_true(ks_jbuf_str(&b, s, n));
    ks_jbuf_lit(&b, "]");
    assert_int_equal(strlen(b.p), b.len);
    json_error_t err;
    json_t *root = json_loadb(b.p, b.len, JSON_ALLOW_NUL, &err);
    assert_non_null(root);
    json_t *v = json_array_get(root, 0);
    assert_true(json_is_string(v));
    assert_int_equal(json_string_length(v), n);
    assert_memory_equal(json_string_value(v), s, n);
    json_decref(root);
    ks_jbuf_free(&b);
}

static void test_escapes(void **state)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 1);
    assert_true(ks_jbuf_str(&b, "a\"b\\c\n\r\t\b\f\x01\x1f", 12));
    assert_string_equal(b.p, "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\"");
    ks_jbuf_free(&b);
    round_trip("plain", 5);
    round_trip("", 0);
    round_trip("nul\0inside", 10);
    round_trip("\xe2\x82\xac euro, \xf0\x9f\x98\x80 emoji", 19);
    /* Many escapes in a row grow the buffer from a tiny start. */
    char q[300];
    memset(q, '"', sizeof(q));
    round_trip(q, sizeof(q));
}

/* Every byte that is not written as it is, at every place of strings of every length up to
 * 40 (the escaper tests sixteen bytes at a time, then the sixteen that end the string, and
 * eight at a time below 16): the output escapes it exactly where it is. */
static void test_each_special_byte_at_each_place(void **state)
{
    (void)state;
    static const unsigned char special[] = {0x00, 0x01, 0x1f, '"', '\\', 0x7f, 0x80, 0xc3, 0xe2};
    for (size_t len = 1; len <= 40; len++) {
        for (size_t k = 0; k < sizeof(special); k++) {
            for (size_t at = 0; at < len; at++) {
                char s[41];
                memset(s, 'a', sizeof(s));
                size_t n = len;
                s[at] = (char)special[k];
                bool valid = true;
                if (special[k] == 0xc3 && at + 1 < len) /* a two-byte UTF-8 sequence: é */
                    s[at + 1] = (char)0xa9;
                else if (special[k] >= 0x80) /* a lone continuation or a lead cut short */
                    valid = false;
                if (!valid) {
                    ks_jbuf_t b;
                    ks_jbuf_init(&b, 8);
                    assert_false(ks_jbuf_str(&b, s, n));
                    assert_int_equal(b.len, 0);
                    ks_jbuf_free(&b);
                    continue;
                }
                round_trip(s, n);
                /* The ack-id reader takes the run's end as the id's end. */
                assert_int_equal(ks_json_plain_run(s, n), special[k] == 0x7f ? n : at);
                /* The byte 0x7f and a UTF-8 sequence are written as they are; the others
                 * escaped, so the output is longer than the input quoted. */
                ks_jbuf_t b;
                ks_jbuf_init(&b, 8);
                assert_true(ks_jbuf_str(&b, s, n));
                bool as_is = special[k] == 0x7f || special[k] == 0xc3;
                if (as_is)
                    assert_int_equal(b.len, n + 2);
                else
                    assert_true(b.len > n + 2);
                ks_jbuf_free(&b);
            }
        }
    }
    /* A plain 0x20 and 0x7e at word edges stay plain: the output is the input quoted. */
    ks_jbuf_t b;
    ks_jbuf_init(&b, 8);
    assert_true(ks_jbuf_str(&b, " ~~~~~~~ ~~~~~~~~ ", 18));
    assert_string_equal(b.p, "\" ~~~~~~~ ~~~~~~~~ \"");
    ks_jbuf_free(&b);
}

static void test_invalid_utf8_writes_nothing(void **state)
{
    static const char *bad[] = {
        "\xc0\x80",         /* overlong NUL */
        "\xc1\xbf",         /* overlong */
        "\xe0\x80\xaf",     /* overlong 3-byte */
        "\xed\xa0\x80",     /* surrogate D800 */
        "\xf4\x90\x80\x80", /* above U+10FFFF */
        "\xf5\x80\x80\x80", /* lead byte above F4 */
        "\xe2\x82",         /* truncated */
        "\x80",             /* lone continuation */
        "ok\xff",           /* invalid after ASCII */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ks_jbuf_t b;
        ks_jbuf_init(&b, 4);
        ks_jbuf_lit(&b, "x");
        assert_false(ks_jbuf_str(&b, bad[i], strlen(bad[i])));
        assert_int_equal(b.len, 1);
        assert_string_equal(b.p, "x");
        assert_false(ks_utf8_valid(bad[i], strlen(bad[i])));
        ks_jbuf_free(&b);
    }
}

/* Random short byte strings: our UTF-8 verdict matches jansson's, and every valid one
 * round-trips. */
static void test_utf8_agrees_with_jansson(void **state)
{
    srand(7);
    static const unsigned char pool[] = {'a',  '"',  '\\', 0x00, 0x1f, 0x7f, 0x80, 0xbf,
                                         0xc2, 0xc0, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4,
                                         0xf5, 0xff, 0xa0, 0x9f, 0x90, 0x8f};
    int valid = 0;
    for (int iter = 0; iter < 200000; iter++) {
        unsigned char s[6];
        size_t n = (size_t)(rand() % 6);
        for (size_t i = 0; i < n; i++)
            s[i] = pool[rand() % (int)sizeof(pool)];
        json_t *ref = json_stringn((const char *)s, n);
        assert_int_equal(ks_utf8_valid((const char *)s, n), ref != NULL);
        if (ref) {
            valid++;
            round_trip((const char *)s, n);
        }
        json_decref(ref);
    }
    assert_true(valid > 1000); /* the pool makes both kinds common */
}

/* What ks_jbuf_b64 writes decodes back; anything else is refused. */
static void test_base64_decode(void **state)
{
    const struct {
        const char *in, *out;
        size_t len;
    } ok[] = {{"", "", 0},
              {"/zA=",
               "\xff"
               "0",
               2},
              {"YQ==", "a", 1},
              {"YWJj", "abc", 3},
              {"AAE=", "\0\1", 2}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        size_t n = 99;
        unsigned char *d = ks_b64_decode(ok[i].in, strlen(ok[i].in), &n);
        assert_non_null(d);
        assert_int_equal(n, ok[i].len);
        assert_memory_equal(d, ok[i].out, n);
        free(d);
    }
    const char *bad[] = {"YQ", "YQ=", "Y===", "YQ=a", "Y Q=", "YQ==YQ==", "a\nbc", "ab-_", "*AAA"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n;
        assert_null(ks_b64_decode(bad[i], strlen(bad[i]), &n));
    }
}

static void test_ints_and_base64(void **state)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 2);
    ks_jbuf_int(&b, 0);
    ks_jbuf_lit(&b, ",");
    ks_jbuf_int(&b, -42);
    ks_jbuf_lit(&b, ",");
    ks_jbuf_int(&b, INT64_MAX);
    ks_jbuf_lit(&b, ",");
    ks_jbuf_int(&b, INT64_MIN);
    ks_jbuf_lit(&b, ",");
    ks_jbuf_b64(&b,
                "\xff"
                "0",
                2);
    ks_jbuf_lit(&b, ",");
    ks_jbuf_b64(&b, "", 0);
    assert_string_equal(b.p, "0,-42,9223372036854775807,-9223372036854775808,\"/zA=\",\"\"");
    ks_jbuf_free(&b);
    /* Every count of digits, at both sides of each power of ten, against printf. */
    ks_jbuf_init(&b, 2);
    char want[2048];
    size_t wl = 0;
    int64_t p = 1;
    for (int i = 0; i < 19; i++, p = i < 19 ? p * 10 : p) {
        int64_t vs[] = {p - 1, p, p + 1, -(p - 1), -p, 7 * p + 3};
        for (size_t j = 0; j < sizeof(vs) / sizeof(vs[0]); j++) {
            ks_jbuf_int(&b, vs[j]);
            ks_jbuf_lit(&b, ",");
            wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "%lld,", (long long)vs[j]);
        }
    }
    assert_string_equal(b.p, want);
    ks_jbuf_free(&b);
    ks_jbuf_init(&b, 2);
    ks_jbuf_int(&b, 0);
    size_t n;
    char *t = ks_jbuf_take(&b, &n);
    assert_int_equal(n, strlen(t));
    assert_null(b.p);
    free(t);
}

/* ks_jbuf_double's text for v by snprintf alone: %.15g when it reads back as v, else %.17g,
 * with ".0" when that leaves an integer (what it wrote before its decimal fast path). */
static void double_by_printf(char *s, size_t size, double v)
{
    int n = snprintf(s, size, "%.15g", v);
    if (strtod(s, NULL) != v)
        n = snprintf(s, size, "%.17g", v);
    if (!strpbrk(s, ".eE"))
        snprintf(s + n, size - (size_t)n, ".0");
}

static void expect_double(double v)
{
    char want[48];
    double_by_printf(want, sizeof(want), v);
    ks_jbuf_t b;
    ks_jbuf_init(&b, 2);
    ks_jbuf_double(&b, v);
    if (strcmp(b.p, want))
        fail_msg("%.17g: wrote %s, want %s", v, b.p, want);
    assert_true(strtod(b.p, NULL) == v || (v != v));
    ks_jbuf_free(&b);
}

/* Reals: the same text as printf's, with the fast path for short decimals (prices, whole
 * numbers) and without it (a third, 0.1 + 0.2, exponents, the ends of its range). */
static void test_doubles(void **state)
{
    (void)state;
    static const double fixed[] = {0.0,
                                   -0.0,
                                   1.0,
                                   -1.0,
                                   0.5,
                                   0.1,
                                   0.2,
                                   0.1 + 0.2,
                                   1.0 / 3,
                                   22.99,
                                   -22.99,
                                   19.99 + 3,
                                   1e-4,
                                   1.5e-4,
                                   9.9999e-5,
                                   1e-5,
                                   99999999999.9999,
                                   1e11,
                                   1e11 - 1,
                                   1e15,
                                   1e16,
                                   1e300,
                                   5e-324,
                                   123456.789,
                                   0.0625,
                                   4503599627370496.5,
                                   9007199254740993.0};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        expect_double(fixed[i]);
    /* Every decimal of up to 4 fraction digits around several magnitudes, and doubles that
     * are not decimals (sums, products, a pseudo-random walk over bit patterns). */
    for (int64_t m = -30000; m <= 30000; m += 7)
        for (int k = 0; k <= 5; k++) {
            double p = k == 0 ? 1 : k == 1 ? 10 : k == 2 ? 100 : k == 3 ? 1000 : k == 4 ? 1e4 : 1e5;
            expect_double((double)m / p);
            expect_double((double)m * 31337.0 / p);
            expect_double((double)m / p + 0.1);
        }
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof(d));
        if (d == d && d - d == 0) /* finite */
            expect_double(d);
        expect_double((double)(x % 100000000000ULL) / 10000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_invalid_utf8_writes_nothing),
        cmocka_unit_test(test_utf8_agrees_with_jansson),
        cmocka_unit_test(test_each_special_byte_at_each_place),
        cmocka_unit_test(test_ints_and_base64),
        cmocka_unit_test(test_base64_decode),
        cmocka_unit_test(test_doubles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
