/* test_avro_json.c: tests Avro binary to JSON (codec/avro_json.c) on values the test encodes
 * with avro-c itself, read back with jansson: every type, both JSON forms, a recursive schema,
 * the wire format with a registry's schema object, and every way bytes can fail to decode
 * (each prefix of a valid value, bad indexes and lengths, text that is not UTF-8, nesting and
 * empty items past their bounds, bytes left over). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <avro.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "avro_json.h"

#include "assert_contains.h"
#include "order_schema.h"

/* Every type, with a null field and an enum in a namespace of its own. */
static const char ORDER[] =
    ORDER_SCHEMA("{\"name\":\"nothing\",\"type\":\"null\"},",
                 "  {\"name\":\"vip\",\"type\":[\"null\",{\"type\":\"enum\",\"name\":\"Tier\","
                 "   \"namespace\":\"com.acme.t\",\"symbols\":[\"GOLD\",\"SILVER\"]}]}");

static avro_schema_t parse_schema(const char *text)
{
    avro_schema_t s;
    if (avro_schema_from_json_length(text, strlen(text), &s))
        fail_msg("avro-c: %s", avro_strerror());
    return s;
}

static void field(avro_value_t *rec, const char *name, avro_value_t *out)
{
    if (avro_value_get_by_name(rec, name, out, NULL))
        fail_msg("no field %s: %s", name, avro_strerror());
}

/* Fills an Order; with variant 1 the unions take their other branches. */
static void fill_order(avro_value_t *v, int variant)
{
    avro_value_t f, br, el, sub;
    field(v, "id", &f);
    avro_value_set_long(&f, variant ? INT64_MIN : 9007199254740993LL);
    field(v, "qty", &f);
    avro_value_set_int(&f, variant ? INT32_MIN : -42);
    field(v, "price", &f);
    avro_value_set_double(&f, variant ? 1e300 : 19.99);
    field(v, "ratio", &f);
    avro_value_set_float(&f, variant ? -0.0f : 0.1f);
    field(v, "paid", &f);
    avro_value_set_boolean(&f, !variant);
    field(v, "nothing", &f);
    avro_value_set_null(&f);
    field(v, "note", &f);
    avro_value_set_string(&f, variant ? "" : "caf\xc3\xa9 \"quoted\"\n\xf0\x9f\x8d\xb5");
    field(v, "maybe", &f);
    if (variant) {
        avro_value_set_branch(&f, 0, &br);
        avro_value_set_null(&br);
    } else {
        avro_value_set_branch(&f, 1, &br);
        avro_value_set_string(&br, "yes");
    }
    field(v, "either", &f);
    if (variant) {
        avro_value_set_branch(&f, 2, &br);
        for (int i = 0; i < 3; i++) {
            avro_value_append(&br, &el, NULL);
            avro_value_set_long(&el, (int64_t)i * 1000000000000LL);
        }
    } else {
        avro_value_set_branch(&f, 0, &br);
        avro_value_set_int(&br, 7);
    }
    field(v, "customer", &f);
    field(&f, "name", &sub);
    avro_value_set_string(&sub, "Ada");
    field(&f, "vip", &sub);
    avro_value_set_branch(&sub, variant ? 0 : 1, &br);
    if (variant)
        avro_value_set_null(&br);
    else
        avro_value_set_enum(&br, 1);
    field(v, "lines", &f);
    for (int i = 0; i < (variant ? 0 : 2); i++) {
        avro_value_append(&f, &el, NULL);
        field(&el, "sku", &sub);
        avro_value_set_string(&sub, i ? "B-2" : "A-1");
        field(&el, "n", &sub);
        avro_value_set_int(&sub, i + 1);
    }
    field(v, "tags", &f);
    if (!variant) {
        avro_value_add(&f, "a", &el, NULL, NULL);
        avro_value_set_long(&el, 1);
        avro_value_add(&f, "b\xc3\xa9", &el, NULL, NULL);
        avro_value_set_long(&el, -2);
    }
    field(v, "status", &f);
    avro_value_set_enum(&f, variant ? 0 : 2);
    field(v, "blob", &f);
    static char blob[] = {0, 'a', '"', '\\', (char)0x7f, (char)0x80, (char)0xff};
    avro_value_set_bytes(&f, blob, variant ? 0 : sizeof(blob));
    field(v, "hash", &f);
    static char h4[] = {(char)0xde, (char)0xad, 0x01, 0x20};
    avro_value_set_fixed(&f, h4, 4);
    field(v, "ref", &f);
    avro_value_set_branch(&f, variant ? 1 : 0, &br);
    if (variant) {
        field(&br, "name", &sub);
        avro_value_set_string(&sub, "Bob");
        field(&br, "vip", &sub);
        avro_value_set_branch(&sub, 1, &el);
        avro_value_set_enum(&el, 0);
    } else {
        avro_value_set_null(&br);
    }
}

