/* avro_json.c: Avro binary to JSON text (avro_json.h). avro-c parses the writer's schema; it is
 * then flattened into a table of nodes (records, unions, ...) with every JSON label it needs
 * written once ("\"name\":", "{\"com.acme.Order\":", an enum's "\"SYMBOL\""), and values are
 * decoded by walking that table over the bytes, writing JSON as they go: no value tree, no
 * allocation but the buffer's. */
#include "avro_json.h"

#include <avro.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deepest nesting of records, arrays, maps and unions a value may have (a recursive schema's
 * values are bounded here, not by the schema), and the most nodes a schema may compile to. */
#define MAX_DEPTH 128
#define MAX_NODES 100000
/* Array items that take no bytes (null, an empty record) one value may have: a few bytes of
 * block count must not turn into megabytes of JSON. */
#define MAX_EMPTY_ITEMS 65536

typedef struct anode {
    uint8_t type; /* an avro_type_t, never AVRO_LINK (a link is its target's node) */
    uint32_t n;   /* RECORD: fields; ENUM: symbols; UNION: branches; FIXED: its size */
    uint32_t kid; /* ARRAY: the items' node; MAP: the values'; RECORD, UNION: the first of n
                   * in kids[] */
    uint32_t lab; /* RECORD: n labels "\"f\":"; ENUM: n "\"S\""; UNION: n "{\"T\":", the first in
                   * labs[] */
} anode_t;

typedef struct label {
    uint32_t off, len; /* in pool */
} label_t;

struct ks_avro {
    anode_t *nodes;
    uint32_t nnodes, cnodes;
    uint32_t *kids;
    uint32_t nkids, ckids;
    label_t *labs;
    uint32_t nlabs, clabs;
    ks_jbuf_t pool;
    uint32_t root;
    avro_schema_t schema; /* avro-c's parse, kept for the encoder (avro_enc.c); read-only */
};

/* ---- compiling a schema ---- */

typedef struct named {
    avro_schema_t s;
    uint32_t node;
} named_t;

typedef struct comp {
    ks_avro_t *a;
    named_t *named; /* named types compiled so far: a link to one is its node */
    size_t nnamed, cnamed;
    char *err;
    size_t errsize;
} comp_t;

static void *grow_array(void *p, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return p;
    uint32_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *np = realloc(p, (size_t)c * size);
    if (!np)
        abort();
    *cap = c;
    return np;
}

/* Reserves n slots of kids[] (filled later, by index). Returns the first. */
static uint32_t reserve_kids(ks_avro_t *a, uint32_t n)
{
    a->kids = grow_array(a->kids, &a->ckids, a->nkids + n, sizeof(*a->kids));
    uint32_t first = a->nkids;
    a->nkids += n;
    return first;
}

static uint32_t reserve_labs(ks_avro_t *a, uint32_t n)
{
    a->labs = grow_array(a->labs, &a->clabs, a->nlabs + n, sizeof(*a->labs));
    uint32_t first = a->nlabs;
    a->nlabs += n;
    return first;
}

/* Writes label i: pre, s as a JSON string, post. Returns false, with err, if s is not UTF-8
 * (names are ASCII by the spec). */
static bool set_label(comp_t *c, uint32_t i, const char *pre, const char *s, const char *post)
{
    ks_avro_t *a = c->a;
    size_t off = a->pool.len;
    ks_jbuf_lit(&a->pool, pre);
    if (!ks_jbuf_str(&a->pool, s, strlen(s))) {
        snprintf(c->err, c->errsize, "a name or symbol that is not UTF-8");
        return false;
    }
    ks_jbuf_lit(&a->pool, post);
    a->labs[i] = (label_t){(uint32_t)off, (uint32_t)(a->pool.len - off)};
    return true;
}

/* The name a union's JSON gives branch s: a named type's full name, else its type's. */
static void branch_name(avro_schema_t s, char *out, size_t size)
{
    switch (avro_typeof(s)) {
    case AVRO_RECORD:
    case AVRO_ENUM:
    case AVRO_FIXED: {
        const char *ns = avro_schema_namespace(s);
        snprintf(out, size, "%s%s%s", ns && *ns ? ns : "", ns && *ns ? "." : "",
                 avro_schema_name(s));
        return;
    }
    case AVRO_ARRAY:
        snprintf(out, size, "array");
        return;
    case AVRO_MAP:
        snprintf(out, size, "map");
        return;
    default:
        snprintf(out, size, "%s", avro_schema_type_name(s));
        return;
    }
}

static const uint32_t BAD = UINT32_MAX;

