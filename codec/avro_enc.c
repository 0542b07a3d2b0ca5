/* avro_enc.c: JSON to Avro binary (avro_enc.h): the jansson value walked against avro-c's parse
 * of the schema, each datum written as it is met (zigzag varints, length-prefixed bytes, blocked
 * arrays and maps), the field it is at kept for an error. */
#include "avro_enc.h"

#include <avro.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "field_path.h"
#include "json_schema.h"

/* Deepest nesting a value may have, as the decoder's bound. */
#define MAX_DEPTH 128

typedef struct enc {
    ks_jbuf_t *b;
    ks_field_path_t path; /* the field being written: "customer.tier", "lines[3].sku" */
} enc_t;

/* Fills err with `field "<path>": <what>` (or `the value: ...` at the top). Returns -1. */
static int fail(enc_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(enc_t *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ks_field_path_failv(&e->path, "the value: ", fmt, ap);
    va_end(ap);
    return -1;
}

static void put_long(ks_jbuf_t *b, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    char *p = ks_jbuf_reserve(b, 10);
    size_t n = 0;
    while (z > 0x7f) {
        p[n++] = (char)((z & 0x7f) | 0x80);
        z >>= 7;
    }
    p[n++] = (char)z;
    b->len += n;
}

static void put_raw(ks_jbuf_t *b, const void *p, size_t n)
{
    ks_jbuf_raw(b, p, n);
}

/* The number v as a double: a JSON number, or the strings the decoder writes for what JSON
 * lacks. Returns false if it is neither. */
static bool as_double(json_t *v, double *d)
{
    if (json_is_number(v)) {
        *d = json_number_value(v);
        return true;
    }
    const char *s = json_string_value(v);
    if (!s)
        return false;
    if (!strcmp(s, "NaN"))
        *d = NAN;
    else if (!strcmp(s, "Infinity"))
        *d = INFINITY;
    else if (!strcmp(s, "-Infinity"))
        *d = -INFINITY;
    else
        return false;
    return true;
}

/* Bytes or fixed: the string's code points, each U+0000-U+00FF, as bytes. want: the fixed's
 * size, or -1 for bytes (then the length goes first). */
static int put_bytes(enc_t *e, json_t *v, int64_t want)
{
    char sb[64];
    if (!json_is_string(v))
        return fail(e,
                    "%s is not a string (bytes are a string of code points U+0000-U+00FF, "
                    "one a byte)",
                    ks_json_show(v, sb, sizeof(sb)));
    const unsigned char *s = (const unsigned char *)json_string_value(v);
    size_t n = json_string_length(v), cnt = 0;
    for (size_t i = 0; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            cnt++;
    if (want >= 0 && (int64_t)cnt != want)
        return fail(e, "a string of %zu bytes for a fixed of %lld", cnt, (long long)want);
    if (want < 0)
        put_long(e->b, (int64_t)cnt);
    char *p = ks_jbuf_reserve(e->b, cnt);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < 0x80)
            p[o++] = (char)s[i];
        else if ((s[i] == 0xc2 || s[i] == 0xc3) && i + 1 < n) {
            p[o++] = (char)(((s[i] & 0x03) << 6) | (s[i + 1] & 0x3f));
            i++;
        } else
            return fail(e, "a code point above U+00FF in bytes (one code point a byte)");
    }
    e->b->len += o;
    return 0;
}

static int put(enc_t *e, avro_schema_t s, json_t *v, int depth);

/* The name a union's {"T": value} gives branch br (as the decoder writes it). */
static void branch_name(avro_schema_t br, char *out, size_t size)
{
    avro_type_t t = avro_typeof(br);
    if (t == AVRO_RECORD || t == AVRO_ENUM || t == AVRO_FIXED) {
        const char *ns = avro_schema_namespace(br);
        snprintf(out, size, "%s%s%s", ns && *ns ? ns : "", ns && *ns ? "." : "",
                 avro_schema_name(br));
    } else if (t == AVRO_ARRAY || t == AVRO_MAP)
        snprintf(out, size, "%s", t == AVRO_ARRAY ? "array" : "map");
    else
        snprintf(out, size, "%s", avro_schema_type_name(br));
}

static avro_schema_t deref(avro_schema_t s)
{
    while (is_avro_link(s))
        s = avro_schema_link_target(s);
    return s;
}

