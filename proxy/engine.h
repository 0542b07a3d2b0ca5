/* engine.h: the engine's public commands, shared by every API edge (HTTP, gRPC).
 *
 * Reply locality, the rule every callback here keeps: an engine callback (ks_fetch_cb,
 * ks_ack_cb, ks_status_cb, ks_seek_cb, ks_produce_cb) runs on an engine thread (a group loop
 * or the producer's), and only stores its result and wakes the edge; encoding the reply and
 * checking tokens run on the edge's own threads, so a slow client or a large reply never
 * holds a group loop. */
#ifndef KS_ENGINE_H
#define KS_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmd.h"
#include "config.h"
#include "types.h"

typedef struct ks_engine ks_engine_t;

/* The one door: validates cmd (ks_cmd_validate: every range and default) and posts it to
 * its group (or the producer). Returns KS_OK, and the command's callback runs exactly once
 * later (commands with no callback: nothing more happens); or an error with err filled, and
 * the callback never runs. cmd and what it points to are borrowed for the call only. Any
 * thread. What each command does is on its row in cmd_list.h. */
ks_status_t ks_engine_submit(ks_engine_t *e, const ks_cmd_req_t *cmd, char *err, size_t errsize);

/* Makes an engine for cfg (borrowed; must outlive the engine). Starts no group yet.
 * Returns NULL with err on failure. */
ks_engine_t *ks_engine_new(const ks_config_t *cfg, char *err, size_t errsize);

/* The subscriber is gone (its stream closed): its leases go back to the pool now,
 * not at their deadline, and its waiting fetches end. Any thread; no answer. */
void ks_engine_release(ks_engine_t *e, const char *group, const char *subscriber);

/* The subscriber stopped reading and was cut off: as ks_engine_release, and none of
 * its leases counts an attempt. Any thread; no answer. */
void ks_engine_release_unread(ks_engine_t *e, const char *group, const char *subscriber);

/* Says what became of a batch fetched with opts.confirm (token: its deliver_token; 0
 * is ignored). taken: the transport took it, so its leases start now and count as a
 * delivery. Not taken (the send failed, the client left, the batch was dropped): its
 * records still leased to the subscriber go back now and count no attempt. Call once
 * per batch; until then its records cannot expire (a subscriber's release also returns
 * them). Any thread; no answer. */
void ks_engine_delivered(ks_engine_t *e, const char *group, uint64_t token, bool taken);

/* True while Kafka answers (a metadata probe every 2 s). Any thread. gRPC health and
 * /healthz both answer from this: SERVING exactly when it is true. */
bool ks_engine_kafka_up(ks_engine_t *e);

/* As ks_engine_kafka_up; when down, why (size bytes) says what the probe saw. Any thread. */
bool ks_engine_kafka_health(ks_engine_t *e, char *why, size_t size);

/* group's stalled partitions (its loop's last stall check), why (size bytes) naming each
 * with its reason; -1 when the group does not run here. Any thread; gRPC health's
 * ksidecar.group.<name> and /readyz?group= answer from it. */
int ks_engine_group_stalled(ks_engine_t *e, const char *group, char *why, size_t size);

/* True when the last probe failed: not before the first one ends, right after start. */
bool ks_engine_kafka_down(ks_engine_t *e, char *why, size_t size);

/* Checks that librdkafka accepts every kafka.* property of cfg. Returns 0, or -1 with err
 * naming the key. Any thread. */
int ks_engine_check_kafka_conf(const ks_config_t *cfg, char *err, size_t errsize);

/* Starts the static groups of the config. Returns 0, or -1 with err. */
int ks_engine_start_static(ks_engine_t *e, char *err, size_t errsize);

/* Checks a name's syntax and length, the one bound every edge shares. Returns KS_OK or
 * KS_E_INVALID with err naming the kind, the name and the bound. Any thread. */
ks_status_t ks_engine_check_name(ks_name_kind_t kind, const char *name, char *err, size_t errsize);

/* True if topic is one of Kafka's internal topics ("__*") and topics.allow_internal is
 * off: clients may neither consume nor produce it. Any thread. */
bool ks_engine_internal_topic(const ks_engine_t *e, const char *topic);

/* Checks topic names a client gives: at least one, each valid, and none internal unless
 * topics.allow_internal ("clients may not <verb> it"). Returns KS_OK, or KS_E_INVALID /
 * KS_E_PERMISSION with err. Any thread. */
ks_status_t ks_engine_check_topics(const ks_engine_t *e, const char *const *topics, size_t n,
                                   const char *verb, char *err, size_t errsize);

/* Checks a group name against the syntax and the allowed patterns. Returns KS_OK or
 * KS_E_INVALID / KS_E_PERMISSION with err. */
ks_status_t ks_engine_check_group(const ks_engine_t *e, const char *group, char *err,
                                  size_t errsize);

/* Shutdown, step 1: stop delivering. Waiting fetches finish now (UNAVAILABLE), new
 * ones are refused; acks are still taken. Any thread. */
void ks_engine_stop_delivering(ks_engine_t *e);

/* Shutdown, step 2: every group waits for outstanding acks (most of grace_ms), commits
 * what is acked, leaves the group and stops. Acks are taken until then.
 * Returns 0 when all stopped within grace_ms, -1 otherwise. */
int ks_engine_shutdown(ks_engine_t *e, int grace_ms);

/* Frees the engine. Call after ks_engine_shutdown returned 0. */
void ks_engine_destroy(ks_engine_t *e);

#endif
