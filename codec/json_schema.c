/* json_schema.c: JSON Schema (json_schema.h): each subschema compiled once into a node (its
 * keywords' values checked, its subschemas linked, its patterns compiled, its $ref resolved),
 * then a value walked against the nodes with its JSON pointer kept for an error. */
#include "json_schema.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deepest a schema may nest, and a value, as the Avro codec's bound. */
#define MAX_DEPTH 128
/* Most schemas one check may stack up (a value MAX_DEPTH deep through a $ref at each level,
 * with room to spare); past it a $ref loop is cut. */
#define MAX_CHECKS (4 * MAX_DEPTH)

enum {
    T_NULL = 1,
    T_BOOLEAN = 2,
    T_OBJECT = 4,
    T_ARRAY = 8,
    T_NUMBER = 16,
    T_STRING = 32,
    T_INTEGER = 64,
};
static const char *const type_names[] = {"null",   "boolean", "object", "array",
                                         "number", "string",  "integer"};
#define NTYPES (sizeof(type_names) / sizeof(type_names[0]))

typedef struct node node_t;

typedef struct list {
    node_t **v;
    size_t n;
} list_t;

/* A property's schema: by name (properties) or by pattern (patternProperties). */
typedef struct prop {
    const char *key; /* borrowed from the schema's JSON */
    bool pattern;    /* then key compiled in re */
    regex_t re;
    node_t *n;
} prop_t;

/* One subschema. Its keyword values are borrowed from the root JSON. */
struct node {
    json_t *s;      /* an object, or true / false */
    unsigned types; /* T_* bits; 0: any */
    prop_t *props;  /* properties, then patternProperties */
    size_t nprops;
    node_t *additional; /* additionalProperties, or NULL */
    json_t *required;   /* an array of strings, or NULL */
    list_t prefix;      /* prefixItems, or items given as an array */
    node_t *items;      /* the items after prefix (additionalItems after the array form) */
    list_t all, any, one;
    node_t * not ;
    node_t *ref;
    json_t *min, *max, *xmin, *xmax, *multiple; /* numbers, or NULL */
    json_t *enumv, *constv;
    long long min_len, max_len, min_items, max_items, min_props, max_props; /* -1: none */
    bool unique;
    bool has_re;
    regex_t re; /* pattern */
};

struct ks_json_schema {
    json_t *root;
    node_t **nodes; /* every node, in the order made: for $ref and for free */
    size_t n, cap;
    node_t *top;
};

/* ---- JSON pointers, for where in a schema or a value ---- */

typedef struct ptr {
    char s[512];
    size_t len;
} ptr_t;

/* Appends "/" and k (~ and / escaped as ~0 and ~1; cut short when full). Returns the length
 * to restore. */
static size_t ptr_key(ptr_t *p, const char *k)
{
    size_t old = p->len;
    if (p->len + 1 < sizeof(p->s))
        p->s[p->len++] = '/';
    for (; *k && p->len + 3 < sizeof(p->s); k++) {
        if (*k == '~' || *k == '/') {
            p->s[p->len++] = '~';
            p->s[p->len++] = *k == '~' ? '0' : '1';
        } else
            p->s[p->len++] = *k;
    }
    p->s[p->len] = '\0';
    return old;
}

static size_t ptr_index(ptr_t *p, size_t i)
{
    char k[24];
    snprintf(k, sizeof(k), "%zu", i);
    return ptr_key(p, k);
}

