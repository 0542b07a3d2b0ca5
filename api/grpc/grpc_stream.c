/* grpc_stream.c: the Subscribe stream as a transport of the subscriber-stream core
 * (substream.c): its wire (open, acks, credits, records and assignment news as protobuf) and
 * the per-client stream limit. Fetches, credits, refill, stall and release are the core's. */
#include "grpc_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

/* ---- the transport of the subscriber-stream core (substream.h) ---- */

static void op_ref(void *t)
{
    call_ref(t);
}

static void op_unref(void *t)
{
    call_unref(t);
}

/* An empty batch posts ev_arrive on a completion-queue thread, where on_arrive drains. */
static bool op_wake(void *t)
{
    call_t *c = t;
    pthread_mutex_lock(&c->lock);
    c->refs++; /* ev_arrive's, dropped by on_arrive */
    bool ok = grpc_call_start_batch(c->call, NULL, 0, &c->ev_arrive, NULL) == GRPC_CALL_OK;
    if (!ok)
        c->refs--;
    pthread_mutex_unlock(&c->lock);
    return ok;
}

void on_arrive(void *ctx, bool ok)
{
    call_t *c = ctx;
    ks_substream_drain(&c->ss);
    call_unref(c); /* ev_arrive's */
}

static void op_send_records(void *t, ks_batch_t *b)
{
    call_send_item(t, (send_item_t){.batch = b}); /* encoded when its send starts */
}

static void tp_list(const ks_tp_t *from, size_t n, Ksidecar__V1__TopicPartition *tps,
                    Ksidecar__V1__TopicPartition **tpp)
{
    for (size_t i = 0; i < n; i++) {
        ksidecar__v1__topic_partition__init(&tps[i]);
        tps[i].topic = (char *)(uintptr_t)from[i].topic;
        tps[i].partition = from[i].partition;
        tpp[i] = &tps[i];
    }
}

/* Tells the client its partitions taken away, then its new ones. */
static void op_send_assignment(void *t, const ks_tp_t *rev, size_t nrev, const ks_tp_t *as,
                               size_t nas)
{
    call_t *c = t;
    size_t most = nrev > nas ? nrev : nas;
    Ksidecar__V1__TopicPartition *tps = calloc(most + 1, sizeof(*tps));
    Ksidecar__V1__TopicPartition **tpp = calloc(most + 1, sizeof(*tpp));
    if (!tps || !tpp)
        abort();
    Ksidecar__V1__SubscribeResponse resp = KSIDECAR__V1__SUBSCRIBE_RESPONSE__INIT;
    if (nrev) {
        tp_list(rev, nrev, tps, tpp);
        Ksidecar__V1__Revocation rv = KSIDECAR__V1__REVOCATION__INIT;
        rv.n_partitions = nrev;
        rv.partitions = tpp;
        resp.kind_case = KSIDECAR__V1__SUBSCRIBE_RESPONSE__KIND_REVOCATION;
        resp.revocation = &rv;
        call_send(c, &resp.base);
    }
    if (nas) {
        tp_list(as, nas, tps, tpp);
        Ksidecar__V1__Assignment asg = KSIDECAR__V1__ASSIGNMENT__INIT;
        asg.n_partitions = nas;
        asg.partitions = tpp;
        resp.kind_case = KSIDECAR__V1__SUBSCRIBE_RESPONSE__KIND_ASSIGNMENT;
        resp.assignment = &asg;
        call_send(c, &resp.base);
    }
    free(tps);
    free(tpp);
}

static void op_finish(void *t, ks_status_t st, const char *msg)
{
    call_finish(t, grpc_code_of(st), "%s", msg);
}

static void op_cut(void *t, const char *msg)
{
    call_t *c = t;
    grpc_call_cancel_with_status(c->call, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL);
}

static const ks_substream_ops_t stream_ops = {
    .name = "grpc",
    .ref = op_ref,
    .unref = op_unref,
    .wake = op_wake,
    .send_records = op_send_records,
    .send_assignment = op_send_assignment,
    .finish = op_finish,
    .cut = op_cut,
};

