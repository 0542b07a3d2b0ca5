/* proto_schema.c: Protobuf schemas parsed (proto_schema.h): a small .proto reader and a reader
 * of serialized FileDescriptorProtos, both filling one builder, which then sorts the fields
 * and resolves type names by Protobuf's scoping rules. */
#include "proto_schema.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_out.h"
#include "proto_wire.h"
#include "util.h"

/* Deeper nesting of messages in a schema is refused (the decoder's bound too). */
#define MAX_NEST 64

/* ---- the builder ---- */

typedef struct build {
    ks_proto_t *p;
    char **type_names; /* per message, per field: the type name as written (NULL: scalar) */
    char *pkg;
    char *err;
    size_t errsize;
    int failed;
} build_t;

static int bfail(build_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bfail(build_t *b, const char *fmt, ...)
{
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, b->errsize, fmt, ap);
        va_end(ap);
    }
    b->failed = 1;
    return -1;
}

/* arr grown to hold n + 1 items of size each (doubling); aborts when out of memory. */
static void *grow(void *arr, size_t n, size_t size)
{
    if (n & (n - 1) && n > 4)
        return arr; /* room left: capacity is the next power of two (at least 8) */
    size_t cap = n < 8 ? 8 : n * 2;
    void *q = realloc(arr, cap * size);
    if (!q)
        abort();
    return q;
}

static char *join(const char *scope, const char *name)
{
    size_t a = strlen(scope), n = strlen(name);
    char *s = malloc(a + n + 2);
    if (!s)
        abort();
    memcpy(s, scope, a);
    s[a] = '.';
    memcpy(s + (a ? a + 1 : 0), name, n + 1);
    return s;
}

/* A new message named scope.name, nested in parent (-1: top level); returns its index. */
static int msg_new(build_t *b, const char *scope, const char *name, int parent)
{
    ks_proto_t *p = b->p;
    p->msgs = grow(p->msgs, p->nmsgs, sizeof(*p->msgs));
    b->type_names = grow(b->type_names, p->nmsgs, sizeof(*b->type_names));
    int i = (int)p->nmsgs++;
    p->msgs[i] = (ks_pb_msg_t){.full_name = join(scope, name)};
    b->type_names[i] = NULL;
    if (parent < 0) {
        p->top = grow(p->top, p->ntop, sizeof(int));
        p->top[p->ntop++] = i;
    } else {
        ks_pb_msg_t *m = &p->msgs[parent];
        m->nested = grow(m->nested, m->nnested, sizeof(int));
        m->nested[m->nnested++] = i;
    }
    return i;
}

/* protoc's JSON name: underscores dropped, the letter after one upper-cased. */
static char *json_name_of(const char *name)
{
    char *s = ks_xstrdup(name), *o = s;
    int up = 0;
    for (const char *c = name; *c; c++) {
        if (*c == '_')
            up = 1;
        else {
            *o++ = up ? (char)toupper((unsigned char)*c) : *c;
            up = 0;
        }
    }
    *o = '\0';
    return s;
}

/* Adds a field to message mi; type_name (copied) for a message or enum type, else NULL. The
 * field's name, json_name (NULL: from name) are copied. Returns the new field. */
static ks_pb_field_t *field_add(build_t *b, int mi, const char *name, const char *json_name,
                                const char *type_name)
{
    ks_pb_msg_t *m = &b->p->msgs[mi];
    m->fields = grow(m->fields, m->nfields, sizeof(*m->fields));
    char **tn = (char **)b->type_names[mi];
    tn = grow(tn, m->nfields, sizeof(char *));
    b->type_names[mi] = (char *)tn;
    tn[m->nfields] = type_name ? ks_xstrdup(type_name) : NULL;
    ks_pb_field_t *f = &m->fields[m->nfields++];
    *f = (ks_pb_field_t){.name = ks_xstrdup(name),
                         .json_name = json_name ? ks_xstrdup(json_name) : json_name_of(name),
                         .oneof = -1,
                         .ref = -1};
    return f;
}

static int enum_new(build_t *b, const char *scope, const char *name)
{
    ks_proto_t *p = b->p;
    p->enums = grow(p->enums, p->nenums, sizeof(*p->enums));
    p->enums[p->nenums] = (ks_pb_enum_t){.full_name = join(scope, name)};
    return (int)p->nenums++;
}

static void enum_value(build_t *b, int ei, const char *name, int32_t number)
{
    ks_pb_enum_t *e = &b->p->enums[ei];
    e->values = grow(e->values, e->nvalues, sizeof(*e->values));
    e->values[e->nvalues++] = (ks_pb_enum_value_t){ks_xstrdup(name), number};
}

