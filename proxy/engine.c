/* engine.c: the group registry and the commands every API edge uses. */
#include "engine.h"

#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ack_id.h"
#include "group.h"
#include "log.h"
#include "producer.h"
#include "util.h"

/* A registered group. `refs` counts API threads using it right now; a group that
 * closed for idleness leaves the lookup (live = false) and is freed once it has
 * exited and nobody holds it. */
typedef struct gent {
    ks_group_t *g;
    int refs;
    bool live;
} gent_t;

struct ks_engine {
    const ks_config_t *cfg;
    uint32_t instance;
    pthread_mutex_t lock; /* guards ents, ent_cnt, stopping, and each gent */
    gent_t **ents;
    size_t ent_cnt;
    bool stopping;
    ks_producer_t *producer;
};

ks_engine_t *ks_engine_new(const ks_config_t *cfg, char *err, size_t errsize)
{
    ks_engine_t *e = calloc(1, sizeof(*e));
    if (!e) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    e->cfg = cfg;
    /* A fresh incarnation per process, so ack ids from a previous run are stale. */
    if (getrandom(&e->instance, sizeof(e->instance), 0) != sizeof(e->instance))
        e->instance = (uint32_t)getpid() ^ (uint32_t)time(NULL);
    pthread_mutex_init(&e->lock, NULL);
    e->producer = ks_producer_new(cfg, err, errsize);
    if (!e->producer) {
        pthread_mutex_destroy(&e->lock);
        free(e);
        return NULL;
    }
    return e;
}

ks_status_t ks_engine_check_name(ks_name_kind_t kind, const char *name, char *err, size_t errsize)
{
    static const char *const kinds[] = {"group", "topic", "subscriber"};
    if (kind == KS_NAME_SUBSCRIBER) {
        /* Any characters; a trailing "#<digits>" (the gRPC edge's stream number) is not
         * part of the name the client chose. */
        size_t n = strlen(name), d = n;
        while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
            d--;
        if (d > 0 && d < n && name[d - 1] == '#')
            n = d - 1;
        if (n <= KS_NAME_MAX)
            return KS_OK;
        snprintf(err, errsize,
                 "subscriber name \"%.60s...\" is too long: %zu characters, at most %d", name, n,
                 KS_NAME_MAX);
        return KS_E_INVALID;
    }
    if (ks_valid_kafka_name(name))
        return KS_OK;
    snprintf(err, errsize,
             "%s name \"%.100s\"%s is invalid: use 1-%d characters of A-Z a-z 0-9 . _ -",
             kinds[kind], name, strlen(name) > 100 ? "..." : "", KS_NAME_MAX);
    return KS_E_INVALID;
}

bool ks_engine_internal_topic(const ks_engine_t *e, const char *topic)
{
    return !e->cfg->topics_allow_internal && !strncmp(topic, "__", 2);
}

ks_status_t ks_engine_check_group(const ks_engine_t *e, const char *group, char *err,
                                  size_t errsize)
{
    ks_status_t st = ks_engine_check_name(KS_NAME_GROUP, group, err, errsize);
    if (st)
        return st;
    for (size_t i = 0; i < e->cfg->static_group_cnt; i++)
        if (!strcmp(e->cfg->static_groups[i].name, group))
            return KS_OK;
    for (size_t i = 0; i < e->cfg->group_pattern_cnt; i++)
        if (fnmatch(e->cfg->group_patterns[i], group, 0) == 0)
            return KS_OK;
    snprintf(err, errsize, "group \"%s\" does not match any pattern in groups.allowed", group);
    return KS_E_PERMISSION;
}

/* Frees groups that closed for idleness and that nobody holds. Locked by caller. */
static void reap_locked(ks_engine_t *e)
{
    for (size_t i = 0; i < e->ent_cnt;) {
        gent_t *ge = e->ents[i];
        if (!ge->live && ge->refs == 0 && ks_group_exited(ge->g)) {
            ks_group_join(ge->g, 0);
            ks_group_destroy(ge->g);
            free(ge);
            e->ents[i] = e->ents[--e->ent_cnt];
        } else {
            i++;
        }
    }
}

