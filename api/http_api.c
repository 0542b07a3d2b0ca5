/* http_api.c: the HTTP/JSON edge: routes, JSON in and out, long-poll by suspend/resume. */
#include "http_api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ack_id.h"
#include "json_out.h"
#include "log.h"
#include "util.h"

#define LOGC        "http"
#define MAX_TOPICS  64
#define MAX_ACK_IDS 100000

struct ks_http {
    struct MHD_Daemon *d;
    ks_engine_t *eng;
    const ks_config_t *cfg;
    const ks_auth_t *auth;
    char *tls_cert, *tls_key, *tls_ca; /* PEM; libmicrohttpd borrows them while it runs */
    int port;
};

typedef enum { FMT_AUTO, FMT_BASE64 } value_fmt_t;

/* One request. Two references while an engine command is out: libmicrohttpd's
 * (dropped when the request completes) and the engine's (dropped in its callback). */
typedef struct req {
    atomic_int refs;
    struct MHD_Connection *conn;
    char *body;
    size_t body_len, body_cap;
    bool too_big;
    bool submitted;

    pthread_mutex_t lock; /* guards suspended, done, batch, acks */
    bool suspended, done;
    ks_batch_t *batch;
    ks_ack_result_t *acks;
    size_t ack_cnt;
    char **ack_ids;             /* what the ack results answer, in order */
    bool ack_ids_in_body;       /* the strings point into body (not separately allocated) */
    ks_group_status_t **groups; /* a status answer */
    size_t group_cnt;
    bool is_status, status_one;
    ks_settle_op_t op;
    value_fmt_t fmt;
} req_t;