/* Encodes a value of schema text filled by fill, with avro-c, into buf; returns its length. */
static size_t encode(const char *text, void (*fill)(avro_value_t *, int), int variant, char *buf,
                     size_t size)
{
    avro_schema_t s = parse_schema(text);
    avro_value_iface_t *iface = avro_generic_class_from_schema(s);
    avro_value_t v;
    assert_int_equal(avro_generic_value_new(iface, &v), 0);
    fill(&v, variant);
    avro_writer_t w = avro_writer_memory(buf, (int64_t)size);
    if (avro_value_write(w, &v))
        fail_msg("avro-c write: %s", avro_strerror());
    size_t n = (size_t)avro_writer_tell(w);
    avro_writer_free(w);
    avro_value_decref(&v);
    avro_value_iface_decref(iface);
    avro_schema_decref(s);
    return n;
}

static ks_avro_t *compile(const char *text)
{
    char err[256];
    ks_avro_t *a = ks_avro_new(text, strlen(text), err, sizeof(err));
    if (!a)
        fail_msg("ks_avro_new: %s", err);
    return a;
}

/* Decodes and parses the JSON back. */
static json_t *decode_json(const ks_avro_t *a, const char *buf, size_t n, ks_avro_form_t form)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 8);
    char err[256];
    if (ks_avro_decode(a, buf, n, form, &b, err, sizeof(err)))
        fail_msg("decode: %s", err);
    json_error_t je;
    json_t *j = json_loadb(b.p, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j)
        fail_msg("not JSON (%s): %s", je.text, b.p);
    ks_jbuf_free(&b);
    return j;
}

/* The member at path, names joined by '/' (a union's key may hold dots). */
static json_t *get(json_t *o, const char *path)
{
    char key[64];
    const char *dot;
    while ((dot = strchr(path, '/'))) {
        snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
        o = json_object_get(o, key);
        path = dot + 1;
    }
    json_t *v = json_object_get(o, path);
    if (!v)
        fail_msg("no %s", path);
    return v;
}

