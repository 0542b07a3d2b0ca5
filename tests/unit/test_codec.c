/* test_codec.c: tests the record codec (codec/codec.c, codec/fmt_bytes.c, codec/codec_fmt.c):
 * a record's JSON read back with jansson in each format, the format table, the bytes view a
 * binary transport takes, and a one-record push's header lines. */
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

#include "codec.h"

static ks_header_t hdrs[] = {
    {.name = "trace", .value = "t1", .value_len = 2},
    {.name = "bin", .value = "\xff\x00", .value_len = 2},
    {.name = "nul", .value = NULL},
};

static ks_record_t record(void)
{
    return (ks_record_t){.topic = "orders",
                         .partition = 3,
                         .offset = 42,
                         .timestamp = 1700000000123,
                         .key = "k\xc3\xa9",
                         .key_len = 3,
                         .value = "\x00\x01\xfe",
                         .value_len = 3,
                         .headers = hdrs,
                         .header_cnt = 3,
                         .ack_instance = 7,
                         .ack_group_hash = 9,
                         .ack_epoch = 2,
                         .attempt = 3,
                         .ordering_chain = 18446744073709551615u};
}

/* r as JSON in opts o, parsed back. */
static json_t *render(const ks_record_t *r, const ks_codec_opts_t *o)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 16);
    ks_ack_id_writer_t w;
    ks_ack_id_writer_init(&w);
    ks_codec_json_record(&b, r, o, &w);
    json_error_t err;
    json_t *j = json_loadb(b.p, b.len, 0, &err);
    if (!j)
        fail_msg("not JSON: %s (%s)", b.p, err.text);
    ks_jbuf_free(&b);
    return j;
}

static const char *str(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    assert_true(json_is_string(v));
    return json_string_value(v);
}

static void test_json_auto(void **state)
{
    (void)state;
    ks_record_t r = record();
    json_t *j = render(&r, NULL);
    assert_string_equal(str(j, "topic"), "orders");
    assert_int_equal(json_integer_value(json_object_get(j, "partition")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "offset")), 42);
    assert_int_equal(json_integer_value(json_object_get(j, "timestamp")), 1700000000123);
    assert_string_equal(str(j, "key"), "k\xc3\xa9"); /* UTF-8: text */
    assert_string_equal(str(j, "key_encoding"), "text");
    assert_string_equal(str(j, "value"), "AAH+"); /* not UTF-8: base64 */
    assert_string_equal(str(j, "value_encoding"), "base64");
    json_t *h = json_object_get(j, "headers");
    assert_int_equal(json_array_size(h), 3);
    assert_string_equal(str(json_array_get(h, 0), "value"), "t1");
    assert_string_equal(str(json_array_get(h, 1), "value_encoding"), "base64");
    assert_true(json_is_null(json_object_get(json_array_get(h, 2), "value")));
    assert_null(json_object_get(json_array_get(h, 2), "value_encoding"));
    char id[KS_ACK_ID_MAX];
    id[ks_record_ack_id(&r, id, sizeof(id))] = '\0';
    assert_string_equal(str(j, "ack_id"), id);
    assert_int_equal(json_integer_value(json_object_get(j, "attempt")), 3);
    assert_string_equal(str(j, "ordering_chain"), "18446744073709551615");
    json_decref(j);

    /* null key and value, unknown timestamp, no chain */
    r.key = r.value = NULL;
    r.timestamp = -1;
    r.ordering_chain = 0;
    j = render(&r, NULL);
    assert_true(json_is_null(json_object_get(j, "key")));
    assert_null(json_object_get(j, "key_encoding"));
    assert_true(json_is_null(json_object_get(j, "value")));
    assert_true(json_is_null(json_object_get(j, "timestamp")));
    assert_null(json_object_get(j, "ordering_chain"));
    json_decref(j);
}

