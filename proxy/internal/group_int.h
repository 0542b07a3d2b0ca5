/* group_int.h: a group's state and the functions its files share, private to the group files
 * (group.c, group_loop.c, group_intake.c, group_deliver.c, group_settle.c, group_commit.c,
 * group_rebalance.c, group_confirm.c, dead_letter.c, group_status.c, group_stall.c). */
#ifndef KS_GROUP_INT_H
#define KS_GROUP_INT_H

#include "group.h"

#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ack_id.h"
#include "ack_window.h"
#include "commit_meta.h"
#include "cmd.h"
#include "commit_track.h"
#include "inbox.h"
#include "key_sched.h"
#include "lease.h"
#include "log.h"
#include "mem_budget.h"
#include "owner.h"
#include "rec_pool.h"
#include "pstate.h"
#include "rejoin_guard.h"
#include "stall.h"
#include "util.h"

/* A subscriber with hold_stalled whose oldest unreported batch waited this long for its
 * transport is stalled: its leases wait instead of expiring, rechecked this often. */
#define STALL_GRACE_MS   1000
#define STALL_RECHECK_MS 1000

/* A group's lifecycle. It only moves forward (group_life_move), so a later stage is never
 * undone by an earlier one's command (a stop_delivering after a shutdown). @locality group loop */
typedef enum {
    GROUP_DELIVERING = 0, /* fetches are served */
    GROUP_NOT_DELIVERING, /* stop_delivering: fetches end UNAVAILABLE; acks are still taken */
    GROUP_DRAINING,       /* shutdown asked: acks are waited for until drain_until_ms */
    GROUP_STOPPING,       /* the loop ends: answer what is queued, commit, leave, exit */
} group_life_t;

/* A command posted to the inbox: the request as the edge submitted it and ks_cmd_validate left
 * it, copied deep into this one block (ks_group_post), so cmd_free frees all of it. It is
 * either queued, parked by the loop, or freed. */
typedef struct cmd {
    ks_inbox_node_t node;  /* first member: the inbox links through it */
    struct cmd *next_wait; /* parked fetches, oldest first */
    int64_t posted_ms;     /* when it was posted (ks_now_ms): a fetch waits from then */
    size_t nrefs;          /* SETTLE: how many refs (a range id has one per offset) */
    ks_ack_ref_t *refs;    /* SETTLE: req.u.settle.ack_ids parsed, one each, on the poster's
                            * thread so the loop does not spend its time on it */
    ks_cmd_req_t req;      /* a command the group loop serves (group_serves); its pointers
                            * reach into data */
    _Alignas(max_align_t) char data[];
} cmd_t;

/* When c, a fetch, stops waiting for records. */
static inline int64_t cmd_wait_until(const cmd_t *c)
{
    return c->posted_ms + c->req.u.fetch.opts.wait_ms;
}

