/* fuzz_protobuf.c: libFuzzer harness for Protobuf binary to JSON (codec/proto_json.c) and back
 * (codec/proto_enc.c), on fixed valid schemas (codec/proto_schema.c) and fuzzed bytes; and for
 * the schema reader itself. The first byte picks the schema (every type with maps, oneof and
 * nesting; a recursive message; proto2) or, past them, reads the rest as a schema's text. The
 * rest is the value (message indexes, then the message), decoded alone and, in the wire format,
 * through a registry's schema object. No crash, no leak, no read outside the input; what decodes
 * is valid JSON (jansson parses it whole, or declines only a U+0000 in a map key); what fails
 * leaves the buffer as it was and says why. What decodes encodes back to bytes that decode to
 * the same JSON (as jansson reads it). The same bytes read as JSON go to the encoder: what
 * encodes decodes. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_json.h"
#include "proto_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const schemas[] = {
    /* As confluent-kafka registers it: base64 of the FileDescriptorProto protoc made of
     *   syntax = "proto3"; package shop.v1;
     *   message All { every scalar type as fields 1-16; repeated int32 packed_ints = 17;
     *     repeated int32 loose = 18 [packed = false]; Inner inner = 19;
     *     map<string, int64> counts = 20; oneof pick { string name = 21; int32 num = 22; }
     *     optional int32 maybe = 23; string renamed = 24 [json_name = "other"];
     *     repeated Inner.Deep deeps = 25; map<bool, Inner> by_flag = 26;
     *     map<sint64, Color> colors = 27; repeated double ds = 28; repeated bytes blobs = 29;
     *     repeated Color cs = 30;
     *     message Inner { string sku = 1; message Deep { int32 n = 1; } } }
     *   enum Color { option allow_alias = true; COLOR_UNSPECIFIED = 0; RED = 1; GREEN = 2;
     *     ALSO_RED = 1; }
     *   message Second { int32 x = 1; } */
    "Cghmei5wcm90bxIHc2hvcC52MSKVCAoDQWxsEgwKAWQYASABKAFSAWQSDAoBZhgCIAEoAlIBZhIQCgNpNjQYAyABKA"
    "NSA2k2NBIQCgN1NjQYBCABKARSA3U2NBIQCgNpMzIYBSABKAVSA2kzMhIQCgNmNjQYBiABKAZSA2Y2NBIQCgNmMzIY"
    "ByABKAdSA2YzMhIMCgFiGAggASgIUgFiEgwKAXMYCSABKAlSAXMSDgoCYnkYCiABKAxSAmJ5EhAKA3UzMhgLIAEoDV"
    "IDdTMyEiQKBWNvbG9yGAwgASgOMg4uc2hvcC52MS5Db2xvclIFY29sb3ISEgoEc2YzMhgNIAEoD1IEc2YzMhISCgRz"
    "ZjY0GA4gASgQUgRzZjY0EhIKBHNpMzIYDyABKBFSBHNpMzISEgoEc2k2NBgQIAEoElIEc2k2NBIfCgtwYWNrZWRfaW"
    "50cxgRIAMoBVIKcGFja2VkSW50cxIYCgVsb29zZRgSIAMoBUICEABSBWxvb3NlEigKBWlubmVyGBMgASgLMhIuc2hv"
    "cC52MS5BbGwuSW5uZXJSBWlubmVyEjAKBmNvdW50cxgUIAMoCzIYLnNob3AudjEuQWxsLkNvdW50c0VudHJ5UgZjb3"
    "VudHMSFAoEbmFtZRgVIAEoCUgAUgRuYW1lEhIKA251bRgWIAEoBUgAUgNudW0SGQoFbWF5YmUYFyABKAVIAVIFbWF5"
    "YmWIAQESFgoHcmVuYW1lZBgYIAEoCVIFb3RoZXISLQoFZGVlcHMYGSADKAsyFy5zaG9wLnYxLkFsbC5Jbm5lci5EZW"
    "VwUgVkZWVwcxIxCgdieV9mbGFnGBogAygLMhguc2hvcC52MS5BbGwuQnlGbGFnRW50cnlSBmJ5RmxhZxIwCgZjb2xv"
    "cnMYGyADKAsyGC5zaG9wLnYxLkFsbC5Db2xvcnNFbnRyeVIGY29sb3JzEg4KAmRzGBwgAygBUgJkcxIUCgVibG9icx"
    "gdIAMoDFIFYmxvYnMSHgoCY3MYHiADKA4yDi5zaG9wLnYxLkNvbG9yUgJjcxo5CgtDb3VudHNFbnRyeRIQCgNrZXkY"
    "ASABKAlSA2tleRIUCgV2YWx1ZRgCIAEoA1IFdmFsdWU6AjgBGk0KC0J5RmxhZ0VudHJ5EhAKA2tleRgBIAEoCFIDa2"
    "V5EigKBXZhbHVlGAIgASgLMhIuc2hvcC52MS5BbGwuSW5uZXJSBXZhbHVlOgI4ARpJCgtDb2xvcnNFbnRyeRIQCgNr"
    "ZXkYASABKBJSA2tleRIkCgV2YWx1ZRgCIAEoDjIOLnNob3AudjEuQ29sb3JSBXZhbHVlOgI4ARovCgVJbm5lchIQCg"
    "Nza3UYASABKAlSA3NrdRoUCgREZWVwEgwKAW4YASABKAVSAW5CBgoEcGlja0IICgZfbWF5YmUiFgoGU2Vjb25kEgwK"
    "AXgYASABKAVSAXgqRAoFQ29sb3ISFQoRQ09MT1JfVU5TUEVDSUZJRUQQABIHCgNSRUQQARIJCgVHUkVFThACEgwKCE"
    "FMU09fUkVEEAEaAhABYgZwcm90bzM=",
    "syntax = \"proto3\"; message N { N next = 1; int32 v = 2; repeated N kids = 3; }",
    "syntax = \"proto2\"; package p2; message M { required int32 a = 1; optional string b = 2;"
    " repeated int64 c = 3 [packed = true]; optional E e = 4; optional M m = 5; }"
    " enum E { ONE = 1; TWO = 2; }",
};
#define NSCHEMAS (sizeof(schemas) / sizeof(schemas[0]))

