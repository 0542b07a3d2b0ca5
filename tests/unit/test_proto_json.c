/* test_proto_json.c: tests the Protobuf schema reader (codec/proto_schema.c) and Protobuf binary
 * to JSON (codec/proto_json.c) on bytes protoc --encode wrote, against what Python's
 * json_format.MessageToDict made of the same message: every scalar type, packed and unpacked,
 * nested messages, enums, maps, oneof, json_name, the schema as .proto text and as the base64
 * FileDescriptorProto confluent-kafka registers, message indexes, and corrupt bytes; and JSON
 * to Protobuf binary (codec/proto_enc.c): byte for byte as protoc writes, back through the
 * decoder, and every way a value can fail to fit, named by its field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_json.h"

#include "assert_contains.h"

static const char SHOP[] =
    "syntax = \"proto3\";\n"
    "package shop.v1;\n"
    "/* every scalar */\n"
    "message All {\n"
    "  double d = 1; float f = 2; int64 i64 = 3; uint64 u64 = 4; int32 i32 = 5;\n"
    "  fixed64 f64 = 6; fixed32 f32 = 7; bool b = 8; string s = 9; bytes by = 10;\n"
    "  uint32 u32 = 11; Color color = 12; sfixed32 sf32 = 13; sfixed64 sf64 = 14;\n"
    "  sint32 si32 = 15; sint64 si64 = 16;\n"
    "  repeated int32 packed_ints = 17;\n"
    "  repeated int32 loose = 18 [packed = false];\n"
    "  Inner inner = 19;\n"
    "  map<string, int64> counts = 20;\n"
    "  oneof pick { string name = 21; int32 num = 22; }\n"
    "  optional int32 maybe = 23;\n"
    "  string renamed = 24 [json_name = \"other\"];\n"
    "  repeated Inner.Deep deeps = 25;\n"
    "  message Inner { string sku = 1; message Deep { int32 n = 1; } }\n"
    "}\n"
    "enum Color { COLOR_UNSPECIFIED = 0; RED = 1; GREEN = 2; }\n"
    "message Second { int32 x = 1; }\n";

/* The same file as protoc compiled it: base64 of its FileDescriptorProto. */
static const char SHOP_B64[] =
    "Cgd0LnByb3RvEgdzaG9wLnYxIrQECgNBbGwSCQoBZBgBIAEoARIJCgFmGAIgASgCEgsKA2k2NBgDIAEoAxILCgN1Nj"
    "QYBCABKAQSCwoDaTMyGAUgASgFEgsKA2Y2NBgGIAEoBhILCgNmMzIYByABKAcSCQoBYhgIIAEoCBIJCgFzGAkgASgJ"
    "EgoKAmJ5GAogASgMEgsKA3UzMhgLIAEoDRIdCgVjb2xvchgMIAEoDjIOLnNob3AudjEuQ29sb3ISDAoEc2YzMhgNIA"
    "EoDxIMCgRzZjY0GA4gASgQEgwKBHNpMzIYDyABKBESDAoEc2k2NBgQIAEoEhITCgtwYWNrZWRfaW50cxgRIAMoBRIR"
    "CgVsb29zZRgSIAMoBUICEAASIQoFaW5uZXIYEyABKAsyEi5zaG9wLnYxLkFsbC5Jbm5lchIoCgZjb3VudHMYFCADKA"
    "syGC5zaG9wLnYxLkFsbC5Db3VudHNFbnRyeRIOCgRuYW1lGBUgASgJSAASDQoDbnVtGBYgASgFSAASEgoFbWF5YmUY"
    "FyABKAVIAYgBARIWCgdyZW5hbWVkGBggASgJUgVvdGhlchImCgVkZWVwcxgZIAMoCzIXLnNob3AudjEuQWxsLklubm"
    "VyLkRlZXAaLQoLQ291bnRzRW50cnkSCwoDa2V5GAEgASgJEg0KBXZhbHVlGAIgASgDOgI4ARonCgVJbm5lchILCgNz"
    "a3UYASABKAkaEQoERGVlcBIJCgFuGAEgASgFQgYKBHBpY2tCCAoGX21heWJlIhMKBlNlY29uZBIJCgF4GAEgASgFKj"
    "IKBUNvbG9yEhUKEUNPTE9SX1VOU1BFQ0lGSUVEEAASBwoDUkVEEAESCQoFR1JFRU4QAmIGcHJvdG8z";

