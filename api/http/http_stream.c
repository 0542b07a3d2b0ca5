/* http_stream.c: GET /v1/groups/{group}/stream, a record stream for `curl -N`, as a transport
 * of the subscriber-stream core (substream.c): its wire (NDJSON lines or SSE events in a
 * chunked response), heartbeats, and the stream bound. Fetches, credits, refill, stall and
 * release are the core's.
 *
 * The body is pulled (http_respond_stream): with nothing to write, the pull callback pauses
 * the response until the core or the tick resumes it. A resume that comes before its pause is
 * lost (http_req.h), so pause and resume happen under the stream's lock, resume only when the
 * callback did pause. A paused response sees neither timeouts nor a client that left: the
 * heartbeat tick resumes it (http_stream_tick), and the server must find none paused when it
 * stops (http_stream_stop_all). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"
#include "log.h"
#include "util.h"

#define STREAM_BATCH_MAX 1000 /* records in one batch from the core */
/* The server's buffer for the body, one per stream: each body_cb call fills up to this (about
 * 60 records). 256 KiB was measured and gave nothing (tests/bench/HISTORY.md, 2026-12-03). */
#define STREAM_BLOCK 16384

/* What waits to be written: a batch of records, or a line of text (assignment news, the
 * closing error). */
typedef struct out_item {
    ks_batch_t *b;
    char *text;
} out_item_t;

typedef struct hstream {
    ks_substream_t ss; /* the core; its fields are its own */
    atomic_int refs;   /* the request's, the response's, the core's (ops->ref) */
    ks_http_t *h;
    http_req_t *io; /* its request: only while not closed (it completes first) */
    bool sse;
    ks_codec_opts_t fmt;
    int64_t hb_ms;

    pthread_mutex_t lock; /* guards everything below */
    bool suspended;       /* the callback paused the response; cleared by whoever resumes */
    bool drain_due;       /* the core asked for a drain (op_wake) */
    bool beat_due;        /* an idle stream's heartbeat is due */
    bool peer_gone;       /* the client closed its end */
    bool cut;             /* cut off for not reading, or the daemon stops: end at once */
    bool finishing;       /* end once what is queued is out, with fin_msg */
    bool closed;          /* the request completed: the server calls no more */
    uint64_t sent;        /* body bytes handed to the server, for the access log */
    ks_status_t fin_st;
    char fin_msg[512];
    out_item_t *q; /* queued, oldest first */
    size_t qh, qn, qcap;
    /* The text being handed to the server, and the batch it came from (its token and bytes,
     * for ks_substream_msg_done once all of it is handed). */
    char *out;
    size_t out_len, out_off;
    ks_batch_t *out_b;
    int64_t idle_since;          /* the callback last found nothing to write */
    bool counted;                /* in h->stream_cnt */
    struct hstream *prev, *next; /* in h->streams; @locks h->streams_lock */
} hstream_t;

static void hs_ref(hstream_t *s)
{
    atomic_fetch_add(&s->refs, 1);
}

