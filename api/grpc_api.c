/* grpc_api.c: the gRPC edge on grpc core's C API: completion-queue threads, one send in
 * flight per call with a queue behind it, and every command through the engine. */
#include "grpc_api.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ack_id.h"
#include "grpc_tsan.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "ksidecar/v1/consumer.pb-c.h"
#include "ksidecar/v1/producer.pb-c.h"
#include "log.h"
#include "util.h"

#define LOGC           "grpc"
#define ARMED_REQUESTS 16
#define STREAM_WAIT_MS 30000
/* Fetches a stream keeps parked: while one batch is on its way, the next fills. */
#define STREAM_PIPELINE 2
/* Most records in one stream message (their bytes are bounded by the credits). 2M
 * records of 100 bytes through one stream with 20,000 credits, three runs each: 1,000 a
 * message 1.25-1.26M rec/s, 2,000 1.23-1.39M, 4,000 1.30-1.51M, 8,000 1.38-1.49M. (When
 * partitions still paused at the window bound, 10,000 did far worse than 2,000.) */
#define STREAM_BATCH_MAX 4000
/* Most key+value bytes in one message of records (stream or unary Fetch): three quarters
 * of grpc.max_message_bytes (4 MB, as gRPC clients' own default limit), leaving room for
 * the other fields of up to 4,000 records. The credits alone may allow more
 * (subscriber.max_bytes is 10 MB), and a larger message ended the call. A single larger
 * record still goes alone; the server and the client must raise their limits for it. */
static int64_t msg_max_record_bytes(const ks_config_t *cfg)
{
    return cfg->grpc_max_message_bytes / 4 * 3;
}

/* The descriptor set of our protos, embedded at build time for reflection. */
extern const unsigned char ks_descriptor_set[];
extern const size_t ks_descriptor_set_len;

typedef enum {
    M_UNKNOWN = 0,
    M_SUBSCRIBE,
    M_FETCH,
    M_ACK,
    M_NACK,
    M_MODIFY,
    M_GET_GROUP,
    M_LIST_GROUPS,
    M_SEEK,
    M_PRODUCE,
    M_HEALTH_CHECK,
    M_HEALTH_WATCH,
    M_REFLECT_V1,
    M_REFLECT_V1ALPHA,
} method_t;

static const struct {
    const char *path;
    method_t m;
    bool stream_in; /* the client streams messages */
    bool needs_auth;
} methods[] = {
    {"/ksidecar.v1.Consumer/Subscribe", M_SUBSCRIBE, true, true},
    {"/ksidecar.v1.Consumer/Fetch", M_FETCH, false, true},
    {"/ksidecar.v1.Consumer/Ack", M_ACK, false, true},
    {"/ksidecar.v1.Consumer/Nack", M_NACK, false, true},
    {"/ksidecar.v1.Consumer/ModifyAckDeadline", M_MODIFY, false, true},
    {"/ksidecar.v1.Consumer/GetGroup", M_GET_GROUP, false, true},
    {"/ksidecar.v1.Consumer/ListGroups", M_LIST_GROUPS, false, true},
    {"/ksidecar.v1.Consumer/Seek", M_SEEK, false, true},
    {"/ksidecar.v1.Producer/Produce", M_PRODUCE, false, true},
    {"/grpc.health.v1.Health/Check", M_HEALTH_CHECK, false, false},
    {"/grpc.health.v1.Health/Watch", M_HEALTH_WATCH, false, false},
    {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", M_REFLECT_V1, true, false},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", M_REFLECT_V1ALPHA, true,
     false},
};

static const char *service_names[] = {
    "ksidecar.v1.Consumer",
    "ksidecar.v1.Producer",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
};
#define NSERVICES (sizeof(service_names) / sizeof(service_names[0]))

/* A completion-queue tag: what to run when the event comes. */
typedef struct ev {
    void (*fn)(void *ctx, bool ok);
    void *ctx;
} ev_t;

typedef struct settle_ctx settle_ctx_t;
static void settle_ctx_free(settle_ctx_t *x);

/* A queued message: encoded already (bb), or encoded when its send starts, on a
 * completion-queue thread rather than the group loop's (a record batch, or acks with
 * their results). */
typedef struct send_item {
    grpc_byte_buffer *bb;
    ks_batch_t *batch;
    settle_ctx_t *acks;
    ks_ack_result_t *results;
} send_item_t;

static void send_item_drop(send_item_t *it)
{
    if (it->bb)
        grpc_byte_buffer_destroy(it->bb);
    ks_batch_free(it->batch);
    if (it->acks)
        settle_ctx_free(it->acks);
    free(it->results);
}

typedef struct call call_t;

typedef struct peer_count {
    char host[264];
    int streams;
} peer_count_t;

struct ks_grpc {
    ks_engine_t *eng;
    const ks_config_t *cfg;
    const ks_auth_t *auth;
    grpc_server *server;
    grpc_completion_queue *cq;
    int port;
    pthread_t *threads;
    int nthreads;
    pthread_t health_thread;
    atomic_bool stopping;
    atomic_uint next_id;
    pthread_mutex_t lock; /* guards calls, peers, peer_cnt */
    call_t *calls;        /* every live call, for shutdown and health watches */
    peer_count_t *peers;
    size_t peer_cnt;
    /* Reflection: the files of the embedded descriptor set. */
    ProtobufCBinaryData files[16];
    char file_names[16][128];
    size_t file_cnt;
};

/* One call. References: one per batch in flight, one per engine command out, one
 * for the call list; freed when the last goes. */
struct call {
    ks_grpc_t *s;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array req_md;
    ev_t ev_accept, ev_recv, ev_send, ev_close, ev_status, ev_kick;
    method_t method;
    bool stream_in;
    pthread_mutex_t lock; /* guards everything below */
    int refs;
    call_t *next, *prev; /* the server's call list */
    grpc_byte_buffer *recv_buf;
    int cancelled;
    bool closed;         /* RECV_CLOSE_ON_SERVER came: no more sends */
    bool meta_sent;      /* initial metadata went with the first send */
    bool status_started; /* the final status is on its way */
    send_item_t *q;      /* messages waiting for the one send in flight */
    size_t qh, qn, qcap;
    bool sending;
    grpc_byte_buffer *in_flight;
    /* Subscribe's bound on queued record messages (grpc.stream_queue_*): record
     * messages queued or in flight and their key+value bytes; while at the bound the
     * stream parks no fetch, so the group loop delivers nothing to it (as with credits
     * used up). The one in flight: its batch's deliver_token (reported to the engine when
     * the send completes) and bytes; when it started (0: none), for grpc.stream_stall_ms. */
    int q_batches;
    int64_t q_bytes;
    bool fetch_blocked; /* a fetch was held back at the bound; the next send done re-arms */
    bool in_flight_batch;
    uint64_t in_flight_token;
    int64_t in_flight_bytes;
    int64_t send_started_ms;
    bool stalled; /* cut off for not reading: its leases go back uncounted */
    bool want_status;
    grpc_status_code st;
    char msg[512];
    /* Subscribe streams. */
    bool opened;
    char group[256];
    char sub[KS_SUBSCRIBER_KEY_MAX];
    char **topics;
    size_t topic_cnt;
    int64_t credit_records, credit_bytes;
    int deadline_ms;
    int fetches_out;
    ks_tp_t *snap; /* the assignment the stream was last told */
    size_t snap_cnt;
    char peer_host[264];       /* what its streams count against: identity, else host */
    const ks_principal_t *who; /* who called (set by authorized); NULL without auth */
    bool counted;
    /* Health watches. */
    int last_health;
};

/* ---- helpers ---- */