static void ptr_pop(ptr_t *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

/* p for a message: top when empty, its last 160 bytes after "..." when longer. */
static const char *ptr_show(const ptr_t *p, const char *top, char *buf, size_t size)
{
    if (!p->len)
        return top;
    if (p->len <= 160)
        return p->s;
    snprintf(buf, size, "...%s", p->s + p->len - 160);
    return buf;
}

/* ---- values in messages ---- */

/* v as compact JSON (reals to 15 digits), cut to size with "..." at the end. */
static const char *dump(json_t *v, char *buf, size_t size)
{
    /* 15 digits: 0.1, not 0.10000000000000001 */
    size_t n =
        json_dumpb(v, buf, size - 1, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
    if (n >= size - 1) {
        snprintf(buf + size - 5, 5, "...");
        n = size - 1;
    }
    buf[n] = '\0';
    return buf;
}

const char *ks_json_show(json_t *v, char *buf, size_t size)
{
    if (json_is_object(v))
        return "an object";
    if (json_is_array(v))
        return "an array";
    return dump(v, buf, size);
}

/* ---- compiling ---- */

typedef struct comp {
    ks_json_schema_t *js;
    ptr_t at; /* where in the schema */
    char *err;
    size_t errsize;
} comp_t;

/* Fills err with `<where>: <kw>: <what>` (kw NULL: none). Returns -1. */
static int cfail(comp_t *c, const char *kw, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cfail(comp_t *c, const char *kw, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    char buf[176];
    size_t old = kw ? ptr_key(&c->at, kw) : c->at.len;
    snprintf(c->err, c->errsize, "%s: %s", ptr_show(&c->at, "the schema", buf, sizeof(buf)), what);
    ptr_pop(&c->at, old);
    return -1;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        abort();
    return p;
}

static node_t *compile(comp_t *c, json_t *s, int depth);

/* s, the value of kw (then key, or index i when key is NULL and i >= 0), compiled. */
static node_t *sub(comp_t *c, json_t *s, const char *kw, const char *key, long i, int depth)
{
    size_t old = ptr_key(&c->at, kw);
    if (key)
        ptr_key(&c->at, key);
    else if (i >= 0)
        ptr_index(&c->at, (size_t)i);
    node_t *n = compile(c, s, depth + 1);
    ptr_pop(&c->at, old);
    return n;
}

/* kw's array of schemas (not empty) into l. Absent: l stays empty. */
static int sub_list(comp_t *c, json_t *s, const char *kw, list_t *l, int depth)
{
    json_t *a = json_object_get(s, kw);
    if (!a)
        return 0;
    if (!json_is_array(a) || !json_array_size(a))
        return cfail(c, kw, "must be an array of schemas, not empty");
    l->n = json_array_size(a);
    l->v = xcalloc(l->n, sizeof(*l->v));
    for (size_t i = 0; i < l->n; i++)
        if (!(l->v[i] = sub(c, json_array_get(a, i), kw, NULL, (long)i, depth)))
            return -1;
    return 0;
}

/* A count: a non-negative integer (2.0 too), -1 when absent. */
static int count(comp_t *c, json_t *s, const char *kw, long long *out)
{
    json_t *v = json_object_get(s, kw);
    *out = -1;
    if (!v)
        return 0;
    double d = json_number_value(v);
    if (json_is_integer(v) && json_integer_value(v) >= 0)
        *out = json_integer_value(v);
    else if (json_is_real(v) && d >= 0 && d < 9e18 && d == floor(d))
        *out = (long long)d;
    else
        return cfail(c, kw, "must be a non-negative integer");
    return 0;
}

/* A number keyword's value, or NULL (absent; -1 when it is not a number). */
static int number(comp_t *c, json_t *s, const char *kw, json_t **out)
{
    *out = json_object_get(s, kw);
    if (*out && !json_is_number(*out))
        return cfail(c, kw, "must be a number");
    return 0;
}

/* An ECMA-262 pattern as POSIX ERE: the class escapes spelled out, \n \t \r as the
 * characters. Returns 0, or -1 (too long, or a negated class inside brackets). */
static int translate(const char *in, char *out, size_t size)
{
    static const char *const outside[] = {
        "d[0-9]",       "D[^0-9]",       "w[A-Za-z0-9_]", "W[^A-Za-z0-9_]",
        "s[[:space:]]", "S[^[:space:]]", "n\n",           "t\t",
        "r\r"};
    static const char *const inside[] = {"d0-9", "wA-Za-z0-9_", "s[:space:]", "n\n", "t\t", "r\r"};
    size_t o = 0;
    bool br = false;
    for (const char *p = in; *p; p++) {
        char one[3] = {*p, 0, 0};
        const char *add = one;
        if (*p == '\\' && p[1]) {
            char e = *++p;
            const char *const *tab = br ? inside : outside;
            size_t nt = br ? sizeof(inside) / sizeof(*inside) : sizeof(outside) / sizeof(*outside);
            if (br && (e == 'D' || e == 'W' || e == 'S'))
                return -1;
            one[0] = br ? e : '\\';
            one[1] = br ? 0 : e;
            for (size_t i = 0; i < nt; i++)
                if (tab[i][0] == e)
                    add = tab[i] + 1;
        } else if (*p == '[' && !br)
            br = true;
        else if (*p == ']' && br && p[-1] != '[' && !(p[-1] == '^' && p[-2] == '['))
            br = false;
        size_t n = strlen(add);
        if (o + n + 1 > size)
            return -1;
        memcpy(out + o, add, n);
        o += n;
    }
    out[o] = '\0';
    return 0;
}

/* Most an ERE may cost regcomp: glibc copies a repeated part once per repeat ({n,m} up to
 * 32767, nested: multiplied), so "(a{1000}){1000}" would take gigabytes. */
#define MAX_ERE_COST 4000

/* About how many parts regcomp makes of ere: each atom once, a repeated one (a group: its
 * parts) as many times as its bound. MAX_ERE_COST + 1 when more (or nested past 64). */
static size_t ere_cost(const char *ere)
{
    size_t stack[64], depth = 0, sum = 0, last = 0;
    for (const char *p = ere; *p; p++) {
        if (sum > MAX_ERE_COST)
            break;
        if (*p == '{' && p[1] >= '0' && p[1] <= '9') {
            char *end;
            unsigned long n = strtoul(p + 1, &end, 10);
            if (*end == ',')
                n = end[1] >= '0' && end[1] <= '9' ? strtoul(end + 1, &end, 10) : n + 1;
            if (n > MAX_ERE_COST)
                return MAX_ERE_COST + 1;
            sum += last * (n ? n - 1 : 0);
            last *= n ? n : 1;
            p = *end == '}' ? end : p;
            continue;
        }
        if (*p == '(') {
            if (depth == sizeof(stack) / sizeof(stack[0]))
                return MAX_ERE_COST + 1;
            stack[depth++] = sum;
            sum = last = 0;
            continue;
        }
        if (*p == ')' && depth) {
            last = sum ? sum : 1;
            sum = stack[--depth] + last;
            continue;
        }
        if (*p == '[') { /* a bracket expression: one atom */
            const char *q = p + 1 + (p[1] == '^');
            q += *q == ']';
            while (*q && *q != ']')
                q += *q == '[' && q[1] == ':' && strstr(q, ":]") ? strstr(q, ":]") + 2 - q : 1;
            p = *q ? q : p;
        } else if (*p == '\\' && p[1])
            p++;
        else if (*p == '+') { /* a+ is aa*: a copy, and a+ + copies both */
            sum += last;
            last *= 2;
            continue;
        } else if (*p == '*' || *p == '?') /* wraps the atom: a repeat after copies it all */
            continue;
        else if (strchr("|^$", *p)) {
            last = 0;
            continue;
        }
        last = 1;
        sum++;
    }
    while (depth)
        sum += stack[--depth];
    return sum;
}

static int regex(comp_t *c, const char *kw, const char *pattern, regex_t *re)
{
    char ere[1024], why[128];
    if (translate(pattern, ere, sizeof(ere)))
        return cfail(c, kw,
                     "\"%.100s\" is longer than %zu bytes as POSIX ERE, or negates a class "
                     "inside brackets",
                     pattern, sizeof(ere) - 1);
    if (ere_cost(ere) > MAX_ERE_COST)
        return cfail(c, kw, "\"%.100s\" repeats too much (its {n,m} bounds multiplied past %d)",
                     pattern, MAX_ERE_COST);
    int rc = regcomp(re, ere, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        regerror(rc, re, why, sizeof(why));
        return cfail(c, kw,
                     "\"%.100s\" does not compile as a POSIX extended regular expression: %s",
                     pattern, why);
    }
    return 0;
}

static int types(comp_t *c, json_t *t, unsigned *out)
{
    if (!t)
        return 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
        size_t k = 0;
        while (name && k < NTYPES && strcmp(type_names[k], name))
            k++;
        if (!name || k == NTYPES)
            return cfail(c, "type",
                         "must be a type's name (null, boolean, object, array, number, string, "
                         "integer) or an array of them");
        *out |= 1u << k;
    }
    return 0;
}

/* The value ref ("#" and a JSON pointer) names within root, or NULL. */
static json_t *resolve(json_t *root, const char *ref)
{
    if (*ref++ != '#')
        return NULL;
    json_t *cur = root;
    while (*ref) {
        if (*ref++ != '/')
            return NULL;
        char seg[256];
        size_t n = 0;
        for (; *ref && *ref != '/'; ref++) {
            char ch = *ref;
            if (ch == '~' && (ref[1] == '0' || ref[1] == '1'))
                ch = *++ref == '0' ? '~' : '/';
            if (n + 1 >= sizeof(seg))
                return NULL;
            seg[n++] = ch;
        }
        seg[n] = '\0';
        if (json_is_object(cur))
            cur = json_object_get(cur, seg);
        else if (json_is_array(cur) && n && strspn(seg, "0123456789") == n && n < 10)
            cur = json_array_get(cur, (size_t)atol(seg));
        else
            return NULL;
        if (!cur)
            return NULL;
    }
    return cur;
}

static int compile_ref(comp_t *c, node_t *nd, json_t *r, int depth)
{
    const char *ref = json_string_value(r);
    if (!ref || *ref != '#')
        return cfail(c, "$ref",
                     "only a reference within the schema (\"#\", \"#/$defs/name\") is taken");
    json_t *t = resolve(c->js->root, ref);
    if (!t)
        return cfail(c, "$ref", "\"%.200s\" names nothing in the schema", ref);
    for (size_t i = 0; i < c->js->n; i++)
        if (c->js->nodes[i]->s == t) {
            nd->ref = c->js->nodes[i];
            return 0;
        }
    return (nd->ref = sub(c, t, "$ref", NULL, -1, depth)) ? 0 : -1;
}

static int compile_object(comp_t *c, node_t *nd, json_t *s, int depth)
{
    json_t *v, *x;
    const char *k;
    if (types(c, json_object_get(s, "type"), &nd->types))
        return -1;
    static const char *const prop_kws[] = {"properties", "patternProperties"};
    nd->props = xcalloc(json_object_size(json_object_get(s, prop_kws[0])) +
                            json_object_size(json_object_get(s, prop_kws[1])),
                        sizeof(*nd->props));
    for (size_t i = 0; i < 2; i++) {
        if (!(v = json_object_get(s, prop_kws[i])))
            continue;
        if (!json_is_object(v))
            return cfail(c, prop_kws[i], "must be an object of schemas");
        json_object_foreach(v, k, x)
        {
            prop_t *p = &nd->props[nd->nprops];
            p->key = k;
            if (i && regex(c, prop_kws[i], k, &p->re))
                return -1;
            p->pattern = i;
            nd->nprops++; /* its regex is freed with it */
            if (!(p->n = sub(c, x, prop_kws[i], k, -1, depth)))
                return -1;
        }
    }
    if ((v = json_object_get(s, "additionalProperties")) &&
        !(nd->additional = sub(c, v, "additionalProperties", NULL, -1, depth)))
        return -1;
    if ((v = json_object_get(s, "required"))) {
        bool ok = json_is_array(v);
        for (size_t i = 0; ok && i < json_array_size(v); i++)
            ok = json_is_string(json_array_get(v, i));
        if (!ok)
            return cfail(c, "required", "must be an array of property names");
        nd->required = v;
    }
    /* prefixItems, then items for the rest; or items as an array (drafts 4-7), then
     * additionalItems. */
    json_t *items = json_object_get(s, "items");
    if (json_object_get(s, "prefixItems")) {
        if (sub_list(c, s, "prefixItems", &nd->prefix, depth))
            return -1;
    } else if (json_is_array(items)) {
        if (sub_list(c, s, "items", &nd->prefix, depth))
            return -1;
        items = json_object_get(s, "additionalItems");
    }
    if (items && !json_is_array(items) && !(nd->items = sub(c, items, "items", NULL, -1, depth)))
        return -1;
    if (sub_list(c, s, "allOf", &nd->all, depth) || sub_list(c, s, "anyOf", &nd->any, depth) ||
        sub_list(c, s, "oneOf", &nd->one, depth))
        return -1;
    if ((v = json_object_get(s, "not")) && !(nd->not = sub(c, v, "not", NULL, -1, depth)))
        return -1;
    if ((v = json_object_get(s, "$ref")) && compile_ref(c, nd, v, depth))
        return -1;
    if (number(c, s, "minimum", &nd->min) || number(c, s, "maximum", &nd->max) ||
        number(c, s, "multipleOf", &nd->multiple))
        return -1;
    if (nd->multiple && json_number_value(nd->multiple) <= 0)
        return cfail(c, "multipleOf", "must be greater than 0");
    /* exclusive bounds: a number, or draft 4's boolean that makes minimum / maximum one */
    if (json_is_boolean(v = json_object_get(s, "exclusiveMinimum"))) {
        if (json_is_true(v))
            nd->xmin = nd->min, nd->min = NULL;
    } else if (number(c, s, "exclusiveMinimum", &nd->xmin))
        return -1;
    if (json_is_boolean(v = json_object_get(s, "exclusiveMaximum"))) {
        if (json_is_true(v))
            nd->xmax = nd->max, nd->max = NULL;
    } else if (number(c, s, "exclusiveMaximum", &nd->xmax))
        return -1;
    if (count(c, s, "minLength", &nd->min_len) || count(c, s, "maxLength", &nd->max_len) ||
        count(c, s, "minItems", &nd->min_items) || count(c, s, "maxItems", &nd->max_items) ||
        count(c, s, "minProperties", &nd->min_props) ||
        count(c, s, "maxProperties", &nd->max_props))
        return -1;
    if ((v = json_object_get(s, "uniqueItems"))) {
        if (!json_is_boolean(v))
            return cfail(c, "uniqueItems", "must be a boolean");
        nd->unique = json_is_true(v);
    }
    if ((v = json_object_get(s, "enum")) && !json_is_array(v))
        return cfail(c, "enum", "must be an array");
    nd->enumv = v;
    nd->constv = json_object_get(s, "const");
    if ((v = json_object_get(s, "pattern"))) {
        if (!json_is_string(v))
            return cfail(c, "pattern", "must be a string");
        if (regex(c, "pattern", json_string_value(v), &nd->re))
            return -1;
        nd->has_re = true;
    }
    return 0;
}

/* s as a node, kept in c->js->nodes (before its subschemas, so a $ref back to it finds it).
 * NULL with c->err. */
static node_t *compile(comp_t *c, json_t *s, int depth)
{
    if (depth > MAX_DEPTH) {
        cfail(c, NULL, "nests deeper than %d", MAX_DEPTH);
        return NULL;
    }
    if (!json_is_object(s) && !json_is_boolean(s)) {
        cfail(c, NULL, "a schema must be an object or a boolean");
        return NULL;
    }
    ks_json_schema_t *js = c->js;
    if (js->n == js->cap) {
        js->cap = js->cap ? 2 * js->cap : 16;
        js->nodes = realloc(js->nodes, js->cap * sizeof(*js->nodes));
        if (!js->nodes)
            abort();
    }
    node_t *nd = js->nodes[js->n++] = xcalloc(1, sizeof(*nd));
    nd->s = s;
    if (json_is_object(s) && compile_object(c, nd, s, depth))
        return NULL;
    return nd;
}

ks_json_schema_t *ks_json_schema_new(const char *text, size_t len, char *err, size_t errsize)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!root) {
        snprintf(err, errsize, "not JSON: %s (at byte %d)", je.text, je.position);
        return NULL;
    }
    ks_json_schema_t *js = xcalloc(1, sizeof(*js));
    js->root = root;
    comp_t c = {.js = js, .err = err, .errsize = errsize};
    if (!(js->top = compile(&c, root, 0))) {
        ks_json_schema_free(js);
        return NULL;
    }
    return js;
}