/* One assigned partition. @locality group loop */
typedef struct part {
    char *topic;
    uint64_t topic_hash; /* FNV-1a of topic: seeds its deliveries' span ids (group_otel.c) */
    int32_t partition;
    uint32_t epoch; /* this assignment's epoch; ack ids carry it */
    ks_pstate_t state;
    ks_ack_window_t win;
    ks_key_sched_t sched;
    size_t leased;            /* entries in LEASED state */
    int64_t committed;        /* the last offset sent in a commit, -1 if none */
    ks_commit_track_t ct;     /* commits confirmed by the broker, and the acks they cover */
    int64_t commit_sent_ms;   /* when the commit in flight went (commit round trip) */
    int32_t commits_out;      /* commits sent and not answered yet (each counted once) */
    bool meta_dirty;          /* acks or attempts above the commit point changed */
    bool held_back;           /* metadata overflowed: no new deliveries from meta_cut on */
    bool schema_wait;         /* a record's schema is being fetched: its delivery waits */
    int64_t meta_cut;         /* held_back: the lowest offset the metadata had to drop */
    int64_t held_since_ms;    /* held_back: since when */
    int64_t held_warned_ms;   /* held_back: when it was last warned about */
    int64_t held_commit_ms;   /* held_back: when commit_held last committed it */
    bool acks_capped;         /* group.max_unconfirmed_acks reached: no new deliveries */
    int64_t meta_truncations; /* commits whose metadata had to drop acks */
    /* What the commit metadata said at assignment, for offsets not fetched yet. */
    ks_commit_meta_t restore;
    size_t restore_ack_i, restore_att_i;
    /* The partition's own librdkafka queue (not forwarded to the consumer queue), so
     * librdkafka's queued.* limits apply to this partition alone. Records wait there
     * while the window is full; nothing fetched is thrown away. */
    rd_kafka_queue_t *q;
    bool q_was_full;     /* seen near librdkafka's queued.* limits: its fetcher may sleep */
    double q_avg_bytes;  /* average key+value size of the last batch taken from q */
    int64_t mem_tallied; /* what this window last added to the process's budget tally */
    size_t q_len;        /* records in q, as of the last intake pass (less what it took) */

    int64_t q_tallied;      /* what part_queue_mem last added to the process's queued tally */
    bool kpaused;           /* paused in librdkafka by part_kafka_pause, its queue emptied */
    bool admit_wait;        /* paused at its assignment until its first fetch fits (part_admit) */
    bool fresh;             /* assigned in the rebalance callback now running: to admit */
    uint32_t fetch_recs;    /* records the last fetch brought (taken before q was empty again) */
    uint32_t taken_run;     /* records taken from q since it was last empty */
    bool lost_woke;         /* woken for records dropped as outdated; none taken since */
    int64_t q_reserved;     /* resumed: the fetch expected, counted as queued until it comes */
    int64_t kpause_ms;      /* when part_kafka_pause last paused or resumed it */
    int64_t budget_pauses;  /* times part_kafka_pause paused it */
    int64_t budget_dropped; /* records in its queue when it paused it (fetched again later) */
    /* The confirmed commit point as last seen, and when it last moved (cp_note): the status's
     * commit_point_age_ms and the stall check's idle time. */
    int64_t cp_seen, cp_moved_ms;
    /* Stall detection (group_stall.c): the last commit error ("" once one is confirmed); the
     * reason found last. */
    char commit_err[128];
    ks_stall_t stall;
    char stall_detail[200];
} part_t;

/* A settle waiting for its commits (group_confirm.c). */
typedef struct cwait cwait_t;

/* A subscriber, named by its client: a stream of any transport (gRPC Subscribe, through
 * api/substream.c, which numbers its name) or a pull session (HTTP long-poll, unary Fetch). */
typedef struct sub {
    uint32_t id;
    char name[KS_SUBSCRIBER_KEY_MAX];
    int64_t credit_records, credit_bytes; /* the most it may hold unacked */
    int64_t out_records, out_bytes;
    int64_t last_seen_ms;
    uint64_t seen_assign_ver; /* the assignment version its last batch showed */
    bool hold_stalled;        /* opts.hold_stalled: its leases wait while it is stalled */
    bool was_stalled;         /* a batch it never took had waited STALL_GRACE_MS: still stalled
                               * when it is released, though that batch's report came first */
    size_t turn;              /* serve_waiting: index of its fetch being filled now */
} sub_t;

/* A confirmed batch (opts.confirm) on its way to a client: its records are LEASED but
 * unsent (KS_WIN_F_UNSENT: no deadline, so they cannot expire) until the edge says the
 * transport took the batch (KS_CMD_DELIVERED). The edge names it by token; one command per
 * batch, not per record. p is cleared when the partition goes; epoch tells a seek.
 * @locality group loop */
typedef struct dlv_rec {
    part_t *p;
    int64_t offset;
    uint32_t epoch;
    uint16_t attempts;
} dlv_rec_t;

typedef struct dlv {
    struct dlv *next;
    uint64_t token;
    uint32_t sub_id;
    int deadline_ms;
    int64_t at_ms; /* when it was handed to the edge */
    size_t n;
    dlv_rec_t recs[];
} dlv_t;

/* What a dead-letter produce remembers until its delivery report. */
typedef struct dlq_ref {
    char topic[256];
    int32_t partition;
    uint32_t epoch;
    int64_t offset;
} dlq_ref_t;

#define KS_PART_HINTS 256 /* part_find's cache slots (ks_group_t.part_hint) */