static const char *const scalar_names[] = {
    [KS_PB_DOUBLE] = "double",     [KS_PB_FLOAT] = "float",   [KS_PB_INT64] = "int64",
    [KS_PB_UINT64] = "uint64",     [KS_PB_INT32] = "int32",   [KS_PB_FIXED64] = "fixed64",
    [KS_PB_FIXED32] = "fixed32",   [KS_PB_BOOL] = "bool",     [KS_PB_STRING] = "string",
    [KS_PB_BYTES] = "bytes",       [KS_PB_UINT32] = "uint32", [KS_PB_SFIXED32] = "sfixed32",
    [KS_PB_SFIXED64] = "sfixed64", [KS_PB_SINT32] = "sint32", [KS_PB_SINT64] = "sint64",
};

/* The scalar type named s, or 0. */
static ks_pb_type_t scalar_type(const char *s)
{
    for (size_t i = 0; i < sizeof(scalar_names) / sizeof(scalar_names[0]); i++)
        if (scalar_names[i] && !strcmp(scalar_names[i], s))
            return (ks_pb_type_t)i;
    return 0;
}

/* The message (*is_enum 0) or enum (1) whose full name is s, or -1. */
static int find_type(const ks_proto_t *p, const char *s, int *is_enum)
{
    for (size_t i = 0; i < p->nmsgs; i++)
        if (!strcmp(p->msgs[i].full_name, s))
            return *is_enum = 0, (int)i;
    for (size_t i = 0; i < p->nenums; i++)
        if (!strcmp(p->enums[i].full_name, s))
            return *is_enum = 1, (int)i;
    return -1;
}

/* name, as written in scope (a message's full name), resolved: ".a.B" is full; else scope's
 * own name first, then each enclosing one out to the top. Returns the index, or -1. */
static int resolve(const ks_proto_t *p, const char *scope, const char *name, int *is_enum)
{
    if (name[0] == '.')
        return find_type(p, name + 1, is_enum);
    size_t n = strlen(scope), nl = strlen(name);
    char *buf = malloc(n + nl + 2);
    if (!buf)
        abort();
    int r = -1;
    for (;;) {
        memcpy(buf, scope, n);
        buf[n] = '.';
        memcpy(buf + (n ? n + 1 : 0), name, nl + 1);
        if ((r = find_type(p, buf, is_enum)) >= 0 || !n)
            break;
        while (n && scope[n - 1] != '.')
            n--;
        if (n)
            n--;
    }
    free(buf);
    return r;
}

static int cmp_field(const void *a, const void *b)
{
    const ks_pb_field_t *x = a, *y = b;
    return x->number < y->number ? -1 : x->number > y->number;
}

/* Message mi's field types resolved, then its fields sorted by number (no number twice). */
static int finish_msg(build_t *b, size_t mi)
{
    ks_proto_t *p = b->p;
    ks_pb_msg_t *m = &p->msgs[mi];
    char **tn = (char **)b->type_names[mi];
    for (size_t i = 0; i < m->nfields; i++) {
        ks_pb_field_t *f = &m->fields[i];
        if (!tn[i])
            continue;
        int is_enum = 0, r = resolve(p, m->full_name, tn[i], &is_enum);
        if (r < 0)
            return bfail(b, "message %s, field %s: no type %s in the schema", m->full_name, f->name,
                         tn[i]);
        if (f->type && f->type != (is_enum ? KS_PB_ENUM : KS_PB_MESSAGE))
            return bfail(b, "message %s, field %s: %s is not of the type the field says",
                         m->full_name, f->name, tn[i]);
        f->type = is_enum ? KS_PB_ENUM : KS_PB_MESSAGE;
        f->ref = r;
        if (f->type == KS_PB_ENUM && !p->enums[r].nvalues)
            return bfail(b, "enum %s has no values", p->enums[r].full_name);
        f->presence |= f->type == KS_PB_MESSAGE;
    }
    if (m->nfields)
        qsort(m->fields, m->nfields, sizeof(*m->fields), cmp_field);
    for (size_t i = 0; i < m->nfields; i++) {
        const ks_pb_field_t *f = &m->fields[i];
        if (f->number < 1 || f->number > 536870911)
            return bfail(b, "message %s, field %s: number %u is out of range", m->full_name,
                         f->name, (unsigned)f->number);
        if ((f->type == KS_PB_MESSAGE || f->type == KS_PB_ENUM) && f->ref < 0)
            return bfail(b, "message %s, field %s: a message or enum type without its name",
                         m->full_name, f->name);
        if (!f->type || f->type == KS_PB_GROUP || f->type > KS_PB_SINT64)
            return bfail(b, "message %s, field %s: a type not taken (groups are refused)",
                         m->full_name, f->name);
        if (i && f->number == m->fields[i - 1].number)
            return bfail(b, "message %s: field number %u is used twice", m->full_name,
                         (unsigned)f->number);
    }
    return 0;
}

static void free_type_names(build_t *b)
{
    for (size_t i = 0; i < b->p->nmsgs; i++) {
        char **tn = (char **)b->type_names[i];
        for (size_t j = 0; tn && j < b->p->msgs[i].nfields; j++)
            free(tn[j]);
        free(tn);
    }
    free(b->type_names);
    b->type_names = NULL;
}

