/* Unit tests for proxy/otel.c: the traceparent's parsing and writing, a record's context, the
 * derived ids, the setup's errors and the sampler. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "otel.h"

static const char TP[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

static void test_traceparent_round_trip(void **state)
{
    (void)state;
    uint8_t trace[16], parent[8], flags = 0;
    assert_true(ks_otel_traceparent_parse(TP, strlen(TP), trace, parent, &flags));
    assert_int_equal(trace[0], 0x4b);
    assert_int_equal(parent[7], 0xb7);
    assert_int_equal(flags, 1);
    char out[56];
    ks_otel_traceparent(out, trace, parent, flags);
    assert_memory_equal(out, TP, 55);
    assert_false(ks_otel_traceparent_parse(TP, 54, trace, parent, &flags));
    static const char zero[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
    assert_false(ks_otel_traceparent_parse(zero, 55, trace, parent, &flags));
}

static void test_context_needs_exactly_one(void **state)
{
    (void)state;
    ks_header_t hs[] = {{.name = "app", .value = "x", .value_len = 1},
                        {.name = "traceparent", .value = TP, .value_len = 55},
                        {.name = "TraceParent", .value = TP, .value_len = 55}};
    uint8_t trace[16], parent[8], flags;
    assert_true(ks_otel_context(hs, 2, trace, parent, &flags));
    assert_false(ks_otel_context(hs, 3, trace, parent, &flags)); /* two: none */
    assert_false(ks_otel_context(hs, 1, trace, parent, &flags));
}

static void test_ids_are_derived_and_never_zero(void **state)
{
    (void)state;
    uint8_t t1[16], s1[8], t2[16], s2[8];
    ks_otel_ids(42, t1, s1);
    ks_otel_ids(42, t2, s2);
    assert_memory_equal(t1, t2, 16);
    assert_memory_equal(s1, s2, 8);
    ks_otel_ids(43, t2, s2);
    assert_memory_not_equal(s1, s2, 8);
    ks_otel_ids(0, t1, s1);
    assert_true(s1[0] & 1);
    assert_true(t1[15] & 1);
}

static void test_setup_errors_and_sampler(void **state)
{
    (void)state;
    ks_config_t cfg = {0};
    char err[256] = "";
    char *off[] = {(char[]){"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1"},
                   (char[]){"OTEL_SDK_DISABLED=true"}, NULL};
    assert_int_equal(ks_otel_start(&cfg, off, err, sizeof(err)), 0);
    assert_false(ks_otel_on);
    char *none[] = {NULL};
    assert_int_equal(ks_otel_start(&cfg, none, err, sizeof(err)), 0);
    assert_false(ks_otel_on);
    char *bad_url[] = {(char[]){"OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4318"}, NULL};
    assert_int_equal(ks_otel_start(&cfg, bad_url, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "otel.endpoint"));
    char *bad_proto[] = {(char[]){"OTEL_EXPORTER_OTLP_ENDPOINT=http://h"},
                         (char[]){"OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, NULL};
    assert_int_equal(ks_otel_start(&cfg, bad_proto, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "otel.protocol"));
    char *ratio[] = {(char[]){"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1"},
                     (char[]){"OTEL_TRACES_SAMPLER=parentbased_traceidratio"},
                     (char[]){"OTEL_TRACES_SAMPLER_ARG=0.25"}, NULL};
    assert_int_equal(ks_otel_start(&cfg, ratio, err, sizeof(err)), 0);
    assert_true(ks_otel_on);
    uint8_t trace[16];
    /* with a parent, its flag decides */
    assert_true(ks_otel_sampled(trace, true, 1));
    assert_false(ks_otel_sampled(trace, true, 0));
    /* without, the ratio of the trace ids' last 8 bytes: about a quarter of them */
    int on = 0;
    for (uint64_t i = 0; i < 4000; i++) {
        uint8_t span[8];
        ks_otel_ids(i, trace, span);
        on += ks_otel_sampled(trace, false, 0);
    }
    assert_in_range(on, 800, 1200);
    ks_otel_stop(0);
    assert_false(ks_otel_on);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traceparent_round_trip),
        cmocka_unit_test(test_context_needs_exactly_one),
        cmocka_unit_test(test_ids_are_derived_and_never_zero),
        cmocka_unit_test(test_setup_errors_and_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
