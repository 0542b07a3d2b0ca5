/* grpc_stream.c: the Subscribe stream: open, parked fetches, assignment news, credits, acks
 * on the stream, the per-client stream limit, and cutting off a stream that does not read. */
#include "grpc_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

/* ---- Subscribe streams ---- */

static void stream_fetch(call_t *c, int wait_ms);
static void stream_fetch_as(call_t *c, int wait_ms, bool counted);

static bool same_tp(const ks_tp_t *a, const ks_tp_t *b)
{
    return a->partition == b->partition && !strcmp(a->topic, b->topic);
}

static bool tp_in(const ks_tp_t *set, size_t n, const ks_tp_t *x)
{
    for (size_t i = 0; i < n; i++)
        if (same_tp(&set[i], x))
            return true;
    return false;
}

/* Tells the stream how its assignment changed since the last snapshot. */
/* Fills tps/tpp with the partitions of from[0..n) that are not in in[0..in_n); returns how
 * many. The topics point into from. */
static size_t tp_not_in(const ks_tp_t *from, size_t n, const ks_tp_t *in, size_t in_n,
                        Ksidecar__V1__TopicPartition *tps, Ksidecar__V1__TopicPartition **tpp)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (tp_in(in, in_n, &from[i]))
            continue;
        ksidecar__v1__topic_partition__init(&tps[m]);
        tps[m].topic = (char *)(uintptr_t)from[i].topic;
        tps[m].partition = from[i].partition;
        tpp[m] = &tps[m];
        m++;
    }
    return m;
}

static void send_assignment_diff(call_t *c, const ks_batch_t *b)
{
    Ksidecar__V1__TopicPartition *tps = calloc(b->assign_cnt + c->snap_cnt + 1, sizeof(*tps));
    Ksidecar__V1__TopicPartition **tpp = calloc(b->assign_cnt + c->snap_cnt + 1, sizeof(*tpp));
    if (!tps || !tpp)
        abort();
    size_t n = tp_not_in(c->snap, c->snap_cnt, b->assigned, b->assign_cnt, tps, tpp);
    if (n) {
        Ksidecar__V1__Revocation rv = KSIDECAR__V1__REVOCATION__INIT;
        rv.n_partitions = n;
        rv.partitions = tpp;
        Ksidecar__V1__SubscribeResponse resp = KSIDECAR__V1__SUBSCRIBE_RESPONSE__INIT;
        resp.kind_case = KSIDECAR__V1__SUBSCRIBE_RESPONSE__KIND_REVOCATION;
        resp.revocation = &rv;
        call_send(c, &resp.base);
    }
    size_t m = tp_not_in(b->assigned, b->assign_cnt, c->snap, c->snap_cnt, tps, tpp);
    if (m) {
        Ksidecar__V1__Assignment as = KSIDECAR__V1__ASSIGNMENT__INIT;
        as.n_partitions = m;
        as.partitions = tpp;
        Ksidecar__V1__SubscribeResponse resp = KSIDECAR__V1__SUBSCRIBE_RESPONSE__INIT;
        resp.kind_case = KSIDECAR__V1__SUBSCRIBE_RESPONSE__KIND_ASSIGNMENT;
        resp.assignment = &as;
        call_send(c, &resp.base);
    }
    free(tps);
    free(tpp);
    free(c->snap);
    c->snap = calloc(b->assign_cnt + 1, sizeof(ks_tp_t));
    if (!c->snap)
        abort();
    memcpy(c->snap, b->assigned, b->assign_cnt * sizeof(ks_tp_t));
    c->snap_cnt = b->assign_cnt;
}

/* What a batch that answered one of the stream's fetches does: records queued for the
 * stream, assignment news, the next fetches; or the leases back, when the stream ended.
 * Drops the fetch's reference. @locality a completion-queue thread (from on_arrive) */
static void stream_batch(call_t *c, ks_batch_t *b)
{
    pthread_mutex_lock(&c->lock);
    c->fetches_out--;
    bool gone = c->closed || c->want_status || c->status_started || c->stalled;
    bool stalled = c->stalled;
    pthread_mutex_unlock(&c->lock);
    if (gone) {
        /* Records leased to a stream that ended: give them back at once. */
        if (b->cnt && stalled)
            ks_engine_release_unread(c->s->eng, c->group, c->sub);
        else if (b->cnt)
            ks_engine_release(c->s->eng, c->group, c->sub);
    } else if (b->status) {
        call_finish(c, grpc_code_of(b->status), "%s", b->message);
    } else {
        if (b->has_assignment)
            send_assignment_diff(c, b);
        if (b->cnt) {
            call_send_item(c, (send_item_t){.batch = b}); /* encoded when its send starts */
            b = NULL;
        }
        stream_refill(c);
    }
    ks_batch_free(b);
    call_unref(c);
}