static grpc_status_code grpc_code_of(ks_status_t st)
{
    switch (st) {
    case KS_OK:
        return GRPC_STATUS_OK;
    case KS_E_INVALID:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case KS_E_NOT_FOUND:
        return GRPC_STATUS_NOT_FOUND;
    case KS_E_STALE:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case KS_E_EXHAUSTED:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case KS_E_UNAVAILABLE:
        return GRPC_STATUS_UNAVAILABLE;
    case KS_E_PERMISSION:
        return GRPC_STATUS_PERMISSION_DENIED;
    case KS_E_UNAUTH:
        return GRPC_STATUS_UNAUTHENTICATED;
    case KS_E_INTERNAL:
        break;
    }
    return GRPC_STATUS_INTERNAL;
}

static void call_ref(call_t *c)
{
    pthread_mutex_lock(&c->lock);
    c->refs++;
    pthread_mutex_unlock(&c->lock);
}

static void call_free(call_t *c)
{
    for (size_t i = 0; i < c->qn; i++)
        send_item_drop(&c->q[(c->qh + i) % c->qcap]);
    free(c->q);
    if (c->recv_buf)
        grpc_byte_buffer_destroy(c->recv_buf);
    if (c->call)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->req_md);
    for (size_t i = 0; i < c->topic_cnt; i++)
        free(c->topics[i]);
    free(c->topics);
    free(c->snap);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void call_unref(call_t *c)
{
    pthread_mutex_lock(&c->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (last)
        call_free(c);
}

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice sl = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(sl));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

/* Copies a received message into one contiguous slice. Caller unrefs. */
static grpc_slice flatten(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return grpc_empty_slice();
    grpc_slice sl = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return sl;
}

/* The value of request metadata key, as a NUL-terminated copy in buf, or NULL. */
static const char *md_get(const call_t *c, const char *key, char *buf, size_t size)
{
    for (size_t i = 0; i < c->req_md.count; i++) {
        const grpc_metadata *m = &c->req_md.metadata[i];
        size_t kl = GRPC_SLICE_LENGTH(m->key);
        if (kl == strlen(key) && !memcmp(GRPC_SLICE_START_PTR(m->key), key, kl)) {
            size_t vl = GRPC_SLICE_LENGTH(m->value);
            if (vl >= size)
                vl = size - 1;
            memcpy(buf, GRPC_SLICE_START_PTR(m->value), vl);
            buf[vl] = '\0';
            return buf;
        }
    }
    return NULL;
}

/* ---- sending: one SEND_MESSAGE in flight, the rest queued ---- */

static void on_send_done(void *ctx, bool ok);
static void on_status_done(void *ctx, bool ok);
static void on_kick(void *ctx, bool ok);

static grpc_byte_buffer *encode_records(const ks_batch_t *b, bool wrap);
static grpc_byte_buffer *encode_ack_results(const settle_ctx_t *x, const ks_ack_result_t *res);

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool queue_full_locked(const call_t *c)
{
    return c->q_batches >= c->s->cfg->grpc_stream_queue_messages ||
           c->q_bytes >= c->s->cfg->grpc_stream_queue_bytes;
}

/* A record message is no longer queued (sent, failed or dropped): the engine hears
 * whether the transport took it (token 0: nothing to say). Locked by caller; the
 * engine only posts to the group loop. */
static void batch_gone_locked(call_t *c, uint64_t token, int64_t bytes, bool taken)
{
    c->q_batches--;
    c->q_bytes -= bytes;
    if (token)
        ks_engine_delivered(c->s->eng, c->group, token, taken);
}

/* The send in flight ended (taken: it completed). Locked by caller. */
static void sent_done_locked(call_t *c, bool taken)
{
    if (c->in_flight_batch)
        batch_gone_locked(c, c->in_flight_token, c->in_flight_bytes, taken);
    c->in_flight_batch = false;
    c->in_flight_token = 0;
    c->in_flight_bytes = 0;
    c->send_started_ms = 0;
}

/* Drops a queued message that will never go out. Locked by caller. */
static void item_drop_locked(call_t *c, send_item_t *it)
{
    if (it->batch)
        batch_gone_locked(c, it->batch->deliver_token, it->batch->bytes, false);
    send_item_drop(it);
}

/* Starts the next send or the final status. Locked by caller. */
static void kick_locked(call_t *c)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    bool will_send = (c->qn > 0 && !c->closed) || (c->want_status && !c->status_started);
    if (!will_send)
        return;
    if (!c->meta_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->meta_sent = true;
    }
    if (c->qn > 0 && !c->closed) {
        send_item_t it = c->q[c->qh];
        c->qh = (c->qh + 1) % c->qcap;
        c->qn--;
        grpc_byte_buffer *bb = it.bb;
        c->in_flight_batch = it.batch != NULL;
        c->in_flight_token = it.batch ? it.batch->deliver_token : 0;
        c->in_flight_bytes = it.batch ? it.batch->bytes : 0;
        c->send_started_ms = mono_ms();
        if (it.batch)
            bb = encode_records(it.batch, true);
        else if (it.acks)
            bb = encode_ack_results(it.acks, it.results);
        it.bb = NULL;
        send_item_drop(&it);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = bb;
        n++;
        c->sending = true;
        c->in_flight = bb;
        c->refs++;
        if (grpc_call_start_batch(c->call, ops, n, &c->ev_send, NULL) != GRPC_CALL_OK) {
            ks_err(LOGC, "start_batch(send) failed");
            c->refs--;
            c->sending = false;
            c->in_flight = NULL;
            grpc_byte_buffer_destroy(bb);
            sent_done_locked(c, false);
        }
        return;
    }
    if (c->want_status && !c->status_started) {
        c->status_started = true;
        grpc_slice details = grpc_slice_from_copied_string(c->msg);
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = c->st;
        ops[n].data.send_status_from_server.status_details = &details;
        n++;
        c->refs++;
        if (grpc_call_start_batch(c->call, ops, n, &c->ev_status, NULL) != GRPC_CALL_OK) {
            ks_err(LOGC, "start_batch(status) failed");
            c->refs--;
        }
        grpc_slice_unref(details);
    }
}