/* protoc --encode=shop.v1.All of a message setting every field (d: 1.5 f: 0.1 i64: -5 ...). */
static const unsigned char ALL[] = {
    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x15, 0xcd, 0xcc, 0xcc, 0x3d, 0x18,
    0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x20, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x28, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0x01, 0x31, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3d, 0x0d, 0x00, 0x00,
    0x00, 0x40, 0x01, 0x4a, 0x06, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f, 0x52, 0x02, 0x00, 0xff,
    0x58, 0x80, 0xd0, 0xac, 0xf3, 0x0e, 0x60, 0x02, 0x6d, 0xfe, 0xff, 0xff, 0xff, 0x71, 0xfd,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x78, 0x07, 0x80, 0x01, 0xff, 0xe7, 0x88, 0x87,
    0x43, 0x8a, 0x01, 0x04, 0x01, 0x02, 0xac, 0x02, 0x90, 0x01, 0x04, 0x90, 0x01, 0x05, 0x9a,
    0x01, 0x05, 0x0a, 0x03, 0x41, 0x2d, 0x31, 0xa2, 0x01, 0x05, 0x0a, 0x01, 0x61, 0x10, 0x07,
    0xa2, 0x01, 0x05, 0x0a, 0x01, 0x62, 0x10, 0x00, 0xb0, 0x01, 0x09, 0xb8, 0x01, 0x00, 0xc2,
    0x01, 0x01, 0x72, 0xca, 0x01, 0x02, 0x08, 0x01, 0xca, 0x01, 0x00};

/* json_format.MessageToDict of that message, as Python printed it. */
static const char ALL_JSON[] =
    "{\"d\": 1.5, \"f\": 0.1, \"i64\": \"-5\", \"u64\": \"18446744073709551615\", \"i32\": -7, "
    "\"f64\": \"12\", \"f32\": 13, \"b\": true, \"s\": \"h\\u00e9llo\", \"by\": \"AP8=\", "
    "\"u32\": 4000000000, \"color\": \"GREEN\", \"sf32\": -2, \"sf64\": \"-3\", \"si32\": -4, "
    "\"si64\": \"-9000000000\", \"packedInts\": [1, 2, 300], \"loose\": [4, 5], "
    "\"inner\": {\"sku\": \"A-1\"}, \"counts\": {\"b\": \"0\", \"a\": \"7\"}, \"num\": 9, "
    "\"maybe\": 0, \"other\": \"r\", \"deeps\": [{\"n\": 1}, {}]}";

static ks_proto_t *parse(const char *text)
{
    char err[256] = "";
    ks_proto_t *p = ks_proto_new(text, strlen(text), err, sizeof(err));
    if (!p)
        fail_msg("schema refused: %s", err);
    return p;
}

/* data[0..n) (indexes, then a message) decodes to JSON equal to want. */
static void assert_decodes(const ks_proto_t *p, const void *data, size_t n, const char *want)
{
    ks_jbuf_t b;
    char err[256] = "";
    ks_jbuf_init(&b, 16);
    if (ks_proto_decode(p, data, n, &b, err, sizeof(err)))
        fail_msg("decode failed: %s", err);
    json_t *got = json_loadb(b.p, b.len, 0, NULL), *exp = json_loads(want, 0, NULL);
    assert_non_null(exp);
    if (!got || !json_equal(got, exp))
        fail_msg("got %s, want %s", b.p, want);
    json_decref(got);
    json_decref(exp);
    ks_jbuf_free(&b);
}

