/* http_read.c: what the HTTP edge's decoders read alike from a request: a fetch's and a
 * stream's query parameters, integers, and a JSON body with its fields and names. Each reader
 * answers a bad request itself (http_json.c's errors) and says so. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge.h"
#include "http_int.h"
#include "util.h"

/* ---- the query ---- */

static bool collect_arg(void *cls, const char *key, size_t key_len, const char *value,
                        size_t value_len)
{
    http_query_t *a = cls;
    const char *v = value ? value : "";
    if (!a->nul_key && (strlen(key) != key_len || (value && strlen(value) != value_len))) {
        a->nul_key = key;
        a->nul_key_len = key_len;
        a->nul_value = v;
        a->nul_value_len = value ? value_len : 0;
    }
    if (!strcmp(key, "topic")) {
        if (a->topic_cnt == MAX_TOPICS)
            a->too_many = true;
        else
            a->topics[a->topic_cnt++] = v;
    } else if (!a->stream && !strcmp(key, "max"))
        a->max = v;
    else if (!a->stream && !strcmp(key, "wait_ms"))
        a->wait_ms = v;
    else if (a->stream && !strcmp(key, "max_in_flight"))
        a->max_in_flight = v;
    else if (a->stream && !strcmp(key, "max_in_flight_bytes"))
        a->max_in_flight_bytes = v;
    else if (!strcmp(key, "format"))
        a->format = v;
    else if (!strcmp(key, "value_format"))
        a->value_format = v;
    else if (!strcmp(key, "key_format"))
        a->key_format = v;
    else if (!strcmp(key, "deadline_ms"))
        a->deadline_ms = v;
    else if (!strcmp(key, "subscriber"))
        a->subscriber = v;
    else if (!strcmp(key, "ordered_batches"))
        a->ordered_batches = v;
    else if (!a->unknown)
        a->unknown = key;
    return true;
}

void http_query_free(http_query_t *q)
{
    for (size_t i = 0; i < q->split_cnt; i++)
        free(q->split_buf[i]);
    q->split_cnt = 0;
}

/* ?value_format= or ?key_format= (v; NULL: the group's) into *out (1 + ks_rec_format_t). */
static bool schema_format(req_t *r, const char *name, const char *v, uint8_t *out, http_ret_t *ret)
{
    if (!v)
        return true;
    int f = ks_rec_format_from_str(v);
    if (f < 0) {
        *ret = http_send_error(r, KS_E_INVALID, "%s must be " KS_REC_FORMAT_NAMES ", got \"%s\"",
                               name, v);
        return false;
    }
    *out = (uint8_t)(1 + f);
    return true;
}

