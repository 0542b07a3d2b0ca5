/* proto_json.c: Protobuf binary to JSON (proto_json.h). A message is checked whole first (every
 * tag and length within its bytes) in the pass that notes where each of its fields occurs
 * (first and last), then its fields are written in number order, each from its occurrences:
 * the last one for a singular field, all of them (walked from its first to its last) for a
 * repeated one, the latest member for a oneof. Nesting is bounded by MAX_DEPTH. */
#include "proto_json.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "field_path.h"
#include "proto_wire.h"

#define MAX_DEPTH 64

typedef struct dec {
    const ks_proto_t *p;
    ks_jbuf_t *b;
    int depth;
    ks_field_path_t path; /* the fields' names down to the one being read */
} dec_t;

/* Fills the error, naming the field the path is at. Returns -1. */
#define fail(d, ...) ks_field_path_fail(&(d)->path, "", __VA_ARGS__)

/* One occurrence of a field: wire type, the varint or fixed value, or the bytes. */
typedef struct occ {
    int wt;
    uint64_t v;
    const uint8_t *s;
    size_t n;
} occ_t;

/* The next field at *p (before end), numbered *num, into o. Only called on checked bytes. */
static void next_field(const uint8_t **p, const uint8_t *end, uint32_t *num, occ_t *o)
{
    uint64_t tag = 0;
    ks_pb_varint(p, end, &tag);
    *num = (uint32_t)(tag >> 3);
    o->wt = (int)(tag & 7);
    const uint8_t *at = *p;
    ks_pb_skip(p, end, o->wt);
    o->v = 0;
    if (o->wt == KS_WT_VARINT)
        ks_pb_varint(&at, end, &o->v);
    else if (o->wt == KS_WT_I64 || o->wt == KS_WT_I32)
        for (int i = (o->wt == KS_WT_I64 ? 8 : 4) - 1; i >= 0; i--)
            o->v = o->v << 8 | at[i];
    else if (o->wt == KS_WT_LEN) {
        ks_pb_varint(&at, end, &o->v);
        o->s = at;
        o->n = (size_t)o->v;
    }
}

/* Whether occurrence o (wire type) can be field f's: its own wire type, or packed. */
static bool fits(const ks_pb_field_t *f, int wt)
{
    int own = ks_pb_wire_type(f->type);
    return wt == own || (f->repeated && own != KS_WT_LEN && wt == KS_WT_LEN);
}

/* Where one of a message's fields occurs in its bytes: the start of its first and of its last
 * occurrence (with a wire type it takes), and the last one read. */
typedef struct seen {
    const uint8_t *first, *last_at;
    occ_t last;
} seen_t;

/* Checks that s[0..e) is a run of well-formed fields and, with m and seen (m->nfields, zeroed),
 * notes where each of m's fields occurs. */
static int check_fields(dec_t *d, const uint8_t *s, const uint8_t *e, const ks_pb_msg_t *m,
                        seen_t *seen)
{
    const uint8_t *p = s;
    while (p < e) {
        uint64_t tag;
        const uint8_t *at = p;
        if (!ks_pb_varint(&p, e, &tag) || tag >> 3 == 0 || tag >> 3 > 536870911)
            return fail(d, "a corrupt tag (at byte %zu of the message)", (size_t)(at - s));
        if (!ks_pb_skip(&p, e, (int)(tag & 7)))
            return fail(d,
                        "field number %u: wire type %d runs past the end or is not one "
                        "(at byte %zu of the message)",
                        (unsigned)(tag >> 3), (int)(tag & 7), (size_t)(at - s));
        const ks_pb_field_t *f = m ? ks_pb_field_by_number(m, (uint32_t)(tag >> 3)) : NULL;
        if (!f || !fits(f, (int)(tag & 7)))
            continue; /* unknown: skipped */
        seen_t *w = &seen[f - m->fields];
        const uint8_t *q = at;
        uint32_t num;
        next_field(&q, e, &num, &w->last);
        w->last_at = at;
        if (!w->first)
            w->first = at;
    }
    return 0;
}