struct ks_group {
    char *name;
    char log_name[300]; /* "group:<name>" */
    uint32_t group_hash;
    uint32_t instance;
    const ks_config_t *cfg;
    const ks_group_conf_t *gconf;
    ks_rec_format_t key_format, value_format; /* gconf's, parsed */
    bool is_static;
    ks_group_idle_fn *idle_fn;
    void *idle_opaque;
    pthread_t thread;
    bool joined;
    atomic_bool exited;
    /* librdkafka's join state is wait-join, wait-metadata or wait-sync: a JoinGroup or
     * SyncGroup is in flight (commit_moved). @locality written by librdkafka's log
     * callback on its own thread, read on the group loop */
    atomic_bool cgrp_joining;

    ks_inbox_t inbox; /* the one thread-safe door */

    /* Everything below is group loop state. @locality group loop (checked by owner) */
    ks_owner_t owner;
    rd_kafka_t *rk;
    rd_kafka_queue_t *cq; /* the consumer queue */
    rd_kafka_t *dlq_rk;   /* dead-letter producer, made on first use */
    int epfd, tfd, rk_pipe[2], dlq_pipe[2];
    int64_t q_max_msgs, q_max_bytes;   /* librdkafka's queued.min.messages / .max.messages.kbytes */
    int64_t q_kbytes, fetch_max_bytes; /* its queued.max.messages.kbytes, fetch.message.max.bytes */
    int64_t fetch_taken; /* its share of the budget's fetch part, given back at destroy */
    part_t **parts;
    size_t part_cnt, part_cap, rr;
    /* part_find's cache, by partition number (mod its size): a settle names a partition
     * per ack id, and a scan of parts made that cost grow with the partition count. A
     * slot is a hint, checked on every hit; part_remove clears the slot of what it drops. */
    part_t *part_hint[KS_PART_HINTS];
    sub_t **subs;
    size_t sub_cnt;
    uint32_t next_sub_id;
    ks_leases_t leases;
    char **topics; /* the subscription */
    size_t topic_cnt;
    cmd_t *wait_head, *wait_tail;
    cmd_t *deferred;            /* fetches that arrived during a revoke's grace */
    dlv_t *dlv_head, *dlv_tail; /* confirmed batches not reported yet, oldest first */
    uint64_t next_token;
    uint32_t next_epoch;
    uint64_t assign_ver; /* bumped on every assignment change */
    group_life_t life;
    int64_t drain_until_ms; /* GROUP_DRAINING: until when */
    bool in_rebalance;      /* inside a rebalance callback, or finishing a revoke it left */
    /* A revoke whose grace runs in this loop (group_rebalance.c): the REVOKE callback marked
     * the partitions REVOKING and returned without giving them up; revoke_step commits them
     * and calls the unassign once their leases are settled or rv_until_ms came. librdkafka
     * waits for that call (join state wait-unassign-call) and keeps heartbeating meanwhile.
     * rv_parts NULL: no revoke is pending. Its partitions are those in REVOKING. */
    rd_kafka_topic_partition_list_t *rv_parts;
    int64_t rv_until_ms;
    bool ever_assigned;   /* an assignment callback has run: see ks_group_destroy */
    ks_rejoin_guard_t rj; /* no commits during a cooperative rejoin (librdkafka#4059) */
    int64_t max_poll_ms;  /* max.poll.interval.ms: the broker's bound on a rebalance */
    cwait_t *cwait_head;  /* settles waiting for their commits, any order */
    size_t cwait_cnt;     /* at most KS_CMD_COMMIT_WAITERS_MAX */
    /* accepted acks no confirmed commit covered when a partition moved */
    int64_t st_acks_lost_to_move;
    int64_t st_commits_sent, st_commits_confirmed, st_commits_failed; /* per partition */
    ks_hist_t st_delivery_to_ack, st_commit_round_trip, st_record_age_at_delivery;
    int64_t st_acks_stale, st_acks_unknown, st_acks_invalid; /* refused ack ids, by reason */
    /* The consumer's "all brokers down" error, "" after an assignment. A fetch whose wait
     * runs out before the group ever had an assignment answers UNAVAILABLE with it. */
    char down[256];
    bool mem_pressed;     /* ks_mem_pressed, as of the last intake pass */
    bool intake_more;     /* the last intake pass left records it may take: loop again now */
    int64_t admit_ms;     /* the assignment's or the last admission's time (part_admit) */
    int64_t pause_due_ms; /* when a paused partition may next fetch whatever the tally */
    /* What a partition's first fetch is expected to cost its window (part_fetch_cost), from
     * the first fetches seen in the group (group_intake.c's first_fetch_seen): how many,
     * and the most one cost. */
    int64_t first_fetch;
    uint32_t first_seen;
    int64_t first_max;
    int64_t pool_tallied; /* what this loop's record cache (rec_pool.h) last added to the tally */
    int64_t next_commit_ms;
    int64_t timer_due_ms; /* what the timerfd is armed for; 0 when it fired or is unset */
    int64_t last_activity_ms;
    int64_t st_delivered, st_redelivered, st_expired, st_nacked, st_acked, st_dead_lettered;
    int64_t next_stall_ms; /* when stall_check runs next */
    /* What stall_check found, for health probes on other threads. @locality written by the
     * group loop, read anywhere, under stall_lock */
    pthread_mutex_t stall_lock;
    int stall_cnt;       /* stalled partitions */
    char stall_why[512]; /* each one's "topic[partition]: reason", "; " between */
};

