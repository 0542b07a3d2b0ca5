/* codec.h: the record codec: a record as every transport presents it, written once. The JSON
 * object of the long-poll, the stream (NDJSON and SSE) and push batches; a one-record push's
 * body and header lines; the key and value bytes gRPC's wire encoder writes. How keys, values
 * and header values are shown is a format: one row of the format table (codec_fmt.c), each
 * format in a file of its own (fmt_bytes.c: auto, text, base64).
 *
 * Every function here runs on the calling edge's own thread and keeps no state: it reads the
 * record (borrowed) and writes into what the caller gives it. */
#ifndef KS_CODEC_H
#define KS_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ack_id.h"
#include "json_out.h"
#include "schema.h"
#include "types.h"

/* One format: one row of the format table. */
typedef struct ks_codec_fmt {
    const char *name; /* as requests name it (HTTP's ?format=) */
    /* Writes data[0..len) (never NULL) as a JSON value, then enc_field (",\"value_encoding\":"
     * or the like) and the name of the encoding the value is in ("text", "base64"). */
    void (*json)(ks_jbuf_t *b, const char *enc_field, const void *data, size_t len);
    /* The bytes a binary transport carries (gRPC's bytes fields, a one-record push's body)
     * for data[0..len), into *out and *out_len; NULL: the record's own bytes, as they are.
     * Returns false when the bytes cannot be shown in this format (the record's own bytes
     * go instead). */
    bool (*bytes)(const void *data, size_t len, const void **out, size_t *out_len);
} ks_codec_fmt_t;

/* How a request or stream wants its records shown; NULL members are the default (auto). */
typedef struct ks_codec_opts {
    const ks_codec_fmt_t *key, *value, *header;
    /* Schema formats of keys and values: 1 + ks_rec_format_t when the request names one; 0:
     * the batch's (its group's group.key_format, group.value_format; ks_codec_opts_for). A
     * schema format decodes what it can and shows the rest in key or value above. */
    uint8_t key_schema, value_schema;
} ks_codec_opts_t;

/* o as req, with the schema formats req leaves open taken from batch b (its group's). */
static inline void ks_codec_opts_for(ks_codec_opts_t *o, const ks_codec_opts_t *req,
                                     const ks_batch_t *b)
{
    *o = *req;
    if (!o->key_schema)
        o->key_schema = (uint8_t)(1 + b->key_format);
    if (!o->value_schema)
        o->value_schema = (uint8_t)(1 + b->value_format);
}

/* ---- the schema formats (fmt_schema.c) ---- */

struct ks_registry;
/* The schema registry the schema formats read from (the daemon's, or NULL: none); set before
 * the edges start, cleared after they stop. */
void ks_codec_set_registry(struct ks_registry *r);
struct ks_registry *ks_codec_registry(void);

/* Appends the JSON of data[0..len), a key or value in the schema wire format, decoded as want
 * with the schema its id names (from the registry's cache, never waiting), to b; *type gets
 * that schema's type. Returns 0, or -1 with err naming the cause (b as it was). *id gets the
 * schema id once known, else -1. */
int ks_codec_schema_decode(ks_jbuf_t *b, const void *data, size_t len, ks_rec_format_t want,
                           int32_t *id, ks_schema_type_t *type, char *err, size_t errsize);

/* Writes data[0..len) decoded as want (field "value" or "key"): the JSON, then
 * <field>_encoding "json", <field>_format and <field>_schema_id; or, when it cannot be decoded,
 * the bytes as the auto format shows them, <field>_schema_id when known, and
 * <field>_decode_error naming the cause. */
void ks_codec_schema_json(ks_jbuf_t *b, const char *field, const void *data, size_t len,
                          ks_rec_format_t want);

/* The format named name, or NULL if there is none. */
const ks_codec_fmt_t *ks_codec_fmt_find(const char *name);

/* The names of every format, "a, b or c", for an error message, into buf. Returns buf. */
const char *ks_codec_fmt_names(char *buf, size_t size);

