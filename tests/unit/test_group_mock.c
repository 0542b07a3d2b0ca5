/* test_group_mock.c: runs one group's real loop (proxy/group.h) against librdkafka's mock
 * cluster: records fetched through the inbox, acked, and their offsets committed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
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

static void on_status(ks_group_status_t *st, void *opaque)
{
    pthread_mutex_lock(&lock);
    status = st;
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
        assert_int_equal(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(TOPIC),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                           RD_KAFKA_V_VALUE(val, strlen(val)), RD_KAFKA_V_END),
                         0);
    }
    assert_int_equal(rd_kafka_flush(rk, 10000), 0);
    return rk;
}

static void test_fetch_ack_commit(void **state)
{
    (void)state;
    char bootstraps[256], err[512];
    rd_kafka_t *mock = mock_cluster(bootstraps, sizeof(bootstraps));
    ks_config_t cfg;
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_set(&cfg, "kafka.bootstrap.servers", bootstraps, err, sizeof(err)),
                     0);
    ks_group_t *g = ks_group_start("mock-group", &cfg, &cfg.group_defaults, false, 7, never_idle,
                                   NULL, err, sizeof(err));
    assert_non_null(g);

    /* Fetch until every record came (the mock's first JoinGroup takes about 3 s). */
    const char *topics[] = {TOPIC};
    ks_fetch_opts_t opts = {.max = 100, .wait_ms = 1000, .deadline_ms = 30000, .subscriber = "s"};
    char **ids = calloc(RECORDS + 1, sizeof(char *));
    assert_non_null(ids);
    size_t got = 0;
    bool seen[RECORDS] = {false};
    for (int64_t until = ks_now_ms() + 30000; got < RECORDS && ks_now_ms() < until;) {
        assert_int_equal(ks_group_fetch(g, topics, 1, &opts, on_batch, NULL), KS_OK);
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

    assert_int_equal(
        ks_group_settle(g, KS_SETTLE_ACK, 0, NULL, (const char *const *)ids, got, on_acks, NULL),
        KS_OK);
    ks_ack_result_t *r = take((void **)&acks);
    assert_int_equal(ack_n, RECORDS);
    for (size_t i = 0; i < ack_n; i++)
        assert_int_equal(r[i].status, KS_OK);
    free(r);

    /* The interval commit (500 ms) confirms both partitions at their ends. */
    int64_t committed = 0;
    for (int64_t until = ks_now_ms() + 20000; committed != RECORDS && ks_now_ms() < until;) {
        assert_int_equal(ks_group_status(g, on_status, NULL), KS_OK);
        ks_group_status_t *st = take((void **)&status);
        assert_int_equal(st->acked, RECORDS);
        assert_int_equal(st->delivered, RECORDS);
        committed = 0;
        for (size_t i = 0; i < st->part_cnt; i++)
            committed += st->parts[i].committed > 0 ? st->parts[i].committed : 0;
        ks_group_status_free(st);
        if (committed != RECORDS) {
            struct timespec ts = {0, 200 * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    assert_int_equal(committed, RECORDS);

    ks_group_request_shutdown(g, ks_now_ms() + 2000);
    assert_int_equal(ks_group_join(g, ks_now_ms() + 20000), 0);
    ks_group_destroy(g);
    for (size_t i = 0; i < got; i++)
        free(ids[i]);
    free(ids);
    ks_config_free(&cfg);
    rd_kafka_destroy(mock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fetch_ack_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
