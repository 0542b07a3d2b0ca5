/* test_avro_enc.c: tests JSON to Avro binary (codec/avro_enc.c): an Order of every type, given
 * in Avro's JSON encoding and in the plain form, encoded and decoded back by avro_json.c to the
 * same JSON; bytes past U+00FF, longs past 2^53, NaN; and the error for each way a value can
 * fail to fit, naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "avro_enc.h"
#include "avro_json.h"

#include "assert_contains.h"
#include "order_schema.h"

/* tests/registry/test_registry_avro.py's ORDER_V1, with a reference to a named type. */
static const char ORDER[] =
    ORDER_SCHEMA("", "  {\"name\":\"tier\",\"type\":[\"null\",{\"type\":\"enum\",\"name\":\"Tier\","
                     "   \"symbols\":[\"GOLD\",\"SILVER\"]}]}");

/* One Order in Avro's JSON encoding (as avro_json.c writes it). */
static const char ORDER_AVRO[] =
    "{\"id\":9007199254740993,\"qty\":-42,\"price\":19.99,\"ratio\":0.5,\"paid\":true,"
    "\"note\":\"caf\\u00e9 \\\"q\\\"\\n\\ud83c\\udf75\",\"maybe\":{\"string\":\"yes\"},"
    "\"either\":{\"array\":[0,1000000000000,-1]},"
    "\"customer\":{\"name\":\"Ada\",\"tier\":{\"com.acme.Tier\":\"SILVER\"}},"
    "\"lines\":[{\"sku\":\"A-1\",\"n\":1},{\"sku\":\"B-2\",\"n\":2}],"
    "\"tags\":{\"a\":1,\"b\\u00e9\":-9223372036854775808},\"status\":\"DONE\","
    "\"blob\":\"\\u0000a\\\"\\\\\\u007f\\u0080\\u00ff\",\"hash\":\"\\u00de\\u00ad\\u0001 \","
    "\"ref\":{\"com.acme.Customer\":{\"name\":\"Bob\",\"tier\":null}}}";

/* The same Order in the plain form: unions as their values. */
static const char ORDER_PLAIN[] =
    "{\"id\":9007199254740993,\"qty\":-42,\"price\":19.99,\"ratio\":0.5,\"paid\":true,"
    "\"note\":\"caf\\u00e9 \\\"q\\\"\\n\\ud83c\\udf75\",\"maybe\":\"yes\","
    "\"either\":[0,1000000000000,-1],"
    "\"customer\":{\"name\":\"Ada\",\"tier\":\"SILVER\"},"
    "\"lines\":[{\"sku\":\"A-1\",\"n\":1},{\"sku\":\"B-2\",\"n\":2}],"
    "\"tags\":{\"a\":1,\"b\\u00e9\":-9223372036854775808},\"status\":\"DONE\","
    "\"blob\":\"\\u0000a\\\"\\\\\\u007f\\u0080\\u00ff\",\"hash\":\"\\u00de\\u00ad\\u0001 \","
    "\"ref\":{\"name\":\"Bob\",\"tier\":null}}";

static ks_avro_t *order_schema(void)
{
    char err[256];
    ks_avro_t *a = ks_avro_new(ORDER, strlen(ORDER), err, sizeof(err));
    if (!a)
        fail_msg("schema: %s", err);
    return a;
}

static json_t *parse(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
    if (!j)
        fail_msg("test JSON: %s at %d", je.text, je.position);
    return j;
}

/* Encodes text, decodes it back in form; returns the JSON decoded (new reference). */
static json_t *round_trip(const ks_avro_t *a, const char *text, ks_avro_form_t form)
{
    char err[512];
    json_t *in = parse(text);
    ks_jbuf_t bin, out;
    ks_jbuf_init(&bin, 64);
    ks_jbuf_init(&out, 64);
    if (ks_avro_encode(a, in, &bin, err, sizeof(err)))
        fail_msg("encode: %s", err);
    if (ks_avro_decode(a, bin.p, bin.len, form, &out, err, sizeof(err)))
        fail_msg("decode: %s", err);
    json_t *back = parse(out.p);
    ks_jbuf_free(&bin);
    ks_jbuf_free(&out);
    json_decref(in);
    return back;
}

static void test_round_trip_both_forms(void **state)
{
    (void)state;
    ks_avro_t *a = order_schema();
    json_t *avro = parse(ORDER_AVRO), *plain = parse(ORDER_PLAIN);
    const char *inputs[] = {ORDER_AVRO, ORDER_PLAIN};
    for (size_t i = 0; i < 2; i++) {
        json_t *back = round_trip(a, inputs[i], KS_AVRO_JSON_AVRO);
        if (!json_equal(back, avro))
            fail_msg("input %zu came back as %s", i, json_dumps(back, JSON_COMPACT));
        json_decref(back);
        back = round_trip(a, inputs[i], KS_AVRO_JSON_PLAIN);
        assert_true(json_equal(back, plain));
        json_decref(back);
    }
    json_decref(avro);
    json_decref(plain);
    ks_avro_free(a);
}

