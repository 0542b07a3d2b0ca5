/* proto_enc.c: JSON to Protobuf binary (proto_json.h): a JSON object taken by Protobuf's JSON
 * mapping, fields by their JSON or original names, written in the JSON's order; a nested
 * message is written into a buffer of its own, then copied after its length. proto3 fields
 * without presence are left out at their zero value, as protobuf's own serializers do. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "field_path.h"
#include "proto_json.h"
#include "proto_wire.h"

#define MAX_DEPTH 64

typedef struct enc {
    const ks_proto_t *p;
    int depth;
    ks_field_path_t path; /* "lines[1].sku": the field being written */
} enc_t;

/* Fills the error, naming the field the path is at. Returns -1. */
#define efail(e, ...) ks_field_path_fail(&(e)->path, "", __VA_ARGS__)

/* Appends ".name" (or "name" first) to the path; returns the length to go back to. */
static size_t path_push(enc_t *e, const char *name)
{
    return ks_field_path_name(&e->path, name);
}

static void put_varint(ks_jbuf_t *b, uint64_t v)
{
    char s[10];
    size_t n = 0;
    while (v >= 0x80) {
        s[n++] = (char)(v | 0x80);
        v >>= 7;
    }
    s[n++] = (char)v;
    ks_jbuf_raw(b, s, n);
}

static void put_fixed(ks_jbuf_t *b, uint64_t v, size_t width)
{
    char s[8];
    for (size_t i = 0; i < width; i++)
        s[i] = (char)(v >> (8 * i));
    ks_jbuf_raw(b, s, width);
}

/* A JSON value as text for messages: a string quoted, else its JSON. */
static void show(json_t *v, char *out, size_t size)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(out, size, "%.60s%s", s ? s : "?", s && strlen(s) > 60 ? "..." : "");
    free(s);
}

/* v as an integer: a JSON integer, a real with no fraction, or a string of decimal digits.
 * *neg and *mag: its sign and magnitude. */
static int get_integer(enc_t *e, json_t *v, int *neg, uint64_t *mag)
{
    char shown[100];
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        *neg = i < 0;
        *mag = i < 0 ? -(uint64_t)i : (uint64_t)i;
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 18446744073709551616.0) {
            *neg = d < 0;
            *mag = (uint64_t)fabs(d);
            return 0;
        }
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v), *digits = s + (*s == '-');
        char *end;
        errno = 0;
        unsigned long long u = *digits >= '0' && *digits <= '9' ? strtoull(digits, &end, 10) : 0;
        if (*digits >= '0' && *digits <= '9' && !*end && !errno) {
            *neg = *s == '-' && u;
            *mag = u;
            return 0;
        }
    }
    show(v, shown, sizeof(shown));
    return efail(e, "%s is not an integer", shown);
}

/* v as a signed integer in [lo, hi]. */
static int get_signed(enc_t *e, json_t *v, int64_t lo, int64_t hi, int64_t *out)
{
    int neg;
    uint64_t mag;
    char shown[100];
    if (get_integer(e, v, &neg, &mag))
        return -1;
    if (neg ? mag - 1 > (uint64_t)(-(lo + 1)) : mag > (uint64_t)hi) {
        show(v, shown, sizeof(shown));
        return efail(e, "%s is out of range (%" PRId64 " to %" PRId64 ")", shown, lo, hi);
    }
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return 0;
}

/* v as an unsigned integer up to hi. */
static int get_unsigned(enc_t *e, json_t *v, uint64_t hi, uint64_t *out)
{
    int neg;
    uint64_t mag;
    char shown[100];
    if (get_integer(e, v, &neg, &mag))
        return -1;
    if (neg || mag > hi) {
        show(v, shown, sizeof(shown));
        return efail(e, "%s is out of range (0 to %" PRIu64 ")", shown, hi);
    }
    *out = mag;
    return 0;
}

/* v as a double: a number, or "NaN", "Infinity", "-Infinity", or a number as a string. */
static int get_double(enc_t *e, json_t *v, double *out)
{
    char shown[100];
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        if (!strcmp(s, "NaN") || !strcmp(s, "Infinity") || !strcmp(s, "-Infinity")) {
            *out = s[0] == 'N' ? NAN : s[0] == '-' ? -INFINITY : INFINITY;
            return 0;
        }
        *out = strtod(s, &end);
        if (*s && !*end && isfinite(*out))
            return 0;
    }
    show(v, shown, sizeof(shown));
    return efail(e, "%s is not a number", shown);
}

/* An enum value: its name, or a number. */
static int get_enum(enc_t *e, const ks_pb_enum_t *en, json_t *v, int64_t *out)
{
    if (json_is_string(v)) {
        for (size_t i = 0; i < en->nvalues; i++)
            if (!strcmp(en->values[i].name, json_string_value(v))) {
                *out = en->values[i].number;
                return 0;
            }
        return efail(e, "\"%.60s\" is not a value of enum %s", json_string_value(v), en->full_name);
    }
    return get_signed(e, v, INT32_MIN, INT32_MAX, out);
}

