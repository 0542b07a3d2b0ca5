/* grpc_methods.c: the gRPC edge's method table: for each method its path, its request
 * decoder (which sends the engine command, through grpc_submit.c) and its reply encoder. The
 * engine's callbacks only store their result with the call and wake a completion-queue thread
 * (call_reply); the encoder runs there. */
#include "edge.h"
#include "grpc_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- replies: the shared policy (ack summary, visibility, status walk) is api/edge.c ---- */

/* The group status: a message per level, a field per row of proxy/status_fields.h. */

/* The allocations of one status reply's messages, freed together once it is sent. */
typedef struct {
    void **v;
    size_t n, cap;
} pb_arena_t;

/* A zeroed block of size bytes, freed with a. Aborts when out of memory. */
static void *pb_new(pb_arena_t *a, size_t size)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 16;
        a->v = realloc(a->v, a->cap * sizeof(*a->v));
        if (!a->v)
            abort();
    }
    void *p = calloc(1, size);
    if (!p)
        abort();
    return a->v[a->n++] = p;
}

static void pb_arena_free(pb_arena_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
}

/* Sets o's field pb from member m of s, by the row's type. Strings are borrowed from s,
 * which outlives the send. */
#define PB_STR(o, pb, s, m, a)      (o)->pb = (char *)(uintptr_t)(s)->m
#define PB_NAME(o, pb, s, m, a)     PB_STR(o, pb, s, m, a)
#define PB_NAME_OPT(o, pb, s, m, a) PB_STR(o, pb, s, m, a)
#define PB_TEXT(o, pb, s, m, a)     PB_STR(o, pb, s, m, a)
#define PB_BOOL(o, pb, s, m, a)     (o)->pb = (s)->m
#define PB_I32(o, pb, s, m, a)      (o)->pb = (s)->m
#define PB_I64(o, pb, s, m, a)      (o)->pb = (s)->m
#define PB_I64_OPT(o, pb, s, m, a)  (o)->pb = (s)->m
#define PB_TOPICS(o, pb, s, m, a)   ((o)->n_##pb = (s)->topic_cnt, (o)->pb = (s)->m)
#define PB_PARTS(o, pb, s, m, a)                                                                   \
    ((o)->n_##pb = (s)->part_cnt, (o)->pb = pb_parts((s)->m, (s)->part_cnt, a))
#define PB_SUBS(o, pb, s, m, a)                                                                    \
    ((o)->n_##pb = (s)->sub_cnt, (o)->pb = pb_subs((s)->m, (s)->sub_cnt, a))
#define PB_COUNTERS(o, pb, s, m, a) pb_counters(o, s, a)
#define PB_MEMORY(o, pb, s, m, a)   (o)->pb = pb_memory(&(s)->m, a)
#define PB_CREDITS(o, pb, s, m, a)  (o)->pb = pb_credits(&(s)->m, a)
#define PB_HIST(o, pb, s, m, a)     (o)->pb = pb_hist(&(s)->m, a)
/* A row: its field of message o, from struct s. */
#define PB_ROW(type, m, pb, name, num, kind, doc) PB_##type(o, pb, s, m, a);
/* fn(s, a): the message of one level's struct s, allocated in a. */
#define PB_LEVEL(fn, ctype, pbtype, init, LIST)                                                    \
    static pbtype *fn(const ctype *s, pb_arena_t *a)                                               \
    {                                                                                              \
        pbtype *o = pb_new(a, sizeof(*o));                                                         \
        init(o);                                                                                   \
        LIST(PB_ROW)                                                                               \
        return o;                                                                                  \
    }

PB_LEVEL(pb_credits, ks_credits_status_t, Ksidecar__V1__Credits, ksidecar__v1__credits__init,
         KS_STATUS_CREDITS_FIELDS)
PB_LEVEL(pb_memory, ks_mem_status_t, Ksidecar__V1__MemoryStatus, ksidecar__v1__memory_status__init,
         KS_STATUS_MEMORY_FIELDS)
PB_LEVEL(pb_part, ks_part_status_t, Ksidecar__V1__PartitionStatus,
         ksidecar__v1__partition_status__init, KS_STATUS_PART_FIELDS)
PB_LEVEL(pb_sub, ks_sub_status_t, Ksidecar__V1__SubscriberStatus,
         ksidecar__v1__subscriber_status__init, KS_STATUS_SUB_FIELDS)

/* The counters are GroupStatus's own fields. */
/* A histogram's message; its arrays point into h and the shared bounds (borrowed). */
static Ksidecar__V1__Histogram *pb_hist(const ks_hist_t *h, pb_arena_t *a)
{
    Ksidecar__V1__Histogram *o = pb_new(a, sizeof(*o));
    ksidecar__v1__histogram__init(o);
    o->n_bounds_ms = KS_HIST_BUCKETS;
    o->bounds_ms = (int64_t *)(uintptr_t)ks_hist_bounds_ms;
    o->n_counts = KS_HIST_BUCKETS + 1;
    o->counts = (int64_t *)(uintptr_t)h->counts;
    o->sum_ms = h->sum_ms;
    o->count = h->count;
    return o;
}

static void pb_counters(Ksidecar__V1__GroupStatus *o, const ks_group_status_t *s, pb_arena_t *a)
{
    KS_STATUS_COUNTER_FIELDS(PB_ROW)
}

static Ksidecar__V1__PartitionStatus **pb_parts(const ks_part_status_t *v, size_t n, pb_arena_t *a)
{
    Ksidecar__V1__PartitionStatus **pp = pb_new(a, (n + 1) * sizeof(*pp));
    for (size_t i = 0; i < n; i++)
        pp[i] = pb_part(&v[i], a);
    return pp;
}

static Ksidecar__V1__SubscriberStatus **pb_subs(const ks_sub_status_t *v, size_t n, pb_arena_t *a)
{
    Ksidecar__V1__SubscriberStatus **sp = pb_new(a, (n + 1) * sizeof(*sp));
    for (size_t i = 0; i < n; i++)
        sp[i] = pb_sub(&v[i], a);
    return sp;
}

/* One group's status as a GroupStatus, in a; the encoders walk the groups with
 * ks_edge_status_walk. */
PB_LEVEL(status_to_pb, ks_group_status_t, Ksidecar__V1__GroupStatus,
         ksidecar__v1__group_status__init, KS_STATUS_GROUP_FIELDS)

/* ---- engine callbacks: store the result, wake the edge ----
 * @locality the engine's threads (a group loop, the producer): nothing here encodes or
 * checks a token; the encoders below run on a completion-queue thread. */

static void on_batch(ks_batch_t *b, void *opaque)
{
    call_reply(opaque, b, 0, NULL);
}

static void on_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    call_reply(opaque, groups, n, NULL);
}

static void on_seek(ks_seek_result_t *r, void *opaque)
{
    call_reply(opaque, r, 0, NULL);
}

static void on_redrive(ks_redrive_result_t *r, void *opaque)
{
    call_reply(opaque, r, 0, NULL);
}

/* Whether the call's caller may produce to topic: a redrive's check of each record's original
 * topic (the redrive's thread, while the command holds the call). */
static bool redrive_allow(const char *topic, void *opaque)
{
    call_t *c = opaque;
    const ks_principal_t *cur = ks_auth_current(c->s->auth, c->who);
    bool ok = ks_auth_covers(c->s->auth, cur, KS_SCOPE_PRODUCE, topic);
    ks_auth_release(cur);
    return ok;
}

/* ---- reply encoders ----
 * Each takes the result call_reply stored (r), answers, frees the result and drops the
 * command's reference on c. @locality a completion-queue thread */

/* A Fetch's batch goes out (encoded when its send starts); the send's end reports it to the
 * engine (grpc_call.c), so its leases start only once the transport took it, and its records
 * go back counting no attempt when the client left. A caller a tokens-file reload removed
 * (or whose scopes it narrowed) while the fetch waited gets the error instead, as an HTTP
 * long-poll does, and its records go back now. */
static void encode_fetch(call_t *c, const reply_t *r)
{
    ks_batch_t *b = r->res;
    char err[512];
    ks_status_t st = b->status;
    if (st)
        snprintf(err, sizeof(err), "%s", b->message);
    else
        st = ks_edge_fetch_still_allowed(c->s->auth, c->who, c->group, b, err, sizeof(err));
    if (st) {
        if (b->deliver_token)
            ks_engine_delivered(c->s->eng, c->group, b->deliver_token, false);
        call_finish(c, grpc_code_of(st), "%s", err);
        ks_batch_free(b);
    } else {
        call_send_item(c, (send_item_t){.batch = b});
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    call_unref(c);
}

static void encode_settled(call_t *c, const reply_t *r)
{
    ks_ack_result_t *res = r->res;
    size_t n = r->n, m = 0;
    settle_ctx_t *x = r->ctx;
    Ksidecar__V1__AckResult *rs = calloc(n + 1, sizeof(*rs));
    Ksidecar__V1__AckResult **rp = calloc(n + 1, sizeof(*rp));
    char **ids = calloc(n + 1, sizeof(*ids)); /* a range's single ids */
    if (!rs || !rp || !ids)
        abort();
    ks_edge_ack_walk_t w;
    ks_edge_ack_walk_init(&w, (const char *const *)x->ids, x->n, n);
    while (ks_edge_ack_walk_next(&w) && w.j < n) {
        size_t i = w.j;
        if (x->by_position && ks_edge_ack_quiet(&res[i]))
            continue;
        ksidecar__v1__ack_result__init(&rs[m]);
        rs[m].ack_id = w.range ? (ids[m] = ks_xstrdup(ks_edge_ack_walk_id(&w))) : x->ids[w.pos];
        rs[m].status = ack_result_status(&res[i]);
        rs[m].message = (char *)(uintptr_t)res[i].reason;
        rs[m].committed_offset = res[i].commit ? res[i].committed_offset : 0;
        rs[m].position = x->by_position ? (int32_t)w.pos : 0;
        rp[m] = &rs[m];
        m++;
    }
    ks_edge_ack_summary_t sum;
    ks_edge_ack_summarize(res, n, &sum);
    if (sum.status != KS_OK) {
        call_finish(c, grpc_code_of(sum.status), "%s", sum.message);
    } else {
        Ksidecar__V1__AckResponse ar = KSIDECAR__V1__ACK_RESPONSE__INIT;
        ar.n_results = m;
        ar.results = rp;
        /* By position: the records left out, so that accepted and the results listed
         * add up to the records named (an ACCEPTED after a commit wait that ran out is
         * listed). */
        ar.accepted = x->by_position ? (int32_t)(n - m) : (int32_t)sum.accepted;
        ar.rejected = (int32_t)sum.rejected;
        call_send(c, &ar.base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    for (size_t i = 0; i < m; i++)
        free(ids[i]);
    free(ids);
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
    Ksidecar__V1__GroupStatus **gp;
    pb_arena_t a;
    size_t cnt;
} pb_walk_t;

static void walk_to_pb(const ks_group_status_t *g, void *ctx)
{
    pb_walk_t *w = ctx;
    w->gp[w->cnt++] = status_to_pb(g, &w->a);
}

/* GetGroup's and ListGroups' reply: the walk's groups, on this completion-queue thread. */
static void encode_status(call_t *c, const reply_t *r, bool one)
{
    ks_group_status_t **groups = r->res;
    size_t n = r->n;
    pb_walk_t w = {.gp = calloc(n + 1, sizeof(*w.gp))};
    if (!w.gp)
        abort();
    const char *msg = NULL;
    ks_status_t st = ks_edge_status_walk(groups, n, one, c->s->auth, c->who, walk_to_pb, &w, &msg);
    if (st != KS_OK) {
        call_finish(c, grpc_code_of(st), "%s", msg);
    } else if (one) {
        call_send(c, &w.gp[0]->base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    } else {
        Ksidecar__V1__ListGroupsResponse lr = KSIDECAR__V1__LIST_GROUPS_RESPONSE__INIT;
        lr.n_groups = w.cnt;
        lr.groups = w.gp;
        call_send(c, &lr.base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    pb_arena_free(&w.a);
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

/* n items (one block) as RedriveItem messages, into *out (one block of pointers). */
static Ksidecar__V1__RedriveItem *redrive_items(ks_redrive_item_t *it, size_t n,
                                                Ksidecar__V1__RedriveItem ***out)
{
    Ksidecar__V1__RedriveItem *ms = calloc(n + 1, sizeof(*ms));
    *out = calloc(n + 1, sizeof(**out));
    if (!ms || !*out)
        abort();
    for (size_t i = 0; i < n; i++) {
        ksidecar__v1__redrive_item__init(&ms[i]);
        ms[i].partition = it[i].partition;
        ms[i].offset = it[i].offset;
        ms[i].redriven = it[i].redriven;
        ms[i].reason = it[i].reason;
        (*out)[i] = &ms[i];
    }
    return ms;
}

static void encode_redrive(call_t *c, const reply_t *rp)
{
    ks_redrive_result_t *r = rp->res;
    if (r->status) {
        call_finish(c, grpc_code_of(r->status), "%s", r->message);
        ks_redrive_result_free(r);
        call_unref(c);
        return;
    }
    Ksidecar__V1__RedriveResponse rr = KSIDECAR__V1__REDRIVE_RESPONSE__INIT;
    rr.dead_letter_topic = r->dead_letter_topic;
    rr.dry_run = r->dry_run;
    rr.moved = r->moved;
    rr.held_total = r->held_total;
    rr.skipped_total = r->skipped_total;
    rr.remaining = r->remaining;
    rr.error = r->error;
    Ksidecar__V1__RedriveItem *held = redrive_items(r->held, r->held_cnt, &rr.held);
    Ksidecar__V1__RedriveItem *skipped = redrive_items(r->skipped, r->skipped_cnt, &rr.skipped);
    rr.n_held = r->held_cnt;
    rr.n_skipped = r->skipped_cnt;
    Ksidecar__V1__RedriveResponse__ByTopicEntry *bt = calloc(r->topic_cnt + 1, sizeof(*bt));
    Ksidecar__V1__RedriveOffset *no = calloc(r->part_cnt + 1, sizeof(*no));
    rr.by_topic = calloc(r->topic_cnt + 1, sizeof(*rr.by_topic));
    rr.next_offsets = calloc(r->part_cnt + 1, sizeof(*rr.next_offsets));
    if (!bt || !no || !rr.by_topic || !rr.next_offsets)
        abort();
    for (size_t i = 0; i < r->topic_cnt; i++) {
        ksidecar__v1__redrive_response__by_topic_entry__init(&bt[i]);
        bt[i].key = r->by_topic[i].topic;
        bt[i].value = r->by_topic[i].moved;
        rr.by_topic[i] = &bt[i];
    }
    for (size_t i = 0; i < r->part_cnt; i++) {
        ksidecar__v1__redrive_offset__init(&no[i]);
        no[i].partition = r->parts[i].partition;
        no[i].offset = r->parts[i].next_offset;
        rr.next_offsets[i] = &no[i];
    }
    rr.n_by_topic = r->topic_cnt;
    rr.n_next_offsets = r->part_cnt;
    call_send(c, &rr.base);
    call_finish(c, GRPC_STATUS_OK, "%s", "");
    free(held);
    free(rr.held);
    free(skipped);
    free(rr.skipped);
    free(bt);
    free(rr.by_topic);
    free(no);
    free(rr.next_offsets);
    ks_redrive_result_free(r);
    call_unref(c);
}

/* ---- request decoders ----
 * Each takes one request message (borrowed: the router decoded it and checked the caller
 * against the group it names), checks the rest, and sends its command to the engine (or
 * finishes the call). @locality a completion-queue thread */

/* The group each request names, for the router's caller check. */
#define GROUP_OF(fn, type)                                                                         \
    static const char *fn(const ProtobufCMessage *m)                                               \
    {                                                                                              \
        return ((const type *)m)->group;                                                           \
    }
GROUP_OF(group_of_fetch, Ksidecar__V1__FetchRequest)
GROUP_OF(group_of_ack, Ksidecar__V1__AckRequest)
GROUP_OF(group_of_nack, Ksidecar__V1__NackRequest)
GROUP_OF(group_of_modify, Ksidecar__V1__ModifyAckDeadlineRequest)
GROUP_OF(group_of_get_group, Ksidecar__V1__GetGroupRequest)
GROUP_OF(group_of_seek, Ksidecar__V1__SeekRequest)
GROUP_OF(group_of_redrive, Ksidecar__V1__RedriveRequest)
#undef GROUP_OF

static void decode_fetch(call_t *c, ProtobufCMessage *m)
{
    ks_grpc_t *s = c->s;
    Ksidecar__V1__FetchRequest *r = (Ksidecar__V1__FetchRequest *)m;
    char ferr[256];
    if (!grpc_schema_formats(r->value_format, r->key_format, &c->fmt, ferr, sizeof(ferr))) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", ferr);
        return;
    }
    if (grpc_scoped(c, KS_SCOPE_CONSUME, "consume", (const char *const *)r->topics, r->n_topics)) {
        pthread_mutex_lock(&c->lock);
        c->group = ks_xstrdup(r->group); /* for the report of its batch */
        pthread_mutex_unlock(&c->lock);
        ks_cmd_req_t cmd = {.type = c->row->cmd,
                            .group = r->group,
                            .u.fetch = {.topics = (const char *const *)r->topics,
                                        .topic_cnt = r->n_topics,
                                        .opts = {.max = r->max,
                                                 .wait_ms = r->wait_ms,
                                                 .deadline_ms = r->deadline_ms,
                                                 .subscriber = r->subscriber,
                                                 .max_bytes = msg_max_record_bytes(s->cfg),
                                                 .confirm = 1,
                                                 .transport = "grpc",
                                                 .ordered_batches = r->ordered_batches,
                                                 .key_format = c->fmt.key_schema,
                                                 .value_format = c->fmt.value_schema},
                                        .unset = grpc_fetch_unset(r->max, r->deadline_ms),
                                        .cb = on_batch,
                                        .opaque = c}};
        (void)grpc_submit(c, &cmd);
    }
}

static void decode_ack(call_t *c, ProtobufCMessage *m)
{
    Ksidecar__V1__AckRequest *r = (Ksidecar__V1__AckRequest *)m;
    grpc_settle_owned(c, r->group, KS_SETTLE_ACK, 0, NULL, false,
                      ks_strv_pack((const char *const *)r->ack_ids, r->n_ack_ids), r->n_ack_ids,
                      false, r->wait_commit, r->commit_timeout_ms, r->results_by_position);
}

static void decode_nack(call_t *c, ProtobufCMessage *m)
{
    Ksidecar__V1__NackRequest *r = (Ksidecar__V1__NackRequest *)m;
    grpc_settle(c, r->group, KS_SETTLE_NACK, r->delay_ms, r->reason, r->dead_letter, r->ack_ids,
                r->n_ack_ids, false);
}

static void decode_modify(call_t *c, ProtobufCMessage *m)
{
    Ksidecar__V1__ModifyAckDeadlineRequest *r = (Ksidecar__V1__ModifyAckDeadlineRequest *)m;
    grpc_settle(c, r->group, KS_SETTLE_EXTEND, r->deadline_ms, NULL, false, r->ack_ids,
                r->n_ack_ids, false);
}

/* The status command for group (NULL: every group). */
static void submit_status(call_t *c, const char *group)
{
    ks_cmd_req_t cmd = {
        .type = c->row->cmd, .group = group, .u.status = {.cb = on_status, .opaque = c}};
    (void)grpc_submit(c, &cmd);
}

static void decode_get_group(call_t *c, ProtobufCMessage *m)
{
    Ksidecar__V1__GetGroupRequest *r = (Ksidecar__V1__GetGroupRequest *)m;
    submit_status(c, r->group);
}

static void decode_list_groups(call_t *c, ProtobufCMessage *m)
{
    (void)m;
    submit_status(c, NULL);
}

static void decode_seek(call_t *c, ProtobufCMessage *m)
{
    Ksidecar__V1__SeekRequest *r = (Ksidecar__V1__SeekRequest *)m;
    if (grpc_scoped(c, KS_SCOPE_CONSUME, "seek", (const char *const *)&r->topic, 1)) {
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
}

static void decode_redrive(call_t *c, ProtobufCMessage *m)
{
    Ksidecar__V1__RedriveRequest *r = (Ksidecar__V1__RedriveRequest *)m;
    ks_cmd_req_t cmd = {.type = c->row->cmd,
                        .group = r->group,
                        .u.redrive = {.max = r->max, /* 0: the default */
                                      .dry_run = r->dry_run,
                                      .allow = redrive_allow,
                                      .allow_opaque = c,
                                      .cb = on_redrive,
                                      .opaque = c}};
    (void)grpc_submit(c, &cmd);
}

/* ---- the method table ----
 * A new method for an existing command: one row, a decoder and an encoder. */
#define REQ(name) &ksidecar__v1__##name##__descriptor
static const method_row_t methods[] = {
    {"/ksidecar.v1.Consumer/Subscribe", M_SUBSCRIBE, KS_CMD_FETCH, true, true,
     REQ(subscribe_request), stream_group_of, stream_first, stream_next, NULL},
    {"/ksidecar.v1.Consumer/Fetch", M_FETCH, KS_CMD_FETCH, false, true, REQ(fetch_request),
     group_of_fetch, decode_fetch, NULL, encode_fetch},
    {"/ksidecar.v1.Consumer/Ack", M_ACK, KS_CMD_SETTLE, false, true, REQ(ack_request), group_of_ack,
     decode_ack, NULL, encode_settled},
    {"/ksidecar.v1.Consumer/Nack", M_NACK, KS_CMD_SETTLE, false, true, REQ(nack_request),
     group_of_nack, decode_nack, NULL, encode_settled},
    {"/ksidecar.v1.Consumer/ModifyAckDeadline", M_MODIFY, KS_CMD_SETTLE, false, true,
     REQ(modify_ack_deadline_request), group_of_modify, decode_modify, NULL, encode_settled},
    {"/ksidecar.v1.Consumer/GetGroup", M_GET_GROUP, KS_CMD_STATUS, false, true,
     REQ(get_group_request), group_of_get_group, decode_get_group, NULL, encode_group},
    {"/ksidecar.v1.Consumer/ListGroups", M_LIST_GROUPS, KS_CMD_STATUS, false, true,
     REQ(list_groups_request), NULL, decode_list_groups, NULL, encode_groups},
    {"/ksidecar.v1.Consumer/Seek", M_SEEK, KS_CMD_SEEK, false, true, REQ(seek_request),
     group_of_seek, decode_seek, NULL, encode_seek},
    {"/ksidecar.v1.Consumer/Redrive", M_REDRIVE, KS_CMD_REDRIVE, false, true, REQ(redrive_request),
     group_of_redrive, decode_redrive, NULL, encode_redrive},
    {"/ksidecar.v1.Producer/Produce", M_PRODUCE, KS_CMD_PRODUCE, false, true, REQ(produce_request),
     NULL, grpc_produce_decode, NULL, grpc_produce_encode},
    {"/grpc.health.v1.Health/Check", M_HEALTH_CHECK, KS_CMD_NONE, false, false,
     &grpc__health__v1__health_check_request__descriptor, NULL, decode_health, NULL, NULL},
    {"/grpc.health.v1.Health/Watch", M_HEALTH_WATCH, KS_CMD_NONE, false, false,
     &grpc__health__v1__health_check_request__descriptor, NULL, decode_health, NULL, NULL},
    {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", M_REFLECT_V1, KS_CMD_NONE, true,
     false, &grpc__reflection__v1__server_reflection_request__descriptor, NULL,
     handle_reflection_msg, NULL, NULL},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", M_REFLECT_V1ALPHA,
     KS_CMD_NONE, true, false, &grpc__reflection__v1__server_reflection_request__descriptor, NULL,
     handle_reflection_msg, NULL, NULL},
};
#undef REQ

/* The router: a call's first message (every message, for a stream without `next`) is
 * decoded here and the caller checked against the group it names, once, before the
 * method's decoder sees it; a stream's later messages go to its `next` as they came.
 * @locality a completion-queue thread (one message of a call at a time) */
void grpc_route_msg(call_t *c, grpc_slice sl)
{
    const method_row_t *row = c->row;
    if (c->routed && row->next) {
        row->next(c, sl);
        return;
    }
    c->routed = true;
    ProtobufCMessage *m =
        protobuf_c_message_unpack(row->req, NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
    if (!m) {
        bad_message(c, row->req->short_name);
        return;
    }
    if (!row->group_of || grpc_authorized(c, row->group_of(m)))
        row->decode(c, m);
    protobuf_c_message_free_unpacked(m, NULL);
}

const method_row_t *method_find(const char *path, size_t len)
{
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strlen(methods[i].path) == len && !memcmp(methods[i].path, path, len))
            return &methods[i];
    return NULL;
}
