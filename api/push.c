/* push.c: push delivery as a transport of the subscriber-stream core (substream.c): each static
 * group with a push url, and each group given one by an API call (PUT /v1/groups/{g}/push), is
 * one stream whose records are POSTed to the app by libcurl's multi interface on one thread,
 * and the app's answer acks, nacks or dead-letters them. Fetches,
 * credits, refill and release are the core's. Key order is the engine's: a key's next record is
 * not leased while one is out, so the requests in flight never hold two records of one key.
 * What is held here is bounded by the stream's credits (concurrency x batch records). */
#include "push.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_int.h"
#include "log.h"
#include "util.h"

#define PLOG "push"

#define PUSH_BODY_KEEP  (1 << 20) /* bytes of the app's answer kept, for its statuses */
#define PUSH_REASON_MAX 200       /* of a refusing answer's body, in the nack's reason */

typedef struct pusher pusher_t;

/* A batch from the core, waiting for requests (a few at a time: the credits bound them). */
typedef struct qbatch {
    ks_batch_t *b;
    struct qbatch *next;
} qbatch_t;

/* One request in flight: its records' ack ids, its body and the app's answer. */
typedef struct preq {
    pusher_t *p;
    CURL *easy;
    struct curl_slist *hdrs;
    char *body;
    size_t body_len;
    char **ids;
    size_t n;
    char *resp;
    size_t resp_len;
    char cerr[CURL_ERROR_SIZE];
    size_t slot; /* its place in its pusher's slots */
} preq_t;

/* One push group's stream. */
struct pusher {
    ks_substream_t ss; /* the core; its fields are its own */
    atomic_int refs;   /* the edge's, the core's (ops->ref) */
    const ks_group_conf_t *gc;
    ks_engine_t *eng;
    const ks_config_t *cfg;
    pthread_mutex_t lock; /* guards edge, wake_due */
    ks_push_t *edge;      /* NULL once the push thread ended: wakes are declined */
    bool wake_due;        /* the core asked for a drain */
    /* @locality the push thread (ks_push_stop's, once it ended) */
    qbatch_t *q, *q_tail; /* batches from the core, oldest first; their leases run */
    size_t q_next;        /* records of the head batch already in requests */
    int inflight;
    preq_t **slots;          /* the requests in flight, push_concurrency places */
    CURL **easies;           /* each place's easy handle, reused by its requests */
    ks_group_conf_t *own_gc; /* a push set by API call: its settings (gc), freed with it */
    atomic_bool removing;    /* no new request starts; once none is in flight, it goes */
};

struct ks_push {
    ks_engine_t *eng;
    const ks_config_t *cfg;
    ks_subhub_t *hub;
    CURLM *multi;
    pthread_t th;
    bool th_started;
    atomic_bool stopping;  /* the thread ends */
    atomic_bool quiescing; /* no new request starts */
    atomic_bool closing;   /* shutdown began: an API call starts no push */
    /* Guards ps and n: an API call adds a stream and marks one removing; the push thread
     * reads them, and takes out the removed ones. */
    pthread_mutex_t ps_lock;
    pusher_t **ps;
    size_t n, cap;
    long conns; /* the connections the multi handle keeps now (the push thread's) */
};

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

/* Writes s[0..n) to o with each byte outside printable ASCII, and '%', as %XX; keep(c) may
 * keep fewer bytes as they are. Returns the end. */
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

static bool value_byte(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '%';
}

/* Appends "name: value" with value's bytes outside printable ASCII, and '%', as %XX, so any
 * key or header value travels in an HTTP header. */
static void add_header(struct curl_slist **l, const char *name, const void *value, size_t n)
{
    size_t nl = strlen(name);
    char stack[512], *line = nl + 3 + 3 * n <= sizeof(stack) ? stack : malloc(nl + 3 + 3 * n);
    if (!line)
        abort();
    memcpy(line, name, nl);
    line[nl] = ':';
    line[nl + 1] = ' ';
    *escape_to(line + nl + 2, value, n, value_byte) = '\0';
    struct curl_slist *nl2 = curl_slist_append(*l, line);
    if (!nl2)
        abort();
    *l = nl2;
    if (line != stack)
        free(line);
}