void ks_json_schema_free(ks_json_schema_t *js)
{
    if (!js)
        return;
    for (size_t i = 0; i < js->n; i++) {
        node_t *nd = js->nodes[i];
        for (size_t k = 0; k < nd->nprops; k++)
            if (nd->props[k].pattern)
                regfree(&nd->props[k].re);
        if (nd->has_re)
            regfree(&nd->re);
        free(nd->props);
        free(nd->prefix.v);
        free(nd->all.v);
        free(nd->any.v);
        free(nd->one.v);
        free(nd);
    }
    free(js->nodes);
    json_decref(js->root);
    free(js);
}

/* ---- checking ---- */

typedef struct val {
    ptr_t at;   /* where in the value */
    bool quiet; /* trying a branch: no message */
    char *err;
    size_t errsize;
} val_t;

/* Fills err with `<where>: <what>` (`the value: ...` at the top) unless quiet. Returns -1. */
static int fail(val_t *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(val_t *x, const char *fmt, ...)
{
    if (x->quiet)
        return -1;
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    char buf[176];
    snprintf(x->err, x->errsize, "%s: %s", ptr_show(&x->at, "the value", buf, sizeof(buf)), what);
    return -1;
}

static unsigned type_of(json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOLEAN;
    case JSON_OBJECT:
        return T_OBJECT;
    case JSON_ARRAY:
        return T_ARRAY;
    case JSON_STRING:
        return T_STRING;
    case JSON_INTEGER:
        return T_NUMBER | T_INTEGER;
    case JSON_REAL: {
        double d = json_real_value(v);
        return T_NUMBER | (isfinite(d) && d == floor(d) ? T_INTEGER : 0);
    }
    }
    return 0;
}

