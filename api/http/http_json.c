/* http_json.c: the HTTP edge's JSON writers: error bodies, records, and the reply
 * encoders that answer a request from the engine's result (the server's threads). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ack_id.h"
#include "edge.h"
#include "http_int.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

/* ---- responses ---- */

/* The groups of a status answer the caller may see, for /metrics. */
typedef struct {
    const ks_group_status_t **g;
    size_t n;
} metrics_groups_t;

/* Sends text (len bytes, taken) as the body, of the given Content-Type. */
static http_ret_t send_typed(req_t *r, int status, char *text, size_t len, const char *type)
{
    const http_header_t hdr[] = {{"Content-Type", type}};
    return http_respond(&r->io, (unsigned)status, hdr, 1, text, len);
}

static http_ret_t send_text(req_t *r, int status, char *text)
{
    return send_typed(r, status, text, strlen(text), "application/json");
}

/* Sends root (stolen) as the response body. When it cannot be written (jansson refuses a
 * string that is not UTF-8), the answer is a 500 with a fixed JSON body: every request
 * gets one. */
http_ret_t http_send_json(req_t *r, int status, json_t *root)
{
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text) {
        ks_warn(LOGC, "a %d answer could not be written as JSON; sent 500 instead", status);
        return send_text(r, 500,
                         ks_xstrdup("{\"error\":{\"code\":\"INTERNAL\",\"message\":\"the answer "
                                    "could not be written as JSON\"}}\n"));
    }
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (!withnl)
        abort();
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    return send_text(r, status, withnl);
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

/* The error body {"error":{"code":...,"message":...}} with the printf-style message, at
 * HTTP status, with Retry-After when retry_s > 0 and Allow when allow is not NULL. */
static http_ret_t send_error_v(req_t *r, unsigned status, const char *code, int retry_s,
                               const char *allow, const char *fmt, va_list ap)
{
    char msg[512];
    if (vsnprintf(msg, sizeof(msg), fmt, ap) >= (int)sizeof(msg))
        trim_truncated(msg, sizeof(msg));
    ks_jbuf_t b;
    ks_jbuf_init(&b, 64 + strlen(msg));
    ks_jbuf_lit(&b, "{\"error\":{\"code\":\"");
    ks_jbuf_lit(&b, code);
    ks_jbuf_lit(&b, "\",\"message\":");
    put_lossy(&b, msg);
    ks_jbuf_lit(&b, "}}\n");
    size_t len;
    char *text = ks_jbuf_take(&b, &len);
    http_header_t hdr[3] = {{"Content-Type", "application/json"}};
    size_t nh = 1;
    char ra[16];
    if (retry_s > 0) {
        snprintf(ra, sizeof(ra), "%d", retry_s);
        hdr[nh++] = (http_header_t){"Retry-After", ra};
    }
    if (allow)
        hdr[nh++] = (http_header_t){"Allow", allow};
    return http_respond(&r->io, status, hdr, nh, text, len);
}

http_ret_t http_send_error(req_t *r, ks_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    http_ret_t ret = send_error_v(r, (unsigned)ks_status_http(st), ks_status_name(st),
                                  ks_status_retry_after(st), NULL, fmt, ap);
    va_end(ap);
    return ret;
}

http_ret_t http_send_error_as(req_t *r, unsigned status, const char *code, const char *allow,
                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    http_ret_t ret = send_error_v(r, status, code, 0, allow, fmt, ap);
    va_end(ap);
    return ret;
}

/* Copies v[0..n) into out (NUL-terminated, cut to fit) with each NUL byte shown as \x00,
 * for a message about a name that holds one. Returns out. */
const char *http_show_nul(const char *v, size_t n, char *out, size_t size)
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

/* Writes s as a JSON string, or "" if it is not UTF-8 (our own messages always are). */
static void put_str(ks_jbuf_t *b, const char *s)
{
    if (!s || !ks_jbuf_str(b, s, strlen(s)))
        ks_jbuf_lit(b, "\"\"");
}

/* Sends the text in b (taken) with a trailing newline. */
static http_ret_t send_jbuf(req_t *r, int status, ks_jbuf_t *b)
{
    ks_jbuf_lit(b, "\n");
    size_t len;
    char *text = ks_jbuf_take(b, &len);
    return send_typed(r, status, text, len, "application/json");
}

/* ---- handlers ---- */