/* Queues a message (the call takes it.bb and it.batch). */
static void call_send_item(call_t *c, send_item_t it)
{
    pthread_mutex_lock(&c->lock);
    if (it.batch) {
        c->q_batches++;
        c->q_bytes += it.batch->bytes;
    }
    if (c->closed || c->status_started || c->want_status) {
        item_drop_locked(c, &it);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (c->qn == c->qcap) {
        size_t ncap = c->qcap ? c->qcap * 2 : 8;
        send_item_t *nq = malloc(ncap * sizeof(*nq));
        if (!nq)
            abort();
        for (size_t i = 0; i < c->qn; i++)
            nq[i] = c->q[(c->qh + i) % c->qcap];
        free(c->q);
        c->q = nq;
        c->qcap = ncap;
        c->qh = 0;
    }
    c->q[(c->qh + c->qn) % c->qcap] = it;
    c->qn++;
    if (!c->sending) {
        if (it.batch || it.acks) {
            /* Encoding is per record: leave it to a completion-queue thread, not the
             * caller's (the group loop's). An empty batch posts on_kick there at once;
             * `sending` holds the slot until then. */
            c->sending = true;
            c->refs++;
            if (grpc_call_start_batch(c->call, NULL, 0, &c->ev_kick, NULL) != GRPC_CALL_OK) {
                c->refs--;
                c->sending = false;
                kick_locked(c);
            }
        } else {
            kick_locked(c);
        }
    }
    pthread_mutex_unlock(&c->lock);
}

/* Queues an encoded message (the call takes bb). */
static void call_send_bb(call_t *c, grpc_byte_buffer *bb)
{
    call_send_item(c, (send_item_t){.bb = bb});
}

/* Queues a message (m is packed now; the caller keeps m). */
static void call_send(call_t *c, const ProtobufCMessage *m)
{
    call_send_bb(c, pack(m));
}

/* Ends the call with a status once the queued messages are out. */
static void call_finish(call_t *c, grpc_status_code st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void call_finish(call_t *c, grpc_status_code st, const char *fmt, ...)
{
    pthread_mutex_lock(&c->lock);
    if (!c->want_status && !c->status_started) {
        c->want_status = true;
        c->st = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
        va_end(ap);
        if (!c->sending)
            kick_locked(c);
    }
    pthread_mutex_unlock(&c->lock);
}

static void on_kick(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    c->sending = false;
    if (c->qn > 0 || c->want_status)
        kick_locked(c);
    pthread_mutex_unlock(&c->lock);
    call_unref(c);
}

static void stream_refill(call_t *c);

/* A send completed (ok: the transport took the message). A record message's leases
 * start now, in the group loop; below the queue bound again, a held-back fetch goes out. */
static void on_send_done(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    grpc_byte_buffer_destroy(c->in_flight);
    c->in_flight = NULL;
    c->sending = false;
    if (!ok)
        c->closed = true;
    sent_done_locked(c, ok);
    bool refill = ok && c->fetch_blocked && !queue_full_locked(c);
    if (c->qn > 0 || c->want_status)
        kick_locked(c);
    pthread_mutex_unlock(&c->lock);
    if (refill)
        stream_refill(c);
    call_unref(c);
}

static void on_status_done(void *ctx, bool ok)
{
    call_unref(ctx);
}

/* ---- receiving ---- */

static void on_recv(void *ctx, bool ok);

static void start_recv(call_t *c)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_buf;
    pthread_mutex_lock(&c->lock);
    c->refs++;
    if (grpc_call_start_batch(c->call, &op, 1, &c->ev_recv, NULL) != GRPC_CALL_OK)
        c->refs--;
    pthread_mutex_unlock(&c->lock);
}

/* ---- auth ---- */

/* The verified client certificate's subject (RFC 2253) into buf, or NULL without mTLS. */
static const char *cert_subject(const call_t *c, char *buf, size_t size)
{
    grpc_auth_context *ctx = grpc_call_auth_context(c->call);
    if (!ctx)
        return NULL;
    const char *out = NULL;
    grpc_auth_property_iterator it =
        grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_SUBJECT_PROPERTY_NAME);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    if (p && p->value && p->value_length < size) {
        memcpy(buf, p->value, p->value_length);
        buf[p->value_length] = '\0';
        out = buf;
    }
    grpc_auth_context_release(ctx);
    return out;
}

/* Identifies the caller (its token, else its certificate's subject) into c->who and
 * checks the group scope for group (NULL: identity only). Finishes the call and returns
 * false when refused. */
static bool authorized(call_t *c, const char *group)
{
    if (!c->s->auth)
        return true;
    char hdr[1024], subj[1024], err[512];
    const char *a = md_get(c, "authorization", hdr, sizeof(hdr));
    ks_status_t st = ks_auth_identify(c->s->auth, a, cert_subject(c, subj, sizeof(subj)), &c->who,
                                      err, sizeof(err));
    if (st == KS_OK && group)
        st = ks_auth_allow(c->s->auth, c->who, KS_SCOPE_GROUPS, &group, 1, err, sizeof(err));
    if (st == KS_OK)
        return true;
    call_finish(c, grpc_code_of(st), "%s", err);
    return false;
}

/* Checks the topic names (valid, not internal: ks_engine_check_topics, what a client
 * may not "verb") and that the caller's scope covers each. Finishes the call and returns
 * false when refused. Call after authorized(). */
static bool scoped(call_t *c, ks_scope_t scope, const char *verb, const char *const *names,
                   size_t n)
{
    char err[512];
    ks_status_t st = ks_engine_check_topics(c->s->eng, names, n, verb, err, sizeof(err));
    if (st == KS_OK)
        st = ks_auth_allow(c->s->auth, c->who, scope, names, n, err, sizeof(err));
    if (st == KS_OK)
        return true;
    call_finish(c, grpc_code_of(st), "%s", err);
    return false;
}

/* ---- records ---- */

/* ---- a direct encoder for record batches ----
 * The hot path: a batch of thousands of records would cost two protobuf-c passes
 * (size, then pack) over a tree of views. This writes the same wire format
 * (SubscribeResponse.batch / FetchResponse.records) in one sizing pass and one
 * writing pass, straight from the engine's records. */