/* The wire bits of a number, bool or enum value v of field f. */
static int scalar_bits(enc_t *e, const ks_pb_field_t *f, json_t *v, uint64_t *bits)
{
    int64_t i = 0;
    double d;
    int rc = 0;
    switch (f->type) {
    case KS_PB_INT32:
    case KS_PB_SFIXED32:
    case KS_PB_SINT32:
        rc = get_signed(e, v, INT32_MIN, INT32_MAX, &i);
        *bits = f->type == KS_PB_SINT32     ? (uint32_t)((uint32_t)i << 1 ^ (uint32_t)(i >> 31))
                : f->type == KS_PB_SFIXED32 ? (uint32_t)i
                                            : (uint64_t)i;
        return rc;
    case KS_PB_INT64:
    case KS_PB_SFIXED64:
    case KS_PB_SINT64:
        rc = get_signed(e, v, INT64_MIN, INT64_MAX, &i);
        *bits = f->type == KS_PB_SINT64 ? (uint64_t)i << 1 ^ (uint64_t)(i >> 63) : (uint64_t)i;
        return rc;
    case KS_PB_UINT32:
    case KS_PB_FIXED32:
        return get_unsigned(e, v, UINT32_MAX, bits);
    case KS_PB_UINT64:
    case KS_PB_FIXED64:
        return get_unsigned(e, v, UINT64_MAX, bits);
    case KS_PB_ENUM:
        rc = get_enum(e, &e->p->enums[f->ref], v, &i);
        *bits = (uint64_t)i;
        return rc;
    case KS_PB_BOOL:
        if (!json_is_boolean(v) && !(json_is_string(v) && (!strcmp(json_string_value(v), "true") ||
                                                           !strcmp(json_string_value(v), "false"))))
            return efail(e, "not true or false");
        *bits = json_is_true(v) || (json_is_string(v) && json_string_value(v)[0] == 't');
        return 0;
    case KS_PB_FLOAT: {
        if (get_double(e, v, &d))
            return -1;
        if (isfinite(d) && fabs(d) > FLT_MAX)
            return efail(e, "%g is out of a float's range", d);
        float x = (float)d;
        uint32_t u;
        memcpy(&u, &x, sizeof(u));
        *bits = u;
        return 0;
    }
    default: /* KS_PB_DOUBLE */
        if (get_double(e, v, &d))
            return -1;
        memcpy(bits, &d, sizeof(*bits));
        return 0;
    }
}

/* Writes bits as field type t's wire form (varint, 4 or 8 bytes). */
static void put_bits(ks_jbuf_t *b, ks_pb_type_t t, uint64_t bits)
{
    switch (t) {
    case KS_PB_FIXED32:
    case KS_PB_SFIXED32:
    case KS_PB_FLOAT:
        put_fixed(b, bits, 4);
        return;
    case KS_PB_FIXED64:
    case KS_PB_SFIXED64:
    case KS_PB_DOUBLE:
        put_fixed(b, bits, 8);
        return;
    default:
        put_varint(b, bits);
    }
}

static void put_tag(ks_jbuf_t *b, uint32_t number, int wt)
{
    put_varint(b, (uint64_t)number << 3 | (unsigned)wt);
}

/* A length-delimited field: tag, length, data. */
static void put_len(ks_jbuf_t *b, uint32_t number, const void *data, size_t n)
{
    put_tag(b, number, KS_WT_LEN);
    put_varint(b, n);
    ks_jbuf_raw(b, data, n);
}

/* base64, standard or URL-safe, padded or not, decoded (the caller frees it), or NULL. */
static unsigned char *bytes_of(const char *s, size_t n, size_t *len)
{
    char *t = malloc(n + 4);
    if (!t)
        abort();
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        t[m++] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
    while (m % 4)
        t[m++] = '=';
    unsigned char *d = ks_b64_decode(t, m, len);
    free(t);
    return d;
}

static int encode_msg(enc_t *e, int mi, json_t *obj, ks_jbuf_t *b);

/* One value v of field f (not a map) as field number: tag and value. elide: leave a zero
 * value out (a proto3 field without presence). */
static int put_one(enc_t *e, const ks_pb_field_t *f, uint32_t number, json_t *v, bool elide,
                   ks_jbuf_t *b)
{
    if (f->type == KS_PB_STRING) {
        if (!json_is_string(v))
            return efail(e, "not a string");
        size_t n = json_string_length(v);
        if (n || !elide)
            put_len(b, number, json_string_value(v), n);
        return 0;
    }
    if (f->type == KS_PB_BYTES) {
        size_t n;
        unsigned char *d =
            json_is_string(v) ? bytes_of(json_string_value(v), json_string_length(v), &n) : NULL;
        if (!d)
            return efail(e, "not a base64 string");
        if (n || !elide)
            put_len(b, number, d, n);
        free(d);
        return 0;
    }
    if (f->type == KS_PB_MESSAGE) {
        ks_jbuf_t sub;
        ks_jbuf_init(&sub, 64);
        int rc = encode_msg(e, f->ref, v, &sub);
        if (!rc)
            put_len(b, number, sub.p, sub.len);
        ks_jbuf_free(&sub);
        return rc;
    }
    uint64_t bits;
    if (scalar_bits(e, f, v, &bits))
        return -1;
    if (bits || !elide) {
        put_tag(b, number, ks_pb_wire_type(f->type));
        put_bits(b, f->type, bits);
    }
    return 0;
}

