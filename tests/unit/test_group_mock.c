/* test_group_mock.c: runs one group's real loop (proxy/group.h) against librdkafka's mock
 * cluster: records fetched through the inbox, acked, and their offsets committed; and a
 * cooperative revoke whose grace runs in the loop while the kept partition keeps flowing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ack_id.h"
#include "group.h"
#include "util.h"

#define TOPIC   "mock-topic"
#define RECORDS 40

/* What the loop's callbacks hand back, and a condition to wait on it. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static ks_batch_t *batch;
static ks_ack_result_t *acks;
static size_t ack_n;
static ks_group_status_t *status;

static void on_batch(ks_batch_t *b, void *opaque)
{
    pthread_mutex_lock(&lock);
    batch = b;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
}

static void on_acks(ks_ack_result_t *r, size_t n, void *opaque)
{
    pthread_mutex_lock(&lock);
    acks = r;
    ack_n = n;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
}

static void on_status(ks_group_status_t **sts, size_t n, void *opaque)
{
    assert_int_equal(n, 1); /* a group answers with its own */
    pthread_mutex_lock(&lock);
    status = sts[0];
    free(sts);
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
}

/* Waits (up to 30 s) until *slot is set, then takes it. */
static void *take(void **slot)
{
    pthread_mutex_lock(&lock);
    int64_t until = ks_now_ms() + 30000;
    while (!*slot && ks_now_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cond, &lock, &ts);
    }
    void *v = *slot;
    *slot = NULL;
    pthread_mutex_unlock(&lock);
    assert_non_null(v);
    return v;
}

