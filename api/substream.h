/* substream.h: the transport-neutral core of a subscriber stream (gRPC Subscribe, the HTTP
 * stream, push): its parked fetches, credits, arrival queue, refill, assignment diff, the
 * bound on what its transport has queued, stall cut-off and release. A transport plugs in
 * through ks_substream_ops_t and keeps only its wire code.
 *
 * Life of a stream: the transport embeds a ks_substream_t in its own refcounted object and
 * calls ks_substream_init; it checks the caller (edge policy) and then ks_substream_check and
 * ks_substream_start; records then come through ops->send_records, and the transport reports
 * each record message's fate with ks_substream_msg_done, and every send it has in flight with
 * ks_substream_send_begin/_end (the stall clock). Lock order: a transport's own lock may be
 * held when it calls the core; the core never holds its lock while it calls an op. It ends the
 * stream with ks_substream_stop (an error is on its way), ks_substream_release (the client went:
 * leases back now) and, last, ks_substream_close (leaves the hub), then ks_substream_destroy when
 * its object is freed. The core talks to the engine through ks_engine_submit, and checks a
 * stream's settings with ks_cmd_validate before it opens. */
#ifndef KS_SUBSTREAM_H
#define KS_SUBSTREAM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "cmd.h"
#include "config.h"
#include "engine.h"
#include "types.h"

/* Fetches a stream keeps parked: while one batch is on its way, the next fills. */
#define KS_SUBSTREAM_PIPELINE 2
/* How long a parked fetch waits when nothing comes (it is parked again at once). */
#define KS_SUBSTREAM_WAIT_MS 30000

typedef struct ks_substream ks_substream_t;
typedef struct ks_subhub ks_subhub_t;

/* A call the transport's thread makes in its turn among the arrived batches. */
typedef void(ks_substream_defer_fn)(void *t, void *arg);

/* One arrival: a batch (fn NULL), or a deferred call. */
typedef struct ks_substream_item {
    ks_batch_t *b;
    ks_substream_defer_fn *fn;
    void *arg;
} ks_substream_item_t;

/* What a transport gives the core. t is the transport's object (ks_substream_init's t). No
 * op is called with the core's lock held, so an op may call back into the core.
 * @locality as each op says */
typedef struct ks_substream_ops {
    /* Takes and drops a reference on t: the core holds one per fetch out and while it runs
     * an op from a thread other than the transport's own. Any thread. */
    void (*ref)(void *t);
    void (*unref)(void *t);
    /* Asks the transport to call ks_substream_drain on its own thread soon (the engine's
     * answers arrived). Called from the group loop; must not block. Returns false when it
     * cannot, and the core then drains on the caller's thread. */
    bool (*wake)(void *t);
    /* A batch of records for the wire; the transport takes b. Exactly one
     * ks_substream_msg_done(b->deliver_token, b->bytes, taken) must follow, when it was sent
     * or dropped. @locality the transport's thread (from ks_substream_drain) */
    void (*send_records)(void *t, ks_batch_t *b);
    /* The assignment changed since the stream was last told: rev partitions taken away, as
     * new ones (both borrowed). Revocations are told first. Either count may be 0, not both.
     * @locality the transport's thread */
    void (*send_assignment)(void *t, const ks_tp_t *rev, size_t nrev, const ks_tp_t *as,
                            size_t nas);
    /* The stream must end with st and msg (a fetch the engine refused): the transport sends
     * the error once what is queued is out. On a stream a tokens-file reload ended
     * (ks_substream_revoked) nothing queued goes out: each record message not yet begun is
     * dropped (ks_substream_msg_done, taken false) and the error follows the send in flight,
     * if any. @locality any thread */
    void (*finish)(void *t, ks_status_t st, const char *msg);
    /* The client took nothing for the stall time: cut the connection now. Its leases were
     * given back already. @locality the hub's sweep thread */
    void (*cut)(void *t, const char *msg);
    /* The transport's name for the records' receive spans: "grpc", "http", "push". */
    const char *name;
} ks_substream_ops_t;

