/* avro_enc.h: JSON to Avro binary, with the schema a value is written with: the other way of
 * avro_json.h, for produce. It takes what the decoder writes (Avro's JSON encoding, unions as
 * {"type": value}) and, where a union's branch is plain to see, the value alone.
 *
 * JSON taken: null; booleans; ints and longs as JSON integers (a long all 64 bits: jansson
 * reads integers as long long); floats and doubles as JSON numbers, or "NaN", "Infinity",
 * "-Infinity"; strings; bytes and fixed as a string of code points U+0000-U+00FF, one a byte;
 * an enum's symbol; arrays; maps and records as objects. A record's field that is absent is
 * null when its type is a union with null, else an error (avro-c keeps no defaults); a field
 * the record lacks is an error. A union takes null for its null branch, {"T": value} with T
 * one of its branches' names, or a value the first branch it fits takes. */
#ifndef KS_AVRO_ENC_H
#define KS_AVRO_ENC_H

#include <jansson.h>
#include <stddef.h>

#include "avro_json.h"
#include "json_out.h"

/* Appends v (borrowed) in Avro's binary encoding with a's schema to b. Returns 0, or -1 with
 * err naming the field and what is wrong (`field "customer.tier": "PLATINUM" is not a symbol
 * of enum com.acme.Tier`), b left as it was. Any thread (a is read-only). */
int ks_avro_encode(const ks_avro_t *a, json_t *v, ks_jbuf_t *b, char *err, size_t errsize);

#endif
