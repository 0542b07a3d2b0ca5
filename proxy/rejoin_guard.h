/* rejoin_guard.h: whether a commit may go out now, during librdkafka 2.0.2's cooperative rejoin. */
#ifndef KS_REJOIN_GUARD_H
#define KS_REJOIN_GUARD_H

#include <stdbool.h>
#include <stdint.h>

/* librdkafka 2.0.2, cooperative protocol (rdkafka_cgrp.c; librdkafka#4059, fixed upstream by
 * PR #4908, not in 2.0.2). The rebalance callback sequence of one rebalance is:
 *
 *   1. SyncGroup gives this member its new assignment. If it revokes nothing, an ASSIGN
 *      callback with the newly added partitions (maybe none) ends the rebalance.
 *   2. Otherwise a REVOKE callback with the revoked partitions comes first; after the
 *      application's incremental_unassign, an ASSIGN callback with the newly added
 *      partitions always follows, even when there are none ("cooperative assign after
 *      revoke"), and right after the application's incremental_assign librdkafka rejoins
 *      the group (a JoinGroup and SyncGroup of the next generation) so that the revoked
 *      partitions can be handed to their new owner. That rejoin ends in step 1 or 2 again.
 *   3. When the assignment is lost (rd_kafka_assignment_lost(): session timeout, fatal
 *      error, or an OffsetCommit that failed with ILLEGAL_GENERATION), a REVOKE of every
 *      partition comes with no ASSIGN after it; librdkafka rejoins after the unassign and
 *      the next SyncGroup ends in step 1 or 2.
 *
 * A commit sent while that rejoin is in progress carries the old generation. The broker
 * answers ILLEGAL_GENERATION, and librdkafka 2.0.2 then sets the generation to -1 and
 * treats the whole assignment as lost: every partition is revoked, kept ones included,
 * and all their leases go stale. So no commit goes out from a REVOKE until the ASSIGN that
 * is not followed by a rejoin. The REVOKE callback itself runs under the generation that
 * revoked, so the commit it must make is sent synchronously inside the callback.
 * The first JoinGroup of a rebalance that another member started comes with no callback.
 * A commit that reaches the coordinator after that JoinGroup (requests on one connection
 * are served in order, and a JoinGroup waits for the whole group, for a killed member up
 * to its session timeout) carries the old generation too, with the same lost assignment:
 * seen with a member killed and another joining (test_rebalance.py, test_c). librdkafka
 * reports that join only in its cgrp debug log ("changed join state ... -> wait-join"), so
 * the group loop enables that log and holds commits while a JoinGroup or SyncGroup is in
 * flight (commit_moved in group_loop.c); this guard covers the callback sequences above.
 * A commit answered REBALANCE_IN_PROGRESS is held from, too, as a second sign.
 *
 * @locality group loop (rebalance callbacks and the commit path run on it). */
typedef struct ks_rejoin_guard {
    bool rejoining;           /* from a REVOKE to the ASSIGN that ends the rebalance */
    bool assign_rejoins;      /* the next ASSIGN is "assign after revoke": a rejoin follows it */
    int64_t since_ms;         /* when rejoining began */
    int64_t joining_since_ms; /* when a commit was first held for a join in flight; 0: none */
    int64_t rebalances;       /* cooperative rebalances that held commits back */
} ks_rejoin_guard_t;

/* A REVOKE callback (cooperative). lost: rd_kafka_assignment_lost() said so. */
void ks_rejoin_guard_revoke(ks_rejoin_guard_t *g, bool lost, int64_t now_ms);

/* A commit was answered REBALANCE_IN_PROGRESS (cooperative): another member began a
 * rebalance, and librdkafka is about to rejoin without a callback. */
void ks_rejoin_guard_rebalancing(ks_rejoin_guard_t *g, int64_t now_ms);

/* An ASSIGN callback (cooperative). Returns true when it ended a rejoin: commits may
 * resume. */
bool ks_rejoin_guard_assign(ks_rejoin_guard_t *g);

/* True when a commit may go out now. in_callback: the caller runs inside a rebalance
 * callback, under the generation that revoked. joining: librdkafka's JoinGroup or
 * SyncGroup is in flight (its cgrp debug log says so), which holds commits as a rejoin
 * does. A rejoin or a join that lasts longer than bound_ms (the broker's own rebalance
 * bound, max.poll.interval.ms) no longer holds commits back: the callback sequence above
 * did not happen, and never committing again would be worse. */
bool ks_rejoin_guard_may_commit(ks_rejoin_guard_t *g, bool in_callback, bool joining,
                                int64_t now_ms, int64_t bound_ms);

#endif