static bool never_idle(ks_group_t *g, void *opaque)
{
    return false;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* The commands, as ks_engine_submit posts them once validated. */
static ks_status_t post_fetch(ks_group_t *g, const char *const *topics, const ks_fetch_opts_t *opts)
{
    ks_cmd_req_t req = {
        .type = KS_CMD_FETCH,
        .group = ks_group_name(g),
        .u.fetch = {.topics = topics, .topic_cnt = 1, .opts = *opts, .cb = on_batch}};
    return ks_group_post(g, &req);
}

static ks_status_t post_settle(ks_group_t *g, ks_settle_op_t op, char **ids, size_t n)
{
    ks_cmd_req_t req = {
        .type = KS_CMD_SETTLE,
        .group = ks_group_name(g),
        .u.settle = {.op = op, .ack_ids = (const char *const *)ids, .n = n, .cb = on_acks}};
    return ks_group_post(g, &req);
}

static void post_shutdown(ks_group_t *g, int64_t ack_deadline_ms)
{
    ks_cmd_req_t req = {.type = KS_CMD_SHUTDOWN, .u.shutdown = {ack_deadline_ms}};
    assert_int_equal(ks_group_post(g, &req), KS_OK);
}

static ks_status_t post_status(ks_group_t *g)
{
    ks_cmd_req_t req = {
        .type = KS_CMD_STATUS, .group = ks_group_name(g), .u.status = {.cb = on_status}};
    return ks_group_post(g, &req);
}

/* A producer that hosts the mock cluster, with TOPIC (2 partitions) holding RECORDS records. */
static rd_kafka_t *mock_cluster(char *bootstraps, size_t size)
{
    char e[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(rd_kafka_conf_set(conf, "test.mock.num.brokers", "1", e, sizeof(e)),
                     RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    assert_non_null(rk);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(rk);
    assert_non_null(mc);
    assert_int_equal(rd_kafka_mock_topic_create(mc, TOPIC, 2, 1), 0);
    snprintf(bootstraps, size, "%s", rd_kafka_mock_cluster_bootstraps(mc));
    for (int i = 0; i < RECORDS; i++) {
        char val[32]; /* no key: unordered, so every record goes out unacked */
        snprintf(val, sizeof(val), "value-%d", i);
        /* Half on each partition, named: with no key librdkafka's sticky partitioner puts a
         * quick run of records all on one partition. */
        assert_int_equal(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(TOPIC), RD_KAFKA_V_PARTITION(i % 2),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                           RD_KAFKA_V_VALUE(val, strlen(val)), RD_KAFKA_V_END),
                         0);
    }
    assert_int_equal(rd_kafka_flush(rk, 10000), 0);
    return rk;
}

/* Group name's loop on the mock cluster, with every default but the revoke grace (ms, if
 * not NULL). cfg is filled in; free it with ks_config_free. */
static ks_group_t *group_on(ks_config_t *cfg, const char *bootstraps, const char *name,
                            const char *grace_ms)
{
    char err[512];
    ks_config_defaults(cfg);
    assert_int_equal(ks_config_set(cfg, "kafka.bootstrap.servers", bootstraps, err, sizeof(err)),
                     0);
    if (grace_ms)
        assert_int_equal(ks_config_set(cfg, "group.revoke_grace_ms", grace_ms, err, sizeof(err)),
                         0);
    /* The mock waits the longest session timeout of the group less 1 s for members to
     * rejoin: 10 s, as member_start's, not ksidecar's default (30 s). */
    assert_int_equal(ks_config_set(cfg, "kafka.session.timeout.ms", "10000", err, sizeof(err)), 0);
    ks_group_t *g = ks_group_start(name, cfg, &cfg->group_defaults, false, 7, never_idle, NULL, err,
                                   sizeof(err));
    assert_non_null(g);
    return g;
}

static void test_fetch_ack_commit(void **state)
{
    (void)state;
    char bootstraps[256];
    rd_kafka_t *mock = mock_cluster(bootstraps, sizeof(bootstraps));
    ks_config_t cfg;
    ks_group_t *g = group_on(&cfg, bootstraps, "mock-group", NULL);

    /* Fetch until every record came (the mock's first JoinGroup takes about 3 s). */
    const char *topics[] = {TOPIC};
    ks_fetch_opts_t opts = {.max = 100, .wait_ms = 1000, .deadline_ms = 30000, .subscriber = "s"};
    char **ids = calloc(RECORDS + 1, sizeof(char *));
    assert_non_null(ids);
    size_t got = 0;
    bool seen[RECORDS] = {false};
    for (int64_t until = ks_now_ms() + 30000; got < RECORDS && ks_now_ms() < until;) {
        assert_int_equal(post_fetch(g, topics, &opts), KS_OK);
        ks_batch_t *b = take((void **)&batch);
        assert_int_equal(b->status, KS_OK);
        for (size_t i = 0; i < b->cnt; i++) {
            int n = -1;
            assert_int_equal(sscanf((const char *)b->recs[i].value, "value-%d", &n), 1);
            assert_true(n >= 0 && n < RECORDS);
            assert_false(seen[n]); /* each record once: nothing was nacked or expired */
            seen[n] = true;
            assert_int_equal(b->recs[i].attempt, 1);
            char id[KS_ACK_ID_MAX];
            ks_record_ack_id(&b->recs[i], id, sizeof(id));
            assert_true(got < RECORDS);
            ids[got++] = ks_xstrdup(id);
        }
        ks_batch_free(b);
    }
    assert_int_equal(got, RECORDS);

    assert_int_equal(post_settle(g, KS_SETTLE_ACK, ids, got), KS_OK);
    ks_ack_result_t *r = take((void **)&acks);
    assert_int_equal(ack_n, RECORDS);
    for (size_t i = 0; i < ack_n; i++)
        assert_int_equal(r[i].status, KS_OK);
    free(r);

    /* The interval commit (500 ms) confirms both partitions at their ends. */
    int64_t committed = 0;
    for (int64_t until = ks_now_ms() + 20000; committed != RECORDS && ks_now_ms() < until;) {
        assert_int_equal(post_status(g), KS_OK);
        ks_group_status_t *st = take((void **)&status);
        assert_int_equal(st->acked, RECORDS);
        assert_int_equal(st->delivered, RECORDS);
        committed = 0;
        for (size_t i = 0; i < st->part_cnt; i++)
            committed += st->parts[i].committed > 0 ? st->parts[i].committed : 0;
        ks_group_status_free(st);
        if (committed != RECORDS)
            sleep_ms(200);
    }
    assert_int_equal(committed, RECORDS);

    post_shutdown(g, ks_now_ms() + 2000);
    assert_int_equal(ks_group_join(g, ks_now_ms() + 20000), 0);
    ks_group_destroy(g);
    for (size_t i = 0; i < got; i++)
        free(ids[i]);
    free(ids);
    ks_config_free(&cfg);
    rd_kafka_destroy(mock);
}

/* A second member of the group: a plain librdkafka consumer, polled on its own thread. */
typedef struct member {
    rd_kafka_t *rk;
    pthread_t thr;
    atomic_bool stop;
} member_t;

/* Set when the mock refused the second member's SyncGroup. The mock (librdkafka 2.0.2)
 * ends a sync as soon as the leader's SyncGroup brings every member's assignment; a
 * follower's SyncGroup that comes after it is refused as an invalid request, the follower
 * rejoins, and the group is Joining again. The mock refuses commits while Joining (a real
 * broker takes them until the join is over), so the revoke's final commit then fails. */
static atomic_bool mock_sync_refused;
/* Set once the second member has had a SyncGroup through. librdkafka 2.0.2 aborts when it
 * destroys a cooperative-sticky consumer that had a JoinGroup response but no SyncGroup
 * since (its assignor state is still NULL; later versions check for that). */
static atomic_bool member_synced;

static void member_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    (void)level;
    if (strcmp(fac, "SYNCGROUP") != 0)
        return;
    if (strstr(buf, "SyncGroup response: Success"))
        atomic_store(&member_synced, true);
    else if (strstr(buf, "Invalid request"))
        atomic_store(&mock_sync_refused, true);
}

static void *member_poll(void *arg)
{
    member_t *m = arg;
    while (!atomic_load(&m->stop)) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(m->rk, 100);
        if (msg)
            rd_kafka_message_destroy(msg);
    }
    return NULL;
}

