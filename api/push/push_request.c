/* push_request.c: push delivery's requests, on the push thread (push.c has the streams and the
 * thread's loop, which calls down here, never the other way): a
 * batch's records made into HTTP requests (body, headers, CloudEvents) that libcurl's multi
 * interface runs, and the app's answers read and settled. */
#include "push_int.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec.h"
#include "log.h"
#include "util.h"

#define PUSH_BODY_KEEP  (1 << 20) /* bytes of the app's answer kept, for its statuses */
#define PUSH_REASON_MAX 200       /* of a refusing answer's body, in the nack's reason */

/* ---- the app's answer ---- */

/* A verdict named in an answer's JSON ("SUCCESS", "RETRY", "DROP"); RETRY for anything else,
 * so a typo loses nothing. */
static ks_push_verdict_t verdict_named(json_t *v)
{
    const char *s = json_string_value(v);
    if (s && !strcmp(s, "SUCCESS"))
        return KS_PUSH_ACK;
    if (s && !strcmp(s, "DROP"))
        return KS_PUSH_TERMINAL;
    return KS_PUSH_RETRY;
}

/* The start of body as printable text (control bytes as '?'), for a reason. */
static void body_start(const char *body, size_t len, char *out, size_t size)
{
    size_t n = len < size - 1 ? len : size - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)body[i] < 0x20 || body[i] == 0x7f ? '?' : body[i];
    out[n] = '\0';
}

/* What the app's answer does to each of the n records of a request: code is its HTTP status
 * (0 when there was none: a timeout, a refused connection). 2xx acks; a 200 whose body is
 * {"status":...} or, for a batch, {"statuses":[...]} in the records' order overrides it
 * (records the list leaves out are retried); 429, 5xx and anything else retry; another 4xx is
 * terminal. reason gets what the nack carries. */
static void push_verdicts(long code, const char *body, size_t len, size_t n, ks_push_verdict_t *v,
                          char *reason, size_t rsize)
{
    ks_push_verdict_t all = KS_PUSH_RETRY;
    if (code >= 200 && code < 300)
        all = KS_PUSH_ACK;
    else if (code >= 400 && code < 500 && code != 429)
        all = KS_PUSH_TERMINAL;
    char start[PUSH_REASON_MAX + 1];
    body_start(body ? body : "", body ? len : 0, start, sizeof(start));
    if (code)
        snprintf(reason, rsize, "push: HTTP %ld%s%s", code, *start ? ": " : "", start);
    for (size_t i = 0; i < n; i++)
        v[i] = all;
    json_t *j = code == 200 && len && body[0] == '{' ? json_loadb(body, len, 0, NULL) : NULL;
    if (!j)
        return;
    json_t *one = json_object_get(j, "status"), *list = json_object_get(j, "statuses");
    if (json_is_array(list)) {
        for (size_t i = 0; i < n; i++)
            v[i] =
                i < json_array_size(list) ? verdict_named(json_array_get(list, i)) : KS_PUSH_RETRY;
    } else if (one) {
        for (size_t i = 0; i < n; i++)
            v[i] = verdict_named(one);
    }
    if (one || list)
        snprintf(reason, rsize, "push: the app answered %s", start);
    json_decref(j);
}

/* Retry-After in ms (delay-seconds only; an HTTP date is not honoured), or 0. */
static int64_t retry_after_ms(CURL *easy)
{
    struct curl_header *h = NULL;
    if (curl_easy_header(easy, "Retry-After", 0, CURLH_HEADER, -1, &h) != CURLHE_OK || !h)
        return 0;
    char *end;
    long long s = strtoll(h->value, &end, 10);
    if (end == h->value || s <= 0)
        return 0;
    return s > 86400 ? 86400000 : (int64_t)s * 1000;
}

/* ---- settling ---- */

/* The engine's answer to a settle: only stale leases (an expired one, redelivered) can be
 * refused, which at-least-once allows. @locality the group loop */
static void on_settled(ks_ack_result_t *res, size_t n, void *opaque)
{
    (void)opaque;
    for (size_t i = 0; i < n; i++)
        if (res[i].status && res[i].status != KS_E_STALE)
            ks_warn(PLOG, "a settle was refused: %s", res[i].reason);
    free(res);
}