/* A union's plain value takes the first branch it fits; NaN and the infinities as the decoder
 * writes them; an absent nullable field is null. */
static void test_plain_unions_and_specials(void **state)
{
    (void)state;
    static const char S[] =
        "{\"type\":\"record\",\"name\":\"R\",\"fields\":["
        "{\"name\":\"u\",\"type\":[\"null\",\"long\",\"string\",\"double\"]},"
        "{\"name\":\"d\",\"type\":\"double\"},{\"name\":\"f\",\"type\":\"float\"},"
        "{\"name\":\"opt\",\"type\":[\"null\",\"int\"]}]}";
    char err[256];
    ks_avro_t *a = ks_avro_new(S, strlen(S), err, sizeof(err));
    assert_non_null(a);
    json_t *back =
        round_trip(a, "{\"u\":\"x\",\"d\":\"NaN\",\"f\":\"-Infinity\"}", KS_AVRO_JSON_AVRO);
    json_t *want = parse("{\"u\":{\"string\":\"x\"},\"d\":\"NaN\",\"f\":\"-Infinity\","
                         "\"opt\":null}");
    assert_true(json_equal(back, want));
    json_decref(back);
    json_decref(want);
    back = round_trip(a, "{\"u\":2.5,\"d\":1,\"f\":0.25,\"opt\":{\"int\":3}}", KS_AVRO_JSON_PLAIN);
    want = parse("{\"u\":2.5,\"d\":1.0,\"f\":0.25,\"opt\":3}");
    assert_true(json_equal(back, want));
    json_decref(back);
    json_decref(want);
    ks_avro_free(a);
}

/* Each way ORDER_PLAIN can be broken, and the words its error must hold. */
static void test_errors_name_the_field(void **state)
{
    (void)state;
    static const struct {
        const char *path; /* a JSON pointer-ish edit: field and its new JSON (NULL: removed) */
        const char *sub;
        const char *json;
        const char *want;
    } cases[] = {
        {"customer", "tier", "\"PLATINUM\"",
         "field \"customer.tier\": \"PLATINUM\" is not a symbol of enum com.acme.Tier"},
        {NULL, "qty", "\"many\"", "field \"qty\": \"many\" is not an integer that fits an int"},
        {NULL, "qty", "4294967296", "field \"qty\": 4294967296 is not an integer that fits an int"},
        {NULL, "note", NULL, "field \"note\": missing (record Order requires it)"},
        {NULL, "extra", "1", "field \"extra\": record Order has no such field"},
        {NULL, "status", "\"LOST\"",
         "field \"status\": \"LOST\" is not a symbol of enum "
         "com.acme.Status"},
        {NULL, "hash", "\"abc\"", "field \"hash\": a string of 3 bytes for a fixed of 4"},
        {NULL, "blob", "\"\\u0100\"", "field \"blob\": a code point above U+00FF"},
        {NULL, "either", "true",
         "field \"either\": true fits no branch of the union [int, "
         "string, array]"},
        {NULL, "paid", "1", "field \"paid\": 1 is not a boolean"},
        {NULL, "price", "\"cheap\"", "field \"price\": \"cheap\" is not a number"},
        {NULL, "customer", "[]",
         "field \"customer\": an array is not an object, for record "
         "Customer"},
        {NULL, "tags", "{\"a\":\"x\"}", "field \"tags[\"a\"]\": \"x\" is not an integer"},
        {"ref", "name", "7", "field \"ref.name\": 7 is not a string"},
    };
    ks_avro_t *a = order_schema();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *v = parse(ORDER_PLAIN);
        json_t *o = cases[i].path ? json_object_get(v, cases[i].path) : v;
        if (cases[i].json)
            json_object_set_new(o, cases[i].sub, parse(cases[i].json));
        else
            json_object_del(o, cases[i].sub);
        ks_jbuf_t b;
        ks_jbuf_init(&b, 16);
        char err[512] = "";
        assert_int_equal(ks_avro_encode(a, v, &b, err, sizeof(err)), -1);
        assert_int_equal(b.len, 0);
        assert_contains(err, cases[i].want);
        ks_jbuf_free(&b);
        json_decref(v);
    }
    /* An array item names its index. */
    json_t *v = parse(ORDER_PLAIN);
    json_object_set_new(json_array_get(json_object_get(v, "lines"), 1), "n", json_string("x"));
    ks_jbuf_t b;
    ks_jbuf_init(&b, 16);
    char err[512];
    assert_int_equal(ks_avro_encode(a, v, &b, err, sizeof(err)), -1);
    assert_contains(err, "field \"lines[1].n\": \"x\" is not an integer");
    /* Not a record at all. */
    json_t *s = json_string("x");
    assert_int_equal(ks_avro_encode(a, s, &b, err, sizeof(err)), -1);
    assert_contains(err, "the value: \"x\" is not an object, for record Order");
    json_decref(s);
    ks_jbuf_free(&b);
    json_decref(v);
    ks_avro_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_both_forms),
        cmocka_unit_test(test_plain_unions_and_specials),
        cmocka_unit_test(test_errors_name_the_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
