/* group.h: one consumer group, run by its own single-threaded loop that owns its rd_kafka_t. */
#ifndef KS_GROUP_H
#define KS_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "cmd.h"
#include "config.h"
#include "types.h"

typedef struct ks_group ks_group_t;

/* Asked from the group loop when a dynamic group has been idle for group.idle_close_ms.
 * Returns true if the group may close (the engine has unregistered it). */
typedef bool(ks_group_idle_fn)(ks_group_t *g, void *opaque);

/* Makes the group and its consumer and starts its thread. A static group subscribes
 * to gconf's topics at once and never closes for idleness. cfg and gconf are borrowed
 * and must outlive the group. Returns NULL with err on failure. */
ks_group_t *ks_group_start(const char *name, const ks_config_t *cfg, const ks_group_conf_t *gconf,
                           bool is_static, uint32_t instance, ks_group_idle_fn *idle_fn,
                           void *idle_opaque, char *err, size_t errsize);

const char *ks_group_name(const ks_group_t *g);

/* Posts req, validated (ks_cmd_validate; the engine's STOP_DELIVERING and SHUTDOWN need no
 * check), to the loop, which serves it with the handler its catalogue row names: a deep copy,
 * so req and what it points to are borrowed for the call only. A STATUS is answered with the
 * one group's status. Returns KS_OK (the command's callback, if it has one, runs exactly once
 * on the loop), KS_E_UNAVAILABLE when the group is closing, or KS_E_INVALID for a command no
 * group serves (PRODUCE); on an error the callback never runs. Any thread. */
ks_status_t ks_group_post(ks_group_t *g, const ks_cmd_req_t *req);

/* Waits until the loop exited or deadline_ms (CLOCK_MONOTONIC) passed. Returns 0 once
 * exited, -1 on timeout. */
int ks_group_join(ks_group_t *g, int64_t deadline_ms);

/* True once the loop thread has finished (join will not block). */
bool ks_group_exited(const ks_group_t *g);

/* How many of g's partitions its last stall check found stalled; why (size bytes) names
 * each with its reason. Any thread. */
int ks_group_stalled(ks_group_t *g, char *why, size_t size);

/* Frees a group whose loop has exited and been joined. */
void ks_group_destroy(ks_group_t *g);

#endif
