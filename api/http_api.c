/* http_api.c: the HTTP/JSON edge: routes, JSON in and out, long-poll by suspend/resume. */
#include "http_api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ack_id.h"
#include "json_out.h"
#include "log.h"
#include "util.h"

#define LOGC        "http"
#define MAX_TOPICS  64
#define MAX_ACK_IDS KS_MAX_ACK_IDS
/* A URL longer than this, or with more query parameters, is answered 414. Both fit in
 * CONN_MEMORY with the headers: libmicrohttpd 0.9.75 keeps a record of ~56 bytes per
 * parameter in the connection's pool, and when they overflow it logs a 431 that it never
 * sends (parse_initial_message_line ignores the failed parse), so the request hung. */
#define MAX_URL_BYTES    8192
#define MAX_QUERY_PARAMS 128
#define CONN_MEMORY      (64 * 1024) /* per connection; pages are touched as used */
#define IDLE_TIMEOUT_S   120         /* libmicrohttpd's silence timeout */
/* The probe listener (http.health_listen): its own bounds, so a flood of the API listener
 * never reaches it, and one prober cannot take all of it. */
#define HEALTH_MAX_CONNS        64
#define HEALTH_MAX_CONNS_PER_IP 16
#define FD_RESERVE              512 /* fds left to Kafka, groups and gRPC below the limit */

/* One open connection, for the header and body deadlines that a slow drip cannot extend
 * (libmicrohttpd's own timeout counts only silence). It is libmicrohttpd's socket context:
 * made when the connection starts and freed when it closes, on the daemon's thread. */
typedef struct conn {
    struct conn *prev, *next; /* in ks_http.conns; @locks ks_http.conns_lock */
    int fd;
    /* ms on CLOCK_MONOTONIC at which the deadline sweep shuts the socket down; 0 while a
     * request is being answered (a long-poll has its own wait). Set by the daemon thread,
     * read by the sweep. */
    _Atomic int64_t deadline;
} conn_t;

struct ks_http {
    struct MHD_Daemon *d;
    struct MHD_Daemon *health_d; /* http.health_listen, or NULL */
    ks_engine_t *eng;
    const ks_config_t *cfg;
    const ks_auth_t *auth;
    char *tls_cert, *tls_key, *tls_ca; /* PEM; libmicrohttpd borrows them while it runs */
    int port, health_port;
    atomic_int long_polls; /* fetches waiting in the engine, bound: http.max_long_polls */

    pthread_mutex_t conns_lock; /* guards conns and the sweep's stop flag */
    pthread_cond_t sweep_cond;
    conn_t *conns;
    bool sweep_stop, sweep_started;
    pthread_t sweep;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef enum { FMT_AUTO, FMT_BASE64 } value_fmt_t;

/* One request. Two references while an engine command is out: libmicrohttpd's
 * (dropped when the request completes) and the engine's (dropped in its callback). */
typedef struct req {
    atomic_int refs;
    struct MHD_Connection *conn;
    ks_http_t *h;
    conn_t *cn;       /* its connection's deadline record, NULL if none */
    bool started;     /* the headers are in: the access handler ran once */
    bool long_poll;   /* counted in h->long_polls until the engine answers */
    bool health;      /* came in on the probe listener */
    bool url_too_big; /* longer than MAX_URL_BYTES, or more than MAX_QUERY_PARAMS */
    size_t url_len, param_cnt;
    bool path_nul;      /* the raw path holds %00 */
    char raw_path[256]; /* the start of the path as sent (escaped), for messages */
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
    bool is_ready;             /* a /readyz answer */
    atomic_int ready_pending;  /* static-group status answers still to come */
    char ready_msg[384];       /* why not ready (the first reason); "" when ready */
    const ks_principal_t *who; /* who called; NULL without auth */
    ks_settle_op_t op;
    value_fmt_t fmt;
    /* A long-poll's batch is confirmed (opts.confirm): when the request completes, the
     * engine hears whether the reply went out (its leases start) or not (its records go
     * back, no attempt counted). completed: libmicrohttpd is done with the request. */
    char group[512];
    bool completed;
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

/* Sends root (stolen) as the response body. When it cannot be written (jansson refuses a
 * string that is not UTF-8), the answer is a 500 with a fixed JSON body: every request
 * gets one. */
static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *root)
{
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text) {
        ks_warn(LOGC, "a %d answer could not be written as JSON; sent 500 instead", status);
        return send_text(c, 500,
                         ks_xstrdup("{\"error\":{\"code\":\"INTERNAL\",\"message\":\"the answer "
                                    "could not be written as JSON\"}}\n"));
    }
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (!withnl)
        abort();
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    return send_text(c, status, withnl);
}