http_ret_t http_reply_fetch(req_t *r)
{
    ks_batch_t *b = r->u.fetch.batch;
    if (b->status)
        return http_send_error(r, b->status, "%s", b->message);
    char err[512];
    ks_status_t st =
        ks_edge_fetch_still_allowed(r->h->auth, r->who, r->u.fetch.group, b, err, sizeof(err));
    if (st != KS_OK) {
        /* The tokens file was reloaded without the caller (or with narrower scopes) while the
         * fetch waited: its records go back now, counting no attempt, and the caller is told. */
        pthread_mutex_lock(&r->io.lock);
        uint64_t token = b->deliver_token;
        b->deliver_token = 0;
        pthread_mutex_unlock(&r->io.lock);
        if (token)
            ks_engine_delivered(r->h->eng, r->u.fetch.group, token, false);
        return http_send_error(r, st, "%s", err);
    }
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 64 + b->cnt * 256);
    ks_jbuf_lit(&jb, "{\"records\":[");
    ks_ack_id_writer_t w;
    ks_ack_id_writer_init(&w);
    ks_codec_opts_t o;
    ks_codec_opts_for(&o, &r->fmt, b);
    for (size_t i = 0; i < b->cnt; i++) {
        if (i)
            ks_jbuf_lit(&jb, ",");
        ks_codec_json_record(&jb, &b->recs[i], &o, &w);
    }
    ks_jbuf_lit(&jb, "]}");
    return send_jbuf(r, 200, &jb);
}

http_ret_t http_reply_ack(req_t *r)
{
    const ks_ack_result_t *res = r->u.settle.res;
    size_t res_n = r->u.settle.res_n;
    bool errors_only = r->u.settle.errors_only;
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 128 + res_n * 96);
    ks_jbuf_lit(&jb, "{\"results\":[");
    bool first = true;
    ks_edge_ack_walk_t w;
    ks_edge_ack_walk_init(&w, (const char *const *)r->u.settle.ids, r->u.settle.id_cnt, res_n);
    while (ks_edge_ack_walk_next(&w) && w.j < res_n) {
        const ks_ack_result_t *a = &res[w.j];
        /* results=errors: a client acking thousands of ids at once reads only the refused
         * ones (and a waited ack not known committed), each with its place in the request. */
        if (errors_only && ks_edge_ack_quiet(a))
            continue;
        ks_jbuf_lit(&jb, first ? "{\"ack_id\":" : ",{\"ack_id\":");
        first = false;
        put_str(&jb, ks_edge_ack_walk_id(&w));
        if (errors_only) {
            ks_jbuf_lit(&jb, ",\"index\":");
            ks_jbuf_int(&jb, (int64_t)w.pos);
        }
        ks_jbuf_lit(&jb, ",\"status\":\"");
        /* A waited ack says where its commit stands instead of OK. */
        const char *commit = ks_commit_wait_name(a->commit);
        ks_jbuf_lit(&jb, commit ? commit : ks_status_name(a->status));
        ks_jbuf_lit(&jb, "\",\"message\":");
        put_str(&jb, a->reason);
        if (commit) {
            ks_jbuf_lit(&jb, ",\"committed_offset\":");
            ks_jbuf_int(&jb, a->committed_offset);
        }
        ks_jbuf_lit(&jb, "}");
    }
    ks_edge_ack_summary_t sum;
    ks_edge_ack_summarize(res, res_n, &sum);
    ks_jbuf_lit(&jb, "],\"accepted\":");
    ks_jbuf_int(&jb, (int64_t)sum.accepted);
    ks_jbuf_lit(&jb, ",\"rejected\":");
    ks_jbuf_int(&jb, (int64_t)sum.rejected);
    if (r->u.settle.op == KS_SETTLE_ACK) {
        ks_jbuf_lit(&jb, ",\"acked\":");
        ks_jbuf_int(&jb, (int64_t)sum.accepted);
    }
    /* Every id rejected: the request as a whole failed (ks_edge_ack_summarize). */
    if (sum.status != KS_OK) {
        ks_jbuf_lit(&jb, ",\"error\":{\"code\":\"");
        ks_jbuf_lit(&jb, ks_status_name(sum.status));
        ks_jbuf_lit(&jb, "\",\"message\":");
        put_str(&jb, sum.message);
        ks_jbuf_lit(&jb, "}}");
        return send_jbuf(r, ks_status_http(sum.status), &jb);
    }
    ks_jbuf_lit(&jb, "}");
    return send_jbuf(r, 200, &jb);
}