/* Settles the ids of r whose verdict is want: acks them, or nacks them with delay ms and
 * reason, dead-lettering at once for KS_PUSH_TERMINAL (with no dead-letter topic the engine
 * retries them and logs them as poison). */
static void settle(pusher_t *p, const preq_t *r, const ks_push_verdict_t *v, ks_push_verdict_t want,
                   int64_t ms, const char *reason)
{
    const char **ids = calloc(r->n, sizeof(*ids));
    if (!ids)
        abort();
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++)
        if (v[i] == want)
            ids[k++] = r->ids[i];
    if (k) {
        char err[512];
        ks_cmd_req_t c = {.type = KS_CMD_SETTLE,
                          .group = ks_substream_group(&p->ss),
                          .u.settle = {.op = want == KS_PUSH_ACK ? KS_SETTLE_ACK : KS_SETTLE_NACK,
                                       .ms = ms,
                                       .reason = want == KS_PUSH_ACK ? NULL : reason,
                                       .dead_letter = want == KS_PUSH_TERMINAL,
                                       .ack_ids = ids,
                                       .n = k,
                                       .cb = on_settled}};
        if (ks_engine_submit(p->eng, &c, err, sizeof(err)))
            ks_warn(PLOG, "group %s: settle not taken: %s", ks_substream_group(&p->ss), err);
    }
    free(ids);
}

/* Settles r's records by the app's answer (code 0 and res: the request failed). */
static void answer(pusher_t *p, preq_t *r, CURLcode res, long code)
{
    ks_push_verdict_t *v = calloc(r->n, sizeof(*v));
    if (!v)
        abort();
    char reason[PUSH_REASON_MAX + 64];
    int64_t delay = 0;
    if (res != CURLE_OK) {
        snprintf(reason, sizeof(reason), "push: %s", *r->cerr ? r->cerr : curl_easy_strerror(res));
        for (size_t i = 0; i < r->n; i++)
            v[i] = KS_PUSH_RETRY;
    } else {
        push_verdicts(code, r->resp, r->resp_len, r->n, v, reason, sizeof(reason));
        if (code == 429 || code == 503)
            delay = retry_after_ms(r->easy);
    }
    push_stats_answered(p, r, res == CURLE_OK ? code : 0, v);
    if (delay > p->cfg->nack_max_delay_ms)
        delay = p->cfg->nack_max_delay_ms;
    settle(p, r, v, KS_PUSH_ACK, 0, reason);
    settle(p, r, v, KS_PUSH_RETRY, delay, reason);
    settle(p, r, v, KS_PUSH_TERMINAL, 0, reason);
    free(v);
}

/* ---- requests ---- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *opaque)
{
    preq_t *r = opaque;
    size_t n = size * nmemb, keep = n;
    if (r->resp_len + keep > PUSH_BODY_KEEP)
        keep = PUSH_BODY_KEEP - r->resp_len;
    if (keep) {
        char *nr = realloc(r->resp, r->resp_len + keep + 1);
        if (!nr)
            abort();
        r->resp = nr;
        memcpy(r->resp + r->resp_len, data, keep);
        r->resp_len += keep;
        r->resp[r->resp_len] = '\0';
    }
    return n; /* the rest is read and dropped */
}

/* The codec's line sink for a curl header list. */
static void append_line(void *ctx, const char *line, size_t len)
{
    (void)len;
    struct curl_slist **l = ctx, *nl = curl_slist_append(*l, line);
    if (!nl)
        abort();
    *l = nl;
}

/* Appends "name: value", value escaped by the codec (ks_codec_header). */
static void add_header(struct curl_slist **l, const char *name, const void *value, size_t n)
{
    ks_codec_header(append_line, l, name, value, n);
}

/* The header lines of a one-record request (ks_codec_push_headers). */
static void record_headers(struct curl_slist **l, const ks_record_t *rec, const char *id)
{
    ks_codec_push_headers(append_line, l, rec, id);
}

/* The easy handle of p's place slot: made once with what every request of p shares, then
 * reused (libcurl's own setup is a large part of a one-record request's cost). */