static void test_every_type(void **state)
{
    (void)state;
    char buf[4096];
    size_t n = encode(ORDER, fill_order, 0, buf, sizeof(buf));
    ks_avro_t *a = compile(ORDER);
    json_t *j = decode_json(a, buf, n, KS_AVRO_JSON_AVRO);
    assert_int_equal(json_object_size(j), 16);
    assert_true(json_integer_value(get(j, "id")) == 9007199254740993LL);
    assert_int_equal(json_integer_value(get(j, "qty")), -42);
    assert_true(json_is_real(get(j, "price")));
    assert_true(json_real_value(get(j, "price")) == 19.99);
    assert_true(json_real_value(get(j, "ratio")) == (double)0.1f); /* the float, widened */
    assert_true(json_is_true(get(j, "paid")));
    assert_true(json_is_null(get(j, "nothing")));
    assert_string_equal(json_string_value(get(j, "note")),
                        "caf\xc3\xa9 \"quoted\"\n\xf0\x9f\x8d\xb5");
    assert_string_equal(json_string_value(get(j, "maybe/string")), "yes");
    assert_int_equal(json_integer_value(get(j, "either/int")), 7);
    assert_string_equal(json_string_value(get(j, "customer/name")), "Ada");
    assert_string_equal(json_string_value(get(j, "customer/vip/com.acme.t.Tier")), "SILVER");
    json_t *lines = get(j, "lines");
    assert_int_equal(json_array_size(lines), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(lines, 1), "sku")), "B-2");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(lines, 1), "n")), 2);
    assert_int_equal(json_integer_value(get(j, "tags/a")), 1);
    assert_int_equal(json_integer_value(json_object_get(get(j, "tags"), "b\xc3\xa9")), -2);
    assert_string_equal(json_string_value(get(j, "status")), "DONE");
    /* bytes: one code point per byte (jansson hands them back as UTF-8). */
    json_t *blob = get(j, "blob");
    assert_int_equal(json_string_length(blob), 9);
    assert_memory_equal(json_string_value(blob), "\0a\"\\\x7f\xc2\x80\xc3\xbf", 9);
    assert_memory_equal(json_string_value(get(j, "hash")), "\xc3\x9e\xc2\xad\x01 ", 6);
    assert_true(json_is_null(get(j, "ref")));
    json_decref(j);
    /* The plain form: unions unwrapped, the rest alike. */
    j = decode_json(a, buf, n, KS_AVRO_JSON_PLAIN);
    assert_string_equal(json_string_value(get(j, "maybe")), "yes");
    assert_int_equal(json_integer_value(get(j, "either")), 7);
    assert_string_equal(json_string_value(get(j, "customer/vip")), "SILVER");
    assert_string_equal(json_string_value(get(j, "status")), "DONE");
    json_decref(j);

    /* The other branches and extremes. */
    n = encode(ORDER, fill_order, 1, buf, sizeof(buf));
    j = decode_json(a, buf, n, KS_AVRO_JSON_AVRO);
    assert_true(json_integer_value(get(j, "id")) == INT64_MIN);
    assert_int_equal(json_integer_value(get(j, "qty")), INT32_MIN);
    assert_true(json_real_value(get(j, "price")) == 1e300);
    assert_true(json_is_real(get(j, "ratio")));
    assert_true(signbit(json_real_value(get(j, "ratio"))));
    assert_true(json_is_false(get(j, "paid")));
    assert_string_equal(json_string_value(get(j, "note")), "");
    assert_true(json_is_null(get(j, "maybe")));
    json_t *arr = get(j, "either/array");
    assert_int_equal(json_array_size(arr), 3);
    assert_true(json_integer_value(json_array_get(arr, 2)) == 2000000000000LL);
    assert_true(json_is_null(get(j, "customer/vip")));
    assert_int_equal(json_array_size(get(j, "lines")), 0);
    assert_int_equal(json_object_size(get(j, "tags")), 0);
    assert_string_equal(json_string_value(get(j, "status")), "NEW");
    assert_int_equal(json_string_length(get(j, "blob")), 0);
    assert_string_equal(json_string_value(get(j, "ref/com.acme.Customer/name")), "Bob");
    assert_string_equal(json_string_value(get(j, "ref/com.acme.Customer/vip/com.acme.t.Tier")),
                        "GOLD");
    json_decref(j);
    j = decode_json(a, buf, n, KS_AVRO_JSON_PLAIN);
    assert_int_equal(json_array_size(get(j, "either")), 3);
    assert_string_equal(json_string_value(get(j, "ref/vip")), "GOLD");
    json_decref(j);
    ks_avro_free(a);
}

/* Doubles JSON lacks, and the shortest text that reads back the same. */
static void fill_doubles(avro_value_t *v, int variant)
{
    avro_value_t el;
    const double d[] = {NAN, INFINITY, -INFINITY, 3.0, 0.1, 1.0 / 3.0, 5e-324, -0.0};
    for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
        avro_value_append(v, &el, NULL);
        avro_value_set_double(&el, d[i]);
    }
}