static void add_num(struct curl_slist **l, const char *name, int64_t v)
{
    char num[24], *o = num + sizeof(num);
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--o = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--o = '-';
    add_header(l, name, o, (size_t)(num + sizeof(num) - o));
}

/* A header name's byte kept as it is in ksidecar-header-NAME. */
static bool name_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

/* The headers of a one-record request: where it came from, its attempt and ack id, its key
 * and its own headers (ksidecar-header-NAME, the name escaped as the values are). */
static void record_headers(struct curl_slist **l, const ks_record_t *rec, const char *id)
{
    add_header(l, "ksidecar-topic", rec->topic, strlen(rec->topic));
    add_num(l, "ksidecar-partition", rec->partition);
    add_num(l, "ksidecar-offset", rec->offset);
    if (rec->timestamp >= 0)
        add_num(l, "ksidecar-timestamp", rec->timestamp);
    add_num(l, "ksidecar-attempt", rec->attempt);
    add_header(l, "ksidecar-ack-id", id, strlen(id));
    if (rec->key)
        add_header(l, "ksidecar-key", rec->key, rec->key_len);
    if (!rec->value)
        add_header(l, "ksidecar-value-null", "true", 4);
    for (size_t i = 0; i < rec->header_cnt; i++) {
        const ks_header_t *h = &rec->headers[i];
        static const char pre[] = "ksidecar-header-";
        char name[300], *o = name + sizeof(pre) - 1;
        memcpy(name, pre, sizeof(pre) - 1);
        for (const unsigned char *c = (const unsigned char *)h->name;
             *c && o + 4 < name + sizeof(name); c++)
            o = escape_to(o, c, 1, name_byte); /* a long name is cut, never the line */
        *o = '\0';
        add_header(l, name, h->value ? h->value : "", h->value ? h->value_len : 0);
    }
}

/* CloudEvents binary mode (its HTTP binding): a record that is a binary-mode CloudEvent in
 * Kafka (ce_* headers, by the Kafka binding) carries its own attributes, which become ce-*
 * headers; any other record gets ce-specversion 1.0, an id from where it is, a source of its
 * group and topic, a type, and its time. */
