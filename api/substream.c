/* substream.c: the subscriber-stream core every streaming transport shares: parked fetches,
 * credits, the arrival queue, refill, the assignment diff, the queue bound, stall cut-off and
 * release (substream.h). */
#include "substream.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "util.h"

#define LOGC "stream"

struct ks_subhub {
    ks_engine_t *eng;
    const ks_config_t *cfg;
    pthread_mutex_t lock; /* guards head, count */
    ks_substream_t *head;
    size_t count;
    atomic_uint next_id;
    atomic_bool stopping;
    pthread_t sweeper;
    _Atomic(const ks_auth_t *) auth; /* NULL: no tokens to check streams against */
};

/* ---- the engine's door ---- */

static void submit_quiet(ks_substream_t *ss, ks_cmd_req_t *r)
{
    char err[256];
    (void)ks_engine_submit(ss->hub->eng, r, err, sizeof(err));
}

static void release_subscriber(ks_substream_t *ss, bool unread)
{
    ks_cmd_req_t r = {.type = unread ? KS_CMD_RELEASE_UNREAD : KS_CMD_RELEASE,
                      .group = ss->group,
                      .u.release = {.subscriber = ss->sub}};
    submit_quiet(ss, &r);
}

/* ---- fetches ---- */

static void on_fetch(ks_batch_t *b, void *opaque);

/* The fetch the stream parks (wait_ms), with its group, topics, subscriber, deadline and
 * credits as they are now. Locked by caller (or before the stream is shared). */
static ks_cmd_req_t fetch_cmd_locked(ks_substream_t *ss, int wait_ms)
{
    const ks_config_t *cfg = ks_subhub_cfg(ss->hub);
    int64_t max = ss->credit_records > 0 ? ss->credit_records : cfg->sub_max_records;
    if (max > cfg->fetch_max_records)
        max = cfg->fetch_max_records;
    if (max > ss->max_batch)
        max = ss->max_batch;
    return (ks_cmd_req_t){.type = ss->cmd,
                          .group = ss->group,
                          .u.fetch = {.topics = (const char *const *)ss->topics,
                                      .topic_cnt = ss->topic_cnt,
                                      .opts = {.max = (int)max,
                                               .wait_ms = wait_ms,
                                               .deadline_ms = ss->deadline_ms,
                                               .subscriber = ss->sub,
                                               .credit_records = ss->credit_records,
                                               .credit_bytes = ss->credit_bytes,
                                               .max_bytes = ss->max_bytes,
                                               .notify = 1,
                                               .confirm = 1,
                                               .hold_stalled = 1,
                                               .transport = ss->ops->name,
                                               .ordered_batches = ss->ordered_batches,
                                               .key_format = ss->key_format,
                                               .value_format = ss->value_format},
                                      .unset = ss->unset,
                                      .cb = on_fetch,
                                      .opaque = ss}};
}

/* Parks one fetch, already counted in fetches_out. A refused fetch ends the stream with the
 * engine's message (its callback never runs). */
static void park(ks_substream_t *ss, int wait_ms)
{
    char err[512];
    pthread_mutex_lock(&ss->lock);
    ks_cmd_req_t cmd = fetch_cmd_locked(ss, wait_ms);
    /* The command borrows topics and names, which live as long as the stream; credits are
     * copied into it now. */
    pthread_mutex_unlock(&ss->lock);
    ss->ops->ref(ss->t); /* the fetch's, dropped once its batch is run */
    ks_status_t st = ks_engine_submit(ss->hub->eng, &cmd, err, sizeof(err));
    if (st == KS_OK)
        return;
    pthread_mutex_lock(&ss->lock);
    ss->fetches_out--;
    pthread_mutex_unlock(&ss->lock);
    ss->ops->finish(ss->t, st, err);
    ss->ops->unref(ss->t);
}

static bool queue_full_locked(const ks_substream_t *ss)
{
    return ss->q_msgs >= ss->lim.queue_messages || ss->q_bytes >= ss->lim.queue_bytes;
}

static bool gone_locked(const ks_substream_t *ss)
{
    return !ss->opened || ss->stopped || ss->stalled;
}

/* Parks fetches until KS_SUBSTREAM_PIPELINE are out, unless the transport's queue is at its
 * bound: then none, and the record message that leaves it calls again. */