static uint32_t compile(comp_t *c, avro_schema_t s, int depth)
{
    ks_avro_t *a = c->a;
    while (is_avro_link(s))
        s = avro_schema_link_target(s);
    avro_type_t t = avro_typeof(s);
    if (t == AVRO_RECORD || t == AVRO_ENUM || t == AVRO_FIXED)
        for (size_t i = 0; i < c->nnamed; i++)
            if (c->named[i].s == s)
                return c->named[i].node;
    if (depth > MAX_DEPTH || a->nnodes >= MAX_NODES) {
        snprintf(c->err, c->errsize, "the schema nests deeper than %d or has more than %d types",
                 MAX_DEPTH, MAX_NODES);
        return BAD;
    }
    a->nodes = grow_array(a->nodes, &a->cnodes, a->nnodes + 1, sizeof(*a->nodes));
    uint32_t idx = a->nnodes++;
    a->nodes[idx] = (anode_t){.type = (uint8_t)t};
    if (t == AVRO_RECORD || t == AVRO_ENUM || t == AVRO_FIXED) {
        if (c->nnamed == c->cnamed) {
            c->cnamed = c->cnamed ? c->cnamed * 2 : 8;
            c->named = realloc(c->named, c->cnamed * sizeof(*c->named));
            if (!c->named)
                abort();
        }
        c->named[c->nnamed++] = (named_t){s, idx};
    }
    switch (t) {
    case AVRO_RECORD: {
        uint32_t n = (uint32_t)avro_schema_record_size(s);
        uint32_t k = reserve_kids(a, n), l = reserve_labs(a, n);
        a->nodes[idx].n = n;
        a->nodes[idx].kid = k;
        a->nodes[idx].lab = l;
        for (uint32_t i = 0; i < n; i++) {
            if (!set_label(c, l + i, "", avro_schema_record_field_name(s, (int)i), ":"))
                return BAD;
            uint32_t f = compile(c, avro_schema_record_field_get_by_index(s, (int)i), depth + 1);
            if (f == BAD)
                return BAD;
            a->kids[k + i] = f;
        }
        break;
    }
    case AVRO_ENUM: {
        int n = avro_schema_enum_number_of_symbols(s);
        uint32_t l = reserve_labs(a, (uint32_t)(n > 0 ? n : 0));
        a->nodes[idx].n = (uint32_t)(n > 0 ? n : 0);
        a->nodes[idx].lab = l;
        for (int i = 0; i < n; i++)
            if (!set_label(c, l + (uint32_t)i, "", avro_schema_enum_get(s, i), ""))
                return BAD;
        break;
    }
    case AVRO_FIXED: {
        int64_t size = avro_schema_fixed_size(s);
        if (size < 0 || size > INT32_MAX) {
            snprintf(c->err, c->errsize, "fixed %s has size %lld", avro_schema_name(s),
                     (long long)size);
            return BAD;
        }
        a->nodes[idx].n = (uint32_t)size;
        break;
    }
    case AVRO_ARRAY:
    case AVRO_MAP: {
        avro_schema_t inner =
            t == AVRO_ARRAY ? avro_schema_array_items(s) : avro_schema_map_values(s);
        uint32_t k = compile(c, inner, depth + 1);
        if (k == BAD)
            return BAD;
        a->nodes[idx].kid = k;
        break;
    }
    case AVRO_UNION: {
        uint32_t n = (uint32_t)avro_schema_union_size(s);
        uint32_t k = reserve_kids(a, n), l = reserve_labs(a, n);
        a->nodes[idx].n = n;
        a->nodes[idx].kid = k;
        a->nodes[idx].lab = l;
        for (uint32_t i = 0; i < n; i++) {
            avro_schema_t br = avro_schema_union_branch(s, (int)i);
            while (is_avro_link(br))
                br = avro_schema_link_target(br);
            char name[512];
            branch_name(br, name, sizeof(name));
            if (!set_label(c, l + i, "{", name, ":"))
                return BAD;
            uint32_t b = compile(c, br, depth + 1);
            if (b == BAD)
                return BAD;
            a->kids[k + i] = b;
        }
        break;
    }
    default: /* primitives: nothing more */
        break;
    }
    return idx;
}

ks_avro_t *ks_avro_new(const char *text, size_t len, char *err, size_t errsize)
{
    avro_schema_t s = NULL;
    if (avro_schema_from_json_length(text, len, &s)) {
        snprintf(err, errsize, "not an Avro schema: %s", avro_strerror());
        return NULL;
    }
    ks_avro_t *a = calloc(1, sizeof(*a));
    if (!a)
        abort();
    ks_jbuf_init(&a->pool, 256);
    comp_t c = {.a = a, .err = err, .errsize = errsize};
    a->root = compile(&c, s, 0);
    free(c.named);
    a->schema = s;
    if (a->root == BAD) {
        ks_avro_free(a);
        return NULL;
    }
    return a;
}

