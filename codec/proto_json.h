/* proto_json.h: Protobuf binary to JSON text, and JSON to Protobuf binary, with a parsed schema
 * (proto_schema.h), by Protobuf's JSON mapping as json_format.MessageToDict gives it by default:
 * fields by their JSON names (lowerCamelCase), 64-bit integers as strings, bytes as base64,
 * enums by name (their number when the schema has none), floats as JSON numbers but NaN and the
 * infinities as strings; proto3 fields without presence left out at their zero value; repeated
 * fields read packed or not; maps as objects; unknown fields skipped.
 *
 * In Confluent's wire format a message's indexes come after the header: a zigzag varint count,
 * then that many zigzag varints, the path to the message (the first top-level one is [0], and
 * a count of 0 means it too). */
#ifndef KS_PROTO_JSON_H
#define KS_PROTO_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "json_out.h"
#include "proto_schema.h"

/* Appends the JSON of data[0..len), message indexes then one message, to b. Returns 0, or -1
 * with err naming the cause and the field ("field lines.sku: a string of 40 bytes, 7 left"),
 * b left as it was. Never reads outside data. */
int ks_proto_decode(const ks_proto_t *p, const void *data, size_t len, ks_jbuf_t *b, char *err,
                    size_t errsize);

/* A value in the wire format (a 0 byte, the schema id, the indexes, the message) decoded with
 * s, the schema its id names, parsed on first use and kept in s. */
int ks_proto_wire_json(ks_schema_t *s, const void *data, size_t len, ks_jbuf_t *b, char *err,
                       size_t errsize);

/* v (a JSON object, borrowed) written as the schema's first message: its message indexes ([0],
 * one 0 byte), then the message, appended to b. Fields by JSON or original name; 64-bit
 * integers as strings or numbers; enums by name or number; bytes as base64 (standard or
 * URL-safe, padded or not); floats as numbers or "NaN", "Infinity", "-Infinity"; null as the
 * field unset. Returns 0, or -1 with err naming the field that does not fit ("field
 * \"lines[1].n\": \"x\" is not an integer"), b left as it was. */
int ks_proto_encode(const ks_proto_t *p, json_t *v, ks_jbuf_t *b, char *err, size_t errsize);

#endif
