/* avro_json.h: Avro binary to JSON text, with the writer's schema: a schema compiled once
 * (parsed by avro-c, then flattened into a table the decoder walks) and values decoded straight
 * into a JSON buffer, in Avro's own JSON encoding or a plain form.
 *
 * JSON as written: records are objects and maps objects; arrays arrays; null, booleans, ints
 * and longs as JSON's; floats (widened to double) and doubles as the shortest decimal that reads
 * back to the same double, but NaN and the infinities, which JSON lacks, as the strings "NaN",
 * "Infinity" and "-Infinity"; strings as strings; bytes and fixed as the Avro spec's JSON
 * encoding has them, a string of one code point U+0000-U+00FF per byte; enums as their symbol.
 * A union is {"type": value} in Avro's encoding (the branch's type name: a named type's full
 * name), its value alone in the plain form; a null branch is null in both.
 *
 * A compiled schema is immutable: any thread may decode with it at once. */
#ifndef KS_AVRO_JSON_H
#define KS_AVRO_JSON_H

#include <stddef.h>

#include "json_out.h"
#include "schema.h"

typedef struct ks_avro ks_avro_t;

/* The writer's schema text[0..len) (Avro's JSON schema) compiled; NULL with err if avro-c
 * refuses it (or it nests deeper than a decode may go). The caller frees it. */
ks_avro_t *ks_avro_new(const char *text, size_t len, char *err, size_t errsize);
void ks_avro_free(ks_avro_t *a);

typedef enum ks_avro_form {
    KS_AVRO_JSON_AVRO,  /* Avro's JSON encoding: unions as {"type": value} */
    KS_AVRO_JSON_PLAIN, /* unions as their value */
} ks_avro_form_t;

/* Appends the JSON of data[0..len), one value in Avro's binary encoding written with a's
 * schema, to b. Returns 0, or -1 with err naming the cause and where ("a string of 40 bytes, 7
 * left (at byte 12, field lines[3].sku)"), b left as it was. Bytes left after the
 * value are an error too. Never reads outside data. */
int ks_avro_decode(const ks_avro_t *a, const void *data, size_t len, ks_avro_form_t form,
                   ks_jbuf_t *b, char *err, size_t errsize);

/* avro-c's parse of a's schema (an avro_schema_t), for the encoder (avro_enc.h): read-only,
 * valid while a is. */
struct avro_obj_t;
struct avro_obj_t *ks_avro_schema(const ks_avro_t *a);

/* How a registry's schema object keeps its compiled Avro schema (ks_schema_parsed). */
extern const ks_schema_parser_t ks_avro_parser;

/* A value in the wire format (a 0 byte, the schema id, the Avro binary) decoded with s, the
 * schema its id names: as ks_avro_decode, after checking the header and that its id is s's.
 * s's compiled form is made on first use and kept in s. */
int ks_avro_wire_json(ks_schema_t *s, const void *data, size_t len, ks_avro_form_t form,
                      ks_jbuf_t *b, char *err, size_t errsize);

#endif
