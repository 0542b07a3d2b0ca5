/* grpc_int.h: what the gRPC edge's files share: the call and server state, and their internal
 * functions, by file. The files' calls form a chain, each calling only those below it
 * (scripts/check_calls.py): grpc_cq.c and grpc_wire.c at the bottom (they call none), then
 * grpc_call.c, grpc_submit.c, grpc_stream.c and grpc_reflect.c, grpc_methods.c (the table
 * names their handlers), grpc_server.c on top. Private to api/grpc/. */
#ifndef KS_GRPC_INT_H
#define KS_GRPC_INT_H

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ack_id.h"
#include "codec.h"
#include "substream.h"
#include "grpc_api.h"
#include "grpc_tsan.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "ksidecar/v1/consumer.pb-c.h"
#include "ksidecar/v1/producer.pb-c.h"

#define LOGC           "grpc"
#define ARMED_REQUESTS 16
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
static inline int64_t msg_max_record_bytes(const ks_config_t *cfg)
{
    return cfg->grpc_max_message_bytes / 4 * 3;
}

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
    M_REDRIVE,
    M_PRODUCE,
    M_HEALTH_CHECK,
    M_HEALTH_WATCH,
    M_REFLECT_V1,
    M_REFLECT_V1ALPHA,
} method_t;

/* A completion-queue tag: what to run when the event comes. */
typedef struct ev {
    void (*fn)(void *ctx, bool ok);
    void *ctx;
} ev_t;

typedef struct settle_ctx settle_ctx_t;

/* A queued message: encoded already (bb), or encoded when its send starts, on a
 * completion-queue thread rather than the group loop's (a record batch, or acks with
 * their results). */
typedef struct send_item {
    grpc_byte_buffer *bb;
    ks_batch_t *batch;
    settle_ctx_t *acks;
    ks_ack_result_t *results;
} send_item_t;

typedef struct call call_t;
typedef struct gprod gprod_t;

/* An engine command's result, stored with the call by its callback (call_reply) for the
 * method's reply encoder: the result (the encoder takes it), its count, and a context. */
typedef struct reply {
    void *res;
    size_t n;
    void *ctx;
} reply_t;

/* A method: one row of the table in grpc_methods.c. */
typedef struct method_row {
    const char *path;
    method_t m;
    ks_cmd_t cmd;    /* the engine command its decoder sends; KS_CMD_NONE: the edge answers */
    bool stream_in;  /* the client streams messages */
    bool needs_auth; /* a token (or certificate) must be valid before anything is read */
    /* The request message; the router (grpc_route_msg) decodes it. */
    const ProtobufCMessageDescriptor *req;
    /* The group the request names (NULL: none), whose scope the router checks first. */
    const char *(*group_of)(const ProtobufCMessage *m);
    /* The request decoder: takes one decoded message (borrowed), checks the rest and sends
     * its command to the engine, or finishes the call. @locality a completion-queue thread */
    void (*decode)(call_t *c, ProtobufCMessage *m);
    /* A client stream's later messages, as they came (NULL: each goes through the router
     * like the first). */
    void (*next)(call_t *c, grpc_slice sl);
    /* The reply encoder (NULL: the method answers otherwise): answers from the result
     * call_reply stored, frees it and drops the command's reference on the call.
     * @locality a completion-queue thread */
    void (*encode)(call_t *c, const reply_t *r);
} method_row_t;

typedef struct peer_count {
    char host[264];
    int streams;
} peer_count_t;

struct ks_grpc {
    ks_engine_t *eng;
    const ks_config_t *cfg;
    const ks_auth_t *auth;
    ks_tls_t *tls;            /* NULL: plaintext */
    pthread_mutex_t tls_lock; /* guards tls_gen */
    uint64_t tls_gen;         /* the reading the last handshake's config came from */
    grpc_server *server;
    grpc_completion_queue *cq;
    int port;
    pthread_t *threads;
    int nthreads;
    pthread_t health_thread;
    atomic_bool stopping;
    ks_subhub_t *hub;     /* every subscriber stream of the process, and the stall sweep */
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
    ev_t ev_accept, ev_recv, ev_send, ev_close, ev_status, ev_kick, ev_reply, ev_arrive;
    method_t method;
    const method_row_t *row; /* NULL: an unknown method */
    bool stream_in;
    bool routed;          /* its first message went through the router (on_recv's thread only) */
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
    /* The record message in flight: its batch's deliver_token and bytes, reported to the
     * stream's core (ks_substream_msg_done) when the send completes. */
    bool in_flight_batch;
    uint64_t in_flight_token;
    int64_t in_flight_bytes;
    bool want_status;
    grpc_status_code st;
    char msg[512];
    /* Subscribe streams: the subscriber-stream core (set up by stream_init, has_ss; ss is
     * guarded by its own lock, taken after this one). */
    bool has_ss;
    ks_substream_t ss;
    char peer_host[264];       /* what its streams count against: identity, else host */
    const ks_principal_t *who; /* who called (set by authorized); NULL without auth */
    bool counted;
    /* A unary command's result, waiting for ev_reply on a completion-queue thread. */
    reply_t reply;
    /* A unary Fetch's group, for the report of its batch (ks_engine_delivered); a health
     * Watch's group ("ksidecar.group.<name>"), which the health thread follows. NULL: none.
     * Set once, by the method's decoder under lock; freed with the call. */
    char *group;
    /* Health watches: the status last sent (-1: none to follow). */
    int last_health;
    /* A unary Fetch's reply in flight since (ms; 0: none): its records are held for it (no
     * lease runs until the send ends), so one the client does not take is cut off
     * (call_cut_stalled_replies). */
    int64_t reply_since_ms;
    /* The schema formats the Fetch or the Open named (key_schema, value_schema; 0: the
     * group's), set before its first batch. */
    ks_codec_opts_t fmt;
    /* A Produce that names schemas: its refusals and, while the registry fetches, its
     * request (grpc_produce.c; set and cleared under lock). */
    gprod_t *prod;
};