/* ---- the group status: an object per level, a key per row of proxy/status_fields.h ---- */

static json_t *json_opt_int(int64_t v)
{
    return v >= 0 ? json_integer(v) : json_null();
}

/* The JSON value of member m of s, by the row's type. */
#define J_NAME(s, m)     json_lossy((s)->m)
#define J_NAME_OPT(s, m) (*(s)->m ? json_lossy((s)->m) : json_null())
#define J_TEXT(s, m)     json_lossy((s)->m)
#define J_BOOL(s, m)     json_boolean((s)->m)
#define J_I32(s, m)      json_integer((s)->m)
#define J_I64(s, m)      json_integer((s)->m)
#define J_I64_OPT(s, m)  json_opt_int((s)->m)
#define J_TOPICS(s, m)   json_topics((s)->m, (s)->topic_cnt)
#define J_PARTS(s, m)    json_parts((s)->m, (s)->part_cnt)
#define J_SUBS(s, m)     json_subs((s)->m, (s)->sub_cnt)
#define J_COUNTERS(s, m) json_counters(s)
#define J_MEMORY(s, m)   json_memory(&(s)->m)
#define J_CREDITS(s, m)  json_credits(&(s)->m)
#define J_HIST(s, m)     json_hist(&(s)->m)
/* A row: its key in object o, from struct s. */
#define J_ROW(type, m, pb, name, num, kind, doc) json_object_set_new(o, name, J_##type(s, m));
/* fn(s): the object of one level's struct s, its keys in the list's order. */
#define J_LEVEL(fn, ctype, LIST)                                                                   \
    static json_t *fn(const ctype *s)                                                              \
    {                                                                                              \
        json_t *o = json_object();                                                                 \
        LIST(J_ROW)                                                                                \
        return o;                                                                                  \
    }

static json_t *json_hist(const ks_hist_t *h)
{
    json_t *bounds = json_array(), *counts = json_array();
    for (size_t i = 0; i < KS_HIST_BUCKETS; i++)
        json_array_append_new(bounds, json_integer(ks_hist_bounds_ms[i]));
    for (size_t i = 0; i <= KS_HIST_BUCKETS; i++)
        json_array_append_new(counts, json_integer(h->counts[i]));
    return json_pack("{s:o,s:o,s:I,s:I}", "bounds_ms", bounds, "counts", counts, "sum_ms",
                     (json_int_t)h->sum_ms, "count", (json_int_t)h->count);
}

static json_t *json_topics(char *const *topics, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_lossy(topics[i]));
    return a;
}

J_LEVEL(json_credits, ks_credits_status_t, KS_STATUS_CREDITS_FIELDS)
J_LEVEL(json_memory, ks_mem_status_t, KS_STATUS_MEMORY_FIELDS)
J_LEVEL(json_part, ks_part_status_t, KS_STATUS_PART_FIELDS)
J_LEVEL(json_sub, ks_sub_status_t, KS_STATUS_SUB_FIELDS)
J_LEVEL(json_counters, ks_group_status_t, KS_STATUS_COUNTER_FIELDS)

static json_t *json_parts(const ks_part_status_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_part(&v[i]));
    return a;
}

static json_t *json_subs(const ks_sub_status_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_sub(&v[i]));
    return a;
}

J_LEVEL(status_json, ks_group_status_t, KS_STATUS_GROUP_FIELDS)

/* Appends g's status to the array arr (a ks_edge_group_fn). */
static void status_add(const ks_group_status_t *g, void *arr)
{
    json_array_append_new(arr, status_json(g));
}

http_ret_t http_reply_status(req_t *r)
{
    const char *msg = NULL;
    json_t *arr = json_array();
    ks_status_t st = ks_edge_status_walk(r->u.status.groups, r->u.status.cnt, r->u.status.one,
                                         r->h->auth, r->who, status_add, arr, &msg);
    if (st) {
        json_decref(arr);
        return http_send_error(r, st, "%s", msg);
    }
    if (r->u.status.one) {
        json_t *one = json_incref(json_array_get(arr, 0));
        json_decref(arr);
        return http_send_json(r, 200, one);
    }
    return http_send_json(r, 200, json_pack("{s:o}", "groups", arr));
}

/* Adds g to the list of groups the caller may see (a ks_edge_group_fn). */
static void visible_add(const ks_group_status_t *g, void *ctx)
{
    metrics_groups_t *v = ctx;
    v->g[v->n++] = g;
}