static int finish(build_t *b)
{
    for (size_t i = 0; !b->failed && i < b->p->nmsgs; i++)
        finish_msg(b, i);
    if (!b->failed && !b->p->ntop)
        bfail(b, "the schema has no message");
    return b->failed ? -1 : 0;
}

/* ---- the .proto reader ---- */

typedef struct lex {
    const char *p, *end;
    int line;
    char tok[256]; /* the token (a string's contents, unescaped) */
    char kind;     /* 'i' identifier, 'n' number, 's' string, a symbol itself, 0 the end */
} lex_t;

/* Skips white space and comments. */
static void skip_space(lex_t *l)
{
    while (l->p < l->end) {
        if (*l->p == '\n')
            l->line++;
        if (isspace((unsigned char)*l->p))
            l->p++;
        else if (l->end - l->p > 1 && l->p[0] == '/' && l->p[1] == '/')
            while (l->p < l->end && *l->p != '\n')
                l->p++;
        else if (l->end - l->p > 1 && l->p[0] == '/' && l->p[1] == '*') {
            l->p += 2;
            while (l->p < l->end && !(l->end - l->p > 1 && l->p[0] == '*' && l->p[1] == '/'))
                l->line += *l->p++ == '\n';
            l->p = l->p < l->end ? l->p + 2 : l->end;
        } else
            return;
    }
}

static int lex_string(build_t *b, lex_t *l)
{
    char q = *l->p++;
    size_t n = 0;
    while (l->p < l->end && *l->p != q && *l->p != '\n') {
        char c = *l->p++;
        if (c == '\\' && l->p < l->end)
            c = *l->p++; /* \" \\ \' as themselves; other escapes are not needed for names */
        if (n + 1 >= sizeof(l->tok))
            return bfail(b, "line %d: a string longer than %zu bytes", l->line, sizeof(l->tok) - 1);
        l->tok[n++] = c;
    }
    if (l->p >= l->end || *l->p != q)
        return bfail(b, "line %d: a string not closed", l->line);
    l->p++;
    l->tok[n] = '\0';
    l->kind = 's';
    return 0;
}

/* Reads the next token into l. */
static int next(build_t *b, lex_t *l)
{
    skip_space(l);
    if (l->p >= l->end) {
        l->kind = 0;
        strcpy(l->tok, "the end");
        return 0;
    }
    char c = *l->p;
    if (c == '"' || c == '\'')
        return lex_string(b, l);
    size_t n = 0;
    bool word = isalnum((unsigned char)c) || c == '_' || c == '.';
    while (l->p < l->end &&
           (n == 0 ||
            (word && (isalnum((unsigned char)*l->p) || *l->p == '_' || *l->p == '.' ||
                      ((*l->p == '-' || *l->p == '+') && (l->p[-1] == 'e' || l->p[-1] == 'E') &&
                       isdigit((unsigned char)l->tok[0])))))) {
        if (n + 1 >= sizeof(l->tok))
            return bfail(b, "line %d: a name longer than %zu bytes", l->line, sizeof(l->tok) - 1);
        l->tok[n++] = *l->p++;
    }
    l->tok[n] = '\0';
    l->kind =
        !word ? c
        : isdigit((unsigned char)c) || (c == '.' && n > 1 && isdigit((unsigned char)l->tok[1]))
            ? 'n'
            : 'i';
    return 0;
}

static bool is(const lex_t *l, const char *word)
{
    return l->kind == 'i' && !strcmp(l->tok, word);
}

/* Reads a token that must be symbol c. */
static int expect(build_t *b, lex_t *l, char c)
{
    if (next(b, l))
        return -1;
    if (l->kind != c)
        return bfail(b, "line %d: expected '%c', found \"%s\"", l->line, c, l->tok);
    return 0;
}

/* Reads a token that must be an identifier (what: for the error). */
static int expect_ident(build_t *b, lex_t *l, const char *what)
{
    if (next(b, l))
        return -1;
    if (l->kind != 'i')
        return bfail(b, "line %d: expected %s, found \"%s\"", l->line, what, l->tok);
    return 0;
}

/* The next token of a block (a message's, oneof's or enum's body) into l: 1 at the block's
 * '}', 0 for another token, -1 at an error (the schema ending inside the block among them). */
static int block_next(build_t *b, lex_t *l, const char *what)
{
    if (next(b, l))
        return -1;
    if (!l->kind)
        return bfail(b, "line %d: %s is not closed", l->line, what);
    return l->kind == '}';
}

/* Skips to the end of a statement: its ';', or a block's '}' (blocks inside balanced). */
static int skip_statement(build_t *b, lex_t *l)
{
    int depth = 0;
    for (;;) {
        if (next(b, l))
            return -1;
        if (!l->kind)
            return bfail(b, "line %d: the schema ends inside a statement", l->line);
        if (l->kind == '{')
            depth++;
        else if (l->kind == '}' && --depth <= 0)
            return 0;
        else if (l->kind == ';' && depth == 0)
            return 0;
    }
}