/* a against b, numbers both: <0, 0, >0; integers exactly. */
static int num_cmp(json_t *a, json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);
        return (x > y) - (x < y);
    }
    double x = json_number_value(a), y = json_number_value(b);
    return (x > y) - (x < y);
}

/* JSON Schema's equality: numbers by value (1 is 1.0), objects whatever their keys' order. */
static bool equal(json_t *a, json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return num_cmp(a, b) == 0;
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!equal(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *x, *y;
        if (json_object_size(a) != json_object_size(b))
            return false;
        json_object_foreach(a, k, x)
        {
            if (!(y = json_object_get(b, k)) || !equal(x, y))
                return false;
        }
        return true;
    }
    return json_equal(a, b);
}

static bool multiple_of(json_t *v, json_t *m)
{
    if (json_is_integer(v) && json_is_integer(m))
        return json_integer_value(v) % json_integer_value(m) == 0;
    double q = json_number_value(v) / json_number_value(m);
    return isfinite(q) && fabs(q - nearbyint(q)) <= 8 * DBL_EPSILON * fmax(1.0, fabs(q));
}

static int check(val_t *x, const node_t *n, json_t *v, int depth);

/* n on v at key (or index i when key is NULL) of the value. */
static int check_at(val_t *x, const node_t *n, json_t *v, const char *key, size_t i, int depth)
{
    size_t old = key ? ptr_key(&x->at, key) : ptr_index(&x->at, i);
    int rc = check(x, n, v, depth + 1);
    ptr_pop(&x->at, old);
    return rc;
}