void ks_avro_free(ks_avro_t *a)
{
    if (!a)
        return;
    free(a->nodes);
    free(a->kids);
    free(a->labs);
    ks_jbuf_free(&a->pool);
    if (a->schema)
        avro_schema_decref(a->schema);
    free(a);
}

struct avro_obj_t *ks_avro_schema(const ks_avro_t *a)
{
    return a->schema;
}

/* ---- decoding ---- */

/* Where the decoder is, for an error: the field, item or map key entered at each depth. */
typedef struct seg {
    uint32_t node; /* a RECORD's (field i), an ARRAY's (item i) or a MAP's (key) */
    uint32_t i;
    const uint8_t *key; /* MAP */
    uint32_t klen;
} seg_t;

typedef struct dec {
    const ks_avro_t *a;
    const uint8_t *start, *p, *end;
    ks_jbuf_t *b;
    bool plain;
    int depth;
    uint32_t empty_items;
    seg_t path[MAX_DEPTH + 1];
    char *err;
    size_t errsize;
} dec_t;

/* Whether s is a step of a path: a field, an item, a map key (not a union's branch). */
static bool is_step(const dec_t *d, const seg_t *s)
{
    const anode_t *nd = &d->a->nodes[s->node];
    return nd->type == AVRO_RECORD || nd->type == AVRO_ARRAY || (nd->type == AVRO_MAP && s->key);
}

/* Fills err with why d stops and where: "REASON (at byte N, field a.b[3][\"k\"])". A deep
 * path keeps its first 4 and last 8 steps. Returns -1. */
__attribute__((format(printf, 2, 3))) static int fail(dec_t *d, const char *fmt, ...)
{
    if (!d->errsize)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(d->err, d->errsize, fmt, ap);
    va_end(ap);
    size_t n = r < 0 ? 0 : (size_t)r;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (n < d->errsize)                                                                        \
            n += (size_t)snprintf(d->err + n, d->errsize - n, __VA_ARGS__);                        \
    } while (0)
    PUT(" (at byte %zu", (size_t)(d->p - d->start));
    int steps = 0, k = 0;
    for (int i = 0; i < d->depth; i++)
        steps += is_step(d, &d->path[i]);
    bool any = false, elided = false, gap = false;
    for (int i = 0; i < d->depth; i++) {
        const seg_t *s = &d->path[i];
        const anode_t *nd = &d->a->nodes[s->node];
        if (!is_step(d, s))
            continue;
        k++;
        if (steps > 12 && k > 4 && k <= steps - 8) {
            if (!elided)
                PUT("...");
            elided = gap = true;
            continue;
        }
        if (!any)
            PUT(", field ");
        if (nd->type == AVRO_RECORD) {
            const label_t *l = &d->a->labs[nd->lab + s->i];
            PUT("%s%.*s", any && !gap ? "." : "", (int)l->len - 3, d->a->pool.p + l->off + 1);
        } else if (nd->type == AVRO_ARRAY) {
            PUT("[%u]", s->i);
        } else { /* a key as printable ASCII, so that err is always plain text */
            char key[41];
            uint32_t kl = s->klen < 40 ? s->klen : 40;
            for (uint32_t j = 0; j < kl; j++)
                key[j] = s->key[j] >= 0x20 && s->key[j] < 0x7f && s->key[j] != '"' ? (char)s->key[j]
                                                                                   : '?';
            key[kl] = '\0';
            PUT("[\"%s\"]", key);
        }
        any = true;
        gap = false;
    }
    PUT(")");
#undef PUT
    return -1;
}

/* A zigzag varint of at most 10 bytes (the tenth holding bit 63 only). */
static int read_long(dec_t *d, int64_t *v)
{
    uint64_t u = 0;
    for (int shift = 0;; shift += 7) {
        if (d->p >= d->end)
            return fail(d, "the data ends inside a number");
        uint8_t c = *d->p++;
        if (shift == 63 && c > 1)
            return fail(d, "a number longer than 64 bits");
        u |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 0;
        }
    }
}

static int read_int(dec_t *d, int64_t *v)
{
    if (read_long(d, v))
        return -1;
    if (*v < INT32_MIN || *v > INT32_MAX)
        return fail(d, "int %lld out of range", (long long)*v);
    return 0;
}