/* The default: text when the bytes are UTF-8, else base64. */
extern const ks_codec_fmt_t ks_codec_fmt_auto;

/* ---- JSON: the long-poll, the stream, push batches ---- */

/* Writes r as a JSON object (the fields and order of api/openapi.yaml's Record), its ack id
 * through w. o NULL: every format the default. */
void ks_codec_json_record(ks_jbuf_t *b, const ks_record_t *r, const ks_codec_opts_t *o,
                          ks_ack_id_writer_t *w);

/* ---- bytes: gRPC's fields, a one-record push's body ---- */

/* A record's key and value as a binary transport carries them. Pointers are the record's
 * own (or the format's, valid as long as the record). NULL stays NULL (a null key, a
 * tombstone). */
typedef struct ks_codec_view {
    const void *key, *value;
    size_t key_len, value_len;
} ks_codec_view_t;

/* Fills v with r's key and value as o's formats show them to a binary transport. Inline:
 * gRPC's encoder calls it once a record, and the byte formats show the bytes as they are. */
static inline void ks_codec_view(const ks_record_t *r, const ks_codec_opts_t *o, ks_codec_view_t *v)
{
    v->key = r->key;
    v->key_len = r->key_len;
    v->value = r->value;
    v->value_len = r->value_len;
    if (!o)
        return;
    /* The format writes to locals, so v can stay in registers on the path without one. */
    const void *p = NULL;
    size_t n = 0;
    if (o->key && o->key->bytes && r->key && o->key->bytes(r->key, r->key_len, &p, &n)) {
        v->key = p;
        v->key_len = n;
    }
    if (o->value && o->value->bytes && r->value &&
        o->value->bytes(r->value, r->value_len, &p, &n)) {
        v->value = p;
        v->value_len = n;
    }
}

/* ---- HTTP header lines: a one-record push ---- */

/* Receives one header line, "Name: value" (NUL-terminated, len bytes; valid during the call). */
typedef void (*ks_codec_line_fn)(void *ctx, const char *line, size_t len);

/* Writes the line "name: value" with value[0..n)'s bytes outside printable ASCII, and '%', as
 * %XX, so that any key or header value travels in an HTTP header. */
void ks_codec_header(ks_codec_line_fn fn, void *ctx, const char *name, const void *value, size_t n);
/* The same for a decimal number. */
void ks_codec_header_num(ks_codec_line_fn fn, void *ctx, const char *name, int64_t v);

/* The longest tracestate or baggage value written as its own line (W3C baggage's limit). */
#define KS_CODEC_TRACE_VALUE_MAX 8192

/* v[0..n) is a W3C traceparent of version 00: "00-" 32 hex trace id "-" 16 hex parent id "-"
 * 2 hex flags, lower-case, neither id all zero. */
bool ks_codec_traceparent_ok(const char *v, size_t n);

/* The header lines of a one-record push: where the record came from, its attempt and ack id,
 * its key and its own headers (ksidecar-header-NAME, the name escaped as the values are), and
 * its W3C trace context as the same-named lines, as they are: traceparent when the record has
 * exactly one and it is valid, tracestate with it, baggage (printable values up to
 * KS_CODEC_TRACE_VALUE_MAX bytes; others stay only as ksidecar-header-NAME). */
void ks_codec_push_headers(ks_codec_line_fn fn, void *ctx, const ks_record_t *r,
                           const char *ack_id);

/* CloudEvents binary mode (its HTTP binding): a record that is a binary-mode CloudEvent in
 * Kafka (ce_* headers, by the Kafka binding) carries its own attributes, which become ce-*
 * lines; any other record gets ce-specversion 1.0, an id from where it is, a source of its
 * group and topic, a type, and its time. */
void ks_codec_cloudevent_headers(ks_codec_line_fn fn, void *ctx, const ks_record_t *r,
                                 const char *group);

#endif