static void refill(ks_substream_t *ss)
{
    int k = 0;
    pthread_mutex_lock(&ss->lock);
    if (!gone_locked(ss)) {
        ss->fetch_blocked = queue_full_locked(ss);
        if (!ss->fetch_blocked) {
            k = KS_SUBSTREAM_PIPELINE - ss->fetches_out;
            if (k < 0)
                k = 0;
            ss->fetches_out += k;
        }
    }
    pthread_mutex_unlock(&ss->lock);
    for (int i = 0; i < k; i++)
        park(ss, KS_SUBSTREAM_WAIT_MS);
}

/* ---- the assignment ---- */

static bool same_tp(const ks_tp_t *a, const ks_tp_t *b)
{
    return a->partition == b->partition && !strcmp(a->topic, b->topic);
}

/* Copies into out the partitions of from[0..n) that are not in in[0..in_n); returns how many.
 * O(n * in_n): a stream's assignment is tens of partitions, and it changes on a rebalance. */
static size_t tp_not_in(const ks_tp_t *from, size_t n, const ks_tp_t *in, size_t in_n, ks_tp_t *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (size_t j = 0; j < in_n && !found; j++)
            found = same_tp(&in[j], &from[i]);
        if (!found)
            out[m++] = from[i];
    }
    return m;
}

/* Tells the transport how the assignment changed since the stream was last told, and keeps
 * the new one. @locality the transport's thread (drains run one at a time) */
static void assignment_news(ks_substream_t *ss, const ks_batch_t *b)
{
    ks_tp_t *rev = calloc(ss->snap_cnt + 1, sizeof(*rev));
    ks_tp_t *as = calloc(b->assign_cnt + 1, sizeof(*as));
    if (!rev || !as)
        abort();
    size_t nrev = tp_not_in(ss->snap, ss->snap_cnt, b->assigned, b->assign_cnt, rev);
    size_t nas = tp_not_in(b->assigned, b->assign_cnt, ss->snap, ss->snap_cnt, as);
    if (nrev || nas)
        ss->ops->send_assignment(ss->t, rev, nrev, as, nas);
    free(rev);
    free(as);
    free(ss->snap);
    ss->snap = calloc(b->assign_cnt + 1, sizeof(*ss->snap));
    if (!ss->snap)
        abort();
    memcpy(ss->snap, b->assigned, b->assign_cnt * sizeof(*ss->snap));
    ss->snap_cnt = b->assign_cnt;
}

/* ---- arrivals ---- */

/* What a batch that answered one of the stream's fetches does: records to the transport,
 * assignment news, the next fetches; or the leases back, when the stream ended. Drops the
 * fetch's reference. */
static void run_batch(ks_substream_t *ss, ks_batch_t *b)
{
    pthread_mutex_lock(&ss->lock);
    ss->fetches_out--;
    bool gone = gone_locked(ss);
    bool stalled = ss->stalled || ss->unread;
    if (!gone && b->cnt) {
        ss->q_msgs++;
        ss->q_bytes += b->bytes;
    }
    pthread_mutex_unlock(&ss->lock);
    if (gone) {
        /* Records leased to a stream that ended, never handed to its transport: this batch
         * goes back at once, counting no attempt. What the stream did take is its own
         * release's (ks_substream_release, _close): a push stream that is removed still has
         * requests out whose answers settle their records. */
        if (b->cnt && b->deliver_token) {
            ks_cmd_req_t r = {.type = KS_CMD_DELIVERED,
                              .group = ss->group,
                              .u.delivered = {.token = b->deliver_token, .taken = false}};
            submit_quiet(ss, &r);
        } else if (b->cnt) {
            release_subscriber(ss, stalled);
        }
    } else if (b->status) {
        ss->ops->finish(ss->t, b->status, b->message);
    } else {
        if (b->has_assignment)
            assignment_news(ss, b);
        if (b->cnt) {
            ss->ops->send_records(ss->t, b); /* encoded when its send starts */
            b = NULL;
        }
        refill(ss);
    }
    ks_batch_free(b);
    ss->ops->unref(ss->t);
}