static ks_proto_t *parsed[NSCHEMAS];
static ks_schema_t *objects[NSCHEMAS];

/* data[0..n) decodes to JSON that encodes back to bytes decoding to the same JSON. */
static void round_trip(const ks_proto_t *p, const uint8_t *data, size_t n)
{
    ks_jbuf_t first, bin, second;
    char err[512];
    ks_jbuf_init(&first, 64);
    ks_jbuf_init(&bin, 64);
    ks_jbuf_init(&second, 64);
    json_t *j = NULL;
    /* Only the first message is what the encoder writes. */
    if ((n < 1 || data[0] == 0) && ks_proto_decode(p, data, n, &first, err, sizeof(err)) == 0 &&
        (j = json_loadb(first.p, first.len, JSON_ALLOW_NUL, NULL))) {
        json_t *j2 = NULL;
        if (ks_proto_encode(p, j, &bin, err, sizeof(err)) ||
            ks_proto_decode(p, bin.p, bin.len, &second, err, sizeof(err)) ||
            !(j2 = json_loadb(second.p, second.len, JSON_ALLOW_NUL, NULL)) || !json_equal(j, j2))
            abort();
        json_decref(j2);
    }
    json_decref(j);
    ks_jbuf_free(&first);
    ks_jbuf_free(&bin);
    ks_jbuf_free(&second);
}

/* The input read as a schema: it parses or says why; what parses decodes a small message. */
static void fuzz_schema(const uint8_t *data, size_t n)
{
    char err[512] = "";
    ks_proto_t *p = ks_proto_new((const char *)data, n, err, sizeof(err));
    if (!p) {
        if (!*err)
            abort();
        return;
    }
    ks_jbuf_t b;
    ks_jbuf_init(&b, 64);
    static const uint8_t msg[] = {0, 0x08, 0x01, 0x12, 0x01, 0x41, 0x1d, 0, 0, 0x80, 0x3f};
    fuzz_check_json(ks_proto_decode(p, msg, sizeof(msg), &b, err, sizeof(err)), &b, 0, err);
    ks_jbuf_free(&b);
    ks_proto_free(p);
}

static void fuzz_value(size_t which, const uint8_t *copy, size_t n)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 64);
    ks_jbuf_lit(&b, "[");
    char err[512] = "";
    size_t before = b.len;
    fuzz_check_json(ks_proto_decode(parsed[which], copy, n, &b, err, sizeof(err)), &b, before, err);
    /* The same bytes as a value in the wire format, with the schema kept in its object. */
    before = b.len;
    err[0] = '\0';
    fuzz_check_json(ks_proto_wire_json(objects[which], copy, n, &b, err, sizeof(err)), &b, before,
                    err);
    round_trip(parsed[which], copy, n);
    json_t *j = json_loadb((const char *)copy, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (j) {
        ks_jbuf_t bin, out;
        ks_jbuf_init(&bin, 64);
        ks_jbuf_init(&out, 64);
        if (ks_proto_encode(parsed[which], j, &bin, err, sizeof(err)) == 0 &&
            ks_proto_decode(parsed[which], bin.p, bin.len, &out, err, sizeof(err)))
            abort(); /* what encodes must decode */
        ks_jbuf_free(&bin);
        ks_jbuf_free(&out);
        json_decref(j);
    }
    ks_jbuf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!parsed[0]) {
        char err[256];
        for (size_t i = 0; i < NSCHEMAS; i++) {
            parsed[i] = ks_proto_new(schemas[i], strlen(schemas[i]), err, sizeof(err));
            objects[i] = ks_schema_new(0, KS_SCHEMA_PROTOBUF, schemas[i], strlen(schemas[i]), NULL);
            if (!parsed[i])
                abort();
        }
    }
    if (size < 1)
        return 0;
    size_t which = data[0] % (NSCHEMAS + 1);
    size_t n = size - 1;
    uint8_t *copy = fuzz_copy(data + 1, n);
    if (which == NSCHEMAS)
        fuzz_schema(copy, n);
    else
        fuzz_value(which, copy, n);
    free(copy);
    return 0;
}
