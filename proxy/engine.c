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

#include "group_loop.h"
#include "log.h"

struct ks_engine {
    const ks_config_t *cfg;
    uint32_t instance;
    pthread_mutex_t lock; /* guards groups, group_cnt, stopping */
    ks_group_t **groups;
    size_t group_cnt;
    bool stopping;
};

const char *ks_status_name(ks_status_t s)
{
    switch (s) {
    case KS_OK:
        return "OK";
    case KS_E_INVALID:
        return "INVALID_ARGUMENT";
    case KS_E_NOT_FOUND:
        return "NOT_FOUND";
    case KS_E_STALE:
        return "FAILED_PRECONDITION";
    case KS_E_EXHAUSTED:
        return "RESOURCE_EXHAUSTED";
    case KS_E_UNAVAILABLE:
        return "UNAVAILABLE";
    case KS_E_PERMISSION:
        return "PERMISSION_DENIED";
    case KS_E_UNAUTH:
        return "UNAUTHENTICATED";
    case KS_E_INTERNAL:
        return "INTERNAL";
    }
    return "UNKNOWN";
}

void ks_batch_free(ks_batch_t *b)
{
    if (!b)
        return;
    free(b->arena);
    free(b);
}

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
    return e;
}

ks_status_t ks_engine_check_group(const ks_engine_t *e, const char *group, char *err,
                                  size_t errsize)
{
    if (!ks_valid_kafka_name(group)) {
        snprintf(err, errsize,
                 "group name \"%.100s\" is invalid: use 1-249 characters of A-Z a-z 0-9 . _ -",
                 group);
        return KS_E_INVALID;
    }
    for (size_t i = 0; i < e->cfg->group_pattern_cnt; i++)
        if (fnmatch(e->cfg->group_patterns[i], group, 0) == 0)
            return KS_OK;
    snprintf(err, errsize, "group \"%s\" does not match any pattern in groups.allowed", group);
    return KS_E_PERMISSION;
}

/* Finds group by name; creates it when create is set. Returns NULL with err. */
static ks_group_t *get_group(ks_engine_t *e, const char *name, bool create, ks_status_t *st,
                             char *err, size_t errsize)
{
    ks_group_t *g = NULL;
    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        *st = KS_E_UNAVAILABLE;
        snprintf(err, errsize, "ksidecar is shutting down");
        goto out;
    }
    for (size_t i = 0; i < e->group_cnt; i++)
        if (strcmp(ks_group_name(e->groups[i]), name) == 0) {
            g = e->groups[i];
            goto out;
        }
    if (!create) {
        *st = KS_E_NOT_FOUND;
        snprintf(err, errsize, "group \"%s\" is not active in this ksidecar", name);
        goto out;
    }
    g = ks_group_start(name, e->cfg, e->instance, err, errsize);
    if (!g) {
        *st = KS_E_INTERNAL;
        goto out;
    }
    ks_group_t **n = realloc(e->groups, (e->group_cnt + 1) * sizeof(*n));
    if (!n)
        abort();
    e->groups = n;
    e->groups[e->group_cnt++] = g;
out:
    pthread_mutex_unlock(&e->lock);
    return g;
}

ks_status_t ks_engine_fetch(ks_engine_t *e, const char *group, const char *const *topics,
                            size_t topic_cnt, int max, int wait_ms, ks_fetch_cb *cb, void *opaque,
                            char *err, size_t errsize)
{
    ks_status_t st = ks_engine_check_group(e, group, err, errsize);
    if (st)
        return st;
    if (topic_cnt == 0) {
        snprintf(err, errsize, "name at least one topic");
        return KS_E_INVALID;
    }
    for (size_t i = 0; i < topic_cnt; i++) {
        if (!ks_valid_kafka_name(topics[i])) {
            snprintf(err, errsize,
                     "topic name \"%.100s\" is invalid: use 1-249 characters of A-Z a-z 0-9 . _ -",
                     topics[i]);
            return KS_E_INVALID;
        }
    }
    if (max < 1 || max > e->cfg->fetch_max_records) {
        snprintf(err, errsize, "max must be from 1 to %d (fetch.max_records), got %d",
                 e->cfg->fetch_max_records, max);
        return KS_E_INVALID;
    }
    if (wait_ms < 0 || wait_ms > e->cfg->fetch_max_wait_ms) {
        snprintf(err, errsize, "wait_ms must be from 0 to %d (fetch.max_wait_ms), got %d",
                 e->cfg->fetch_max_wait_ms, wait_ms);
        return KS_E_INVALID;
    }
    ks_group_t *g = get_group(e, group, true, &st, err, errsize);
    if (!g)
        return st;
    st = ks_group_fetch(g, topics, topic_cnt, max, wait_ms, cb, opaque);
    if (st)
        snprintf(err, errsize, "group \"%s\" is shutting down", group);
    return st;
}

ks_status_t ks_engine_ack(ks_engine_t *e, const char *group, const char *const *ack_ids, size_t n,
                          ks_ack_cb *cb, void *opaque, char *err, size_t errsize)
{
    ks_status_t st = ks_engine_check_group(e, group, err, errsize);
    if (st)
        return st;
    if (n == 0) {
        snprintf(err, errsize, "ack_ids is empty: give at least one ack id");
        return KS_E_INVALID;
    }
    ks_group_t *g = get_group(e, group, false, &st, err, errsize);
    if (!g)
        return st;
    st = ks_group_ack(g, ack_ids, n, cb, opaque);
    if (st)
        snprintf(err, errsize, "group \"%s\" is shutting down", group);
    return st;
}

void ks_engine_stop_delivering(ks_engine_t *e)
{
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < e->group_cnt; i++)
        ks_group_stop_delivering(e->groups[i]);
    pthread_mutex_unlock(&e->lock);
}

int ks_engine_shutdown(ks_engine_t *e, int grace_ms)
{
    int64_t deadline = ks_now_ms() + grace_ms;
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_mutex_unlock(&e->lock);
    /* No group is added once stopping is set, so the list is stable now. */
    for (size_t i = 0; i < e->group_cnt; i++)
        ks_group_request_shutdown(e->groups[i]);
    int rc = 0;
    for (size_t i = 0; i < e->group_cnt; i++) {
        if (ks_group_join(e->groups[i], deadline) < 0) {
            ks_err("engine", "group %s did not stop within the shutdown grace (%d ms)",
                   ks_group_name(e->groups[i]), grace_ms);
            rc = -1;
        }
    }
    return rc;
}

void ks_engine_destroy(ks_engine_t *e)
{
    for (size_t i = 0; i < e->group_cnt; i++)
        ks_group_destroy(e->groups[i]);
    free(e->groups);
    pthread_mutex_destroy(&e->lock);
    free(e);
}