void on_arrive(void *ctx, bool ok)
{
    call_t *c = ctx;
    for (;;) {
        pthread_mutex_lock(&c->lock);
        if (c->arrived_n == 0) {
            c->arrive_posted = false;
            pthread_mutex_unlock(&c->lock);
            break;
        }
        ks_batch_t *b = c->arrived[c->arrived_h++];
        if (--c->arrived_n == 0)
            c->arrived_h = 0;
        pthread_mutex_unlock(&c->lock);
        stream_batch(c, b);
    }
    call_unref(c); /* ev_arrive's */
}

/* The engine's answer to a stream's fetch: stored with the call, for on_arrive on a
 * completion-queue thread (woken by an empty batch unless it is on its way already).
 * @locality the group loop */
static void on_stream_fetch(ks_batch_t *b, void *opaque)
{
    call_t *c = opaque;
    pthread_mutex_lock(&c->lock);
    if (c->arrived_h + c->arrived_n == c->arrived_cap) {
        if (c->arrived_h) { /* room at the front: move the waiting ones down */
            memmove(c->arrived, c->arrived + c->arrived_h, c->arrived_n * sizeof(*c->arrived));
            c->arrived_h = 0;
        } else {
            c->arrived_cap = c->arrived_cap ? 2 * c->arrived_cap : 4;
            c->arrived = realloc(c->arrived, c->arrived_cap * sizeof(*c->arrived));
            if (!c->arrived)
                abort();
        }
    }
    c->arrived[c->arrived_h + c->arrived_n++] = b;
    bool here = false;
    if (!c->arrive_posted) {
        c->arrive_posted = true;
        c->refs++; /* ev_arrive's, dropped by on_arrive */
        here = grpc_call_start_batch(c->call, NULL, 0, &c->ev_arrive, NULL) != GRPC_CALL_OK;
    }
    pthread_mutex_unlock(&c->lock);
    if (here)
        on_arrive(c, false); /* cannot happen on a live call; serve them here rather than never */
}

/* Parks fetches until STREAM_PIPELINE are out, unless the send queue is at its bound
 * (grpc.stream_queue_*): then none, and the next send that completes calls again. */
void stream_refill(call_t *c)
{
    pthread_mutex_lock(&c->lock);
    int k = 0;
    bool gone = c->closed || c->want_status || c->status_started || c->stalled;
    if (!gone && queue_full_locked(c))
        c->fetch_blocked = true;
    else if (!gone) {
        c->fetch_blocked = false;
        k = STREAM_PIPELINE - c->fetches_out;
        c->fetches_out += k > 0 ? k : 0;
    }
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < k; i++)
        stream_fetch_as(c, STREAM_WAIT_MS, true);
}

/* The fetch a stream parks (wait_ms, and the stream's group, topics, subscriber, deadline
 * and credits), as stream_open and a credits message check it and stream_fetch_as sends it. */
static ks_cmd_req_t stream_cmd(call_t *c, int wait_ms)
{
    int64_t max = c->credit_records > 0 ? c->credit_records : c->s->cfg->sub_max_records;
    if (max > c->s->cfg->fetch_max_records)
        max = c->s->cfg->fetch_max_records;
    if (max > STREAM_BATCH_MAX)
        max = STREAM_BATCH_MAX;
    return (ks_cmd_req_t){.type = c->row->cmd,
                          .group = c->group,
                          .u.fetch = {.topics = (const char *const *)c->topics,
                                      .topic_cnt = c->topic_cnt,
                                      .opts = {.max = (int)max,
                                               .wait_ms = wait_ms,
                                               .deadline_ms = c->deadline_ms,
                                               .subscriber = c->sub,
                                               .credit_records = c->credit_records,
                                               .credit_bytes = c->credit_bytes,
                                               .max_bytes = msg_max_record_bytes(c->s->cfg),
                                               .notify = 1,
                                               .confirm = 1,
                                               .hold_stalled = 1,
                                               .ordered_batches = c->ordered},
                                      .unset = grpc_fetch_unset(1, c->deadline_ms),
                                      .cb = on_stream_fetch,
                                      .opaque = c}};
}

/* Checks the stream's fetch with new credits by the engine's validator (every range and
 * default is there). Returns true, or false after finishing the call with its error. */
static bool credits_valid(call_t *c, const Ksidecar__V1__Credits *cr)
{
    char err[512];
    ks_cmd_req_t cmd = stream_cmd(c, 0);
    cmd.u.fetch.opts.credit_records = cr->records;
    cmd.u.fetch.opts.credit_bytes = cr->bytes;
    ks_status_t st = ks_cmd_validate(c->s->cfg, &cmd, err, sizeof(err));
    if (st)
        call_finish(c, grpc_code_of(st), "%s", err);
    return st == KS_OK;
}