/* A field number: a decimal, hex or octal integer. */
static int field_number(build_t *b, lex_t *l, uint32_t *out)
{
    if (next(b, l))
        return -1;
    char *e;
    unsigned long long v = l->kind == 'n' ? strtoull(l->tok, &e, 0) : 0;
    if (l->kind != 'n' || *e || v < 1 || v > 536870911)
        return bfail(b, "line %d: a field number from 1 to 536870911, found \"%s\"", l->line,
                     l->tok);
    *out = (uint32_t)v;
    return 0;
}

/* Field options "[name = value, ...]" after the number, then ';'. packed and json_name are
 * kept in f; the rest skipped. */
static int field_options(build_t *b, lex_t *l, ks_pb_field_t *f, bool *packed_set)
{
    if (next(b, l))
        return -1;
    if (l->kind == ';')
        return 0;
    if (l->kind != '[')
        return bfail(b, "line %d: expected ';' or '[', found \"%s\"", l->line, l->tok);
    for (;;) {
        char name[256];
        if (next(b, l))
            return -1;
        if (l->kind == '(') { /* a custom option: (a.b).c */
            if (expect_ident(b, l, "an option's name") || expect(b, l, ')') || next(b, l))
                return -1;
            if (l->kind == 'i' && l->tok[0] == '.' && next(b, l))
                return -1;
            strcpy(name, "(custom)");
        } else if (l->kind == 'i') {
            strcpy(name, l->tok);
            if (next(b, l))
                return -1;
        } else
            return bfail(b, "line %d: expected an option's name, found \"%s\"", l->line, l->tok);
        if (l->kind != '=')
            return bfail(b, "line %d: expected '=', found \"%s\"", l->line, l->tok);
        if (next(b, l))
            return -1;
        if (l->kind == '-' && next(b, l))
            return -1;
        if (l->kind == '{') { /* an aggregate value: skipped whole */
            int depth = 1;
            while (depth > 0) {
                if (next(b, l))
                    return -1;
                if (!l->kind)
                    return bfail(b, "line %d: an option's value not closed", l->line);
                depth += l->kind == '{' ? 1 : l->kind == '}' ? -1 : 0;
            }
        } else if (!strcmp(name, "json_name") && l->kind == 's') {
            free(f->json_name);
            f->json_name = ks_xstrdup(l->tok);
        } else if (!strcmp(name, "packed") && l->kind == 'i') {
            f->packed = !strcmp(l->tok, "true");
            *packed_set = true;
        }
        if (next(b, l))
            return -1;
        if (l->kind == ']')
            break;
        if (l->kind != ',')
            return bfail(b, "line %d: expected ',' or ']', found \"%s\"", l->line, l->tok);
    }
    return expect(b, l, ';');
}

/* The rest of a field from its type (in l->tok) on: name = number [options]; label: 'o'
 * optional, 'r' required, 'R' repeated, 0 none; oneof: its index or -1. */
static int parse_field(build_t *b, lex_t *l, int mi, char label, int oneof)
{
    if (is(l, "group"))
        return bfail(b, "line %d: groups are not taken", l->line);
    char type[256];
    strcpy(type, l->tok);
    if (expect_ident(b, l, "a field's name"))
        return -1;
    ks_pb_type_t st = scalar_type(type);
    ks_pb_field_t *f = field_add(b, mi, l->tok, NULL, st ? NULL : type);
    f->type = st;
    f->oneof = oneof;
    f->repeated = label == 'R';
    f->presence = (!b->p->proto3 && label != 'R') || label == 'o' || oneof >= 0;
    bool packed_set = false;
    if (expect(b, l, '=') || field_number(b, l, &f->number) || field_options(b, l, f, &packed_set))
        return -1;
    if (!packed_set)
        f->packed = b->p->proto3 && f->repeated;
    return 0;
}

static int parse_message(build_t *b, lex_t *l, const char *scope, int parent, int depth);
static int parse_enum(build_t *b, lex_t *l, const char *scope);

/* map<K, V> name = number [options]; (after "map"): a repeated field of a nested entry
 * message NameEntry {K key = 1; V value = 2;}, as protoc makes it. */