static int check_number(val_t *x, const node_t *n, json_t *v)
{
    char a[64], b[64];
    if (n->min && num_cmp(v, n->min) < 0)
        return fail(x, "%s is less than minimum %s", dump(v, a, sizeof(a)),
                    dump(n->min, b, sizeof(b)));
    if (n->max && num_cmp(v, n->max) > 0)
        return fail(x, "%s is greater than maximum %s", dump(v, a, sizeof(a)),
                    dump(n->max, b, sizeof(b)));
    if (n->xmin && num_cmp(v, n->xmin) <= 0)
        return fail(x, "%s is not greater than exclusiveMinimum %s", dump(v, a, sizeof(a)),
                    dump(n->xmin, b, sizeof(b)));
    if (n->xmax && num_cmp(v, n->xmax) >= 0)
        return fail(x, "%s is not less than exclusiveMaximum %s", dump(v, a, sizeof(a)),
                    dump(n->xmax, b, sizeof(b)));
    if (n->multiple && !multiple_of(v, n->multiple))
        return fail(x, "%s is not a multiple of %s", dump(v, a, sizeof(a)),
                    dump(n->multiple, b, sizeof(b)));
    return 0;
}

/* Whether re matches s[0..len) somewhere: the whole string, U+0000 too (REG_STARTEND). */
static bool matches(const regex_t *re, const char *s, size_t len)
{
    regmatch_t m = {.rm_so = 0, .rm_eo = (regoff_t)len};
    return regexec(re, s, 1, &m, REG_STARTEND) == 0;
}