static void hs_unref(hstream_t *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    ks_substream_destroy(&s->ss);
    for (size_t i = 0; i < s->qn; i++) {
        ks_batch_free(s->q[s->qh + i].b);
        free(s->q[s->qh + i].text);
    }
    free(s->q);
    free(s->out);
    ks_batch_free(s->out_b);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Resumes the response if the callback paused it. Locked by caller. */
static void resume_locked(hstream_t *s)
{
    if (s->suspended) {
        s->suspended = false;
        http_resume(s->io);
    }
}

static void push_locked(hstream_t *s, out_item_t it)
{
    if (s->qh + s->qn == s->qcap) {
        if (s->qh) {
            memmove(s->q, s->q + s->qh, s->qn * sizeof(*s->q));
            s->qh = 0;
        } else {
            s->qcap = s->qcap ? 2 * s->qcap : 8;
            s->q = realloc(s->q, s->qcap * sizeof(*s->q));
            if (!s->q)
                abort();
        }
    }
    s->q[s->qh + s->qn++] = it;
}

/* Takes every queued item (not the text being handed) out of s into *q (qh, qn), for
 * drop_items once no lock is held. Locked by caller. */
static void take_queue_locked(hstream_t *s, out_item_t **q, size_t *qh, size_t *qn)
{
    *q = s->q;
    *qh = s->qh;
    *qn = s->qn;
    s->q = NULL;
    s->qh = s->qn = s->qcap = 0;
}

/* Drops items never handed to the server: their records go back counting no attempt. */
static void drop_items(hstream_t *s, out_item_t *q, size_t qh, size_t qn)
{
    for (size_t i = 0; i < qn; i++) {
        out_item_t *it = &q[qh + i];
        if (it->b)
            ks_substream_msg_done(&s->ss, it->b->deliver_token, it->b->bytes, false);
        ks_batch_free(it->b);
        free(it->text);
    }
    free(q);
}

/* ---- the transport of the subscriber-stream core (substream.h) ---- */

static void op_ref(void *t)
{
    hs_ref(t);
}

static void op_unref(void *t)
{
    hs_unref(t);
}

/* The callback drains on the server's thread: resume it if it waits. A stream whose
 * request completed cannot be woken; the core then drains here (only giving leases back). */
static bool op_wake(void *t)
{
    hstream_t *s = t;
    pthread_mutex_lock(&s->lock);
    bool ok = !s->closed;
    if (ok) {
        s->drain_due = true;
        resume_locked(s);
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* Called from ks_substream_drain, inside the callback (the lock is not held there). */
static void op_send_records(void *t, ks_batch_t *b)
{
    hstream_t *s = t;
    pthread_mutex_lock(&s->lock);
    push_locked(s, (out_item_t){.b = b});
    pthread_mutex_unlock(&s->lock);
}

/* The partitions as a JSON array [{"topic":...,"partition":...},...]. */
static void put_tps(ks_jbuf_t *b, const ks_tp_t *tps, size_t n)
{
    ks_jbuf_lit(b, "[");
    for (size_t i = 0; i < n; i++) {
        ks_jbuf_lit(b, i ? ",{\"topic\":" : "{\"topic\":");
        ks_jbuf_str(b, tps[i].topic, strlen(tps[i].topic)); /* topic names are ASCII */
        ks_jbuf_lit(b, ",\"partition\":");
        ks_jbuf_int(b, tps[i].partition);
        ks_jbuf_lit(b, "}");
    }
    ks_jbuf_lit(b, "]");
}

/* One message of kind ("assignment", "revocation", "error") holding body (a JSON value): a
 * line {"kind":body}, or an SSE event of that name. Returns the text (malloc'd). */
static char *news_text(const hstream_t *s, const char *kind, ks_jbuf_t *body)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, body->len + 64);
    if (s->sse) {
        ks_jbuf_lit(&b, "event: ");
        ks_jbuf_lit(&b, kind);
        ks_jbuf_lit(&b, "\ndata: ");
    }
    ks_jbuf_lit(&b, "{\"");
    ks_jbuf_lit(&b, kind);
    ks_jbuf_lit(&b, "\":");
    ks_jbuf_raw(&b, body->p, body->len);
    ks_jbuf_lit(&b, s->sse ? "}\n\n" : "}\n");
    ks_jbuf_free(body);
    return ks_jbuf_take(&b, NULL);
}

static void op_send_assignment(void *t, const ks_tp_t *rev, size_t nrev, const ks_tp_t *as,
                               size_t nas)
{
    hstream_t *s = t;
    char *rv = NULL, *asg = NULL;
    ks_jbuf_t b;
    if (nrev) {
        ks_jbuf_init(&b, 64 * nrev + 8);
        put_tps(&b, rev, nrev);
        rv = news_text(s, "revocation", &b);
    }
    if (nas) {
        ks_jbuf_init(&b, 64 * nas + 8);
        put_tps(&b, as, nas);
        asg = news_text(s, "assignment", &b);
    }
    pthread_mutex_lock(&s->lock);
    if (rv)
        push_locked(s, (out_item_t){.text = rv});
    if (asg)
        push_locked(s, (out_item_t){.text = asg});
    pthread_mutex_unlock(&s->lock);
}

static void op_finish(void *t, ks_status_t st, const char *msg)
{
    hstream_t *s = t;
    pthread_mutex_lock(&s->lock);
    if (!s->finishing) {
        s->finishing = true;
        s->fin_st = st;
        snprintf(s->fin_msg, sizeof(s->fin_msg), "%s", msg);
    }
    resume_locked(s);
    pthread_mutex_unlock(&s->lock);
    ks_substream_stop(&s->ss);
}

/* A client that takes nothing leaves the server waiting to write, so the callback that would
 * end the response is not called: the socket is shut down, and the failed write ends the
 * request. The request is the stream's until it completes, which sets closed under the lock
 * first. */
static void op_cut(void *t, const char *msg)
{
    hstream_t *s = t;
    pthread_mutex_lock(&s->lock);
    s->cut = true;
    if (!s->closed)
        http_shutdown(s->io);
    resume_locked(s);
    pthread_mutex_unlock(&s->lock);
}

static const ks_substream_ops_t stream_ops = {
    .name = "http",
    .ref = op_ref,
    .unref = op_unref,
    .wake = op_wake,
    .send_records = op_send_records,
    .send_assignment = op_send_assignment,
    .finish = op_finish,
    .cut = op_cut,
};

/* ---- the response body (the server's thread) ---- */

/* The text of a batch: one line per record, or one SSE event per record with the ack id as
 * its id. */
static void encode_batch(hstream_t *s, const ks_batch_t *b)
{
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 64 + b->cnt * 320);
    ks_ack_id_writer_t w, wid;
    ks_ack_id_writer_init(&w);
    ks_ack_id_writer_init(&wid);
    ks_codec_opts_t o;
    ks_codec_opts_for(&o, &s->fmt, b);
    for (size_t i = 0; i < b->cnt; i++) {
        if (s->sse) {
            char id[KS_ACK_ID_MAX];
            size_t n = ks_record_ack_id_put(&wid, &b->recs[i], id, sizeof(id));
            ks_jbuf_lit(&jb, "id: ");
            ks_jbuf_raw(&jb, id, n);
            ks_jbuf_lit(&jb, "\ndata: ");
        }
        ks_codec_json_record(&jb, &b->recs[i], &o, &w);
        ks_jbuf_lit(&jb, s->sse ? "\n\n" : "\n");
    }
    s->out = ks_jbuf_take(&jb, &s->out_len);
    s->out_off = 0;
}