static int put_union(enc_t *e, avro_schema_t s, json_t *v, int depth)
{
    size_t n = avro_schema_union_size(s);
    char name[512];
    if (json_is_null(v))
        for (size_t i = 0; i < n; i++)
            if (avro_typeof(deref(avro_schema_union_branch(s, (int)i))) == AVRO_NULL) {
                put_long(e->b, (int64_t)i);
                return 0;
            }
    if (json_is_object(v) && json_object_size(v) == 1) { /* Avro's {"T": value} */
        const char *k = json_object_iter_key(json_object_iter(v));
        for (size_t i = 0; i < n; i++) {
            avro_schema_t br = deref(avro_schema_union_branch(s, (int)i));
            branch_name(br, name, sizeof(name));
            if (!strcmp(name, k)) {
                put_long(e->b, (int64_t)i);
                return put(e, br, json_object_get(v, k), depth + 1);
            }
        }
    }
    /* The value alone: the one branch that is not null (its own error names the field), or
     * the first branch it fits. */
    size_t start = e->b->len, plen = e->path.len, others = 0, other = 0;
    for (size_t i = 0; i < n; i++)
        if (avro_typeof(deref(avro_schema_union_branch(s, (int)i))) != AVRO_NULL) {
            others++;
            other = i;
        }
    if (others == 1 && !json_is_null(v)) {
        put_long(e->b, (int64_t)other);
        return put(e, deref(avro_schema_union_branch(s, (int)other)), v, depth + 1);
    }
    for (size_t i = 0; i < n; i++) {
        avro_schema_t br = deref(avro_schema_union_branch(s, (int)i));
        put_long(e->b, (int64_t)i);
        if (put(e, br, v, depth + 1) == 0)
            return 0;
        e->b->len = start;
        ks_field_path_pop(&e->path, plen);
    }
    char types[256] = "", sb[64];
    size_t tl = 0;
    for (size_t i = 0; i < n && tl < sizeof(types); i++) {
        branch_name(deref(avro_schema_union_branch(s, (int)i)), name, sizeof(name));
        int w = snprintf(types + tl, sizeof(types) - tl, "%s%s", i ? ", " : "", name);
        tl += w > 0 ? (size_t)w : 0;
    }
    return fail(e, "%s fits no branch of the union [%s] (give {\"type\": value} to choose one)",
                ks_json_show(v, sb, sizeof(sb)), types);
}