static int check_string(val_t *x, const node_t *n, json_t *v)
{
    char a[64];
    const unsigned char *s = (const unsigned char *)json_string_value(v);
    size_t len = json_string_length(v), cps = 0;
    for (size_t i = 0; i < len; i++)
        cps += (s[i] & 0xc0) != 0x80;
    if (n->min_len >= 0 && cps < (unsigned long long)n->min_len)
        return fail(x, "a string of %zu characters, shorter than minLength %lld", cps, n->min_len);
    if (n->max_len >= 0 && cps > (unsigned long long)n->max_len)
        return fail(x, "a string of %zu characters, longer than maxLength %lld", cps, n->max_len);
    if (n->has_re && !matches(&n->re, (const char *)s, len))
        return fail(x, "%s does not match pattern \"%s\"", dump(v, a, sizeof(a)),
                    json_string_value(json_object_get(n->s, "pattern")));
    return 0;
}

static int check_array(val_t *x, const node_t *n, json_t *v, int depth)
{
    size_t len = json_array_size(v);
    if (n->min_items >= 0 && len < (unsigned long long)n->min_items)
        return fail(x, "an array of %zu items, fewer than minItems %lld", len, n->min_items);
    if (n->max_items >= 0 && len > (unsigned long long)n->max_items)
        return fail(x, "an array of %zu items, more than maxItems %lld", len, n->max_items);
    for (size_t i = 0; i < len; i++) {
        const node_t *in = i < n->prefix.n ? n->prefix.v[i] : n->items;
        if (in && check_at(x, in, json_array_get(v, i), NULL, i, depth))
            return -1;
    }
    if (n->unique) /* O(n²): fine for a record's arrays */
        for (size_t i = 0; i < len; i++)
            for (size_t j = i + 1; j < len; j++)
                if (equal(json_array_get(v, i), json_array_get(v, j)))
                    return fail(x, "items %zu and %zu are equal (uniqueItems)", i, j);
    return 0;
}