static void test_json_formats(void **state)
{
    (void)state;
    ks_record_t r = record();
    const ks_codec_fmt_t *b64 = ks_codec_fmt_find("base64");
    assert_non_null(b64);
    /* base64 for every part */
    ks_codec_opts_t all = {.key = b64, .value = b64, .header = b64};
    json_t *j = render(&r, &all);
    assert_string_equal(str(j, "key"), "a8Op");
    assert_string_equal(str(j, "key_encoding"), "base64");
    assert_string_equal(str(json_array_get(json_object_get(j, "headers"), 0), "value"), "dDE=");
    json_decref(j);
    /* each part its own: the key base64, the rest the default */
    ks_codec_opts_t key_only = {.key = b64};
    j = render(&r, &key_only);
    assert_string_equal(str(j, "key_encoding"), "base64");
    assert_string_equal(str(json_array_get(json_object_get(j, "headers"), 0), "value_encoding"),
                        "text");
    json_decref(j);
    /* text is auto by another name */
    ks_codec_opts_t text = {.value = ks_codec_fmt_find("text")};
    j = render(&r, &text);
    assert_string_equal(str(j, "value_encoding"), "base64");
    json_decref(j);
}

static void test_fmt_table(void **state)
{
    (void)state;
    assert_ptr_equal(ks_codec_fmt_find("auto"), &ks_codec_fmt_auto);
    assert_string_equal(ks_codec_fmt_find("text")->name, "text");
    assert_null(ks_codec_fmt_find("avro"));
    assert_null(ks_codec_fmt_find(""));
    assert_null(ks_codec_fmt_find("AUTO"));
    char names[64];
    assert_string_equal(ks_codec_fmt_names(names, sizeof(names)), "auto, text or base64");
    char tiny[8];
    ks_codec_fmt_names(tiny, sizeof(tiny)); /* cut, still a string */
    assert_true(strlen(tiny) < sizeof(tiny));
}

/* A format whose bytes are the data with a prefix, and one that refuses: what a schema
 * format's row does for a binary transport. */
static char shown[64];
static bool bytes_tag(const void *data, size_t len, const void **out, size_t *out_len)
{
    int n = snprintf(shown, sizeof(shown), "<%.*s>", (int)len, (const char *)data);
    *out = shown;
    *out_len = (size_t)n;
    return true;
}
static bool bytes_refuse(const void *data, size_t len, const void **out, size_t *out_len)
{
    (void)data, (void)len, (void)out, (void)out_len;
    return false;
}

static void test_view(void **state)
{
    (void)state;
    ks_record_t r = record();
    ks_codec_view_t v;
    ks_codec_view(&r, NULL, &v);
    assert_ptr_equal(v.key, r.key);
    assert_int_equal(v.value_len, 3);
    ks_codec_opts_t bytes = {.key = &ks_codec_fmt_auto, .value = ks_codec_fmt_find("base64")};
    ks_codec_view(&r, &bytes, &v); /* the byte formats show the bytes as they are */
    assert_ptr_equal(v.value, r.value);
    ks_codec_fmt_t tag = {.name = "tag", .bytes = bytes_tag};
    ks_codec_fmt_t refuse = {.name = "refuse", .bytes = bytes_refuse};
    ks_codec_opts_t o = {.value = &tag, .key = &refuse};
    r.value = "abc";
    r.value_len = 3;
    ks_codec_view(&r, &o, &v);
    assert_int_equal(v.value_len, 5);
    assert_memory_equal(v.value, "<abc>", 5);
    assert_ptr_equal(v.key, r.key); /* refused: the record's own bytes */
    assert_int_equal(v.key_len, r.key_len);
    r.value = NULL; /* a tombstone stays one */
    ks_codec_view(&r, &o, &v);
    assert_null(v.value);
}

/* Collects header lines, one string per line, "|"-joined. */
static void collect(void *ctx, const char *line, size_t len)
{
    char *out = ctx;
    assert_int_equal(strlen(line), len);
    if (*out)
        strcat(out, "|");
    strcat(out, line);
}

static void test_push_headers(void **state)
{
    (void)state;
    ks_record_t r = record();
    char lines[4096] = "";
    ks_codec_push_headers(collect, lines, &r, "id-1");
    assert_string_equal(lines, "ksidecar-topic: orders|ksidecar-partition: 3|ksidecar-offset: 42|"
                               "ksidecar-timestamp: 1700000000123|ksidecar-attempt: 3|"
                               "ksidecar-ack-id: id-1|ksidecar-key: k%C3%A9|"
                               "ksidecar-header-trace: t1|ksidecar-header-bin: %FF%00|"
                               "ksidecar-header-nul: ");
    lines[0] = '\0';
    ks_codec_header_num(collect, lines, "n", -9223372036854775807 - 1);
    assert_string_equal(lines, "n: -9223372036854775808");
    /* a value longer than the stack line goes through the heap */
    char big[600];
    memset(big, '%', sizeof(big));
    char *out = calloc(1, 4096);
    ks_codec_header(collect, out, "x", big, sizeof(big));
    assert_int_equal(strlen(out), 3 + 3 * sizeof(big));
    free(out);
}