void ks_substream_drain(ks_substream_t *ss)
{
    for (;;) {
        pthread_mutex_lock(&ss->lock);
        if (ss->arrived_n == 0) {
            ss->drain_posted = false;
            pthread_mutex_unlock(&ss->lock);
            return;
        }
        ks_substream_item_t it = ss->arrived[ss->arrived_h++];
        if (--ss->arrived_n == 0)
            ss->arrived_h = 0;
        pthread_mutex_unlock(&ss->lock);
        if (it.fn)
            it.fn(ss->t, it.arg);
        else
            run_batch(ss, it.b);
    }
}

/* Queues an arrival for the transport's thread, which is woken unless a wake is on its way.
 * @locality the group loop */
static void arrive(ks_substream_t *ss, ks_substream_item_t it)
{
    pthread_mutex_lock(&ss->lock);
    if (ss->arrived_h + ss->arrived_n == ss->arrived_cap) {
        if (ss->arrived_h) { /* room at the front: move the waiting ones down */
            memmove(ss->arrived, ss->arrived + ss->arrived_h, ss->arrived_n * sizeof(*ss->arrived));
            ss->arrived_h = 0;
        } else {
            ss->arrived_cap = ss->arrived_cap ? 2 * ss->arrived_cap : 4;
            ss->arrived = realloc(ss->arrived, ss->arrived_cap * sizeof(*ss->arrived));
            if (!ss->arrived)
                abort();
        }
    }
    ss->arrived[ss->arrived_h + ss->arrived_n++] = it;
    bool wake = !ss->drain_posted;
    ss->drain_posted = true;
    pthread_mutex_unlock(&ss->lock);
    if (wake && !ss->ops->wake(ss->t)) {
        /* The transport cannot be woken: serve them here, holding t, since the batch's run
         * drops its fetch's reference, which may be the last. */
        ss->ops->ref(ss->t);
        ks_substream_drain(ss);
        ss->ops->unref(ss->t);
    }
}

/* The engine's answer to a fetch. @locality the group loop */
static void on_fetch(ks_batch_t *b, void *opaque)
{
    arrive(opaque, (ks_substream_item_t){.b = b});
}

void ks_substream_defer(ks_substream_t *ss, ks_substream_defer_fn *fn, void *arg)
{
    arrive(ss, (ks_substream_item_t){.fn = fn, .arg = arg});
}

/* ---- the stream's life ---- */

void ks_substream_init(ks_substream_t *ss, ks_subhub_t *hub, const ks_substream_ops_t *ops, void *t,
                       ks_cmd_t cmd, const ks_substream_limits_t *lim)
{
    memset(ss, 0, sizeof(*ss));
    ss->ops = ops;
    ss->t = t;
    ss->hub = hub;
    ss->cmd = cmd;
    ss->lim = *lim;
    pthread_mutex_init(&ss->lock, NULL);
}

void ks_substream_destroy(ks_substream_t *ss)
{
    for (size_t i = 0; i < ss->topic_cnt; i++)
        free(ss->topics[i]);
    free(ss->topics);
    free(ss->snap);
    free(ss->arrived); /* empty: each arrival held a reference on t */
    ks_auth_release(ss->who);
    pthread_mutex_destroy(&ss->lock);
}

/* The fetch o asks for, as the validator sees it. */
static ks_cmd_req_t open_cmd(const ks_substream_t *ss, const ks_substream_open_t *o)
{
    return (ks_cmd_req_t){.type = ss->cmd,
                          .group = o->group,
                          .u.fetch = {.topics = o->topics,
                                      .topic_cnt = o->topic_cnt,
                                      .opts = {.wait_ms = 0,
                                               .deadline_ms = o->deadline_ms,
                                               .subscriber = o->subscriber,
                                               .credit_records = o->credit_records,
                                               .credit_bytes = o->credit_bytes,
                                               .ordered_batches = o->ordered_batches,
                                               .key_format = o->key_format,
                                               .value_format = o->value_format},
                                      .unset = o->unset}};
}

ks_status_t ks_substream_check(ks_substream_t *ss, const ks_substream_open_t *o, char *err,
                               size_t errsize)
{
    ks_cmd_req_t cmd = open_cmd(ss, o);
    return ks_cmd_validate(ks_subhub_cfg(ss->hub), &cmd, err, errsize);
}