static void member_start(member_t *m, const char *bootstraps, const char *group)
{
    char e[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, e, sizeof(e)), 0);
    assert_int_equal(rd_kafka_conf_set(conf, "group.id", group, e, sizeof(e)), 0);
    assert_int_equal(rd_kafka_conf_set(conf, "partition.assignment.strategy", "cooperative-sticky",
                                       e, sizeof(e)),
                     0);
    assert_int_equal(rd_kafka_conf_set(conf, "enable.auto.commit", "false", e, sizeof(e)), 0);
    /* cgrp debug lines are how librdkafka tells of a SyncGroup's result */
    assert_int_equal(rd_kafka_conf_set(conf, "debug", "cgrp", e, sizeof(e)), 0);
    rd_kafka_conf_set_log_cb(conf, member_log);
    /* as the loop's (group_on): the mock waits a session timeout less 1 s for members to rejoin */
    assert_int_equal(rd_kafka_conf_set(conf, "session.timeout.ms", "10000", e, sizeof(e)), 0);
    atomic_store(&mock_sync_refused, false);
    atomic_store(&member_synced, false);
    m->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof(e));
    assert_non_null(m->rk);
    rd_kafka_poll_set_consumer(m->rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, TOPIC, RD_KAFKA_PARTITION_UA);
    assert_int_equal(rd_kafka_subscribe(m->rk, l), 0);
    rd_kafka_topic_partition_list_destroy(l);
    atomic_init(&m->stop, false);
    assert_int_equal(pthread_create(&m->thr, NULL, member_poll, m), 0);
}

static void member_stop(member_t *m)
{
    /* (see member_synced) after the mock's race the member may not have synced yet */
    for (int64_t until = ks_now_ms() + 40000; !atomic_load(&member_synced) && ks_now_ms() < until;)
        sleep_ms(100);
    if (!atomic_load(&member_synced))
        fail_msg("the second member never had a SyncGroup through");
    atomic_store(&m->stop, true);
    pthread_join(m->thr, NULL);
    rd_kafka_consumer_close(m->rk);
    rd_kafka_destroy(m->rk);
}

static ks_group_status_t *group_status(ks_group_t *g)
{
    assert_int_equal(post_status(g), KS_OK);
    return take((void **)&status);
}

/* The partition of st in state, or -1. */
static int32_t part_in(const ks_group_status_t *st, const char *state)
{
    for (size_t i = 0; i < st->part_cnt; i++)
        if (strcmp(st->parts[i].state, state) == 0)
            return st->parts[i].partition;
    return -1;
}

/* A second member joins; the cooperative rebalance revokes one of the group's two
 * partitions while records of it are leased. The revoke's grace runs in the group loop, not
 * inside librdkafka's callback: while it waits for those leases, a fetch parked before the
 * rebalance is served with nacked records of the kept partition, acks of the revoking one
 * are taken, and once they are all acked the revoke ends at once (well before its 20 s
 * grace) with its final commit at the partition's end, where the new member starts. */