static bool on_idle(ks_group_t *g, void *opaque)
{
    ks_engine_t *e = opaque;
    bool ok = false;
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < e->ent_cnt && !e->stopping; i++)
        if (e->ents[i]->g == g && e->ents[i]->live) {
            e->ents[i]->live = false;
            ok = true;
        }
    pthread_mutex_unlock(&e->lock);
    return ok;
}

static gent_t *add_locked(ks_engine_t *e, const char *name, const ks_group_conf_t *gc,
                          bool is_static, char *err, size_t errsize)
{
    ks_group_t *g =
        ks_group_start(name, e->cfg, gc, is_static, e->instance, on_idle, e, err, errsize);
    if (!g)
        return NULL;
    gent_t *ge = calloc(1, sizeof(*ge));
    gent_t **n = realloc(e->ents, (e->ent_cnt + 1) * sizeof(*n));
    if (!ge || !n)
        abort();
    ge->g = g;
    ge->live = true;
    e->ents = n;
    e->ents[e->ent_cnt++] = ge;
    return ge;
}

/* Finds a live group by name (creating it when create is set) and holds it.
 * Returns NULL with *st and err. Release with put_group. */
static gent_t *get_group(ks_engine_t *e, const char *name, bool create, ks_status_t *st, char *err,
                         size_t errsize)
{
    gent_t *ge = NULL;
    pthread_mutex_lock(&e->lock);
    reap_locked(e);
    for (size_t i = 0; i < e->ent_cnt; i++)
        if (e->ents[i]->live && strcmp(ks_group_name(e->ents[i]->g), name) == 0) {
            ge = e->ents[i];
            goto out;
        }
    /* While shutting down, existing groups still take acks; nothing new starts. */
    if (e->stopping) {
        *st = KS_E_UNAVAILABLE;
        snprintf(err, errsize, "ksidecar is shutting down");
        goto out;
    }
    if (!create) {
        *st = KS_E_NOT_FOUND;
        snprintf(err, errsize, "group \"%s\" is not active in this ksidecar", name);
        goto out;
    }
    size_t live = 0;
    for (size_t i = 0; i < e->ent_cnt; i++)
        live += e->ents[i]->live;
    if (live >= (size_t)e->cfg->groups_max) {
        *st = KS_E_EXHAUSTED;
        snprintf(err, errsize,
                 "group \"%s\" cannot start: %zu groups are running, the most groups.max (%d) "
                 "allows; an idle dynamic group closes after group.idle_close_ms",
                 name, live, e->cfg->groups_max);
        goto out;
    }
    /* A new group could not join while Kafka is down: say so rather than wait. */
    char why[256];
    if (ks_engine_kafka_down(e, why, sizeof(why))) {
        *st = KS_E_UNAVAILABLE;
        snprintf(err, errsize, "%s; group \"%s\" cannot join until it is back", why, name);
        goto out;
    }
    ge = add_locked(e, name, ks_config_group(e->cfg, name), false, err, errsize);
    if (!ge)
        *st = KS_E_INTERNAL;
out:
    if (ge)
        ge->refs++;
    pthread_mutex_unlock(&e->lock);
    return ge;
}

static void put_group(ks_engine_t *e, gent_t *ge)
{
    pthread_mutex_lock(&e->lock);
    ge->refs--;
    pthread_mutex_unlock(&e->lock);
}

int ks_engine_check_kafka_conf(const ks_config_t *cfg, char *err, size_t errsize)
{
    return ks_group_check_kafka_conf(cfg, err, errsize);
}

