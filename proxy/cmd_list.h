/* cmd_list.h: the engine's command catalogue: every command once, with its flags. */
#ifndef KS_CMD_LIST_H
#define KS_CMD_LIST_H

/* What a command needs and may do. */
#define KS_CMDF_GROUP     0x1  /* names a group, which must be running (or be made: CREATE) */
#define KS_CMDF_CREATE    0x2  /* may start the group it names */
#define KS_CMDF_REBALANCE 0x4  /* served during a revoke's grace; others wait until it ends */
#define KS_CMDF_INTERNAL  0x8  /* the engine's own (shutdown), never an edge's */
#define KS_CMDF_NO_REPLY  0x10 /* no callback: a bad name finds no group, nothing to answer */

/* X(NAME, name, flags), one row per command. The enum ks_cmd_t (KS_CMD_<NAME>), the name
 * table (ks_cmd_name) and the flags (ks_cmd_flags) are generated from it (cmd.h, cmd.c), and
 * the group loop dispatches through a table indexed by it (group_loop.c). A new command is a
 * row here, its checks in ks_cmd_validate, its posting in ks_engine_submit and one loop
 * handler. */
/* FETCH: long-poll up to max records of the topics, waiting up to wait_ms for the first;
 *   starts the group on first use and extends its subscription with new topics.
 * SETTLE: acks, nacks (ms: redelivery delay; reason kept for the dead-letter headers;
 *   dead_letter: to the dead-letter topic at once) or extends leases (ms: the new deadline
 *   from now).
 * STATUS: one group's (NOT_FOUND if it does not run here), or every group's.
 * SEEK: moves one assigned partition's fetch position, or (all_partitions) every assigned
 *   partition's of the topic; their leases become stale and their windows start again there.
 * RELEASE, RELEASE_UNREAD, DELIVERED: ks_engine_release, _release_unread, _delivered.
 * PRODUCE: produces the records (copied); the callback runs once all are delivered or
 *   failed.
 * REDRIVE: moves up to max records of the group's dead-letter topic back to their original
 *   topics, on a thread of its own (proxy/redrive.c); the group need not run here. */
#define KS_CMD_LIST(X)                                                                             \
    X(FETCH, fetch, KS_CMDF_GROUP | KS_CMDF_CREATE)                                                \
    X(SETTLE, settle, KS_CMDF_GROUP | KS_CMDF_REBALANCE)                                           \
    X(STATUS, status, KS_CMDF_REBALANCE) /* of one group, or of all */                             \
    X(SEEK, seek, KS_CMDF_GROUP | KS_CMDF_REBALANCE)                                               \
    X(RELEASE, release, KS_CMDF_GROUP | KS_CMDF_REBALANCE | KS_CMDF_NO_REPLY)                      \
    X(RELEASE_UNREAD, release_unread, KS_CMDF_GROUP | KS_CMDF_REBALANCE | KS_CMDF_NO_REPLY)        \
    X(DELIVERED, delivered, KS_CMDF_GROUP | KS_CMDF_REBALANCE | KS_CMDF_NO_REPLY)                  \
    X(PRODUCE, produce, 0)                                                                         \
    X(REDRIVE, redrive, 0)                                                                         \
    X(STOP_DELIVERING, stop_delivering, KS_CMDF_INTERNAL | KS_CMDF_REBALANCE | KS_CMDF_NO_REPLY)   \
    X(SHUTDOWN, shutdown, KS_CMDF_INTERNAL | KS_CMDF_REBALANCE | KS_CMDF_NO_REPLY)

#endif