/* data decodes to an error holding words, b left as it was. */
static void assert_fails(const ks_proto_t *p, const void *data, size_t n, const char *words)
{
    ks_jbuf_t b;
    char err[256] = "";
    ks_jbuf_init(&b, 16);
    ks_jbuf_lit(&b, "x");
    if (!ks_proto_decode(p, data, n, &b, err, sizeof(err)))
        fail_msg("decoded to %s, expected an error with \"%s\"", b.p, words);
    assert_contains(err, words);
    assert_int_equal(b.len, 1);
    ks_jbuf_free(&b);
}

/* ALL after the index [0] written as a single 0 byte. */
static unsigned char *with_index(const void *msg, size_t n, const unsigned char *ix, size_t ixn)
{
    unsigned char *d = malloc(n + ixn);
    assert_non_null(d);
    memcpy(d, ix, ixn);
    memcpy(d + ixn, msg, n);
    return d;
}

static void test_every_type(void **state)
{
    (void)state;
    const char *forms[] = {SHOP, SHOP_B64};
    for (int i = 0; i < 2; i++) {
        ks_proto_t *p = parse(forms[i]);
        unsigned char *d = with_index(ALL, sizeof(ALL), (const unsigned char *)"\0", 1);
        assert_decodes(p, d, sizeof(ALL) + 1, ALL_JSON);
        free(d);
        /* [0] written out (count 1, index 0) names the same message. */
        d = with_index(ALL, sizeof(ALL), (const unsigned char *)"\2\0", 2);
        assert_decodes(p, d, sizeof(ALL) + 2, ALL_JSON);
        free(d);
        ks_proto_free(p);
    }
}

static void test_messages_by_index(void **state)
{
    (void)state;
    ks_proto_t *p = parse(SHOP);
    /* Second is [1]; All.Inner is [0, 1] (the map's entry message is [0, 0]); Deep [0, 1, 0]. */
    assert_decodes(p, "\2\2\x08\x05", 4, "{\"x\": 5}");
    assert_decodes(p, "\4\0\2\x0a\x01Z", 6, "{\"sku\": \"Z\"}");
    assert_decodes(p, "\6\0\2\0\x08\x03", 6, "{\"n\": 3}");
    assert_decodes(p, "\4\0\0\x0a\x01k\x10\x02", 8, "{\"key\": \"k\", \"value\": \"2\"}");
    ks_proto_free(p);
}

static void test_packing_and_presence(void **state)
{
    (void)state;
    ks_proto_t *p = parse(SHOP);
    /* packed_ints unpacked and loose packed: both read; zeros of fields without presence left
     * out, optional's zero kept; an unknown field (99) and an unknown enum number. */
    const unsigned char d[] = {0,    0x88, 0x01, 0x01, 0x88, 0x01, 0x02, 0x92, 0x01,
                               0x02, 0x06, 0x07, 0x28, 0x00, 0x4a, 0x00, 0xb8, 0x01,
                               0x00, 0x98, 0x06, 0x01, 0x60, 0x09, 0x12, 0x00};
    assert_decodes(p, d, sizeof(d),
                   "{\"packedInts\": [1, 2], \"loose\": [6, 7], \"maybe\": 0, \"color\": 9}");
    /* Two members of the oneof: the later wins. A singular field twice: the later wins. */
    const unsigned char o[] = {0,    0xaa, 0x01, 0x01, 'a',  0xb0, 0x01, 0x02,
                               0x28, 0x01, 0x28, 0x02, 0xaa, 0x01, 0x01, 'b'};
    assert_decodes(p, o, sizeof(o), "{\"i32\": 2, \"name\": \"b\"}");
    /* NaN and the infinities as strings; -0.0 is not the zero value. */
    const unsigned char f[] = {0, 0x15, 0x00, 0x00, 0xc0, 0x7f, 0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0xff};
    assert_decodes(p, f, sizeof(f), "{\"f\": \"NaN\", \"d\": \"-Infinity\"}");
    ks_proto_free(p);
}