/* What an engine settle answers: the ids it was asked about, kept with the call. */
struct settle_ctx {
    call_t *c;
    char **ids;
    size_t n;
    size_t nres;              /* results: one per record (a range id has one per offset) */
    bool stream;              /* answer on the Subscribe stream, not as a unary reply */
    bool by_position;         /* results_by_position: only the results not accepted */
    ks_ack_result_t *results; /* a stream's, until their turn to be queued */
};

#define UNPACK(type, fn, sl) fn##__unpack(NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl))

/* ---- grpc_cq.c: the completion-queue threads ---- */

/* A completion-queue thread (arg: the ks_grpc_t): runs each event's handler until the queue
 * shuts down. */
void *cq_main(void *arg);
/* True on a completion-queue thread (set by cq_main). */
bool on_cq_thread(void);

/* ---- grpc_call.c: references, the send queue, the final status, the caller ---- */

grpc_status_code grpc_code_of(ks_status_t st);
void call_ref(call_t *c);
void call_unref(call_t *c);
/* Frees c at once (a call grpc never matched: no references out). */
void call_free(call_t *c);
/* Drops a queued message that will never go out. Locked by caller. */
void item_drop_locked(call_t *c, send_item_t *it);
/* Queues a message (the call takes it.bb and it.batch). */
void call_send_item(call_t *c, send_item_t it);
/* Queues an encoded message (the call takes bb). */
void call_send_bb(call_t *c, grpc_byte_buffer *bb);
/* Queues a message (m is packed now; the caller keeps m). */
void call_send(call_t *c, const ProtobufCMessage *m);
/* Ends the call with a status once the queued messages are out. */
void call_finish(call_t *c, grpc_status_code st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Completion-queue events of a call's sends (the ev_send, ev_status and ev_kick tags). */
void on_send_done(void *ctx, bool ok);
void on_status_done(void *ctx, bool ok);
void on_kick(void *ctx, bool ok);
void on_reply(void *ctx, bool ok);
/* Stores an engine command's result with c and wakes a completion-queue thread, where
 * the method's reply encoder takes it (and the command's reference on c). Encodes
 * nothing itself. @locality any thread; the engine's callbacks */
void call_reply(call_t *c, void *res, size_t n, void *ctx);
/* Reads the next message (ev_recv). */
void start_recv(call_t *c);
/* The verified client certificate's subject (RFC 2253) into buf, or NULL without mTLS. */
const char *cert_subject(const call_t *c, char *buf, size_t size);
/* Identifies the caller and checks the group scope for group (NULL: identity only).
 * Finishes the call and returns false when refused. */
bool grpc_authorized(call_t *c, const char *group);
/* Checks topic names and the caller's scope over each. Finishes the call and returns
 * false when refused. Call after grpc_authorized(). */
bool grpc_scoped(call_t *c, ks_scope_t scope, const char *verb, const char *const *names, size_t n);

/* Frees a settle's context and its ids. */
void settle_ctx_free(settle_ctx_t *x);
/* Finishes the call: the request is not a valid `what` message. */
void bad_message(call_t *c, const char *what);
/* Takes a reference on each live call for which pick(c, arg) holds (run with c->lock
 * held), at most max of them, into out. Returns how many. */
size_t pick_calls(ks_grpc_t *s, bool (*pick)(call_t *c, const void *arg), const void *arg,
                  call_t **out, size_t max);
/* Cancels each unary Fetch whose reply has been in flight for grpc.stream_stall_ms: the
 * send fails, and its records go back counting no attempt. @locality the health thread */
void call_cut_stalled_replies(ks_grpc_t *s);

/* ---- grpc_submit.c: a call's commands to the engine ---- */

/* Sends cmd to the engine through its one door (ks_engine_submit), holding a reference on c
 * for the command's callback. Returns KS_OK (the callback will run and drop it), or the
 * error, after finishing c with the engine's message (the callback never runs). */
ks_status_t grpc_submit(call_t *c, const ks_cmd_req_t *cmd);
/* A fetch's KS_FETCH_UNSET_* bits from its protobuf fields: 0, protobuf's "not set", is no
 * valid max or deadline_ms, so it takes the default. (wait_ms 0 is a valid value: no wait.) */
unsigned grpc_fetch_unset(int32_t max, int32_t deadline_ms);
/* Sends ids (one block, as ks_strv_pack makes; grpc_settle_owned takes it) to the engine.
 * Returns false (call finished) on a synchronous error. */
bool grpc_settle_owned(call_t *c, const char *group, ks_settle_op_t op, int64_t ms,
                       const char *reason, bool dead_letter, char **ids, size_t n, bool stream,
                       bool wait_commit, int32_t commit_timeout_ms, bool by_position);
/* grpc_settle_owned for ids the caller keeps. */
bool grpc_settle(call_t *c, const char *group, ks_settle_op_t op, int64_t ms, const char *reason,
                 bool dead_letter, char **ids, size_t n, bool stream);

/* ---- grpc_produce.c: Producer/Produce ---- */

/* The Produce row's decoder and encoder (the engine's answer, or a schema the registry
 * fetched: the request again). @locality a completion-queue thread */
void grpc_produce_decode(call_t *c, ProtobufCMessage *m);
void grpc_produce_encode(call_t *c, const reply_t *r);
/* Whether c is a Produce waiting for the registry, no pass running. Locked by caller. */
bool grpc_produce_waits_locked(const call_t *c);
/* c's client left or the server stops: a Produce waiting for the registry is answered
 * UNAVAILABLE on a completion-queue thread and its wakes forgotten (one in a pass ends so
 * when the pass does). @locality any thread but the registry's */
void grpc_produce_stop_wait(call_t *c);

/* ---- grpc_wire.c: encoders and decoders by hand ---- */

/* Packs m into a new byte buffer. */
grpc_byte_buffer *grpc_pack(const ProtobufCMessage *m);
/* Copies a received message into one contiguous slice. Caller unrefs. */
grpc_slice grpc_flatten(grpc_byte_buffer *bb);
/* Encodes b's records as a FetchResponse, or (wrap) as SubscribeResponse{batch}, their keys
 * and values as the record codec shows them: in o's formats (encode_records: the defaults). */
grpc_byte_buffer *encode_records(const ks_batch_t *b, bool wrap);

/* A request's value_format and key_format (NULL or "": the group's) into o's value_schema and
 * key_schema (1 + ks_rec_format_t; 0 for the group's). False, with err, for a name that is
 * none. */
bool grpc_schema_formats(const char *value_format, const char *key_format, ks_codec_opts_t *o,
                         char *err, size_t errsize);
grpc_byte_buffer *encode_records_as(const ks_batch_t *b, bool wrap, const ks_codec_opts_t *o);
/* Encodes SubscribeResponse{ack_results} for x's ids and their results res. */
grpc_byte_buffer *encode_ack_results(const settle_ctx_t *x, const ks_ack_result_t *res);
Ksidecar__V1__AckStatus ack_status_of(ks_status_t st);
/* The same for one result, with where a waited ack's commit stands (COMMITTED, ...). */
Ksidecar__V1__AckStatus ack_result_status(const ks_ack_result_t *r);
/* Reads a varint at *p. False when it runs past end or past 64 bits. */
bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v);
/* SubscribeRequest{ack} read in place into one block of ids (ks_strv_pack's shape), or
 * NULL for any other message (protobuf-c reads those). */