static int put_record(enc_t *e, avro_schema_t s, json_t *v, int depth)
{
    char sb[64];
    if (!json_is_object(v))
        return fail(e, "%s is not an object, for record %s", ks_json_show(v, sb, sizeof(sb)),
                    avro_schema_name(s));
    size_t n = avro_schema_record_size(s);
    const char *k;
    json_t *fv;
    json_object_foreach(v, k, fv)
    {
        if (avro_schema_record_field_get_index(s, k) < 0) {
            size_t old = ks_field_path_name(&e->path, k);
            int rc = fail(e, "record %s has no such field", avro_schema_name(s));
            ks_field_path_pop(&e->path, old);
            return rc;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const char *fname = avro_schema_record_field_name(s, (int)i);
        avro_schema_t ft = deref(avro_schema_record_field_get_by_index(s, (int)i));
        size_t old = ks_field_path_name(&e->path, fname);
        json_t *x = json_object_get(v, fname);
        int rc;
        if (!x && avro_typeof(ft) != AVRO_NULL && avro_typeof(ft) != AVRO_UNION)
            rc = fail(e, "missing (record %s requires it)", avro_schema_name(s));
        else
            rc = put(e, ft, x ? x : json_null(), depth + 1);
        if (rc)
            return rc;
        ks_field_path_pop(&e->path, old);
    }
    return 0;
}

/* An array's items or a map's entries (v an array or an object) as one block: their count,
 * each item (a map's key first), then the empty block that ends them. */
static int put_block(enc_t *e, avro_schema_t items, json_t *v, int depth)
{
    bool map = json_is_object(v);
    size_t n = map ? json_object_size(v) : json_array_size(v);
    void *it = map ? json_object_iter(v) : NULL;
    if (n)
        put_long(e->b, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        json_t *x = map ? json_object_iter_value(it) : json_array_get(v, i);
        size_t old;
        if (map) {
            const char *k = json_object_iter_key(it);
            size_t kl = strlen(k);
            put_long(e->b, (int64_t)kl);
            put_raw(e->b, k, kl);
            old = ks_field_path_push(&e->path, "[\"%s\"]", k);
            it = json_object_iter_next(v, it);
        } else
            old = ks_field_path_push(&e->path, "[%zu]", i);
        if (put(e, items, x, depth + 1))
            return -1;
        ks_field_path_pop(&e->path, old);
    }
    put_long(e->b, 0);
    return 0;
}

/* Writes v as a datum of s. Returns 0, or -1 with e->path.err (e->b then holds a part: the caller
 * cuts it). */
static int put(enc_t *e, avro_schema_t s, json_t *v, int depth)
{
    char sb[64];
    s = deref(s);
    if (depth > MAX_DEPTH)
        return fail(e, "nests deeper than %d", MAX_DEPTH);
    switch (avro_typeof(s)) {
    case AVRO_NULL:
        if (!json_is_null(v))
            return fail(e, "%s is not null", ks_json_show(v, sb, sizeof(sb)));
        return 0;
    case AVRO_BOOLEAN:
        if (!json_is_boolean(v))
            return fail(e, "%s is not a boolean", ks_json_show(v, sb, sizeof(sb)));
        put_raw(e->b, json_is_true(v) ? "\1" : "\0", 1);
        return 0;
    case AVRO_INT32:
    case AVRO_INT64: {
        bool i32 = avro_typeof(s) == AVRO_INT32;
        json_int_t x = json_integer_value(v);
        if (!json_is_integer(v) || (i32 && (x < INT32_MIN || x > INT32_MAX)))
            return fail(e, "%s is not an integer that fits %s", ks_json_show(v, sb, sizeof(sb)),
                        i32 ? "an int (32 bits)" : "a long (64 bits)");
        put_long(e->b, (int64_t)x);
        return 0;
    }
    case AVRO_FLOAT:
    case AVRO_DOUBLE: {
        double d;
        if (!as_double(v, &d))
            return fail(e, "%s is not a number", ks_json_show(v, sb, sizeof(sb)));
        if (avro_typeof(s) == AVRO_FLOAT) {
            float f = (float)d;
            put_raw(e->b, &f, 4); /* little-endian, as the machines we build for */
        } else
            put_raw(e->b, &d, 8);
        return 0;
    }
    case AVRO_STRING:
        if (!json_is_string(v))
            return fail(e, "%s is not a string", ks_json_show(v, sb, sizeof(sb)));
        put_long(e->b, (int64_t)json_string_length(v));
        put_raw(e->b, json_string_value(v), json_string_length(v));
        return 0;
    case AVRO_BYTES:
        return put_bytes(e, v, -1);
    case AVRO_FIXED:
        return put_bytes(e, v, avro_schema_fixed_size(s));
    case AVRO_ENUM: {
        const char *sym = json_string_value(v);
        int i = sym ? avro_schema_enum_get_by_name(s, sym) : -1;
        if (i < 0) {
            const char *ns = avro_schema_namespace(s);
            return fail(e, "%s is not a symbol of enum %s%s%s", ks_json_show(v, sb, sizeof(sb)),
                        ns && *ns ? ns : "", ns && *ns ? "." : "", avro_schema_name(s));
        }
        put_long(e->b, i);
        return 0;
    }
    case AVRO_RECORD:
        return put_record(e, s, v, depth);
    case AVRO_ARRAY:
        if (!json_is_array(v))
            return fail(e, "%s is not an array", ks_json_show(v, sb, sizeof(sb)));
        return put_block(e, deref(avro_schema_array_items(s)), v, depth);
    case AVRO_MAP:
        if (!json_is_object(v))
            return fail(e, "%s is not an object, for a map", ks_json_show(v, sb, sizeof(sb)));
        return put_block(e, deref(avro_schema_map_values(s)), v, depth);
    case AVRO_UNION:
        return put_union(e, s, v, depth);
    default:
        return fail(e, "a schema type the encoder lacks (%s)", avro_schema_type_name(s));
    }
}

int ks_avro_encode(const ks_avro_t *a, json_t *v, ks_jbuf_t *b, char *err, size_t errsize)
{
    enc_t e = {.b = b, .path = {.err = err, .errsize = errsize}};
    size_t start = b->len;
    if (put(&e, ks_avro_schema(a), v, 0)) {
        b->len = start;
        return -1;
    }
    return 0;
}