http_ret_t http_reply_metrics(req_t *r)
{
    /* The status listing's rule: only the groups the caller's token covers (every group on
     * the probe listener, which checks no caller). */
    metrics_groups_t v = {calloc(r->u.status.cnt ? r->u.status.cnt : 1, sizeof(*v.g)), 0};
    const char *msg = NULL;
    if (!v.g)
        abort();
    (void)ks_edge_status_walk(r->u.status.groups, r->u.status.cnt, false,
                              r->io.probe ? NULL : r->h->auth, r->who, visible_add, &v, &msg);
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 4096 + v.n * 4096);
    ks_metrics_render(&jb, v.g, v.n, r->h->cfg->metrics_max_series);
    free(v.g);
    size_t len;
    char *text = ks_jbuf_take(&jb, &len);
    return send_typed(r, 200, text, len, KS_METRICS_CONTENT_TYPE);
}

http_ret_t http_reply_ready(req_t *r)
{
    /* The static groups' answers (on_ready_status), once every one is in; the first
     * reason counts, and one noted while asking (Kafka down, a group not found) comes
     * first. */
    char *msg = r->u.status.ready_msg;
    size_t size = sizeof(r->u.status.ready_msg);
    for (size_t i = 0; i < r->u.status.cnt && !msg[0]; i++) {
        const ks_group_status_t *g = r->u.status.groups[i];
        if (!g) {
            snprintf(msg, size, "a static group is not running");
            break;
        }
        size_t init = 0;
        for (size_t p = 0; p < g->part_cnt; p++)
            init += !strcmp(g->parts[p].state, "INITIALIZING");
        if (init)
            snprintf(msg, size, "static group %s: %zu of %zu partitions still INITIALIZING",
                     g->name, init, g->part_cnt);
    }
    if (msg[0])
        return http_send_error(r, KS_E_UNAVAILABLE, "not ready: %s", msg);
    return http_send_json(r, 200, json_pack("{s:s}", "status", "ready"));
}

/* Writes {"error":{"code":...,"message":...}} for one item of a list of results. */
static void put_item_error(ks_jbuf_t *b, const char *code, const char *msg)
{
    ks_jbuf_lit(b, "{\"error\":{\"code\":");
    put_str(b, code);
    ks_jbuf_lit(b, ",\"message\":");
    put_lossy(b, msg);
    ks_jbuf_lit(b, "}}");
}

http_ret_t http_reply_produce(req_t *r)
{
    const http_produce_t *p = r->u.produce.prod;
    size_t sent = 0, late = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->rec[i].st == KS_OK)
            sent = p->rec[i].sent_i + 1;
    if (r->u.produce.res && (late = ks_produce_timed_out(r->u.produce.res, sent)))
        return http_send_error(
            r, KS_E_DEADLINE,
            "%zu of %zu records had no delivery report within the produce's "
            "timeout_ms; they may still be written to Kafka (it retries them up "
            "to kafka.message.timeout.ms): produce them again only if duplicates "
            "are acceptable",
            late, sent);
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 32 + p->n * 48);
    ks_jbuf_lit(&jb, "{\"results\":[");
    for (size_t i = 0; i < p->n; i++) {
        const http_produce_rec_t *pr = &p->rec[i];
        if (i)
            ks_jbuf_lit(&jb, ",");
        if (pr->st != KS_OK) { /* refused by the edge: a ksidecar status */
            put_item_error(&jb, ks_status_name(pr->st), pr->msg);
            continue;
        }
        const ks_produce_result_t *res = &r->u.produce.res[pr->sent_i];
        if (res->error[0]) { /* refused by the producer or the broker: Kafka's error name */
            put_item_error(&jb, res->code[0] ? res->code : "UNKNOWN", res->error);
            continue;
        }
        ks_jbuf_lit(&jb, "{\"partition\":");
        ks_jbuf_int(&jb, res->partition);
        ks_jbuf_lit(&jb, ",\"offset\":");
        ks_jbuf_int(&jb, res->offset);
        ks_jbuf_lit(&jb, "}");
    }
    ks_jbuf_lit(&jb, "]}");
    return send_jbuf(r, 200, &jb);
}