static void test_doubles(void **state)
{
    (void)state;
    const char *schema = "{\"type\":\"array\",\"items\":\"double\"}";
    char buf[256];
    size_t n = encode(schema, fill_doubles, 0, buf, sizeof(buf));
    ks_avro_t *a = compile(schema);
    ks_jbuf_t b;
    ks_jbuf_init(&b, 8);
    char err[256];
    assert_int_equal(ks_avro_decode(a, buf, n, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)), 0);
    assert_string_equal(b.p, "[\"NaN\",\"Infinity\",\"-Infinity\",3.0,0.1,0.33333333333333331,"
                             "4.94065645841247e-324,-0.0]");
    /* Each reads back to the same double. */
    json_t *j = json_loadb(b.p, b.len, JSON_ALLOW_NUL, NULL);
    assert_true(json_real_value(json_array_get(j, 5)) == 1.0 / 3.0);
    assert_true(json_real_value(json_array_get(j, 6)) == 5e-324);
    assert_true(signbit(json_real_value(json_array_get(j, 7))));
    json_decref(j);
    ks_jbuf_free(&b);
    ks_avro_free(a);
}

/* A primitive schema, the whole value. */
static void fill_string(avro_value_t *v, int variant)
{
    avro_value_set_string(v, "just text");
}

/* A linked list: a recursive record. */
static const char LIST[] =
    "{\"type\":\"record\",\"name\":\"Node\",\"fields\":[{\"name\":\"v\",\"type\":\"int\"},"
    "{\"name\":\"next\",\"type\":[\"null\",\"Node\"]}]}";

static int list_len;

static void fill_list(avro_value_t *root, int variant)
{
    avro_value_t f, br, cur = *root, *v = &cur; /* v walks down; the caller's root stays */
    for (int i = 0; i < list_len; i++) {
        field(v, "v", &f);
        avro_value_set_int(&f, i);
        field(v, "next", &f);
        avro_value_set_branch(&f, 1, &br);
        *v = br;
    }
    field(v, "v", &f);
    avro_value_set_int(&f, list_len);
    field(v, "next", &f);
    avro_value_set_branch(&f, 0, &br);
    avro_value_set_null(&br);
}

static void test_primitive_and_recursive(void **state)
{
    (void)state;
    char buf[4096];
    size_t n = encode("\"string\"", fill_string, 0, buf, sizeof(buf));
    ks_avro_t *a = compile("\"string\"");
    json_t *j = decode_json(a, buf, n, KS_AVRO_JSON_AVRO);
    assert_string_equal(json_string_value(j), "just text");
    json_decref(j);
    ks_avro_free(a);

    a = compile(LIST);
    list_len = 3;
    n = encode(LIST, fill_list, 0, buf, sizeof(buf));
    j = decode_json(a, buf, n, KS_AVRO_JSON_AVRO);
    assert_int_equal(json_integer_value(get(j, "next/Node/next/Node/next/Node/v")), 3);
    assert_true(json_is_null(get(j, "next/Node/next/Node/next/Node/next")));
    json_decref(j);
    j = decode_json(a, buf, n, KS_AVRO_JSON_PLAIN);
    assert_int_equal(json_integer_value(get(j, "next/next/v")), 2);
    json_decref(j);
    /* Nesting has a bound: 2 levels (record, union) an element, 2 more for the last one's
     * null. */
    ks_jbuf_t b;
    ks_jbuf_init(&b, 8);
    char err[256];
    list_len = 62;
    n = encode(LIST, fill_list, 0, buf, sizeof(buf));
    assert_int_equal(ks_avro_decode(a, buf, n, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)), 0);
    list_len = 63;
    n = encode(LIST, fill_list, 0, buf, sizeof(buf));
    b.len = 0;
    assert_int_equal(ks_avro_decode(a, buf, n, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)), -1);
    assert_contains(err, "nested deeper than 128");
    /* Unions are not steps of the path; a long one is cut in its middle. */
    assert_contains(
        err, "(at byte 128, field next.next.next.next...next.next.next.next.next.next.next.next)");
    assert_int_equal(b.len, 0);
    ks_jbuf_free(&b);
    ks_avro_free(a);
}