/* A record as the window holds it: copied out of librdkafka when it arrives, in one
 * block. Holding the rd_kafka_message_t instead kept its whole fetch response buffer
 * (shared by every partition in the response, up to fetch.max.bytes) alive until the last
 * of its records was acked, so a window of small records could pin far more memory than
 * window.max_bytes says, and it made larger windows unaffordable. */
typedef struct rec {
    int64_t timestamp; /* -1 if unknown */
    uint32_t key_len, value_len;
    uint32_t header_cnt;
    uint8_t has_key, has_value; /* 0 for a null key or value */
    uint16_t pool_cls;          /* its block's class in rec_pool.h, for rec_free */
    /* header_cnt ks_header_t, then key '\0', value '\0', then header names and values */
    _Alignas(8) char data[]; /* aligned: the ks_header_t array starts here */
} rec_t;
/* What mem_budget.h charges each record for its copy's header. */
_Static_assert(sizeof(rec_t) == KS_MEM_REC_HEADER, "rec_t size");

/* ---- shared between the group files (each defined in the file named) ---- */

/* group.c */
/* A deep copy of req (validated) in one new block, as ks_group_post posts it. Never fails. */
cmd_t *cmd_copy(const ks_cmd_req_t *req);
/* Frees c and all it holds. */
void cmd_free(cmd_t *c);
void part_move(ks_group_t *g, part_t *p, ks_pstate_t to);

/* "delivering", "not-delivering", "draining", "stopping". */
const char *group_life_str(group_life_t s);
/* Moves g's lifecycle forward to `to`; a move to an earlier or the same stage does nothing. */
void group_life_move(ks_group_t *g, group_life_t to);

/* group_loop.c */
/* True if the group loop has a handler for t (every command but the producer's). */
bool group_serves(ks_cmd_t t);
void handle_cmd(ks_group_t *g, cmd_t *c, int64_t now);
/* The one inbox drain: runs every command posted since the last, in order. While a
 * revoke's grace is pending a command the catalogue does not allow during a rebalance (a
 * fetch) waits in g->deferred until the revoke is finished; those run first on the next
 * drain after it. close: the last drain, which also closes the inbox (the loop's exit,
 * where no revoke is pending any more). */
void drain_inbox(ks_group_t *g, int64_t now, bool close);
void *loop_main(void *arg);

/* group_intake.c */
void part_kafka_pause(ks_group_t *g, part_t *p, bool pause);
/* A partition just assigned (before its first fetch): its first fetch counts as queued
 * (q_reserved) if it fits the budget's quarter, or it is paused in librdkafka until it
 * does (admit_wait; part_check_bound resumes it). @locality group loop, in the rebalance
 * callback, after the assign. */
