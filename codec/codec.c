/* codec.c: a record rendered for every transport: its JSON object, a one-record push's header
 * lines, CloudEvents' attributes (codec.h). The formats' own writers are in fmt_*.c. */
#include "codec.h"

#include "config.h" /* KS_NAME_MAX */
#include "otel.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strcasecmp */
#include <time.h>

/* ---- JSON ---- */

/* Writes field, then data in format f (or null, with no encoding field, for NULL data). */
static void put_bytes(ks_jbuf_t *b, const char *field, const char *enc_field, const void *data,
                      size_t len, const ks_codec_fmt_t *f)
{
    ks_jbuf_lit(b, field);
    if (!data) {
        ks_jbuf_lit(b, "null");
        return;
    }
    f->json(b, enc_field, data, len);
}

void ks_codec_json_record(ks_jbuf_t *b, const ks_record_t *r, const ks_codec_opts_t *o,
                          ks_ack_id_writer_t *w)
{
    const ks_codec_fmt_t *kf = o && o->key ? o->key : &ks_codec_fmt_auto;
    const ks_codec_fmt_t *vf = o && o->value ? o->value : &ks_codec_fmt_auto;
    const ks_codec_fmt_t *hf = o && o->header ? o->header : &ks_codec_fmt_auto;
    ks_jbuf_lit(b, "{\"topic\":");
    ks_jbuf_str(b, r->topic, strlen(r->topic)); /* topic names are ASCII */
    ks_jbuf_lit(b, ",\"partition\":");
    ks_jbuf_int(b, r->partition);
    ks_jbuf_lit(b, ",\"offset\":");
    ks_jbuf_int(b, r->offset);
    ks_jbuf_lit(b, ",\"timestamp\":");
    if (r->timestamp >= 0)
        ks_jbuf_int(b, r->timestamp);
    else
        ks_jbuf_lit(b, "null");
    ks_rec_format_t ks = o && o->key_schema ? (ks_rec_format_t)(o->key_schema - 1) : KS_FMT_BINARY;
    ks_rec_format_t vs =
        o && o->value_schema ? (ks_rec_format_t)(o->value_schema - 1) : KS_FMT_BINARY;
    if (ks != KS_FMT_BINARY && r->key) {
        ks_jbuf_lit(b, ",\"key\":");
        ks_codec_schema_json(b, "key", r->key, r->key_len, ks);
    } else {
        put_bytes(b, ",\"key\":", ",\"key_encoding\":", r->key, r->key_len, kf);
    }
    if (vs != KS_FMT_BINARY && r->value) {
        ks_jbuf_lit(b, ",\"value\":");
        ks_codec_schema_json(b, "value", r->value, r->value_len, vs);
    } else {
        put_bytes(b, ",\"value\":", ",\"value_encoding\":", r->value, r->value_len, vf);
    }
    ks_jbuf_lit(b, ",\"headers\":[");
    for (size_t i = 0; i < r->header_cnt; i++) {
        const ks_header_t *h = &r->headers[i];
        ks_jbuf_lit(b, i ? ",{\"key\":" : "{\"key\":");
        size_t nl = strlen(h->name);
        if (!ks_jbuf_str(b, h->name, nl))
            ks_jbuf_b64(b, h->name, nl);
        put_bytes(b, ",\"value\":", ",\"value_encoding\":", h->value, h->value_len, hf);
        ks_jbuf_lit(b, "}");
    }
    ks_jbuf_lit(b, "],\"ack_id\":");
    char id[KS_ACK_ID_MAX];
    ks_jbuf_str(b, id, ks_record_ack_id_put(w, r, id, sizeof(id)));
    ks_jbuf_lit(b, ",\"attempt\":");
    ks_jbuf_int(b, r->attempt);
    if (r->ordering_chain) { /* a string: JSON numbers lose 64-bit precision in JavaScript */
        char num[24];
        int nl = snprintf(num, sizeof(num), "%" PRIu64, r->ordering_chain);
        ks_jbuf_lit(b, ",\"ordering_chain\":");
        ks_jbuf_str(b, num, (size_t)nl);
    }
    ks_jbuf_lit(b, "}");
}