static CURL *slot_easy(pusher_t *p, size_t slot)
{
    if (p->easies[slot])
        return p->easies[slot];
    const ks_group_conf_t *gc = p->gc;
    CURL *e = p->easies[slot] = curl_easy_init();
    if (!e)
        abort();
    curl_easy_setopt(e, CURLOPT_URL, gc->push_url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)gc->push_timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ksidecar-push");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (*gc->push_ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, gc->push_ca_file);
    if (gc->push_insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    return e;
}

/* Frees p's easy handles (none is in the multi handle). @locality the push thread, or
 * ks_push_stop's once it ended */
void push_slot_easies_free(pusher_t *p)
{
    for (int k = 0; k < p->gc->push_concurrency; k++)
        if (p->easies[k]) {
            curl_easy_cleanup(p->easies[k]);
            p->easies[k] = NULL;
        }
}

/* A group's group.key_format or group.value_format (name; NULL: binary), as 1 +
 * ks_rec_format_t (ks_codec_opts_t's). */
static uint8_t schema_fmt(const char *name)
{
    int f = name ? ks_rec_format_from_str(name) : -1;
    return (uint8_t)(1 + (f < 0 ? KS_FMT_BINARY : f));
}

/* The body of a one-record push whose value is in a schema format: its JSON (application/json),
 * with the schema's id and, with CloudEvents, a dataschema naming it in the registry. False
 * when it cannot be decoded: the value's bytes go as they are, and a header says why. */
static bool schema_body(pusher_t *p, preq_t *r, const ks_record_t *rec, ks_rec_format_t f)
{
    ks_jbuf_t jb;
    ks_jbuf_init(&jb, 64 + rec->value_len * 2);
    char err[512];
    int32_t id;
    ks_schema_type_t type;
    if (ks_codec_schema_decode(&jb, rec->value, rec->value_len, f, &id, &type, err, sizeof(err))) {
        ks_jbuf_free(&jb);
        ks_codec_header(append_line, &r->hdrs, "ksidecar-value-decode-error", err, strlen(err));
        return false;
    }
    r->body = ks_jbuf_take(&jb, &r->body_len);
    add_header(&r->hdrs, "Content-Type", "application/json", 16);
    ks_codec_header_num(append_line, &r->hdrs, "ksidecar-value-schema-id", id);
    const char *fmt = ks_schema_format_str(type);
    ks_codec_header(append_line, &r->hdrs, "ksidecar-value-format", fmt, strlen(fmt));
    if (p->gc->push_cloudevents && p->cfg->schema_registry_url_cnt) {
        char ds[1024];
        int n =
            snprintf(ds, sizeof(ds), "%s/schemas/ids/%d", p->cfg->schema_registry_urls[0], (int)id);
        if (n > 0 && (size_t)n < sizeof(ds))
            ks_codec_header(append_line, &r->hdrs, "ce-dataschema", ds, (size_t)n);
    }
    return true;
}

/* A request for recs[0..n) (body and headers) in p's free place slot, ready to add to the
 * multi handle. */
static preq_t *req_new(pusher_t *p, size_t slot, const ks_record_t *recs, size_t n)
{
    preq_t *r = calloc(1, sizeof(*r));
    if (!r || !(r->ids = calloc(n, sizeof(char *))))
        abort();
    r->p = p;
    r->n = n;
    r->slot = slot;
    r->t0_ms = ks_now_ms();
    ks_ack_id_writer_t w;
    ks_ack_id_writer_init(&w);
    for (size_t i = 0; i < n; i++) {
        char id[KS_ACK_ID_MAX];
        size_t il = ks_record_ack_id_put(&w, &recs[i], id, sizeof(id));
        id[il] = '\0';
        r->ids[i] = ks_xstrdup(id);
    }
    const ks_group_conf_t *gc = p->gc;
    ks_codec_opts_t o = {.key_schema = schema_fmt(gc->key_format),
                         .value_schema = schema_fmt(gc->value_format)};
    if (gc->push_batch == 1) {
        ks_rec_format_t vf = (ks_rec_format_t)(o.value_schema - 1);
        if (vf == KS_FMT_BINARY || !recs[0].value || !schema_body(p, r, &recs[0], vf)) {
            ks_codec_view_t v; /* the body: the value as a binary transport shows it */
            ks_codec_view(&recs[0], NULL, &v);
            r->body = malloc(v.value_len + 1);
            if (!r->body)
                abort();
            if (v.value_len)
                memcpy(r->body, v.value, v.value_len);
            r->body_len = v.value_len;
            add_header(&r->hdrs, "Content-Type", "application/octet-stream", 24);
        }
        record_headers(&r->hdrs, &recs[0], r->ids[0]);
        if (gc->push_cloudevents)
            ks_codec_cloudevent_headers(append_line, &r->hdrs, &recs[0], gc->name);
    } else {
        ks_jbuf_t jb;
        ks_jbuf_init(&jb, 64 + n * 256);
        ks_jbuf_lit(&jb, "[");
        ks_ack_id_writer_t w2;
        ks_ack_id_writer_init(&w2);
        for (size_t i = 0; i < n; i++) {
            if (i)
                ks_jbuf_lit(&jb, ",");
            ks_codec_json_record(&jb, &recs[i], &o, &w2);
        }
        ks_jbuf_lit(&jb, "]");
        r->body = ks_jbuf_take(&jb, &r->body_len);
        add_header(&r->hdrs, "Content-Type", "application/json", 16);
        ks_codec_header_num(append_line, &r->hdrs, "ksidecar-batch", (int64_t)n);
    }
    if (*gc->push_bearer_token) {
        /* As it is: the config allows only a token's visible ASCII (no escaping to undo). */
        char *auth = malloc(sizeof("Authorization: Bearer ") + strlen(gc->push_bearer_token));
        if (!auth)
            abort();
        sprintf(auth, "Authorization: Bearer %s", gc->push_bearer_token);
        struct curl_slist *al = curl_slist_append(r->hdrs, auth);
        free(auth);
        if (!al)
            abort();
        r->hdrs = al;
    }
    struct curl_slist *nl = curl_slist_append(r->hdrs, "Expect:"); /* no 100-continue wait */
    if (!nl)
        abort();
    r->hdrs = nl;

    CURL *e = r->easy = slot_easy(p, slot);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->cerr);
    return r;
}

