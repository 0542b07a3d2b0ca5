/* group_loop.h: one consumer group's single-threaded loop, which owns its rd_kafka_t. */
#ifndef KS_GROUP_LOOP_H
#define KS_GROUP_LOOP_H

#include <stdint.h>

#include "config.h"
#include "engine.h"

typedef struct ks_group ks_group_t;

/* Makes the group and its consumer (not yet subscribed) and starts its thread.
 * cfg is borrowed and must outlive the group. Returns NULL with err on failure. */
ks_group_t *ks_group_start(const char *name, const ks_config_t *cfg, uint32_t instance, char *err,
                           size_t errsize);

/* Checks that librdkafka accepts every kafka.* property. Returns 0, or -1 with err
 * naming the key. */
int ks_group_check_kafka_conf(const ks_config_t *cfg, char *err, size_t errsize);

const char *ks_group_name(const ks_group_t *g);

/* Posts a fetch to the loop. Any thread. topics are copied. Returns KS_OK (cb will run
 * once) or KS_E_UNAVAILABLE when the group is shutting down (cb will not run). */
ks_status_t ks_group_fetch(ks_group_t *g, const char *const *topics, size_t topic_cnt, int max,
                           int wait_ms, ks_fetch_cb *cb, void *opaque);

/* Posts acks to the loop. Any thread. ids are copied. Same returns as ks_group_fetch. */
ks_status_t ks_group_ack(ks_group_t *g, const char *const *ids, size_t n, ks_ack_cb *cb,
                         void *opaque);

/* Stops delivering: waiting and later fetches end with UNAVAILABLE. Any thread. */
void ks_group_stop_delivering(ks_group_t *g);

/* Asks the loop to commit, leave the group and exit. Any thread. */
void ks_group_request_shutdown(ks_group_t *g);

/* Waits until the loop exited or deadline_ms (CLOCK_MONOTONIC) passed. Returns 0 once
 * exited, -1 on timeout. */
int ks_group_join(ks_group_t *g, int64_t deadline_ms);

/* Frees a group whose loop has exited. */
void ks_group_destroy(ks_group_t *g);

/* CLOCK_MONOTONIC in ms. */
int64_t ks_now_ms(void);

#endif
