/* producer.c: the engine's shared Kafka producer and its connectivity probe. */
#include "producer.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kconf.h"
#include "log.h"
#include "util.h"

typedef struct tracker tracker_t;

struct ks_producer {
    rd_kafka_t *rk;
    pthread_t thread;
    int timeout_ms;          /* produce.timeout_ms */
    pthread_t dl_thread;     /* answers produces at their deadline */
    pthread_mutex_t dl_lock; /* guards dl_head and each tracker's listed and links */
    pthread_cond_t dl_cond;  /* signalled at stop */
    tracker_t *dl_head;      /* produces not yet answered, in no order */
    atomic_bool stop;
    atomic_bool up;
    pthread_mutex_t why_lock; /* guards why */
    char why[256];            /* why the last probe failed; "" while up */
    atomic_bool probed;       /* a probe has finished */
};

/* One Produce call in flight: results fill in as delivery reports arrive. It is answered
 * once: by the last settle, or by the deadline thread first (then the last settle frees it
 * without an answer). */
struct tracker {
    pthread_mutex_t lock; /* guards left, answered and results */
    size_t left;
    bool answered;
    size_t n;
    ks_produce_result_t *results;
    ks_produce_cb *cb;
    void *opaque;
    int64_t deadline_ms;
    bool listed; /* in dl_head's list; under the producer's dl_lock */
    tracker_t *prev, *next;
    ks_producer_t *p;
};

typedef struct slot {
    tracker_t *t;
    size_t i;
} slot_t;

static void unlist(ks_producer_t *p, tracker_t *t)
{
    if (!t->listed)
        return;
    if (t->prev)
        t->prev->next = t->next;
    else
        p->dl_head = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->listed = false;
}

/* Fills s's result (partition, offset; err for a failure), and answers its produce once the
 * last record settles unless the deadline answered first. Frees s. */
static void settle(slot_t *s, int32_t partition, int64_t offset, rd_kafka_resp_err_t err)
{
    tracker_t *t = s->t;
    pthread_mutex_lock(&t->lock);
    if (s->i < t->n) { /* not the extra count's slot */
        ks_produce_result_t *r = &t->results[s->i];
        r->partition = partition;
        r->offset = err ? -1 : offset;
        if (err) {
            snprintf(r->error, sizeof(r->error), "%s", rd_kafka_err2str(err));
            snprintf(r->code, sizeof(r->code), "%s", rd_kafka_err2name(err));
        }
    }
    bool last = --t->left == 0;
    pthread_mutex_unlock(&t->lock);
    free(s);
    if (!last)
        return;
    pthread_mutex_lock(&t->p->dl_lock);
    unlist(t->p, t);
    pthread_mutex_unlock(&t->p->dl_lock);
    /* No one else holds t now: the deadline thread only reaches it through the list. */
    if (t->answered)
        free(t->results);
    else
        t->cb(t->results, t->n, t->opaque);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    settle(m->_private, m->partition, m->offset, m->err);
}

/* One produce's answer at its deadline. */
typedef struct {
    ks_produce_result_t *results; /* a copy: the tracker's own still fills in */
    size_t n;
    ks_produce_cb *cb;
    void *opaque;
} late_t;

/* Answers every listed produce past its deadline (settled records as they are, the others
 * KS_PRODUCE_TIMED_OUT) and takes it off the list. Returns the next deadline (INT64_MAX:
 * none). @locks dl_lock held. */
static int64_t sweep(ks_producer_t *p, int64_t now, late_t *late, size_t *nlate, size_t cap)
{
    int64_t next = INT64_MAX;
    for (tracker_t *t = p->dl_head, *nx; t; t = nx) {
        nx = t->next;
        if (t->deadline_ms > now || *nlate == cap) {
            next = t->deadline_ms < next ? t->deadline_ms : next;
            continue;
        }
        late_t *l = &late[(*nlate)++];
        pthread_mutex_lock(&t->lock);
        t->answered = true;
        l->n = t->n;
        l->results = malloc((t->n ? t->n : 1) * sizeof(*l->results));
        if (!l->results)
            abort();
        memcpy(l->results, t->results, t->n * sizeof(*l->results));
        for (size_t i = 0; i < t->n; i++) {
            ks_produce_result_t *r = &l->results[i];
            if (r->offset >= 0 || r->error[0])
                continue;
            snprintf(r->error, sizeof(r->error),
                     "no delivery report within the produce's timeout_ms; the record may still "
                     "be written");
            snprintf(r->code, sizeof(r->code), "%s", KS_PRODUCE_TIMED_OUT);
        }
        pthread_mutex_unlock(&t->lock);
        l->cb = t->cb;
        l->opaque = t->opaque;
        unlist(p, t);
    }
    return next;
}

