/* types.h: the types the engine, the group loops and the edges share: status codes, records,
 * batches, results and the callbacks that carry them. */
#ifndef KS_TYPES_H
#define KS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "status_fields.h"

/* Outcomes, named as gRPC status codes so every edge maps them the same way. The one
 * table of each code's name, gRPC code and HTTP status is in types.c. */
typedef enum {
    KS_OK = 0,
    KS_E_INVALID = -1,     /* INVALID_ARGUMENT */
    KS_E_NOT_FOUND = -2,   /* NOT_FOUND */
    KS_E_STALE = -3,       /* FAILED_PRECONDITION */
    KS_E_EXHAUSTED = -4,   /* RESOURCE_EXHAUSTED */
    KS_E_UNAVAILABLE = -5, /* UNAVAILABLE */
    KS_E_PERMISSION = -6,  /* PERMISSION_DENIED */
    KS_E_UNAUTH = -7,      /* UNAUTHENTICATED */
    KS_E_INTERNAL = -8,    /* INTERNAL */
    /* RESOURCE_EXHAUSTED refined for HTTP, where the status says more: */
    KS_E_URI_TOO_LONG = -9, /* HTTP 414: a URL past the edge's bound */
    KS_E_BUSY = -10,        /* HTTP 429 with Retry-After: 1: an edge's bound, free again soon */
    KS_E_ABORTED = -11,     /* ABORTED, HTTP 409: it clashes with one running (a redrive) */
    KS_E_DEADLINE = -12,    /* DEADLINE_EXCEEDED, HTTP 504: no answer by the request's deadline */
} ks_status_t;

/* "INVALID_ARGUMENT", "NOT_FOUND", ...; "UNKNOWN" for a value outside the enum. Any thread. */
const char *ks_status_name(ks_status_t s);

/* The gRPC status code (grpc_status_code's value: 3 for INVALID_ARGUMENT, ...) of s;
 * INTERNAL (13) for a value outside the enum. Any thread. */
int ks_status_grpc_code(ks_status_t s);

/* The HTTP status of s (200, 400, 404, 409, 429, 503, 403, 401, 414, 504); 500 for INTERNAL and
 * for a value outside the enum. Any thread. */
int ks_status_http(ks_status_t s);

/* The Retry-After seconds an HTTP answer of s carries, 0 for none. Any thread. */
int ks_status_retry_after(ks_status_t s);

typedef struct ks_header {
    const char *name;
    const void *value; /* NULL for a null header value */
    size_t value_len;
} ks_header_t;

typedef struct ks_tp {
    char topic[256];
    int32_t partition;
} ks_tp_t;

/* One delivered record. Every pointer points into its batch. */
typedef struct ks_record {
    const char *topic;
    int32_t partition;
    int64_t offset;
    int64_t timestamp; /* ms since the epoch, -1 if unknown */
    const void *key;   /* NULL for a null key */
    size_t key_len;
    const void *value; /* NULL for a null value (tombstone) */
    size_t value_len;
    const ks_header_t *headers;
    size_t header_cnt;
    /* The rest of the record's ack id (with topic, partition, offset and attempt);
     * ks_record_ack_id writes it out. The edges do that on their own threads. */
    uint32_t ack_instance, ack_group_hash, ack_epoch;
    int attempt; /* 1 on first delivery */
    /* With opts.ordered_batches: the record's ordering chain (equal for the records of one
     * key, or of the partition, that must be processed in order); 0 for none. */
    uint64_t ordering_chain;
} ks_record_t;

/* Writes r's ack id into buf (KS_ACK_ID_MAX bytes suffice). Returns its length. */
size_t ks_record_ack_id(const ks_record_t *r, char *buf, size_t size);

/* The same, through w (proxy/ack_id.h), for a batch's records one after another. */
struct ks_ack_id_writer;
size_t ks_record_ack_id_put(struct ks_ack_id_writer *w, const ks_record_t *r, char *buf,
                            size_t size);

/* How keys or values are shown (group.value_format, group.key_format, a request's own): as
 * bytes (text or base64), or decoded to JSON with a schema from the schema registry. */
typedef enum ks_rec_format {
    KS_FMT_BINARY = 0,
    KS_FMT_AVRO,
    KS_FMT_JSON_SCHEMA,
    KS_FMT_AUTO,       /* decoded when in the schema wire format with an id the registry knows */
    KS_FMT_AVRO_PLAIN, /* avro, with unions as their value rather than {"type": value} */
    KS_FMT_PROTOBUF,
} ks_rec_format_t;