static void test_revoke_grace_runs_in_the_loop(void **state)
{
    (void)state;
    char bootstraps[256];
    rd_kafka_t *mock = mock_cluster(bootstraps, sizeof(bootstraps));
    ks_config_t cfg;
    ks_group_t *g = group_on(&cfg, bootstraps, "grace-group", "20000");

    /* Lease every record, acking none. */
    const char *topics[] = {TOPIC};
    ks_fetch_opts_t opts = {.max = 100, .wait_ms = 1000, .deadline_ms = 60000, .subscriber = "s"};
    char *ids[2][RECORDS];
    size_t idn[2] = {0, 0};
    for (int64_t until = ks_now_ms() + 30000; idn[0] + idn[1] < RECORDS && ks_now_ms() < until;) {
        assert_int_equal(post_fetch(g, topics, &opts), KS_OK);
        ks_batch_t *b = take((void **)&batch);
        assert_int_equal(b->status, KS_OK);
        for (size_t i = 0; i < b->cnt; i++) {
            int32_t p = b->recs[i].partition;
            assert_true(p == 0 || p == 1);
            char id[KS_ACK_ID_MAX];
            ks_record_ack_id(&b->recs[i], id, sizeof(id));
            ids[p][idn[p]++] = ks_xstrdup(id);
        }
        ks_batch_free(b);
    }
    assert_int_equal(idn[0] + idn[1], RECORDS);

    /* A fetch parked before the rebalance: nothing is left to give it yet. */
    ks_fetch_opts_t park = {.max = 100, .wait_ms = 60000, .deadline_ms = 60000, .subscriber = "s"};
    assert_int_equal(post_fetch(g, topics, &park), KS_OK);

    member_t m;
    member_start(&m, bootstraps, "grace-group");

    /* Wait for the revoke: one partition REVOKING, the other ACTIVE. */
    int32_t rev = -1, kept = -1;
    for (int64_t until = ks_now_ms() + 40000; rev < 0 && ks_now_ms() < until;) {
        ks_group_status_t *st = group_status(g);
        rev = part_in(st, "REVOKING");
        kept = part_in(st, "ACTIVE");
        ks_group_status_free(st);
        if (rev < 0)
            sleep_ms(100);
    }
    assert_true(rev == 0 || rev == 1);
    assert_int_equal(kept, 1 - rev);
    if (idn[rev] == 0 || idn[kept] == 0)
        fail_msg("leased %zu records of the revoked partition %d and %zu of the kept one", idn[rev],
                 rev, idn[kept]);

    /* Nacked records of the kept partition reach the parked fetch during the grace (new
     * records could not: librdkafka 2.0.2 pauses fetching for the whole assignment until the
     * unassign call). */
    assert_int_equal(post_settle(g, KS_SETTLE_NACK, ids[kept], idn[kept]), KS_OK);
    ks_ack_result_t *r = take((void **)&acks);
    assert_int_equal(ack_n, idn[kept]);
    for (size_t i = 0; i < ack_n; i++)
        assert_int_equal(r[i].status, KS_OK);
    free(r);
    for (size_t i = 0; i < idn[kept]; i++)
        free(ids[kept][i]);
    idn[kept] = 0;
    ks_batch_t *b = take((void **)&batch);
    assert_int_equal(b->status, KS_OK);
    assert_true(b->cnt > 0);
    for (size_t i = 0; i < b->cnt; i++) {
        assert_int_equal(b->recs[i].partition, kept);
        assert_int_equal(b->recs[i].attempt, 2);
        char id[KS_ACK_ID_MAX];
        ks_record_ack_id(&b->recs[i], id, sizeof(id));
        ids[kept][idn[kept]++] = ks_xstrdup(id);
    }
    ks_batch_free(b);
    {
        /* ... while the revoke still waits for the leases of its partition. */
        ks_group_status_t *st = group_status(g);
        assert_int_equal(part_in(st, "REVOKING"), rev);
        ks_group_status_free(st);
    }

    /* Its acks are taken during the grace; with the last one the revoke ends. */
    assert_int_equal(post_settle(g, KS_SETTLE_ACK, ids[rev], idn[rev]), KS_OK);
    r = take((void **)&acks);
    assert_int_equal(ack_n, idn[rev]);
    for (size_t i = 0; i < ack_n; i++)
        assert_int_equal(r[i].status, KS_OK);
    free(r);
    int64_t acked_at = ks_now_ms();
    bool gone = false;
    while (!gone && ks_now_ms() < acked_at + 15000) {
        ks_group_status_t *st = group_status(g);
        gone = st->part_cnt == 1 && st->parts[0].partition == kept;
        ks_group_status_free(st);
        if (!gone)
            sleep_ms(50);
    }
    assert_true(gone); /* within 15 s of the acks, where the grace had 20 s to go */

    /* The final commit of the revoked partition is at its end; only when the mock refused it
     * (its race: see mock_sync_refused) may it be missing, and then the loop must say so:
     * every ack of it counted as lost to the move. */
    int64_t lo = -1, hi = -1;
    assert_int_equal(rd_kafka_query_watermark_offsets(mock, TOPIC, rev, &lo, &hi, 5000), 0);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, TOPIC, rev);
    assert_int_equal(rd_kafka_committed(m.rk, l, 10000), 0);
    ks_group_status_t *st = group_status(g);
    int64_t lost = st->acks_lost_to_move;
    ks_group_status_free(st);
    if (l->elems[0].offset == hi) {
        assert_int_equal(lost, 0);
    } else {
        fprintf(stderr, "committed %lld of %lld: the mock refused the new member's SyncGroup: %s\n",
                (long long)l->elems[0].offset, (long long)hi,
                atomic_load(&mock_sync_refused) ? "yes" : "no");
        assert_true(atomic_load(&mock_sync_refused));
        assert_int_equal(l->elems[0].offset, RD_KAFKA_OFFSET_INVALID);
        assert_int_equal(lost, (int64_t)idn[rev]);
    }
    rd_kafka_topic_partition_list_destroy(l);

    post_shutdown(g, ks_now_ms() + 2000);
    assert_int_equal(ks_group_join(g, ks_now_ms() + 20000), 0);
    ks_group_destroy(g);
    member_stop(&m);
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < idn[p]; i++)
            free(ids[p][i]);
    ks_config_free(&cfg);
    rd_kafka_destroy(mock);
}