static int parse_map(build_t *b, lex_t *l, int mi)
{
    char k[256], v[256];
    if (expect(b, l, '<') || expect_ident(b, l, "a map's key type"))
        return -1;
    strcpy(k, l->tok);
    if (expect(b, l, ',') || expect_ident(b, l, "a map's value type"))
        return -1;
    strcpy(v, l->tok);
    if (expect(b, l, '>') || expect_ident(b, l, "a map field's name"))
        return -1;
    ks_pb_type_t kt = scalar_type(k);
    if (!kt || kt == KS_PB_DOUBLE || kt == KS_PB_FLOAT || kt == KS_PB_BYTES)
        return bfail(b, "line %d: a map's key type must be an integer, bool or string type",
                     l->line);
    char entry[300];
    size_t n = 0;
    int up = 1;
    for (const char *c = l->tok; *c && n < 250; c++) {
        if (*c == '_')
            up = 1;
        else {
            entry[n++] = up ? (char)toupper((unsigned char)*c) : *c;
            up = 0;
        }
    }
    strcpy(entry + n, "Entry");
    char name[256];
    strcpy(name, l->tok);
    int ei = msg_new(b, b->p->msgs[mi].full_name, entry, mi);
    b->p->msgs[ei].map_entry = true;
    field_add(b, ei, "key", NULL, NULL)->type = kt;
    b->p->msgs[ei].fields[0].number = 1;
    ks_pb_type_t vt = scalar_type(v);
    ks_pb_field_t *vf = field_add(b, ei, "value", NULL, vt ? NULL : v);
    vf->type = vt;
    vf->number = 2;
    char *full = join("", b->p->msgs[ei].full_name); /* ".pkg.Msg.NameEntry" */
    ks_pb_field_t *f = field_add(b, mi, name, NULL, full);
    free(full);
    f->type = KS_PB_MESSAGE;
    f->repeated = true;
    bool packed_set = false;
    return expect(b, l, '=') || field_number(b, l, &f->number) ||
                   field_options(b, l, f, &packed_set)
               ? -1
               : 0;
}

/* oneof name { fields } (after "oneof"). */
static int parse_oneof(build_t *b, lex_t *l, int mi, int index)
{
    if (expect_ident(b, l, "a oneof's name") || expect(b, l, '{'))
        return -1;
    for (;;) {
        int rc = block_next(b, l, "a oneof");
        if (rc)
            return rc < 0 ? -1 : 0;
        if (is(l, "option")) {
            if (skip_statement(b, l))
                return -1;
        } else if (l->kind == 'i') {
            if (parse_field(b, l, mi, 0, index))
                return -1;
        } else if (l->kind != ';')
            return bfail(b, "line %d: expected a field in the oneof, found \"%s\"", l->line,
                         l->tok);
    }
}

/* One statement of a message's body, its first token read. */
static int message_item(build_t *b, lex_t *l, int mi, int depth, int *oneofs)
{
    char *scope = ks_xstrdup(b->p->msgs[mi].full_name);
    int rc = 0;
    if (is(l, "message"))
        rc = parse_message(b, l, scope, mi, depth + 1);
    else if (is(l, "enum"))
        rc = parse_enum(b, l, scope);
    else if (is(l, "option") || is(l, "reserved") || is(l, "extensions") || is(l, "extend"))
        rc = skip_statement(b, l);
    else if (is(l, "oneof"))
        rc = parse_oneof(b, l, mi, (*oneofs)++);
    else if (is(l, "map") && (skip_space(l), l->p < l->end && *l->p == '<'))
        rc = parse_map(b, l, mi);
    else if (is(l, "optional") || is(l, "required") || is(l, "repeated")) {
        char label = is(l, "optional") ? 'o' : is(l, "required") ? 'r' : 'R';
        rc = expect_ident(b, l, "a field's type") || parse_field(b, l, mi, label, -1) ? -1 : 0;
    } else if (l->kind == 'i')
        rc = parse_field(b, l, mi, 0, -1);
    else if (l->kind != ';')
        rc = bfail(b, "line %d: unexpected \"%s\" in message %s", l->line, l->tok, scope);
    free(scope);
    return rc;
}

/* message Name { ... } (after "message"). */
static int parse_message(build_t *b, lex_t *l, const char *scope, int parent, int depth)
{
    if (depth > MAX_NEST)
        return bfail(b, "line %d: messages nest deeper than %d", l->line, MAX_NEST);
    if (expect_ident(b, l, "a message's name"))
        return -1;
    char name[256];
    strcpy(name, l->tok);
    if (expect(b, l, '{'))
        return -1;
    int mi = msg_new(b, scope, name, parent), oneofs = 0;
    char what[300];
    snprintf(what, sizeof(what), "message %s", name);
    for (;;) {
        int rc = block_next(b, l, what);
        if (rc)
            return rc < 0 ? -1 : 0;
        if (message_item(b, l, mi, depth, &oneofs))
            return -1;
    }
}

/* enum Name { NAME = number [options]; ... } (after "enum"). */
static int parse_enum(build_t *b, lex_t *l, const char *scope)
{
    if (expect_ident(b, l, "an enum's name"))
        return -1;
    int ei = enum_new(b, scope, l->tok);
    if (expect(b, l, '{'))
        return -1;
    for (;;) {
        int rc = block_next(b, l, "an enum");
        if (rc)
            return rc < 0 ? -1 : 0;
        if (is(l, "option") || is(l, "reserved")) {
            if (skip_statement(b, l))
                return -1;
            continue;
        }
        if (l->kind == ';')
            continue;
        if (l->kind != 'i')
            return bfail(b, "line %d: expected an enum value, found \"%s\"", l->line, l->tok);
        char name[256];
        strcpy(name, l->tok);
        if (expect(b, l, '=') || next(b, l))
            return -1;
        bool neg = l->kind == '-';
        if (neg && next(b, l))
            return -1;
        char *e;
        long long v = l->kind == 'n' ? strtoll(l->tok, &e, 0) : 0;
        if (l->kind != 'n' || *e || v > 2147483648LL || (!neg && v > INT32_MAX))
            return bfail(b, "line %d: enum value %s: a 32-bit number, found \"%s\"", l->line, name,
                         l->tok);
        enum_value(b, ei, name, (int32_t)(neg ? -v : v));
        ks_pb_field_t ignored = {0};
        bool ps;
        if (field_options(b, l, &ignored, &ps)) {
            free(ignored.json_name);
            return -1;
        }
        free(ignored.json_name);
    }
}