/* The names ks_rec_format_from_str takes, for messages. */
#define KS_REC_FORMAT_NAMES "binary, avro, avro_plain, json_schema, protobuf or auto"

/* The format named s ("binary", "avro", "json_schema", "auto", "avro_plain", "protobuf"), or
 * -1. */
int ks_rec_format_from_str(const char *s);
/* Its name. */
const char *ks_rec_format_str(ks_rec_format_t f);

typedef struct ks_batch {
    ks_status_t status; /* KS_OK, or why no records came */
    char message[256];  /* a message a person can act on, when status != KS_OK */
    size_t cnt;
    ks_record_t *recs;
    void *arena; /* holds every record's bytes; freed with the batch */
    /* With opts.notify: the group's current assignment (of the fetch's topics), set
     * when it changed since this subscriber's last batch. */
    int has_assignment;
    size_t assign_cnt;
    ks_tp_t *assigned;
    /* With opts.confirm: names this batch in ks_engine_delivered (0 when it has no
     * records). bytes: the records' key+value bytes. */
    uint64_t deliver_token;
    int64_t bytes;
    /* The group's group.key_format and group.value_format, for a request that names none. */
    uint8_t key_format, value_format;
} ks_batch_t;

void ks_batch_free(ks_batch_t *b);

/* What a fetch asks for. */
typedef struct ks_fetch_opts {
    int max;                /* 1 .. fetch.max_records */
    int wait_ms;            /* 0 .. fetch.max_wait_ms */
    int deadline_ms;        /* lease deadline; 0 takes lease.deadline_ms */
    const char *subscriber; /* the pull session's name; NULL or "" is "default" */
    int64_t credit_records; /* the subscriber's credits; 0 takes subscriber.max_records */
    int64_t credit_bytes;   /* 0 takes subscriber.max_bytes */
    int64_t max_bytes;      /* most key+value bytes in the batch, 0 for no bound; a batch
                             * always holds at least one record */
    int notify;             /* also end the wait when the assignment changed, with a snapshot */
    int confirm;            /* the edge reports the batch with ks_engine_delivered: its leases start
                             * (and its attempts count) only when the transport took it */
    int hold_stalled;       /* with confirm, for a subscriber that is one stream: while one of its
                             * batches has waited over a second for the transport (the client
                             * reads nothing), its leases wait instead of expiring; the edge cuts
                             * such a stream off (ks_engine_release_unread) */
    int ordered_batches;    /* the subscriber processes a chain's records in the order received:
                             * it may hold up to ordering.max_in_flight_per_key of one chain at
                             * once (else one), and its records carry their ordering_chain */
    uint8_t key_format;     /* 1 + ks_rec_format_t the request shows keys in; 0: the group's */
    uint8_t value_format;   /* the same for values: a schema format's records wait for their
                             * schema in the registry's cache before they are taken */
    const char *transport;  /* "grpc", "http" or "push" (static), for the receive span; NULL:
                             * not named */
} ks_fetch_opts_t;

/* What to do with a batch of ack ids. */
typedef enum {
    KS_SETTLE_ACK = 0, /* done: the commit may pass it */
    KS_SETTLE_NACK,    /* put it back, after `ms` (a delay) if > 0 */
    KS_SETTLE_EXTEND,  /* its lease now ends `ms` from now */
} ks_settle_op_t;

/* Where an accepted ack stands against the broker's commits, for a settle that waited for
 * them (wait_commit); KS_COMMIT_NONE for any other. */
typedef enum {
    KS_COMMIT_NONE = 0,  /* not asked */
    KS_COMMIT_ACCEPTED,  /* the wait ended first: no confirmed commit covers it yet */
    KS_COMMIT_COMMITTED, /* a commit the broker confirmed is past its offset */
    KS_COMMIT_LOST,      /* its partition went (revoke, seek) before that: it comes again */
    KS_COMMIT_FAILED,    /* the commit that was to cover it failed (reason: the broker's) */
} ks_commit_wait_t;

typedef struct ks_ack_result {
    ks_status_t status;
    const char *reason;       /* static text */
    ks_commit_wait_t commit;  /* with wait_commit, for an accepted ack (status KS_OK) */
    int64_t committed_offset; /* with commit: its partition's confirmed commit point, -1 none */
} ks_ack_result_t;