static void req_unref(req_t *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    free(r->body);
    ks_batch_free(r->batch);
    free(r->acks);
    for (size_t i = 0; i < r->group_cnt; i++)
        ks_group_status_free(r->groups[i]);
    free(r->groups);
    if (r->ack_ids) {
        for (size_t i = 0; i < r->ack_cnt && !r->ack_ids_in_body; i++)
            free(r->ack_ids[i]);
        free(r->ack_ids);
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* ---- responses ---- */

static int http_status_of(ks_status_t s)
{
    switch (s) {
    case KS_OK:
        return 200;
    case KS_E_INVALID:
        return 400;
    case KS_E_NOT_FOUND:
        return 404;
    case KS_E_STALE:
        return 409;
    case KS_E_EXHAUSTED:
        return 429;
    case KS_E_UNAVAILABLE:
        return 503;
    case KS_E_PERMISSION:
        return 403;
    case KS_E_UNAUTH:
        return 401;
    case KS_E_INTERNAL:
        break;
    }
    return 500;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, char *text)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Sends root (stolen) as the response body. */
static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *root)
{
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        return MHD_NO;
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (!withnl) {
        free(text);
        return MHD_NO;
    }
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    return send_text(c, status, withnl);
}

static json_t *error_obj(ks_status_t st, const char *msg)
{
    return json_pack("{s:{s:s,s:s}}", "error", "code", ks_status_name(st), "message", msg);
}

static enum MHD_Result send_error(struct MHD_Connection *c, ks_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result send_error(struct MHD_Connection *c, ks_status_t st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return send_json(c, http_status_of(st), error_obj(st, msg));
}

/* ---- records as JSON ---- */

/* Writes "field":<bytes>[,"enc_field":"text"|"base64"]: text when the bytes are UTF-8
 * (and fmt allows), else base64; NULL data is null (and no encoding field). */
static void put_bytes(ks_jbuf_t *b, const char *field, const char *enc_field, const void *data,
                      size_t len, value_fmt_t fmt)
{
    ks_jbuf_lit(b, field);
    if (!data) {
        ks_jbuf_lit(b, "null");
        return;
    }
    if (fmt == FMT_AUTO && ks_jbuf_str(b, data, len)) {
        ks_jbuf_lit(b, enc_field);
        ks_jbuf_lit(b, "\"text\"");
        return;
    }
    ks_jbuf_b64(b, data, len);
    ks_jbuf_lit(b, enc_field);
    ks_jbuf_lit(b, "\"base64\"");
}

/* One record as a JSON object (the fields and order of api/openapi.yaml's Record). */
static void put_record(ks_jbuf_t *b, const ks_record_t *r, value_fmt_t fmt)
{
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
    put_bytes(b, ",\"key\":", ",\"key_encoding\":", r->key, r->key_len, fmt);
    put_bytes(b, ",\"value\":", ",\"value_encoding\":", r->value, r->value_len, fmt);
    ks_jbuf_lit(b, ",\"headers\":[");
    for (size_t i = 0; i < r->header_cnt; i++) {
        const ks_header_t *h = &r->headers[i];
        ks_jbuf_lit(b, i ? ",{\"key\":" : "{\"key\":");
        size_t nl = strlen(h->name);
        if (!ks_jbuf_str(b, h->name, nl))
            ks_jbuf_b64(b, h->name, nl);
        put_bytes(b, ",\"value\":", ",\"value_encoding\":", h->value, h->value_len, fmt);
        ks_jbuf_lit(b, "}");
    }
    ks_jbuf_lit(b, "],\"ack_id\":");
    char id[KS_ACK_ID_MAX];
    ks_jbuf_str(b, id, ks_record_ack_id(r, id, sizeof(id)));
    ks_jbuf_lit(b, ",\"attempt\":");
    ks_jbuf_int(b, r->attempt);
    ks_jbuf_lit(b, "}");
}

/* Writes s as a JSON string, or "" if it is not UTF-8 (our own messages always are). */
static void put_str(ks_jbuf_t *b, const char *s)
{
    if (!s || !ks_jbuf_str(b, s, strlen(s)))
        ks_jbuf_lit(b, "\"\"");
}

/* Sends the text in b (taken) with a trailing newline. */
static enum MHD_Result send_jbuf(struct MHD_Connection *c, int status, ks_jbuf_t *b)
{
    ks_jbuf_lit(b, "\n");
    return send_text(c, status, ks_jbuf_take(b, NULL));
}

/* ---- engine callbacks (group loop threads) ---- */

static void wake(req_t *r)
{
    pthread_mutex_lock(&r->lock);
    r->done = true;
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
    pthread_mutex_unlock(&r->lock);
    req_unref(r);
}

static void on_fetch(ks_batch_t *b, void *opaque)
{
    req_t *r = opaque;
    r->batch = b;
    wake(r);
}

static void on_ack(ks_ack_result_t *res, size_t n, void *opaque)
{
    req_t *r = opaque;
    r->acks = res;
    wake(r);
}

static void on_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    req_t *r = opaque;
    r->groups = groups;
    r->group_cnt = n;
    wake(r);
}

/* ---- handlers ---- */

static enum MHD_Result reply_fetch(req_t *r)
{
    ks_batch_t *b = r->batch;
    if (b->status)
        return send_error(r->conn, b->status, "%s", b->message);
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 64 + b->cnt * 256);
    ks_jbuf_lit(&jb, "{\"records\":[");
    for (size_t i = 0; i < b->cnt; i++) {
        if (i)
            ks_jbuf_lit(&jb, ",");
        put_record(&jb, &b->recs[i], r->fmt);
    }
    ks_jbuf_lit(&jb, "]}");
    return send_jbuf(r->conn, 200, &jb);
}