/* ---- HTTP header lines ---- */

/* Writes s[0..n) to o with each byte keep() refuses as %XX. Returns the end. */
static char *escape_to(char *o, const unsigned char *s, size_t n, bool (*keep)(unsigned char))
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (keep(c)) {
            *o++ = (char)c;
        } else {
            o[0] = '%';
            o[1] = hex[c >> 4];
            o[2] = hex[c & 15];
            o += 3;
        }
    }
    return o;
}

/* A header value's byte kept as it is: printable ASCII but '%'. */
static bool value_byte(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '%';
}

/* A header name's byte kept as it is in ksidecar-header-NAME. */
static bool name_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

/* Any byte: a line written as it is (its bytes checked by the caller). */
static bool any_byte(unsigned char c)
{
    (void)c;
    return true;
}

/* Writes the line "name: value" with the bytes keep() refuses as %XX. */
static void header_line(ks_codec_line_fn fn, void *ctx, const char *name, const void *value,
                        size_t n, bool (*keep)(unsigned char))
{
    size_t nl = strlen(name);
    char stack[512], *line = nl + 3 + 3 * n <= sizeof(stack) ? stack : malloc(nl + 3 + 3 * n);
    if (!line)
        abort();
    memcpy(line, name, nl);
    line[nl] = ':';
    line[nl + 1] = ' ';
    char *end = escape_to(line + nl + 2, value, n, keep);
    *end = '\0';
    fn(ctx, line, (size_t)(end - line));
    if (line != stack)
        free(line);
}

void ks_codec_header(ks_codec_line_fn fn, void *ctx, const char *name, const void *value, size_t n)
{
    header_line(fn, ctx, name, value, n, value_byte);
}

void ks_codec_header_num(ks_codec_line_fn fn, void *ctx, const char *name, int64_t v)
{
    char num[24], *o = num + sizeof(num);
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--o = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--o = '-';
    ks_codec_header(fn, ctx, name, o, (size_t)(num + sizeof(num) - o));
}

/* ---- W3C trace context ---- */

bool ks_codec_traceparent_ok(const char *v, size_t n)
{
    uint8_t trace[16], parent[8], flags;
    return ks_otel_traceparent_parse(v, n, trace, parent, &flags);
}

/* A header value that travels as it is: 1..KS_CODEC_TRACE_VALUE_MAX bytes of printable ASCII,
 * space or tab (no line break, no control byte). */
static bool plain_value(const char *v, size_t n)
{
    if (!v || !n || n > KS_CODEC_TRACE_VALUE_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c < 0x20 && c != '\t') || c > 0x7e)
            return false;
    }
    return true;
}

/* The record's header named name when it has exactly one, else NULL. */
static const ks_header_t *only_header(const ks_record_t *r, const char *name)
{
    const ks_header_t *found = NULL;
    for (size_t i = 0; i < r->header_cnt; i++) {
        if (strcasecmp(r->headers[i].name, name))
            continue;
        if (found)
            return NULL;
        found = &r->headers[i];
    }
    return found;
}

/* traceparent, tracestate and baggage as the same-named lines, their values as they are: a
 * traceparent only when the record has one and it is valid (version 00), tracestate only with
 * it, baggage on its own. Anything else stays only as ksidecar-header-NAME. */
static void trace_context_headers(ks_codec_line_fn fn, void *ctx, const ks_record_t *r)
{
    bool any = false;
    for (size_t i = 0; i < r->header_cnt && !any; i++) {
        char c = (char)(r->headers[i].name[0] | 0x20);
        any = c == 't' || c == 'b';
    }
    if (!any)
        return;
    const ks_header_t *tp = only_header(r, "traceparent");
    bool parent = tp && ks_codec_traceparent_ok(tp->value, tp->value_len);
    if (parent)
        header_line(fn, ctx, "traceparent", tp->value, tp->value_len, any_byte);
    for (size_t i = 0; i < r->header_cnt; i++) {
        const ks_header_t *h = &r->headers[i];
        const char *name = parent && !strcasecmp(h->name, "tracestate") ? "tracestate"
                           : !strcasecmp(h->name, "baggage")            ? "baggage"
                                                                        : NULL;
        if (name && plain_value(h->value, h->value_len))
            header_line(fn, ctx, name, h->value, h->value_len, any_byte);
    }
}

