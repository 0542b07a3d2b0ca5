/* cmd.h: an engine command as one value (ks_cmd_req_t), and the one validator that holds
 * every range and default a command's arguments have. */
#ifndef KS_CMD_H
#define KS_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmd_list.h"
#include "config.h"
#include "types.h"

typedef enum {
#define KS_CMD_ENUM(n, s, f) KS_CMD_##n,
    KS_CMD_LIST(KS_CMD_ENUM)
#undef KS_CMD_ENUM
        KS_CMD__CNT /* not a command: how many there are */
} ks_cmd_t;

/* No engine command: an edge's table row that the edge answers itself (a probe, reflection). */
#define KS_CMD_NONE KS_CMD__CNT

/* "fetch", "settle", ...; "unknown" outside the enum. Any thread. */
const char *ks_cmd_name(ks_cmd_t t);

/* t's KS_CMDF_* flags (cmd_list.h); 0 outside the enum. Any thread. */
unsigned ks_cmd_flags(ks_cmd_t t);

/* One command and its arguments: the one shape a command has from the edge to its handler.
 * An edge's request borrows what it points to until ks_engine_submit returns; a group's inbox
 * holds a deep copy (ks_cmd_copy), which its loop's handler receives as is. The callback and
 * opaque of the command's member answer it. */
typedef struct ks_cmd_req {
    ks_cmd_t type;
    const char *group; /* with KS_CMDF_GROUP; for STATUS, NULL asks for every group */
    union {
        struct {
            const char *const *topics;
            size_t topic_cnt;
            ks_fetch_opts_t opts; /* ks_cmd_validate fills in its defaults */
            unsigned unset;       /* KS_FETCH_UNSET_*: options the client did not give */
            ks_fetch_cb *cb;
            void *opaque;
        } fetch;
        struct {
            ks_settle_op_t op;
            int64_t ms;         /* NACK: the redelivery delay; EXTEND: the new deadline from now */
            const char *reason; /* NACK: kept for the dead-letter headers; "" is none (NULL) */
            bool dead_letter;   /* NACK: dead-letter at once, whatever the attempt count */
            const char *const *ack_ids;
            size_t n;
            size_t records;   /* ks_cmd_validate: the records ack_ids name (a range names each
                               * of its offsets); 0 before it ran */
            bool wait_commit; /* ACK: answer once confirmed commits cover the acks */
            int32_t commit_timeout_ms; /* wait_commit: at most this long; 0 is the default */
            ks_ack_cb *cb;
            /* wait_commit on a stream: cb answers at once, as without a wait, and confirm_cb
             * exactly once more, later, with where each accepted ack's commit stands (a
             * result not accepted keeps its status). NULL: cb answers once, after the wait. */
            ks_ack_cb *confirm_cb;
            void *opaque;
            void *confirm_opaque;
        } settle;
        struct {
            ks_status_cb *cb;
            void *opaque;
        } status;
        struct {
            const char *topic;
            int32_t partition;
            bool all_partitions; /* every partition of topic assigned here; partition unused */
            ks_seek_kind_t kind;
            int64_t value;
            ks_seek_cb *cb;
            void *opaque;
        } seek;
        struct {
            const char *subscriber;
        } release; /* RELEASE and RELEASE_UNREAD; no answer */
        struct {
            uint64_t token; /* 0 is ignored */
            bool taken;
        } delivered; /* no answer */
        struct {
            const ks_produce_rec_t *recs;
            size_t n;
            ks_produce_cb *cb;
            void *opaque;
            int timeout_ms; /* the answer's deadline; 0: produce.timeout_ms */
        } produce;
        struct {
            int32_t max;  /* records read at most; 0: KS_CMD_REDRIVE_DEFAULT_MAX */
            bool dry_run; /* read and report only: nothing produced, nothing committed */
            ks_redrive_allow_fn *allow; /* may the caller produce to a topic; NULL: yes */
            void *allow_opaque;
            ks_redrive_cb *cb;
            void *opaque;
        } redrive; /* never copied into an inbox: its thread reads it before submit returns */
        struct {
            int64_t ack_deadline_ms; /* acks are waited for until then (CLOCK_MONOTONIC) */
        } shutdown;                  /* no answer; STOP_DELIVERING has no arguments */
    } u;
} ks_cmd_req_t;

/* What a copy of each command's arguments copies deep (ks_cmd_copy), one macro per catalogue
 * row (a row without one does not build): S(field) a string, V(field, count) count strings;
 * NULL stays NULL. The group name is copied for every command. Anything else is copied as is:
 * numbers, callbacks, and what the caller keeps alive itself. */
