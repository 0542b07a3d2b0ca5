/* engine.h: the engine's public commands, shared by every API edge (HTTP, gRPC). */
#ifndef KS_ENGINE_H
#define KS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Outcomes, named as gRPC status codes so every edge maps them the same way. */
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
} ks_status_t;

/* "INVALID_ARGUMENT", "NOT_FOUND", ... */
const char *ks_status_name(ks_status_t s);

typedef struct ks_header {
    const char *name;
    const void *value; /* NULL for a null header value */
    size_t value_len;
} ks_header_t;

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
    const char *ack_id;
    int attempt; /* 1 on first delivery */
} ks_record_t;

typedef struct ks_batch {
    ks_status_t status; /* KS_OK, or why no records came */
    char message[256];  /* a message a person can act on, when status != KS_OK */
    size_t cnt;
    ks_record_t *recs;
    void *arena; /* holds every record's bytes; freed with the batch */
} ks_batch_t;

void ks_batch_free(ks_batch_t *b);

typedef struct ks_ack_result {
    ks_status_t status;
    const char *reason; /* static text */
} ks_ack_result_t;

/* Called once per accepted fetch, from a group loop thread. The callee owns batch. */
typedef void(ks_fetch_cb)(ks_batch_t *batch, void *opaque);

/* Called once per accepted ack command, from a group loop thread. results has one
 * entry per ack id, in order; the callee owns it (free()). */
typedef void(ks_ack_cb)(ks_ack_result_t *results, size_t n, void *opaque);

typedef struct ks_engine ks_engine_t;

/* Makes an engine for cfg (borrowed; must outlive the engine). Starts no group yet.
 * Returns NULL with err on failure. */
ks_engine_t *ks_engine_new(const ks_config_t *cfg, char *err, size_t errsize);

/* Long-poll fetch: up to max records of the given topics from group, waiting up to
 * wait_ms for the first. Creates the group on first use if its name is allowed, and
 * extends its subscription with new topics. Any thread.
 * Returns KS_OK, and cb runs exactly once later; or an error with err filled, and cb
 * never runs. */
ks_status_t ks_engine_fetch(ks_engine_t *e, const char *group, const char *const *topics,
                            size_t topic_cnt, int max, int wait_ms, ks_fetch_cb *cb, void *opaque,
                            char *err, size_t errsize);

/* Acks ack ids of group. Any thread. Returns KS_OK and cb runs exactly once later,
 * or an error with err filled and cb never runs. */
ks_status_t ks_engine_ack(ks_engine_t *e, const char *group, const char *const *ack_ids, size_t n,
                          ks_ack_cb *cb, void *opaque, char *err, size_t errsize);

/* Checks a group name against the syntax and the allowed patterns. Returns KS_OK or
 * KS_E_INVALID / KS_E_PERMISSION with err. */
ks_status_t ks_engine_check_group(const ks_engine_t *e, const char *group, char *err,
                                  size_t errsize);

/* Shutdown, step 1: stop delivering. Waiting fetches finish now (UNAVAILABLE), new
 * ones are refused; acks are still taken. Any thread. */
void ks_engine_stop_delivering(ks_engine_t *e);

/* Shutdown, step 2: every group commits what is acked, leaves the group and stops.
 * Returns 0 when all stopped within grace_ms, -1 otherwise. */
int ks_engine_shutdown(ks_engine_t *e, int grace_ms);

/* Frees the engine. Call after ks_engine_shutdown returned 0. */
void ks_engine_destroy(ks_engine_t *e);

#endif