/* syntax = "proto2" | "proto3"; (after "syntax"). */
static int parse_syntax(build_t *b, lex_t *l)
{
    if (expect(b, l, '=') || next(b, l))
        return -1;
    if (l->kind != 's' || (strcmp(l->tok, "proto2") && strcmp(l->tok, "proto3")))
        return bfail(b, "line %d: syntax \"%s\" is not taken (proto2 or proto3)", l->line, l->tok);
    b->p->proto3 = !strcmp(l->tok, "proto3");
    return expect(b, l, ';');
}

/* One top-level statement, its first token read. */
static int file_item(build_t *b, lex_t *l)
{
    if (is(l, "syntax"))
        return parse_syntax(b, l);
    if (is(l, "edition"))
        return bfail(b, "line %d: editions are not taken (proto2 or proto3)", l->line);
    if (is(l, "package")) {
        if (expect_ident(b, l, "a package name"))
            return -1;
        free(b->pkg);
        b->pkg = ks_xstrdup(l->tok);
        return expect(b, l, ';');
    }
    if (is(l, "import")) {
        if (next(b, l) || ((is(l, "public") || is(l, "weak")) && next(b, l)))
            return -1;
        return bfail(b, "imports \"%s\": types from other files (references) are not taken",
                     l->tok);
    }
    if (is(l, "message"))
        return parse_message(b, l, b->pkg ? b->pkg : "", -1, 1);
    if (is(l, "enum"))
        return parse_enum(b, l, b->pkg ? b->pkg : "");
    if (is(l, "option") || is(l, "service") || is(l, "extend"))
        return skip_statement(b, l);
    if (l->kind == ';')
        return 0;
    return bfail(b, "line %d: unexpected \"%s\"", l->line, l->tok);
}

static int parse_text(build_t *b, const char *text, size_t len)
{
    lex_t l = {.p = text, .end = text + len, .line = 1};
    /* Without a syntax statement a file is proto2; it comes first when there is one. */
    for (;;) {
        if (next(b, &l))
            return -1;
        if (!l.kind)
            return 0;
        if (file_item(b, &l))
            return -1;
    }
}

/* ---- the serialized FileDescriptorProto reader ---- */

typedef struct rd {
    const uint8_t *p, *end;
} rd_t;

/* A field of a message read: number, wire type, its varint (VARINT) or bytes (LEN). */
typedef struct rf {
    uint32_t num;
    int wt;
    uint64_t v;
    const char *s;
    size_t n;
} rf_t;

/* The next field of r into f: 1, 0 at the end, -1 when corrupt. */
static int rd_next(rd_t *r, rf_t *f)
{
    if (r->p >= r->end)
        return 0;
    uint64_t tag;
    if (!ks_pb_varint(&r->p, r->end, &tag) || tag >> 3 == 0 || tag >> 3 > UINT32_MAX)
        return -1;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    const uint8_t *at = r->p;
    if (!ks_pb_skip(&r->p, r->end, f->wt))
        return -1;
    if (f->wt == KS_WT_VARINT)
        ks_pb_varint(&at, r->end, &f->v);
    if (f->wt == KS_WT_LEN) {
        ks_pb_varint(&at, r->end, &f->v);
        f->s = (const char *)at;
        f->n = (size_t)f->v;
    }
    return 1;
}

/* f's bytes as a NUL-terminated copy in buf (at most size - 1 bytes, else cut). */
static const char *rf_str(const rf_t *f, char *buf, size_t size)
{
    size_t n = f->n < size - 1 ? f->n : size - 1;
    memcpy(buf, f->s, n);
    buf[n] = '\0';
    return buf;
}

static int desc_enum(build_t *b, const char *s, size_t n, const char *scope)
{
    rd_t r = {(const uint8_t *)s, (const uint8_t *)s + n};
    rf_t f;
    char name[256] = "";
    int rc, ei = -1;
    while ((rc = rd_next(&r, &f)) > 0) {
        if (f.num == 1 && f.wt == KS_WT_LEN)
            ei = enum_new(b, scope, rf_str(&f, name, sizeof(name)));
        else if (f.num == 2 && f.wt == KS_WT_LEN && ei >= 0) {
            rd_t v = {(const uint8_t *)f.s, (const uint8_t *)f.s + f.n};
            rf_t g;
            char vn[256] = "";
            int32_t num = 0;
            while ((rc = rd_next(&v, &g)) > 0)
                if (g.num == 1 && g.wt == KS_WT_LEN)
                    rf_str(&g, vn, sizeof(vn));
                else if (g.num == 2 && g.wt == KS_WT_VARINT)
                    num = (int32_t)g.v;
            if (rc < 0)
                break;
            enum_value(b, ei, vn, num);
        }
    }
    return rc < 0 || ei < 0 ? bfail(b, "the descriptor of an enum in %s is corrupt", scope) : 0;
}