static int check_object(val_t *x, const node_t *n, json_t *v, int depth)
{
    size_t size = json_object_size(v);
    for (size_t i = 0; i < json_array_size(n->required); i++) {
        const char *k = json_string_value(json_array_get(n->required, i));
        if (!json_object_get(v, k)) {
            size_t old = ptr_key(&x->at, k);
            int rc = fail(x, "missing (required)");
            ptr_pop(&x->at, old);
            return rc;
        }
    }
    if (n->min_props >= 0 && size < (unsigned long long)n->min_props)
        return fail(x, "an object of %zu properties, fewer than minProperties %lld", size,
                    n->min_props);
    if (n->max_props >= 0 && size > (unsigned long long)n->max_props)
        return fail(x, "an object of %zu properties, more than maxProperties %lld", size,
                    n->max_props);
    const char *k;
    json_t *f;
    json_object_foreach(v, k, f)
    {
        bool named = false;
        for (size_t i = 0; i < n->nprops; i++) {
            const prop_t *p = &n->props[i];
            if (p->pattern ? !matches(&p->re, k, strlen(k)) : strcmp(p->key, k))
                continue;
            named = true;
            if (check_at(x, p->n, f, k, 0, depth))
                return -1;
        }
        if (named || !n->additional)
            continue;
        if (json_is_false(n->additional->s)) {
            size_t old = ptr_key(&x->at, k);
            int rc = fail(x, "a property the schema does not name (additionalProperties is false)");
            ptr_pop(&x->at, old);
            return rc;
        }
        if (check_at(x, n->additional, f, k, 0, depth))
            return -1;
    }
    return 0;
}

/* anyOf (one: false) or oneOf (one: true). The first branch's error is the one told. */
static int check_branches(val_t *x, const list_t *l, bool one, json_t *v, int depth)
{
    const char *kw = one ? "oneOf" : "anyOf";
    bool quiet = x->quiet;
    size_t fits = 0, first = 0;
    if (check(x, l->v[0], v, depth + 1) == 0)
        fits = 1;
    x->quiet = true;
    for (size_t i = 1; i < l->n && (one || !fits); i++) {
        if (check(x, l->v[i], v, depth + 1))
            continue;
        if (fits++ == 0) {
            first = i;
            continue;
        }
        x->quiet = quiet;
        return fail(x, "fits more than one of oneOf's schemas (%zu and %zu)", first, i);
    }
    x->quiet = quiet;
    if (fits)
        return 0;
    if (quiet)
        return -1;
    char *why = strdup(x->err);
    if (!why)
        abort();
    fail(x, "fits none of %s's %zu schemas (the first: %s)", kw, l->n, why);
    free(why);
    return -1;
}