/* Parks a fetch for the stream: it returns with records, an assignment change, or
 * after wait_ms. counted: fetches_out was already raised for it (stream_refill). */
static void stream_fetch_as(call_t *c, int wait_ms, bool counted)
{
    ks_cmd_req_t cmd = stream_cmd(c, wait_ms);
    if (!counted) {
        pthread_mutex_lock(&c->lock);
        c->fetches_out++;
        pthread_mutex_unlock(&c->lock);
    }
    if (grpc_submit(c, &cmd)) {
        pthread_mutex_lock(&c->lock);
        c->fetches_out--;
        pthread_mutex_unlock(&c->lock);
    }
}

static void stream_fetch(call_t *c, int wait_ms)
{
    stream_fetch_as(c, wait_ms, false);
}

/* Counts a Subscribe stream against its client's limit. */
static bool count_stream(call_t *c)
{
    ks_grpc_t *s = c->s;
    char subj[1024];
    /* An authenticated identity (a tokens-file entry, else a verified certificate's
     * subject) has its own budget, wherever it connects from. */
    if (c->who) {
        snprintf(c->peer_host, sizeof(c->peer_host), "%s", ks_auth_principal_id(c->who));
    } else if (cert_subject(c, subj, sizeof(subj))) {
        snprintf(c->peer_host, sizeof(c->peer_host), "subject %.250s", subj);
    } else {
        char *peer = grpc_call_get_peer(c->call);
        snprintf(c->peer_host, sizeof(c->peer_host), "%s", peer ? peer : "?");
        gpr_free(peer);
        char *colon = strrchr(c->peer_host, ':');
        if (colon)
            *colon = '\0';
    }
    bool ok = true;
    pthread_mutex_lock(&s->lock);
    peer_count_t *pc = NULL;
    for (size_t i = 0; i < s->peer_cnt; i++)
        if (!strcmp(s->peers[i].host, c->peer_host))
            pc = &s->peers[i];
    if (!pc) {
        s->peers = realloc(s->peers, (s->peer_cnt + 1) * sizeof(*s->peers));
        if (!s->peers)
            abort();
        pc = &s->peers[s->peer_cnt++];
        memset(pc, 0, sizeof(*pc));
        snprintf(pc->host, sizeof(pc->host), "%s", c->peer_host);
    }
    if (pc->streams >= s->cfg->grpc_max_streams_per_client)
        ok = false;
    else
        pc->streams++;
    pthread_mutex_unlock(&s->lock);
    c->counted = ok;
    return ok;
}

void uncount_stream(call_t *c)
{
    if (!c->counted)
        return;
    ks_grpc_t *s = c->s;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->peer_cnt; i++)
        if (!strcmp(s->peers[i].host, c->peer_host))
            s->peers[i].streams--;
    pthread_mutex_unlock(&s->lock);
    c->counted = false;
}

static void stream_open(call_t *c, const Ksidecar__V1__Open *o)
{
    ks_grpc_t *s = c->s;
    char err[512];
    ks_status_t st = ks_engine_check_group(s->eng, o->group, err, sizeof(err));
    if (st) {
        call_finish(c, grpc_code_of(st), "%s", err);
        return;
    }
    if (!authorized(c, o->group))
        return;
    if (!scoped(c, KS_SCOPE_CONSUME, "consume", (const char *const *)o->topics, o->n_topics))
        return;
    /* The stream's fetch, checked before the stream counts: the topics and the subscriber
     * as the client named them, its deadline and credits. */
    ks_cmd_req_t cmd = {.type = c->row->cmd,
                        .group = o->group,
                        .u.fetch = {.topics = (const char *const *)o->topics,
                                    .topic_cnt = o->n_topics,
                                    .opts = {.wait_ms = 0,
                                             .deadline_ms = o->deadline_ms,
                                             .subscriber = o->subscriber,
                                             .credit_records = o->credits ? o->credits->records : 0,
                                             .credit_bytes = o->credits ? o->credits->bytes : 0},
                                    .unset = grpc_fetch_unset(0, o->deadline_ms)}};
    if ((st = ks_cmd_validate(s->cfg, &cmd, err, sizeof(err)))) {
        call_finish(c, grpc_code_of(st), "%s", err);
        return;
    }
    if (!count_stream(c)) {
        call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
                    "too many streams from %s %s (grpc.max_streams_per_client %d)",
                    c->who || !strncmp(c->peer_host, "subject ", 8) ? "identity" : "client address",
                    c->peer_host, s->cfg->grpc_max_streams_per_client);
        return;
    }
    snprintf(c->group, sizeof(c->group), "%s", o->group);
    snprintf(c->sub, sizeof(c->sub), "%s#%u", *o->subscriber ? o->subscriber : "stream",
             atomic_fetch_add(&s->next_id, 1));
    c->topics = calloc(o->n_topics, sizeof(char *));
    if (!c->topics)
        abort();
    for (size_t i = 0; i < o->n_topics; i++)
        c->topics[i] = ks_xstrdup(o->topics[i]);
    c->topic_cnt = o->n_topics;
    c->credit_records = o->credits ? o->credits->records : 0;
    c->credit_bytes = o->credits ? o->credits->bytes : 0;
    c->deadline_ms = o->deadline_ms;
    c->ordered = o->ordered_batches;
    c->opened = true;
    ks_dbg(LOGC, "stream %s opened on group %s", c->sub, c->group);
    for (int i = 0; i < STREAM_PIPELINE; i++)
        stream_fetch(c, STREAM_WAIT_MS);
}