static void hub_add(ks_subhub_t *h, ks_substream_t *ss)
{
    pthread_mutex_lock(&h->lock);
    ss->hub_prev = NULL;
    ss->hub_next = h->head;
    if (h->head)
        h->head->hub_prev = ss;
    h->head = ss;
    h->count++;
    ss->in_hub = true;
    pthread_mutex_unlock(&h->lock);
}

static void hub_remove(ks_subhub_t *h, ks_substream_t *ss)
{
    pthread_mutex_lock(&h->lock);
    if (ss->in_hub) {
        if (ss->hub_prev)
            ss->hub_prev->hub_next = ss->hub_next;
        else
            h->head = ss->hub_next;
        if (ss->hub_next)
            ss->hub_next->hub_prev = ss->hub_prev;
        ss->hub_next = ss->hub_prev = NULL;
        ss->in_hub = false;
        h->count--;
    }
    pthread_mutex_unlock(&h->lock);
}

void ks_substream_start(ks_substream_t *ss, const ks_substream_open_t *o, const char *dflt)
{
    snprintf(ss->group, sizeof(ss->group), "%s", o->group);
    snprintf(ss->sub, sizeof(ss->sub), "%s#%u",
             o->subscriber && *o->subscriber ? o->subscriber : dflt,
             atomic_fetch_add(&ss->hub->next_id, 1));
    ss->topics = calloc(o->topic_cnt + 1, sizeof(char *));
    if (!ss->topics)
        abort();
    for (size_t i = 0; i < o->topic_cnt; i++)
        ss->topics[i] = ks_xstrdup(o->topics[i]);
    ss->topic_cnt = o->topic_cnt;
    ss->credit_records = o->credit_records;
    ss->credit_bytes = o->credit_bytes;
    ss->deadline_ms = o->deadline_ms;
    ss->unset = o->unset & KS_FETCH_UNSET_DEADLINE; /* max and wait are the stream's own */
    ss->max_batch = o->max_batch > 0 ? o->max_batch : 1;
    ss->max_bytes = o->max_bytes;
    ss->ordered_batches = o->ordered_batches;
    ss->key_format = o->key_format;
    ss->value_format = o->value_format;
    pthread_mutex_lock(&ss->lock);
    ss->who = ks_auth_hold(o->who); /* let go in ks_substream_destroy */
    ss->opened = true;
    pthread_mutex_unlock(&ss->lock);
    hub_add(ss->hub, ss);
    ks_dbg(LOGC, "stream %s opened on group %s", ss->sub, ss->group);
    refill(ss);
}

ks_status_t ks_substream_credits(ks_substream_t *ss, int64_t records, int64_t bytes, char *err,
                                 size_t errsize)
{
    pthread_mutex_lock(&ss->lock);
    ks_cmd_req_t cmd = fetch_cmd_locked(ss, 0);
    pthread_mutex_unlock(&ss->lock);
    cmd.u.fetch.opts.credit_records = records;
    cmd.u.fetch.opts.credit_bytes = bytes;
    ks_status_t st = ks_cmd_validate(ks_subhub_cfg(ss->hub), &cmd, err, errsize);
    if (st)
        return st;
    pthread_mutex_lock(&ss->lock);
    ss->credit_records = records;
    ss->credit_bytes = bytes;
    /* A quick extra fetch carries the new credits to the engine at once (at the queue's bound
     * the next parked fetch carries them). */
    bool quick = !gone_locked(ss) && !queue_full_locked(ss);
    if (quick)
        ss->fetches_out++;
    pthread_mutex_unlock(&ss->lock);
    if (quick)
        park(ss, 0);
    return KS_OK;
}

bool ks_substream_msg_done(ks_substream_t *ss, uint64_t token, int64_t bytes, bool taken)
{
    pthread_mutex_lock(&ss->lock);
    ss->q_msgs--;
    ss->q_bytes -= bytes;
    bool again = taken && ss->fetch_blocked && !gone_locked(ss) && !queue_full_locked(ss);
    pthread_mutex_unlock(&ss->lock);
    if (token) {
        ks_cmd_req_t r = {.type = KS_CMD_DELIVERED,
                          .group = ss->group,
                          .u.delivered = {.token = token, .taken = taken}};
        submit_quiet(ss, &r);
    }
    return again;
}

void ks_substream_refill(ks_substream_t *ss)
{
    refill(ss);
}