/* "ACCEPTED", "COMMITTED", "LOST_TO_REBALANCE", "COMMIT_FAILED"; NULL for KS_COMMIT_NONE. */
const char *ks_commit_wait_name(ks_commit_wait_t w);

/* Called once per accepted fetch, from a group loop thread. The callee owns batch. */
typedef void(ks_fetch_cb)(ks_batch_t *batch, void *opaque);

/* Called once per accepted ack command, from a group loop thread. results has one
 * entry per ack id, in order; the callee owns it (free()). */
typedef void(ks_ack_cb)(ks_ack_result_t *results, size_t n, void *opaque);

/* Room for a subscriber name (KS_NAME_MAX) with a "#<stream number>" and its NUL. */
#define KS_SUBSCRIBER_KEY_MAX (KS_NAME_MAX + 16)
/* Room for any name a status holds: a group, a topic or a subscriber. */
#define KS_STATUS_NAME_MAX KS_SUBSCRIBER_KEY_MAX

/* A histogram of durations in fixed buckets, kept by a group loop where the event happens
 * (one compare per bound) and copied into its status. counts[i]: values <= bounds_ms[i] and
 * above the bound before; counts[KS_HIST_BUCKETS]: above every bound. */
#define KS_HIST_BUCKETS 14
extern const int64_t ks_hist_bounds_ms[KS_HIST_BUCKETS];
typedef struct ks_hist {
    int64_t counts[KS_HIST_BUCKETS + 1];
    int64_t sum_ms, count;
} ks_hist_t;

/* Counts one value (ms; a negative one, from clocks apart, counts as 0). Cannot fail. */
void ks_hist_add(ks_hist_t *h, int64_t ms);

/* A group's status, made by its group loop (group_status.c): one member per row of
 * status_fields.h, which says what each holds. */
#define KS_SF_C_NAME(m)     char m[KS_STATUS_NAME_MAX];
#define KS_SF_C_NAME_OPT(m) char m[KS_STATUS_NAME_MAX];
#define KS_SF_C_TEXT(m)     const char *m;
#define KS_SF_C_BOOL(m)     int m;
#define KS_SF_C_I32(m)      int32_t m;
#define KS_SF_C_I64(m)      int64_t m;
#define KS_SF_C_I64_OPT(m)  int64_t m;
#define KS_SF_C_HIST(m)     ks_hist_t m;
#define KS_SF_C_TOPICS(m)                                                                          \
    char **m; /* NULL-terminated, one block with the names */                                      \
    size_t topic_cnt;
#define KS_SF_C_PARTS(m)                                                                           \
    struct ks_part_status *m;                                                                      \
    size_t part_cnt;
#define KS_SF_C_SUBS(m)                                                                            \
    struct ks_sub_status *m;                                                                       \
    size_t sub_cnt;
#define KS_SF_C_MEMORY(m)  ks_mem_status_t m;
#define KS_SF_C_CREDITS(m) ks_credits_status_t m;
/* The counters' rows are members of the group's struct itself (KS_STATUS_COUNTER_FIELDS). */
#define KS_SF_C_COUNTERS(m)
#define KS_SF_C(type, m, pb, name, num, kind, doc) KS_SF_C_##type(m)

typedef struct ks_credits_status {
    KS_STATUS_CREDITS_FIELDS(KS_SF_C)
} ks_credits_status_t;

typedef struct ks_mem_status {
    KS_STATUS_MEMORY_FIELDS(KS_SF_C)
} ks_mem_status_t;

typedef struct ks_part_status {
    KS_STATUS_PART_FIELDS(KS_SF_C)
} ks_part_status_t;

typedef struct ks_sub_status {
    KS_STATUS_SUB_FIELDS(KS_SF_C)
} ks_sub_status_t;

typedef struct ks_group_status {
    KS_STATUS_GROUP_FIELDS(KS_SF_C)
    KS_STATUS_COUNTER_FIELDS(KS_SF_C)
} ks_group_status_t;

void ks_group_status_free(ks_group_status_t *s);

/* Called once with every requested group's status (n may be 0); the callee owns the
 * array and each element (ks_group_status_free, then free(groups)). */
typedef void(ks_status_cb)(ks_group_status_t **groups, size_t n, void *opaque);

/* Where a seek moves a partition. */
typedef enum {
    KS_SEEK_OFFSET = 0,
    KS_SEEK_TIMESTAMP,
    KS_SEEK_EARLIEST,
    KS_SEEK_LATEST,
} ks_seek_kind_t;