/* What a stream asks for when it opens, all borrowed. */
typedef struct ks_substream_open {
    const char *group;
    const char *const *topics;
    size_t topic_cnt;
    const char *subscriber; /* "" or NULL: the transport's default name */
    int64_t credit_records; /* 0: the server's default */
    int64_t credit_bytes;
    int deadline_ms;      /* 0: the server's default */
    unsigned unset;       /* KS_FETCH_UNSET_* bits (cmd.h) */
    int max_batch;        /* most records in one message */
    int64_t max_bytes;    /* most key+value bytes in one message (0: no bound) */
    bool ordered_batches; /* the client processes a chain's records in the order received */
    uint8_t key_format, value_format; /* ks_fetch_opts_t's */
    const ks_principal_t *who;        /* the caller (NULL: no auth); checked again after a reload */
} ks_substream_open_t;

/* The limits a transport holds its stream to (config keys of its own). */
typedef struct ks_substream_limits {
    int queue_messages;    /* record messages queued or in flight at most */
    int64_t queue_bytes;   /* their key+value bytes at most */
    int stall_ms;          /* a send in flight this long cuts the stream off */
    const char *stall_key; /* the config key stall_ms comes from, for the message */
} ks_substream_limits_t;

/* A stream. The transport embeds it; its fields are the core's. */
struct ks_substream {
    const ks_substream_ops_t *ops;
    void *t;
    ks_subhub_t *hub;
    ks_substream_limits_t lim;
    ks_cmd_t cmd;
    pthread_mutex_t lock; /* guards every field below */
    bool opened;          /* started: it has a group and a subscriber */
    bool stopped;         /* no more records: what arrives goes back */
    bool stalled;         /* cut off for not reading: its leases go back uncounted */
    bool unread;          /* released uncounted (ks_substream_release_unread): later too */
    bool revoked;         /* ended by a tokens-file reload: queued record messages are dropped */
    bool in_hub;
    char group[256];
    char sub[KS_SUBSCRIBER_KEY_MAX];
    char **topics;
    size_t topic_cnt;
    int64_t credit_records, credit_bytes;
    int deadline_ms;
    unsigned unset;
    int max_batch;
    int64_t max_bytes;
    bool ordered_batches;
    uint8_t key_format, value_format;
    int fetches_out;
    bool fetch_blocked; /* a fetch was held back at the queue bound; msg_done re-arms */
    int q_msgs;         /* record messages queued or in flight in the transport */
    int64_t q_bytes;
    int64_t send_started_ms; /* the transport's send in flight began (0: none) */
    /* What the engine answered, oldest first: batches (each holding its fetch's reference on
     * t) and deferred calls (ks_substream_defer); drain_posted: a wake is on its way or a
     * drain runs (one at a time). */
    ks_substream_item_t *arrived;
    size_t arrived_h, arrived_n, arrived_cap;
    bool drain_posted;
    const ks_principal_t *who; /* the caller, as the tokens file in force knows it */
    ks_tp_t *snap;             /* the assignment the stream was last told */
    size_t snap_cnt;
    ks_substream_t *hub_next, *hub_prev; /* guarded by the hub's lock */
};

/* Every live stream of every transport, and the thread that cuts off stalled ones (every
 * 250 ms). Returns NULL when the thread cannot start. Made once, by main. */
ks_subhub_t *ks_subhub_new(ks_engine_t *eng, const ks_config_t *cfg);
/* From now on the sweep also checks each stream's caller against the tokens file in force
 * (auth reloads it): a stream whose token or subject was removed ends UNAUTHENTICATED, one
 * whose scopes no longer cover its group or topics PERMISSION_DENIED; its leases go back
 * counting no attempt. auth must outlive the hub. Call before any stream opens. */
void ks_subhub_watch_auth(ks_subhub_t *h, const ks_auth_t *auth);
/* Stops the sweep thread and frees the hub; every stream must have closed. */
void ks_subhub_free(ks_subhub_t *h);
/* The config the hub was made with. Any thread. */
const ks_config_t *ks_subhub_cfg(const ks_subhub_t *h);
/* Streams open now (every transport). Any thread. */
size_t ks_subhub_count(ks_subhub_t *h);

/* Prepares ss for transport t, serving engine command cmd (KS_CMD_FETCH). */
void ks_substream_init(ks_substream_t *ss, ks_subhub_t *hub, const ks_substream_ops_t *ops, void *t,
                       ks_cmd_t cmd, const ks_substream_limits_t *lim);