/* Length of the well-formed UTF-8 character at s[0..n), or 0 if the bytes there are not
 * one (a stray continuation byte, an overlong or cut sequence, a surrogate). */
static size_t utf8_char_len(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    return len && len <= n && ks_utf8_valid(s, len) ? len : 0;
}

/* Cuts a message that vsnprintf truncated at its buffer's end back to a character
 * boundary, so the bound never splits a multibyte character, and marks the cut. */
static void trim_truncated(char *msg, size_t size)
{
    size_t n = strlen(msg), keep = n;
    /* The last character starts at most 3 bytes back; drop it if it is incomplete. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)msg[n - back];
        if ((c & 0xC0) == 0x80)
            continue;
        if (c >= 0xC0 && !utf8_char_len(msg + n - back, back))
            keep = n - back;
        break;
    }
    if (keep > size - 4)
        keep = size - 4;
    while (keep && (((unsigned char)msg[keep] & 0xC0) == 0x80))
        keep--; /* never split the character that ends where "..." goes */
    memcpy(msg + keep, "...", 4);
}

/* Initializes t with msg's UTF-8 characters as they are and every other byte as the
 * text \xHH: UTF-8 whatever bytes a request echoed. The caller frees t. */
static void utf8_lossy(ks_jbuf_t *t, const char *msg)
{
    size_t n = strlen(msg);
    ks_jbuf_init(t, n + 16);
    for (size_t i = 0; i < n;) {
        size_t l = utf8_char_len(msg + i, n - i);
        if (l) {
            ks_jbuf_raw(t, msg + i, l);
            i += l;
            continue;
        }
        char hex[5];
        snprintf(hex, sizeof(hex), "\\x%02X", (unsigned char)msg[i++]);
        ks_jbuf_raw(t, hex, 4);
    }
}

/* Writes msg into b as a JSON string, lossy as utf8_lossy is, so the body is valid JSON
 * whatever bytes a request echoed. */
static void put_lossy(ks_jbuf_t *b, const char *msg)
{
    ks_jbuf_t t;
    utf8_lossy(&t, msg);
    bool ok = ks_jbuf_str(b, t.p, t.len);
    (void)ok; /* t is UTF-8 by construction */
    ks_jbuf_free(&t);
}

/* A new jansson string of s, lossy as put_lossy is (jansson refuses what is not UTF-8). */
static json_t *json_lossy(const char *s)
{
    ks_jbuf_t t;
    utf8_lossy(&t, s);
    json_t *j = json_stringn(t.p, t.len);
    ks_jbuf_free(&t);
    return j;
}

/* The error body {"error":{"code":...,"message":...}} for st with the printf-style
 * message, at HTTP status `status` (0: st's own), with Retry-After when retry_s > 0. */