char **grpc_fast_ack_ids(grpc_slice sl, size_t *n_out, bool *by_position);

/* ---- grpc_methods.c: the method table, unary methods ---- */

/* The row for a method path (len bytes), or NULL. */
const method_row_t *method_find(const char *path, size_t len);
/* One received message of c: decoded, the caller checked, then the method's decoder. */
void grpc_route_msg(call_t *c, grpc_slice sl);

/* ---- grpc_stream.c: Subscribe ---- */

/* Makes c (a Subscribe call) a transport of the subscriber-stream core. */
void stream_init(call_t *c);
/* The stream's arrived batches (ev_arrive): the core drains them. */
void on_arrive(void *ctx, bool ok);
/* Subscribe's first message (open), its group for the router, and its later messages. */
void stream_first(call_t *c, ProtobufCMessage *m);
const char *stream_group_of(const ProtobufCMessage *m);
void stream_next(call_t *c, grpc_slice sl);
/* The stream no longer counts against its client's limit. */
void uncount_stream(call_t *c);

/* ---- grpc_reflect.c: health and reflection ---- */

int health_status(ks_grpc_t *s);
bool known_service(const char *name);
/* Indexes the embedded descriptor set's files into s. */
void reflection_load(ks_grpc_t *s);
/* Health Check and Watch's request. */
void decode_health(call_t *c, ProtobufCMessage *m);
/* One message of a reflection stream. */
void handle_reflection_msg(call_t *c, ProtobufCMessage *m);
/* The health thread: Watch updates, every 250 ms. */
void *health_main(void *arg);

#endif