static enum MHD_Result reply_ack(req_t *r)
{
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 128 + r->ack_cnt * 96);
    ks_jbuf_lit(&jb, "{\"results\":[");
    size_t ok = 0;
    ks_status_t first_bad = KS_OK;
    const char *first_msg = NULL;
    for (size_t i = 0; i < r->ack_cnt; i++) {
        ks_ack_result_t *a = &r->acks[i];
        ks_jbuf_lit(&jb, i ? ",{\"ack_id\":" : "{\"ack_id\":");
        put_str(&jb, r->ack_ids[i]);
        ks_jbuf_lit(&jb, ",\"status\":\"");
        ks_jbuf_lit(&jb, ks_status_name(a->status));
        ks_jbuf_lit(&jb, "\",\"message\":");
        put_str(&jb, a->reason);
        ks_jbuf_lit(&jb, "}");
        if (a->status == KS_OK)
            ok++;
        else if (first_bad == KS_OK) {
            first_bad = a->status;
            first_msg = a->reason;
        }
    }
    ks_jbuf_lit(&jb, "],\"accepted\":");
    ks_jbuf_int(&jb, (int64_t)ok);
    ks_jbuf_lit(&jb, ",\"rejected\":");
    ks_jbuf_int(&jb, (int64_t)(r->ack_cnt - ok));
    if (r->op == KS_SETTLE_ACK) {
        ks_jbuf_lit(&jb, ",\"acked\":");
        ks_jbuf_int(&jb, (int64_t)ok);
    }
    /* All rejected: the request as a whole failed, with the first reason's status. */
    if (ok == 0 && first_bad != KS_OK) {
        ks_jbuf_lit(&jb, ",\"error\":{\"code\":\"");
        ks_jbuf_lit(&jb, ks_status_name(first_bad));
        ks_jbuf_lit(&jb, "\",\"message\":");
        put_str(&jb, first_msg);
        ks_jbuf_lit(&jb, "}}");
        return send_jbuf(r->conn, http_status_of(first_bad), &jb);
    }
    ks_jbuf_lit(&jb, "}");
    return send_jbuf(r->conn, 200, &jb);
}

static json_t *status_json(const ks_group_status_t *g)
{
    json_t *parts = json_array();
    for (size_t i = 0; i < g->part_cnt; i++) {
        const ks_part_status_t *p = &g->parts[i];
        json_t *o = json_object();
        json_object_set_new(o, "topic", json_string(p->topic));
        json_object_set_new(o, "partition", json_integer(p->partition));
        json_object_set_new(o, "state", json_string(p->state));
        json_object_set_new(o, "epoch", json_integer(p->epoch));
        json_object_set_new(o, "committed_offset",
                            p->committed >= 0 ? json_integer(p->committed) : json_null());
        json_object_set_new(o, "high_watermark",
                            p->high_watermark >= 0 ? json_integer(p->high_watermark) : json_null());
        json_object_set_new(o, "lag", p->lag >= 0 ? json_integer(p->lag) : json_null());
        json_object_set_new(o, "in_flight", json_integer((json_int_t)p->in_flight));
        json_object_set_new(o, "window_records", json_integer((json_int_t)p->window));
        json_object_set_new(o, "window_bytes", json_integer(p->window_bytes));
        json_object_set_new(o, "paused", json_boolean(p->paused));
        json_object_set_new(o, "oldest_lease_age_ms",
                            p->oldest_lease_age_ms >= 0 ? json_integer(p->oldest_lease_age_ms)
                                                        : json_null());
        json_object_set_new(o, "metadata_truncations", json_integer(p->metadata_truncations));
        json_object_set_new(o, "held_back", json_boolean(p->held_back));
        json_array_append_new(parts, o);
    }
    json_t *subs = json_array();
    for (size_t i = 0; i < g->sub_cnt; i++) {
        const ks_sub_status_t *s = &g->subs[i];
        json_array_append_new(subs,
                              json_pack("{s:s,s:{s:I,s:I},s:{s:I,s:I},s:b}", "name", s->name,
                                        "credits", "records", (json_int_t)s->credit_records,
                                        "bytes", (json_int_t)s->credit_bytes, "outstanding",
                                        "records", (json_int_t)s->outstanding_records, "bytes",
                                        (json_int_t)s->outstanding_bytes, "waiting", s->waiting));
    }
    json_t *topics = json_array();
    char copy[sizeof(g->topics)];
    snprintf(copy, sizeof(copy), "%s", g->topics);
    char *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        json_array_append_new(topics, json_string(t));
    json_t *o =
        json_pack("{s:s,s:b,s:s,s:o,s:o,s:o}", "group", g->name, "static", g->is_static, "ordering",
                  g->ordering, "topics", topics, "partitions", parts, "subscribers", subs);
    json_object_set_new(o, "dead_letter_topic",
                        *g->dead_letter_topic ? json_string(g->dead_letter_topic) : json_null());
    json_object_set_new(o, "max_attempts", json_integer(g->max_attempts));
    json_object_set_new(o, "counters",
                        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "delivered",
                                  (json_int_t)g->delivered, "redelivered",
                                  (json_int_t)g->redelivered, "expired", (json_int_t)g->expired,
                                  "nacked", (json_int_t)g->nacked, "acked", (json_int_t)g->acked,
                                  "dead_lettered", (json_int_t)g->dead_lettered));
    return o;
}