/* Whether another member of f's oneof occurs after f's last occurrence. */
static bool superseded(const ks_pb_msg_t *m, const ks_pb_field_t *f, const seen_t *seen)
{
    const uint8_t *at = seen[f - m->fields].last_at;
    for (size_t i = 0; i < m->nfields; i++)
        if (&m->fields[i] != f && m->fields[i].oneof == f->oneof && seen[i].last_at > at)
            return true;
    return false;
}

static int message(dec_t *d, int mi, const uint8_t *s, const uint8_t *e);

static int put_enum(dec_t *d, const ks_pb_field_t *f, int32_t n)
{
    const char *name = ks_pb_enum_name(&d->p->enums[f->ref], n);
    if (name)
        ks_jbuf_str(d->b, name, strlen(name));
    else
        ks_jbuf_int(d->b, n);
    return 0;
}

/* A 64-bit integer as a JSON string of its decimal (signed or not). */
static void put_quoted(ks_jbuf_t *b, uint64_t v, bool is_signed)
{
    char s[32];
    int n = is_signed ? snprintf(s, sizeof(s), "\"%" PRId64 "\"", (int64_t)v)
                      : snprintf(s, sizeof(s), "\"%" PRIu64 "\"", v);
    ks_jbuf_raw(b, s, (size_t)n);
}

/* A scalar of field f from its varint or fixed bits v. */
static int put_number(dec_t *d, const ks_pb_field_t *f, uint64_t v)
{
    ks_jbuf_t *b = d->b;
    switch (f->type) {
    case KS_PB_INT32:
    case KS_PB_SFIXED32:
        ks_jbuf_int(b, (int32_t)(uint32_t)v);
        return 0;
    case KS_PB_UINT32:
    case KS_PB_FIXED32:
        ks_jbuf_int(b, (uint32_t)v);
        return 0;
    case KS_PB_SINT32:
        ks_jbuf_int(b, (int32_t)((uint32_t)v >> 1 ^ -((uint32_t)v & 1)));
        return 0;
    case KS_PB_INT64:
    case KS_PB_SFIXED64:
        put_quoted(b, v, true);
        return 0;
    case KS_PB_SINT64:
        put_quoted(b, v >> 1 ^ -(v & 1), true);
        return 0;
    case KS_PB_UINT64:
    case KS_PB_FIXED64:
        put_quoted(b, v, false);
        return 0;
    case KS_PB_BOOL:
        ks_jbuf_lit(b, v ? "true" : "false");
        return 0;
    case KS_PB_ENUM:
        return put_enum(d, f, (int32_t)(uint32_t)v);
    case KS_PB_FLOAT: {
        uint32_t u = (uint32_t)v;
        float x;
        memcpy(&x, &u, sizeof(x));
        ks_jbuf_float(b, x);
        return 0;
    }
    case KS_PB_DOUBLE: {
        double x;
        memcpy(&x, &v, sizeof(x));
        ks_jbuf_double(b, x);
        return 0;
    }
    default:
        return fail(d, "a number where the schema has no number");
    }
}

/* One value of field f from occurrence o (its own wire type). */
static int put_value(dec_t *d, const ks_pb_field_t *f, const occ_t *o)
{
    switch (f->type) {
    case KS_PB_STRING:
        if (!ks_jbuf_str(d->b, (const char *)o->s, o->n))
            return fail(d, "a string of %zu bytes that is not UTF-8", o->n);
        return 0;
    case KS_PB_BYTES:
        ks_jbuf_b64(d->b, o->s, o->n);
        return 0;
    case KS_PB_MESSAGE:
        return message(d, f->ref, o->s, o->s + o->n);
    default:
        return put_number(d, f, o->v);
    }
}

/* The values packed in o (LEN) of repeated scalar f, each after a comma but the first. */
static int put_packed(dec_t *d, const ks_pb_field_t *f, const occ_t *o, bool *first)
{
    const uint8_t *p = o->s, *e = o->s + o->n;
    int wt = ks_pb_wire_type(f->type);
    while (p < e) {
        occ_t one = {.wt = wt};
        if (wt == KS_WT_VARINT) {
            if (!ks_pb_varint(&p, e, &one.v))
                return fail(d, "a packed varint runs past the end");
        } else {
            size_t w = wt == KS_WT_I64 ? 8 : 4;
            if ((size_t)(e - p) < w)
                return fail(d, "%zu bytes left of a packed %zu-byte value", (size_t)(e - p), w);
            for (size_t i = w; i-- > 0;)
                one.v = one.v << 8 | p[i];
            p += w;
        }
        if (!*first)
            ks_jbuf_lit(d->b, ",");
        *first = false;
        if (put_number(d, f, one.v))
            return -1;
    }
    return 0;
}