/* The deadline thread: wakes at the nearest deadline (or every 100 ms) and answers the
 * produces past theirs, outside dl_lock. */
static void *deadline_main(void *arg)
{
    ks_producer_t *p = arg;
    late_t late[64];
    pthread_mutex_lock(&p->dl_lock);
    while (!atomic_load(&p->stop)) {
        size_t nlate = 0;
        int64_t next = sweep(p, ks_now_ms(), late, &nlate, 64);
        if (nlate) {
            pthread_mutex_unlock(&p->dl_lock);
            for (size_t i = 0; i < nlate; i++)
                late[i].cb(late[i].results, late[i].n, late[i].opaque);
            pthread_mutex_lock(&p->dl_lock);
            continue;
        }
        int64_t wait = next == INT64_MAX ? 100 : next - ks_now_ms();
        if (wait > 100)
            wait = 100;
        if (wait < 1)
            wait = 1;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(wait % 1000) * 1000000L;
        ts.tv_sec += wait / 1000 + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&p->dl_cond, &p->dl_lock, &ts);
    }
    pthread_mutex_unlock(&p->dl_lock);
    return NULL;
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
    p->timeout_ms = cfg && cfg->produce_timeout_ms > 0 ? cfg->produce_timeout_ms : 10000;
    pthread_mutex_init(&p->dl_lock, NULL);
    pthread_cond_init(&p->dl_cond, NULL);
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
    if (pthread_create(&p->dl_thread, NULL, deadline_main, p) != 0) {
        atomic_store(&p->stop, true);
        pthread_join(p->thread, NULL);
        rd_kafka_destroy(rk);
        free(p);
        snprintf(err, errsize, "cannot start the producer's deadline thread");
        return NULL;
    }
    pthread_setname_np(p->dl_thread, "ks:produce-dl");
    return p;
}

ks_status_t ks_producer_send(ks_producer_t *p, const ks_produce_rec_t *recs, size_t n,
                             int timeout_ms, ks_produce_cb *cb, void *opaque, char *err,
                             size_t errsize)
{
    if (timeout_ms < 0 || timeout_ms > KS_PRODUCE_TIMEOUT_MAX_MS) {
        snprintf(err, errsize, "timeout_ms is %d; give 1 to %d, or 0 for produce.timeout_ms",
                 timeout_ms, KS_PRODUCE_TIMEOUT_MAX_MS);
        return KS_E_INVALID;
    }
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
    for (size_t i = 0; i < n; i++) /* unsettled: no offset, no error (sweep) */
        t->results[i].offset = -1;
    t->cb = cb;
    t->opaque = opaque;
    t->p = p;
    t->deadline_ms = ks_now_ms() + (timeout_ms ? timeout_ms : p->timeout_ms);
    pthread_mutex_init(&t->lock, NULL);
    /* One extra count, dropped at the end, so cb cannot run while records are queued. */
    t->left = n + 1;
    pthread_mutex_lock(&p->dl_lock);
    t->next = p->dl_head;
    if (t->next)
        t->next->prev = t;
    p->dl_head = t;
    t->listed = true;
    pthread_mutex_unlock(&p->dl_lock);
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
        if (e)
            settle(s, r->partition, -1, e);
    }
    slot_t *last = malloc(sizeof(*last));
    if (!last)
        abort();
    last->t = t;
    last->i = n; /* no record's */
    settle(last, 0, 0, RD_KAFKA_RESP_ERR_NO_ERROR);
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
    pthread_mutex_lock(&p->dl_lock);
    pthread_cond_signal(&p->dl_cond);
    pthread_mutex_unlock(&p->dl_lock);
    pthread_join(p->dl_thread, NULL);
    pthread_join(p->thread, NULL);
    rd_kafka_destroy(p->rk);
    free(p);
}