void part_admit(ks_group_t *g, part_t *p, int64_t now);
void drain_consumer(ks_group_t *g, bool pipe_ready);
void intake(ks_group_t *g, int64_t now);
/* Frees a record copy (a window's free_msg): into the loop's cache (rec_pool.h), or free. */
void rec_free(void *rec);
/* Brings the budget's tally up to date with what the loop's record cache holds. */
void rec_pool_tally(ks_group_t *g);

/* group_deliver.c */
sub_t *sub_get(ks_group_t *g, const char *name, int64_t now);
void subs_reap(ks_group_t *g, int64_t now);
void dlv_forget(ks_group_t *g, uint32_t sub_id, const part_t *p);
size_t drop_leases(ks_group_t *g, part_t *p);
ks_batch_t *batch_error(ks_status_t st, const char *msg);
void handle_delivered(ks_group_t *g, uint64_t token, bool taken, int64_t now);
void finish_fetch(cmd_t *c, ks_batch_t *b);
void serve_waiting(ks_group_t *g, int64_t now);
void handle_release(ks_group_t *g, const char *name, bool unread);

/* group_settle.c */
bool sub_stalled(const ks_group_t *g, const sub_t *s, int64_t now);
/* e, leased and just unleased, comes back undone (nack, expiry, its subscriber or batch
 * gone): every later record of its chain still out goes back READY too, counting no attempt
 * (it was not processed), to go out again after e (ks_key_sched_back). Returns how many. */
size_t chain_back(ks_group_t *g, part_t *p, ks_win_entry_t *e, int64_t now);
void lease_event(void *owner, ks_win_entry_t *e, ks_lease_event_t ev, void *opaque);
void handle_settle(ks_group_t *g, cmd_t *c, int64_t now);
void handle_seek(ks_group_t *g, cmd_t *c);

/* group_commit.c */
void commit_held(ks_group_t *g, int64_t now);
rd_kafka_resp_err_t commit_moved(ks_group_t *g, bool sync, part_t *only);
void offset_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque);
void restore_committed(ks_group_t *g, rd_kafka_topic_partition_list_t *parts);

/* group_confirm.c */
/* c, an ACK settle with wait_commit, and its results: unless none was accepted (false: answer
 * at once), c and res are kept until a confirmed commit covers each accepted ack, its
 * partition goes, a commit fails or the wait ends; then the callback gets res, each accepted
 * one with its commit state and point, and c is freed. */
bool cwait_settle(ks_group_t *g, cmd_t *c, ks_ack_result_t *res, int64_t now);
/* True when no more settles may wait (KS_CMD_COMMIT_WAITERS_MAX). */
bool cwait_full(const ks_group_t *g);
/* Gives a settle's results to whoever waits for them: confirm_cb when set, else cb. */
void cwait_answer_cmd(cmd_t *c, ks_ack_result_t *res);
/* p's confirmed commit point moved. */
void cwait_confirmed(ks_group_t *g, const part_t *p);
/* p's commit of offset failed with err: the acks below it that wait are told. */
void cwait_failed(ks_group_t *g, const part_t *p, int64_t offset, rd_kafka_resp_err_t err);
/* p goes (revoke, loss, shutdown) or is seeked: its waiting acks are lost to it. */
void cwait_part_gone(ks_group_t *g, const part_t *p, bool seek);
/* Answers the waiters whose wait ended by now (every one if all), still ACCEPTED. */
void cwait_expire(ks_group_t *g, int64_t now, bool all);
/* The earliest end of a wait, INT64_MAX if none. */
int64_t cwait_next_due(const ks_group_t *g);

/* dead_letter.c */
void dead_letter(ks_group_t *g, part_t *p, ks_win_entry_t *e);
/* group_otel.c, only while ks_otel_on: e's lease ended with event ("ack", "nack", "expiry";
 * reason may be NULL; dead: it goes to the dead-letter topic): its span, when sampled. */
void otel_lease_end(ks_group_t *g, part_t *p, ks_win_entry_t *e, const char *event,
                    const char *reason, bool dead);
/* Tracing on: where a delivery's receive span starts (the record fetched, or its last lease
 * ended), kept in leased_at_ms while the record is not leased. */
