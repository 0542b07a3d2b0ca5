/* grpc_methods.c: the gRPC edge's method table: for each method its path, its request
 * decoder (which sends the engine command) and its reply encoder. The engine's callbacks
 * only store their result with the call and wake a completion-queue thread (call_reply);
 * the encoder runs there. */
#include "edge.h"
#include "grpc_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void settle_ctx_free(settle_ctx_t *x)
{
    free(x->ids); /* one block, strings included */
    free(x);
}

unsigned grpc_fetch_unset(int32_t max, int32_t deadline_ms)
{
    return (max == 0 ? KS_FETCH_UNSET_MAX : 0) | (deadline_ms == 0 ? KS_FETCH_UNSET_DEADLINE : 0);
}

ks_status_t grpc_submit(call_t *c, const ks_cmd_req_t *cmd)
{
    char err[512];
    call_ref(c);
    ks_status_t st = ks_engine_submit(c->s->eng, cmd, err, sizeof(err));
    if (st) {
        call_finish(c, grpc_code_of(st), "%s", err);
        call_unref(c);
    }
    return st;
}

/* ---- replies: the shared policy (ack summary, visibility, status walk) is api/edge.c ---- */

/* One group's status as a GroupStatus (its pieces, at most 7, into allocs); the encoders
 * walk the groups with ks_edge_status_walk. */
static void status_to_pb(const ks_group_status_t *g, Ksidecar__V1__GroupStatus *o, void **allocs,
                         size_t *na)
{
    ksidecar__v1__group_status__init(o);
    o->group = (char *)(uintptr_t)g->name;
    o->static_ = g->is_static;
    o->ordering = (char *)(uintptr_t)g->ordering;
    o->dead_letter_topic = (char *)(uintptr_t)g->dead_letter_topic;
    o->max_attempts = g->max_attempts;
    o->delivered = g->delivered;
    o->redelivered = g->redelivered;
    o->expired = g->expired;
    o->nacked = g->nacked;
    o->acked = g->acked;
    o->dead_lettered = g->dead_lettered;
    o->acks_lost_to_move = g->acks_lost_to_move;
    /* topics: each name of the subscription NUL-terminated in one copy */
    size_t nt = ks_edge_topic_count(g->topics);
    char *tcopy = ks_xstrdup(g->topics);
    allocs[(*na)++] = tcopy;
    char **tv = calloc(nt + 1, sizeof(char *));
    allocs[(*na)++] = tv;
    size_t ti = 0, len;
    const char *cur = g->topics, *name;
    while (ks_edge_topic_next(&cur, &name, &len)) {
        char *t = tcopy + (name - g->topics);
        t[len] = '\0';
        tv[ti++] = t;
    }
    o->n_topics = ti;
    o->topics = tv;
    /* The memory status rides in the partitions' block: one allocation less to track. */
    Ksidecar__V1__PartitionStatus *ps =
        calloc(1, (g->part_cnt + 1) * sizeof(*ps) + sizeof(Ksidecar__V1__MemoryStatus));
    Ksidecar__V1__PartitionStatus **pp = calloc(g->part_cnt + 1, sizeof(*pp));
    if (!ps)
        abort();
    allocs[(*na)++] = ps;
    allocs[(*na)++] = pp;
    Ksidecar__V1__MemoryStatus *mem = (Ksidecar__V1__MemoryStatus *)(void *)&ps[g->part_cnt + 1];
    ksidecar__v1__memory_status__init(mem);
    mem->max_bytes = g->mem_max_bytes;
    mem->used_bytes = g->mem_used_bytes;
    mem->partitions = g->mem_partitions;
    mem->window_share_bytes = g->mem_window_share_bytes;
    mem->kafka_queue_kbytes = g->mem_kafka_queue_kbytes;
    mem->kafka_fetch_bytes = g->mem_kafka_fetch_bytes;
    o->memory = mem;
    for (size_t i = 0; i < g->part_cnt; i++) {
        const ks_part_status_t *p = &g->parts[i];
        ksidecar__v1__partition_status__init(&ps[i]);
        ps[i].topic = (char *)(uintptr_t)p->topic;
        ps[i].partition = p->partition;
        ps[i].state = (char *)(uintptr_t)p->state;
        ps[i].epoch = p->epoch;
        ps[i].committed_offset = p->committed;
        ps[i].high_watermark = p->high_watermark;
        ps[i].lag = p->lag;
        ps[i].in_flight = (int64_t)p->in_flight;
        ps[i].window_records = (int64_t)p->window;
        ps[i].window_bytes = p->window_bytes;
        ps[i].paused = p->paused;
        ps[i].oldest_lease_age_ms = p->oldest_lease_age_ms;
        ps[i].metadata_truncations = p->metadata_truncations;
        ps[i].held_back = p->held_back;
        ps[i].window_memory_bytes = p->window_memory_bytes;
        ps[i].kafka_queue_records = p->kafka_queue_records;
        ps[i].commit_in_flight = p->commit_in_flight;
        ps[i].budget_pauses = p->budget_pauses;
        pp[i] = &ps[i];
    }
    o->n_partitions = g->part_cnt;
    o->partitions = pp;
    Ksidecar__V1__SubscriberStatus *ss = calloc(g->sub_cnt + 1, sizeof(*ss));
    Ksidecar__V1__SubscriberStatus **sp = calloc(g->sub_cnt + 1, sizeof(*sp));
    Ksidecar__V1__Credits *cr = calloc(2 * g->sub_cnt + 1, sizeof(*cr));
    allocs[(*na)++] = ss;
    allocs[(*na)++] = sp;
    allocs[(*na)++] = cr;
    for (size_t i = 0; i < g->sub_cnt; i++) {
        const ks_sub_status_t *s = &g->subs[i];
        ksidecar__v1__subscriber_status__init(&ss[i]);
        ksidecar__v1__credits__init(&cr[2 * i]);
        ksidecar__v1__credits__init(&cr[2 * i + 1]);
        ss[i].name = (char *)(uintptr_t)s->name;
        cr[2 * i].records = s->credit_records;
        cr[2 * i].bytes = s->credit_bytes;
        cr[2 * i + 1].records = s->outstanding_records;
        cr[2 * i + 1].bytes = s->outstanding_bytes;
        ss[i].credits = &cr[2 * i];
        ss[i].outstanding = &cr[2 * i + 1];
        ss[i].waiting = s->waiting;
        sp[i] = &ss[i];
    }
    o->n_subscribers = g->sub_cnt;
    o->subscribers = sp;
}