/* Decoding d[0..n) with a must fail with an error containing want, leaving b as it was. */
static void must_fail(const ks_avro_t *a, const void *d, size_t n, const char *want)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 8);
    ks_jbuf_lit(&b, "[1,");
    char err[256] = "";
    /* An exact-size copy: reading past it is a sanitizer report. */
    char *copy = malloc(n ? n : 1);
    memcpy(copy, d, n);
    assert_int_equal(ks_avro_decode(a, copy, n, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)), -1);
    if (want)
        assert_contains(err, want);
    assert_true(*err);
    assert_string_equal(b.p, "[1,");
    free(copy);
    ks_jbuf_free(&b);
}

static void test_every_prefix_fails(void **state)
{
    (void)state;
    char buf[4096];
    ks_avro_t *a = compile(ORDER);
    for (int variant = 0; variant < 2; variant++) {
        size_t n = encode(ORDER, fill_order, variant, buf, sizeof(buf));
        for (size_t k = 0; k < n; k++)
            must_fail(a, buf, k, "at byte");
        /* ... and a byte too many. */
        buf[n] = 0;
        must_fail(a, buf, n + 1, "1 bytes left after the value");
    }
    ks_avro_free(a);
}

static void test_bad_bytes(void **state)
{
    (void)state;
    ks_avro_t *a = compile(ORDER);
    /* id 1, qty 2, price, ratio, paid 1, note "", maybe: branch 5 of 2. */
    const char head[] = "\x02\x04"
                        "\x00\x00\x00\x00\x00\x00\xf0\x3f"
                        "\x00\x00\x80\x3f"
                        "\x01"
                        "\x00";
    char b[64];
    memcpy(b, head, sizeof(head) - 1);
    b[sizeof(head) - 1] = 0x0a;
    must_fail(a, b, sizeof(head), "union branch 5 of 2 (at byte 17, field maybe)");
    b[sizeof(head) - 1] = 0x01; /* -1 */
    must_fail(a, b, sizeof(head), "union branch -1 of 2");
    /* paid: a boolean byte 2. */
    memcpy(b, head, sizeof(head) - 1);
    b[14] = 2;
    must_fail(a, b, sizeof(head) - 1, "a boolean byte 0x02, not 0 or 1 (at byte 14, field paid)");
    /* note: a string longer than what is left; one of negative length; one not UTF-8. */
    memcpy(b, head, sizeof(head) - 1);
    b[15] = 0x7e;
    must_fail(a, b, 16, "a string of 63 bytes, 0 left (at byte 16, field note)");
    b[15] = 0x03;
    must_fail(a, b, 16, "a string of negative length -2");
    b[15] = 0x04;
    b[16] = (char)0xc3;
    b[17] = 'x';
    must_fail(a, b, 18, "a string of 2 bytes that is not UTF-8");
    /* id: a varint that never ends, and one past 64 bits. */
    must_fail(a, "\xff\xff\xff", 3, "the data ends inside a number (at byte 3, field id)");
    must_fail(a, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10, "longer than 64 bits");
    /* qty: an int out of range. */
    must_fail(a, "\x02\x80\x80\x80\x80\x20", 6,
              "int 4294967296 out of range (at byte 6, field qty)");
    ks_avro_free(a);

    /* enums, arrays, maps: indexes, counts, keys. */
    ks_avro_t *e = compile("{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"A\",\"B\"]}");
    must_fail(e, "\x04", 1, "enum symbol 2 of 2");
    ks_avro_free(e);
    ks_avro_t *arr = compile("{\"type\":\"array\",\"items\":\"null\"}");
    /* A block of 2^62 nulls: stopped at the bound of empty items. */
    must_fail(arr, "\xfe\xff\xff\xff\xff\xff\xff\xff\x7f\x00", 10, "items that take no bytes");
    must_fail(arr, "\x01\x01\x00", 3, "a block of negative size");
    must_fail(arr, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10, "block count out of range");
    /* A negative count with a size: read and decoded. */
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 8);
    char err[256];
    assert_int_equal(
        ks_avro_decode(arr, "\x03\x00\x00", 3, KS_AVRO_JSON_AVRO, &jb, err, sizeof(err)), 0);
    assert_string_equal(jb.p, "[null,null]");
    ks_jbuf_free(&jb);
    ks_avro_free(arr);
    ks_avro_t *m = compile("{\"type\":\"map\",\"values\":{\"type\":\"array\",\"items\":\"int\"}}");
    must_fail(m, "\x02\x02\xff\x00", 4, "a map key that is not UTF-8");
    must_fail(m, "\x02\x02k\x02\x80\x80\x80\x80\x80\x01", 10,
              "out of range (at byte 10, field [\"k\"][0])");
    ks_avro_free(m);
    ks_avro_t *fx = compile("{\"type\":\"fixed\",\"name\":\"F\",\"size\":3}");
    must_fail(fx, "ab", 2, "a fixed of 3 bytes, 2 left");
    ks_avro_free(fx);
}