/* A map field: an object, each member an entry message {key = 1, value = 2}. */
static int put_map(enc_t *e, const ks_pb_field_t *f, json_t *v, ks_jbuf_t *b)
{
    if (!json_is_object(v))
        return efail(e, "not an object (a map)");
    const ks_pb_msg_t *m = &e->p->msgs[f->ref];
    const ks_pb_field_t *kf = ks_pb_field_by_number(m, 1), *vf = ks_pb_field_by_number(m, 2);
    const char *key;
    json_t *val;
    ks_jbuf_t entry;
    ks_jbuf_init(&entry, 64);
    int rc = 0;
    json_object_foreach(v, key, val)
    {
        size_t at = path_push(e, key);
        json_t *k = json_string(key);
        entry.len = 0;
        rc = !kf || !vf ? efail(e, "the map's entry message lacks its key or value")
             : json_is_null(val)
                 ? efail(e, "null is not a map's value")
                 : put_one(e, kf, 1, k, false, &entry) || put_one(e, vf, 2, val, false, &entry);
        json_decref(k);
        ks_field_path_pop(&e->path, at);
        if (rc)
            break;
        put_len(b, f->number, entry.p, entry.len);
    }
    ks_jbuf_free(&entry);
    return rc ? -1 : 0;
}

/* A repeated field: an array, packed into one LEN when f is, else one tag an item. */
static int put_repeated(enc_t *e, const ks_pb_field_t *f, json_t *v, ks_jbuf_t *b)
{
    if (!json_is_array(v))
        return efail(e, "not an array");
    bool packed = f->packed && ks_pb_wire_type(f->type) != KS_WT_LEN;
    ks_jbuf_t pk;
    ks_jbuf_init(&pk, 32);
    size_t i;
    json_t *item;
    int rc = 0;
    json_array_foreach(v, i, item)
    {
        size_t at = ks_field_path_push(&e->path, "[%zu]", i);
        uint64_t bits;
        if (json_is_null(item))
            rc = efail(e, "null is not an item");
        else if (!packed)
            rc = put_one(e, f, f->number, item, false, b);
        else if (!(rc = scalar_bits(e, f, item, &bits)))
            put_bits(&pk, f->type, bits);
        ks_field_path_pop(&e->path, at);
        if (rc)
            break;
    }
    if (!rc && pk.len)
        put_len(b, f->number, pk.p, pk.len);
    ks_jbuf_free(&pk);
    return rc;
}

/* Whether obj gives another member of f's oneof (not null). */
static bool oneof_twice(const ks_pb_msg_t *m, const ks_pb_field_t *f, json_t *obj)
{
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        const ks_pb_field_t *g = ks_pb_field_by_name(m, key, strlen(key));
        if (g && g != f && g->oneof == f->oneof && !json_is_null(val))
            return true;
    }
    return false;
}

/* Message mi from obj, its fields appended to b. */
static int encode_msg(enc_t *e, int mi, json_t *obj, ks_jbuf_t *b)
{
    const ks_pb_msg_t *m = &e->p->msgs[mi];
    if (!json_is_object(obj))
        return efail(e, "not an object (message %s)", m->full_name);
    if (e->depth >= MAX_DEPTH)
        return efail(e, "messages nest deeper than %d", MAX_DEPTH);
    e->depth++;
    const char *key;
    json_t *val;
    int rc = 0;
    json_object_foreach(obj, key, val)
    {
        const ks_pb_field_t *f = ks_pb_field_by_name(m, key, strlen(key));
        size_t at = path_push(e, key);
        if (!f)
            rc = efail(e, "message %s has no such field", m->full_name);
        else if (json_is_null(val))
            rc = 0; /* null: the field unset */
        else if (f->oneof >= 0 && oneof_twice(m, f, obj))
            rc = efail(e, "another field of its oneof is given too");
        else if (f->repeated && f->type == KS_PB_MESSAGE && e->p->msgs[f->ref].map_entry)
            rc = put_map(e, f, val, b);
        else if (f->repeated)
            rc = put_repeated(e, f, val, b);
        else
            rc = put_one(e, f, f->number, val, !f->presence, b);
        ks_field_path_pop(&e->path, at);
        if (rc)
            break;
    }
    e->depth--;
    return rc ? -1 : 0;
}

int ks_proto_encode(const ks_proto_t *p, json_t *v, ks_jbuf_t *b, char *err, size_t errsize)
{
    enc_t e = {.p = p, .path = {.err = err, .errsize = errsize}};
    size_t start = b->len;
    ks_jbuf_raw(b, "", 1); /* the message indexes: [0], the first message */
    if (encode_msg(&e, p->top[0], v, b)) {
        b->len = start;
        if (b->p)
            b->p[start] = '\0';
        return -1;
    }
    return 0;
}
