/* producer.c: the engine's shared Kafka producer and its connectivity probe. */
#include "producer.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kconf.h"
#include "log.h"
#include "util.h"

struct ks_producer {
    rd_kafka_t *rk;
    pthread_t thread;
    atomic_bool stop;
    atomic_bool up;
    pthread_mutex_t why_lock; /* guards why */
    char why[256];            /* why the last probe failed; "" while up */
    atomic_bool probed;       /* a probe has finished */
};

/* One Produce call in flight: results fill in as delivery reports arrive. */
typedef struct tracker {
    atomic_size_t left;
    size_t n;
    ks_produce_result_t *results;
    ks_produce_cb *cb;
    void *opaque;
} tracker_t;

typedef struct slot {
    tracker_t *t;
    size_t i;
} slot_t;

static void settle(slot_t *s)
{
    tracker_t *t = s->t;
    free(s);
    if (atomic_fetch_sub(&t->left, 1) == 1) {
        t->cb(t->results, t->n, t->opaque);
        free(t);
    }
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    slot_t *s = m->_private;
    ks_produce_result_t *r = &s->t->results[s->i];
    r->partition = m->partition;
    r->offset = m->err ? -1 : m->offset;
    if (m->err) {
        snprintf(r->error, sizeof(r->error), "%s", rd_kafka_err2str(m->err));
        snprintf(r->code, sizeof(r->code), "%s", rd_kafka_err2name(m->err));
    }
    settle(s);
}

static void *poll_main(void *arg)
{
    ks_producer_t *p = arg;
    int64_t next_probe = 0;
    while (!atomic_load(&p->stop)) {
        rd_kafka_poll(p->rk, 100);
        int64_t now = ks_now_ms();
        if (now >= next_probe) {
            const struct rd_kafka_metadata *md = NULL;
            rd_kafka_resp_err_t err = rd_kafka_metadata(p->rk, 0, NULL, &md, 2000);
            bool up = err == RD_KAFKA_RESP_ERR_NO_ERROR && md && md->broker_cnt > 0;
            if (md)
                rd_kafka_metadata_destroy(md);
            pthread_mutex_lock(&p->why_lock);
            if (up)
                p->why[0] = '\0';
            else
                snprintf(p->why, sizeof(p->why),
                         "Kafka is unreachable: no broker answered a metadata request within "
                         "2 s (%s)",
                         err ? rd_kafka_err2str(err) : "no brokers in the answer");
            pthread_mutex_unlock(&p->why_lock);
            if (up != atomic_load(&p->up))
                ks_log(up ? KS_LOG_INFO : KS_LOG_WARN, "producer", "Kafka is %s",
                       up ? "reachable" : "unreachable");
            atomic_store(&p->up, up);
            atomic_store(&p->probed, true);
            next_probe = ks_now_ms() + 2000;
        }
    }
    return NULL;
}