static inline void otel_ready_since(ks_win_entry_t *e)
{
    e->leased_at_ms = ks_now_ms();
}
/* The receive span of a delivery of n records (ents[i] of eparts[i], leased to sub through
 * transport; since[i]: when each was fetched from Kafka or its last lease ended): one record's
 * continues its trace (parent: its traceparent), a batch's links each record's context. */
void otel_receive(ks_group_t *g, const sub_t *sub, const char *transport, part_t *const *eparts,
                  ks_win_entry_t *const *ents, const int64_t *since, size_t n);
/* The traceparent a dead letter of e carries (its lease's span as parent); false: none (not
 * sampled). */
bool otel_dead_letter_parent(const ks_group_t *g, const part_t *p, const ks_win_entry_t *e,
                             char out[56]);
void drain_dlq(ks_group_t *g);

/* group_rebalance.c */
/* A new INITIALIZING partition of g, in g->parts, with no librdkafka queue yet (the
 * assignment adds that; unit tests use it bare). */
part_t *part_new(ks_group_t *g, const char *topic, int32_t partition);
void part_remove(ks_group_t *g, part_t *p);
void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                  void *opaque);
/* A pending revoke's grace, one loop pass: finishes the revoke (final commit, windows
 * dropped, unassign) once its partitions' leases are all settled, its grace ran out, or
 * force (the loop is stopping). Nothing pending: does nothing. */
void revoke_step(ks_group_t *g, int64_t now, bool force);
void subscribe_to(ks_group_t *g, const char *const *topics, size_t n);

/* group_status.c */
ks_group_status_t *build_status(ks_group_t *g, int64_t now);
/* p's high watermark (*hw, -1 unknown) and its lag, as the status shows them (-1 unknown). */
int64_t part_lag(ks_group_t *g, const part_t *p, int64_t *hw);

/* group_stall.c */
/* Finds which partitions are stalled and why, logs each change, publishes the count for
 * ks_group_stalled; runs once each g->next_stall_ms. */
void stall_check(ks_group_t *g, int64_t now);
/* Notes when p's confirmed commit point last moved (on a confirmed commit, and at each
 * stall check for a position set otherwise: an assignment's restore, a seek). */
void cp_note(part_t *p, int64_t now);

/* ---- small helpers the hot paths of several files share, inline as before ---- */

static inline bool group_delivering(const ks_group_t *g)
{
    return g->life == GROUP_DELIVERING;
}

static inline sub_t *sub_by_id(ks_group_t *g, uint32_t id)
{
    for (size_t i = 0; i < g->sub_cnt; i++)
        if (g->subs[i]->id == id)
            return g->subs[i];
    return NULL;
}

/* e leaves LEASED: its subscriber gets the credit back. */
static inline void unlease(ks_group_t *g, part_t *p, ks_win_entry_t *e)
{
    sub_t *s = sub_by_id(g, e->sub_id);
    if (s) {
        s->out_records--;
        s->out_bytes -= e->bytes;
    }
    e->flags &= (uint8_t)~KS_WIN_F_UNSENT;
    p->leased--;
}

/* A record's parts, all inside its one block (borrowed; writable for librdkafka's
 * producev, which copies them). */
static inline const ks_header_t *rec_headers(const rec_t *r)
{
    return (const ks_header_t *)(const void *)r->data;
}

static inline char *rec_key(const rec_t *r)
{
    return r->has_key ? (char *)(uintptr_t)(r->data + r->header_cnt * sizeof(ks_header_t)) : NULL;
}

static inline char *rec_value(const rec_t *r)
{
    return r->has_value
               ? (char *)(uintptr_t)(r->data + r->header_cnt * sizeof(ks_header_t) + r->key_len + 1)
               : NULL;
}

static inline size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* @locality group loop */
static inline part_t *part_find(ks_group_t *g, const char *topic, int32_t partition)
{
    part_t **hint = &g->part_hint[(uint32_t)partition % KS_PART_HINTS];
    part_t *h = *hint;
    if (h && h->partition == partition && strcmp(h->topic, topic) == 0)
        return h;
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (p->partition == partition && strcmp(p->topic, topic) == 0)
            return *hint = p;
    }
    return NULL;
}