static enum MHD_Result reply_status(req_t *r)
{
    if (r->status_one) {
        if (r->group_cnt == 0)
            return send_error(r->conn, KS_E_NOT_FOUND, "the group closed meanwhile");
        return send_json(r->conn, 200, status_json(r->groups[0]));
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < r->group_cnt; i++)
        json_array_append_new(arr, status_json(r->groups[i]));
    return send_json(r->conn, 200, json_pack("{s:o}", "groups", arr));
}

static enum MHD_Result reply(req_t *r)
{
    if (r->is_status)
        return reply_status(r);
    return r->batch ? reply_fetch(r) : reply_ack(r);
}

typedef struct {
    const char *topics[MAX_TOPICS];
    size_t topic_cnt;
    bool too_many;
    const char *max, *wait_ms, *format, *deadline_ms, *subscriber;
    const char *unknown;
} fetch_args_t;

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    fetch_args_t *a = cls;
    if (!strcmp(key, "topic")) {
        if (a->topic_cnt == MAX_TOPICS)
            a->too_many = true;
        else
            a->topics[a->topic_cnt++] = value ? value : "";
    } else if (!strcmp(key, "max"))
        a->max = value ? value : "";
    else if (!strcmp(key, "wait_ms"))
        a->wait_ms = value ? value : "";
    else if (!strcmp(key, "format"))
        a->format = value ? value : "";
    else if (!strcmp(key, "deadline_ms"))
        a->deadline_ms = value ? value : "";
    else if (!strcmp(key, "subscriber"))
        a->subscriber = value ? value : "";
    else if (!a->unknown)
        a->unknown = key;
    return MHD_YES;
}

static int parse_int_arg(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Suspends r until the engine answers, unless it already has. Returns true if the
 * answer is already here and the caller should reply now. */
static bool park(req_t *r)
{
    pthread_mutex_lock(&r->lock);
    bool done = r->done;
    if (!done) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->lock);
    return done;
}