static void test_schema_refused(void **state)
{
    (void)state;
    char err[256];
    assert_null(ks_avro_new("{\"type\":\"nope\"}", 15, err, sizeof(err)));
    assert_contains(err, "not an Avro schema");
    assert_null(ks_avro_new("{", 1, err, sizeof(err)));
}

static void test_wire(void **state)
{
    (void)state;
    char body[4096], wire[4100];
    size_t n = encode(ORDER, fill_order, 0, body, sizeof(body));
    wire[0] = 0;
    wire[1] = 0;
    wire[2] = 0;
    wire[3] = 1;
    wire[4] = 0x2c; /* id 300 */
    memcpy(wire + 5, body, n);
    ks_schema_t *s = ks_schema_new(300, KS_SCHEMA_AVRO, ORDER, strlen(ORDER), NULL);
    ks_jbuf_t b;
    ks_jbuf_init(&b, 8);
    char err[256];
    for (int i = 0; i < 2; i++) { /* the second from the compiled form kept in s */
        b.len = 0;
        assert_int_equal(
            ks_avro_wire_json(s, wire, n + 5, KS_AVRO_JSON_PLAIN, &b, err, sizeof(err)), 0);
        json_t *j = json_loadb(b.p, b.len, JSON_ALLOW_NUL, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(get(j, "maybe")), "yes");
        json_decref(j);
    }
    b.len = 0;
    wire[0] = 1;
    assert_int_equal(ks_avro_wire_json(s, wire, n + 5, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)),
                     -1);
    assert_contains(err, "first byte 0x01");
    assert_int_equal(ks_avro_wire_json(s, wire, 3, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)), -1);
    assert_contains(err, "3 bytes");
    wire[0] = 0;
    wire[4] = 0x2d;
    assert_int_equal(ks_avro_wire_json(s, wire, n + 5, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)),
                     -1);
    assert_contains(err, "names schema 301, not 300");
    ks_schema_unref(s);
    /* Not an Avro schema: said, every time. */
    ks_schema_t *js = ks_schema_new(301, KS_SCHEMA_JSON, "{}", 2, NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(
            ks_avro_wire_json(js, wire, n + 5, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)), -1);
        assert_contains(err, "schema 301 is JSON, not AVRO");
    }
    ks_schema_unref(js);
    ks_schema_t *bad = ks_schema_new(0, KS_SCHEMA_AVRO, "{\"type\":1}", 10, NULL);
    assert_int_equal(ks_avro_wire_json(bad, wire, n + 5, KS_AVRO_JSON_AVRO, &b, err, sizeof(err)),
                     -1);
    assert_contains(err, "not an Avro schema");
    ks_schema_unref(bad);
    assert_int_equal(b.len, 0);
    ks_jbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_doubles),
        cmocka_unit_test(test_primitive_and_recursive),
        cmocka_unit_test(test_every_prefix_fails),
        cmocka_unit_test(test_bad_bytes),
        cmocka_unit_test(test_schema_refused),
        cmocka_unit_test(test_wire),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