/* The status names every topic of the subscription, whole, however long the list: it was
 * once one comma-joined string of 2048 bytes that cut the list short without a word. */
static void test_status_lists_every_topic(void **state)
{
    (void)state;
    char bootstraps[256];
    rd_kafka_t *mock = mock_cluster(bootstraps, sizeof(bootstraps));
    ks_config_t cfg;
    ks_group_t *g = group_on(&cfg, bootstraps, "many-topics", NULL);
    enum { N = 24 }; /* 24 names of 200 characters: more than twice 2048 bytes */
    char names[N][201];
    const char *topics[N];
    for (int i = 0; i < N; i++) {
        memset(names[i], 'a' + i, 200);
        names[i][200] = '\0';
        topics[i] = names[i];
    }
    ks_fetch_opts_t opts = {.max = 1, .wait_ms = 100, .deadline_ms = 30000, .subscriber = "s"};
    ks_cmd_req_t req = {
        .type = KS_CMD_FETCH,
        .group = ks_group_name(g),
        .u.fetch = {.topics = topics, .topic_cnt = N, .opts = opts, .cb = on_batch}};
    assert_int_equal(ks_group_post(g, &req), KS_OK);
    ks_group_status_t *st = group_status(g);
    assert_int_equal(st->topic_cnt, N);
    for (int i = 0; i < N; i++)
        assert_string_equal(st->topics[i], names[i]);
    assert_null(st->topics[N]);
    ks_group_status_free(st);
    ks_batch_free(take((void **)&batch));

    post_shutdown(g, ks_now_ms() + 2000);
    assert_int_equal(ks_group_join(g, ks_now_ms() + 20000), 0);
    ks_group_destroy(g);
    ks_config_free(&cfg);
    rd_kafka_destroy(mock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fetch_ack_commit),
        cmocka_unit_test(test_revoke_grace_runs_in_the_loop),
        cmocka_unit_test(test_status_lists_every_topic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