static enum MHD_Result handle_fetch(ks_http_t *h, req_t *r, const char *group)
{
    fetch_args_t a = {0};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, collect_arg, &a);
    if (a.unknown)
        return send_error(r->conn, KS_E_INVALID,
                          "unknown query parameter \"%s\" (known: topic, max, wait_ms, "
                          "deadline_ms, subscriber, format)",
                          a.unknown);
    if (a.too_many)
        return send_error(r->conn, KS_E_INVALID, "at most %d topics per fetch", MAX_TOPICS);
    /* topic=a,b is the same as topic=a&topic=b. */
    char *split_buf[MAX_TOPICS];
    size_t split_cnt = 0;
    const char *topics[MAX_TOPICS];
    size_t tc = 0;
    enum MHD_Result ret = MHD_YES;
    for (size_t i = 0; i < a.topic_cnt; i++) {
        char *copy = strdup(a.topics[i]), *save = NULL;
        split_buf[split_cnt++] = copy;
        char *tok = strtok_r(copy, ",", &save);
        if (!tok)
            topics[tc++] = ""; /* empty: let validation name it */
        for (; tok && tc < MAX_TOPICS; tok = strtok_r(NULL, ",", &save))
            topics[tc++] = tok;
    }
    long max = 100, wait = h->cfg->fetch_default_wait_ms;
    if (tc == 0) {
        ret = send_error(r->conn, KS_E_INVALID, "missing query parameter topic (e.g. ?topic=demo)");
        goto out;
    }
    if (a.max && parse_int_arg(a.max, 1, h->cfg->fetch_max_records, &max) < 0) {
        ret = send_error(r->conn, KS_E_INVALID,
                         "max must be an integer from 1 to %d (fetch.max_records), got \"%s\"",
                         h->cfg->fetch_max_records, a.max);
        goto out;
    }
    if (a.wait_ms && parse_int_arg(a.wait_ms, 0, h->cfg->fetch_max_wait_ms, &wait) < 0) {
        ret = send_error(r->conn, KS_E_INVALID,
                         "wait_ms must be an integer from 0 to %d (fetch.max_wait_ms), got \"%s\"",
                         h->cfg->fetch_max_wait_ms, a.wait_ms);
        goto out;
    }
    long deadline = 0;
    if (a.deadline_ms &&
        parse_int_arg(a.deadline_ms, 1, h->cfg->lease_max_deadline_ms, &deadline) < 0) {
        ret = send_error(r->conn, KS_E_INVALID,
                         "deadline_ms must be an integer from 1 to %d (lease.max_deadline_ms), "
                         "got \"%s\"",
                         h->cfg->lease_max_deadline_ms, a.deadline_ms);
        goto out;
    }
    r->fmt = FMT_AUTO;
    if (a.format) {
        if (!strcmp(a.format, "base64"))
            r->fmt = FMT_BASE64;
        else if (strcmp(a.format, "auto") && strcmp(a.format, "text")) {
            ret = send_error(r->conn, KS_E_INVALID,
                             "format must be auto, text or base64, got \"%s\"", a.format);
            goto out;
        }
    }
    char err[512];
    atomic_fetch_add(&r->refs, 1);
    r->submitted = true;
    ks_fetch_opts_t opts = {.max = (int)max,
                            .wait_ms = (int)wait,
                            .deadline_ms = (int)deadline,
                            .subscriber = a.subscriber};
    ks_status_t st =
        ks_engine_fetch(h->eng, group, topics, tc, &opts, on_fetch, r, err, sizeof(err));
    if (st) {
        r->submitted = false;
        atomic_fetch_sub(&r->refs, 1);
        ret = send_error(r->conn, st, "%s", err);
        goto out;
    }
    if (park(r))
        ret = reply(r);
out:
    for (size_t i = 0; i < split_cnt; i++)
        free(split_buf[i]);
    return ret;
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* The common body, {"ack_ids":["...",...]} with plain ASCII ids, read without building a
 * JSON tree: the ids are cut out of the body in place. Returns false (body untouched) for
 * anything else, which then goes through jansson and its error messages. */
static bool fast_ack_ids(req_t *r)
{
    const char *p = r->body, *end = r->body + r->body_len;
    static const char head[] = "\"ack_ids\"";
    p = skip_ws(p, end);
    if (p == end || *p++ != '{')
        return false;
    p = skip_ws(p, end);
    if ((size_t)(end - p) < sizeof(head) - 1 || memcmp(p, head, sizeof(head) - 1) != 0)
        return false;
    p = skip_ws(p + sizeof(head) - 1, end);
    if (p == end || *p++ != ':')
        return false;
    p = skip_ws(p, end);
    if (p == end || *p++ != '[')
        return false;
    const char *first = p;
    size_t n = 0;
    p = skip_ws(p, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (p == end || *p++ != '"')
                return false;
            while (p < end && *p != '"') {
                unsigned char c = (unsigned char)*p++;
                if (c < 0x20 || c > 0x7E || c == '\\')
                    return false;
            }
            if (p == end)
                return false;
            p = skip_ws(p + 1, end);
            n++;
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            if (p == end || *p++ != ']')
                return false;
            break;
        }
    }
    p = skip_ws(p, end);
    if (p == end || *p++ != '}' || skip_ws(p, end) != end || n == 0 || n > MAX_ACK_IDS)
        return false;
    r->ack_ids = calloc(n, sizeof(char *));
    if (!r->ack_ids)
        abort();
    r->ack_ids_in_body = true;
    for (char *q = r->body + (first - r->body); r->ack_cnt < n; q++) {
        if (*q != '"')
            continue;
        r->ack_ids[r->ack_cnt++] = q + 1;
        q = strchr(q + 1, '"'); /* the closing quote becomes the string's end */
        *q = '\0';
    }
    return true;
}