/* A length (of bytes, a string, a fixed) that fits in what is left. */
static int read_len(dec_t *d, const char *what, int64_t *n)
{
    if (read_long(d, n))
        return -1;
    if (*n < 0)
        return fail(d, "%s of negative length %lld", what, (long long)*n);
    if (*n > d->end - d->p)
        return fail(d, "%s of %lld bytes, %zu left", what, (long long)*n, (size_t)(d->end - d->p));
    return 0;
}

/* Bytes as the Avro spec's JSON has them: one code point U+0000-U+00FF per byte. */
static void put_codepoints(ks_jbuf_t *b, const uint8_t *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    char *o = ks_jbuf_reserve(b, 6 * n + 2), *o0 = o;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            *o++ = (char)c;
        } else if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else {
            memcpy(o, "\\u00", 4);
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            o += 6;
        }
    }
    *o++ = '"';
    b->len += (size_t)(o - o0);
    b->p[b->len] = '\0';
}

static void put_label(dec_t *d, uint32_t lab)
{
    const label_t *l = &d->a->labs[lab];
    ks_jbuf_raw(d->b, d->a->pool.p + l->off, l->len);
}

static int value(dec_t *d, uint32_t node);

/* An array's or map's blocks: a count, its items, until a count of 0. A negative count is
 * followed by the block's size in bytes. */
static int blocks(dec_t *d, uint32_t node, bool map)
{
    const anode_t *nd = &d->a->nodes[node];
    seg_t *seg = &d->path[d->depth];
    *seg = (seg_t){.node = node};
    ks_jbuf_lit(d->b, map ? "{" : "[");
    uint32_t i = 0;
    for (;;) {
        int64_t count, size;
        if (read_long(d, &count))
            return -1;
        if (count == 0)
            break;
        if (count < 0) {
            if (count == INT64_MIN)
                return fail(d, "a block count out of range");
            count = -count;
            if (read_long(d, &size))
                return -1;
            if (size < 0)
                return fail(d, "a block of negative size");
        }
        for (int64_t k = 0; k < count; k++, i++) {
            if (i)
                ks_jbuf_lit(d->b, ",");
            const uint8_t *before = d->p;
            seg->i = i;
            if (map) {
                int64_t kl;
                seg->key = NULL;
                if (read_len(d, "a map key", &kl))
                    return -1;
                if (!ks_jbuf_str(d->b, (const char *)d->p, (size_t)kl))
                    return fail(d, "a map key that is not UTF-8");
                seg->key = d->p;
                seg->klen = (uint32_t)kl;
                d->p += kl;
                ks_jbuf_lit(d->b, ":");
            }
            d->depth++;
            int rc = value(d, nd->kid);
            d->depth--;
            if (rc)
                return -1;
            if (d->p == before && ++d->empty_items > MAX_EMPTY_ITEMS)
                return fail(d, "more than %d items that take no bytes", MAX_EMPTY_ITEMS);
        }
    }
    ks_jbuf_lit(d->b, map ? "}" : "]");
    return 0;
}

