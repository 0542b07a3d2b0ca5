/* schema.c: a registry's schema object (its text, type, id and the parsed form a decoder keeps
 * in it) and Confluent's wire format header (schema.h). */
#include "schema.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct ks_schema {
    atomic_int refs;
    int32_t id;
    ks_schema_type_t type;
    char *text; /* NUL-terminated */
    size_t len;
    char *references; /* NULL: none */
    /* The parsed form: set once, under parse_lock, and published by the release store of
     * parsed; parser and parse_err are written before it and never after. A schema that does
     * not parse keeps parse_err (parsed stays NULL), read under the lock. */
    pthread_mutex_t parse_lock;
    _Atomic(void *) parsed;
    const ks_schema_parser_t *parser;
    char *parse_err;
};

static const char *const type_names[] = {
    [KS_SCHEMA_AVRO] = "AVRO",
    [KS_SCHEMA_JSON] = "JSON",
    [KS_SCHEMA_PROTOBUF] = "PROTOBUF",
};

const char *ks_schema_type_str(ks_schema_type_t t)
{
    return (unsigned)t < sizeof(type_names) / sizeof(type_names[0]) ? type_names[t] : "?";
}

const char *ks_schema_format_str(ks_schema_type_t t)
{
    static const char *const names[] = {"avro", "json_schema", "protobuf"};
    return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

int ks_schema_type_from_str(const char *s)
{
    for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
        if (!strcmp(s, type_names[i]))
            return (int)i;
    return -1;
}

ks_schema_t *ks_schema_new(int32_t id, ks_schema_type_t type, const char *text, size_t len,
                           const char *references)
{
    ks_schema_t *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    atomic_init(&s->refs, 1);
    s->id = id;
    s->type = type;
    s->text = malloc(len + 1);
    if (!s->text)
        abort();
    memcpy(s->text, text, len);
    s->text[len] = '\0';
    s->len = len;
    s->references = references ? ks_xstrdup(references) : NULL;
    pthread_mutex_init(&s->parse_lock, NULL);
    atomic_init(&s->parsed, NULL);
    return s;
}

ks_schema_t *ks_schema_ref(ks_schema_t *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    return s;
}

void ks_schema_unref(ks_schema_t *s)
{
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    void *parsed = atomic_load_explicit(&s->parsed, memory_order_acquire);
    if (parsed)
        s->parser->free(parsed);
    pthread_mutex_destroy(&s->parse_lock);
    free(s->parse_err);
    free(s->references);
    free(s->text);
    free(s);
}

int32_t ks_schema_id(const ks_schema_t *s)
{
    return s->id;
}

ks_schema_type_t ks_schema_type(const ks_schema_t *s)
{
    return s->type;
}

const char *ks_schema_text(const ks_schema_t *s, size_t *len)
{
    if (len)
        *len = s->len;
    return s->text;
}

const char *ks_schema_references(const ks_schema_t *s)
{
    return s->references;
}

const void *ks_schema_parsed(ks_schema_t *s, const ks_schema_parser_t *p, char *err, size_t errsize)
{
    /* The common case, every record after the first: one acquire load. */
    void *v = atomic_load_explicit(&s->parsed, memory_order_acquire);
    if (v && s->parser == p)
        return v;
    pthread_mutex_lock(&s->parse_lock);
    v = atomic_load_explicit(&s->parsed, memory_order_relaxed);
    if (s->parser && s->parser != p) {
        snprintf(err, errsize, "schema %d is already parsed by another decoder", (int)s->id);
        v = NULL;
    } else if (!v && s->parse_err) {
        snprintf(err, errsize, "%s", s->parse_err);
    } else if (!v) {
        char e[512] = "";
        if (s->type != p->type)
            snprintf(e, sizeof(e), "schema %d is %s, not %s", (int)s->id,
                     ks_schema_type_str(s->type), ks_schema_type_str(p->type));
        else
            v = p->parse(s->text, s->len, e, sizeof(e));
        s->parser = p;
        if (v) {
            atomic_store_explicit(&s->parsed, v, memory_order_release);
        } else {
            s->parse_err = ks_xstrdup(*e ? e : "the schema does not parse");
            snprintf(err, errsize, "%s", s->parse_err);
        }
    }
    pthread_mutex_unlock(&s->parse_lock);
    return v;
}

int ks_wire_split(const void *data, size_t len, int32_t *id, const void **body, size_t *body_len,
                  char *err, size_t errsize)
{
    const unsigned char *p = data;
    if (len < KS_WIRE_HEADER) {
        snprintf(err, errsize,
                 "not in the schema registry's wire format: %zu bytes, the header alone is %d", len,
                 KS_WIRE_HEADER);
        return -1;
    }
    if (p[0] != 0) {
        snprintf(err, errsize,
                 "not in the schema registry's wire format: first byte 0x%02x, not 0x00", p[0]);
        return -1;
    }
    *id = (int32_t)((uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4]);
    *body = p + KS_WIRE_HEADER;
    *body_len = len - KS_WIRE_HEADER;
    return 0;
}

const void *ks_wire_parsed(ks_schema_t *s, const ks_schema_parser_t *p, const void *data,
                           size_t len, const void **body, size_t *body_len, char *err,
                           size_t errsize)
{
    int32_t id;
    if (ks_wire_split(data, len, &id, body, body_len, err, errsize))
        return NULL;
    if (ks_schema_id(s) && id != ks_schema_id(s)) {
        snprintf(err, errsize, "the value names schema %d, not %d", (int)id, (int)ks_schema_id(s));
        return NULL;
    }
    return ks_schema_parsed(s, p, err, errsize);
}