static void test_corrupt(void **state)
{
    (void)state;
    ks_proto_t *p = parse(SHOP);
    /* Every prefix of a valid message fails or decodes; none reads past it (ASan, valgrind). */
    unsigned char *d = with_index(ALL, sizeof(ALL), (const unsigned char *)"\0", 1);
    for (size_t n = 1; n < sizeof(ALL) + 1; n++) {
        unsigned char *cut = malloc(n);
        memcpy(cut, d, n);
        ks_jbuf_t b;
        char err[256];
        ks_jbuf_init(&b, 16);
        if (ks_proto_decode(p, cut, n, &b, err, sizeof(err)))
            assert_true(strlen(err) > 0 && b.len == 0);
        ks_jbuf_free(&b);
        free(cut);
    }
    free(d);
    static const struct {
        const char *data;
        size_t len;
        const char *words;
    } bad[] = {
        {"\2\4", 2, "index 0 of 2"},
        {"\4\0\6", 3, "index 1 of 2"},
        {"\1", 1, "corrupt message indexes"},
        {"", 0, "corrupt message indexes"},
        {"\0\x0a\x05", 3, "runs past the end"},
        {"\0\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 13, "field number 1"},
        {"\0\x00", 2, "a corrupt tag"},
        {"\0\x0f", 2, "wire type 7"},
        {"\0\x4a\x02\xc3\x28", 5, "field \"s\": a string of 2 bytes that is not UTF-8"},
        {"\0\x9a\x01\x02\x0a\x05", 6, "field \"inner\""},
        {"\0\x8a\x01\x03\x01\x02\xff", 7, "field \"packedInts\": a packed varint"},
        {"\0\x0c", 2, "field number 1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_fails(p, bad[i].data, bad[i].len, bad[i].words);
    ks_proto_free(p);
}

static void test_depth_bounded(void **state)
{
    (void)state;
    ks_proto_t *p = parse("syntax = \"proto3\"; message N { N next = 1; int32 v = 2; }");
    /* 100 levels of next: field 1, length of the rest. */
    unsigned char d[400];
    size_t n = sizeof(d);
    d[--n] = 0x01;
    d[--n] = 0x10;
    for (int i = 0; i < 100; i++) {
        size_t len = sizeof(d) - n;
        if (len >= 128) {
            d[--n] = (unsigned char)(len >> 7);
            d[--n] = (unsigned char)(len | 0x80);
        } else
            d[--n] = (unsigned char)len;
        d[--n] = 0x0a;
    }
    d[--n] = 0;
    assert_fails(p, d + n, sizeof(d) - n, "messages nest deeper than 64");
    assert_decodes(p, "\0\x0a\x02\x10\x03", 5, "{\"next\": {\"v\": 3}}");
    ks_proto_free(p);
}

static void test_schema_refused(void **state)
{
    (void)state;
    struct {
        const char *text, *words;
    } cases[] = {
        {"syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\"; message A {}",
         "imports \"google/protobuf/timestamp.proto\""},
        {"syntax = \"proto3\"; message A { Missing m = 1; }", "no type Missing"},
        {"syntax = \"proto2\"; message A { optional group G = 1 { } }", "groups are not taken"},
        {"edition = \"2023\"; message A {}", "editions are not taken"},
        {"syntax = \"proto3\"; message A { int32 a = 1; int32 b = 1; }", "used twice"},
        {"syntax = \"proto3\"; message A { int32 a = 0; }", "field number from 1"},
        {"syntax = \"proto3\"; message A { int32 a = 1 }", "line 1: expected ';' or '['"},
        {"syntax = \"proto3\";\nmessage A {\n int32 a = 1;", "line 3: message A is not closed"},
        {"syntax = \"proto3\"; enum E { X = 0; }", "no message"},
        {"Cg==x", "unexpected"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[256] = "";
        ks_proto_t *p = ks_proto_new(cases[i].text, strlen(cases[i].text), err, sizeof(err));
        if (p)
            fail_msg("accepted: %s", cases[i].text);
        assert_contains(err, cases[i].words);
    }
}

/* The JSON of v encoded, then decoded: equal to want (v when NULL). */
static void assert_round_trip(const ks_proto_t *p, const char *v, const char *want)
{
    json_t *j = json_loads(v, 0, NULL);
    assert_non_null(j);
    ks_jbuf_t b;
    char err[256] = "";
    ks_jbuf_init(&b, 16);
    if (ks_proto_encode(p, j, &b, err, sizeof(err)))
        fail_msg("encode of %s failed: %s", v, err);
    assert_decodes(p, b.p, b.len, want ? want : v);
    ks_jbuf_free(&b);
    json_decref(j);
}

static void test_encode(void **state)
{
    (void)state;
    ks_proto_t *p = parse(SHOP);
    /* In field-number order, as protoc --encode wrote (d: 2.5 i32: -7 s: "x" color: RED
     * packed_ints: [1, 2, 300] loose: [3] inner { sku: "k" } si64: -2 maybe: 0). */
    static const unsigned char want[] = {0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40,
                                         0x28, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                         0x01, 0x4a, 0x01, 0x78, 0x60, 0x01, 0x80, 0x01, 0x03, 0x8a,
                                         0x01, 0x04, 0x01, 0x02, 0xac, 0x02, 0x90, 0x01, 0x03, 0x9a,
                                         0x01, 0x03, 0x0a, 0x01, 0x6b, 0xb8, 0x01, 0x00};
    json_t *j = json_loads("{\"d\": 2.5, \"i32\": -7, \"s\": \"x\", \"color\": \"RED\", "
                           "\"u64\": \"0\", \"si64\": -2, \"packed_ints\": [1, 2, 300], "
                           "\"loose\": [3], \"inner\": {\"sku\": \"k\"}, \"maybe\": 0, "
                           "\"name\": null}",
                           0, NULL);
    ks_jbuf_t b;
    char err[256] = "";
    ks_jbuf_init(&b, 16);
    if (ks_proto_encode(p, j, &b, err, sizeof(err)))
        fail_msg("encode failed: %s", err);
    assert_int_equal(b.len, sizeof(want));
    assert_memory_equal(b.p, want, sizeof(want));
    json_decref(j);
    ks_jbuf_free(&b);
    /* What the decoder writes encodes back to the same JSON. */
    assert_round_trip(p, ALL_JSON, NULL);
    /* Original names, 64-bit numbers as numbers, an enum by number, URL-safe base64 without
     * padding, numbers as strings. */
    assert_round_trip(p,
                      "{\"packed_ints\": [\"5\"], \"i64\": -9, \"color\": 1, \"by\": \"_-8\", "
                      "\"f\": \"Infinity\", \"d\": \"-2.5\", \"u64\": \"18446744073709551615\"}",
                      "{\"packedInts\": [5], \"i64\": \"-9\", \"color\": \"RED\", "
                      "\"by\": \"/+8=\", \"f\": \"Infinity\", \"d\": -2.5, "
                      "\"u64\": \"18446744073709551615\"}");
    ks_proto_free(p);
}

static void test_encode_refused(void **state)
{
    (void)state;
    ks_proto_t *p = parse(SHOP);
    static const struct {
        const char *json, *words;
    } bad[] = {
        {"{\"i32\": \"many\"}", "field \"i32\": \"many\" is not an integer"},
        {"{\"i32\": 2147483648}", "field \"i32\": 2147483648 is out of range"},
        {"{\"u32\": -1}", "field \"u32\": -1 is out of range (0 to 4294967295)"},
        {"{\"u64\": \"18446744073709551616\"}", "field \"u64\""},
        {"{\"color\": \"BLUE\"}", "\"BLUE\" is not a value of enum shop.v1.Color"},
        {"{\"inner\": {\"sku\": 5}}", "field \"inner.sku\": not a string"},
        {"{\"deeps\": [{}, {\"n\": 1.5}]}", "field \"deeps[1].n\": 1.5 is not an integer"},
        {"{\"counts\": {\"a\": \"x\"}}", "field \"counts.a\": \"x\" is not an integer"},
        {"{\"counts\": [1]}", "field \"counts\": not an object"},
        {"{\"nope\": 1}", "field \"nope\": message shop.v1.All has no such field"},
        {"{\"name\": \"a\", \"num\": 1}", "another field of its oneof"},
        {"{\"by\": \"a\"}", "not a base64 string"},
        {"{\"f\": 1e300}", "out of a float's range"},
        {"{\"b\": 1}", "not true or false"},
        {"[1]", "not an object (message shop.v1.All)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
        ks_jbuf_t b;
        char err[256] = "";
        ks_jbuf_init(&b, 16);
        if (!ks_proto_encode(p, j, &b, err, sizeof(err)))
            fail_msg("encoded %s", bad[i].json);
        assert_contains(err, bad[i].words);
        assert_int_equal(b.len, 0);
        ks_jbuf_free(&b);
        json_decref(j);
    }
    ks_proto_free(p);
}

/* proto2 text with what the reader skips (options, reserved, extensions, extend, service,
 * defaults, aggregate and custom options), scoped type names, hex numbers, aliased and
 * negative enum values: protoc's bytes as MessageToDict shows them (proto2 keeps set zeros). */
static void test_proto2_text(void **state)
{
    (void)state;
    ks_proto_t *p =
        parse("// A proto2 file with what the reader skips.\n"
              "syntax = 'proto2';\n"
              "package a.b;\n"
              "option java_package = \"x.y\";\n"
              "message Top {\n"
              "  option deprecated = true;\n"
              "  reserved 8, 9 to 11;\n"
              "  reserved \"old\";\n"
              "  extensions 100 to 199;\n"
              "  enum Kind { option allow_alias = true; NEG = -1; ZERO = 0;\n"
              "    ONE = 1 [deprecated = true]; UNO = 1; }\n"
              "  required int32 id = 1 [default = 5, deprecated = true, (my.opt).x = {a: 1}];\n"
              "  optional Kind kind = 0x2;\n"
              "  optional Sub sub = 3;\n"
              "  repeated int64 packed_ones = 4 [packed = true];\n"
              "  optional string text = 5 [default = \"a;b}\"];\n"
              "  message Sub { optional .a.b.Top.Kind k = 1; optional b.Other o = 2;\n"
              "    optional int32 zero = 3; }\n"
              "}\n"
              "message Other { optional bool on = 1; }\n"
              "extend Top { optional int32 ext = 100; }\n"
              "service S { rpc Get (Top) returns (Other) { option deprecated = true; } }\n");
    static const unsigned char d[] = {0x00, 0x08, 0x00, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0x01, 0x1a, 0x08, 0x08, 0x01, 0x12, 0x02,
                                      0x08, 0x00, 0x18, 0x00, 0x22, 0x0b, 0x01, 0xfe, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x2a, 0x00};
    assert_decodes(p, d, sizeof(d),
                   "{\"id\": 0, \"kind\": \"NEG\", \"sub\": {\"k\": \"ONE\", \"o\": {\"on\": "
                   "false}, \"zero\": 0}, \"packedOnes\": [\"1\", \"-2\"], \"text\": \"\"}");
    assert_round_trip(p,
                      "{\"id\": 0, \"kind\": \"NEG\", \"sub\": {\"k\": \"ONE\", \"o\": {\"on\": "
                      "false}, \"zero\": 0}, \"packedOnes\": [\"1\", \"-2\"], \"text\": \"\"}",
                      NULL);
    ks_proto_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_messages_by_index),
        cmocka_unit_test(test_packing_and_presence),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_depth_bounded),
        cmocka_unit_test(test_schema_refused),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_encode_refused),
        cmocka_unit_test(test_proto2_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
