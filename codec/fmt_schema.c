/* fmt_schema.c: the schema formats: a key or value in the schema wire format (a 0 byte, the
 * schema id, the encoded value) decoded to JSON with the schema the registry serves for its
 * id. Runs on the edge's thread, at encode time, from the registry's cache: the group loop only
 * made sure the schema was fetched before it delivered (group_deliver.c). A value that cannot
 * be decoded is shown as bytes (the auto format) with <field>_decode_error saying why. */
#include <inttypes.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "avro_json.h"
#include "codec.h"
#include "json_schema.h"
#include "proto_json.h"
#include "registry.h"

static _Atomic(ks_registry_t *) codec_registry;

void ks_codec_set_registry(ks_registry_t *r)
{
    atomic_store(&codec_registry, r);
}

ks_registry_t *ks_codec_registry(void)
{
    return atomic_load_explicit(&codec_registry, memory_order_acquire);
}

/* The schema type format want takes alone, or -1 (auto: any). */
static int wanted_type(ks_rec_format_t want)
{
    switch (want) {
    case KS_FMT_AVRO:
    case KS_FMT_AVRO_PLAIN:
        return KS_SCHEMA_AVRO;
    case KS_FMT_JSON_SCHEMA:
        return KS_SCHEMA_JSON;
    case KS_FMT_PROTOBUF:
        return KS_SCHEMA_PROTOBUF;
    default:
        return -1;
    }
}

int ks_codec_schema_decode(ks_jbuf_t *b, const void *data, size_t len, ks_rec_format_t want,
                           int32_t *id, ks_schema_type_t *type, char *err, size_t errsize)
{
    const void *body;
    size_t body_len;
    *id = -1;
    if (ks_wire_split(data, len, id, &body, &body_len, err, errsize) < 0) {
        *id = -1;
        return -1;
    }
    ks_registry_t *reg = ks_codec_registry();
    if (!reg) {
        snprintf(err, errsize, "no schema registry (schema_registry.url is not set)");
        return -1;
    }
    ks_schema_t *s = NULL;
    char why[256] = "";
    switch (ks_registry_get(reg, *id, NULL, &s, why, sizeof(why))) {
    case KS_REG_OK:
        break;
    case KS_REG_PENDING:
        snprintf(err, errsize, "schema_registry: schema id %" PRId32 " is being fetched", *id);
        return -1;
    case KS_REG_UNAVAILABLE:
        snprintf(err, errsize, "schema_registry: schema id %" PRId32 ": %s", *id, why);
        return -1;
    case KS_REG_UNKNOWN:
        snprintf(err, errsize, "unknown schema id %" PRId32 ": %s", *id, why);
        return -1;
    }
    int rc = -1;
    *type = ks_schema_type(s);
    int only = wanted_type(want);
    if (only >= 0 && *type != (ks_schema_type_t)only)
        snprintf(err, errsize, "schema id %" PRId32 " is %s, not %s", *id,
                 ks_schema_type_str(*type), ks_schema_type_str((ks_schema_type_t)only));
    else if (*type == KS_SCHEMA_AVRO)
        rc = ks_avro_wire_json(s, data, len,
                               want == KS_FMT_AVRO_PLAIN ? KS_AVRO_JSON_PLAIN : KS_AVRO_JSON_AVRO,
                               b, err, errsize);
    else if (*type == KS_SCHEMA_JSON)
        rc = ks_json_schema_body_json(b, body, body_len, err, errsize);
    else
        rc = ks_proto_wire_json(s, data, len, b, err, errsize);
    ks_schema_unref(s);
    return rc;
}

/* Writes `,"<field>_<name>":` */
static void field_name(ks_jbuf_t *b, const char *field, const char *name)
{
    ks_jbuf_lit(b, ",\"");
    ks_jbuf_lit(b, field);
    ks_jbuf_lit(b, name);
}

void ks_codec_schema_json(ks_jbuf_t *b, const char *field, const void *data, size_t len,
                          ks_rec_format_t want)
{
    char err[512];
    int32_t id;
    ks_schema_type_t type = KS_SCHEMA_AVRO;
    if (ks_codec_schema_decode(b, data, len, want, &id, &type, err, sizeof(err)) == 0) {
        field_name(b, field, "_encoding\":\"json\"");
        field_name(b, field, "_format\":");
        ks_jbuf_lit(b, "\"");
        ks_jbuf_lit(b, ks_schema_format_str(type));
        ks_jbuf_lit(b, "\"");
        field_name(b, field, "_schema_id\":");
        ks_jbuf_int(b, id);
        return;
    }
    char enc[64];
    snprintf(enc, sizeof(enc), ",\"%s_encoding\":", field);
    ks_codec_fmt_auto.json(b, enc, data, len);
    if (want == KS_FMT_AUTO && id < 0)
        return; /* not in the wire format: bytes, as auto takes them */
    if (id >= 0) {
        field_name(b, field, "_schema_id\":");
        ks_jbuf_int(b, id);
    }
    field_name(b, field, "_decode_error\":");
    ks_jbuf_str(b, err, strlen(err));
}