/* A map's key as a JSON string (o: the key's occurrence, or zero). */
static int put_key(dec_t *d, const ks_pb_field_t *k, const occ_t *o)
{
    if (k->type == KS_PB_STRING)
        return put_value(d, k, o);
    size_t at = d->b->len;
    put_number(d, k, o->v);
    if (d->b->p[at] == '"')
        return 0; /* 64-bit: quoted already */
    char tmp[32];
    size_t n = d->b->len - at;
    memcpy(tmp, d->b->p + at, n);
    d->b->len = at;
    ks_jbuf_lit(d->b, "\"");
    ks_jbuf_raw(d->b, tmp, n);
    ks_jbuf_lit(d->b, "\"");
    return 0;
}

/* One map entry (the bytes of an entry message) as "key":value. */
static int put_entry(dec_t *d, const ks_pb_field_t *f, const occ_t *o)
{
    const ks_pb_msg_t *m = &d->p->msgs[f->ref];
    const uint8_t *s = o->s, *e = o->s + o->n;
    const ks_pb_field_t *kf = ks_pb_field_by_number(m, 1), *vf = ks_pb_field_by_number(m, 2);
    if (!kf || !vf || m->nfields != 2)
        return fail(d, "the map's entry message is not a key and a value");
    seen_t seen[2] = {{0}};
    if (check_fields(d, s, e, m, seen))
        return -1;
    /* Absent: the zero value. */
    occ_t k = {.wt = ks_pb_wire_type(kf->type), .s = s},
          v = {.wt = ks_pb_wire_type(vf->type), .s = s};
    if (seen[kf - m->fields].last_at)
        k = seen[kf - m->fields].last;
    if (seen[vf - m->fields].last_at)
        v = seen[vf - m->fields].last;
    if (put_key(d, kf, &k))
        return -1;
    ks_jbuf_lit(d->b, ":");
    return put_value(d, vf, &v);
}

/* Repeated field f: [values] or, for a map, {entries}; nothing when it has none. */
static int put_repeated(dec_t *d, const ks_pb_field_t *f, const seen_t *w, const uint8_t *e,
                        bool *any)
{
    bool map = f->type == KS_PB_MESSAGE && d->p->msgs[f->ref].map_entry, first = true;
    if (!w->first)
        return 0;
    const uint8_t *p = w->first;
    size_t start = d->b->len;
    ks_jbuf_lit(d->b, *any ? ",\"" : "\"");
    ks_jbuf_lit(d->b, f->json_name);
    ks_jbuf_lit(d->b, map ? "\":{" : "\":[");
    while (p <= w->last_at) { /* from its first occurrence to its last */
        uint32_t num;
        occ_t o;
        next_field(&p, e, &num, &o);
        if (num != f->number || !fits(f, o.wt))
            continue;
        if (o.wt == KS_WT_LEN && ks_pb_wire_type(f->type) != KS_WT_LEN) {
            if (put_packed(d, f, &o, &first))
                return -1;
            continue;
        }
        if (!first)
            ks_jbuf_lit(d->b, ",");
        first = false;
        if (map ? put_entry(d, f, &o) : put_value(d, f, &o))
            return -1;
    }
    if (first) { /* none: left out */
        d->b->len = start;
        d->b->p[start] = '\0';
        return 0;
    }
    ks_jbuf_lit(d->b, map ? "}" : "]");
    *any = true;
    return 0;
}

/* Whether a proto3 field without presence holds its zero value (left out). */
static bool is_zero(const ks_pb_field_t *f, const occ_t *o)
{
    return !f->presence && (o->wt == KS_WT_LEN ? o->n == 0 : o->v == 0);
}

