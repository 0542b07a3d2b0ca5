/* json_schema.h: JSON Schema for produce and consume: a registry's JSON Schema compiled once
 * (jansson's parse, each subschema a node, patterns through regcomp, $refs resolved) and a
 * JSON value checked against it; and the value after the wire header as compact JSON.
 *
 * Keywords checked: type (a name or an array of names; "integer" is a number with no
 * fraction), properties, patternProperties, additionalProperties (a boolean or a schema),
 * required, minProperties, maxProperties, items (a schema, or an array: the older tuple form,
 * with additionalItems after it), prefixItems (then items for the rest), minItems, maxItems,
 * uniqueItems, enum, const, minimum, maximum, exclusiveMinimum, exclusiveMaximum (a number, or
 * draft 4's boolean), multipleOf, minLength and maxLength (in code points), pattern, allOf,
 * anyOf, oneOf, not, and $ref to a JSON pointer within the document ("#",
 * "#/definitions/x", "#/$defs/x"; siblings of a $ref are checked too). Boolean schemas count.
 * Every other keyword (format, dependencies, if/then/else, contains, $id, ...) is ignored.
 *
 * pattern and patternProperties are POSIX extended regular expressions (regex.h), not
 * ECMA-262: \d \D \w \W \s \S are taken (outside brackets; \d \w \s inside), and a pattern
 * regcomp refuses (lookaround) or that repeats past a bound (regcomp copies each repeat) makes
 * the schema not compile. Matching is by byte, unanchored, as JSON Schema's.
 *
 * A compiled schema is immutable: any thread may check with it at once. */
#ifndef KS_JSON_SCHEMA_H
#define KS_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "json_out.h"
#include "schema.h"

typedef struct ks_json_schema ks_json_schema_t;

/* The schema text[0..len) compiled; NULL with err (where in the schema and what is wrong) if
 * it is not JSON, not a schema (an object or a boolean), a checked keyword has the wrong form,
 * a $ref leads nowhere, a pattern does not compile or it nests deeper than 128. The caller
 * frees it. */
ks_json_schema_t *ks_json_schema_new(const char *text, size_t len, char *err, size_t errsize);
void ks_json_schema_free(ks_json_schema_t *js);

/* Whether v (borrowed) fits js: 0, or -1 with err naming where in v (a JSON pointer) and what
 * is wrong: `/items/2/qty: 0 is less than minimum 1`, `the value: ...` at the top. A value
 * nested deeper than 128, or a $ref loop that does not end, fails. */
int ks_json_schema_check(const ks_json_schema_t *js, json_t *v, char *err, size_t errsize);

/* v as short text for a message: "an object", "an array", or its JSON (cut to size with
 * "..."). Returns buf or a constant. */
const char *ks_json_show(json_t *v, char *buf, size_t size);

/* How a registry's schema object keeps its compiled JSON Schema (ks_schema_parsed). */
extern const ks_schema_parser_t ks_json_schema_parser;

/* Appends the compact JSON (one line, as the stream needs) of body[0..n), a JSON Schema
 * value after the wire header, to b, NUL-terminated. Returns 0, or -1 with err when it does
 * not parse (the position counted from the header's start), b left as it was. */
int ks_json_schema_body_json(ks_jbuf_t *b, const void *body, size_t n, char *err, size_t errsize);

#endif