bool ks_substream_has_room(ks_substream_t *ss)
{
    pthread_mutex_lock(&ss->lock);
    bool room = !queue_full_locked(ss);
    pthread_mutex_unlock(&ss->lock);
    return room;
}

void ks_substream_send_begin(ks_substream_t *ss, int64_t now_ms)
{
    pthread_mutex_lock(&ss->lock);
    ss->send_started_ms = now_ms > 0 ? now_ms : 1;
    pthread_mutex_unlock(&ss->lock);
}

void ks_substream_send_end(ks_substream_t *ss)
{
    pthread_mutex_lock(&ss->lock);
    ss->send_started_ms = 0;
    pthread_mutex_unlock(&ss->lock);
}

bool ks_substream_live(ks_substream_t *ss)
{
    pthread_mutex_lock(&ss->lock);
    bool live = !gone_locked(ss);
    pthread_mutex_unlock(&ss->lock);
    return live;
}

bool ks_substream_revoked(ks_substream_t *ss)
{
    pthread_mutex_lock(&ss->lock);
    bool revoked = ss->revoked;
    pthread_mutex_unlock(&ss->lock);
    return revoked;
}

void ks_substream_stop(ks_substream_t *ss)
{
    pthread_mutex_lock(&ss->lock);
    ss->stopped = true;
    pthread_mutex_unlock(&ss->lock);
}

/* Stops the stream and gives its leases back: uncounted when it stalled, or when unread is
 * (or was once) asked for. */
static void release(ks_substream_t *ss, bool unread)
{
    pthread_mutex_lock(&ss->lock);
    ss->stopped = true;
    ss->unread |= unread;
    bool opened = ss->opened, uncounted = ss->stalled || ss->unread;
    pthread_mutex_unlock(&ss->lock);
    if (opened)
        release_subscriber(ss, uncounted);
}

void ks_substream_release(ks_substream_t *ss)
{
    release(ss, false);
}

void ks_substream_release_unread(ks_substream_t *ss)
{
    release(ss, true);
}

void ks_substream_close(ks_substream_t *ss)
{
    ks_substream_release(ss);
    hub_remove(ss->hub, ss);
    if (ss->opened)
        ks_dbg(LOGC, "stream %s closed", ss->sub);
}

/* ---- the hub and its stall sweep ---- */

const ks_config_t *ks_subhub_cfg(const ks_subhub_t *h)
{
    return h->cfg;
}

void ks_subhub_watch_auth(ks_subhub_t *h, const ks_auth_t *auth)
{
    atomic_store(&h->auth, auth);
}

/* Whether the stream's caller may still use it under the tokens file in force; on a reload
 * that kept it, ss->who moves to its new entry. Returns KS_OK, or the error with msg.
 * Locked by caller. */
static ks_status_t still_allowed_locked(ks_substream_t *ss, const ks_auth_t *auth, char *msg,
                                        size_t size)
{
    const ks_principal_t *cur = ks_auth_current(auth, ss->who);
    if (cur == ss->who) {
        ks_auth_release(cur);
        return KS_OK;
    }
    if (!cur) {
        snprintf(msg, size, "%s was removed from the tokens file (auth.tokens_file): stream ended",
                 ks_auth_principal_id(ss->who));
        return KS_E_UNAUTH;
    }
    ks_auth_release(ss->who); /* the replaced table goes once nothing else holds it */
    ss->who = cur;
    const char *g = ss->group;
    char why[400];
    if (ks_auth_allow(auth, cur, KS_SCOPE_GROUPS, &g, 1, why, sizeof(why)) != KS_OK ||
        ks_auth_allow(auth, cur, KS_SCOPE_CONSUME, (const char *const *)ss->topics, ss->topic_cnt,
                      why, sizeof(why)) != KS_OK) {
        snprintf(msg, size,
                 "the reloaded tokens file (auth.tokens_file) narrowed the scopes: %.300s", why);
        return KS_E_PERMISSION;
    }
    return KS_OK;
}

/* Ends the streams whose caller the tokens file no longer allows: leases back counting no
 * attempt, then the transport sends the error. @locality the sweep thread */