/* Whether v fits n: 0, or -1 with x->err (unless quiet). */
static int check(val_t *x, const node_t *n, json_t *v, int depth)
{
    char a[64];
    if (depth > MAX_CHECKS)
        return fail(x,
                    "the check stacks more than %d schemas (a value nested that deep, or a "
                    "$ref that loops)",
                    MAX_CHECKS);
    if (json_is_boolean(n->s))
        return json_is_true(n->s) ? 0
                                  : fail(x, "%s is not allowed here (the schema is false)",
                                         ks_json_show(v, a, sizeof(a)));
    if (n->ref && check(x, n->ref, v, depth + 1))
        return -1;
    unsigned t = type_of(v);
    if (n->types && !(n->types & t)) {
        char names[128] = "";
        for (size_t k = 0, w = 0; k < NTYPES; k++)
            if (n->types & (1u << k))
                w += (size_t)snprintf(names + w, sizeof(names) - w, "%s%s", w ? " or " : "",
                                      type_names[k]);
        return fail(x, "%s is not of type %s", ks_json_show(v, a, sizeof(a)), names);
    }
    if (n->enumv) {
        size_t i = 0;
        while (i < json_array_size(n->enumv) && !equal(v, json_array_get(n->enumv, i)))
            i++;
        char b[128];
        if (i == json_array_size(n->enumv))
            return fail(x, "%s is not one of enum %s", ks_json_show(v, a, sizeof(a)),
                        dump(n->enumv, b, sizeof(b)));
    }
    if (n->constv && !equal(v, n->constv)) {
        char b[128];
        return fail(x, "%s is not const %s", ks_json_show(v, a, sizeof(a)),
                    dump(n->constv, b, sizeof(b)));
    }
    if (((t & T_NUMBER) && check_number(x, n, v)) || ((t & T_STRING) && check_string(x, n, v)) ||
        ((t & T_ARRAY) && check_array(x, n, v, depth)) ||
        ((t & T_OBJECT) && check_object(x, n, v, depth)))
        return -1;
    for (size_t i = 0; i < n->all.n; i++)
        if (check(x, n->all.v[i], v, depth + 1))
            return -1;
    if ((n->any.n && check_branches(x, &n->any, false, v, depth)) ||
        (n->one.n && check_branches(x, &n->one, true, v, depth)))
        return -1;
    if (n->not ) {
        bool quiet = x->quiet;
        x->quiet = true;
        int rc = check(x, n->not, v, depth + 1);
        x->quiet = quiet;
        if (rc == 0)
            return fail(x, "%s fits the schema under not", ks_json_show(v, a, sizeof(a)));
    }
    return 0;
}

int ks_json_schema_check(const ks_json_schema_t *js, json_t *v, char *err, size_t errsize)
{
    val_t x = {.err = err, .errsize = errsize};
    return check(&x, js->top, v, 0);
}

/* ---- with a registry's schema ---- */

static void *parsed_make(const char *text, size_t len, char *err, size_t errsize)
{
    return ks_json_schema_new(text, len, err, errsize);
}

static void parsed_free(void *p)
{
    ks_json_schema_free(p);
}

const ks_schema_parser_t ks_json_schema_parser = {KS_SCHEMA_JSON, parsed_make, parsed_free};

int ks_json_schema_body_json(ks_jbuf_t *b, const void *body, size_t n, char *err, size_t errsize)
{
    json_error_t je;
    json_t *j = json_loadb(body, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j) {
        snprintf(err, errsize, "not JSON: %s (at byte %d)", je.text, je.position + KS_WIRE_HEADER);
        return -1;
    }
    size_t len = json_dumpb(j, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
    char *o = ks_jbuf_reserve(b, len + 1);
    json_dumpb(j, o, len, JSON_COMPACT | JSON_ENCODE_ANY);
    b->len += len;
    b->p[b->len] = '\0';
    json_decref(j);
    return 0;
}