/* A FieldDescriptorProto of message mi. */
static int desc_field(build_t *b, int mi, const char *s, size_t n)
{
    rd_t r = {(const uint8_t *)s, (const uint8_t *)s + n};
    rf_t f;
    char name[256] = "", tn[256] = "", jn[256] = "";
    uint64_t number = 0, label = 1, type = 0, oneof = 0, p3opt = 0, packed = 2;
    bool has_oneof = false, has_jn = false;
    int rc;
    while ((rc = rd_next(&r, &f)) > 0) {
        if (f.wt == KS_WT_LEN && f.num == 1)
            rf_str(&f, name, sizeof(name));
        else if (f.wt == KS_WT_LEN && f.num == 6)
            rf_str(&f, tn, sizeof(tn));
        else if (f.wt == KS_WT_LEN && f.num == 10)
            rf_str(&f, jn, sizeof(jn)), has_jn = true;
        else if (f.wt == KS_WT_LEN && f.num == 8) { /* FieldOptions: packed = 2 */
            rd_t o = {(const uint8_t *)f.s, (const uint8_t *)f.s + f.n};
            rf_t g;
            while ((rc = rd_next(&o, &g)) > 0)
                if (g.num == 2 && g.wt == KS_WT_VARINT)
                    packed = g.v != 0;
            if (rc < 0)
                break;
        } else if (f.wt == KS_WT_VARINT) {
            uint64_t *to[] = {[3] = &number, [4] = &label, [5] = &type, [9] = &oneof};
            if (f.num < 10 && f.num < sizeof(to) / sizeof(to[0]) && to[f.num])
                *to[f.num] = f.v;
            has_oneof |= f.num == 9;
            if (f.num == 17)
                p3opt = f.v;
        }
    }
    if (rc < 0 || !*name || number > UINT32_MAX || type > KS_PB_SINT64)
        return bfail(b, "the descriptor of a field of %s is corrupt", b->p->msgs[mi].full_name);
    ks_pb_field_t *fd = field_add(b, mi, name, has_jn ? jn : NULL, *tn ? tn : NULL);
    fd->number = (uint32_t)number;
    fd->type = (ks_pb_type_t)type;
    fd->repeated = label == 3;
    fd->oneof = has_oneof && oneof < INT32_MAX ? (int)oneof : -1;
    fd->presence = (!b->p->proto3 && label != 3) || p3opt || has_oneof;
    fd->packed = packed == 2 ? b->p->proto3 && fd->repeated : packed;
    return 0;
}

static int desc_message(build_t *b, const char *s, size_t n, const char *scope, int parent,
                        int depth)
{
    if (depth > MAX_NEST)
        return bfail(b, "messages nest deeper than %d", MAX_NEST);
    rd_t r = {(const uint8_t *)s, (const uint8_t *)s + n};
    rf_t f;
    char name[256] = "";
    int rc, mi = -1;
    /* The name comes first as protobuf writes it; a message without one is corrupt. */
    while ((rc = rd_next(&r, &f)) > 0 && !b->failed) {
        if (f.wt != KS_WT_LEN && !(f.num == 7 && mi >= 0))
            continue;
        if (f.num == 1 && mi < 0) {
            mi = msg_new(b, scope, rf_str(&f, name, sizeof(name)), parent);
            continue;
        }
        if (mi < 0)
            break;
        char *full = ks_xstrdup(b->p->msgs[mi].full_name);
        if (f.num == 2)
            desc_field(b, mi, f.s, f.n);
        else if (f.num == 3)
            desc_message(b, f.s, f.n, full, mi, depth + 1);
        else if (f.num == 4)
            desc_enum(b, f.s, f.n, full);
        else if (f.num == 7) { /* MessageOptions: map_entry = 7 */
            rd_t o = {(const uint8_t *)f.s, (const uint8_t *)f.s + f.n};
            rf_t g;
            while ((rc = rd_next(&o, &g)) > 0)
                if (g.num == 7 && g.wt == KS_WT_VARINT)
                    b->p->msgs[mi].map_entry = g.v != 0;
        }
        free(full);
        if (rc < 0)
            break;
    }
    if (b->failed)
        return -1;
    return rc < 0 || mi < 0 ? bfail(b, "the descriptor of a message in %s is corrupt",
                                    *scope ? scope : "the file")
                            : 0;
}

/* A FileDescriptorProto: package 2, dependency 3, message_type 4, enum_type 5, syntax 12,
 * edition 14. Messages and enums are read after the package and syntax, wherever those are. */