void handle_subscribe_msg(call_t *c, grpc_slice sl)
{
    size_t n;
    char **ids = c->opened ? fast_ack_ids(sl, &n) : NULL;
    if (ids) {
        settle_owned(c, c->group, KS_SETTLE_ACK, 0, NULL, ids, n, true);
        return;
    }
    Ksidecar__V1__SubscribeRequest *r = UNPACK(x, ksidecar__v1__subscribe_request, sl);
    if (!r) {
        bad_message(c, "SubscribeRequest");
        return;
    }
    if (!c->opened) {
        if (r->kind_case != KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_OPEN)
            call_finish(c, GRPC_STATUS_INVALID_ARGUMENT,
                        "the first message of a Subscribe stream must be open");
        else
            stream_open(c, r->open);
        ksidecar__v1__subscribe_request__free_unpacked(r, NULL);
        return;
    }
    switch (r->kind_case) {
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_OPEN:
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "the stream is already open");
        break;
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_ACK:
        if (r->ack->n_ack_ids)
            settle(c, c->group, KS_SETTLE_ACK, 0, NULL, r->ack->ack_ids, r->ack->n_ack_ids, true);
        break;
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_NACK:
        if (r->nack->n_ack_ids)
            settle(c, c->group, KS_SETTLE_NACK, r->nack->delay_ms, r->nack->reason,
                   r->nack->ack_ids, r->nack->n_ack_ids, true);
        break;
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_MODIFY_DEADLINE:
        if (r->modify_deadline->n_ack_ids)
            settle(c, c->group, KS_SETTLE_EXTEND, r->modify_deadline->deadline_ms, NULL,
                   r->modify_deadline->ack_ids, r->modify_deadline->n_ack_ids, true);
        break;
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_CREDITS:
        if (credits_valid(c, r->credits)) {
            c->credit_records = r->credits->records;
            c->credit_bytes = r->credits->bytes;
            /* A quick extra fetch carries the new credits to the engine at once (at the
             * queue's bound the next parked fetch carries them). */
            pthread_mutex_lock(&c->lock);
            bool full = queue_full_locked(c);
            pthread_mutex_unlock(&c->lock);
            if (!full)
                stream_fetch(c, 0);
        }
        break;
    default:
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "empty SubscribeRequest");
    }
    ksidecar__v1__subscribe_request__free_unpacked(r, NULL);
}

/* A Subscribe stream with a send in flight for grpc.stream_stall_ms: marked stalled. */
static bool pick_stalled(call_t *c, const void *now_ms)
{
    int64_t now = *(const int64_t *)now_ms;
    if (c->method != M_SUBSCRIBE || !c->opened || c->stalled || c->closed ||
        c->send_started_ms == 0 || now - c->send_started_ms < c->s->cfg->grpc_stream_stall_ms)
        return false;
    c->stalled = true;
    return true;
}

/* Cuts off the Subscribe streams whose client took no message for grpc.stream_stall_ms
 * (a send in flight that long): their leases go back first, counting no attempt, then
 * the call is cancelled. @locality the health thread */
void cut_stalled(ks_grpc_t *s)
{
    int64_t now = mono_ms();
    call_t *todo[256];
    size_t n = pick_calls(s, pick_stalled, &now, todo, 256);
    for (size_t i = 0; i < n; i++) {
        call_t *c = todo[i];
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "the client took no message for %d ms (grpc.stream_stall_ms): stream cut off, "
                 "its records go to other subscribers",
                 s->cfg->grpc_stream_stall_ms);
        ks_warn(LOGC, "stream %s of group %s: %s, counting no attempt", c->sub, c->group, msg);
        ks_engine_release_unread(s->eng, c->group, c->sub);
        grpc_call_cancel_with_status(c->call, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL);
        call_unref(c);
    }
}
