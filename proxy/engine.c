/* engine.c: the group registry and the commands every API edge uses. */
#include "engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ack_id.h"
#include "group.h"
#include "kconf.h"
#include "log.h"
#include "producer.h"
#include "redrive.h"
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
    ks_redriver_t *redriver; /* the running dead-letter redrives */
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
    e->redriver = ks_redriver_new(cfg);
    return e;
}

ks_status_t ks_engine_check_name(ks_name_kind_t kind, const char *name, char *err, size_t errsize)
{
    return ks_cmd_check_name(kind, name, err, errsize);
}

bool ks_engine_internal_topic(const ks_engine_t *e, const char *topic)
{
    return ks_cmd_internal_topic(e->cfg, topic);
}

ks_status_t ks_engine_check_group(const ks_engine_t *e, const char *group, char *err,
                                  size_t errsize)
{
    return ks_cmd_check_group(e->cfg, group, err, errsize);
}

ks_status_t ks_engine_check_topics(const ks_engine_t *e, const char *const *topics, size_t n,
                                   const char *verb, char *err, size_t errsize)
{
    return ks_cmd_check_topics(e->cfg, topics, n, verb, err, errsize);
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
    return ks_kconf_check(cfg, err, errsize);
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

/* The posting half of ks_engine_submit; req is validated. Each returns KS_OK once the
 * command is posted (its callback runs exactly once), or an error with err (its callback never
 * runs). */

/* A group command (KS_CMDF_GROUP), to the group it names. One that may start its group
 * (KS_CMDF_CREATE) tries twice: the group may close for idleness between lookup and post. */
static ks_status_t post_group(ks_engine_t *e, const ks_cmd_req_t *req, char *err, size_t errsize)
{
    bool create = (ks_cmd_flags(req->type) & KS_CMDF_CREATE) != 0;
    ks_status_t st = KS_E_UNAVAILABLE;
    for (int tries = 0; tries < (create ? 2 : 1); tries++) {
        gent_t *ge = get_group(e, req->group, create, &st, err, errsize);
        if (!ge)
            return st;
        st = ks_group_post(ge->g, req);
        put_group(e, ge);
        if (st == KS_OK)
            return KS_OK;
    }
    snprintf(err, errsize, "group \"%s\" is closing%s", req->group,
             req->type == KS_CMD_SETTLE ? "; its records will be redelivered" : "");
    return st;
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

/* One group's answer (n is 1), or none (n is 0): a ks_status_cb. */
static void gather_one(ks_group_status_t **sts, size_t n, void *opaque)
{
    gather_t *ga = opaque;
    pthread_mutex_lock(&ga->lock);
    for (size_t i = 0; i < n; i++)
        ga->out[ga->cnt++] = sts[i];
    free(sts);
    bool last = --ga->left == 0;
    pthread_mutex_unlock(&ga->lock);
    if (last)
        gather_done(ga);
}

static ks_status_t post_status(ks_engine_t *e, const ks_cmd_req_t *req, char *err, size_t errsize)
{
    const char *group = req->group;
    ks_status_cb *cb = req->u.status.cb;
    void *opaque = req->u.status.opaque;
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
        ks_cmd_req_t one = {.type = KS_CMD_STATUS,
                            .group = ks_group_name(hold[i]->g),
                            .u.status = {.cb = gather_one, .opaque = ga}};
        if (ks_group_post(hold[i]->g, &one) != KS_OK)
            gather_one(NULL, 0, ga);
        put_group(e, hold[i]);
    }
    free(hold);
    gather_one(NULL, 0, ga);
    return KS_OK;
}

ks_status_t ks_engine_submit(ks_engine_t *e, const ks_cmd_req_t *cmd, char *err, size_t errsize)
{
    ks_cmd_req_t req = *cmd; /* the validator fills in defaults */
    ks_status_t st = ks_cmd_validate(e->cfg, &req, err, errsize);
    if (st)
        return st;
    unsigned fl = ks_cmd_flags(req.type);
    if (fl & KS_CMDF_INTERNAL) {
        snprintf(err, errsize, "%s is not a command an edge submits", ks_cmd_name(req.type));
        return KS_E_INVALID;
    }
    if (fl & KS_CMDF_GROUP)
        return post_group(e, &req, err, errsize);
    if (req.type == KS_CMD_STATUS)
        return post_status(e, &req, err, errsize);
    if (req.type == KS_CMD_PRODUCE)
        return ks_producer_send(e->producer, req.u.produce.recs, req.u.produce.n,
                                req.u.produce.timeout_ms, req.u.produce.cb, req.u.produce.opaque,
                                err, errsize);
    if (req.type == KS_CMD_REDRIVE)
        return ks_redriver_start(e->redriver, &req, err, errsize);
    snprintf(err, errsize, "%s has no way to its engine part", ks_cmd_name(req.type));
    return KS_E_INTERNAL;
}

/* ---- the commands with no answer, which the edges send as they go ---- */

static void release(ks_engine_t *e, const char *group, const char *subscriber, bool unread)
{
    char err[256];
    ks_cmd_req_t r = {.type = unread ? KS_CMD_RELEASE_UNREAD : KS_CMD_RELEASE,
                      .group = group,
                      .u.release = {.subscriber = subscriber}};
    (void)ks_engine_submit(e, &r, err, sizeof(err));
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
    if (!token)
        return; /* a batch with no records: nothing to report, no need to wake the loop */
    char err[256];
    ks_cmd_req_t r = {
        .type = KS_CMD_DELIVERED, .group = group, .u.delivered = {.token = token, .taken = taken}};
    (void)ks_engine_submit(e, &r, err, sizeof(err));
}

bool ks_engine_kafka_up(ks_engine_t *e)
{
    return ks_producer_kafka_up(e->producer);
}

bool ks_engine_kafka_health(ks_engine_t *e, char *why, size_t size)
{
    return ks_producer_kafka_health(e->producer, why, size);
}

int ks_engine_group_stalled(ks_engine_t *e, const char *group, char *why, size_t size)
{
    int n = -1;
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < e->ent_cnt && n < 0; i++)
        if (e->ents[i]->live && !strcmp(ks_group_name(e->ents[i]->g), group))
            n = ks_group_stalled(e->ents[i]->g, why, size);
    pthread_mutex_unlock(&e->lock);
    return n;
}

bool ks_engine_kafka_down(ks_engine_t *e, char *why, size_t size)
{
    return ks_producer_kafka_down(e->producer, why, size);
}

void ks_engine_stop_delivering(ks_engine_t *e)
{
    pthread_mutex_lock(&e->lock);
    ks_cmd_req_t stop = {.type = KS_CMD_STOP_DELIVERING};
    for (size_t i = 0; i < e->ent_cnt; i++)
        (void)ks_group_post(e->ents[i]->g, &stop); /* a closing group delivers nothing */
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
    ks_cmd_req_t down = {.type = KS_CMD_SHUTDOWN, .u.shutdown = {deadline - margin}};
    for (size_t i = 0; i < e->ent_cnt; i++)
        (void)ks_group_post(e->ents[i]->g, &down); /* a closing group stops anyway */
    /* A running redrive commits what it moved and answers before the edges stop; the groups
     * drain and commit meanwhile, on their own threads (a redrive waiting on a slow broker
     * used to hold them back for most of the grace). */
    ks_redriver_stop(e->redriver);
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
    ks_redriver_free(e->redriver);
    ks_producer_destroy(e->producer);
    pthread_mutex_destroy(&e->lock);
    free(e);
}