/* What p's window costs against the memory budget: the key and value bytes of records
 * not yet acked, plus ks_mem_record_overhead() for every record held. */
static inline int64_t part_mem(const part_t *p)
{
    return ks_ack_window_bytes(&p->win) +
           (int64_t)ks_ack_window_count(&p->win) * ks_mem_record_overhead();
}

/* p's window share of the process's memory budget now: it shrinks as partitions are
 * assigned to any group of the process, and grows as they go. */
static inline int64_t part_share(const ks_group_t *g)
{
    return ks_mem_window_share(g->cfg->memory_max_bytes, ks_mem_parts());
}

/* What p's librdkafka queue holds, estimated at the last batch's average size. Its limits
 * cannot keep it small: a fetch returns at least one whole producer batch (KIP-74), up to
 * the producer's batch.size (librdkafka's default 1 MB), whatever fetch.message.max.bytes. */
static inline int64_t part_queue_mem(const part_t *p)
{
    return (int64_t)((double)p->q_len * (p->q_avg_bytes + KS_MEM_KAFKA_RECORD_OVERHEAD)) +
           p->q_reserved;
}

/* What p's window needs to take p's next fetch whole: the last fetch's records at the
 * window's cost of a record, at most an eighth of the budget (so that it always fits the
 * quarter that ks_mem_fetch_fits allows, and an estimate that counted more than one fetch
 * cannot grow a window's cap without bound). Before p's first fetch, the group's estimate
 * (first_fetch). */
static inline int64_t part_fetch_cost(const ks_group_t *g, const part_t *p)
{
    double c = p->fetch_recs
                   ? (double)p->fetch_recs * (p->q_avg_bytes + (double)ks_mem_record_overhead())
                   : (double)g->first_fetch;
    double most = (double)(g->cfg->memory_max_bytes / 8);
    return (int64_t)(c < most ? c : most);
}

/* What p's window may hold: its share, or one whole fetch where that is more (a fetch
 * brings at least one whole producer batch, KIP-74: 1 MB of records from librdkafka's
 * producer, about 2.2 MB in a window of 100-byte records). A window that could take only
 * part of each fetch would have the rest thrown away by a pause and fetched again, over
 * and over. The windows together stay within the budget by ks_mem_over (intake). */
static inline int64_t part_window_cap(const ks_group_t *g, const part_t *p)
{
    int64_t share = part_share(g), fetch = part_fetch_cost(g, p);
    return fetch > share ? fetch : share;
}

/* How many more bytes p's window may take now (<= 0: none): its cap less what it holds.
 * What p's queue holds does not count: taking a record into the window costs less than
 * leaving it in librdkafka's queue (KS_MEM_KAFKA_RECORD_OVERHEAD), and a queue that the
 * window cannot take is emptied by a pause (intake). */
static inline int64_t part_room_bytes(const ks_group_t *g, const part_t *p)
{
    return part_window_cap(g, p) - part_mem(p);
}

static inline bool part_has_room(const ks_group_t *g, const part_t *p)
{
    return ks_ack_window_count(&p->win) < (size_t)g->cfg->window_max_records &&
           ks_ack_window_bytes(&p->win) < g->cfg->window_max_bytes && part_room_bytes(g, p) > 0;
}

/* The room in its window below which a partition is paused for the budget once its queue
 * is empty, and at which it is resumed: a whole fetch like its last (none of it thrown
 * away then), within a quarter and three quarters of its cap (a window need not drain
 * empty before a fetch bigger than its share). */
static inline int64_t part_resume_room(const ks_group_t *g, const part_t *p)
{
    int64_t cap = part_window_cap(g, p), want = part_fetch_cost(g, p);
    if (want < cap / 4)
        want = cap / 4;
    return want < cap / 4 * 3 ? want : cap / 4 * 3;
}

/* Whether p accepted group.max_unconfirmed_acks acks that no confirmed commit covers: its
 * new deliveries wait for a confirmed commit (commit_held sends it). @locality group loop */
static inline bool part_acks_capped(const ks_group_t *g, const part_t *p)
{
    int cap = g->gconf->max_unconfirmed_acks;
    return cap > 0 && ks_commit_track_unconfirmed(&p->ct) >= cap;
}

