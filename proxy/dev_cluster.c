/* dev_cluster.c: dev mode's in-process mock Kafka cluster and its sample-record producer. */
#include "dev_cluster.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kconf.h"
#include "log.h"

struct ks_dev {
    rd_kafka_t *rk; /* hosts the mock cluster and produces the samples */
    char *topic;
    int rate;
    pthread_t thread;
    atomic_bool stop;
};

static void *produce_main(void *arg)
{
    ks_dev_t *d = arg;
    static const char *users[] = {"alice", "bob", "carol", "dave", "erin"};
    long n = 0;
    while (!atomic_load(&d->stop)) {
        for (int i = 0; i < d->rate && !atomic_load(&d->stop); i++, n++) {
            char key[32], val[160];
            const char *user = users[n % 5];
            snprintf(key, sizeof(key), "%s", user);
            snprintf(val, sizeof(val), "{\"n\":%ld,\"user\":\"%s\",\"event\":\"page_view\"}", n,
                     user);
            rd_kafka_resp_err_t err = rd_kafka_producev(
                d->rk, RD_KAFKA_V_TOPIC(d->topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE(val, strlen(val)),
                RD_KAFKA_V_HEADER("source", "ksidecar-dev", -1), RD_KAFKA_V_END);
            if (err)
                ks_warn("dev", "producing a sample record: %s", rd_kafka_err2str(err));
        }
        /* Sleep a second in small steps so stop is prompt. */
        for (int t = 0; t < 10 && !atomic_load(&d->stop); t++) {
            rd_kafka_poll(d->rk, 0);
            struct timespec ts = {0, 100 * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    rd_kafka_flush(d->rk, 2000);
    return NULL;
}

ks_dev_t *ks_dev_start(const char *topic, int partitions, int rate, char *bootstraps, size_t bsize,
                       char *err, size_t errsize)
{
    char e[512];
    rd_kafka_conf_t *conf = ks_kconf_new(NULL, KS_KCONF_DEV, NULL, e, sizeof(e));
    if (!conf) {
        snprintf(err, errsize, "dev mode: %s", e);
        return NULL;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (!rk) {
        snprintf(err, errsize, "dev mode: starting the mock cluster: %s", e);
        return NULL;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(rk);
    if (!mc) {
        snprintf(err, errsize, "dev mode: this librdkafka has no mock cluster");
        rd_kafka_destroy(rk);
        return NULL;
    }
    rd_kafka_resp_err_t rerr = rd_kafka_mock_topic_create(mc, topic, partitions, 1);
    if (rerr) {
        snprintf(err, errsize, "dev mode: creating topic %s: %s", topic, rd_kafka_err2str(rerr));
        rd_kafka_destroy(rk);
        return NULL;
    }
    snprintf(bootstraps, bsize, "%s", rd_kafka_mock_cluster_bootstraps(mc));

    ks_dev_t *d = calloc(1, sizeof(*d));
    if (!d)
        abort();
    d->rk = rk;
    d->topic = strdup(topic);
    d->rate = rate;
    atomic_init(&d->stop, false);
    if (pthread_create(&d->thread, NULL, produce_main, d) != 0) {
        snprintf(err, errsize, "dev mode: cannot start the producer thread");
        rd_kafka_destroy(rk);
        free(d->topic);
        free(d);
        return NULL;
    }
    pthread_setname_np(d->thread, "ks:dev-produce");
    ks_info("dev", "mock cluster at %s with topic %s (%d partitions), %d sample records/s",
            bootstraps, topic, partitions, rate);
    return d;
}

void ks_dev_stop(ks_dev_t *d)
{
    if (!d)
        return;
    atomic_store(&d->stop, true);
    pthread_join(d->thread, NULL);
    rd_kafka_destroy(d->rk);
    free(d->topic);
    free(d);
}