static void sweep_revoked(ks_subhub_t *h, const ks_auth_t *auth)
{
    ks_substream_t *todo[64]; /* more wait for the next pass */
    ks_status_t st[64];
    char msg[64][512];
    size_t n = 0;
    pthread_mutex_lock(&h->lock);
    for (ks_substream_t *ss = h->head; ss && n < 64; ss = ss->hub_next) {
        pthread_mutex_lock(&ss->lock);
        bool end = ss->opened && !ss->stopped && ss->who &&
                   (st[n] = still_allowed_locked(ss, auth, msg[n], sizeof(msg[n]))) != KS_OK;
        if (end) {
            ss->stopped = true;
            ss->unread = true;
            ss->revoked = true; /* from now on the transport starts no send of its queue */
        }
        pthread_mutex_unlock(&ss->lock); /* no op is called under it */
        if (end) {
            ss->ops->ref(ss->t); /* under the hub's lock: the stream cannot leave meanwhile */
            todo[n++] = ss;
        }
    }
    pthread_mutex_unlock(&h->lock);
    for (size_t i = 0; i < n; i++) {
        ks_substream_t *ss = todo[i];
        ks_warn(LOGC, "stream %s of group %s: %s", ss->sub, ss->group, msg[i]);
        release_subscriber(ss, true);
        ss->ops->finish(ss->t, st[i], msg[i]);
        ss->ops->unref(ss->t);
    }
}

/* Cuts off the streams whose transport has had a send in flight for its stall time: their
 * leases go back first, counting no attempt, then the transport cuts the connection.
 * @locality the sweep thread */
static void sweep(ks_subhub_t *h, int64_t now)
{
    ks_substream_t *todo[256];
    size_t n = 0;
    const ks_auth_t *auth = atomic_load(&h->auth);
    if (auth)
        sweep_revoked(h, auth);
    pthread_mutex_lock(&h->lock);
    for (ks_substream_t *ss = h->head; ss && n < 256; ss = ss->hub_next) {
        pthread_mutex_lock(&ss->lock);
        bool cut = ss->opened && !ss->stopped && !ss->stalled && ss->send_started_ms &&
                   now - ss->send_started_ms >= ss->lim.stall_ms;
        if (cut)
            ss->stalled = true;
        pthread_mutex_unlock(&ss->lock);
        if (cut) {
            ss->ops->ref(ss->t); /* under the hub's lock: the stream cannot leave meanwhile */
            todo[n++] = ss;
        }
    }
    pthread_mutex_unlock(&h->lock);
    for (size_t i = 0; i < n; i++) {
        ks_substream_t *ss = todo[i];
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "the client took no message for %d ms (%s): stream cut off, its records go to "
                 "other subscribers",
                 ss->lim.stall_ms, ss->lim.stall_key);
        ks_warn(LOGC, "stream %s of group %s: %s, counting no attempt", ss->sub, ss->group, msg);
        ks_metrics_stream_cut();
        release_subscriber(ss, true);
        ss->ops->cut(ss->t, msg);
        ss->ops->unref(ss->t);
    }
}

static void *sweep_main(void *arg)
{
    ks_subhub_t *h = arg;
    while (!atomic_load(&h->stopping)) {
        struct timespec ts = {0, 250 * 1000000};
        nanosleep(&ts, NULL);
        sweep(h, ks_now_ms());
    }
    return NULL;
}

ks_subhub_t *ks_subhub_new(ks_engine_t *eng, const ks_config_t *cfg)
{
    ks_subhub_t *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->eng = eng;
    h->cfg = cfg;
    pthread_mutex_init(&h->lock, NULL);
    atomic_init(&h->next_id, 1);
    atomic_init(&h->stopping, false);
    atomic_init(&h->auth, NULL);
    if (pthread_create(&h->sweeper, NULL, sweep_main, h)) {
        pthread_mutex_destroy(&h->lock);
        free(h);
        return NULL;
    }
    pthread_setname_np(h->sweeper, "ks:lease-sweep");
    return h;
}

void ks_subhub_free(ks_subhub_t *h)
{
    if (!h)
        return;
    atomic_store(&h->stopping, true);
    pthread_join(h->sweeper, NULL);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

size_t ks_subhub_count(ks_subhub_t *h)
{
    pthread_mutex_lock(&h->lock);
    size_t n = h->count;
    pthread_mutex_unlock(&h->lock);
    return n;
}