static void cloudevent_headers(struct curl_slist **l, const ks_record_t *rec, const char *group)
{
    bool own = false;
    for (size_t i = 0; i < rec->header_cnt; i++) {
        const ks_header_t *h = &rec->headers[i];
        if (strncmp(h->name, "ce_", 3) || !h->name[3] || !h->value)
            continue;
        char name[KS_NAME_MAX + 8];
        snprintf(name, sizeof(name), "ce-%s", h->name + 3);
        if (strspn(name + 3, "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(name + 3))
            continue; /* attribute names are lower-case letters and digits */
        add_header(l, name, h->value, h->value_len);
        own |= !strcmp(name, "ce-specversion");
    }
    if (own)
        return;
    char v[KS_NAME_MAX * 2 + 64];
    add_header(l, "ce-specversion", "1.0", 3);
    int n =
        snprintf(v, sizeof(v), "%s-%" PRId32 "-%" PRId64, rec->topic, rec->partition, rec->offset);
    add_header(l, "ce-id", v, (size_t)n);
    n = snprintf(v, sizeof(v), "/ksidecar/%s/%s", group, rec->topic);
    add_header(l, "ce-source", v, (size_t)n);
    add_header(l, "ce-type", "ksidecar.kafka.record", 21);
    if (rec->timestamp >= 0) {
        time_t secs = (time_t)(rec->timestamp / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        n = (int)strftime(v, sizeof(v), "%Y-%m-%dT%H:%M:%S", &tm);
        n += snprintf(v + n, sizeof(v) - (size_t)n, ".%03dZ", (int)(rec->timestamp % 1000));
        add_header(l, "ce-time", v, (size_t)n);
    }
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
static void slot_easies_free(pusher_t *p)
{
    for (int k = 0; k < p->gc->push_concurrency; k++)
        if (p->easies[k]) {
            curl_easy_cleanup(p->easies[k]);
            p->easies[k] = NULL;
        }
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
    ks_ack_id_writer_t w;
    ks_ack_id_writer_init(&w);
    for (size_t i = 0; i < n; i++) {
        char id[KS_ACK_ID_MAX];
        size_t il = ks_record_ack_id_put(&w, &recs[i], id, sizeof(id));
        id[il] = '\0';
        r->ids[i] = ks_xstrdup(id);
    }
    const ks_group_conf_t *gc = p->gc;
    if (gc->push_batch == 1) {
        r->body = malloc(recs[0].value_len + 1);
        if (!r->body)
            abort();
        if (recs[0].value_len)
            memcpy(r->body, recs[0].value, recs[0].value_len);
        r->body_len = recs[0].value_len;
        add_header(&r->hdrs, "Content-Type", "application/octet-stream", 24);
        record_headers(&r->hdrs, &recs[0], r->ids[0]);
        if (gc->push_cloudevents)
            cloudevent_headers(&r->hdrs, &recs[0], gc->name);
    } else {
        ks_jbuf_t jb;
        ks_jbuf_init(&jb, 64 + n * 256);
        ks_jbuf_lit(&jb, "[");
        ks_ack_id_writer_t w2;
        ks_ack_id_writer_init(&w2);
        for (size_t i = 0; i < n; i++) {
            if (i)
                ks_jbuf_lit(&jb, ",");
            http_put_record(&jb, &recs[i], FMT_AUTO, &w2);
        }
        ks_jbuf_lit(&jb, "]");
        r->body = ks_jbuf_take(&jb, &r->body_len);
        add_header(&r->hdrs, "Content-Type", "application/json", 16);
        add_num(&r->hdrs, "ksidecar-batch", (int64_t)n);
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
static void req_free(preq_t *r)
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

/* ---- the push thread ---- */

/* Starts requests from the queued batches until concurrency are in flight. */
static void start_requests(ks_push_t *e, pusher_t *p)
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
            req_free(r);
        } else {
            p->slots[slot] = r;
            p->inflight++;
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
static void req_end(ks_push_t *e, preq_t *r)
{
    curl_multi_remove_handle(e->multi, r->easy);
    r->p->slots[r->slot] = NULL;
    r->p->inflight--;
}

/* Settles every request that ended. */
static void reap(ks_push_t *e)
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
        req_end(e, r);
        answer(r->p, r, res, code);
        req_free(r);
    }
}

static void pusher_close(ks_push_t *e, pusher_t *p);

static void *push_main(void *arg)
{
    ks_push_t *e = arg;
    while (!atomic_load(&e->stopping)) {
        pusher_t *gone[16];
        size_t ngone = 0;
        long conns = 0;
        pthread_mutex_lock(&e->ps_lock);
        for (size_t i = 0; i < e->n;) {
            pusher_t *p = e->ps[i];
            pthread_mutex_lock(&p->lock);
            bool due = p->wake_due;
            p->wake_due = false;
            pthread_mutex_unlock(&p->lock);
            if (due)
                ks_substream_drain(&p->ss);
            start_requests(e, p);
            if (atomic_load(&p->removing) && p->inflight == 0 && ngone < 16) {
                gone[ngone++] = p; /* every request it made was answered */
                e->ps[i] = e->ps[--e->n];
                continue;
            }
            conns += p->gc->push_concurrency;
            i++;
        }
        pthread_mutex_unlock(&e->ps_lock);
        for (size_t i = 0; i < ngone; i++)
            pusher_close(e, gone[i]);
        if (conns != e->conns) {
            /* Every request's connection is kept for the next one (keep-alive). */
            curl_multi_setopt(e->multi, CURLMOPT_MAXCONNECTS, conns);
            curl_multi_setopt(e->multi, CURLMOPT_MAX_HOST_CONNECTIONS, conns);
            e->conns = conns;
        }
        int running;
        curl_multi_perform(e->multi, &running);
        reap(e);
        /* Woken by curl_multi_wakeup (records arrived, or stop); its own timers shorten it. */
        curl_multi_poll(e->multi, NULL, 0, 1000, NULL);
    }
    return NULL;
}

/* ---- the transport of the subscriber-stream core (substream.h) ---- */

/* Each stream's refs: the edge's, and one per fetch out or op running (the core's). */
static void op_ref(void *t)
{
    atomic_fetch_add(&((pusher_t *)t)->refs, 1);
}

static void op_unref(void *t)
{
    pusher_t *p = t;
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    ks_substream_destroy(&p->ss);
    while (p->q) {
        qbatch_t *qb = p->q;
        p->q = qb->next;
        ks_batch_free(qb->b);
        free(qb);
    }
    free(p->slots);
    free(p->easies);
    pthread_mutex_destroy(&p->lock);
    ks_config_push_group_free(p->own_gc);
    free(p);
}

/* The push thread drains; once it ended, the core drains on the caller's thread. */
static bool op_wake(void *t)
{
    pusher_t *p = t;
    pthread_mutex_lock(&p->lock);
    bool ok = p->edge != NULL;
    if (ok) {
        p->wake_due = true;
        curl_multi_wakeup(p->edge->multi);
    }
    pthread_mutex_unlock(&p->lock);
    return ok;
}

/* The batch is queued for requests; its records count as taken now, so their leases run
 * while they wait for a request (the credits bound how many wait). */
static void op_send_records(void *t, ks_batch_t *b)
{
    pusher_t *p = t;
    qbatch_t *qb = malloc(sizeof(*qb));
    if (!qb)
        abort();
    *qb = (qbatch_t){.b = b};
    *(p->q ? &p->q_tail->next : &p->q) = qb;
    p->q_tail = qb;
    if (ks_substream_msg_done(&p->ss, b->deliver_token, b->bytes, true))
        ks_substream_refill(&p->ss);
}

static void op_send_assignment(void *t, const ks_tp_t *rev, size_t nrev, const ks_tp_t *as,
                               size_t nas)
{
    pusher_t *p = t;
    (void)rev;
    (void)as;
    ks_info(PLOG, "group %s: %zu partitions revoked, %zu assigned", ks_substream_group(&p->ss),
            nrev, nas);
}

/* A fetch was refused (the group stops, or shutdown), or the tokens file no longer allows
 * the caller that set this push: this group's push ends; one set by API call then goes once
 * its requests are answered. */
static void op_finish(void *t, ks_status_t st, const char *msg)
{
    pusher_t *p = t;
    ks_info(PLOG, "group %s: push ends: %s (%s)", ks_substream_group(&p->ss), msg,
            ks_status_name(st));
    ks_substream_stop(&p->ss);
    if (p->own_gc) {
        atomic_store(&p->removing, true);
        pthread_mutex_lock(&p->lock);
        if (p->edge)
            curl_multi_wakeup(p->edge->multi);
        pthread_mutex_unlock(&p->lock);
    }
}

/* Never called: push reports no send to the stall clock (the app's time is push.timeout_ms). */
static void op_cut(void *t, const char *msg)
{
    pusher_t *p = t;
    ks_warn(PLOG, "group %s: %s", ks_substream_group(&p->ss), msg);
}

static const ks_substream_ops_t push_ops = {
    .ref = op_ref,
    .unref = op_unref,
    .wake = op_wake,
    .send_records = op_send_records,
    .send_assignment = op_send_assignment,
    .finish = op_finish,
    .cut = op_cut,
};

/* ---- the edge ---- */

bool ks_push_wanted(const ks_config_t *cfg)
{
    if (*cfg->push_allowed_urls)
        return true; /* an API call may set one */
    for (size_t i = 0; i < cfg->static_group_cnt; i++)
        if (*cfg->static_groups[i].push_url)
            return true;
    return false;
}

/* Opens group gc's stream: its topics, credits of concurrency x batch records (the most its
 * requests hold at once), and a lease that outlasts a wait for a request and the request. */
static pusher_t *pusher_open(ks_push_t *e, const ks_group_conf_t *gc, const ks_principal_t *who,
                             char *err, size_t errsize)
{
    pusher_t *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    atomic_init(&p->refs, 1);
    atomic_init(&p->removing, false);
    p->gc = gc;
    p->eng = e->eng;
    p->cfg = e->cfg;
    p->edge = e;
    if (!(p->slots = calloc((size_t)gc->push_concurrency, sizeof(*p->slots))) ||
        !(p->easies = calloc((size_t)gc->push_concurrency, sizeof(*p->easies))))
        abort();
    pthread_mutex_init(&p->lock, NULL);
    ks_substream_limits_t lim = {.queue_messages = KS_SUBSTREAM_PIPELINE,
                                 .queue_bytes = e->cfg->sub_max_credit_bytes,
                                 .stall_ms = gc->push_timeout_ms,
                                 .stall_key = "group.push.timeout_ms"};
    ks_substream_init(&p->ss, e->hub, &push_ops, p, KS_CMD_FETCH, &lim);
    int64_t credits = (int64_t)gc->push_concurrency * gc->push_batch;
    if (credits > e->cfg->sub_max_credit_records)
        credits = e->cfg->sub_max_credit_records;
    int64_t lease = 2 * (int64_t)gc->push_timeout_ms + 5000;
    if (lease > e->cfg->lease_max_deadline_ms)
        lease = e->cfg->lease_max_deadline_ms;
    ks_substream_open_t so = {.group = gc->name,
                              .topics = (const char *const *)gc->topics,
                              .topic_cnt = gc->topic_cnt,
                              .subscriber = "push",
                              .credit_records = credits,
                              .deadline_ms = (int)lease,
                              .unset = KS_FETCH_UNSET_MAX | KS_FETCH_UNSET_WAIT, /* the core's */
                              .max_batch = (int)credits,
                              .who = who};
    ks_status_t st = ks_substream_check(&p->ss, &so, err, errsize);
    if (st) {
        p->edge = NULL;
        op_unref(p);
        return NULL;
    }
    ks_substream_start(&p->ss, &so, "push");
    ks_info(PLOG, "group %s: pushing to %s (concurrency %d, batch %d, timeout %d ms)", gc->name,
            gc->push_url, gc->push_concurrency, gc->push_batch, gc->push_timeout_ms);
    return p;
}

ks_push_t *ks_push_start(ks_engine_t *eng, const ks_config_t *cfg, ks_subhub_t *hub, char *err,
                         size_t errsize)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        snprintf(err, errsize, "push: libcurl could not start");
        return NULL;
    }
    ks_push_t *e = calloc(1, sizeof(*e));
    if (!e || !(e->ps = calloc(cfg->static_group_cnt + 4, sizeof(*e->ps))))
        abort();
    e->cap = cfg->static_group_cnt + 4;
    pthread_mutex_init(&e->ps_lock, NULL);
    e->eng = eng;
    e->cfg = cfg;
    e->hub = hub;
    atomic_init(&e->stopping, false);
    atomic_init(&e->quiescing, false);
    atomic_init(&e->closing, false);
    e->multi = curl_multi_init();
    e->conns = -1; /* the push thread sets the bounds from its streams */
    for (size_t i = 0; i < cfg->static_group_cnt; i++) {
        const ks_group_conf_t *gc = &cfg->static_groups[i];
        if (!*gc->push_url)
            continue;
        char why[512];
        pusher_t *p = pusher_open(e, gc, NULL, why, sizeof(why));
        if (!p) {
            snprintf(err, errsize, "push for group %s: %s", gc->name, why);
            ks_push_stop(e);
            return NULL;
        }
        e->ps[e->n++] = p;
    }
    if (pthread_create(&e->th, NULL, push_main, e)) {
        snprintf(err, errsize, "push: cannot start its thread");
        ks_push_stop(e);
        return NULL;
    }
    pthread_setname_np(e->th, "ks:push");
    e->th_started = true;
    return e;
}

void ks_push_quiesce(ks_push_t *e)
{
    pthread_mutex_lock(&e->ps_lock);
    atomic_store(&e->closing, true); /* under the lock: no add is half done */
    for (size_t i = 0; i < e->n; i++)
        ks_substream_stop(&e->ps[i]->ss);
    pthread_mutex_unlock(&e->ps_lock);
}

void ks_push_stop(ks_push_t *e)
{
    atomic_store(&e->stopping, true);
    atomic_store(&e->quiescing, true);
    if (e->th_started) {
        curl_multi_wakeup(e->multi);
        pthread_join(e->th, NULL);
    }
    /* Requests still in flight are dropped: the app may have their records, which go back
     * (at least once). */
    for (size_t i = 0; i < e->n; i++) {
        pusher_t *p = e->ps[i];
        for (int k = 0; k < p->gc->push_concurrency; k++)
            if (p->slots[k]) {
                preq_t *r = p->slots[k];
                req_end(e, r);
                req_free(r);
            }
        slot_easies_free(p);
        pthread_mutex_lock(&p->lock);
        p->edge = NULL;
        bool due = p->wake_due;
        pthread_mutex_unlock(&p->lock);
        if (due) /* a wake the thread never served: this thread drains now */
            ks_substream_drain(&p->ss);
        ks_substream_close(&p->ss);
        op_unref(p);
    }
    curl_multi_cleanup(e->multi);
    pthread_mutex_destroy(&e->ps_lock);
    free(e->ps);
    free(e);
    curl_global_cleanup();
}

/* ---- push set by API call ---- */

/* A stream set by API call that left: the records it held but never sent go back counting
 * no attempt (those in requests were answered: every one is settled). @locality the push
 * thread */
static void pusher_close(ks_push_t *e, pusher_t *p)
{
    (void)e;
    ks_info(PLOG, "group %s: push to %s removed", ks_substream_group(&p->ss), p->gc->push_url);
    slot_easies_free(p); /* every request was answered: none is in the multi handle */
    pthread_mutex_lock(&p->lock);
    p->edge = NULL;
    bool due = p->wake_due;
    pthread_mutex_unlock(&p->lock);
    if (due)
        ks_substream_drain(&p->ss);
    ks_substream_release_unread(&p->ss);
    ks_substream_close(&p->ss);
    op_unref(p);
}

/* The stream of group, or NULL. Call with ps_lock held. */
static pusher_t *find_locked(ks_push_t *e, const char *group)
{
    for (size_t i = 0; i < e->n; i++)
        if (!strcmp(e->ps[i]->gc->name, group))
            return e->ps[i];
    return NULL;
}

/* url starts with one of the comma-separated prefixes of allowed. */
static bool url_allowed(const char *allowed, const char *url)
{
    for (const char *a = allowed; *a;) {
        a += strspn(a, " ,");
        size_t n = strcspn(a, ",");
        while (n && a[n - 1] == ' ')
            n--;
        if (n && !strncmp(url, a, n))
            return true;
        a += strcspn(a, ",");
    }
    return false;
}

ks_status_t ks_push_add(ks_push_t *e, const char *group, const char *const *topics,
                        size_t topic_cnt, struct json_t *push, const ks_principal_t *who, char *err,
                        size_t errsize)
{
    if (!e || !*e->cfg->push_allowed_urls) {
        snprintf(err, errsize,
                 "push cannot be set by API call here: push.allowed_urls is empty (it lists the "
                 "url prefixes such a push may use)");
        return KS_E_PERMISSION;
    }
    if (ks_config_group(e->cfg, group) != &e->cfg->group_defaults) {
        snprintf(err, errsize,
                 "group %s is a static group: its push is set in its groups.static entry", group);
        return KS_E_STALE;
    }
    if (topic_cnt == 0) {
        snprintf(err, errsize, "topics: give the topics to push, a non-empty array of names");
        return KS_E_INVALID;
    }
    char why[512];
    ks_group_conf_t *gc =
        ks_config_push_group(e->cfg, group, topics, topic_cnt, push, why, sizeof(why));
    if (!gc) {
        snprintf(err, errsize, "%s", why);
        return KS_E_INVALID;
    }
    if (!url_allowed(e->cfg->push_allowed_urls, gc->push_url)) {
        snprintf(err, errsize, "url %.300s does not start with any prefix in push.allowed_urls",
                 gc->push_url);
        ks_config_push_group_free(gc);
        return KS_E_PERMISSION;
    }
    pthread_mutex_lock(&e->ps_lock);
    pusher_t *old = find_locked(e, group);
    if (old || atomic_load(&e->closing)) {
        pthread_mutex_unlock(&e->ps_lock);
        ks_config_push_group_free(gc);
        snprintf(err, errsize, "%s",
                 old ? "this group pushes already (DELETE its push first, and wait until GET "
                       "answers 404)"
                     : "shutting down");
        return old ? KS_E_STALE : KS_E_UNAVAILABLE;
    }
    if (e->n == e->cap) {
        pusher_t **ps = realloc(e->ps, 2 * e->cap * sizeof(*ps));
        if (!ps)
            abort();
        e->ps = ps;
        e->cap *= 2;
    }
    /* Opened under the lock, so a second call for the group cannot open one too. It parks
     * fetches (posts to the engine) and takes no lock of this edge's. */
    pusher_t *p = pusher_open(e, gc, who, why, sizeof(why));
    if (!p) {
        pthread_mutex_unlock(&e->ps_lock);
        ks_config_push_group_free(gc);
        snprintf(err, errsize, "%s", why);
        return KS_E_INVALID;
    }
    p->own_gc = gc;
    e->ps[e->n++] = p;
    pthread_mutex_unlock(&e->ps_lock);
    curl_multi_wakeup(e->multi);
    return KS_OK;
}

/* What GET answers of p. Call with ps_lock held. */
static json_t *describe(pusher_t *p)
{
    const ks_group_conf_t *gc = p->gc;
    json_t *topics = json_array();
    for (size_t i = 0; i < gc->topic_cnt; i++)
        json_array_append_new(topics, json_string(gc->topics[i]));
    return json_pack("{s:s,s:o,s:s,s:i,s:i,s:i,s:b,s:b,s:b,s:s,s:s}", "group", gc->name, "topics",
                     topics, "url", gc->push_url, "concurrency", gc->push_concurrency, "timeout_ms",
                     gc->push_timeout_ms, "batch", gc->push_batch, "bearer_token",
                     *gc->push_bearer_token != '\0', "insecure", gc->push_insecure, "cloudevents",
                     gc->push_cloudevents, "source", p->own_gc ? "api" : "config", "state",
                     atomic_load(&p->removing) ? "stopping" : "pushing");
}

struct json_t *ks_push_describe(ks_push_t *e, const char *group)
{
    if (!e)
        return NULL;
    pthread_mutex_lock(&e->ps_lock);
    pusher_t *p = find_locked(e, group);
    json_t *o = p ? describe(p) : NULL;
    pthread_mutex_unlock(&e->ps_lock);
    return o;
}

ks_status_t ks_push_remove(ks_push_t *e, const char *group, struct json_t **out, char *err,
                           size_t errsize)
{
    if (!e) {
        snprintf(err, errsize, "group %s has no push", group);
        return KS_E_NOT_FOUND;
    }
    pthread_mutex_lock(&e->ps_lock);
    pusher_t *p = find_locked(e, group);
    ks_status_t st = KS_OK;
    if (!p) {
        snprintf(err, errsize, "group %s has no push", group);
        st = KS_E_NOT_FOUND;
    } else if (!p->own_gc) {
        snprintf(err, errsize,
                 "group %s's push is set in its groups.static entry; it cannot be removed by API "
                 "call",
                 group);
        st = KS_E_STALE;
    } else {
        /* No new fetch and no new request; the requests in flight are answered and settle,
         * then the push thread closes it (pusher_close). */
        ks_substream_stop(&p->ss);
        atomic_store(&p->removing, true);
        *out = describe(p);
    }
    pthread_mutex_unlock(&e->ps_lock);
    if (st == KS_OK)
        curl_multi_wakeup(e->multi);
    return st;
}
