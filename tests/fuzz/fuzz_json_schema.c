/* fuzz_json_schema.c: libFuzzer harness for JSON Schema (codec/json_schema.c): the consume path
 * (a value after the wire header to compact JSON) and the check, on fixed valid schemas and
 * fuzzed bytes; and the compiler, on the fuzzed bytes as a schema. The first byte picks: a
 * schema (every keyword checked; a recursive $ref; a $ref loop), or, with its top bit, the rest
 * as the schema the fixed values are checked against. No crash, no leak, no read outside the
 * input; the JSON written is valid and reads back to the same value, which the schema judges
 * the same way; a failure leaves the buffer as it was and says why. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const schemas[] = {
    "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"object\","
    "\"definitions\":{\"line\":{\"type\":\"object\",\"required\":[\"sku\",\"qty\"],"
    "\"additionalProperties\":false,\"properties\":{\"sku\":{\"type\":\"string\","
    "\"pattern\":\"^[A-Z]+-\\\\d+$\",\"minLength\":3,\"maxLength\":12},"
    "\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000,\"multipleOf\":1}}}},"
    "\"required\":[\"id\"],\"minProperties\":1,\"maxProperties\":8,"
    "\"patternProperties\":{\"^x-\":{\"type\":[\"string\",\"null\"]}},"
    "\"properties\":{\"id\":{\"type\":\"integer\",\"exclusiveMinimum\":0},"
    "\"tier\":{\"enum\":[\"GOLD\",\"SILVER\",null,1.5,{\"a\":[1]}]},\"v\":{\"const\":[1,\"x\"]},"
    "\"price\":{\"type\":\"number\",\"exclusiveMaximum\":1e9,\"multipleOf\":0.01},"
    "\"tags\":{\"type\":\"array\",\"uniqueItems\":true,\"maxItems\":5,\"items\":{\"type\":"
    "\"string\"}},\"pair\":{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"number\"}],"
    "\"items\":false},\"old\":{\"items\":[{\"type\":\"null\"}],\"additionalItems\":"
    "{\"type\":\"boolean\"}},\"items\":{\"type\":\"array\",\"minItems\":1,\"items\":"
    "{\"$ref\":\"#/definitions/line\"}},\"any\":{\"anyOf\":[{\"type\":\"string\"},"
    "{\"allOf\":[{\"type\":\"integer\"},{\"not\":{\"const\":0}}]}]},"
    "\"one\":{\"oneOf\":[{\"multipleOf\":3},{\"multipleOf\":5}]},"
    "\"extra\":{\"additionalProperties\":{\"type\":\"number\"}}}}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}},"
    "\"next\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#\"}]}}}},\"$ref\":\"#/$defs/node\"}",
    "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"type\":\"string\"},"
    "{\"$ref\":\"#/$defs/a\"}]}},\"$ref\":\"#/$defs/a\"}",
    "true",
};
#define NSCHEMAS (sizeof(schemas) / sizeof(schemas[0]))

/* Values the fuzzed schemas are checked against. */
static const char *const values[] = {
    "null",
    "0",
    "-1.5",
    "\"AB-12\"",
    "[1,\"x\",[],{}]",
    "{\"id\":1,\"items\":[{\"sku\":\"A-1\",\"qty\":2}],\"tags\":[\"a\",\"a\"]}",
};
#define NVALUES (sizeof(values) / sizeof(values[0]))

static ks_json_schema_t *compiled[NSCHEMAS];
static json_t *parsed[NVALUES];

/* js's judgement of v: 0 or -1, with an error said on -1; the same the second time. */
static int judge(const ks_json_schema_t *js, json_t *v)
{
    char err[512] = "", again[512] = "";
    int rc = ks_json_schema_check(js, v, err, sizeof(err));
    if (rc && !*err)
        abort();
    if (ks_json_schema_check(js, v, again, sizeof(again)) != rc || (rc && strcmp(err, again)))
        abort();
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    if (!compiled[0]) {
        for (size_t i = 0; i < NSCHEMAS; i++)
            if (!(compiled[i] =
                      ks_json_schema_new(schemas[i], strlen(schemas[i]), err, sizeof(err))))
                abort();
        for (size_t i = 0; i < NVALUES; i++)
            if (!(parsed[i] = json_loads(values[i], JSON_DECODE_ANY, NULL)))
                abort();
    }
    if (size < 1)
        return 0;
    /* An exact-size copy: ASan catches any read past it. */
    size_t n = size - 1;
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy)
        abort();
    memcpy(copy, data + 1, n);
    if (data[0] & 0x80) {
        ks_json_schema_t *js = ks_json_schema_new((const char *)copy, n, err, sizeof(err));
        if (!js && !*err)
            abort();
        for (size_t i = 0; js && i < NVALUES; i++)
            judge(js, parsed[i]);
        ks_json_schema_free(js);
        free(copy);
        return 0;
    }
    const ks_json_schema_t *js = compiled[data[0] % NSCHEMAS];
    ks_jbuf_t b;
    ks_jbuf_init(&b, 64);
    ks_jbuf_lit(&b, "[");
    size_t before = b.len;
    int rc = ks_json_schema_body_json(&b, copy, n, err, sizeof(err));
    if (rc && (b.len != before || !*err))
        abort();
    if (rc == 0) {
        json_t *orig = json_loadb((const char *)copy, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        json_t *back =
            json_loadb(b.p + before, b.len - before, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!orig || !back || !json_equal(orig, back))
            abort();
        if (judge(js, orig) != judge(js, back))
            abort();
        json_decref(orig);
        json_decref(back);
    }
    ks_jbuf_free(&b);
    free(copy);
    return 0;
}