void stream_init(call_t *c)
{
    const ks_config_t *cfg = c->s->cfg;
    ks_substream_limits_t lim = {.queue_messages = cfg->grpc_stream_queue_messages,
                                 .queue_bytes = cfg->grpc_stream_queue_bytes,
                                 .stall_ms = cfg->grpc_stream_stall_ms,
                                 .stall_key = "grpc.stream_stall_ms"};
    ks_substream_init(&c->ss, c->s->hub, &stream_ops, c, c->row->cmd, &lim);
    c->has_ss = true;
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
    if (!grpc_scoped(c, KS_SCOPE_CONSUME, "consume", (const char *const *)o->topics, o->n_topics))
        return;
    char ferr[256];
    if (!grpc_schema_formats(o->value_format, o->key_format, &c->fmt, ferr, sizeof(ferr))) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", ferr);
        return;
    }
    /* The stream's fetch, checked before the stream counts: the topics and the subscriber
     * as the client named them, its deadline and credits. */
    ks_substream_open_t so = {.group = o->group,
                              .topics = (const char *const *)o->topics,
                              .topic_cnt = o->n_topics,
                              .subscriber = o->subscriber,
                              .credit_records = o->credits ? o->credits->records : 0,
                              .credit_bytes = o->credits ? o->credits->bytes : 0,
                              .deadline_ms = o->deadline_ms,
                              .unset = grpc_fetch_unset(0, o->deadline_ms),
                              .max_batch = STREAM_BATCH_MAX,
                              .max_bytes = msg_max_record_bytes(s->cfg),
                              .ordered_batches = o->ordered_batches,
                              .key_format = c->fmt.key_schema,
                              .value_format = c->fmt.value_schema,
                              .who = c->who};
    if ((st = ks_substream_check(&c->ss, &so, err, sizeof(err)))) {
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
    ks_substream_start(&c->ss, &so, "stream");
}

/* The group a Subscribe stream's first message names (open's), for the router. */
const char *stream_group_of(const ProtobufCMessage *m)
{
    const Ksidecar__V1__SubscribeRequest *r = (const Ksidecar__V1__SubscribeRequest *)m;
    return r->kind_case == KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_OPEN ? r->open->group : NULL;
}

/* The first message, which must open the stream (the router checked its caller). */
void stream_first(call_t *c, ProtobufCMessage *m)
{
    Ksidecar__V1__SubscribeRequest *r = (Ksidecar__V1__SubscribeRequest *)m;
    if (r->kind_case != KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_OPEN)
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT,
                    "the first message of a Subscribe stream must be open");
    else
        stream_open(c, r->open);
}

/* A later message of an open stream: acks (read in place when that is all it is), nacks,
 * deadline changes and credits. */
void stream_next(call_t *c, grpc_slice sl)
{
    size_t n;
    const char *group = ks_substream_group(&c->ss);
    bool by_position = false;
    char **ids = grpc_fast_ack_ids(sl, &n, &by_position);
    if (ids) {
        grpc_settle_owned(c, group, KS_SETTLE_ACK, 0, NULL, false, ids, n, true, false, 0,
                          by_position);
        return;
    }
    Ksidecar__V1__SubscribeRequest *r = UNPACK(x, ksidecar__v1__subscribe_request, sl);
    if (!r) {
        bad_message(c, "SubscribeRequest");
        return;
    }
    switch (r->kind_case) {
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_OPEN:
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "the stream is already open");
        break;
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_ACK:
        if (r->ack->n_ack_ids)
            grpc_settle_owned(c, group, KS_SETTLE_ACK, 0, NULL, false,
                              ks_strv_pack((const char *const *)r->ack->ack_ids, r->ack->n_ack_ids),
                              r->ack->n_ack_ids, true, r->ack->wait_commit,
                              r->ack->commit_timeout_ms, r->ack->results_by_position);
        break;
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_NACK:
        if (r->nack->n_ack_ids)
            grpc_settle(c, group, KS_SETTLE_NACK, r->nack->delay_ms, r->nack->reason,
                        r->nack->dead_letter, r->nack->ack_ids, r->nack->n_ack_ids, true);
        break;
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_MODIFY_DEADLINE:
        if (r->modify_deadline->n_ack_ids)
            grpc_settle(c, group, KS_SETTLE_EXTEND, r->modify_deadline->deadline_ms, NULL, false,
                        r->modify_deadline->ack_ids, r->modify_deadline->n_ack_ids, true);
        break;
    case KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_CREDITS: {
        char err[512];
        ks_status_t st =
            ks_substream_credits(&c->ss, r->credits->records, r->credits->bytes, err, sizeof(err));
        if (st)
            call_finish(c, grpc_code_of(st), "%s", err);
        break;
    }
    default:
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "empty SubscribeRequest");
    }
    ksidecar__v1__subscribe_request__free_unpacked(r, NULL);
}