/* The closing error's text. */
static void encode_error(hstream_t *s)
{
    ks_jbuf_t b;
    ks_jbuf_init(&b, 128 + strlen(s->fin_msg));
    ks_jbuf_lit(&b, "{\"code\":\"");
    ks_jbuf_lit(&b, ks_status_name(s->fin_st));
    ks_jbuf_lit(&b, "\",\"message\":");
    if (!ks_jbuf_str(&b, s->fin_msg, strlen(s->fin_msg)))
        ks_jbuf_lit(&b, "\"\"");
    ks_jbuf_lit(&b, "}");
    s->out = news_text(s, "error", &b);
    s->out_len = strlen(s->out);
    s->out_off = 0;
}

/* Copies queued text into buf[0..max) while there is room; a batch whose text is all handed
 * is done (taken), its token noted in *tok. Returns the bytes written. Locked by caller. */
static size_t fill_locked(hstream_t *s, char *buf, size_t max, uint64_t *done_tok,
                          int64_t *done_bytes, size_t *done_n)
{
    size_t n = 0;
    while (n < max) {
        if (!s->out) {
            if (!s->qn)
                break;
            out_item_t it = s->q[s->qh++];
            if (--s->qn == 0)
                s->qh = 0;
            if (it.b) {
                encode_batch(s, it.b);
                s->out_b = it.b;
            } else {
                s->out = it.text;
                s->out_len = strlen(it.text);
                s->out_off = 0;
            }
        }
        size_t k = s->out_len - s->out_off;
        if (k > max - n)
            k = max - n;
        memcpy(buf + n, s->out + s->out_off, k);
        n += k;
        s->out_off += k;
        if (s->out_off == s->out_len) {
            free(s->out);
            s->out = NULL;
            if (s->out_b) {
                done_tok[*done_n] = s->out_b->deliver_token;
                done_bytes[*done_n] = s->out_b->bytes;
                (*done_n)++;
                ks_batch_free(s->out_b);
                s->out_b = NULL;
                if (*done_n == 8)
                    break; /* reported before more are handed */
            }
        }
    }
    return n;
}