/* Hands the ids in r to the engine and parks the request for the answer. */
static enum MHD_Result submit_settle(ks_http_t *h, req_t *r, const char *group, ks_settle_op_t op,
                                     int64_t ms, const char *reason)
{
    char err[512];
    r->op = op;
    atomic_fetch_add(&r->refs, 1);
    r->submitted = true;
    ks_status_t st =
        ks_engine_settle(h->eng, group, op, ms, reason, (const char *const *)r->ack_ids, r->ack_cnt,
                         on_ack, r, err, sizeof(err));
    if (st) {
        r->submitted = false;
        atomic_fetch_sub(&r->refs, 1);
        return send_error(r->conn, st, "%s", err);
    }
    return park(r) ? reply(r) : MHD_YES;
}

static enum MHD_Result handle_settle(ks_http_t *h, req_t *r, const char *group, ks_settle_op_t op)
{
    if (r->too_big)
        return send_error(r->conn, KS_E_EXHAUSTED,
                          "request body is larger than http.max_request_bytes (%lld)",
                          (long long)h->cfg->max_request_bytes);
    if (r->body && op != KS_SETTLE_EXTEND && fast_ack_ids(r))
        return submit_settle(h, r, group, op, 0, NULL);
    json_error_t jerr;
    json_t *root = r->body ? json_loadb(r->body, r->body_len, 0, &jerr) : NULL;
    if (!root)
        return send_error(r->conn, KS_E_INVALID,
                          "body is not valid JSON (%s); send {\"ack_ids\":[\"...\"]}",
                          r->body ? jerr.text : "empty body");
    json_t *ids = json_object_get(root, "ack_ids");
    enum MHD_Result ret;
    if (!json_is_object(root) || !json_is_array(ids)) {
        ret = send_error(r->conn, KS_E_INVALID, "body must be {\"ack_ids\":[\"...\"]%s}",
                         op == KS_SETTLE_NACK     ? ",\"delay_ms\":0,\"reason\":\"...\""
                         : op == KS_SETTLE_EXTEND ? ",\"deadline_ms\":30000"
                                                  : "");
        goto out;
    }
    /* Only the fields of this operation are allowed. */
    const char *k;
    json_t *v;
    json_int_t ms = 0;
    const char *reason = NULL;
    json_object_foreach(root, k, v)
    {
        if (!strcmp(k, "ack_ids"))
            continue;
        if (op == KS_SETTLE_NACK && !strcmp(k, "delay_ms") && json_is_integer(v))
            ms = json_integer_value(v);
        else if (op == KS_SETTLE_NACK && !strcmp(k, "reason") && json_is_string(v))
            reason = json_string_value(v);
        else if (op == KS_SETTLE_EXTEND && !strcmp(k, "deadline_ms") && json_is_integer(v))
            ms = json_integer_value(v);
        else {
            ret = send_error(r->conn, KS_E_INVALID,
                             "unexpected or mistyped field \"%s\" (ack_ids: array of strings%s)", k,
                             op == KS_SETTLE_NACK     ? ", delay_ms: integer, reason: string"
                             : op == KS_SETTLE_EXTEND ? ", deadline_ms: integer"
                                                      : "");
            goto out;
        }
    }
    if (op == KS_SETTLE_EXTEND && !json_object_get(root, "deadline_ms")) {
        ret = send_error(r->conn, KS_E_INVALID, "deadline_ms is required");
        goto out;
    }
    size_t n = json_array_size(ids);
    if (n == 0 || n > MAX_ACK_IDS) {
        ret = send_error(r->conn, KS_E_INVALID, "ack_ids must hold 1 to %d ack ids, got %zu",
                         MAX_ACK_IDS, n);
        goto out;
    }
    r->ack_ids = calloc(n, sizeof(char *));
    if (!r->ack_ids)
        abort();
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(ids, i);
        if (!json_is_string(it)) {
            ret = send_error(r->conn, KS_E_INVALID, "ack_ids[%zu] is not a string", i);
            goto out;
        }
        r->ack_ids[i] = strdup(json_string_value(it));
        r->ack_cnt = i + 1;
    }
    ret = submit_settle(h, r, group, op, ms, reason);
out:
    json_decref(root);
    return ret;
}