static int value(dec_t *d, uint32_t node)
{
    const anode_t *nd = &d->a->nodes[node];
    if (d->depth >= MAX_DEPTH)
        return fail(d, "nested deeper than %d", MAX_DEPTH);
    int64_t v;
    switch ((avro_type_t)nd->type) {
    case AVRO_NULL:
        ks_jbuf_lit(d->b, "null");
        return 0;
    case AVRO_BOOLEAN:
        if (d->p >= d->end)
            return fail(d, "the data ends before a boolean");
        if (*d->p > 1)
            return fail(d, "a boolean byte 0x%02x, not 0 or 1", *d->p);
        ks_jbuf_lit(d->b, *d->p++ ? "true" : "false");
        return 0;
    case AVRO_INT32:
        if (read_int(d, &v))
            return -1;
        ks_jbuf_int(d->b, v);
        return 0;
    case AVRO_INT64:
        if (read_long(d, &v))
            return -1;
        ks_jbuf_int(d->b, v);
        return 0;
    case AVRO_FLOAT: {
        if (d->end - d->p < 4)
            return fail(d, "the data ends inside a float");
        uint32_t u = (uint32_t)d->p[0] | (uint32_t)d->p[1] << 8 | (uint32_t)d->p[2] << 16 |
                     (uint32_t)d->p[3] << 24;
        float f;
        memcpy(&f, &u, 4);
        d->p += 4;
        ks_jbuf_double(d->b, (double)f);
        return 0;
    }
    case AVRO_DOUBLE: {
        if (d->end - d->p < 8)
            return fail(d, "the data ends inside a double");
        uint64_t u = 0;
        for (int i = 7; i >= 0; i--)
            u = u << 8 | d->p[i];
        double x;
        memcpy(&x, &u, 8);
        d->p += 8;
        ks_jbuf_double(d->b, x);
        return 0;
    }
    case AVRO_BYTES:
        if (read_len(d, "bytes", &v))
            return -1;
        put_codepoints(d->b, d->p, (size_t)v);
        d->p += v;
        return 0;
    case AVRO_STRING:
        if (read_len(d, "a string", &v))
            return -1;
        if (!ks_jbuf_str(d->b, (const char *)d->p, (size_t)v))
            return fail(d, "a string of %lld bytes that is not UTF-8", (long long)v);
        d->p += v;
        return 0;
    case AVRO_FIXED:
        if (nd->n > d->end - d->p)
            return fail(d, "a fixed of %u bytes, %zu left", nd->n, (size_t)(d->end - d->p));
        put_codepoints(d->b, d->p, nd->n);
        d->p += nd->n;
        return 0;
    case AVRO_ENUM:
        if (read_int(d, &v))
            return -1;
        if (v < 0 || v >= nd->n)
            return fail(d, "enum symbol %lld of %u", (long long)v, nd->n);
        put_label(d, nd->lab + (uint32_t)v);
        return 0;
    case AVRO_RECORD: {
        seg_t *seg = &d->path[d->depth];
        *seg = (seg_t){.node = node};
        ks_jbuf_lit(d->b, "{");
        d->depth++;
        for (uint32_t i = 0; i < nd->n; i++) {
            seg->i = i;
            if (i)
                ks_jbuf_lit(d->b, ",");
            put_label(d, nd->lab + i);
            if (value(d, d->a->kids[nd->kid + i])) {
                d->depth--;
                return -1;
            }
        }
        d->depth--;
        ks_jbuf_lit(d->b, "}");
        return 0;
    }
    case AVRO_ARRAY:
    case AVRO_MAP: {
        int rc = blocks(d, node, nd->type == AVRO_MAP);
        return rc;
    }
    case AVRO_UNION: {
        if (read_long(d, &v))
            return -1;
        if (v < 0 || v >= nd->n)
            return fail(d, "union branch %lld of %u", (long long)v, nd->n);
        uint32_t br = d->a->kids[nd->kid + (uint32_t)v];
        bool wrap = !d->plain && d->a->nodes[br].type != AVRO_NULL;
        if (wrap)
            put_label(d, nd->lab + (uint32_t)v);
        d->path[d->depth] = (seg_t){.node = node}; /* not a field: skipped in a path */
        d->depth++;
        int rc = value(d, br);
        d->depth--;
        if (rc)
            return -1;
        if (wrap)
            ks_jbuf_lit(d->b, "}");
        return 0;
    }
    default:
        return fail(d, "a schema type ksidecar does not decode");
    }
}

int ks_avro_decode(const ks_avro_t *a, const void *data, size_t len, ks_avro_form_t form,
                   ks_jbuf_t *b, char *err, size_t errsize)
{
    static const uint8_t none[1];
    dec_t d = {.a = a,
               .start = len ? data : none,
               .p = len ? data : none,
               .end = (len ? (const uint8_t *)data : none) + len,
               .b = b,
               .plain = form == KS_AVRO_JSON_PLAIN,
               .err = err,
               .errsize = errsize};
    size_t at = b->len;
    int rc = value(&d, a->root);
    if (!rc && d.p != d.end) {
        d.depth = 0;
        rc = fail(&d, "%zu bytes left after the value", (size_t)(d.end - d.p));
    }
    if (rc) {
        b->len = at;
        if (b->p)
            b->p[at] = '\0';
    }
    return rc;
}

/* ---- with a registry's schema ---- */

static void *parsed_make(const char *text, size_t len, char *err, size_t errsize)
{
    return ks_avro_new(text, len, err, errsize);
}

static void parsed_free(void *p)
{
    ks_avro_free(p);
}

const ks_schema_parser_t ks_avro_parser = {KS_SCHEMA_AVRO, parsed_make, parsed_free};

int ks_avro_wire_json(ks_schema_t *s, const void *data, size_t len, ks_avro_form_t form,
                      ks_jbuf_t *b, char *err, size_t errsize)
{
    const void *body;
    size_t body_len;
    const ks_avro_t *a =
        ks_wire_parsed(s, &ks_avro_parser, data, len, &body, &body_len, err, errsize);
    return a ? ks_avro_decode(a, body, body_len, form, b, err, errsize) : -1;
}