static const char hb_ndjson[] = "\n";
static const char hb_sse[] = ": heartbeat\n\n";

/* The body's pull callback: what is queued, else a heartbeat when due, else the end (finish)
 * or nothing now (the response pauses until op_wake or the tick resumes it). */
static ssize_t body_cb(void *cls, uint64_t pos, char *buf, size_t max)
{
    hstream_t *s = cls;
again:
    pthread_mutex_lock(&s->lock);
    bool drain = s->drain_due && !s->cut && !s->peer_gone;
    s->drain_due = false;
    pthread_mutex_unlock(&s->lock);
    if (drain)
        ks_substream_drain(&s->ss); /* records and news into the queue */

    uint64_t tok[8];
    int64_t bytes[8];
    size_t done_n = 0;
    ssize_t ret;
    bool redo = false;
    int64_t now = ks_now_ms();
    out_item_t *dropq = NULL;
    size_t dropqh = 0, dropqn = 0;
    pthread_mutex_lock(&s->lock);
    if (s->cut || s->peer_gone) {
        ret = HTTP_PULL_ERROR;
        goto out;
    }
    /* A stream a tokens-file reload ended hands nothing more of its queue: the text being
     * handed ends (it is on its way), then the error. */
    if (s->qn && ks_substream_revoked(&s->ss))
        take_queue_locked(s, &dropq, &dropqh, &dropqn);
    size_t n = fill_locked(s, buf, max, tok, bytes, &done_n);
    if (!n && s->finishing && s->fin_st != KS_OK && s->fin_msg[0]) {
        encode_error(s);
        s->fin_msg[0] = '\0'; /* once */
        n = fill_locked(s, buf, max, tok, bytes, &done_n);
    }
    if (!n && s->finishing) {
        ret = HTTP_PULL_END;
        goto out;
    }
    if (!n && s->beat_due) {
        const char *hb = s->sse ? hb_sse : hb_ndjson;
        n = strlen(hb);
        if (n > max)
            n = max;
        memcpy(buf, hb, n);
    }
    s->beat_due = false;
    if (n) {
        /* The bytes handed before are out (the server calls again only then): the stall
         * clock restarts for these. */
        ks_substream_send_begin(&s->ss, now);
        s->sent = pos + n;
        ret = (ssize_t)n;
        goto out;
    }
    ks_substream_send_end(&s->ss);
    if (atomic_load(&s->h->streams_stopping)) {
        ret = HTTP_PULL_END;
        goto out;
    }
    s->idle_since = now;
    if (s->drain_due) {
        /* op_wake came after this call's drain, with nothing paused to resume: paused now, the
         * stream would wait for the heartbeat tick (5 s lost in 3 of 40 runs of
         * 2,000,000 records, the throughput bench's stream). Drain again instead. */
        redo = true;
        ret = 0;
        goto out;
    }
    s->suspended = true;
    http_pause(s->io);
    ret = 0;
out:
    pthread_mutex_unlock(&s->lock);
    drop_items(s, dropq, dropqh, dropqn);
    bool again = false;
    for (size_t i = 0; i < done_n; i++)
        again |= ks_substream_msg_done(&s->ss, tok[i], bytes[i], true);
    if (again)
        ks_substream_refill(&s->ss);
    if (redo)
        goto again;
    return ret;
}