/* One partition a seek moved. */
typedef struct ks_seek_part {
    int32_t partition;
    int64_t offset;       /* the position now fetched from (-2 earliest, -1 latest) */
    int64_t stale_leases; /* leases of it the seek made stale */
} ks_seek_part_t;

typedef struct ks_seek_result {
    ks_status_t status;
    char message[256];
    int64_t offset;       /* the first partition's parts[0].offset (a one-partition seek's) */
    int64_t stale_leases; /* leases the seek made stale, every partition's */
    size_t part_cnt;      /* the partitions moved, in parts (0 on an error) */
    ks_seek_part_t parts[];
} ks_seek_result_t;

/* Called once from the group loop; the callee owns res (free(), one block). */
typedef void(ks_seek_cb)(ks_seek_result_t *res, void *opaque);

/* One record to produce. */
typedef struct ks_produce_rec {
    const char *topic;
    int32_t partition; /* -1: by the key (the default partitioner) */
    const void *key;   /* NULL: null key */
    size_t key_len;
    const void *value; /* NULL: null value */
    size_t value_len;
    const ks_header_t *headers;
    size_t header_cnt;
} ks_produce_rec_t;

typedef struct ks_produce_result {
    int32_t partition;
    int64_t offset;
    char error[160]; /* empty on success */
    char code[48];   /* Kafka's name for the error ("MSG_SIZE_TOO_LARGE"); empty on success */
} ks_produce_result_t;

/* The longest timeout_ms a produce may give (produce.timeout_ms's range too). */
#define KS_PRODUCE_TIMEOUT_MAX_MS 300000

/* The code of a record left unsettled at its produce's deadline (it may yet be written). */
#define KS_PRODUCE_TIMED_OUT "DEADLINE_EXCEEDED"

/* How many of results (n) were left unsettled at their produce's deadline. Pure. */
size_t ks_produce_timed_out(const ks_produce_result_t *results, size_t n);

/* Called once, from the producer's thread; the callee owns results (free()). */
typedef void(ks_produce_cb)(ks_produce_result_t *results, size_t n, void *opaque);

/* One dead letter a redrive left where it was: held by the loop guard (redriven: its count)
 * or skipped (reason). */
typedef struct ks_redrive_item {
    int32_t partition;
    int64_t offset;
    int32_t redriven;
    char reason[200];
} ks_redrive_item_t;

/* Records moved back to one topic. */
typedef struct ks_redrive_topic {
    char topic[256];
    int64_t moved;
} ks_redrive_topic_t;

/* Where a redrive left one partition of the dead-letter topic: the next offset it reads. */
typedef struct ks_redrive_part {
    int32_t partition;
    int64_t next_offset;
} ks_redrive_part_t;

/* What a redrive did (or, dry_run, would do). held and skipped list at most
 * KS_REDRIVE_LIST_MAX entries each; held_total and skipped_total count them all. */
typedef struct ks_redrive_result {
    ks_status_t status; /* not KS_OK: nothing was read; message says why */
    char message[256];
    char error[256]; /* a produce failed: the place stopped before it; "" when none */
    bool dry_run;
    char dead_letter_topic[256];
    int64_t moved;     /* records produced back and delivered */
    int64_t remaining; /* records left below the high watermarks taken at the start */
    int64_t held_total, skipped_total;
    size_t held_cnt, skipped_cnt, topic_cnt, part_cnt;
    ks_redrive_item_t *held, *skipped;
    ks_redrive_topic_t *by_topic;
    ks_redrive_part_t *parts;
} ks_redrive_result_t;

#define KS_REDRIVE_LIST_MAX 1000

/* Frees res and its arrays; NULL is fine. Any thread. */
void ks_redrive_result_free(ks_redrive_result_t *res);

/* Called once from the redrive's own thread; the callee owns res (ks_redrive_result_free). */
typedef void(ks_redrive_cb)(ks_redrive_result_t *res, void *opaque);

/* Whether a redrive may produce to topic for the caller (its produce scope); the edge's,
 * called on the redrive's thread while the command's callback has not run. */
typedef bool(ks_redrive_allow_fn)(const char *topic, void *opaque);

/* The kinds of names clients give. Each is at most KS_NAME_MAX characters. */
typedef enum {
    KS_NAME_GROUP = 0,  /* Kafka's syntax: [A-Za-z0-9._-], not "." or ".." */
    KS_NAME_TOPIC,      /* the same */
    KS_NAME_SUBSCRIBER, /* any characters */
} ks_name_kind_t;

#endif