static enum MHD_Result send_error_v(struct MHD_Connection *c, int status, ks_status_t st,
                                    int retry_s, const char *fmt, va_list ap)
{
    char msg[512];
    if (vsnprintf(msg, sizeof(msg), fmt, ap) >= (int)sizeof(msg))
        trim_truncated(msg, sizeof(msg));
    ks_jbuf_t b;
    ks_jbuf_init(&b, 64 + strlen(msg));
    ks_jbuf_lit(&b, "{\"error\":{\"code\":\"");
    ks_jbuf_lit(&b, ks_status_name(st));
    ks_jbuf_lit(&b, "\",\"message\":");
    put_lossy(&b, msg);
    ks_jbuf_lit(&b, "}}\n");
    char *text = ks_jbuf_take(&b, NULL);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (retry_s > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_s);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    enum MHD_Result ret =
        MHD_queue_response(c, (unsigned)(status ? status : http_status_of(st)), resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, ks_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result send_error(struct MHD_Connection *c, ks_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = send_error_v(c, 0, st, 0, fmt, ap);
    va_end(ap);
    return ret;
}

/* send_error at an HTTP status other than st's own (414), with Retry-After if retry_s. */
static enum MHD_Result send_error_at(struct MHD_Connection *c, int status, ks_status_t st,
                                     int retry_s, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum MHD_Result send_error_at(struct MHD_Connection *c, int status, ks_status_t st,
                                     int retry_s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result ret = send_error_v(c, status, st, retry_s, fmt, ap);
    va_end(ap);
    return ret;
}

/* Copies v[0..n) into out (NUL-terminated, cut to fit) with each NUL byte shown as \x00,
 * for a message about a name that holds one. Returns out. */
static const char *show_nul(const char *v, size_t n, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < size; i++) {
        if (v[i])
            out[o++] = v[i];
        else {
            memcpy(out + o, "\\x00", 4);
            o += 4;
        }
    }
    out[o] = '\0';
    return out;
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
    pthread_mutex_lock(&r->lock);
    r->batch = b;
    if (r->long_poll)
        atomic_fetch_sub(&r->h->long_polls, 1);
    uint64_t late = r->completed ? b->deliver_token : 0; /* it ended first (at shutdown) */
    if (late)
        b->deliver_token = 0;
    pthread_mutex_unlock(&r->lock);
    ks_engine_delivered(r->h->eng, r->group, late, false);
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
        json_object_set_new(o, "commit_in_flight",
                            p->commit_in_flight >= 0 ? json_integer(p->commit_in_flight)
                                                     : json_null());
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
        json_object_set_new(o, "window_memory_bytes", json_integer(p->window_memory_bytes));
        json_object_set_new(o, "kafka_queue_records", json_integer(p->kafka_queue_records));
        json_object_set_new(o, "budget_pauses", json_integer(p->budget_pauses));
        json_array_append_new(parts, o);
    }
    json_t *subs = json_array();
    for (size_t i = 0; i < g->sub_cnt; i++) {
        const ks_sub_status_t *s = &g->subs[i];
        json_array_append_new(
            subs, json_pack("{s:o,s:{s:I,s:I},s:{s:I,s:I},s:b}", "name", json_lossy(s->name),
                            "credits", "records", (json_int_t)s->credit_records, "bytes",
                            (json_int_t)s->credit_bytes, "outstanding", "records",
                            (json_int_t)s->outstanding_records, "bytes",
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
                        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "delivered",
                                  (json_int_t)g->delivered, "redelivered",
                                  (json_int_t)g->redelivered, "expired", (json_int_t)g->expired,
                                  "nacked", (json_int_t)g->nacked, "acked", (json_int_t)g->acked,
                                  "dead_lettered", (json_int_t)g->dead_lettered,
                                  "acks_lost_to_move", (json_int_t)g->acks_lost_to_move));
    json_object_set_new(o, "memory",
                        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "max_bytes",
                                  (json_int_t)g->mem_max_bytes, "used_bytes",
                                  (json_int_t)g->mem_used_bytes, "partitions",
                                  (json_int_t)g->mem_partitions, "window_share_bytes",
                                  (json_int_t)g->mem_window_share_bytes, "kafka_queue_kbytes",
                                  (json_int_t)g->mem_kafka_queue_kbytes, "kafka_fetch_bytes",
                                  (json_int_t)g->mem_kafka_fetch_bytes));
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
        if (ks_auth_covers(r->h->auth, r->who, KS_SCOPE_GROUPS, r->groups[i]->name))
            json_array_append_new(arr, status_json(r->groups[i]));
    return send_json(r->conn, 200, json_pack("{s:o}", "groups", arr));
}

static enum MHD_Result reply_ready(req_t *r);

static enum MHD_Result reply(req_t *r)
{
    if (r->is_ready)
        return reply_ready(r);
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
    /* The first parameter whose name or value holds a NUL byte (%00), which the C strings
     * above would silently cut short. */
    const char *nul_key, *nul_value;
    size_t nul_key_len, nul_value_len;
} fetch_args_t;

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_len, const char *value, size_t value_len)
{
    fetch_args_t *a = cls;
    if (!a->nul_key && (strlen(key) != key_len || (value && strlen(value) != value_len))) {
        a->nul_key = key;
        a->nul_key_len = key_len;
        a->nul_value = value ? value : "";
        a->nul_value_len = value ? value_len : 0;
    }
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

static enum MHD_Result handle_fetch(ks_http_t *h, req_t *r, const char *group, bool head)
{
    fetch_args_t a = {0};
    MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND, collect_arg, &a);
    if (a.nul_key) {
        char k[128], v[256];
        return send_error(r->conn, KS_E_INVALID,
                          "query parameter \"%s\" (value \"%s\") holds a NUL byte (%%00); names "
                          "and values cannot contain NUL",
                          show_nul(a.nul_key, a.nul_key_len, k, sizeof(k)),
                          show_nul(a.nul_value, a.nul_value_len, v, sizeof(v)));
    }
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
    /* Every name counts against MAX_TOPICS, split or not, an empty one too. */
    bool too_many = false;
    for (size_t i = 0; i < a.topic_cnt && !too_many; i++) {
        char *copy = strdup(a.topics[i]), *save = NULL;
        split_buf[split_cnt++] = copy;
        char *tok = strtok_r(copy, ",", &save);
        for (const char *t = tok ? tok : ""; t; t = tok ? strtok_r(NULL, ",", &save) : NULL) {
            if (tc == MAX_TOPICS) {
                too_many = true;
                break;
            }
            topics[tc++] = t; /* an empty name: let validation name it */
        }
    }
    long max = 100, wait = h->cfg->fetch_default_wait_ms;
    char err[512];
    ks_status_t st;
    if (too_many) {
        ret = send_error(r->conn, KS_E_INVALID, "at most %d topics per fetch", MAX_TOPICS);
        goto out;
    }
    if (tc == 0) {
        ret = send_error(r->conn, KS_E_INVALID, "missing query parameter topic (e.g. ?topic=demo)");
        goto out;
    }
    /* Bad or internal names get their own answer before the scope check. */
    if ((st = ks_engine_check_topics(h->eng, topics, tc, "consume", err, sizeof(err))) ||
        (st = ks_auth_allow(h->auth, r->who, KS_SCOPE_CONSUME, topics, tc, err, sizeof(err)))) {
        ret = send_error(r->conn, st, "%s", err);
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
    if (head) {
        /* HEAD is safe: the group and parameters are checked as for GET, nothing is
         * leased, and the answer is an empty batch's headers. */
        ks_status_t cst = ks_engine_check_group(h->eng, group, err, sizeof(err));
        if (cst)
            ret = send_error(r->conn, cst, "%s", err);
        else
            ret = send_json(r->conn, 200, json_pack("{s:[]}", "records"));
        goto out;
    }
    if (wait > 0) {
        if (atomic_fetch_add(&h->long_polls, 1) >= h->cfg->http_max_long_polls) {
            atomic_fetch_sub(&h->long_polls, 1);
            ret = send_error_at(r->conn, 429, KS_E_EXHAUSTED, 1,
                                "%d fetches are waiting already (http.max_long_polls); retry "
                                "later or with wait_ms=0",
                                h->cfg->http_max_long_polls);
            goto out;
        }
        r->long_poll = true;
    }
    atomic_fetch_add(&r->refs, 1);
    r->submitted = true;
    ks_fetch_opts_t opts = {.max = (int)max,
                            .wait_ms = (int)wait,
                            .deadline_ms = (int)deadline,
                            .subscriber = a.subscriber,
                            .confirm = 1};
    snprintf(r->group, sizeof(r->group), "%s", group);
    st = ks_engine_fetch(h->eng, group, topics, tc, &opts, on_fetch, r, err, sizeof(err));
    if (st) {
        r->submitted = false;
        atomic_fetch_sub(&r->refs, 1);
        if (r->long_poll)
            atomic_fetch_sub(&h->long_polls, 1);
        r->long_poll = false;
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
    ks_status_t st = ks_auth_allow_ack_ids(h->auth, r->who, (const char *const *)r->ack_ids,
                                           r->ack_cnt, err, sizeof(err));
    if (st)
        return send_error(r->conn, st, "%s", err);
    atomic_fetch_add(&r->refs, 1);
    r->submitted = true;
    st = ks_engine_settle(h->eng, group, op, ms, reason, (const char *const *)r->ack_ids,
                          r->ack_cnt, on_ack, r, err, sizeof(err));
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

/* Notes why r is not ready (the first reason counts). */
static void not_ready(req_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void not_ready(req_t *r, const char *fmt, ...)
{
    pthread_mutex_lock(&r->lock);
    if (!r->ready_msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->ready_msg, sizeof(r->ready_msg), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->lock);
}

/* One static group's answer is in: the last one wakes the request, the others drop
 * their reference. */
static void ready_one_done(req_t *r)
{
    if (atomic_fetch_sub(&r->ready_pending, 1) == 1)
        wake(r);
    else
        req_unref(r);
}

/* A static group's status, for /readyz (a group loop thread). */
static void on_ready_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    req_t *r = opaque;
    if (n == 0)
        not_ready(r, "a static group is not running");
    for (size_t i = 0; i < n; i++) {
        const ks_group_status_t *g = groups[i];
        size_t init = 0;
        for (size_t p = 0; p < g->part_cnt; p++)
            init += !strcmp(g->parts[p].state, "INITIALIZING");
        if (init)
            not_ready(r, "static group %s: %zu of %zu partitions still INITIALIZING", g->name, init,
                      g->part_cnt);
        ks_group_status_free(groups[i]);
    }
    free(groups);
    ready_one_done(r);
}

/* /readyz: ready when Kafka answers (the engine's metadata probe) and every static group
 * of the config runs here with no partition still restoring its commit (INITIALIZING).
 * A group with no partitions (more instances than partitions) counts as ready. Each
 * static group is asked on its own, so busy dynamic groups do not slow the answer. */
static enum MHD_Result handle_ready(ks_http_t *h, req_t *r)
{
    r->is_ready = true;
    if (!ks_engine_kafka_up(h->eng))
        not_ready(r, "Kafka does not answer (kafka.bootstrap.servers)");
    size_t n = h->cfg->static_group_cnt;
    if (n == 0 || r->ready_msg[0])
        return reply(r);
    atomic_store(&r->ready_pending, (int)n);
    atomic_fetch_add(&r->refs, (int)n);
    r->submitted = true;
    for (size_t i = 0; i < n; i++) {
        char err[256];
        const char *name = h->cfg->static_groups[i].name;
        if (ks_engine_status(h->eng, name, on_ready_status, r, err, sizeof(err))) {
            not_ready(r, "static group %s: %s", name, err);
            ready_one_done(r);
        }
    }
    return park(r) ? reply(r) : MHD_YES;
}

static enum MHD_Result reply_ready(req_t *r)
{
    if (r->ready_msg[0])
        return send_error(r->conn, KS_E_UNAVAILABLE, "not ready: %s", r->ready_msg);
    return send_json(r->conn, 200, json_pack("{s:s}", "status", "ready"));
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

/* The connection's TLS session when mTLS is on, else NULL. */
static gnutls_session_t mtls_session(ks_http_t *h, struct MHD_Connection *conn)
{
    if (!h->tls_ca)
        return NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    return ci ? (gnutls_session_t)ci->tls_session : NULL;
}

/* The subject DN (RFC 4514) of the client's certificate into buf, or NULL (no mTLS, or
 * no certificate). client_cert_ok has verified it by the time this runs. */
static const char *cert_subject(ks_http_t *h, struct MHD_Connection *conn, char *buf, size_t size)
{
    gnutls_session_t tls = mtls_session(h, conn);
    if (!tls)
        return NULL;
    unsigned int n = 0;
    const gnutls_datum_t *certs = gnutls_certificate_get_peers(tls, &n);
    gnutls_x509_crt_t crt;
    if (!certs || n == 0 || gnutls_x509_crt_init(&crt) < 0)
        return NULL;
    const char *out = NULL;
    gnutls_datum_t dn = {NULL, 0};
    if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) == 0 &&
        gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0 && dn.size < size) {
        memcpy(buf, dn.data, dn.size);
        buf[dn.size] = '\0';
        out = buf;
    }
    gnutls_free(dn.data);
    gnutls_x509_crt_deinit(crt);
    return out;
}

/* Identifies the caller (its bearer token, else its certificate's subject) into r->who
 * and checks the groups scope for group (NULL: identity only). Returns true, or false
 * after queueing the error. */
static bool http_authorized(ks_http_t *h, req_t *r, const char *group, enum MHD_Result *ret)
{
    if (!h->auth)
        return true;
    char err[512], subj[1024];
    const char *a = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    ks_status_t st = ks_auth_identify(h->auth, a, cert_subject(h, r->conn, subj, sizeof(subj)),
                                      &r->who, err, sizeof(err));
    if (st == KS_OK && group)
        st = ks_auth_allow(h->auth, r->who, KS_SCOPE_GROUPS, &group, 1, err, sizeof(err));
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
    gnutls_session_t tls = mtls_session(h, conn);
    if (!tls)
        return false;
    unsigned int n = 0, status = 0;
    if (!gnutls_certificate_get_peers(tls, &n) || n == 0)
        return false;
    return gnutls_certificate_verify_peers2(tls, &status) == 0 && status == 0;
}

/* GET, or HEAD: libmicrohttpd sends a HEAD answer's headers without its body. */
static bool is_get(const char *method)
{
    return !strcmp(method, "GET") || !strcmp(method, "HEAD");
}

/* /healthz and /readyz, on either listener. Returns false if url is neither. */
static bool route_probe(ks_http_t *h, req_t *r, const char *method, const char *url,
                        enum MHD_Result *ret)
{
    bool ready = !strcmp(url, "/readyz");
    if (!ready && strcmp(url, "/healthz"))
        return false;
    char why[256];
    if (!is_get(method))
        *ret = send_error(r->conn, KS_E_INVALID, "use GET or HEAD for %s", url);
    else if (ready)
        *ret = handle_ready(h, r);
    else if (!ks_engine_kafka_health(h->eng, why, sizeof(why)))
        /* The same source of truth as grpc.health.v1 (ks_engine_kafka_up). */
        *ret =
            send_json(r->conn, 503, json_pack("{s:s,s:s}", "status", "NOT_SERVING", "reason", why));
    else
        *ret = send_json(r->conn, 200, json_pack("{s:s}", "status", "ok"));
    return true;
}

/* What the URI callback found too big or malformed, answered before routing. Returns
 * false if there is nothing. */
static bool route_bad_url(req_t *r, enum MHD_Result *ret)
{
    if (r->url_too_big) {
        *ret = send_error_at(r->conn, 414, KS_E_EXHAUSTED, 0,
                             "the URL has %zu bytes and %zu query parameters; at most %d bytes "
                             "and %d query parameters are allowed",
                             r->url_len, r->param_cnt, MAX_URL_BYTES, MAX_QUERY_PARAMS);
        return true;
    }
    if (r->path_nul) {
        *ret = send_error(r->conn, KS_E_INVALID,
                          "the URL path %s holds a NUL byte (%%00); names cannot contain NUL",
                          r->raw_path);
        return true;
    }
    return false;
}

static enum MHD_Result route(ks_http_t *h, req_t *r, const char *method, const char *url)
{
    enum MHD_Result aret = MHD_NO;
    if (route_bad_url(r, &aret))
        return aret;
    if (r->health) {
        if (route_probe(h, r, method, url, &aret))
            return aret;
        return send_error(r->conn, KS_E_NOT_FOUND,
                          "no endpoint %s %s on the probe listener (http.health_listen serves "
                          "/healthz and /readyz)",
                          method, url);
    }
    if (!client_cert_ok(h, r->conn))
        return send_error(r->conn, KS_E_UNAUTH,
                          "a client certificate signed by the configured client CA is required");
    if (route_probe(h, r, method, url, &aret))
        return aret;
    char group[512];
    const char *rest;
    if (!strcmp(url, "/v1/groups") || !strcmp(url, "/v1/groups/")) {
        if (!is_get(method))
            return send_error(r->conn, KS_E_INVALID, "use GET for %s", url);
        if (!http_authorized(h, r, NULL, &aret))
            return aret;
        return handle_status(h, r, NULL);
    }
    if (!strncmp(url, "/v1/groups/", 11) && !strchr(url + 11, '/') && url[11]) {
        if (!is_get(method))
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
            if (!is_get(method))
                return send_error(r->conn, KS_E_INVALID, "use GET for %s", url);
            return handle_fetch(h, r, group, !strcmp(method, "HEAD"));
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

/* The connection's deadline record (its socket context), or NULL. */
static conn_t *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* libmicrohttpd's URI callback: runs once the request line is in, before it splits the
 * query into parameters or unescapes anything. Makes the request (its return value is
 * the request's con_cls) and notes what the raw URL says: its size and parameter count
 * (too many would overflow the connection's memory, see MAX_QUERY_PARAMS) and whether
 * the path holds %00, which unescaping would turn into a NUL that cuts names short. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    req_t *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->lock, NULL);
    r->conn = conn;
    r->h = cls;
    r->cn = conn_of(conn);
    r->url_len = strlen(uri);
    size_t path_len = strcspn(uri, "?");
    const char *q = uri[path_len] ? uri + path_len + 1 : NULL;
    if (q && *q) {
        r->param_cnt = 1;
        for (const char *p = q; *p; p++)
            r->param_cnt += *p == '&';
    }
    for (size_t i = 0; i + 2 < path_len; i++)
        if (uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0')
            r->path_nul = true;
    snprintf(r->raw_path, sizeof(r->raw_path), "%.*s", (int)path_len, uri);
    if (r->url_len > MAX_URL_BYTES || r->param_cnt > MAX_QUERY_PARAMS) {
        r->url_too_big = true;
        /* libmicrohttpd has already found the '?' and parses the parameters from the byte
         * after it once this returns: an empty string there leaves none to overflow the
         * pool, and the request is answered 414 (the buffer is the connection's own). */
        if (q)
            *(char *)(uintptr_t)q = '\0';
    }
    return r;
}

/* True when the client closed its end of the connection (a read sees end of file).
 * Data waiting to be read (a pipelined request, TLS records) counts as still there. */
static bool peer_closed(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    char byte;
    return recv(ci->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    ks_http_t *h = cls;
    req_t *r = *con_cls;
    if (!r)
        return MHD_NO; /* on_uri makes every request */
    if (!r->started) {
        /* The headers are in; now the body has its own deadline. */
        r->started = true;
        if (r->cn)
            atomic_store(&r->cn->deadline, now_ms() + h->cfg->http_body_timeout_ms);
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
        /* Resumed: the engine has answered. A client that left while the request was
         * suspended gets no reply: the request ends with an error (on_completed). */
        if (park(r))
            return peer_closed(conn) ? MHD_NO : reply(r);
        return MHD_YES;
    }
    if (r->cn)
        atomic_store(&r->cn->deadline, 0); /* the request is whole: being answered now */
    return route(h, r, method, url);
}

/* The probe listener's access handler: on_request, for /healthz and /readyz only. */
static enum MHD_Result on_probe_request(void *cls, struct MHD_Connection *conn, const char *url,
                                        const char *method, const char *version,
                                        const char *upload_data, size_t *upload_data_size,
                                        void **con_cls)
{
    req_t *r = *con_cls;
    if (r)
        r->health = true;
    return on_request(cls, conn, url, method, version, upload_data, upload_data_size, con_cls);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    ks_http_t *h = cls;
    req_t *r = *con_cls;
    if (r) {
        /* A kept-alive connection waits for its next request: silence ends it after
         * IDLE_TIMEOUT_S, and a drip after that plus http.header_timeout_ms. */
        if (r->cn)
            atomic_store(&r->cn->deadline,
                         now_ms() + IDLE_TIMEOUT_S * 1000 + h->cfg->http_header_timeout_ms);
        pthread_mutex_lock(&r->lock);
        r->completed = true;
        uint64_t token = r->batch ? r->batch->deliver_token : 0;
        if (r->batch)
            r->batch->deliver_token = 0;
        pthread_mutex_unlock(&r->lock);
        /* The reply went out in full, or the client left (or the daemon stops): then its
         * records go back now, not at their deadline, and count no attempt. */
        if (token)
            ks_engine_delivered(h->eng, r->group, token,
                                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        req_unref(r);
    }
    *con_cls = NULL;
}

/* libmicrohttpd's connection notifications (daemon thread): a new connection gets its
 * header deadline and joins the sweep's list; a closed one leaves it before its socket
 * is closed, so the sweep never shuts down a reused fd. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    ks_http_t *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_t *c = calloc(1, sizeof(*c));
        if (!c)
            abort();
        c->fd = ci ? ci->connect_fd : -1;
        atomic_init(&c->deadline, now_ms() + h->cfg->http_header_timeout_ms);
        pthread_mutex_lock(&h->conns_lock);
        c->next = h->conns;
        if (h->conns)
            h->conns->prev = c;
        h->conns = c;
        pthread_mutex_unlock(&h->conns_lock);
        *socket_context = c;
        return;
    }
    conn_t *c = *socket_context;
    if (!c)
        return;
    pthread_mutex_lock(&h->conns_lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&h->conns_lock);
    free(c);
    *socket_context = NULL;
}

/* The deadline sweep (its own thread): four times a second, shuts down the socket of
 * every connection past its header or body deadline; libmicrohttpd then reads the end
 * of the stream and closes it on its own thread. O(connections) a pass, a few
 * microseconds for thousands. */
static void *sweep_main(void *arg)
{
    ks_http_t *h = arg;
    pthread_mutex_lock(&h->conns_lock);
    while (!h->sweep_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->sweep_cond, &h->conns_lock, &ts);
        int64_t now = now_ms();
        int closed = 0;
        for (conn_t *c = h->conns; c; c = c->next) {
            int64_t d = atomic_load(&c->deadline);
            if (d && now >= d && c->fd >= 0) {
                shutdown(c->fd, SHUT_RDWR);
                atomic_store(&c->deadline, 0);
                closed++;
            }
        }
        if (closed)
            ks_info(LOGC,
                    "closed %d connection%s past the header or body deadline "
                    "(http.header_timeout_ms, http.body_timeout_ms)",
                    closed, closed == 1 ? "" : "s");
    }
    pthread_mutex_unlock(&h->conns_lock);
    return NULL;
}

#define MHD_LOG_PER_S 20 /* libmicrohttpd messages logged a second; the rest are counted */

/* libmicrohttpd's messages, at most MHD_LOG_PER_S a second: a flood of connections makes
 * one per connection ("Server reached connection limit"), and the log must not become
 * the flood's next victim. Any daemon thread. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int64_t second;
    static int logged, dropped;
    int64_t now = now_ms() / 1000;
    pthread_mutex_lock(&lock);
    int was_dropped = 0;
    if (now != second) {
        was_dropped = dropped;
        second = now;
        logged = dropped = 0;
    }
    bool log = logged < MHD_LOG_PER_S;
    if (log)
        logged++;
    else
        dropped++;
    pthread_mutex_unlock(&lock);
    if (was_dropped)
        ks_warn(LOGC, "%d libmicrohttpd messages were not logged (more than %d a second)",
                was_dropped, MHD_LOG_PER_S);
    if (!log)
        return;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    ks_warn(LOGC, "%s", msg);
}

static int parse_listen(const char *key, const char *s, struct sockaddr_in *sa, char *err,
                        size_t errsize)
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
    snprintf(err, errsize, "config key '%s': expected IPv4-host:port, got \"%s\"", key, s);
    return -1;
}

static void http_free(ks_http_t *h)
{
    if (h->sweep_started) {
        pthread_mutex_lock(&h->conns_lock);
        h->sweep_stop = true;
        pthread_cond_signal(&h->sweep_cond);
        pthread_mutex_unlock(&h->conns_lock);
        pthread_join(h->sweep, NULL);
    }
    pthread_cond_destroy(&h->sweep_cond);
    pthread_mutex_destroy(&h->conns_lock);
    free(h->tls_cert);
    free(h->tls_key);
    free(h->tls_ca);
    free(h);
}

ks_http_t *ks_http_start(ks_engine_t *eng, const ks_config_t *cfg, const ks_auth_t *auth, char *err,
                         size_t errsize)
{
    struct sockaddr_in sa, hsa;
    if (parse_listen("http.listen", cfg->http_listen, &sa, err, errsize) < 0)
        return NULL;
    if (*cfg->http_health_listen &&
        parse_listen("http.health_listen", cfg->http_health_listen, &hsa, err, errsize) < 0)
        return NULL;
    ks_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        abort();
    h->eng = eng;
    h->cfg = cfg;
    h->auth = auth;
    pthread_mutex_init(&h->conns_lock, NULL);
    pthread_cond_init(&h->sweep_cond, NULL);
    /* Connections past the open-files limit would fail in accept (EMFILE) and starve
     * Kafka's sockets; keep FD_RESERVE fds for the rest of the process. */
    unsigned max_conns = (unsigned)cfg->http_max_connections;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        rlim_t room = rl.rlim_cur > 2 * FD_RESERVE ? rl.rlim_cur - FD_RESERVE : rl.rlim_cur / 2;
        if (max_conns > room) {
            ks_warn(LOGC,
                    "http.max_connections %u exceeds what the open-files limit (%llu) leaves; "
                    "using %llu",
                    max_conns, (unsigned long long)rl.rlim_cur, (unsigned long long)room);
            max_conns = (unsigned)room;
        }
    }
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
    /* One epoll thread serves every connection (measured against a thread per connection
     * in tests/bench/http_conns.py); each gets CONN_MEMORY and the deadlines above. */
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
        max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->http_max_conns_per_client,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        (unsigned)1, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errsize, "cannot listen for HTTP on %s: %s", cfg->http_listen,
                 strerror(errno));
        http_free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : ntohs(sa.sin_port);
    if (*cfg->http_health_listen) {
        /* Plain HTTP, /healthz and /readyz only, with its own thread and bounds. */
        h->health_d = MHD_start_daemon(
            MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_ALLOW_SUSPEND_RESUME |
                MHD_USE_ERROR_LOG,
            0, NULL, NULL, on_probe_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
            MHD_OPTION_SOCK_ADDR, &hsa, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)HEALTH_MAX_CONNS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned)HEALTH_MAX_CONNS_PER_IP, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)CONN_MEMORY, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
        if (!h->health_d) {
            snprintf(err, errsize, "cannot listen for HTTP probes on %s: %s",
                     cfg->http_health_listen, strerror(errno));
            MHD_stop_daemon(h->d);
            http_free(h);
            return NULL;
        }
        info = MHD_get_daemon_info(h->health_d, MHD_DAEMON_INFO_BIND_PORT);
        h->health_port = info ? info->port : ntohs(hsa.sin_port);
        ks_info(LOGC, "probes (/healthz, /readyz) on http://%s:%d", inet_ntoa(hsa.sin_addr),
                h->health_port);
    }
    if (pthread_create(&h->sweep, NULL, sweep_main, h) != 0) {
        snprintf(err, errsize, "cannot start the HTTP deadline thread");
        MHD_stop_daemon(h->d);
        if (h->health_d)
            MHD_stop_daemon(h->health_d);
        http_free(h);
        return NULL;
    }
    h->sweep_started = true;
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
    if (h->health_d)
        MHD_stop_daemon(h->health_d);
    http_free(h);
}