/* The response is gone: its reference. */
static void body_free(void *cls)
{
    hs_unref(cls);
}

/* ---- the stream's life ---- */

static bool count_stream(ks_http_t *h, hstream_t *s)
{
    pthread_mutex_lock(&h->streams_lock);
    bool ok = h->stream_cnt < h->cfg->http_max_streams && !atomic_load(&h->streams_stopping);
    if (ok) {
        h->stream_cnt++;
        s->counted = true;
        s->prev = NULL;
        s->next = h->streams;
        if (h->streams)
            h->streams->prev = s;
        h->streams = s;
    }
    pthread_mutex_unlock(&h->streams_lock);
    return ok;
}

static void uncount_stream(ks_http_t *h, hstream_t *s)
{
    pthread_mutex_lock(&h->streams_lock);
    if (s->counted) {
        if (s->prev)
            s->prev->next = s->next;
        else
            h->streams = s->next;
        if (s->next)
            s->next->prev = s->prev;
        s->counted = false;
        h->stream_cnt--;
    }
    pthread_mutex_unlock(&h->streams_lock);
}

/* Whether the client asked for SSE (Accept: text/event-stream); else NDJSON. */
static bool wants_sse(req_t *r)
{
    const char *a = http_req_header(&r->io, "Accept");
    return a && strstr(a, "text/event-stream");
}

/* Reads a credit parameter (absent: 0, the server's default). Returns false after queueing
 * the error. Its range is the validator's. */
static bool credit_arg(req_t *r, const char *name, const char *v, int64_t *out, http_ret_t *ret)
{
    *out = 0;
    if (!v)
        return true;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < 0) {
        *ret = http_send_error(r, KS_E_INVALID, "%s must be a non-negative integer, got \"%s\"",
                               name, v);
        return false;
    }
    *out = n;
    return true;
}