/* Frees r; its easy handle stays its place's. */
void push_req_free(preq_t *r)
{
    curl_easy_setopt(r->easy, CURLOPT_ERRORBUFFER, NULL); /* r->cerr goes with r */
    curl_slist_free_all(r->hdrs);
    for (size_t i = 0; i < r->n; i++)
        free(r->ids[i]);
    free(r->ids);
    free(r->body);
    free(r->resp);
    free(r);
}

/* ---- starting and reaping, for the push thread's loop (push.c) ---- */

/* Starts requests from the queued batches until concurrency are in flight. */
void push_start_requests(ks_push_t *e, pusher_t *p)
{
    /* A stream a tokens reload ended (its caller lost the group or a topic) sends nothing
     * more, even before op_finish marks it removing: its leases went back already. */
    while (p->q && p->inflight < p->gc->push_concurrency && !atomic_load(&e->quiescing) &&
           !atomic_load(&p->removing) && !ks_substream_revoked(&p->ss)) {
        qbatch_t *qb = p->q;
        ks_batch_t *b = qb->b;
        size_t k = b->cnt - p->q_next;
        if (k > (size_t)p->gc->push_batch)
            k = (size_t)p->gc->push_batch;
        size_t slot = 0; /* inflight < concurrency: a free place exists */
        while (p->slots[slot])
            slot++;
        preq_t *r = req_new(p, slot, &b->recs[p->q_next], k);
        p->q_next += k;
        if (curl_multi_add_handle(e->multi, r->easy) != CURLM_OK) {
            snprintf(r->cerr, sizeof(r->cerr), "the request could not start");
            answer(p, r, CURLE_FAILED_INIT, 0);
            push_req_free(r);
        } else {
            p->slots[slot] = r;
            p->inflight++;
            push_stats_started(p);
        }
        if (p->q_next == b->cnt) {
            p->q = qb->next;
            p->q_next = 0;
            ks_batch_free(b);
            free(qb);
        }
    }
}

/* r's request ended: it leaves the multi handle and its pusher's list. */
void push_req_end(ks_push_t *e, preq_t *r)
{
    curl_multi_remove_handle(e->multi, r->easy);
    r->p->slots[r->slot] = NULL;
    r->p->inflight--;
    push_stats_ended(r->p);
}

/* Settles every request that ended. */
void push_reap(ks_push_t *e)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(e->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        preq_t *r = NULL;
        long code = 0;
        CURLcode res = m->data.result;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (res == CURLE_OK)
            curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
        push_req_end(e, r);
        answer(r->p, r, res, code);
        push_req_free(r);
    }
}
