/* kconf.c: every librdkafka client's configuration, built in one place: the process's kafka.*
 * pass-through plus what the client's role needs. */
#include "kconf.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "mem_budget.h"

/* Where a property's value comes from. */
typedef enum {
    V_TEXT,          /* the row's text */
    V_GROUP_ID,      /* the caller's group_id */
    V_QUEUE_KBYTES,  /* a partition's share of the memory budget's librdkafka part */
    V_FETCH_BYTES,   /* the group's share of the budget's fetch part (ks_mem_fetch_take) */
    V_FETCH_PART,    /* a partition's part of that (ks_mem_fetch_part_bytes) */
    V_DEBUG_ADD_CGRP /* whatever debug is set to (kafka.debug), with "cgrp" added */
} val_from_t;

typedef struct {
    const char *name; /* librdkafka property; NULL ends a list */
    const char *text; /* its value, for V_TEXT */
    val_from_t from;
} kprop_t;

typedef struct {
    const char *name;
    const kprop_t *before; /* set first: kafka.* may change them */
    bool passthrough;      /* the process's kafka.* properties, in the order set */
    const kprop_t *after;  /* set last: kafka.* cannot change them */
} role_t;

/* How long a request waits for a broker's answer. A paused or cut-off broker (its TCP
 * still open) answers nothing, and the consumer waits on it: at librdkafka's 60 s its
 * commits, fetches and the coordinator lookup all hung past the controller's moves (it
 * fences the broker after broker.session.timeout.ms, 9 s): a coordinator paused 40 s
 * stopped deliveries for 32-33 s, to after its resume, the assignment lost and
 * 2,252-3,453 acks delivered again (tests/integration/test_cluster_failover.py). At
 * 10 s the request times out, the connection is dropped, and the consumer finds the new
 * coordinator and leaders while the broker is still paused: deliveries moved again
 * 8.1-14.2 s after the pause, the assignment kept (docs/design.md, "Failover and
 * restarts"). Nothing the consumer sends legitimately waits on the broker that long: a
 * Fetch waits fetch.wait.max.ms (100) on top of this; JoinGroup, SyncGroup and
 * Heartbeat carry their own timeouts from max.poll.interval.ms and session.timeout.ms. */
/* clang-format off */
#define SOCKET_TIMEOUT_ROW {"socket.timeout.ms", "10000", V_TEXT}
/* clang-format on */

/* Defaults a proxy's consumer needs; the user's kafka.* may override them. */
static const kprop_t consumer_before[] = {
    {"auto.offset.reset", "earliest", V_TEXT},
    {"partition.assignment.strategy", "cooperative-sticky", V_TEXT},
    /* Each partition's records wait in its own queue (group_rebalance.c's part_add), so
     * these limits are per partition; the bytes one from the memory budget (mem_budget.h). */
    {"queued.max.messages.kbytes", NULL, V_QUEUE_KBYTES},
    {"queued.min.messages", "100000", V_TEXT},
    /* One Fetch at a time goes to a broker. A partition that becomes fetchable while a
     * Fetch for partitions at their end waits on the broker waits with it, up to this
     * long: at 500 ms that stalled the tail of a 2M-record drain by ~350 ms in about half
     * the runs (its fetch debug log shows it). */
    {"fetch.wait.max.ms", "100", V_TEXT},
    /* What one Fetch response brings, over all its partitions. A group's partitions all
     * fetch at once when assigned, a whole producer batch each (KIP-74); at 8 MiB a response
     * those bursts came faster than the windows took or the budget's pauses dropped them
     * (peak RSS 322-330 MB at 64 and 256 partitions, 2,000,000 records, tests/bench
     * partitions rows); at 2 MiB 235-246 MB, with the rate at 8 partitions unchanged and at
     * 64 and 256 partitions up (HISTORY.md). 2 MiB is what one group alone gets; many groups
     * split a part of the memory budget (mem_budget.h's KS_MEM_FETCH_CAP), and a partition's
     * part of a response shrinks with it. */
    {"fetch.max.bytes", NULL, V_FETCH_BYTES},
    {"fetch.message.max.bytes", NULL, V_FETCH_PART},
    /* Two failures pull this two ways (docs/design.md, "Failover and restarts"): a killed
     * sidecar's partitions wait this long for another member, but the group's coordinator
     * moving to another broker takes about 10 s (the controller's broker.session.timeout.ms,
     * 9 s, then the new coordinator loads the group), and at 10 s librdkafka dropped the
     * assignment every time the coordinator's broker died. 30 s rides out a move with room;
     * a clean stop still leaves at once (LeaveGroup), and a restarted process takes its
     * partitions back at once with kafka.group.instance.id. */
    {"session.timeout.ms", "30000", V_TEXT},
    {"heartbeat.interval.ms", "1000", V_TEXT},
    SOCKET_TIMEOUT_ROW,
    {NULL, NULL, V_TEXT},
};