/* Frees what ss holds (the transport's object is going: no fetch is out). */
void ks_substream_destroy(ks_substream_t *ss);

/* Checks what o asks for by the engine's validator (every range and default is there).
 * Returns KS_OK or the error, with err naming it. Any thread. */
ks_status_t ks_substream_check(ks_substream_t *ss, const ks_substream_open_t *o, char *err,
                               size_t errsize);
/* Starts a checked stream: names its subscriber (o->subscriber, else dflt, with a number
 * unique in the process), joins the hub and parks the first fetches. */
void ks_substream_start(ks_substream_t *ss, const ks_substream_open_t *o, const char *dflt);

/* New credits from the client: checked like an open (err on failure); when valid they go
 * to the engine at once unless the transport's queue is at its bound (the next fetch then
 * carries them). */
ks_status_t ks_substream_credits(ks_substream_t *ss, int64_t records, int64_t bytes, char *err,
                                 size_t errsize);

/* Runs the arrived batches: records to ops->send_records, assignment news, the next
 * fetches; or, on a stopped stream, the leases back. @locality the transport's thread, after
 * ops->wake */
void ks_substream_drain(ks_substream_t *ss);

/* Runs fn(t, arg) on the transport's thread after every batch that arrived before it, in
 * order: an engine answer the transport sends on the stream (ack results) then goes out after
 * the records the engine delivered before it, never ahead of them. Call from the group loop
 * (an engine callback); fn owns arg and any reference the caller holds on t. */
void ks_substream_defer(ks_substream_t *ss, ks_substream_defer_fn *fn, void *arg);

/* A record message left the transport's queue: token and bytes are its batch's
 * (deliver_token, bytes); taken: the client's side took it. Its leases start (or go back) in
 * the engine. Returns true when a fetch held back at the bound may go now: the transport then
 * calls ks_substream_refill once it holds no lock of its own. Takes only the core's lock and
 * posts to the engine, so a transport may call it with its own lock held. Any thread. */
bool ks_substream_msg_done(ks_substream_t *ss, uint64_t token, int64_t bytes, bool taken);
/* Parks fetches up to the pipeline depth, unless the transport's queue is at its bound. Call
 * with no lock of the transport's held (it takes a reference through ops->ref). */
void ks_substream_refill(ks_substream_t *ss);
/* The transport's queue has room for records (ops->send_records would not pass the bound). */
bool ks_substream_has_room(ks_substream_t *ss);
/* The transport began a send (any message) / its send ended: the stall clock. */
void ks_substream_send_begin(ks_substream_t *ss, int64_t now_ms);
void ks_substream_send_end(ks_substream_t *ss);

/* No more records for this stream: no fetch is parked again, batches that still arrive give
 * their leases back. Idempotent. Any thread. */
void ks_substream_stop(ks_substream_t *ss);
/* ks_substream_stop, and the subscriber's leases go back now (counting an attempt, unless
 * the stream was cut off for not reading). Any thread. */
void ks_substream_release(ks_substream_t *ss);
/* ks_substream_release, but the leases go back without counting an attempt, now and on every
 * later release of the stream (ks_substream_close, batches still arriving): for a transport
 * whose client went away, as a closed HTTP stream. Any thread. */
void ks_substream_release_unread(ks_substream_t *ss);
/* ks_substream_release, and the stream leaves the hub. Call once, when the transport's
 * connection ended. */
void ks_substream_close(ks_substream_t *ss);

/* Accessors, for the transport's wire code and logs. */
static inline const char *ks_substream_group(const ks_substream_t *ss)
{
    return ss->group;
}
static inline const char *ks_substream_sub(const ks_substream_t *ss)
{
    return ss->sub;
}
/* Started and not stopped. */
bool ks_substream_live(ks_substream_t *ss);
/* A tokens-file reload ended the stream (its caller was removed or its scopes narrowed): the
 * transport must begin no further send of what it has queued. Takes the core's lock only, so
 * a transport may ask with its own lock held. Any thread. */
bool ks_substream_revoked(ks_substream_t *ss);

#endif