bool http_query_read(ks_http_t *h, req_t *r, http_query_t *a, http_ret_t *ret)
{
    http_req_query_each(&r->io, collect_arg, a);
    if (a->nul_key) {
        char k[128], v[256];
        *ret =
            http_send_error(r, KS_E_INVALID,
                            "query parameter \"%s\" (value \"%s\") holds a NUL byte (%%00); names "
                            "and values cannot contain NUL",
                            http_show_nul(a->nul_key, a->nul_key_len, k, sizeof(k)),
                            http_show_nul(a->nul_value, a->nul_value_len, v, sizeof(v)));
        return false;
    }
    if (a->unknown) {
        *ret = http_send_error(r, KS_E_INVALID, "unknown query parameter \"%s\" (known: %s)",
                               a->unknown,
                               a->stream ? "topic, max_in_flight, max_in_flight_bytes, "
                                           "deadline_ms, subscriber, ordered_batches, format, "
                                           "value_format, key_format"
                                         : "topic, max, wait_ms, deadline_ms, subscriber, "
                                           "ordered_batches, format, value_format, key_format");
        return false;
    }
    /* topic=a,b is the same as topic=a&topic=b. Every name counts against MAX_TOPICS, split
     * or not, an empty one too. */
    bool too_many = a->too_many;
    for (size_t i = 0; i < a->topic_cnt && !too_many; i++) {
        char *copy = ks_xstrdup(a->topics[i]), *save = NULL;
        a->split_buf[a->split_cnt++] = copy;
        char *tok = strtok_r(copy, ",", &save);
        for (const char *t = tok ? tok : ""; t; t = tok ? strtok_r(NULL, ",", &save) : NULL) {
            if (a->name_cnt == MAX_TOPICS) {
                too_many = true;
                break;
            }
            a->names[a->name_cnt++] = t; /* an empty name: let validation name it */
        }
    }
    char err[512];
    ks_status_t st;
    if (too_many) {
        *ret = http_send_error(r, KS_E_INVALID, "at most %d topics per %s", MAX_TOPICS,
                               a->stream ? "stream" : "fetch");
        return false;
    }
    if (a->name_cnt == 0) {
        *ret = http_send_error(r, KS_E_INVALID, "missing query parameter topic (e.g. ?topic=demo)");
        return false;
    }
    /* Bad or internal names get their own answer before the scope check. */
    if ((st = ks_edge_check_topics(h->eng, h->auth, r->who, KS_SCOPE_CONSUME, "consume", a->names,
                                   a->name_cnt, err, sizeof(err)))) {
        *ret = http_send_error(r, st, "%s", err);
        return false;
    }
    if (a->ordered_batches) { /* a bare ?ordered_batches asks for it too */
        a->ordered = !*a->ordered_batches || !strcmp(a->ordered_batches, "true") ||
                     !strcmp(a->ordered_batches, "1");
        if (!a->ordered && strcmp(a->ordered_batches, "false") && strcmp(a->ordered_batches, "0")) {
            *ret = http_send_error(r, KS_E_INVALID,
                                   "ordered_batches must be true or false, got \"%s\"",
                                   a->ordered_batches);
            return false;
        }
    }
    const ks_codec_fmt_t *f = a->format ? ks_codec_fmt_find(a->format) : &ks_codec_fmt_auto;
    if (!f) {
        char names[256];
        *ret = http_send_error(r, KS_E_INVALID, "format must be %s, got \"%s\"",
                               ks_codec_fmt_names(names, sizeof(names)), a->format);
        return false;
    }
    r->fmt = (ks_codec_opts_t){.key = f, .value = f, .header = f};
    return schema_format(r, "value_format", a->value_format, &r->fmt.value_schema, ret) &&
           schema_format(r, "key_format", a->key_format, &r->fmt.key_schema, ret);
}

int http_parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

bool http_opt_int(req_t *r, const char *name, const char *v, int *out, unsigned bit,
                  unsigned *unset, http_ret_t *ret)
{
    long n;
    if (!v) {
        *unset |= bit;
        return true;
    }
    if (http_parse_int(v, INT_MIN, INT_MAX, &n) == 0) {
        *out = (int)n;
        return true;
    }
    *ret = http_send_error(r, KS_E_INVALID, "%s must be an integer, got \"%s\"", name, v);
    return false;
}

/* ---- a JSON body ---- */

json_t *http_body_json(ks_http_t *h, req_t *r, const char *shape, size_t flags, http_ret_t *ret)
{
    const http_req_t *io = &r->io;
    if (io->body_too_big) {
        *ret = http_send_error(r, KS_E_EXHAUSTED,
                               "request body is larger than http.max_request_bytes (%lld)",
                               (long long)h->cfg->max_request_bytes);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = io->body ? json_loadb(io->body, io->body_len, flags, &jerr) : NULL;
    if (!root)
        *ret = http_send_error(r, KS_E_INVALID, "body is not valid JSON (%s); send %s",
                               io->body ? jerr.text : "empty body", shape);
    return root;
}

bool http_only_fields(req_t *r, json_t *o, const char *what, const char *const *known,
                      const char *list, http_ret_t *ret)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        size_t i = 0;
        while (known[i] && strcmp(known[i], k))
            i++;
        if (!known[i]) {
            *ret = http_send_error(r, KS_E_INVALID, "%s: unknown field \"%s\" (known: %s)", what, k,
                                   list);
            return false;
        }
    }
    return true;
}

const char *http_json_name(req_t *r, json_t *v, const char *what, http_ret_t *ret)
{
    if (!json_is_string(v)) {
        *ret = http_send_error(r, KS_E_INVALID, "%s must be a string", what);
        return NULL;
    }
    const char *s = json_string_value(v);
    if (strlen(s) != json_string_length(v)) {
        *ret = http_send_error(r, KS_E_INVALID, "%s holds a NUL byte", what);
        return NULL;
    }
    return s;
}
