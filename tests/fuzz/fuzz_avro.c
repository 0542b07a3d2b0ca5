/* fuzz_avro.c: libFuzzer harness for Avro binary to JSON (codec/avro_json.c) and back
 * (codec/avro_enc.c), on fixed valid writer's schemas and fuzzed bytes. The first byte picks the
 * schema (every type; a recursive list; a map of arrays of unions) and the form; the rest is the
 * value, decoded alone and, in the wire format, through a registry's schema object. No crash, no
 * leak, no read outside the input; what decodes is valid JSON (jansson parses it whole, or declines
 * only a U+0000 in a map key); what fails leaves the buffer as it was and says why. What decodes,
 * in Avro's JSON encoding, encodes back to bytes that decode to the same JSON. The same bytes read
 * as JSON (when they are) go to the encoder: what encodes decodes. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "avro_enc.h"
#include "avro_json.h"
#include "fuzz_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const schemas[] = {
    "{\"type\":\"record\",\"name\":\"Order\",\"namespace\":\"com.acme\",\"fields\":["
    "{\"name\":\"id\",\"type\":\"long\"},{\"name\":\"qty\",\"type\":\"int\"},"
    "{\"name\":\"price\",\"type\":\"double\"},{\"name\":\"ratio\",\"type\":\"float\"},"
    "{\"name\":\"paid\",\"type\":\"boolean\"},{\"name\":\"nothing\",\"type\":\"null\"},"
    "{\"name\":\"note\",\"type\":\"string\"},{\"name\":\"maybe\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"lines\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
    "\"name\":\"Line\",\"fields\":[{\"name\":\"sku\",\"type\":\"string\"},"
    "{\"name\":\"n\",\"type\":\"int\"}]}}},"
    "{\"name\":\"tags\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"
    "{\"name\":\"status\",\"type\":{\"type\":\"enum\",\"name\":\"Status\","
    "\"symbols\":[\"NEW\",\"SHIPPED\",\"DONE\"]}},"
    "{\"name\":\"blob\",\"type\":\"bytes\"},"
    "{\"name\":\"hash\",\"type\":{\"type\":\"fixed\",\"name\":\"H4\",\"size\":4}},"
    "{\"name\":\"ref\",\"type\":[\"null\",\"Line\",\"Status\"]}]}",
    "{\"type\":\"record\",\"name\":\"Node\",\"fields\":[{\"name\":\"v\",\"type\":\"int\"},"
    "{\"name\":\"next\",\"type\":[\"null\",\"Node\"]}]}",
    "{\"type\":\"map\",\"values\":{\"type\":\"array\",\"items\":[\"null\",\"int\",\"bytes\","
    "{\"type\":\"array\",\"items\":\"null\"}]}}",
};
#define NSCHEMAS (sizeof(schemas) / sizeof(schemas[0]))

static ks_avro_t *compiled[NSCHEMAS];
static ks_schema_t *objects[NSCHEMAS];

/* data[0..n) decodes (Avro's JSON encoding) to JSON that encodes back to bytes decoding to
 * the same JSON, as jansson reads it (a map's key written twice is one key to it). A decode
 * that fails, or JSON jansson declines (U+0000 in a map key), is left out. */
static void round_trip(const ks_avro_t *a, const uint8_t *data, size_t n)
{
    ks_jbuf_t first, bin, second;
    char err[512];
    ks_jbuf_init(&first, 64);
    ks_jbuf_init(&bin, 64);
    ks_jbuf_init(&second, 64);
    json_t *j = NULL;
    if (ks_avro_decode(a, data, n, KS_AVRO_JSON_AVRO, &first, err, sizeof(err)) == 0 &&
        (j = json_loadb(first.p, first.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL))) {
        json_t *j2 = NULL;
        if (ks_avro_encode(a, j, &bin, err, sizeof(err)) ||
            ks_avro_decode(a, bin.p, bin.len, KS_AVRO_JSON_AVRO, &second, err, sizeof(err)) ||
            !(j2 = json_loadb(second.p, second.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL)) ||
            !json_equal(j, j2))
            abort();
        json_decref(j2);
    }
    json_decref(j);
    ks_jbuf_free(&first);
    ks_jbuf_free(&bin);
    ks_jbuf_free(&second);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!compiled[0]) {
        char err[256];
        for (size_t i = 0; i < NSCHEMAS; i++) {
            compiled[i] = ks_avro_new(schemas[i], strlen(schemas[i]), err, sizeof(err));
            objects[i] = ks_schema_new(0, KS_SCHEMA_AVRO, schemas[i], strlen(schemas[i]), NULL);
            if (!compiled[i])
                abort();
        }
    }
    if (size < 1)
        return 0;
    size_t which = data[0] % NSCHEMAS;
    ks_avro_form_t form = data[0] & 0x80 ? KS_AVRO_JSON_PLAIN : KS_AVRO_JSON_AVRO;
    size_t n = size - 1;
    uint8_t *copy = fuzz_copy(data + 1, n);
    ks_jbuf_t b;
    ks_jbuf_init(&b, 64);
    ks_jbuf_lit(&b, "[");
    char err[512] = "";
    size_t before = b.len;
    int rc = ks_avro_decode(compiled[which], copy, n, form, &b, err, sizeof(err));
    fuzz_check_json(rc, &b, before, err);
    /* The same bytes as a value in the wire format, with the schema kept in its object. */
    before = b.len;
    err[0] = '\0';
    rc = ks_avro_wire_json(objects[which], copy, n, form, &b, err, sizeof(err));
    fuzz_check_json(rc, &b, before, err);
    if (form == KS_AVRO_JSON_AVRO)
        round_trip(compiled[which], copy, n);
    json_t *j = json_loadb((const char *)copy, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (j) {
        ks_jbuf_t bin, out;
        ks_jbuf_init(&bin, 64);
        ks_jbuf_init(&out, 64);
        if (ks_avro_encode(compiled[which], j, &bin, err, sizeof(err)) == 0 &&
            ks_avro_decode(compiled[which], bin.p, bin.len, form, &out, err, sizeof(err)))
            abort(); /* what encodes must decode */
        ks_jbuf_free(&bin);
        ks_jbuf_free(&out);
        json_decref(j);
    }
    ks_jbuf_free(&b);
    free(copy);
    return 0;
}