static enum MHD_Result handle_status(ks_http_t *h, req_t *r, const char *group)
{
    char err[512];
    r->is_status = true;
    r->status_one = group != NULL;
    atomic_fetch_add(&r->refs, 1);
    r->submitted = true;
    ks_status_t st = ks_engine_status(h->eng, group, on_status, r, err, sizeof(err));
    if (st) {
        r->submitted = false;
        atomic_fetch_sub(&r->refs, 1);
        return send_error(r->conn, st, "%s", err);
    }
    return park(r) ? reply_status(r) : MHD_YES;
}

/* Splits "/v1/groups/{g}/{rest}". Returns false if url is not of that shape. */
static bool split_group_url(const char *url, char *group, size_t gsize, const char **rest)
{
    const char *p = url + strlen("/v1/groups/");
    const char *slash = strchr(p, '/');
    if (!slash || slash == p || (size_t)(slash - p) >= gsize)
        return false;
    memcpy(group, p, (size_t)(slash - p));
    group[slash - p] = '\0';
    *rest = slash + 1;
    return true;
}

/* Checks the bearer token (for group, when not NULL). Returns true, or false after
 * queueing the error. */
static bool http_authorized(ks_http_t *h, req_t *r, const char *group, enum MHD_Result *ret)
{
    char err[256];
    const char *a = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    ks_status_t st = ks_auth_check(h->auth, a, group, err, sizeof(err));
    if (st == KS_OK)
        return true;
    *ret = send_error(r->conn, st, "%s", err);
    return false;
}

/* With mTLS, the client's certificate must have verified against the client CA. */
static bool client_cert_ok(ks_http_t *h, struct MHD_Connection *conn)
{
    if (!h->tls_ca)
        return true;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!ci || !ci->tls_session)
        return false;
    gnutls_session_t tls = (gnutls_session_t)ci->tls_session;
    unsigned int n = 0, status = 0;
    if (!gnutls_certificate_get_peers(tls, &n) || n == 0)
        return false;
    return gnutls_certificate_verify_peers2(tls, &status) == 0 && status == 0;
}

static enum MHD_Result route(ks_http_t *h, req_t *r, const char *method, const char *url)
{
    enum MHD_Result aret = MHD_NO;
    if (!client_cert_ok(h, r->conn))
        return send_error(r->conn, KS_E_UNAUTH,
                          "a client certificate signed by the configured client CA is required");
    if (!strcmp(url, "/healthz")) {
        if (strcmp(method, "GET"))
            return send_error(r->conn, KS_E_INVALID, "use GET for /healthz");
        return send_json(r->conn, 200, json_pack("{s:s}", "status", "ok"));
    }
    char group[512];
    const char *rest;
    if (!strcmp(url, "/v1/groups") || !strcmp(url, "/v1/groups/")) {
        if (strcmp(method, "GET"))
            return send_error(r->conn, KS_E_INVALID, "use GET for %s", url);
        if (!http_authorized(h, r, NULL, &aret))
            return aret;
        return handle_status(h, r, NULL);
    }
    if (!strncmp(url, "/v1/groups/", 11) && !strchr(url + 11, '/') && url[11]) {
        if (strcmp(method, "GET"))
            return send_error(r->conn, KS_E_INVALID, "use GET for %s", url);
        if (!http_authorized(h, r, url + 11, &aret))
            return aret;
        return handle_status(h, r, url + 11);
    }
    if (!strncmp(url, "/v1/groups/", 11) && split_group_url(url, group, sizeof(group), &rest)) {
        if (!http_authorized(h, r, group, &aret))
            return aret;
        static const struct {
            const char *name;
            ks_settle_op_t op;
        } settles[] = {
            {"acks", KS_SETTLE_ACK}, {"nacks", KS_SETTLE_NACK}, {"deadline", KS_SETTLE_EXTEND}};
        if (!strcmp(rest, "records")) {
            if (strcmp(method, "GET"))
                return send_error(r->conn, KS_E_INVALID, "use GET for %s", url);
            return handle_fetch(h, r, group);
        }
        for (size_t i = 0; i < sizeof(settles) / sizeof(settles[0]); i++) {
            if (strcmp(rest, settles[i].name))
                continue;
            if (strcmp(method, "POST"))
                return send_error(r->conn, KS_E_INVALID, "use POST for %s", url);
            return handle_settle(h, r, group, settles[i].op);
        }
    }
    return send_error(r->conn, KS_E_NOT_FOUND, "no endpoint %s %s", method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    ks_http_t *h = cls;
    req_t *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r)
            return MHD_NO;
        atomic_init(&r->refs, 1);
        pthread_mutex_init(&r->lock, NULL);
        r->conn = conn;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_big || (int64_t)(r->body_len + n) > h->cfg->max_request_bytes) {
            r->too_big = true;
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            r->body_cap = (r->body_len + n + 1) * 2;
            r->body = realloc(r->body, r->body_cap);
            if (!r->body)
                abort();
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }
    if (r->submitted) {
        /* Resumed: the engine has answered. */
        if (park(r))
            return reply(r);
        return MHD_YES;
    }
    return route(h, r, method, url);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    req_t *r = *con_cls;
    if (r)
        req_unref(r);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    ks_warn(LOGC, "%s", msg);
}

