/* schema_enc.c: a produced key or value from JSON to the wire format (schema_enc.h): the
 * schema looked up in the registry's cache, then Avro through avro_enc.c, Protobuf through
 * proto_enc.c, JSON Schema as the JSON text once json_schema.c finds it fits. */
#include "schema_enc.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "avro_enc.h"
#include "avro_json.h"
#include "proto_json.h"
#include "codec.h"
#include "json_schema.h"

/* The header: a 0 byte, id as 4 bytes big-endian. */
static void put_header(ks_jbuf_t *b, int32_t id)
{
    uint32_t u = (uint32_t)id;
    char h[KS_WIRE_HEADER] = {0, (char)(u >> 24), (char)(u >> 16), (char)(u >> 8), (char)u};
    ks_jbuf_raw(b, h, sizeof(h));
}

/* "schema 7" or "subject orders-value version latest", for messages. */
static void pick_name(const ks_schema_pick_t *p, char *out, size_t size)
{
    if (p->schema)
        snprintf(out, size, "the schema given for subject \"%s\"", p->subject);
    else if (p->id > 0)
        snprintf(out, size, "schema id %" PRId32, p->id);
    else
        snprintf(out, size, "subject \"%s\" version %s", p->subject, p->version);
}

/* Writes v with s (its id known) after the header. */
static ks_status_t encode_with(const char *what, ks_schema_t *s, json_t *v, ks_jbuf_t *b, char *err,
                               size_t errsize)
{
    int32_t id = ks_schema_id(s);
    size_t start = b->len;
    char why[400];
    switch (ks_schema_type(s)) {
    case KS_SCHEMA_AVRO:
    case KS_SCHEMA_PROTOBUF: {
        bool avro = ks_schema_type(s) == KS_SCHEMA_AVRO;
        const void *parsed =
            ks_schema_parsed(s, avro ? &ks_avro_parser : &ks_proto_parser, why, sizeof(why));
        if (!parsed) {
            snprintf(err, errsize, "schema %" PRId32 " does not %s: %s", id,
                     avro ? "compile" : "parse", why);
            return KS_E_INVALID;
        }
        put_header(b, id);
        if (avro ? ks_avro_encode(parsed, v, b, why, sizeof(why))
                 : ks_proto_encode(parsed, v, b, why, sizeof(why))) {
            b->len = start;
            snprintf(err, errsize, "%s does not fit schema %" PRId32 ": %s", what, id, why);
            return KS_E_INVALID;
        }
        return KS_OK;
    }
    default: { /* KS_SCHEMA_JSON */
        /* Checked against the schema (json_schema.h), then the JSON text itself. */
        const ks_json_schema_t *js = ks_schema_parsed(s, &ks_json_schema_parser, why, sizeof(why));
        if (!js) {
            snprintf(err, errsize, "schema %" PRId32 " does not compile: %s", id, why);
            return KS_E_INVALID;
        }
        if (ks_json_schema_check(js, v, why, sizeof(why))) {
            snprintf(err, errsize, "%s does not fit schema %" PRId32 ": %s", what, id, why);
            return KS_E_INVALID;
        }
        size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
        put_header(b, id);
        char *o = ks_jbuf_reserve(b, n);
        json_dumpb(v, o, n, JSON_COMPACT | JSON_ENCODE_ANY);
        b->len += n;
        return KS_OK;
    }
    }
}