static size_t vlen(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *vput(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Size of a length-delimited field with tag < 16 and payload n. */
static size_t ld_size(size_t n)
{
    return 1 + vlen(n) + n;
}

static uint8_t *ld_put(uint8_t *p, unsigned field, const void *data, size_t n)
{
    *p++ = (uint8_t)(field << 3 | 2);
    p = vput(p, n);
    memcpy(p, data, n);
    return p + n;
}

static size_t header_size(const ks_header_t *h)
{
    size_t n = 0, kl = strlen(h->name);
    if (kl)
        n += ld_size(kl);
    if (h->value_len)
        n += ld_size(h->value_len);
    if (!h->value)
        n += 2;
    return n;
}

static size_t record_size(const ks_record_t *r, size_t ack_id_len)
{
    size_t n = ld_size(strlen(r->topic));
    if (r->partition)
        n += 1 + vlen((uint64_t)(int64_t)r->partition);
    if (r->offset)
        n += 1 + vlen((uint64_t)r->offset);
    if (r->timestamp)
        n += 1 + vlen((uint64_t)r->timestamp);
    if (r->key_len)
        n += ld_size(r->key_len);
    if (!r->key)
        n += 2;
    if (r->value_len)
        n += ld_size(r->value_len);
    if (!r->value)
        n += 2;
    for (size_t h = 0; h < r->header_cnt; h++)
        n += ld_size(header_size(&r->headers[h]));
    n += ld_size(ack_id_len);
    if (r->attempt)
        n += 1 + vlen((uint64_t)(int64_t)r->attempt);
    return n;
}

static uint8_t *record_put(uint8_t *p, const ks_record_t *r, size_t size, const char *ack_id,
                           size_t ack_id_len)
{
    *p++ = 1 << 3 | 2; /* RecordBatch.records / FetchResponse.records: field 1 */
    p = vput(p, size);
    p = ld_put(p, 1, r->topic, strlen(r->topic));
    if (r->partition) {
        *p++ = 2 << 3;
        p = vput(p, (uint64_t)(int64_t)r->partition);
    }
    if (r->offset) {
        *p++ = 3 << 3;
        p = vput(p, (uint64_t)r->offset);
    }
    if (r->timestamp) {
        *p++ = 4 << 3;
        p = vput(p, (uint64_t)r->timestamp);
    }
    if (r->key_len)
        p = ld_put(p, 5, r->key, r->key_len);
    if (!r->key) {
        *p++ = 6 << 3;
        *p++ = 1;
    }
    if (r->value_len)
        p = ld_put(p, 7, r->value, r->value_len);
    if (!r->value) {
        *p++ = 8 << 3;
        *p++ = 1;
    }
    for (size_t h = 0; h < r->header_cnt; h++) {
        const ks_header_t *hd = &r->headers[h];
        *p++ = 9 << 3 | 2;
        p = vput(p, header_size(hd));
        size_t kl = strlen(hd->name);
        if (kl)
            p = ld_put(p, 1, hd->name, kl);
        if (hd->value_len)
            p = ld_put(p, 2, hd->value, hd->value_len);
        if (!hd->value) {
            *p++ = 3 << 3;
            *p++ = 1;
        }
    }
    p = ld_put(p, 10, ack_id, ack_id_len);
    if (r->attempt) {
        *p++ = 11 << 3;
        p = vput(p, (uint64_t)(int64_t)r->attempt);
    }
    return p;
}

/* Encodes b's records as a FetchResponse, or (wrap) as SubscribeResponse{batch}. */
static grpc_byte_buffer *encode_records(const ks_batch_t *b, bool wrap)
{
    /* Per record: its size and its ack id, written out here (not on the group loop). */
    size_t *sizes = malloc((2 * b->cnt + 1) * sizeof(size_t));
    size_t idcap = 1024, idlen = 0;
    char *ids = malloc(idcap);
    if (!sizes || !ids)
        abort();
    size_t body = 0;
    for (size_t i = 0; i < b->cnt; i++) {
        if (idlen + KS_ACK_ID_MAX > idcap) {
            idcap = 2 * idcap + KS_ACK_ID_MAX;
            ids = realloc(ids, idcap);
            if (!ids)
                abort();
        }
        size_t al = ks_record_ack_id(&b->recs[i], ids + idlen, KS_ACK_ID_MAX);
        idlen += al;
        sizes[2 * i + 1] = al;
        sizes[2 * i] = record_size(&b->recs[i], al);
        body += 1 + vlen(sizes[2 * i]) + sizes[2 * i];
    }
    size_t total = wrap ? 1 + vlen(body) + body : body;
    grpc_slice sl = grpc_slice_malloc(total);
    uint8_t *p = GRPC_SLICE_START_PTR(sl);
    if (wrap) {
        *p++ = 1 << 3 | 2; /* SubscribeResponse.batch */
        p = vput(p, body);
    }
    const char *id = ids;
    for (size_t i = 0; i < b->cnt; i++) {
        p = record_put(p, &b->recs[i], sizes[2 * i], id, sizes[2 * i + 1]);
        id += sizes[2 * i + 1];
    }
    free(sizes);
    free(ids);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

/* ---- ack results ---- */

static Ksidecar__V1__AckStatus ack_status_of(ks_status_t st)
{
    switch (st) {
    case KS_OK:
        return KSIDECAR__V1__ACK_STATUS__ACCEPTED;
    case KS_E_INVALID:
        return KSIDECAR__V1__ACK_STATUS__INVALID;
    case KS_E_NOT_FOUND:
        return KSIDECAR__V1__ACK_STATUS__NOT_FOUND;
    default:
        return KSIDECAR__V1__ACK_STATUS__STALE;
    }
}

/* What an engine settle answers: the ids it was asked about, kept with the call. */
struct settle_ctx {
    call_t *c;
    char **ids;
    size_t n;
    bool stream; /* answer on the Subscribe stream, not as a unary reply */
};

/* Encodes SubscribeResponse{ack_results} straight to the wire format, like
 * encode_records: a stream acking every record gets one result per record, and
 * protobuf-c's generic pack of the nested messages cost ~700 instructions each. On a
 * stream an accepted ack needs no words: its status says it. */
static const char *ack_result_msg(const ks_ack_result_t *r)
{
    return r->status == KS_OK || !r->reason ? "" : r->reason;
}

static size_t ack_result_size(size_t al, const ks_ack_result_t *r, size_t ml)
{
    int st = ack_status_of(r->status);
    return ld_size(al) + (st ? 1 + vlen((uint64_t)st) : 0) + (ml ? ld_size(ml) : 0);
}

static grpc_byte_buffer *encode_ack_results(const settle_ctx_t *x, const ks_ack_result_t *res)
{
    size_t body = 0;
    for (size_t i = 0; i < x->n; i++)
        body +=
            ld_size(ack_result_size(strlen(x->ids[i]), &res[i], strlen(ack_result_msg(&res[i]))));
    size_t total = ld_size(body);
    grpc_slice sl = grpc_slice_malloc(total);
    uint8_t *p = GRPC_SLICE_START_PTR(sl);
    *p++ = 4 << 3 | 2; /* SubscribeResponse.ack_results */
    p = vput(p, body);
    for (size_t i = 0; i < x->n; i++) {
        const char *msg = ack_result_msg(&res[i]);
        size_t al = strlen(x->ids[i]), ml = strlen(msg);
        int st = ack_status_of(res[i].status);
        *p++ = 1 << 3 | 2; /* AckResults.results */
        p = vput(p, ack_result_size(al, &res[i], ml));
        p = ld_put(p, 1, x->ids[i], al);
        if (st) {
            *p++ = 2 << 3;
            p = vput(p, (uint64_t)st);
        }
        if (ml)
            p = ld_put(p, 3, msg, ml);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

static void settle_ctx_free(settle_ctx_t *x)
{
    free(x->ids); /* one block, strings included */
    free(x);
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
    Ksidecar__V1__AckResult *rs = calloc(n + 1, sizeof(*rs));
    Ksidecar__V1__AckResult **rp = calloc(n + 1, sizeof(*rp));
    if (!rs || !rp)
        abort();
    size_t ok = 0;
    ks_status_t first_bad = KS_OK;
    const char *first_msg = "";
    for (size_t i = 0; i < n; i++) {
        ksidecar__v1__ack_result__init(&rs[i]);
        rs[i].ack_id = x->ids[i];
        rs[i].status = ack_status_of(res[i].status);
        rs[i].message = (char *)(uintptr_t)res[i].reason;
        rp[i] = &rs[i];
        if (res[i].status == KS_OK)
            ok++;
        else if (first_bad == KS_OK) {
            first_bad = res[i].status;
            first_msg = res[i].reason;
        }
    }
    if (ok == 0 && first_bad != KS_OK) {
        call_finish(c, grpc_code_of(first_bad), "%s", first_msg);
    } else {
        Ksidecar__V1__AckResponse ar = KSIDECAR__V1__ACK_RESPONSE__INIT;
        ar.n_results = n;
        ar.results = rp;
        ar.accepted = (int32_t)ok;
        ar.rejected = (int32_t)(n - ok);
        call_send(c, &ar.base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    free(rs);
    free(rp);
    free(res);
    settle_ctx_free(x);
    call_unref(c);
}

/* Sends ids (one block, as ks_strv_pack makes; settle_owned takes it) to the engine.
 * Returns false (call finished) on a synchronous error. */
static bool settle_owned(call_t *c, const char *group, ks_settle_op_t op, int64_t ms,
                         const char *reason, char **ids, size_t n, bool stream)
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
    call_ref(c);
    st = ks_engine_settle(c->s->eng, group, op, ms, reason, (const char *const *)x->ids, n,
                          on_settled, x, err, sizeof(err));
    if (st) {
        settle_ctx_free(x);
        call_unref(c);
        call_finish(c, grpc_code_of(st), "%s", err);
        return false;
    }
    return true;
}

/* settle_owned for ids the caller keeps. */
static bool settle(call_t *c, const char *group, ks_settle_op_t op, int64_t ms, const char *reason,
                   char **ids, size_t n, bool stream)
{
    return settle_owned(c, group, op, ms, reason, ks_strv_pack((const char *const *)ids, n), n,
                        stream);
}

/* ---- group status ---- */

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
    /* topics: split the comma list into a copy */
    char *tcopy = ks_xstrdup(g->topics);
    allocs[(*na)++] = tcopy;
    size_t nt = 0;
    for (char *p = tcopy; *p; p++)
        nt += *p == ',';
    char **tv = calloc(nt + 2, sizeof(char *));
    allocs[(*na)++] = tv;
    size_t ti = 0;
    char *save = NULL;
    for (char *t = strtok_r(tcopy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        tv[ti++] = t;
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

typedef struct status_ctx {
    call_t *c;
    bool one;
} status_ctx_t;

static void on_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    status_ctx_t *x = opaque;
    call_t *c = x->c;
    /* status_to_pb makes at most 7 allocations a group. */
    void **allocs = calloc(8 * n + 8, sizeof(*allocs));
    if (!allocs)
        abort();
    size_t na = 0;
    if (x->one) {
        if (n == 0) {
            call_finish(c, GRPC_STATUS_NOT_FOUND, "the group closed meanwhile");
        } else {
            Ksidecar__V1__GroupStatus gs;
            status_to_pb(groups[0], &gs, allocs, &na);
            call_send(c, &gs.base);
            call_finish(c, GRPC_STATUS_OK, "%s", "");
        }
    } else {
        size_t cnt = 0;
        Ksidecar__V1__GroupStatus *gs = calloc(n + 1, sizeof(*gs));
        Ksidecar__V1__GroupStatus **gp = calloc(n + 1, sizeof(*gp));
        for (size_t i = 0; i < n; i++) {
            /* Only the groups the caller's groups scope covers. */
            if (!ks_auth_covers(c->s->auth, c->who, KS_SCOPE_GROUPS, groups[i]->name))
                continue;
            status_to_pb(groups[i], &gs[cnt], allocs, &na);
            gp[cnt] = &gs[cnt];
            cnt++;
        }
        Ksidecar__V1__ListGroupsResponse lr = KSIDECAR__V1__LIST_GROUPS_RESPONSE__INIT;
        lr.n_groups = cnt;
        lr.groups = gp;
        call_send(c, &lr.base);
        call_finish(c, GRPC_STATUS_OK, "%s", "");
        free(gs);
        free(gp);
    }
    for (size_t i = 0; i < na; i++)
        free(allocs[i]);
    free(allocs);
    for (size_t i = 0; i < n; i++)
        ks_group_status_free(groups[i]);
    free(groups);
    free(x);
    call_unref(c);
}

/* ---- unary handlers ---- */

static void on_unary_fetch(ks_batch_t *b, void *opaque)
{
    call_t *c = opaque;
    if (b->status) {
        call_finish(c, grpc_code_of(b->status), "%s", b->message);
    } else {
        call_send_bb(c, encode_records(b, false));
        call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
    ks_batch_free(b);
    call_unref(c);
}

static void on_seek(ks_seek_result_t *r, void *opaque)
{
    call_t *c = opaque;
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

static void on_produced(ks_produce_result_t *res, size_t n, void *opaque)
{
    call_t *c = opaque;
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

#define UNPACK(type, fn, sl) fn##__unpack(NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl))

static void bad_message(call_t *c, const char *what)
{
    call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "the request is not a valid %s protobuf message",
                what);
}

static int health_status(ks_grpc_t *s)
{
    return ks_engine_kafka_up(s->eng)
               ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
               : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

static bool known_service(const char *name)
{
    if (!*name)
        return true;
    for (size_t i = 0; i < NSERVICES; i++)
        if (!strcmp(service_names[i], name))
            return true;
    return false;
}

static void handle_unary(call_t *c, grpc_slice sl)
{
    ks_grpc_t *s = c->s;
    char err[512];
    ks_status_t st;
    switch (c->method) {
    case M_FETCH: {
        Ksidecar__V1__FetchRequest *r = UNPACK(x, ksidecar__v1__fetch_request, sl);
        if (!r) {
            bad_message(c, "FetchRequest");
            return;
        }
        if (authorized(c, r->group) &&
            scoped(c, KS_SCOPE_CONSUME, "consume", (const char *const *)r->topics, r->n_topics)) {
            ks_fetch_opts_t o = {.max = r->max ? r->max : 100,
                                 .wait_ms = r->wait_ms,
                                 .deadline_ms = r->deadline_ms,
                                 .subscriber = r->subscriber,
                                 .max_bytes = msg_max_record_bytes(s->cfg)};
            call_ref(c);
            st = ks_engine_fetch(s->eng, r->group, (const char *const *)r->topics, r->n_topics, &o,
                                 on_unary_fetch, c, err, sizeof(err));
            if (st) {
                call_unref(c);
                call_finish(c, grpc_code_of(st), "%s", err);
            }
        }
        ksidecar__v1__fetch_request__free_unpacked(r, NULL);
        return;
    }
    case M_ACK: {
        Ksidecar__V1__AckRequest *r = UNPACK(x, ksidecar__v1__ack_request, sl);
        if (!r) {
            bad_message(c, "AckRequest");
            return;
        }
        if (authorized(c, r->group))
            settle(c, r->group, KS_SETTLE_ACK, 0, NULL, r->ack_ids, r->n_ack_ids, false);
        ksidecar__v1__ack_request__free_unpacked(r, NULL);
        return;
    }
    case M_NACK: {
        Ksidecar__V1__NackRequest *r = UNPACK(x, ksidecar__v1__nack_request, sl);
        if (!r) {
            bad_message(c, "NackRequest");
            return;
        }
        if (authorized(c, r->group))
            settle(c, r->group, KS_SETTLE_NACK, r->delay_ms, r->reason, r->ack_ids, r->n_ack_ids,
                   false);
        ksidecar__v1__nack_request__free_unpacked(r, NULL);
        return;
    }
    case M_MODIFY: {
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
        return;
    }
    case M_GET_GROUP:
    case M_LIST_GROUPS: {
        char *group = NULL;
        Ksidecar__V1__GetGroupRequest *r = NULL;
        if (c->method == M_GET_GROUP) {
            r = UNPACK(x, ksidecar__v1__get_group_request, sl);
            if (!r) {
                bad_message(c, "GetGroupRequest");
                return;
            }
            group = r->group;
        } else {
            Ksidecar__V1__ListGroupsRequest *lr = UNPACK(x, ksidecar__v1__list_groups_request, sl);
            if (!lr) {
                bad_message(c, "ListGroupsRequest");
                return;
            }
            ksidecar__v1__list_groups_request__free_unpacked(lr, NULL);
        }
        if (authorized(c, group)) {
            status_ctx_t *x = calloc(1, sizeof(*x));
            if (!x)
                abort();
            x->c = c;
            x->one = group != NULL;
            call_ref(c);
            st = ks_engine_status(s->eng, group, on_status, x, err, sizeof(err));
            if (st) {
                free(x);
                call_unref(c);
                call_finish(c, grpc_code_of(st), "%s", err);
            }
        }
        if (r)
            ksidecar__v1__get_group_request__free_unpacked(r, NULL);
        return;
    }
    case M_SEEK: {
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
            call_ref(c);
            st = ks_engine_seek(s->eng, r->group, r->topic, r->partition, kind, v, on_seek, c, err,
                                sizeof(err));
            if (st) {
                call_unref(c);
                call_finish(c, grpc_code_of(st), "%s", err);
            }
        }
        ksidecar__v1__seek_request__free_unpacked(r, NULL);
        return;
    }
    case M_PRODUCE: {
        Ksidecar__V1__ProduceRequest *r = UNPACK(x, ksidecar__v1__produce_request, sl);
        if (!r) {
            bad_message(c, "ProduceRequest");
            return;
        }
        bool ok = authorized(c, NULL);
        for (size_t i = 0; ok && i < r->n_records; i++)
            ok = scoped(c, KS_SCOPE_PRODUCE, "produce to",
                        (const char *const *)&r->records[i]->topic, 1);
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
                recs[i].value = p->value_null   ? NULL
                                : p->value.data ? p->value.data
                                                : (const void *)"";
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
            call_ref(c);
            st = ks_engine_produce(s->eng, recs, r->n_records, on_produced, c, err, sizeof(err));
            if (st) {
                call_unref(c);
                call_finish(c, grpc_code_of(st), "%s", err);
            }
            free(recs);
            free(hs);
        }
        ksidecar__v1__produce_request__free_unpacked(r, NULL);
        return;
    }
    case M_HEALTH_CHECK:
    case M_HEALTH_WATCH: {
        Grpc__Health__V1__HealthCheckRequest *r =
            UNPACK(x, grpc__health__v1__health_check_request, sl);
        if (!r) {
            bad_message(c, "HealthCheckRequest");
            return;
        }
        if (!known_service(r->service)) {
            if (c->method == M_HEALTH_CHECK)
                call_finish(c, GRPC_STATUS_NOT_FOUND, "unknown service \"%s\"", r->service);
            else {
                Grpc__Health__V1__HealthCheckResponse hr =
                    GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
                hr.status =
                    GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
                call_send(c, &hr.base);
            }
        } else {
            Grpc__Health__V1__HealthCheckResponse hr =
                GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
            hr.status = health_status(s);
            pthread_mutex_lock(&c->lock);
            c->last_health = hr.status;
            pthread_mutex_unlock(&c->lock);
            call_send(c, &hr.base);
            if (c->method == M_HEALTH_CHECK)
                call_finish(c, GRPC_STATUS_OK, "%s", "");
        }
        grpc__health__v1__health_check_request__free_unpacked(r, NULL);
        return;
    }
    default:
        call_finish(c, GRPC_STATUS_UNIMPLEMENTED, "not implemented");
    }
}

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
static void send_assignment_diff(call_t *c, const ks_batch_t *b)
{
    Ksidecar__V1__TopicPartition *tps = calloc(b->assign_cnt + c->snap_cnt + 1, sizeof(*tps));
    Ksidecar__V1__TopicPartition **tpp = calloc(b->assign_cnt + c->snap_cnt + 1, sizeof(*tpp));
    if (!tps || !tpp)
        abort();
    size_t n = 0;
    for (size_t i = 0; i < c->snap_cnt; i++) {
        if (tp_in(b->assigned, b->assign_cnt, &c->snap[i]))
            continue;
        ksidecar__v1__topic_partition__init(&tps[n]);
        tps[n].topic = c->snap[i].topic;
        tps[n].partition = c->snap[i].partition;
        tpp[n] = &tps[n];
        n++;
    }
    if (n) {
        Ksidecar__V1__Revocation rv = KSIDECAR__V1__REVOCATION__INIT;
        rv.n_partitions = n;
        rv.partitions = tpp;
        Ksidecar__V1__SubscribeResponse resp = KSIDECAR__V1__SUBSCRIBE_RESPONSE__INIT;
        resp.kind_case = KSIDECAR__V1__SUBSCRIBE_RESPONSE__KIND_REVOCATION;
        resp.revocation = &rv;
        call_send(c, &resp.base);
    }
    size_t m = 0;
    for (size_t i = 0; i < b->assign_cnt; i++) {
        if (tp_in(c->snap, c->snap_cnt, &b->assigned[i]))
            continue;
        ksidecar__v1__topic_partition__init(&tps[m]);
        tps[m].topic = (char *)(uintptr_t)b->assigned[i].topic;
        tps[m].partition = b->assigned[i].partition;
        tpp[m] = &tps[m];
        m++;
    }
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

static void on_stream_fetch(ks_batch_t *b, void *opaque)
{
    call_t *c = opaque;
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

/* Parks fetches until STREAM_PIPELINE are out, unless the send queue is at its bound
 * (grpc.stream_queue_*): then none, and the next send that completes calls again. */
static void stream_refill(call_t *c)
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

/* Parks a fetch for the stream: it returns with records, an assignment change, or
 * after wait_ms. counted: fetches_out was already raised for it (stream_refill). */
static void stream_fetch_as(call_t *c, int wait_ms, bool counted)
{
    int64_t max = c->credit_records > 0 ? c->credit_records : c->s->cfg->sub_max_records;
    if (max > c->s->cfg->fetch_max_records)
        max = c->s->cfg->fetch_max_records;
    if (max > STREAM_BATCH_MAX)
        max = STREAM_BATCH_MAX;
    ks_fetch_opts_t o = {.max = (int)max,
                         .wait_ms = wait_ms,
                         .deadline_ms = c->deadline_ms,
                         .subscriber = c->sub,
                         .credit_records = c->credit_records,
                         .credit_bytes = c->credit_bytes,
                         .max_bytes = msg_max_record_bytes(c->s->cfg),
                         .notify = 1,
                         .confirm = 1,
                         .hold_stalled = 1};
    char err[512];
    pthread_mutex_lock(&c->lock);
    if (!counted)
        c->fetches_out++;
    c->refs++;
    pthread_mutex_unlock(&c->lock);
    ks_status_t st = ks_engine_fetch(c->s->eng, c->group, (const char *const *)c->topics,
                                     c->topic_cnt, &o, on_stream_fetch, c, err, sizeof(err));
    if (st) {
        pthread_mutex_lock(&c->lock);
        c->fetches_out--;
        pthread_mutex_unlock(&c->lock);
        call_finish(c, grpc_code_of(st), "%s", err);
        call_unref(c);
    }
}

static void stream_fetch(call_t *c, int wait_ms)
{
    stream_fetch_as(c, wait_ms, false);
}

static bool check_credits(call_t *c, const Ksidecar__V1__Credits *cr)
{
    const ks_config_t *cfg = c->s->cfg;
    if (cr->records < 0 || cr->bytes < 0) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "credits must not be negative");
        return false;
    }
    if (cr->records > cfg->sub_max_credit_records || cr->bytes > cfg->sub_max_credit_bytes) {
        call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
                    "credits above the limit (subscriber.max_credit_records %lld, "
                    "subscriber.max_credit_bytes %lld)",
                    (long long)cfg->sub_max_credit_records, (long long)cfg->sub_max_credit_bytes);
        return false;
    }
    return true;
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

static void uncount_stream(call_t *c)
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
    if (o->n_topics == 0) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "open.topics: name at least one topic");
        return;
    }
    if (!scoped(c, KS_SCOPE_CONSUME, "consume", (const char *const *)o->topics, o->n_topics))
        return;
    if ((st = ks_engine_check_name(KS_NAME_SUBSCRIBER, o->subscriber, err, sizeof(err)))) {
        call_finish(c, grpc_code_of(st), "%s", err);
        return;
    }
    if (o->credits && !check_credits(c, o->credits))
        return;
    if (o->deadline_ms < 0 || o->deadline_ms > s->cfg->lease_max_deadline_ms) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT,
                    "deadline_ms must be from 0 to %d (lease.max_deadline_ms)",
                    s->cfg->lease_max_deadline_ms);
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
    c->opened = true;
    ks_dbg(LOGC, "stream %s opened on group %s", c->sub, c->group);
    for (int i = 0; i < STREAM_PIPELINE; i++)
        stream_fetch(c, STREAM_WAIT_MS);
}

/* Reads a varint at *p. False when it runs past end or past 64 bits. */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Reads a length prefix as protobuf-c does: a varint of at most 5 bytes (protobuf-c refuses
 * a longer one, however small its value, and the fast path must refuse what it refuses). */
static bool read_len(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    const uint8_t *start = *p;
    return read_varint(p, end, v) && *p - start <= 5;
}

/* The stream's usual message, SubscribeRequest{ack: AckIds{ack_ids}}, read in place into
 * one block of ids, as ks_strv_pack makes it: protobuf-c allocated every id, then the
 * ids were copied again. Any other shape, or an id with a byte outside printable ASCII
 * (no ack id has one), returns NULL, and protobuf-c reads the message as before. */
static char **fast_ack_ids(grpc_slice sl, size_t *n_out)
{
    const uint8_t *p = GRPC_SLICE_START_PTR(sl), *end = p + GRPC_SLICE_LENGTH(sl);
    uint64_t len;
    if (p == end || *p++ != (2 << 3 | 2) || !read_len(&p, end, &len) || len != (uint64_t)(end - p))
        return NULL;
    size_t n = 0, bytes = 0;
    for (const uint8_t *q = p; q < end;) {
        uint64_t l;
        if (*q++ != (1 << 3 | 2) || !read_len(&q, end, &l) || l > (uint64_t)(end - q))
            return NULL;
        for (uint64_t i = 0; i < l; i++)
            if (q[i] < 0x20 || q[i] > 0x7e)
                return NULL;
        q += l;
        n++;
        bytes += l + 1;
    }
    if (n == 0)
        return NULL;
    char **v = malloc(n * sizeof(char *) + bytes);
    if (!v)
        abort();
    char *s = (char *)(v + n);
    for (size_t i = 0; p < end; i++) {
        uint64_t l = 0;
        p++;
        read_varint(&p, end, &l);
        memcpy(s, p, l);
        s[l] = '\0';
        v[i] = s;
        s += l + 1;
        p += l;
    }
    *n_out = n;
    return v;
}

static void handle_subscribe_msg(call_t *c, grpc_slice sl)
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
        if (check_credits(c, r->credits)) {
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

/* ---- reflection ---- */

static void reflection_load(ks_grpc_t *s)
{
    /* FileDescriptorSet: field 1, length-delimited, repeated; each is a
     * FileDescriptorProto whose field 1 is the file name. */
    const unsigned char *p = ks_descriptor_set, *end = p + ks_descriptor_set_len;
    while (p < end && s->file_cnt < 16) {
        uint64_t tag, len;
        if (!read_varint(&p, end, &tag) || !read_varint(&p, end, &len) || tag != ((1 << 3) | 2) ||
            len > (uint64_t)(end - p))
            break;
        s->files[s->file_cnt].data = (uint8_t *)(uintptr_t)p;
        s->files[s->file_cnt].len = len;
        /* name: field 1 (tag 0x0a), short length */
        if (len > 2 && p[0] == 0x0a && p[1] < 128 && (size_t)p[1] + 2 <= len)
            snprintf(s->file_names[s->file_cnt], sizeof(s->file_names[0]), "%.*s", (int)p[1],
                     (const char *)p + 2);
        s->file_cnt++;
        p += len;
    }
}

static bool known_symbol(const char *sym)
{
    static const char *packages[] = {"ksidecar.v1.", "grpc.health.v1.", "grpc.reflection.v1.",
                                     "grpc.reflection.v1alpha."};
    for (size_t i = 0; i < sizeof(packages) / sizeof(packages[0]); i++)
        if (!strncmp(sym, packages[i], strlen(packages[i])))
            return true;
    return false;
}

static void handle_reflection_msg(call_t *c, grpc_slice sl)
{
    ks_grpc_t *s = c->s;
    Grpc__Reflection__V1__ServerReflectionRequest *r =
        UNPACK(x, grpc__reflection__v1__server_reflection_request, sl);
    if (!r) {
        bad_message(c, "ServerReflectionRequest");
        return;
    }
    Grpc__Reflection__V1__ServerReflectionResponse resp =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    resp.valid_host = r->host;
    resp.original_request = r;
    Grpc__Reflection__V1__ListServiceResponse ls =
        GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1__ServiceResponse svc[NSERVICES];
    Grpc__Reflection__V1__ServiceResponse *svcp[NSERVICES];
    Grpc__Reflection__V1__FileDescriptorResponse fd =
        GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    Grpc__Reflection__V1__ErrorResponse er = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    char emsg[300];
    bool found = false;
    switch (r->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        for (size_t i = 0; i < NSERVICES; i++) {
            grpc__reflection__v1__service_response__init(&svc[i]);
            svc[i].name = (char *)(uintptr_t)service_names[i];
            svcp[i] = &svc[i];
        }
        ls.n_service = NSERVICES;
        ls.service = svcp;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        resp.list_services_response = &ls;
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        for (size_t i = 0; i < s->file_cnt; i++)
            found = found || !strcmp(s->file_names[i], r->file_by_filename);
        snprintf(emsg, sizeof(emsg), "file not found: %.200s", r->file_by_filename);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        found = known_symbol(r->file_containing_symbol);
        snprintf(emsg, sizeof(emsg), "symbol not found: %.200s", r->file_containing_symbol);
        break;
    default:
        snprintf(emsg, sizeof(emsg), "extensions are not supported");
        break;
    }
    if (r->message_request_case !=
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES) {
        if (found) {
            /* Our files are few: each answer carries all of them, dependencies included. */
            fd.n_file_descriptor_proto = s->file_cnt;
            fd.file_descriptor_proto = s->files;
            resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
            resp.file_descriptor_response = &fd;
        } else {
            er.error_code = GRPC_STATUS_NOT_FOUND;
            er.error_message = emsg;
            resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
            resp.error_response = &er;
        }
    }
    call_send(c, &resp.base);
    grpc__reflection__v1__server_reflection_request__free_unpacked(r, NULL);
}

/* ---- call lifecycle ---- */

static void on_recv(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    grpc_byte_buffer *bb = c->recv_buf;
    c->recv_buf = NULL;
    bool done = c->status_started || c->want_status;
    pthread_mutex_unlock(&c->lock);
    if (!ok || !bb) {
        /* Half-close, or the call ended. A unary call with no message is bad input;
         * a stream the client closed ends with OK. */
        if (ok && !done) {
            if (!c->stream_in && c->method != M_HEALTH_WATCH)
                call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
            else if (c->method != M_HEALTH_WATCH) {
                if (c->opened)
                    ks_engine_release(c->s->eng, c->group, c->sub);
                call_finish(c, GRPC_STATUS_OK, "%s", "");
            }
        }
        if (bb)
            grpc_byte_buffer_destroy(bb);
        call_unref(c);
        return;
    }
    grpc_slice sl = flatten(bb);
    grpc_byte_buffer_destroy(bb);
    if (!done) {
        if (c->method == M_SUBSCRIBE)
            handle_subscribe_msg(c, sl);
        else if (c->method == M_REFLECT_V1 || c->method == M_REFLECT_V1ALPHA)
            handle_reflection_msg(c, sl);
        else
            handle_unary(c, sl);
    }
    grpc_slice_unref(sl);
    /* Streams keep reading; unary and server-streaming calls read once (then the
     * half-close). */
    pthread_mutex_lock(&c->lock);
    done = c->status_started || c->want_status || c->closed;
    pthread_mutex_unlock(&c->lock);
    if (!done && c->stream_in)
        start_recv(c);
    call_unref(c);
}

static void list_remove(ks_grpc_t *s, call_t *c)
{
    pthread_mutex_lock(&s->lock);
    if (c->prev)
        c->prev->next = c->next;
    else if (s->calls == c)
        s->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    pthread_mutex_unlock(&s->lock);
}

static void on_close(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    c->closed = true;
    /* Queued messages will never go out now. */
    for (size_t i = 0; i < c->qn; i++)
        item_drop_locked(c, &c->q[(c->qh + i) % c->qcap]);
    c->qn = 0;
    bool stalled = c->stalled;
    pthread_mutex_unlock(&c->lock);
    if (c->opened) {
        /* A cancelled or ended stream: its leases go back to the pool now. */
        if (stalled)
            ks_engine_release_unread(c->s->eng, c->group, c->sub);
        else
            ks_engine_release(c->s->eng, c->group, c->sub);
        uncount_stream(c);
        ks_dbg(LOGC, "stream %s closed%s", c->sub, c->cancelled ? " (cancelled)" : "");
    }
    list_remove(c->s, c);
    call_unref(c); /* the list's reference */
    call_unref(c); /* this batch's */
}

static void arm_request(ks_grpc_t *s);

static void on_accept(void *ctx, bool ok)
{
    call_t *c = ctx;
    ks_grpc_t *s = c->s;
    if (!ok || atomic_load(&s->stopping)) {
        if (ok && c->call)
            grpc_call_cancel_with_status(c->call, GRPC_STATUS_UNAVAILABLE, "shutting down", NULL);
        call_unref(c);
        return;
    }
    arm_request(s);
    size_t ml = GRPC_SLICE_LENGTH(c->details.method);
    const char *mp = (const char *)GRPC_SLICE_START_PTR(c->details.method);
    c->method = M_UNKNOWN;
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strlen(methods[i].path) == ml && !memcmp(methods[i].path, mp, ml)) {
            c->method = methods[i].m;
            c->stream_in = methods[i].stream_in;
        }
    /* Track the call; watch for its end. */
    pthread_mutex_lock(&s->lock);
    c->next = s->calls;
    if (s->calls)
        s->calls->prev = c;
    s->calls = c;
    pthread_mutex_unlock(&s->lock);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    pthread_mutex_lock(&c->lock);
    c->refs += 2; /* the list's, and the close batch's */
    if (grpc_call_start_batch(c->call, &op, 1, &c->ev_close, NULL) != GRPC_CALL_OK)
        c->refs -= 2;
    pthread_mutex_unlock(&c->lock);

    if (c->method == M_UNKNOWN) {
        call_finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method %.*s", (int)ml, mp);
    } else {
        bool needs_auth = false;
        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
            if (methods[i].m == c->method)
                needs_auth = methods[i].needs_auth;
        /* A token must be valid before anything is read; group checks come later. */
        if (!needs_auth || authorized(c, NULL))
            start_recv(c);
    }
    call_unref(c); /* the accept's reference */
}

static void arm_request(ks_grpc_t *s)
{
    call_t *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->s = s;
    c->refs = 1; /* the accept's */
    pthread_mutex_init(&c->lock, NULL);
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->req_md);
    c->ev_accept = (ev_t){on_accept, c};
    c->ev_recv = (ev_t){on_recv, c};
    c->ev_send = (ev_t){on_send_done, c};
    c->ev_close = (ev_t){on_close, c};
    c->ev_status = (ev_t){on_status_done, c};
    c->ev_kick = (ev_t){on_kick, c};
    c->last_health = -1;
    if (grpc_server_request_call(s->server, &c->call, &c->details, &c->req_md, s->cq, s->cq,
                                 &c->ev_accept) != GRPC_CALL_OK) {
        ks_err(LOGC, "grpc_server_request_call failed");
        call_free(c);
    }
}

static void *cq_main(void *arg)
{
    ks_grpc_t *s = arg;
    for (;;) {
        grpc_event e = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (e.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (e.type != GRPC_OP_COMPLETE)
            continue;
        ev_t *ev = e.tag;
        if (ev && ev->fn)
            ev->fn(ev->ctx, e.success != 0);
    }
    return NULL;
}

/* Takes a reference on each live call for which pick(c, arg) holds (run with c->lock
 * held), at most max of them, into out. Returns how many. */
static size_t pick_calls(ks_grpc_t *s, bool (*pick)(call_t *c, const void *arg), const void *arg,
                         call_t **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (call_t *c = s->calls; c && n < max; c = c->next) {
        pthread_mutex_lock(&c->lock);
        if (pick(c, arg)) {
            c->refs++;
            out[n++] = c;
        }
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return n;
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

/* A health Watch whose last answer differs from the status now: marked answered. */
static bool pick_health(call_t *c, const void *status)
{
    int now = *(const int *)status;
    if (c->method != M_HEALTH_WATCH || c->last_health < 0 || c->last_health == now || c->closed)
        return false;
    c->last_health = now;
    return true;
}

/* Cuts off the Subscribe streams whose client took no message for grpc.stream_stall_ms
 * (a send in flight that long): their leases go back first, counting no attempt, then
 * the call is cancelled. @locality the health thread */
static void cut_stalled(ks_grpc_t *s)
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

/* Sends health Watch updates when Kafka's reachability changes. */
static void *health_main(void *arg)
{
    ks_grpc_t *s = arg;
    while (!atomic_load(&s->stopping)) {
        struct timespec ts = {0, 250 * 1000000};
        nanosleep(&ts, NULL);
        cut_stalled(s);
        int now = health_status(s);
        call_t *todo[256];
        size_t n = pick_calls(s, pick_health, &now, todo, 256);
        for (size_t i = 0; i < n; i++) {
            Grpc__Health__V1__HealthCheckResponse hr =
                GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
            hr.status = now;
            call_send(todo[i], &hr.base);
            call_unref(todo[i]);
        }
    }
    return NULL;
}

/* ---- setup and shutdown ---- */

static char *read_file(const char *path, char *err, size_t errsize, const char *key)
{
    char *buf = ks_read_file(path);
    if (!buf)
        snprintf(err, errsize, "config key '%s': cannot read %s", key, path);
    return buf;
}

ks_grpc_t *ks_grpc_start(ks_engine_t *eng, const ks_config_t *cfg, const ks_auth_t *auth, char *err,
                         size_t errsize)
{
    grpc_init();
    ks_grpc_t *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->eng = eng;
    s->cfg = cfg;
    s->auth = auth;
    atomic_init(&s->stopping, false);
    atomic_init(&s->next_id, 1);
    pthread_mutex_init(&s->lock, NULL);
    reflection_load(s);

    grpc_arg args[2];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)(uintptr_t)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)cfg->grpc_max_message_bytes;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)(uintptr_t)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = (int)cfg->grpc_max_message_bytes;
    grpc_channel_args cargs = {2, args};
    s->cq = grpc_completion_queue_create_for_next(NULL);
    s->server = grpc_server_create(&cargs, NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);

    grpc_server_credentials *creds;
    if (*cfg->tls_cert_file) {
        char *cert = read_file(cfg->tls_cert_file, err, errsize, "tls.cert_file");
        char *key = cert ? read_file(cfg->tls_key_file, err, errsize, "tls.key_file") : NULL;
        char *ca = NULL;
        if (key && *cfg->tls_client_ca_file)
            ca = read_file(cfg->tls_client_ca_file, err, errsize, "tls.client_ca_file");
        if (!cert || !key || (*cfg->tls_client_ca_file && !ca)) {
            free(cert);
            free(key);
            free(ca);
            goto fail;
        }
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        creds = grpc_ssl_server_credentials_create_ex(
            ca, &pair, 1,
            ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
        free(cert);
        free(key);
        free(ca);
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    s->port = grpc_server_add_http2_port(s->server, cfg->grpc_listen, creds);
    grpc_server_credentials_release(creds);
    if (s->port == 0) {
        snprintf(err, errsize, "cannot listen for gRPC on %s (config key 'grpc.listen')",
                 cfg->grpc_listen);
        goto fail;
    }
    grpc_server_start(s->server);
    for (int i = 0; i < ARMED_REQUESTS; i++)
        arm_request(s);
    s->nthreads = cfg->grpc_threads;
    s->threads = calloc((size_t)s->nthreads, sizeof(pthread_t));
    if (!s->threads)
        abort();
    for (int i = 0; i < s->nthreads; i++)
        pthread_create(&s->threads[i], NULL, cq_main, s);
    pthread_create(&s->health_thread, NULL, health_main, s);
    ks_info(LOGC, "listening on %s (port %d%s)", cfg->grpc_listen, s->port,
            *cfg->tls_cert_file ? (*cfg->tls_client_ca_file ? ", mTLS" : ", TLS") : "");
    return s;

fail:
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(s->cq);
    pthread_mutex_destroy(&s->lock);
    free(s);
    grpc_shutdown();
    return NULL;
}

int ks_grpc_port(const ks_grpc_t *g)
{
    return g->port;
}

static void on_shutdown_done(void *ctx, bool ok)
{
    atomic_store((atomic_bool *)ctx, true);
}

void ks_grpc_stop(ks_grpc_t *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, true);
    pthread_join(s->health_thread, NULL);
    atomic_bool done;
    atomic_init(&done, false);
    ev_t ev = {on_shutdown_done, &done};
    grpc_server_shutdown_and_notify(s->server, s->cq, &ev);
    grpc_server_cancel_all_calls(s->server);
    for (int i = 0; i < 500 && !atomic_load(&done); i++) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    grpc_completion_queue_destroy(s->cq);
    free(s->threads);
    free(s->peers);
    pthread_mutex_destroy(&s->lock);
    free(s);
    grpc_shutdown();
}