/* Where p's new deliveries are held back now (KS_HOLD_NONE: nowhere). The records below
 * the metadata's cut, and the commit point's own, always go out; past the cap on
 * unconfirmed acks no record goes out for the first time. @locality group loop */
static inline int64_t part_hold_from(const ks_group_t *g, const part_t *p)
{
    if (part_acks_capped(g, p))
        return 0;
    return p->held_back ? ks_key_sched_hold_from(p->meta_cut, ks_ack_window_commit_point(&p->win))
                        : KS_HOLD_NONE;
}

/* Whether p's window holds every record librdkafka knew of at p's last fetch (its cached
 * high watermark; no request): its next fetch brings only what is produced meanwhile.
 * group_intake.c. */
bool part_caught_up(ks_group_t *g, const part_t *p);

/* How long a resumed or admitted partition's expected fetch stays counted (q_reserved). */
#define KS_RESERVE_MS 500

/* part_caught_up, trusted only while the watermark is recent: a paused partition fetches
 * nothing, so the one librdkafka keeps dates from the pause; after KS_RESERVE_MS of it,
 * what producers wrote meanwhile may be a whole fetch. */
static inline bool part_caught_up_now(ks_group_t *g, const part_t *p, int64_t now)
{
    return (!p->kpaused || now - p->kpause_ms < KS_RESERVE_MS) && part_caught_up(g, p);
}

/* A partition paused for the budget (part_kafka_pause, decided in intake) fetches again
 * at the latest this long after its pause, whatever the budget's tally: the tally is the
 * whole process's, and windows that do not drain (a slow client of another group) must
 * not stop a partition whose own window has room. */
#define KS_BUDGET_PAUSE_MAX_MS 1000

/* A partition waiting for admission (part_admit) fetches anyway once no partition of its
 * group has been admitted for this long: windows that do not drain (another group's slow
 * client) slow a new assignment's start down to one partition a step, never stop it. */
#define KS_ADMIT_STEP_MS 100

/* Whether p, paused for the budget, has waited long enough to fetch whatever the tally. */
static inline bool part_pause_over(const ks_group_t *g, const part_t *p, int64_t now)
{
    return p->admit_wait ? now - g->admit_ms >= KS_ADMIT_STEP_MS
                         : now - p->kpause_ms >= KS_BUDGET_PAUSE_MAX_MS;
}

/* PAUSED means the window is at its bound: ksidecar takes no more of the partition's
 * records from librdkafka, whose queue then stops fetching at its queued.* limits. A
 * partition paused in librdkafka for the budget (intake says when) is resumed once its
 * window has part_resume_room and a fetch like its last fits the budget's quarter
 * (ks_mem_fetch_fits, counting the fetches of partitions resumed before it), or it has
 * waited KS_BUDGET_PAUSE_MAX_MS, or it is no longer deliverable; librdkafka then fetches
 * again from the last record taken. Called on every settle too: only ever resumes.
 * @locality group loop */
static inline void part_check_bound(ks_group_t *g, part_t *p)
{
    bool room = part_has_room(g, p);
    if (p->state == KS_PS_ACTIVE && !room)
        part_move(g, p, KS_PS_PAUSED);
    else if (p->state == KS_PS_PAUSED && room)
        part_move(g, p, KS_PS_ACTIVE);
    if (p->q && p->kpaused &&
        /* One waiting for admission stays paused when it goes: its first fetch would be
         * thrown away, and part_remove resumes it. */
        (!ks_pstate_deliverable(p->state)
             ? !p->admit_wait
             : (part_room_bytes(g, p) >= part_resume_room(g, p) &&
                (ks_mem_fetch_fits(g->cfg->memory_max_bytes, part_fetch_cost(g, p)) ||
                 part_pause_over(g, p, ks_now_ms()) || part_caught_up_now(g, p, ks_now_ms())))))
        part_kafka_pause(g, p, false);
}

static inline void mark_done(ks_group_t *g, part_t *p, ks_win_entry_t *e)
{
    ks_key_sched_done(&p->sched, &p->win, e);
    p->meta_dirty = true;
}

#endif