void ks_codec_push_headers(ks_codec_line_fn fn, void *ctx, const ks_record_t *r, const char *ack_id)
{
    ks_codec_header(fn, ctx, "ksidecar-topic", r->topic, strlen(r->topic));
    ks_codec_header_num(fn, ctx, "ksidecar-partition", r->partition);
    ks_codec_header_num(fn, ctx, "ksidecar-offset", r->offset);
    if (r->timestamp >= 0)
        ks_codec_header_num(fn, ctx, "ksidecar-timestamp", r->timestamp);
    ks_codec_header_num(fn, ctx, "ksidecar-attempt", r->attempt);
    ks_codec_header(fn, ctx, "ksidecar-ack-id", ack_id, strlen(ack_id));
    if (r->key)
        ks_codec_header(fn, ctx, "ksidecar-key", r->key, r->key_len);
    if (!r->value)
        ks_codec_header(fn, ctx, "ksidecar-value-null", "true", 4);
    for (size_t i = 0; i < r->header_cnt; i++) {
        const ks_header_t *h = &r->headers[i];
        static const char pre[] = "ksidecar-header-";
        char name[300], *o = name + sizeof(pre) - 1;
        memcpy(name, pre, sizeof(pre) - 1);
        for (const unsigned char *c = (const unsigned char *)h->name;
             *c && o + 4 < name + sizeof(name); c++)
            o = escape_to(o, c, 1, name_byte); /* a long name is cut, never the line */
        *o = '\0';
        ks_codec_header(fn, ctx, name, h->value ? h->value : "", h->value ? h->value_len : 0);
    }
    trace_context_headers(fn, ctx, r);
}

void ks_codec_cloudevent_headers(ks_codec_line_fn fn, void *ctx, const ks_record_t *r,
                                 const char *group)
{
    bool own = false;
    for (size_t i = 0; i < r->header_cnt; i++) {
        const ks_header_t *h = &r->headers[i];
        if (strncmp(h->name, "ce_", 3) || !h->name[3] || !h->value)
            continue;
        char name[KS_NAME_MAX + 8];
        snprintf(name, sizeof(name), "ce-%s", h->name + 3);
        if (strspn(name + 3, "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(name + 3))
            continue; /* attribute names are lower-case letters and digits */
        ks_codec_header(fn, ctx, name, h->value, h->value_len);
        own |= !strcmp(name, "ce-specversion");
    }
    if (own)
        return;
    char v[KS_NAME_MAX * 2 + 64];
    ks_codec_header(fn, ctx, "ce-specversion", "1.0", 3);
    int n = snprintf(v, sizeof(v), "%s-%" PRId32 "-%" PRId64, r->topic, r->partition, r->offset);
    ks_codec_header(fn, ctx, "ce-id", v, (size_t)n);
    n = snprintf(v, sizeof(v), "/ksidecar/%s/%s", group, r->topic);
    ks_codec_header(fn, ctx, "ce-source", v, (size_t)n);
    ks_codec_header(fn, ctx, "ce-type", "ksidecar.kafka.record", 21);
    if (r->timestamp >= 0) {
        time_t secs = (time_t)(r->timestamp / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        n = (int)strftime(v, sizeof(v), "%Y-%m-%dT%H:%M:%S", &tm);
        n += snprintf(v + n, sizeof(v) - (size_t)n, ".%03dZ", (int)(r->timestamp % 1000));
        ks_codec_header(fn, ctx, "ce-time", v, (size_t)n);
    }
}