/* The idempotent producers and the redrive's consumer stop waiting on a paused broker as
 * the consumer does (consumer_before): an idempotent produce that timed out is sent again
 * to the partition's new leader without being written twice; a produce to a healthy leader
 * waits on the broker for the in-sync replicas, which drop a dead one after about 9 s. */
static const kprop_t failover_before[] = {
    SOCKET_TIMEOUT_ROW,
    {NULL, NULL, V_TEXT},
};

/* What ksidecar's guarantees rest on: not overridable. */
static const kprop_t consumer_after[] = {
    /* The cgrp debug log is how commit_moved learns that librdkafka is joining: "cgrp" is
     * added to whatever the user asked for (its lines are logged at debug level). */
    {"debug", NULL, V_DEBUG_ADD_CGRP},         {"group.id", NULL, V_GROUP_ID},
    {"enable.auto.commit", "false", V_TEXT},   {"enable.auto.offset.store", "false", V_TEXT},
    {"enable.partition.eof", "false", V_TEXT}, {NULL, NULL, V_TEXT},
};

/* The producers get the consumers' kafka.* too (SASL, SSL, bootstrap): librdkafka warns of
 * each consumer-only key, so they log errors only. */
static const kprop_t producer_after[] = {
    {"linger.ms", "2", V_TEXT},
    {"log_level", "3", V_TEXT},
    {NULL, NULL, V_TEXT},
};

static const kprop_t dead_letter_after[] = {
    {"enable.idempotence", "true", V_TEXT},
    {"linger.ms", "5", V_TEXT},
    {"log_level", "3", V_TEXT},
    {NULL, NULL, V_TEXT},
};

/* A redrive reads the dead-letter topic under its own group id, commits nothing itself, and
 * stops at the end it found (partition EOF). */
static const kprop_t redrive_consumer_after[] = {
    {"log_level", "3", V_TEXT},
    {"group.id", NULL, V_GROUP_ID},
    {"enable.auto.commit", "false", V_TEXT},
    {"enable.auto.offset.store", "false", V_TEXT},
    {"isolation.level", "read_committed", V_TEXT},
    {"auto.offset.reset", "earliest", V_TEXT},
    {"enable.partition.eof", "true", V_TEXT},
    {NULL, NULL, V_TEXT},
};

static const kprop_t redrive_producer_after[] = {
    {"log_level", "3", V_TEXT}, {"enable.idempotence", "true", V_TEXT},  {"acks", "all", V_TEXT},
    {"linger.ms", "5", V_TEXT}, {"message.timeout.ms", "60000", V_TEXT}, {NULL, NULL, V_TEXT},
};

static const kprop_t dev_after[] = {
    {"test.mock.num.brokers", "1", V_TEXT},
    {"linger.ms", "5", V_TEXT},
    {NULL, NULL, V_TEXT},
};

static const kprop_t none[] = {{NULL, NULL, V_TEXT}};

static const role_t roles[KS_KCONF_ROLE_CNT] = {
    [KS_KCONF_CHECK] = {"kafka.* check", none, true, none},
    [KS_KCONF_CONSUMER] = {"consumer", consumer_before, true, consumer_after},
    [KS_KCONF_PRODUCER] = {"producer", none, true, producer_after},
    [KS_KCONF_DEAD_LETTER] = {"dead-letter producer", failover_before, true, dead_letter_after},
    [KS_KCONF_REDRIVE_CONSUMER] = {"redrive consumer", failover_before, true,
                                   redrive_consumer_after},
    [KS_KCONF_REDRIVE_PRODUCER] = {"redrive producer", failover_before, true,
                                   redrive_producer_after},
    [KS_KCONF_DEV] = {"dev mode's mock cluster", none, false, dev_after},
};

const char *ks_kconf_role_name(ks_kconf_role_t role)
{
    return (unsigned)role < KS_KCONF_ROLE_CNT ? roles[role].name : "?";
}

/* Sets one property. `key` names it in err: the config key for kafka.*, else NULL (then the
 * property and the role). Returns 0 or -1 with err. */