/* ---- engine callbacks: store the result, wake the edge ----
 * @locality the engine's threads (a group loop, the producer): nothing here encodes or
 * checks a token; the encoders below run on a completion-queue thread. */

static void on_batch(ks_batch_t *b, void *opaque)
{
    call_reply(opaque, b, 0, NULL);
}

static void on_settled(ks_ack_result_t *res, size_t n, void *opaque)
{
    settle_ctx_t *x = opaque;
    call_t *c = x->c;
    if (x->stream) { /* encoded when its send starts */
        call_send_item(c, (send_item_t){.acks = x, .results = res});
        call_unref(c);
        return;
    }
    call_reply(c, res, n, x);
}

static void on_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    call_reply(opaque, groups, n, NULL);
}

static void on_seek(ks_seek_result_t *r, void *opaque)
{
    call_reply(opaque, r, 0, NULL);
}

static void on_produced(ks_produce_result_t *res, size_t n, void *opaque)
{
    call_reply(opaque, res, n, NULL);
}

/* Sends ids (one block, as ks_strv_pack makes; settle_owned takes it) to the engine.
 * Returns false (call finished) on a synchronous error. */
bool settle_owned(call_t *c, const char *group, ks_settle_op_t op, int64_t ms, const char *reason,
                  char **ids, size_t n, bool stream)
{
    settle_ctx_t *x = calloc(1, sizeof(*x));
    if (!x)
        abort();
    x->c = c;
    x->stream = stream;
    x->n = n;
    x->ids = ids;
    char err[512];
    ks_status_t st =
        ks_auth_allow_ack_ids(c->s->auth, c->who, (const char *const *)x->ids, n, err, sizeof(err));
    if (st) {
        settle_ctx_free(x);
        call_finish(c, grpc_code_of(st), "%s", err);
        return false;
    }
    ks_cmd_req_t cmd = {.type = KS_CMD_SETTLE, /* a unary row's command, or a stream's acks */
                        .group = group,
                        .u.settle = {.op = op,
                                     .ms = ms,
                                     .reason = reason,
                                     .ack_ids = (const char *const *)x->ids,
                                     .n = n,
                                     .cb = on_settled,
                                     .opaque = x}};
    if (grpc_submit(c, &cmd)) {
        settle_ctx_free(x);
        return false;
    }
    return true;
}