static int parse_listen(const char *s, struct sockaddr_in *sa, char *err, size_t errsize)
{
    const char *colon = strrchr(s, ':');
    char host[256];
    if (!colon || (size_t)(colon - s) >= sizeof(host))
        goto bad;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    long port;
    if (parse_int_arg(colon + 1, 0, 65535, &port) < 0)
        goto bad;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof(host), "127.0.0.1");
    if (!*host || !strcmp(host, "*"))
        sa->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        goto bad;
    return 0;
bad:
    snprintf(err, errsize, "config key 'http.listen': expected IPv4-host:port, got \"%s\"", s);
    return -1;
}

static void http_free(ks_http_t *h)
{
    free(h->tls_cert);
    free(h->tls_key);
    free(h->tls_ca);
    free(h);
}

ks_http_t *ks_http_start(ks_engine_t *eng, const ks_config_t *cfg, const ks_auth_t *auth, char *err,
                         size_t errsize)
{
    struct sockaddr_in sa;
    if (parse_listen(cfg->http_listen, &sa, err, errsize) < 0)
        return NULL;
    ks_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        abort();
    h->eng = eng;
    h->cfg = cfg;
    h->auth = auth;
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY |
                         MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem tls[4];
    memset(tls, 0, sizeof(tls));
    size_t nt = 0;
    if (*cfg->tls_cert_file) {
        h->tls_cert = ks_read_file(cfg->tls_cert_file);
        h->tls_key = ks_read_file(cfg->tls_key_file);
        if (*cfg->tls_client_ca_file)
            h->tls_ca = ks_read_file(cfg->tls_client_ca_file);
        if (!h->tls_cert || !h->tls_key || (*cfg->tls_client_ca_file && !h->tls_ca)) {
            snprintf(err, errsize,
                     "cannot read the TLS files (tls.cert_file, tls.key_file, "
                     "tls.client_ca_file)");
            http_free(h);
            return NULL;
        }
        flags |= MHD_USE_TLS;
        tls[nt++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert};
        tls[nt++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key};
        if (h->tls_ca)
            tls[nt++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, h->tls_ca};
    }
    tls[nt] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER,
                            mhd_log, h, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, h, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_ARRAY, tls,
                            MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errsize, "cannot listen for HTTP on %s: %s", cfg->http_listen,
                 strerror(errno));
        http_free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : ntohs(sa.sin_port);
    ks_info(LOGC, "listening on %s://%s:%d%s", h->tls_cert ? "https" : "http",
            inet_ntoa(sa.sin_addr), h->port, h->tls_ca ? " (client certificates required)" : "");
    return h;
}

int ks_http_port(const ks_http_t *h)
{
    return h->port;
}

void ks_http_quiesce(ks_http_t *h)
{
    MHD_socket s = MHD_quiesce_daemon(h->d);
    if (s != MHD_INVALID_SOCKET)
        close(s);
}

void ks_http_stop(ks_http_t *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    http_free(h);
}