static int set(rd_kafka_conf_t *conf, const role_t *r, const char *name, const char *value,
               const char *key, char *err, size_t errsize)
{
    char e[256];
    if (rd_kafka_conf_set(conf, name, value, e, sizeof(e)) == RD_KAFKA_CONF_OK)
        return 0;
    if (key)
        snprintf(err, errsize, "config key '%s': %s", key, e);
    else
        snprintf(err, errsize, "librdkafka property '%s' of the %s: %s", name, r->name, e);
    return -1;
}

/* What a client's values come from besides its rows. */
typedef struct {
    const ks_config_t *cfg;
    const char *group_id;
    int64_t fetch_bytes; /* a consumer's fetch.max.bytes; 0: KS_MEM_FETCH_CAP */
} kctx_t;

/* Sets each property of list. Returns 0 or -1 with err. */
static int set_list(rd_kafka_conf_t *conf, const role_t *r, const kprop_t *list, const kctx_t *x,
                    char *err, size_t errsize)
{
    const ks_config_t *cfg = x->cfg;
    const char *group_id = x->group_id;
    int64_t fetch = x->fetch_bytes > 0 ? x->fetch_bytes : KS_MEM_FETCH_CAP;
    for (const kprop_t *p = list; p->name; p++) {
        char buf[600];
        const char *v = p->text;
        switch (p->from) {
        case V_TEXT:
            break;
        case V_GROUP_ID:
            v = group_id ? group_id : "";
            break;
        case V_QUEUE_KBYTES:
            snprintf(buf, sizeof(buf), "%lld",
                     (long long)ks_mem_kafka_queue_kbytes(cfg ? cfg->memory_max_bytes : 0));
            v = buf;
            break;
        case V_FETCH_BYTES:
            snprintf(buf, sizeof(buf), "%lld", (long long)fetch);
            v = buf;
            break;
        case V_FETCH_PART:
            snprintf(buf, sizeof(buf), "%lld", (long long)ks_mem_fetch_part_bytes(fetch));
            v = buf;
            break;
        case V_DEBUG_ADD_CGRP: {
            char dbg[512];
            size_t n = sizeof(dbg);
            if (rd_kafka_conf_get(conf, "debug", dbg, &n) != RD_KAFKA_CONF_OK)
                dbg[0] = '\0';
            if (strstr(dbg, "cgrp") || strstr(dbg, "all"))
                continue;
            snprintf(buf, sizeof(buf), "%s%scgrp", dbg, dbg[0] ? "," : "");
            v = buf;
            break;
        }
        }
        if (set(conf, r, p->name, v, NULL, err, errsize) < 0)
            return -1;
    }
    return 0;
}

static rd_kafka_conf_t *kconf_new(const kctx_t *x, ks_kconf_role_t role, char *err, size_t errsize)
{
    const ks_config_t *cfg = x->cfg;
    if ((unsigned)role >= KS_KCONF_ROLE_CNT) {
        snprintf(err, errsize, "no librdkafka client role %d", (int)role);
        return NULL;
    }
    const role_t *r = &roles[role];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (set_list(conf, r, r->before, x, err, errsize) < 0)
        goto out_destroy;
    for (size_t i = 0; r->passthrough && cfg && i < cfg->kafka_cnt; i++) {
        char key[300];
        snprintf(key, sizeof(key), "kafka.%s", cfg->kafka[i].key);
        if (set(conf, r, cfg->kafka[i].key, cfg->kafka[i].value, key, err, errsize) < 0)
            goto out_destroy;
    }
    if (set_list(conf, r, r->after, x, err, errsize) < 0)
        goto out_destroy;
    return conf;

out_destroy:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

rd_kafka_conf_t *ks_kconf_new(const ks_config_t *cfg, ks_kconf_role_t role, const char *group_id,
                              char *err, size_t errsize)
{
    kctx_t x = {.cfg = cfg, .group_id = group_id};
    return kconf_new(&x, role, err, errsize);
}

rd_kafka_conf_t *ks_kconf_new_consumer(const ks_config_t *cfg, const char *group_id,
                                       int64_t fetch_bytes, char *err, size_t errsize)
{
    kctx_t x = {.cfg = cfg, .group_id = group_id, .fetch_bytes = fetch_bytes};
    return kconf_new(&x, KS_KCONF_CONSUMER, err, errsize);
}

int ks_kconf_check(const ks_config_t *cfg, char *err, size_t errsize)
{
    rd_kafka_conf_t *conf = ks_kconf_new(cfg, KS_KCONF_CHECK, NULL, err, errsize);
    if (!conf)
        return -1;
    rd_kafka_conf_destroy(conf);
    return 0;
}
