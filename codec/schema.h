/* schema.h: a schema as a schema registry serves it (reference-counted, immutable but for the
 * parsed form a decoder keeps in it), and Confluent's wire format, which names one by id. */
#ifndef KS_SCHEMA_H
#define KS_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

/* ---- schemas ---- */

/* What a schema is written in: the registry's schemaType (absent means Avro). */
typedef enum ks_schema_type {
    KS_SCHEMA_AVRO,
    KS_SCHEMA_JSON,
    KS_SCHEMA_PROTOBUF,
} ks_schema_type_t;

/* "AVRO", "JSON", "PROTOBUF": the registry's names. */
const char *ks_schema_type_str(ks_schema_type_t t);
/* "avro", "json_schema", "protobuf": how a decoded value's format is named to clients. */
const char *ks_schema_format_str(ks_schema_type_t t);
/* The type named s (the registry's names), or -1. */
int ks_schema_type_from_str(const char *s);

typedef struct ks_schema ks_schema_t;

/* A new schema (one reference) of id (the registry's; 0: not known yet) with a copy of
 * text[0..len) and, if not NULL, of references (the registry's "references" array as JSON
 * text). Never fails (aborts when out of memory). */
ks_schema_t *ks_schema_new(int32_t id, ks_schema_type_t type, const char *text, size_t len,
                           const char *references);
/* Another reference to s; returns s. */
ks_schema_t *ks_schema_ref(ks_schema_t *s);
/* Drops a reference; the last frees s and its parsed form. NULL is ignored. */
void ks_schema_unref(ks_schema_t *s);

int32_t ks_schema_id(const ks_schema_t *s);
ks_schema_type_t ks_schema_type(const ks_schema_t *s);
/* The schema's text (NUL-terminated; *len its length if len is not NULL). */
const char *ks_schema_text(const ks_schema_t *s, size_t *len);
/* The registry's "references" array as JSON text, or NULL when it gave none. */
const char *ks_schema_references(const ks_schema_t *s);

/* How a decoder makes its parsed form of a schema of its type (avro_json.c's compiled Avro
 * schema). */
typedef struct ks_schema_parser {
    ks_schema_type_t type; /* a schema of another type fails: "schema 7 is JSON, not AVRO" */
    /* Returns the parsed form of text[0..len), or NULL with err filled. Runs on the caller's
     * thread. */
    void *(*parse)(const char *text, size_t len, char *err, size_t errsize);
    void (*free)(void *parsed);
} ks_schema_parser_t;

/* s's parsed form made by p: made on the first call, kept in s for every later one and freed
 * with s. A schema that does not parse fails each later call with the same error, unparsed
 * again. Returns it (valid while the caller holds s), or NULL with err. One parser per schema:
 * a second one gets NULL and an error. Any thread; concurrent first calls parse once. */
const void *ks_schema_parsed(ks_schema_t *s, const ks_schema_parser_t *p, char *err,
                             size_t errsize);

/* ---- the wire format ---- */

/* The bytes before a schema-encoded value in Confluent's wire format: a 0 byte, then the
 * schema id as 4 bytes big-endian. */
#define KS_WIRE_HEADER 5

/* Splits data[0..len), a key or value in Confluent's wire format, into its schema id and the
 * encoded value after the header (*body, *body_len, within data). Returns 0, or -1 with err
 * saying what is wrong (too short, another first byte). Protobuf's message indexes, which
 * follow the header, are the body's. */
int ks_wire_split(const void *data, size_t len, int32_t *id, const void **body, size_t *body_len,
                  char *err, size_t errsize);

/* data[0..len), a value in the wire format, split (as ks_wire_split) and s's parsed form made by
 * p (as ks_schema_parsed), after checking that the value names s's id (when s has one). Returns
 * the parsed form, or NULL with err. */
const void *ks_wire_parsed(ks_schema_t *s, const ks_schema_parser_t *p, const void *data,
                           size_t len, const void **body, size_t *body_len, char *err,
                           size_t errsize);

#endif