static void test_trace_context(void **state)
{
    (void)state;
    static const char tp[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    assert_true(ks_codec_traceparent_ok(tp, strlen(tp)));
    const char *bad[] = {
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",    /* short */
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* another version */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   /* upper case */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   /* zero parent id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",   /* separator */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",   /* flags */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r", /* a byte more */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(ks_codec_traceparent_ok(bad[i], strlen(bad[i])));
    ks_record_t r = record();
    ks_header_t hs[] = {{.name = "baggage", .value = "user=a%20b, k=v", .value_len = 15},
                        {.name = "traceparent", .value = tp, .value_len = sizeof(tp) - 1},
                        {.name = "tracestate", .value = "congo=t61rcWkgMzE", .value_len = 17}};
    r.headers = hs;
    r.header_cnt = 3;
    char lines[4096] = "";
    ks_codec_push_headers(collect, lines, &r, "i");
    const char *own = strstr(lines, "|traceparent");
    assert_non_null(own);
    assert_string_equal(own, "|traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                             "|baggage: user=a%20b, k=v|tracestate: congo=t61rcWkgMzE");
    assert_non_null(strstr(lines, "|ksidecar-header-baggage: user=a%2520b,%20k=v|"));
    /* a bad traceparent, and tracestate with it, stay only as ksidecar-header-NAME */
    hs[1].value = bad[2];
    hs[1].value_len = strlen(bad[2]);
    lines[0] = '\0';
    ks_codec_push_headers(collect, lines, &r, "i");
    assert_null(strstr(lines, "|traceparent"));
    assert_null(strstr(lines, "|tracestate"));
    assert_non_null(strstr(lines, "|baggage: user=a%20b, k=v"));
    /* two traceparents are none; a baggage with a line break stays escaped */
    hs[1] = (ks_header_t){.name = "Traceparent", .value = tp, .value_len = sizeof(tp) - 1};
    hs[2] = hs[1];
    hs[0].value = "a=1\r\nx: y";
    hs[0].value_len = 10;
    lines[0] = '\0';
    ks_codec_push_headers(collect, lines, &r, "i");
    assert_null(strstr(lines, "|traceparent"));
    assert_null(strstr(lines, "|baggage"));
    assert_non_null(strstr(lines, "|ksidecar-header-baggage: a=1%0D%0Ax:%20y"));
    /* one, named in another case, is written lower-case */
    r.header_cnt = 2;
    lines[0] = '\0';
    ks_codec_push_headers(collect, lines, &r, "i");
    assert_non_null(strstr(lines, "|traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-"));
}

static void test_cloudevents(void **state)
{
    (void)state;
    ks_record_t r = record();
    char lines[4096] = "";
    ks_codec_cloudevent_headers(collect, lines, &r, "g");
    assert_string_equal(lines,
                        "ce-specversion: 1.0|ce-id: orders-3-42|ce-source: /ksidecar/g/orders|"
                        "ce-type: ksidecar.kafka.record|ce-time: 2023-11-14T22:13:20.123Z");
    /* a record that is a CloudEvent already carries its own attributes */
    ks_header_t ce[] = {{.name = "ce_specversion", .value = "1.0", .value_len = 3},
                        {.name = "ce_id", .value = "e1", .value_len = 2},
                        {.name = "ce_Bad", .value = "x", .value_len = 1}};
    r.headers = ce;
    r.header_cnt = 3;
    lines[0] = '\0';
    ks_codec_cloudevent_headers(collect, lines, &r, "g");
    assert_string_equal(lines, "ce-specversion: 1.0|ce-id: e1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_auto),     cmocka_unit_test(test_json_formats),
        cmocka_unit_test(test_fmt_table),     cmocka_unit_test(test_view),
        cmocka_unit_test(test_push_headers),  cmocka_unit_test(test_cloudevents),
        cmocka_unit_test(test_trace_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