/* settle_owned for ids the caller keeps. */
bool settle(call_t *c, const char *group, ks_settle_op_t op, int64_t ms, const char *reason,
            char **ids, size_t n, bool stream)
{
    return settle_owned(c, group, op, ms, reason, ks_strv_pack((const char *const *)ids, n), n,
                        stream);
}

/* ---- reply encoders ----
 * Each takes the result call_reply stored (r), answers, frees the result and drops the
 * command's reference on c. @locality a completion-queue thread */

static void encode_fetch(call_t *c, const reply_t *r)
{
    ks_batch_t *b = r->res;
    if (b->status) {
        call_finish(c, grpc_code_of(b->status), "%s", b->message);
    } else {
        call_send_bb(c, encode_records(b, false));
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    ks_batch_free(b);
    call_unref(c);
}

static void encode_settled(call_t *c, const reply_t *r)
{
    ks_ack_result_t *res = r->res;
    size_t n = r->n;
    settle_ctx_t *x = r->ctx;
    Ksidecar__V1__AckResult *rs = calloc(n + 1, sizeof(*rs));
    Ksidecar__V1__AckResult **rp = calloc(n + 1, sizeof(*rp));
    if (!rs || !rp)
        abort();
    for (size_t i = 0; i < n; i++) {
        ksidecar__v1__ack_result__init(&rs[i]);
        rs[i].ack_id = x->ids[i];
        rs[i].status = ack_status_of(res[i].status);
        rs[i].message = (char *)(uintptr_t)res[i].reason;
        rp[i] = &rs[i];
    }
    ks_edge_ack_summary_t sum;
    ks_edge_ack_summarize(res, n, &sum);
    if (sum.status != KS_OK) {
        call_finish(c, grpc_code_of(sum.status), "%s", sum.message);
    } else {
        Ksidecar__V1__AckResponse ar = KSIDECAR__V1__ACK_RESPONSE__INIT;
        ar.n_results = n;
        ar.results = rp;
        ar.accepted = (int32_t)sum.accepted;
        ar.rejected = (int32_t)sum.rejected;
        call_send(c, &ar.base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    free(rs);
    free(rp);
    free(res);
    settle_ctx_free(x);
    call_unref(c);
}

static void status_free(ks_group_status_t **groups, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ks_group_status_free(groups[i]);
    free(groups);
}

/* The protobufs of a status walk (ks_edge_status_walk): filled one group at a time. */
typedef struct {
    Ksidecar__V1__GroupStatus *gs;
    Ksidecar__V1__GroupStatus **gp;
    void **allocs;
    size_t na, cnt;
} pb_walk_t;

static void walk_to_pb(const ks_group_status_t *g, void *ctx)
{
    pb_walk_t *w = ctx;
    status_to_pb(g, &w->gs[w->cnt], w->allocs, &w->na);
    w->gp[w->cnt] = &w->gs[w->cnt];
    w->cnt++;
}

/* GetGroup's and ListGroups' reply: the walk's groups, on this completion-queue thread. */
static void encode_status(call_t *c, const reply_t *r, bool one)
{
    ks_group_status_t **groups = r->res;
    size_t n = r->n;
    /* status_to_pb makes at most 7 allocations a group. */
    pb_walk_t w = {.gs = calloc(n + 1, sizeof(*w.gs)),
                   .gp = calloc(n + 1, sizeof(*w.gp)),
                   .allocs = calloc(8 * n + 8, sizeof(void *))};
    if (!w.gs || !w.gp || !w.allocs)
        abort();
    const char *msg = NULL;
    ks_status_t st = ks_edge_status_walk(groups, n, one, c->s->auth, c->who, walk_to_pb, &w, &msg);
    if (st != KS_OK) {
        call_finish(c, grpc_code_of(st), "%s", msg);
    } else if (one) {
        call_send(c, &w.gs[0].base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    } else {
        Ksidecar__V1__ListGroupsResponse lr = KSIDECAR__V1__LIST_GROUPS_RESPONSE__INIT;
        lr.n_groups = w.cnt;
        lr.groups = w.gp;
        call_send(c, &lr.base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    for (size_t i = 0; i < w.na; i++)
        free(w.allocs[i]);
    free(w.allocs);
    free(w.gs);
    free(w.gp);
    status_free(groups, n);
    call_unref(c);
}

static void encode_group(call_t *c, const reply_t *r)
{
    encode_status(c, r, true);
}

static void encode_groups(call_t *c, const reply_t *r)
{
    encode_status(c, r, false);
}

static void encode_seek(call_t *c, const reply_t *rp)
{
    ks_seek_result_t *r = rp->res;
    if (r->status) {
        call_finish(c, grpc_code_of(r->status), "%s", r->message);
    } else {
        Ksidecar__V1__SeekResponse sr = KSIDECAR__V1__SEEK_RESPONSE__INIT;
        sr.offset = r->offset;
        sr.stale_leases = r->stale_leases;
        call_send(c, &sr.base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    free(r);
    call_unref(c);
}

static void encode_produced(call_t *c, const reply_t *r)
{
    ks_produce_result_t *res = r->res;
    size_t n = r->n;
    Ksidecar__V1__ProduceResult *rs = calloc(n + 1, sizeof(*rs));
    Ksidecar__V1__ProduceResult **rp = calloc(n + 1, sizeof(*rp));
    if (!rs || !rp)
        abort();
    for (size_t i = 0; i < n; i++) {
        ksidecar__v1__produce_result__init(&rs[i]);
        rs[i].partition = res[i].partition;
        rs[i].offset = res[i].offset;
        rs[i].error = res[i].error;
        rp[i] = &rs[i];
    }
    Ksidecar__V1__ProduceResponse pr = KSIDECAR__V1__PRODUCE_RESPONSE__INIT;
    pr.n_results = n;
    pr.results = rp;
    call_send(c, &pr.base);
    call_finish(c, GRPC_STATUS_OK, "%s", "");
    free(rs);
    free(rp);
    free(res);
    call_unref(c);
}

void bad_message(call_t *c, const char *what)
{
    call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "the request is not a valid %s protobuf message",
                what);
}

/* ---- request decoders ----
 * Each reads one request message, checks it, and sends its command to the engine (or
 * finishes the call). @locality a completion-queue thread */

static void decode_fetch(call_t *c, grpc_slice sl)
{
    ks_grpc_t *s = c->s;
    Ksidecar__V1__FetchRequest *r = UNPACK(x, ksidecar__v1__fetch_request, sl);
    if (!r) {
        bad_message(c, "FetchRequest");
        return;
    }
    if (authorized(c, r->group) &&
        scoped(c, KS_SCOPE_CONSUME, "consume", (const char *const *)r->topics, r->n_topics)) {
        ks_cmd_req_t cmd = {.type = c->row->cmd,
                            .group = r->group,
                            .u.fetch = {.topics = (const char *const *)r->topics,
                                        .topic_cnt = r->n_topics,
                                        .opts = {.max = r->max,
                                                 .wait_ms = r->wait_ms,
                                                 .deadline_ms = r->deadline_ms,
                                                 .subscriber = r->subscriber,
                                                 .max_bytes = msg_max_record_bytes(s->cfg),
                                                 .ordered_batches = r->ordered_batches},
                                        .unset = grpc_fetch_unset(r->max, r->deadline_ms),
                                        .cb = on_batch,
                                        .opaque = c}};
        (void)grpc_submit(c, &cmd);
    }
    ksidecar__v1__fetch_request__free_unpacked(r, NULL);
}

static void decode_ack(call_t *c, grpc_slice sl)
{
    Ksidecar__V1__AckRequest *r = UNPACK(x, ksidecar__v1__ack_request, sl);
    if (!r) {
        bad_message(c, "AckRequest");
        return;
    }
    if (authorized(c, r->group))
        settle(c, r->group, KS_SETTLE_ACK, 0, NULL, r->ack_ids, r->n_ack_ids, false);
    ksidecar__v1__ack_request__free_unpacked(r, NULL);
}

static void decode_nack(call_t *c, grpc_slice sl)
{
    Ksidecar__V1__NackRequest *r = UNPACK(x, ksidecar__v1__nack_request, sl);
    if (!r) {
        bad_message(c, "NackRequest");
        return;
    }
    if (authorized(c, r->group))
        settle(c, r->group, KS_SETTLE_NACK, r->delay_ms, r->reason, r->ack_ids, r->n_ack_ids,
               false);
    ksidecar__v1__nack_request__free_unpacked(r, NULL);
}

static void decode_modify(call_t *c, grpc_slice sl)
{
    Ksidecar__V1__ModifyAckDeadlineRequest *r =
        UNPACK(x, ksidecar__v1__modify_ack_deadline_request, sl);
    if (!r) {
        bad_message(c, "ModifyAckDeadlineRequest");
        return;
    }
    if (authorized(c, r->group))
        settle(c, r->group, KS_SETTLE_EXTEND, r->deadline_ms, NULL, r->ack_ids, r->n_ack_ids,
               false);
    ksidecar__v1__modify_ack_deadline_request__free_unpacked(r, NULL);
}

/* The status command for group (NULL: every group). */
static void submit_status(call_t *c, const char *group)
{
    ks_cmd_req_t cmd = {
        .type = c->row->cmd, .group = group, .u.status = {.cb = on_status, .opaque = c}};
    if (authorized(c, group))
        (void)grpc_submit(c, &cmd);
}

static void decode_get_group(call_t *c, grpc_slice sl)
{
    Ksidecar__V1__GetGroupRequest *r = UNPACK(x, ksidecar__v1__get_group_request, sl);
    if (!r) {
        bad_message(c, "GetGroupRequest");
        return;
    }
    submit_status(c, r->group);
    ksidecar__v1__get_group_request__free_unpacked(r, NULL);
}

static void decode_list_groups(call_t *c, grpc_slice sl)
{
    Ksidecar__V1__ListGroupsRequest *lr = UNPACK(x, ksidecar__v1__list_groups_request, sl);
    if (!lr) {
        bad_message(c, "ListGroupsRequest");
        return;
    }
    ksidecar__v1__list_groups_request__free_unpacked(lr, NULL);
    submit_status(c, NULL);
}

static void decode_seek(call_t *c, grpc_slice sl)
{
    Ksidecar__V1__SeekRequest *r = UNPACK(x, ksidecar__v1__seek_request, sl);
    if (!r) {
        bad_message(c, "SeekRequest");
        return;
    }
    if (authorized(c, r->group) &&
        scoped(c, KS_SCOPE_CONSUME, "seek", (const char *const *)&r->topic, 1)) {
        ks_seek_kind_t kind;
        int64_t v = 0;
        switch (r->target_case) {
        case KSIDECAR__V1__SEEK_REQUEST__TARGET_OFFSET:
            kind = KS_SEEK_OFFSET;
            v = r->offset;
            break;
        case KSIDECAR__V1__SEEK_REQUEST__TARGET_TIMESTAMP_MS:
            kind = KS_SEEK_TIMESTAMP;
            v = r->timestamp_ms;
            break;
        case KSIDECAR__V1__SEEK_REQUEST__TARGET_EARLIEST:
            kind = KS_SEEK_EARLIEST;
            break;
        case KSIDECAR__V1__SEEK_REQUEST__TARGET_LATEST:
            kind = KS_SEEK_LATEST;
            break;
        default:
            call_finish(c, GRPC_STATUS_INVALID_ARGUMENT,
                        "set one target: offset, timestamp_ms, earliest or latest");
            ksidecar__v1__seek_request__free_unpacked(r, NULL);
            return;
        }
        ks_cmd_req_t cmd = {.type = c->row->cmd,
                            .group = r->group,
                            .u.seek = {.topic = r->topic,
                                       .partition = r->partition,
                                       .kind = kind,
                                       .value = v,
                                       .cb = on_seek,
                                       .opaque = c}};
        (void)grpc_submit(c, &cmd);
    }
    ksidecar__v1__seek_request__free_unpacked(r, NULL);
}

static void decode_produce(call_t *c, grpc_slice sl)
{
    Ksidecar__V1__ProduceRequest *r = UNPACK(x, ksidecar__v1__produce_request, sl);
    if (!r) {
        bad_message(c, "ProduceRequest");
        return;
    }
    bool ok = authorized(c, NULL);
    for (size_t i = 0; ok && i < r->n_records; i++)
        ok = scoped(c, KS_SCOPE_PRODUCE, "produce to", (const char *const *)&r->records[i]->topic,
                    1);
    if (ok) {
        size_t nh = 0;
        for (size_t i = 0; i < r->n_records; i++)
            nh += r->records[i]->n_headers;
        ks_produce_rec_t *recs = calloc(r->n_records + 1, sizeof(*recs));
        ks_header_t *hs = calloc(nh + 1, sizeof(*hs));
        if (!recs || !hs)
            abort();
        size_t h = 0;
        for (size_t i = 0; i < r->n_records; i++) {
            Ksidecar__V1__ProduceRecord *p = r->records[i];
            recs[i].topic = p->topic;
            recs[i].partition = p->has_partition ? p->partition : -1;
            recs[i].key = p->key_null ? NULL : p->key.data ? p->key.data : (const void *)"";
            recs[i].key_len = p->key.len;
            recs[i].value = p->value_null ? NULL : p->value.data ? p->value.data : (const void *)"";
            recs[i].value_len = p->value.len;
            recs[i].headers = &hs[h];
            recs[i].header_cnt = p->n_headers;
            for (size_t k = 0; k < p->n_headers; k++, h++) {
                hs[h].name = p->headers[k]->key;
                hs[h].value =
                    p->headers[k]->value.data ? p->headers[k]->value.data : (const void *)"";
                hs[h].value_len = p->headers[k]->value.len;
            }
        }
        ks_cmd_req_t cmd = {
            .type = c->row->cmd,
            .u.produce = {.recs = recs, .n = r->n_records, .cb = on_produced, .opaque = c}};
        (void)grpc_submit(c, &cmd);
        free(recs);
        free(hs);
    }
    ksidecar__v1__produce_request__free_unpacked(r, NULL);
}

/* ---- the method table ----
 * A new method for an existing command: one row, a decoder and an encoder. */
static const method_row_t methods[] = {
    {"/ksidecar.v1.Consumer/Subscribe", M_SUBSCRIBE, KS_CMD_FETCH, true, true, handle_subscribe_msg,
     NULL},
    {"/ksidecar.v1.Consumer/Fetch", M_FETCH, KS_CMD_FETCH, false, true, decode_fetch, encode_fetch},
    {"/ksidecar.v1.Consumer/Ack", M_ACK, KS_CMD_SETTLE, false, true, decode_ack, encode_settled},
    {"/ksidecar.v1.Consumer/Nack", M_NACK, KS_CMD_SETTLE, false, true, decode_nack, encode_settled},
    {"/ksidecar.v1.Consumer/ModifyAckDeadline", M_MODIFY, KS_CMD_SETTLE, false, true, decode_modify,
     encode_settled},
    {"/ksidecar.v1.Consumer/GetGroup", M_GET_GROUP, KS_CMD_STATUS, false, true, decode_get_group,
     encode_group},
    {"/ksidecar.v1.Consumer/ListGroups", M_LIST_GROUPS, KS_CMD_STATUS, false, true,
     decode_list_groups, encode_groups},
    {"/ksidecar.v1.Consumer/Seek", M_SEEK, KS_CMD_SEEK, false, true, decode_seek, encode_seek},
    {"/ksidecar.v1.Producer/Produce", M_PRODUCE, KS_CMD_PRODUCE, false, true, decode_produce,
     encode_produced},
    {"/grpc.health.v1.Health/Check", M_HEALTH_CHECK, KS_CMD_NONE, false, false, decode_health,
     NULL},
    {"/grpc.health.v1.Health/Watch", M_HEALTH_WATCH, KS_CMD_NONE, false, false, decode_health,
     NULL},
    {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", M_REFLECT_V1, KS_CMD_NONE, true,
     false, handle_reflection_msg, NULL},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", M_REFLECT_V1ALPHA,
     KS_CMD_NONE, true, false, handle_reflection_msg, NULL},
};

const method_row_t *method_find(const char *path, size_t len)
{
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strlen(methods[i].path) == len && !memcmp(methods[i].path, path, len))
            return &methods[i];
    return NULL;
}