http_ret_t http_reply_seek(req_t *r)
{
    const ks_seek_result_t *s = r->u.seek.res;
    const char *topic = r->u.seek.topic;
    if (s->status)
        return http_send_error(r, s->status, "%s", s->message);
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 64 + s->part_cnt * (96 + strlen(topic)));
    ks_jbuf_lit(&jb, "{\"partitions\":[");
    for (size_t i = 0; i < s->part_cnt; i++) {
        ks_jbuf_lit(&jb, i ? ",{\"topic\":" : "{\"topic\":");
        put_str(&jb, topic);
        ks_jbuf_lit(&jb, ",\"partition\":");
        ks_jbuf_int(&jb, s->parts[i].partition);
        ks_jbuf_lit(&jb, ",\"offset\":");
        ks_jbuf_int(&jb, s->parts[i].offset);
        ks_jbuf_lit(&jb, ",\"stale_leases\":");
        ks_jbuf_int(&jb, s->parts[i].stale_leases);
        ks_jbuf_lit(&jb, "}");
    }
    ks_jbuf_lit(&jb, "],\"stale_leases\":");
    ks_jbuf_int(&jb, s->stale_leases);
    ks_jbuf_lit(&jb, "}");
    return send_jbuf(r, 200, &jb);
}

/* One list of a redrive's report: held (with each count) or skipped (with each reason). */
static void put_redrive_items(ks_jbuf_t *jb, const ks_redrive_item_t *it, size_t n, bool held)
{
    ks_jbuf_lit(jb, "[");
    for (size_t i = 0; i < n; i++) {
        ks_jbuf_lit(jb, i ? ",{\"partition\":" : "{\"partition\":");
        ks_jbuf_int(jb, it[i].partition);
        ks_jbuf_lit(jb, ",\"offset\":");
        ks_jbuf_int(jb, it[i].offset);
        if (held) {
            ks_jbuf_lit(jb, ",\"redriven\":");
            ks_jbuf_int(jb, it[i].redriven);
        } else {
            ks_jbuf_lit(jb, ",\"reason\":");
            put_str(jb, it[i].reason);
        }
        ks_jbuf_lit(jb, "}");
    }
    ks_jbuf_lit(jb, "]");
}

http_ret_t http_reply_redrive(req_t *r)
{
    const ks_redrive_result_t *s = r->u.redrive.res;
    if (s->status)
        return http_send_error(r, s->status, "%s", s->message);
    ks_jbuf_t jb;
    ks_jbuf_init(&jb,
                 512 + (s->held_cnt + s->skipped_cnt) * 64 + s->topic_cnt * 280 + s->part_cnt * 48);
    ks_jbuf_lit(&jb, "{\"dead_letter_topic\":");
    put_str(&jb, s->dead_letter_topic);
    ks_jbuf_lit(&jb, s->dry_run ? ",\"dry_run\":true,\"moved\":" : ",\"dry_run\":false,\"moved\":");
    ks_jbuf_int(&jb, s->moved);
    ks_jbuf_lit(&jb, ",\"by_topic\":{");
    for (size_t i = 0; i < s->topic_cnt; i++) {
        if (i)
            ks_jbuf_lit(&jb, ",");
        put_str(&jb, s->by_topic[i].topic);
        ks_jbuf_lit(&jb, ":");
        ks_jbuf_int(&jb, s->by_topic[i].moved);
    }
    ks_jbuf_lit(&jb, "},\"held\":");
    put_redrive_items(&jb, s->held, s->held_cnt, true);
    ks_jbuf_lit(&jb, ",\"held_total\":");
    ks_jbuf_int(&jb, s->held_total);
    ks_jbuf_lit(&jb, ",\"skipped\":");
    put_redrive_items(&jb, s->skipped, s->skipped_cnt, false);
    ks_jbuf_lit(&jb, ",\"skipped_total\":");
    ks_jbuf_int(&jb, s->skipped_total);
    ks_jbuf_lit(&jb, ",\"next_offsets\":[");
    for (size_t i = 0; i < s->part_cnt; i++) {
        ks_jbuf_lit(&jb, i ? ",{\"partition\":" : "{\"partition\":");
        ks_jbuf_int(&jb, s->parts[i].partition);
        ks_jbuf_lit(&jb, ",\"offset\":");
        ks_jbuf_int(&jb, s->parts[i].next_offset);
        ks_jbuf_lit(&jb, "}");
    }
    ks_jbuf_lit(&jb, "],\"remaining\":");
    ks_jbuf_int(&jb, s->remaining);
    if (s->error[0]) {
        ks_jbuf_lit(&jb, ",\"error\":");
        put_str(&jb, s->error);
    }
    ks_jbuf_lit(&jb, "}");
    return send_jbuf(r, 200, &jb);
}