static int parse_descriptor(build_t *b, const unsigned char *d, size_t n)
{
    rd_t r = {d, d + n};
    rf_t f;
    char buf[256];
    int rc;
    while ((rc = rd_next(&r, &f)) > 0) {
        if (f.wt != KS_WT_LEN && f.num != 14)
            continue;
        if (f.num == 2)
            b->pkg = (free(b->pkg), ks_xstrdup(rf_str(&f, buf, sizeof(buf))));
        else if (f.num == 3)
            return bfail(b, "imports \"%s\": types from other files (references) are not taken",
                         rf_str(&f, buf, sizeof(buf)));
        else if (f.num == 12 && !strcmp(rf_str(&f, buf, sizeof(buf)), "editions"))
            return bfail(b, "editions are not taken (proto2 or proto3)");
        else if (f.num == 12)
            b->p->proto3 = !strcmp(buf, "proto3");
        else if (f.num == 14)
            return bfail(b, "editions are not taken (proto2 or proto3)");
    }
    if (rc < 0)
        return bfail(b, "the schema is neither .proto text nor a serialized FileDescriptorProto");
    r = (rd_t){d, d + n};
    while ((rc = rd_next(&r, &f)) > 0 && !b->failed)
        if (f.wt == KS_WT_LEN && f.num == 4)
            desc_message(b, f.s, f.n, b->pkg ? b->pkg : "", -1, 1);
        else if (f.wt == KS_WT_LEN && f.num == 5)
            desc_enum(b, f.s, f.n, b->pkg ? b->pkg : "");
    return b->failed ? -1 : 0;
}

/* ---- the schema ---- */

/* text as base64 (what confluent-kafka registers), decoded; NULL when it is not that. */
static unsigned char *as_base64(const char *text, size_t len, size_t *n)
{
    while (len && isspace((unsigned char)text[len - 1]))
        len--;
    while (len && isspace((unsigned char)*text))
        text++, len--;
    return len ? ks_b64_decode(text, len, n) : NULL;
}

ks_proto_t *ks_proto_new(const char *text, size_t len, char *err, size_t errsize)
{
    ks_proto_t *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    build_t b = {.p = p, .err = err, .errsize = errsize};
    size_t n;
    unsigned char *d = as_base64(text, len, &n);
    int rc = d ? parse_descriptor(&b, d, n) : parse_text(&b, text, len);
    free(d);
    if (!rc)
        rc = finish(&b);
    free_type_names(&b);
    free(b.pkg);
    if (rc) {
        ks_proto_free(p);
        return NULL;
    }
    return p;
}

void ks_proto_free(ks_proto_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->nmsgs; i++) {
        ks_pb_msg_t *m = &p->msgs[i];
        for (size_t j = 0; j < m->nfields; j++) {
            free(m->fields[j].name);
            free(m->fields[j].json_name);
        }
        free(m->fields);
        free(m->nested);
        free(m->full_name);
    }
    for (size_t i = 0; i < p->nenums; i++) {
        for (size_t j = 0; j < p->enums[i].nvalues; j++)
            free(p->enums[i].values[j].name);
        free(p->enums[i].values);
        free(p->enums[i].full_name);
    }
    free(p->msgs);
    free(p->enums);
    free(p->top);
    free(p);
}

int ks_pb_wire_type(ks_pb_type_t t)
{
    switch (t) {
    case KS_PB_DOUBLE:
    case KS_PB_FIXED64:
    case KS_PB_SFIXED64:
        return KS_WT_I64;
    case KS_PB_FLOAT:
    case KS_PB_FIXED32:
    case KS_PB_SFIXED32:
        return KS_WT_I32;
    case KS_PB_STRING:
    case KS_PB_BYTES:
    case KS_PB_MESSAGE:
        return KS_WT_LEN;
    default:
        return KS_WT_VARINT;
    }
}

const ks_pb_field_t *ks_pb_field_by_number(const ks_pb_msg_t *m, uint32_t n)
{
    size_t lo = 0, hi = m->nfields;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->fields[mid].number == n)
            return &m->fields[mid];
        if (m->fields[mid].number < n)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const ks_pb_field_t *ks_pb_field_by_name(const ks_pb_msg_t *m, const char *name, size_t len)
{
    for (size_t i = 0; i < m->nfields; i++) {
        const ks_pb_field_t *f = &m->fields[i];
        if ((strlen(f->json_name) == len && !memcmp(f->json_name, name, len)) ||
            (strlen(f->name) == len && !memcmp(f->name, name, len)))
            return f;
    }
    return NULL;
}

const char *ks_pb_enum_name(const ks_pb_enum_t *e, int32_t n)
{
    for (size_t i = 0; i < e->nvalues; i++)
        if (e->values[i].number == n)
            return e->values[i].name;
    return NULL;
}

static void *parsed_make(const char *text, size_t len, char *err, size_t errsize)
{
    return ks_proto_new(text, len, err, errsize);
}

static void parsed_free(void *p)
{
    ks_proto_free(p);
}

const ks_schema_parser_t ks_proto_parser = {KS_SCHEMA_PROTOBUF, parsed_make, parsed_free};