int ks_schema_pick_check(const ks_schema_pick_t *pick, const char *what, char *err, size_t errsize)
{
    if (pick->schema && (pick->id || !pick->subject)) {
        snprintf(err, errsize, "%s_schema goes with %s_subject, without %s_schema_id", what, what,
                 what);
        return -1;
    }
    if (pick->id < 0 || (pick->id > 0 && pick->subject)) {
        snprintf(err, errsize,
                 "%s_schema_id must be an integer from 1 to %d, and %s_subject goes without it",
                 what, INT32_MAX, what);
        return -1;
    }
    if (pick->id > 0)
        return 0;
    if (!pick->subject || !*pick->subject) {
        snprintf(err, errsize, "%s_subject must be a subject's name (a string, not empty)", what);
        return -1;
    }
    const char *v = pick->version;
    char *end;
    long n = v && strcmp(v, "latest") ? strtol(v, &end, 10) : 1;
    if (!v || (strcmp(v, "latest") && (*end || end == v || n < 1 || n > INT32_MAX))) {
        snprintf(err, errsize,
                 "%s_schema_version must be \"latest\" or a version from 1 to %d (absent: "
                 "latest)",
                 what, INT32_MAX);
        return -1;
    }
    return 0;
}

ks_schema_enc_res_t ks_schema_encode(const char *what, const ks_schema_pick_t *pick, json_t *v,
                                     const ks_registry_wake_t *wake, ks_jbuf_t *b, ks_status_t *st,
                                     char *err, size_t errsize)
{
    ks_registry_t *reg = ks_codec_registry();
    char name[400], why[400] = "";
    pick_name(pick, name, sizeof(name));
    if (!reg) {
        snprintf(err, errsize, "%s names %s, but no schema registry is set (schema_registry.url)",
                 what, name);
        *st = KS_E_UNAVAILABLE;
        return KS_SENC_DONE;
    }
    ks_schema_t *s = NULL;
    if (pick->schema && !ks_registry_auto_register(reg)) {
        snprintf(err, errsize,
                 "%s gives a schema to register under subject \"%s\", but registering schemas "
                 "is off (schema_registry.auto_register); register it first, or name a schema "
                 "the registry has",
                 what, pick->subject);
        *st = KS_E_INVALID;
        return KS_SENC_DONE;
    }
    ks_registry_status_t rs;
    if (pick->schema)
        rs = ks_registry_register(reg, pick->subject, pick->type, pick->schema, wake, &s, why,
                                  sizeof(why));
    else if (pick->id > 0)
        rs = ks_registry_get(reg, pick->id, wake, &s, why, sizeof(why));
    else
        rs = ks_registry_get_version(reg, pick->subject, pick->version, wake, &s, why, sizeof(why));
    switch (rs) {
    case KS_REG_PENDING:
        return KS_SENC_PENDING;
    case KS_REG_UNAVAILABLE:
        snprintf(err, errsize, "schema_registry: %s could not be fetched: %s", name, why);
        *st = KS_E_UNAVAILABLE;
        return KS_SENC_DONE;
    case KS_REG_UNKNOWN:
        if (pick->schema) { /* refused: invalid, or incompatible with the subject's */
            snprintf(err, errsize, "the schema registry did not register %s: %s", name, why);
            *st = KS_E_INVALID;
            return KS_SENC_DONE;
        }
        snprintf(err, errsize, "the schema registry has no %s: %s", name, why);
        *st = KS_E_NOT_FOUND;
        return KS_SENC_DONE;
    case KS_REG_OK:
        break;
    }
    *st = encode_with(what, s, v, b, err, errsize);
    ks_schema_unref(s);
    return KS_SENC_DONE;
}

ks_schema_enc_res_t ks_schema_encode_rec(const char *what, const ks_schema_pick_t *pick, json_t *v,
                                         const ks_registry_wake_t *wake, char **out, size_t *len,
                                         ks_status_t *rec_st, char *rec_msg, size_t msgsize)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 64);
    ks_status_t st = KS_OK;
    char err[512];
    *out = NULL;
    ks_schema_enc_res_t res = ks_schema_encode(what, pick, v, wake, &b, &st, err, sizeof(err));
    if (res == KS_SENC_DONE && st == KS_OK)
        *out = ks_jbuf_take(&b, len);
    else if (res == KS_SENC_DONE && *rec_st == KS_OK) {
        *rec_st = st;
        snprintf(rec_msg, msgsize, "%s", err);
    }
    ks_jbuf_free(&b);
    return res;
}