int ks_engine_start_static(ks_engine_t *e, char *err, size_t errsize)
{
    int rc = 0;
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < e->cfg->static_group_cnt && rc == 0; i++) {
        const ks_group_conf_t *gc = &e->cfg->static_groups[i];
        if (!add_locked(e, gc->name, gc, true, err, errsize))
            rc = -1;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

ks_status_t ks_engine_check_topics(const ks_engine_t *e, const char *const *topics, size_t n,
                                   const char *verb, char *err, size_t errsize)
{
    if (n == 0) {
        snprintf(err, errsize, "name at least one topic");
        return KS_E_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        ks_status_t st = ks_engine_check_name(KS_NAME_TOPIC, topics[i], err, errsize);
        if (st)
            return st;
        if (ks_engine_internal_topic(e, topics[i])) {
            snprintf(err, errsize,
                     "topic \"%s\" is internal to Kafka (a name starting \"__\"); clients may "
                     "not %s it unless topics.allow_internal is set",
                     topics[i], verb);
            return KS_E_PERMISSION;
        }
    }
    return KS_OK;
}

ks_status_t ks_engine_fetch(ks_engine_t *e, const char *group, const char *const *topics,
                            size_t topic_cnt, const ks_fetch_opts_t *opts, ks_fetch_cb *cb,
                            void *opaque, char *err, size_t errsize)
{
    ks_status_t st = ks_engine_check_group(e, group, err, errsize);
    if (st || (st = ks_engine_check_topics(e, topics, topic_cnt, "consume", err, errsize)))
        return st;
    if (opts->max < 1 || opts->max > e->cfg->fetch_max_records) {
        snprintf(err, errsize, "max must be from 1 to %d (fetch.max_records), got %d",
                 e->cfg->fetch_max_records, opts->max);
        return KS_E_INVALID;
    }
    if (opts->wait_ms < 0 || opts->wait_ms > e->cfg->fetch_max_wait_ms) {
        snprintf(err, errsize, "wait_ms must be from 0 to %d (fetch.max_wait_ms), got %d",
                 e->cfg->fetch_max_wait_ms, opts->wait_ms);
        return KS_E_INVALID;
    }
    if (opts->deadline_ms < 0 || opts->deadline_ms > e->cfg->lease_max_deadline_ms) {
        snprintf(err, errsize, "deadline_ms must be from 1 to %d (lease.max_deadline_ms), got %d",
                 e->cfg->lease_max_deadline_ms, opts->deadline_ms);
        return KS_E_INVALID;
    }
    if (opts->subscriber &&
        (st = ks_engine_check_name(KS_NAME_SUBSCRIBER, opts->subscriber, err, errsize)))
        return st;
    /* Twice: a group may close for idleness between lookup and post. */
    for (int tries = 0; tries < 2; tries++) {
        gent_t *ge = get_group(e, group, true, &st, err, errsize);
        if (!ge)
            return st;
        st = ks_group_fetch(ge->g, topics, topic_cnt, opts, cb, opaque);
        put_group(e, ge);
        if (st == KS_OK)
            return KS_OK;
    }
    snprintf(err, errsize, "group \"%s\" is shutting down", group);
    return st;
}

ks_status_t ks_engine_settle(ks_engine_t *e, const char *group, ks_settle_op_t op, int64_t ms,
                             const char *reason, const char *const *ack_ids, size_t n,
                             ks_ack_cb *cb, void *opaque, char *err, size_t errsize)
{
    ks_status_t st = ks_engine_check_group(e, group, err, errsize);
    if (st)
        return st;
    if (n == 0) {
        snprintf(err, errsize, "ack_ids is empty: give at least one ack id");
        return KS_E_INVALID;
    }
    if (op == KS_SETTLE_NACK && (ms < 0 || ms > e->cfg->nack_max_delay_ms)) {
        snprintf(err, errsize, "delay_ms must be from 0 to %d (nack.max_delay_ms), got %lld",
                 e->cfg->nack_max_delay_ms, (long long)ms);
        return KS_E_INVALID;
    }
    if (op == KS_SETTLE_EXTEND && (ms < 1 || ms > e->cfg->lease_max_deadline_ms)) {
        snprintf(err, errsize, "deadline_ms must be from 1 to %d (lease.max_deadline_ms), got %lld",
                 e->cfg->lease_max_deadline_ms, (long long)ms);
        return KS_E_INVALID;
    }
    gent_t *ge = get_group(e, group, false, &st, err, errsize);
    if (!ge)
        return st;
    st = ks_group_settle(ge->g, op, ms, reason, ack_ids, n, cb, opaque);
    put_group(e, ge);
    if (st)
        snprintf(err, errsize, "group \"%s\" is closing; its records will be redelivered", group);
    return st;
}

ks_status_t ks_engine_ack(ks_engine_t *e, const char *group, const char *const *ack_ids, size_t n,
                          ks_ack_cb *cb, void *opaque, char *err, size_t errsize)
{
    return ks_engine_settle(e, group, KS_SETTLE_ACK, 0, NULL, ack_ids, n, cb, opaque, err, errsize);
}

/* Gathers the status of several groups, then calls the user's callback once. */
typedef struct gather {
    pthread_mutex_t lock;
    size_t left, cnt;
    ks_group_status_t **out;
    ks_status_cb *cb;
    void *opaque;
} gather_t;

static void gather_done(gather_t *ga)
{
    ks_status_cb *cb = ga->cb;
    void *opaque = ga->opaque;
    ks_group_status_t **out = ga->out;
    size_t cnt = ga->cnt;
    pthread_mutex_destroy(&ga->lock);
    free(ga);
    cb(out, cnt, opaque);
}

static void gather_one(ks_group_status_t *st, void *opaque)
{
    gather_t *ga = opaque;
    pthread_mutex_lock(&ga->lock);
    if (st)
        ga->out[ga->cnt++] = st;
    bool last = --ga->left == 0;
    pthread_mutex_unlock(&ga->lock);
    if (last)
        gather_done(ga);
}

ks_status_t ks_engine_status(ks_engine_t *e, const char *group, ks_status_cb *cb, void *opaque,
                             char *err, size_t errsize)
{
    ks_status_t st;
    if (group && (st = ks_engine_check_group(e, group, err, errsize)))
        return st;
    pthread_mutex_lock(&e->lock);
    gent_t **hold = calloc(e->ent_cnt + 1, sizeof(*hold));
    if (!hold)
        abort();
    size_t n = 0;
    for (size_t i = 0; i < e->ent_cnt; i++) {
        gent_t *ge = e->ents[i];
        if (ge->live && (!group || !strcmp(ks_group_name(ge->g), group))) {
            ge->refs++;
            hold[n++] = ge;
        }
    }
    pthread_mutex_unlock(&e->lock);
    if (group && n == 0) {
        free(hold);
        snprintf(err, errsize, "group \"%s\" is not active in this ksidecar", group);
        return KS_E_NOT_FOUND;
    }
    gather_t *ga = calloc(1, sizeof(*ga));
    if (!ga)
        abort();
    pthread_mutex_init(&ga->lock, NULL);
    ga->out = calloc(n + 1, sizeof(*ga->out));
    if (!ga->out)
        abort();
    ga->left = n + 1; /* one extra, dropped below, so no callback runs early */
    ga->cb = cb;
    ga->opaque = opaque;
    for (size_t i = 0; i < n; i++) {
        if (ks_group_status(hold[i]->g, gather_one, ga) != KS_OK)
            gather_one(NULL, ga);
        put_group(e, hold[i]);
    }
    free(hold);
    gather_one(NULL, ga);
    return KS_OK;
}

ks_status_t ks_engine_seek(ks_engine_t *e, const char *group, const char *topic, int32_t partition,
                           ks_seek_kind_t kind, int64_t value, ks_seek_cb *cb, void *opaque,
                           char *err, size_t errsize)
{
    ks_status_t st = ks_engine_check_group(e, group, err, errsize);
    if (st || (st = ks_engine_check_topics(e, &topic, 1, "seek", err, errsize)))
        return st;
    if (partition < 0) {
        snprintf(err, errsize, "partition must be >= 0, got %d", partition);
        return KS_E_INVALID;
    }
    if (kind == KS_SEEK_OFFSET && value < 0) {
        snprintf(err, errsize, "offset must be >= 0, got %lld", (long long)value);
        return KS_E_INVALID;
    }
    gent_t *ge = get_group(e, group, false, &st, err, errsize);
    if (!ge)
        return st;
    st = ks_group_seek(ge->g, topic, partition, kind, value, cb, opaque);
    put_group(e, ge);
    if (st)
        snprintf(err, errsize, "group \"%s\" is closing", group);
    return st;
}

/* Posts the release of a subscriber of group, if that group runs here. */
static void release(ks_engine_t *e, const char *group, const char *subscriber, bool unread)
{
    char err[256];
    ks_status_t st;
    gent_t *ge = get_group(e, group, false, &st, err, sizeof(err));
    if (!ge)
        return;
    if (unread)
        ks_group_release_unread(ge->g, subscriber);
    else
        ks_group_release(ge->g, subscriber);
    put_group(e, ge);
}

void ks_engine_release(ks_engine_t *e, const char *group, const char *subscriber)
{
    release(e, group, subscriber, false);
}

void ks_engine_release_unread(ks_engine_t *e, const char *group, const char *subscriber)
{
    release(e, group, subscriber, true);
}

void ks_engine_delivered(ks_engine_t *e, const char *group, uint64_t token, bool taken)
{
    char err[256];
    ks_status_t st;
    if (!token)
        return;
    gent_t *ge = get_group(e, group, false, &st, err, sizeof(err));
    if (!ge)
        return; /* the group closed: its leases went with it */
    ks_group_delivered(ge->g, token, taken);
    put_group(e, ge);
}

ks_status_t ks_engine_produce(ks_engine_t *e, const ks_produce_rec_t *recs, size_t n,
                              ks_produce_cb *cb, void *opaque, char *err, size_t errsize)
{
    if (n == 0) {
        snprintf(err, errsize, "records is empty: give at least one record");
        return KS_E_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        ks_status_t st;
        if (recs[i].topic &&
            (st = ks_engine_check_topics(e, &recs[i].topic, 1, "produce to", err, errsize)))
            return st;
    }
    return ks_producer_send(e->producer, recs, n, cb, opaque, err, errsize);
}

bool ks_engine_kafka_up(ks_engine_t *e)
{
    return ks_producer_kafka_up(e->producer);
}

bool ks_engine_kafka_health(ks_engine_t *e, char *why, size_t size)
{
    return ks_producer_kafka_health(e->producer, why, size);
}

bool ks_engine_kafka_down(ks_engine_t *e, char *why, size_t size)
{
    return ks_producer_kafka_down(e->producer, why, size);
}

void ks_engine_stop_delivering(ks_engine_t *e)
{
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < e->ent_cnt; i++)
        ks_group_stop_delivering(e->ents[i]->g);
    pthread_mutex_unlock(&e->lock);
}

int ks_engine_shutdown(ks_engine_t *e, int grace_ms)
{
    int64_t deadline = ks_now_ms() + grace_ms;
    /* Leave time after the ack wait to commit and leave the group. */
    int64_t margin = grace_ms / 4 < 3000 ? grace_ms / 4 : 3000;
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_mutex_unlock(&e->lock);
    /* No group is added once stopping is set, so the list is stable now. */
    for (size_t i = 0; i < e->ent_cnt; i++)
        ks_group_request_shutdown(e->ents[i]->g, deadline - margin);
    int rc = 0;
    for (size_t i = 0; i < e->ent_cnt; i++) {
        if (ks_group_join(e->ents[i]->g, deadline) < 0) {
            ks_err("engine", "group %s did not stop within the shutdown grace (%d ms)",
                   ks_group_name(e->ents[i]->g), grace_ms);
            rc = -1;
        }
    }
    return rc;
}

void ks_engine_destroy(ks_engine_t *e)
{
    for (size_t i = 0; i < e->ent_cnt; i++) {
        ks_group_destroy(e->ents[i]->g);
        free(e->ents[i]);
    }
    free(e->ents);
    ks_producer_destroy(e->producer);
    pthread_mutex_destroy(&e->lock);
    free(e);
}
