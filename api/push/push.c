/* push.c: push delivery as a transport of the subscriber-stream core (substream.c): each static
 * group with a push url, and each group given one by an API call (PUT /v1/groups/{g}/push), is
 * one stream whose records are POSTed to the app by libcurl's multi interface on one thread
 * (its loop here, the requests in push_request.c), and the app's answer acks, nacks or dead-letters
 * them. Fetches, credits, refill and release are the core's. Key order is the engine's: a key's
 * next record is not leased while one is out, so the requests in flight never hold two records of
 * one key. What is held here is bounded by the stream's credits (concurrency x batch records). */
#include "push_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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
    .name = "push",
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

/* ---- the push thread ---- */

/* A stream set by API call that left: the records it held but never sent go back counting
 * no attempt (those in requests were answered: every one is settled). @locality the push
 * thread */
static void pusher_close(ks_push_t *e, pusher_t *p)
{
    (void)e;
    ks_info(PLOG, "group %s: push to %s removed", ks_substream_group(&p->ss), p->gc->push_url);
    push_slot_easies_free(p); /* every request was answered: none is in the multi handle */
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

/* The push thread's loop, until e->stopping: drains the streams the core woke, starts
 * requests from their queued batches, settles those that ended, and closes the streams set
 * by API call once removed and answered. arg: the ks_push_t. */
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
            push_start_requests(e, p);
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
        push_reap(e);
        /* Woken by curl_multi_wakeup (records arrived, or stop); its own timers shorten it. */
        curl_multi_poll(e->multi, NULL, 0, 1000, NULL);
    }
    return NULL;
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
    if (ks_metrics_register(KS_METRIC_SRC_PUSH, push_metrics_collect, e))
        ks_warn(PLOG, "another push edge runs in this process: /metrics shows only its families");
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
    ks_metrics_unregister(KS_METRIC_SRC_PUSH, e); /* no scrape reads e from here on */
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
                push_req_end(e, r);
                push_req_free(r);
            }
        push_slot_easies_free(p);
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