ks_producer_t *ks_producer_new(const ks_config_t *cfg, char *err, size_t errsize)
{
    char e[512];
    rd_kafka_conf_t *conf = ks_kconf_new(cfg, KS_KCONF_PRODUCER, NULL, e, sizeof(e));
    if (!conf) {
        snprintf(err, errsize, "making the producer: %s", e);
        return NULL;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (!rk) {
        snprintf(err, errsize, "making the producer: %s", e);
        return NULL;
    }
    ks_producer_t *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    p->rk = rk;
    atomic_init(&p->stop, false);
    atomic_init(&p->up, false);
    atomic_init(&p->probed, false);
    pthread_mutex_init(&p->why_lock, NULL);
    snprintf(p->why, sizeof(p->why), "Kafka has not been probed yet");
    if (pthread_create(&p->thread, NULL, poll_main, p) != 0) {
        rd_kafka_destroy(rk);
        free(p);
        snprintf(err, errsize, "cannot start the producer thread");
        return NULL;
    }
    pthread_setname_np(p->thread, "ks:producer");
    return p;
}

ks_status_t ks_producer_send(ks_producer_t *p, const ks_produce_rec_t *recs, size_t n,
                             ks_produce_cb *cb, void *opaque, char *err, size_t errsize)
{
    for (size_t i = 0; i < n; i++) {
        if (!recs[i].topic || !ks_valid_kafka_name(recs[i].topic)) {
            snprintf(err, errsize, "records[%zu]: topic name \"%.100s\" is invalid", i,
                     recs[i].topic ? recs[i].topic : "");
            return KS_E_INVALID;
        }
        if (recs[i].partition < -1) {
            snprintf(err, errsize, "records[%zu]: partition must be >= 0, or -1 for any", i);
            return KS_E_INVALID;
        }
    }
    /* Known down (the last probe reached no broker): refused at once, not queued to wait out
     * message.timeout.ms. Before the first probe ends it is not known, and records queue. */
    char why[400];
    if (ks_producer_kafka_down(p, why, sizeof(why))) {
        snprintf(err, errsize, "%s; no record was sent, retry once it is back", why);
        return KS_E_UNAVAILABLE;
    }
    tracker_t *t = calloc(1, sizeof(*t));
    if (!t)
        abort();
    t->n = n;
    t->results = calloc(n ? n : 1, sizeof(*t->results));
    if (!t->results)
        abort();
    t->cb = cb;
    t->opaque = opaque;
    /* One extra count, dropped at the end, so cb cannot run while records are queued. */
    atomic_init(&t->left, n + 1);
    for (size_t i = 0; i < n; i++) {
        const ks_produce_rec_t *r = &recs[i];
        rd_kafka_headers_t *hdrs = NULL;
        if (r->header_cnt) {
            hdrs = rd_kafka_headers_new(r->header_cnt);
            for (size_t h = 0; h < r->header_cnt; h++)
                rd_kafka_header_add(hdrs, r->headers[h].name, -1, r->headers[h].value,
                                    r->headers[h].value ? (ssize_t)r->headers[h].value_len : 0);
        }
        slot_t *s = malloc(sizeof(*s));
        if (!s)
            abort();
        s->t = t;
        s->i = i;
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p->rk, RD_KAFKA_V_TOPIC(r->topic),
            RD_KAFKA_V_PARTITION(r->partition < 0 ? RD_KAFKA_PARTITION_UA : r->partition),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(r->key, r->key_len),
            RD_KAFKA_V_VALUE((void *)(uintptr_t)r->value, r->value_len), RD_KAFKA_V_OPAQUE(s),
            RD_KAFKA_V_HEADERS(hdrs ? hdrs : rd_kafka_headers_new(0)), RD_KAFKA_V_END);
        if (e) {
            t->results[i].partition = r->partition;
            t->results[i].offset = -1;
            snprintf(t->results[i].error, sizeof(t->results[i].error), "%s", rd_kafka_err2str(e));
            snprintf(t->results[i].code, sizeof(t->results[i].code), "%s", rd_kafka_err2name(e));
            settle(s);
        }
    }
    slot_t *last = malloc(sizeof(*last));
    if (!last)
        abort();
    last->t = t;
    last->i = 0;
    settle(last);
    return KS_OK;
}

bool ks_producer_kafka_up(ks_producer_t *p)
{
    return atomic_load(&p->up);
}

bool ks_producer_kafka_down(ks_producer_t *p, char *why, size_t size)
{
    return atomic_load(&p->probed) && !ks_producer_kafka_health(p, why, size);
}

bool ks_producer_kafka_health(ks_producer_t *p, char *why, size_t size)
{
    bool up = atomic_load(&p->up);
    pthread_mutex_lock(&p->why_lock);
    snprintf(why, size, "%s", up ? "" : p->why);
    pthread_mutex_unlock(&p->why_lock);
    return up;
}

void ks_producer_destroy(ks_producer_t *p)
{
    if (!p)
        return;
    rd_kafka_flush(p->rk, 5000);
    atomic_store(&p->stop, true);
    pthread_join(p->thread, NULL);
    rd_kafka_destroy(p->rk);
    free(p);
}