http_ret_t http_stream_decode(ks_http_t *h, req_t *r)
{
    const char *group = r->param;
    http_query_t a = {.stream = true};
    http_ret_t ret = HTTP_RET_OK;
    char err[512];
    ks_status_t st;
    hstream_t *s = NULL;
    if (!h->hub) {
        ret = http_send_error(r, KS_E_UNAVAILABLE, "streams are not served here");
        goto out;
    }
    if (!http_query_read(h, r, &a, &ret))
        goto out;
    ks_substream_open_t so = {.group = group,
                              .topics = a.names,
                              .topic_cnt = a.name_cnt,
                              .subscriber = a.subscriber,
                              .unset = KS_FETCH_UNSET_MAX, /* a stream's batches are its own */
                              .max_batch = STREAM_BATCH_MAX,
                              .ordered_batches = a.ordered,
                              .key_format = r->fmt.key_schema,
                              .value_format = r->fmt.value_schema,
                              .who = r->who};
    if (!credit_arg(r, "max_in_flight", a.max_in_flight, &so.credit_records, &ret) ||
        !credit_arg(r, "max_in_flight_bytes", a.max_in_flight_bytes, &so.credit_bytes, &ret) ||
        !http_opt_int(r, "deadline_ms", a.deadline_ms, &so.deadline_ms, KS_FETCH_UNSET_DEADLINE,
                      &so.unset, &ret))
        goto out;
    s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    atomic_init(&s->refs, 1); /* the request's, dropped in http_stream_completed */
    pthread_mutex_init(&s->lock, NULL);
    s->h = h;
    s->io = &r->io;
    s->sse = wants_sse(r);
    s->fmt = r->fmt;
    s->hb_ms = h->cfg->http_stream_heartbeat_ms;
    ks_substream_limits_t lim = {.queue_messages = h->cfg->http_stream_queue_messages,
                                 .queue_bytes = h->cfg->http_stream_queue_bytes,
                                 .stall_ms = h->cfg->http_stream_stall_ms,
                                 .stall_key = "http.stream_stall_ms"};
    ks_substream_init(&s->ss, h->hub, &stream_ops, s, KS_CMD_FETCH, &lim);
    if ((st = ks_substream_check(&s->ss, &so, err, sizeof(err)))) {
        /* The validator speaks of credits: the stream's are these parameters. */
        ret =
            http_send_error(r, st, "%s%s", err,
                            strstr(err, "credits") ? " (max_in_flight, max_in_flight_bytes)" : "");
        goto out;
    }
    if (!strcmp(r->io.method, "HEAD")) {
        ret = http_send_json(r, 200, json_pack("{}"));
        goto out;
    }
    if (!count_stream(h, s)) {
        ret = http_send_error(r, KS_E_BUSY,
                              "%d streams are open already (http.max_streams); retry later",
                              h->cfg->http_max_streams);
        goto out;
    }
    const http_header_t hdr[] = {
        {"Content-Type", s->sse ? "text/event-stream" : "application/x-ndjson"},
        {"Cache-Control", "no-cache"},
        {"X-Accel-Buffering", "no"}};
    hs_ref(s); /* the response's, dropped by body_free */
    ret = http_respond_stream(&r->io, 200, hdr, sizeof(hdr) / sizeof(hdr[0]), STREAM_BLOCK, body_cb,
                              body_free, s);
    if (ret != HTTP_RET_OK) {
        uncount_stream(h, s);
        goto out;
    }
    r->u.stream = s;
    s = NULL;
    ks_substream_start(&r->u.stream->ss, &so, "http-stream");
    ks_dbg(LOGC, "stream %s of group %s: %s", ks_substream_sub(&r->u.stream->ss), group,
           r->u.stream->sse ? "SSE" : "NDJSON");
out:
    if (s)
        hs_unref(s);
    http_query_free(&a);
    return ret;
}

void http_stream_completed(req_t *r)
{
    hstream_t *s = r->u.stream;
    r->u.stream = NULL;
    /* Batches never handed to the server go back (no attempt); then every lease of the
     * subscriber, uncounted: the client went (or the stream was ended). */
    out_item_t *q;
    size_t qh, qn;
    pthread_mutex_lock(&s->lock);
    s->closed = true;
    s->suspended = false;
    r->io.resp_bytes = s->sent;
    take_queue_locked(s, &q, &qh, &qn);
    ks_batch_t *part = s->out_b;
    s->out_b = NULL;
    pthread_mutex_unlock(&s->lock);
    if (part) {
        ks_substream_msg_done(&s->ss, part->deliver_token, part->bytes, false);
        ks_batch_free(part);
    }
    drop_items(s, q, qh, qn);
    ks_substream_release_unread(&s->ss);
    ks_substream_close(&s->ss);
    ks_substream_drain(&s->ss); /* what arrived meanwhile goes back */
    uncount_stream(s->h, s);
    hs_unref(s);
}

void http_stream_tick(ks_http_t *h, int64_t now_ms)
{
    pthread_mutex_lock(&h->streams_lock);
    for (hstream_t *s = h->streams; s; s = s->next) {
        /* Under streams_lock: the stream is listed, so its request has not completed. */
        pthread_mutex_lock(&s->lock);
        if (s->suspended) {
            if (now_ms - s->idle_since >= s->hb_ms)
                s->beat_due = true;
            if (http_peer_closed(s->io))
                s->peer_gone = true;
            if (s->beat_due || s->peer_gone)
                resume_locked(s);
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&h->streams_lock);
}

void http_stream_stop_all(ks_http_t *h)
{
    pthread_mutex_lock(&h->streams_lock);
    atomic_store(&h->streams_stopping, true);
    for (hstream_t *s = h->streams; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        s->finishing = true;
        resume_locked(s);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&h->streams_lock);
}