#define KS_CMD_DEEP_FETCH(S, V)           V(fetch.topics, fetch.topic_cnt) S(fetch.opts.subscriber)
#define KS_CMD_DEEP_SETTLE(S, V)          V(settle.ack_ids, settle.n) S(settle.reason)
#define KS_CMD_DEEP_STATUS(S, V)          /* callback only */
#define KS_CMD_DEEP_SEEK(S, V)            S(seek.topic)
#define KS_CMD_DEEP_RELEASE(S, V)         S(release.subscriber)
#define KS_CMD_DEEP_RELEASE_UNREAD(S, V)  S(release.subscriber)
#define KS_CMD_DEEP_DELIVERED(S, V)       /* numbers only */
#define KS_CMD_DEEP_PRODUCE(S, V)         /* never copied: ks_producer_send copies the records */
#define KS_CMD_DEEP_REDRIVE(S, V)         /* never copied: redrive.c copies what it keeps */
#define KS_CMD_DEEP_STOP_DELIVERING(S, V) /* no arguments */
#define KS_CMD_DEEP_SHUTDOWN(S, V)        /* numbers only */

/* A fetch's options the client left out (u.fetch.unset): ks_cmd_validate fills each in with
 * its default and clears the bit; a value given is checked against its range, so an explicit
 * max=0 is refused while a missing max is the default. An edge whose wire cannot tell "not
 * set" from 0 (protobuf) sets the bit for 0 where 0 is not a valid value. */
#define KS_FETCH_UNSET_MAX      0x1 /* min(KS_CMD_DEFAULT_MAX, fetch.max_records) records */
#define KS_FETCH_UNSET_WAIT     0x2 /* fetch.default_wait_ms */
#define KS_FETCH_UNSET_DEADLINE 0x4 /* lease.deadline_ms */

/* A settle's wait for its commit: the default and the most (commit_timeout_ms), and the
 * settles that may wait at once in one group (more are refused, RESOURCE_EXHAUSTED). */
#define KS_CMD_COMMIT_WAIT_DEFAULT_MS 5000
#define KS_CMD_COMMIT_WAIT_MAX_MS     60000
#define KS_CMD_COMMIT_WAITERS_MAX     1024

/* The records a fetch that names no max asks for (at most fetch.max_records). */
#define KS_CMD_DEFAULT_MAX 100

/* The records a redrive reads when it names no max, and the most it may name. */
#define KS_CMD_REDRIVE_DEFAULT_MAX 1000
#define KS_CMD_REDRIVE_MAX         100000

/* The subscriber a fetch without one is served as. */
#define KS_CMD_DEFAULT_SUBSCRIBER "default"

/* Checks req against cfg: every name, range and count its command takes, and fills in the
 * defaults (a fetch's unset options and its subscriber) and the plain form of what may be said
 * two ways (an empty reason is none; hold_stalled without confirm is off), so the handler
 * reads the arguments as they are. Every command has its case. Validating twice is harmless.
 * Returns KS_OK, or KS_E_INVALID / KS_E_PERMISSION with err naming the argument, its bound and the
 * config key behind it. Whether the group runs is not its business (ks_engine_submit). Any thread.
 */
ks_status_t ks_cmd_validate(const ks_config_t *cfg, ks_cmd_req_t *req, char *err, size_t errsize);

/* The bytes ks_cmd_copy needs beyond the ks_cmd_req_t for what req points to. Any thread. */
size_t ks_cmd_copy_size(const ks_cmd_req_t *req);

/* Copies req into *dst, and what its pointers reach (the group, and KS_CMD_DEEP_<NAME>) into
 * buf, which holds ks_cmd_copy_size(req) bytes aligned for a pointer; dst's pointers then
 * reach into buf, and it borrows nothing from req. Cannot fail. Any thread. */
void ks_cmd_copy(ks_cmd_req_t *dst, const ks_cmd_req_t *req, void *buf);

/* Checks a name's syntax and length, the one bound every edge shares (ks_engine_check_name). */
ks_status_t ks_cmd_check_name(ks_name_kind_t kind, const char *name, char *err, size_t errsize);

/* True if topic is internal to Kafka ("__*") and topics.allow_internal is off. */
bool ks_cmd_internal_topic(const ks_config_t *cfg, const char *topic);

/* Checks topic names a client gives (ks_engine_check_topics). */
ks_status_t ks_cmd_check_topics(const ks_config_t *cfg, const char *const *topics, size_t n,
                                const char *verb, char *err, size_t errsize);

/* Checks a group name against the syntax and groups.allowed (ks_engine_check_group). */
ks_status_t ks_cmd_check_group(const ks_config_t *cfg, const char *group, char *err,
                               size_t errsize);

#endif