/* Singular field f: "name":value from its last occurrence; nothing when absent. */
static int put_singular(dec_t *d, const ks_pb_msg_t *m, const ks_pb_field_t *f, const seen_t *seen,
                        bool *any)
{
    const seen_t *w = &seen[f - m->fields];
    if (!w->last_at || is_zero(f, &w->last) || (f->oneof >= 0 && superseded(m, f, seen)))
        return 0;
    ks_jbuf_lit(d->b, *any ? ",\"" : "\"");
    ks_jbuf_lit(d->b, f->json_name);
    ks_jbuf_lit(d->b, "\":");
    *any = true;
    return put_value(d, f, &w->last);
}

/* Message mi from s[0..e) as a JSON object. */
static int message(dec_t *d, int mi, const uint8_t *s, const uint8_t *e)
{
    if (d->depth >= MAX_DEPTH)
        return fail(d, "messages nest deeper than %d", MAX_DEPTH);
    const ks_pb_msg_t *m = &d->p->msgs[mi];
    seen_t few[16] = {{0}}; /* most messages; a larger one's go on the heap */
    seen_t *seen = m->nfields <= 16 ? few : calloc(m->nfields, sizeof(*seen));
    if (!seen)
        return fail(d, "out of memory");
    int rc = check_fields(d, s, e, m, seen);
    if (!rc)
        ks_jbuf_lit(d->b, "{");
    bool any = false;
    for (size_t i = 0; !rc && i < m->nfields; i++) {
        const ks_pb_field_t *f = &m->fields[i];
        size_t at = ks_field_path_name(&d->path, f->json_name);
        d->depth++;
        rc =
            f->repeated ? put_repeated(d, f, &seen[i], e, &any) : put_singular(d, m, f, seen, &any);
        d->depth--;
        ks_field_path_pop(&d->path, at);
    }
    if (seen != few)
        free(seen);
    if (rc)
        return -1;
    ks_jbuf_lit(d->b, "}");
    return 0;
}

/* A zigzag varint of the indexes into *v. */
static bool zigzag(const uint8_t **p, const uint8_t *end, int64_t *v)
{
    uint64_t u;
    if (!ks_pb_varint(p, end, &u))
        return false;
    *v = (int64_t)(u >> 1 ^ -(u & 1));
    return true;
}

/* The message the indexes at *p name (*p moved past them): its index in p->msgs, or -1 with
 * err. */
static int pick_message(const ks_proto_t *p, const uint8_t **at, const uint8_t *end, char *err,
                        size_t errsize)
{
    int64_t count, ix;
    if (!zigzag(at, end, &count) || count < 0 || count > MAX_DEPTH) {
        snprintf(err, errsize, "corrupt message indexes after the schema id");
        return -1;
    }
    if (count == 0)
        return p->top[0];
    int mi = -1;
    for (int64_t i = 0; i < count; i++) {
        size_t n = mi < 0 ? p->ntop : p->msgs[mi].nnested;
        if (!zigzag(at, end, &ix) || ix < 0 || (uint64_t)ix >= n) {
            snprintf(err, errsize,
                     "message indexes name no message of the schema (index %" PRId64 " of %zu)", i,
                     n);
            return -1;
        }
        mi = mi < 0 ? p->top[ix] : p->msgs[mi].nested[ix];
    }
    return mi;
}

int ks_proto_decode(const ks_proto_t *p, const void *data, size_t len, ks_jbuf_t *b, char *err,
                    size_t errsize)
{
    const uint8_t *s = data, *e = s + len;
    int mi = pick_message(p, &s, e, err, errsize);
    if (mi < 0)
        return -1;
    dec_t d = {.p = p, .b = b, .path = {.err = err, .errsize = errsize}};
    size_t start = b->len;
    if (message(&d, mi, s, e)) {
        b->len = start;
        b->p[start] = '\0';
        return -1;
    }
    return 0;
}

int ks_proto_wire_json(ks_schema_t *s, const void *data, size_t len, ks_jbuf_t *b, char *err,
                       size_t errsize)
{
    const void *body;
    size_t body_len;
    const ks_proto_t *a =
        ks_wire_parsed(s, &ks_proto_parser, data, len, &body, &body_len, err, errsize);
    return a ? ks_proto_decode(a, body, body_len, b, err, errsize) : -1;
}
