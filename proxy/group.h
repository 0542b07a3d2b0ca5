/* group.h: one consumer group, run by its own single-threaded loop that owns its rd_kafka_t. */
#ifndef KS_GROUP_H
#define KS_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "types.h"

typedef struct ks_group ks_group_t;

/* Asked from the group loop when a dynamic group has been idle for group.idle_close_ms.
 * Returns true if the group may close (the engine has unregistered it). */
typedef bool(ks_group_idle_fn)(ks_group_t *g, void *opaque);

/* Called from the group loop with one group's status; the callee owns st. */
typedef void(ks_group_status_cb)(ks_group_status_t *st, void *opaque);

/* Checks that librdkafka accepts every kafka.* property. Returns 0, or -1 with err
 * naming the key. */
int ks_group_check_kafka_conf(const ks_config_t *cfg, char *err, size_t errsize);

/* Makes the group and its consumer and starts its thread. A static group subscribes
 * to gconf's topics at once and never closes for idleness. cfg and gconf are borrowed
 * and must outlive the group. Returns NULL with err on failure. */
ks_group_t *ks_group_start(const char *name, const ks_config_t *cfg, const ks_group_conf_t *gconf,
                           bool is_static, uint32_t instance, ks_group_idle_fn *idle_fn,
                           void *idle_opaque, char *err, size_t errsize);

const char *ks_group_name(const ks_group_t *g);

/* Posts a fetch to the loop. Any thread. topics and opts are copied; opts as
 * ks_cmd_validate left them (its deadline and subscriber filled in). Returns KS_OK
 * (cb will run once) or KS_E_UNAVAILABLE when the group is closing (cb will not run). */
ks_status_t ks_group_fetch(ks_group_t *g, const char *const *topics, size_t topic_cnt,
                           const ks_fetch_opts_t *opts, ks_fetch_cb *cb, void *opaque);

/* Posts acks, nacks or lease extensions. Any thread. Same returns as ks_group_fetch. */
ks_status_t ks_group_settle(ks_group_t *g, ks_settle_op_t op, int64_t ms, const char *reason,
                            const char *const *ids, size_t n, ks_ack_cb *cb, void *opaque);

/* Posts a status request. Any thread. Same returns as ks_group_fetch. */
ks_status_t ks_group_status(ks_group_t *g, ks_group_status_cb *cb, void *opaque);

/* Posts a seek. Any thread. Same returns as ks_group_fetch. */
ks_status_t ks_group_seek(ks_group_t *g, const char *topic, int32_t partition, ks_seek_kind_t kind,
                          int64_t value, ks_seek_cb *cb, void *opaque);

/* Posts the release of a subscriber's leases and waiting fetches. Any thread. */
void ks_group_release(ks_group_t *g, const char *subscriber);

/* As ks_group_release, and none of the subscriber's leases counts an attempt (it was
 * cut off for not reading). Any thread. */
void ks_group_release_unread(ks_group_t *g, const char *subscriber);

/* Posts what became of a confirmed batch (ks_engine_delivered). Any thread. */
void ks_group_delivered(ks_group_t *g, uint64_t token, bool taken);

/* Stops delivering: waiting and later fetches end with UNAVAILABLE. Any thread. */
void ks_group_stop_delivering(ks_group_t *g);

/* Asks the loop to wait for outstanding acks until ack_deadline_ms (CLOCK_MONOTONIC),
 * then commit, leave the group and exit. Any thread. */
void ks_group_request_shutdown(ks_group_t *g, int64_t ack_deadline_ms);

/* Waits until the loop exited or deadline_ms (CLOCK_MONOTONIC) passed. Returns 0 once
 * exited, -1 on timeout. */
int ks_group_join(ks_group_t *g, int64_t deadline_ms);

/* True once the loop thread has finished (join will not block). */
bool ks_group_exited(const ks_group_t *g);

/* Frees a group whose loop has exited and been joined. */
void ks_group_destroy(ks_group_t *g);

#endif
