/* group_loop.c: one consumer group's loop: consumer, partition windows, fetches, acks, commits. */
#include "group_loop.h"

#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ack_id.h"
#include "ack_window.h"
#include "inbox.h"
#include "log.h"
#include "owner.h"

typedef enum { CMD_FETCH, CMD_ACK, CMD_STOP_DELIVERING, CMD_SHUTDOWN } cmd_type_t;

/* A command posted to the inbox. It is either queued, parked by the loop, or freed. */
typedef struct cmd {
    ks_inbox_node_t node; /* first member: the inbox links through it */
    cmd_type_t type;
    struct cmd *next_wait; /* parked fetches, oldest first */
    union {
        struct {
            char **topics;
            size_t topic_cnt;
            int max;
            int64_t deadline_ms;
            ks_fetch_cb *cb;
            void *opaque;
        } fetch;
        struct {
            char **ids;
            size_t n;
            ks_ack_cb *cb;
            void *opaque;
        } ack;
    } u;
} cmd_t;

/* Per-partition state machine (DESIGN.md §1). Only ACTIVE and PAUSED exist so far. */
typedef enum { PS_ACTIVE = 0, PS_PAUSED } pstate_kind_t;

static const char *pstate_kind_str(pstate_kind_t k)
{
    static const char *names[] = {"ACTIVE", "PAUSED"};
    return names[k];
}

typedef struct part {
    char *topic;
    int32_t partition;
    uint32_t epoch; /* this assignment's epoch; ack ids carry it */
    pstate_kind_t state;
    ks_ack_window_t win;
    int64_t committed; /* the last offset sent in a commit, -1 if none */
} part_t;

struct ks_group {
    char *name;
    char log_name[300]; /* "group:<name>" */
    uint32_t group_hash;
    uint32_t instance;
    const ks_config_t *cfg;
    pthread_t thread;
    atomic_bool exited;

    ks_inbox_t inbox; /* the one thread-safe door */

    /* Everything below is group loop state. @locality group loop (checked by owner) */
    ks_owner_t owner;
    rd_kafka_t *rk;
    rd_kafka_queue_t *cq; /* the consumer queue */
    int epfd, tfd, rk_pipe[2];
    part_t **parts;
    size_t part_cnt, part_cap, rr;
    char **topics; /* the subscription */
    size_t topic_cnt;
    cmd_t *wait_head, *wait_tail;
    uint32_t next_epoch;
    bool delivering;
    bool stopping;
    int64_t next_commit_ms;
};

int64_t ks_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort();
    return d;
}

static char **dup_strv(const char *const *v, size_t n)
{
    char **out = calloc(n ? n : 1, sizeof(char *));
    if (!out)
        abort();
    for (size_t i = 0; i < n; i++)
        out[i] = xstrdup(v[i]);
    return out;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void cmd_free(cmd_t *c)
{
    if (c->type == CMD_FETCH)
        free_strv(c->u.fetch.topics, c->u.fetch.topic_cnt);
    else if (c->type == CMD_ACK)
        free_strv(c->u.ack.ids, c->u.ack.n);
    free(c);
}

const char *ks_group_name(const ks_group_t *g)
{
    return g->name;
}

/* ---- partitions ---- */

static void free_rkmessage(void *m)
{
    rd_kafka_message_destroy(m);
}

/* @locality group loop */
static part_t *part_find(ks_group_t *g, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (p->partition == partition && strcmp(p->topic, topic) == 0)
            return p;
    }
    return NULL;
}

static part_t *part_add(ks_group_t *g, const char *topic, int32_t partition)
{
    ks_owner_assert(&g->owner);
    part_t *p = part_find(g, topic, partition);
    if (p)
        return p;
    p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    p->topic = xstrdup(topic);
    p->partition = partition;
    p->epoch = ++g->next_epoch;
    p->state = PS_ACTIVE;
    p->committed = -1;
    ks_ack_window_init(&p->win, free_rkmessage);
    if (g->part_cnt == g->part_cap) {
        g->part_cap = g->part_cap ? g->part_cap * 2 : 16;
        g->parts = realloc(g->parts, g->part_cap * sizeof(*g->parts));
        if (!g->parts)
            abort();
    }
    g->parts[g->part_cnt++] = p;
    ks_info(g->log_name, "assigned %s[%d] (epoch %u)", topic, partition, p->epoch);
    return p;
}

static void part_remove(ks_group_t *g, part_t *p)
{
    ks_owner_assert(&g->owner);
    for (size_t i = 0; i < g->part_cnt; i++) {
        if (g->parts[i] == p) {
            g->parts[i] = g->parts[--g->part_cnt];
            break;
        }
    }
    ks_info(g->log_name, "revoked %s[%d] (epoch %u), %zu records left in its window", p->topic,
            p->partition, p->epoch, ks_ack_window_count(&p->win));
    ks_ack_window_destroy(&p->win);
    free(p->topic);
    free(p);
}

static void part_set_paused(ks_group_t *g, part_t *p, bool pause)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, p->topic, p->partition);
    rd_kafka_resp_err_t err =
        pause ? rd_kafka_pause_partitions(g->rk, l) : rd_kafka_resume_partitions(g->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (err) {
        ks_warn(g->log_name, "%s %s[%d] failed: %s", pause ? "pause" : "resume", p->topic,
                p->partition, rd_kafka_err2str(err));
        return;
    }
    pstate_kind_t next = pause ? PS_PAUSED : PS_ACTIVE;
    ks_dbg(g->log_name, "%s[%d] %s -> %s (window %zu records, %lld bytes)", p->topic, p->partition,
           pstate_kind_str(p->state), pstate_kind_str(next), ks_ack_window_count(&p->win),
           (long long)ks_ack_window_bytes(&p->win));
    p->state = next;
}

/* Pauses at the window bound and resumes at half of it. */
static void part_check_bound(ks_group_t *g, part_t *p)
{
    size_t n = ks_ack_window_count(&p->win);
    int64_t b = ks_ack_window_bytes(&p->win);
    if (p->state == PS_ACTIVE &&
        (n >= (size_t)g->cfg->window_max_records || b >= g->cfg->window_max_bytes))
        part_set_paused(g, p, true);
    else if (p->state == PS_PAUSED && n <= (size_t)g->cfg->window_max_records / 2 &&
             b <= g->cfg->window_max_bytes / 2)
        part_set_paused(g, p, false);
}

/* ---- commits ---- */

/* Commits every partition whose commit point moved. sync waits for the broker.
 * @locality group loop */
static void commit_moved(ks_group_t *g, bool sync, part_t *only)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)g->part_cnt + 1);
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (only && p != only)
            continue;
        int64_t cp = ks_ack_window_commit_point(&p->win);
        if (cp < 0 || cp == p->committed)
            continue;
        rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = cp;
        p->committed = cp;
    }
    if (l->cnt > 0) {
        rd_kafka_resp_err_t err = rd_kafka_commit(g->rk, l, sync ? 0 : 1);
        if (err) {
            ks_warn(g->log_name, "commit failed: %s", rd_kafka_err2str(err));
            for (int i = 0; i < l->cnt; i++) {
                part_t *p = part_find(g, l->elems[i].topic, l->elems[i].partition);
                if (p)
                    p->committed = -1; /* retried on the next tick */
            }
        } else if (ks_log_enabled(KS_LOG_DEBUG)) {
            for (int i = 0; i < l->cnt; i++)
                ks_dbg(g->log_name, "commit %s[%d] @ %lld%s", l->elems[i].topic,
                       l->elems[i].partition, (long long)l->elems[i].offset, sync ? " (sync)" : "");
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* Async commit results. @locality group loop (served from the consumer queue) */
static void offset_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    ks_group_t *g = opaque;
    if (!err || err == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return;
    ks_warn(g->log_name, "async commit failed: %s; retrying", rd_kafka_err2str(err));
    for (int i = 0; offsets && i < offsets->cnt; i++) {
        part_t *p = part_find(g, offsets->elems[i].topic, offsets->elems[i].partition);
        if (p)
            p->committed = -1;
    }
}

/* ---- rebalance ---- */

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    ks_group_t *g = opaque;
    ks_owner_enter(&g->owner);
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    rd_kafka_error_t *error = NULL;
    rd_kafka_resp_err_t aerr = RD_KAFKA_RESP_ERR_NO_ERROR;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        for (int i = 0; i < parts->cnt; i++)
            part_add(g, parts->elems[i].topic, parts->elems[i].partition);
        if (coop)
            error = rd_kafka_incremental_assign(rk, parts);
        else
            aerr = rd_kafka_assign(rk, parts);
    } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        /* Commit the final contiguous point before the partition leaves us. */
        for (int i = 0; i < parts->cnt; i++) {
            part_t *p = part_find(g, parts->elems[i].topic, parts->elems[i].partition);
            if (p)
                commit_moved(g, true, p);
        }
        for (int i = 0; i < parts->cnt; i++) {
            part_t *p = part_find(g, parts->elems[i].topic, parts->elems[i].partition);
            if (p)
                part_remove(g, p);
        }
        if (coop)
            error = rd_kafka_incremental_unassign(rk, parts);
        else
            aerr = rd_kafka_assign(rk, NULL);
    } else {
        ks_err(g->log_name, "rebalance failed: %s", rd_kafka_err2str(err));
        aerr = rd_kafka_assign(rk, NULL);
    }
    if (error) {
        ks_err(g->log_name, "(un)assign failed: %s", rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
    } else if (aerr) {
        ks_err(g->log_name, "assign failed: %s", rd_kafka_err2str(aerr));
    }
    ks_owner_leave(&g->owner);
}

/* ---- delivery ---- */

static bool wants_topic(const cmd_t *c, const char *topic)
{
    for (size_t i = 0; i < c->u.fetch.topic_cnt; i++)
        if (strcmp(c->u.fetch.topics[i], topic) == 0)
            return true;
    return false;
}

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* Copies the leased entries into one batch the API thread can own. */
static ks_batch_t *build_batch(ks_group_t *g, part_t **eparts, ks_win_entry_t **ents, size_t n)
{
    size_t need = align8(n * sizeof(ks_record_t));
    for (size_t i = 0; i < n; i++) {
        rd_kafka_message_t *m = ents[i]->msg;
        need += align8(strlen(rd_kafka_topic_name(m->rkt)) + 1);
        need += align8(m->key_len + 1) + align8(m->len + 1) + align8(KS_ACK_ID_MAX);
        rd_kafka_headers_t *hdrs = NULL;
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs) {
            size_t hc = rd_kafka_header_cnt(hdrs);
            need += align8(hc * sizeof(ks_header_t));
            const char *name;
            const void *val;
            size_t vlen;
            for (size_t h = 0; rd_kafka_header_get_all(hdrs, h, &name, &val, &vlen) == 0; h++)
                need += align8(strlen(name) + 1) + align8(vlen + 1);
        }
    }
    ks_batch_t *b = calloc(1, sizeof(*b));
    char *arena = malloc(need ? need : 1);
    if (!b || !arena)
        abort();
    b->arena = arena;
    b->recs = (ks_record_t *)arena;
    b->cnt = n;
    char *pos = arena + align8(n * sizeof(ks_record_t));
#define PUT(src, len)                                                                              \
    ({                                                                                             \
        char *_d = pos;                                                                            \
        memcpy(_d, (src), (len));                                                                  \
        _d[(len)] = '\0';                                                                          \
        pos += align8((len) + 1);                                                                  \
        _d;                                                                                        \
    })
    for (size_t i = 0; i < n; i++) {
        rd_kafka_message_t *m = ents[i]->msg;
        ks_record_t *r = &b->recs[i];
        const char *tn = rd_kafka_topic_name(m->rkt);
        r->topic = PUT(tn, strlen(tn));
        r->partition = m->partition;
        r->offset = m->offset;
        rd_kafka_timestamp_type_t tstype;
        r->timestamp = rd_kafka_message_timestamp(m, &tstype);
        r->key = m->key ? PUT(m->key, m->key_len) : NULL;
        r->key_len = m->key ? m->key_len : 0;
        r->value = m->payload ? PUT(m->payload, m->len) : NULL;
        r->value_len = m->payload ? m->len : 0;
        r->attempt = ents[i]->attempts;
        ks_ack_id_t id = {.instance = g->instance,
                          .group_hash = g->group_hash,
                          .epoch = eparts[i]->epoch,
                          .partition = m->partition,
                          .offset = m->offset};
        snprintf(id.topic, sizeof(id.topic), "%s", tn);
        char *aid = pos;
        ks_ack_id_format(&id, aid, KS_ACK_ID_MAX);
        pos += align8(KS_ACK_ID_MAX);
        r->ack_id = aid;
        r->headers = NULL;
        r->header_cnt = 0;
        rd_kafka_headers_t *hdrs = NULL;
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs) {
            size_t hc = rd_kafka_header_cnt(hdrs);
            ks_header_t *hv = (ks_header_t *)pos;
            pos += align8(hc * sizeof(ks_header_t));
            const char *name;
            const void *val;
            size_t vlen;
            size_t h;
            for (h = 0; rd_kafka_header_get_all(hdrs, h, &name, &val, &vlen) == 0; h++) {
                hv[h].name = PUT(name, strlen(name));
                hv[h].value = val ? PUT(val, vlen) : NULL;
                hv[h].value_len = val ? vlen : 0;
            }
            r->headers = hv;
            r->header_cnt = h;
        }
    }
#undef PUT
    return b;
}

static ks_batch_t *batch_error(ks_status_t st, const char *msg)
{
    ks_batch_t *b = calloc(1, sizeof(*b));
    if (!b)
        abort();
    b->status = st;
    snprintf(b->message, sizeof(b->message), "%s", msg);
    return b;
}

/* Leases up to c's max records of its topics, round-robin across partitions.
 * Returns NULL when none is ready. @locality group loop */
static ks_batch_t *try_fill(ks_group_t *g, cmd_t *c)
{
    if (g->part_cnt == 0)
        return NULL;
    size_t max = (size_t)c->u.fetch.max, n = 0;
    part_t **eparts = NULL;
    ks_win_entry_t **ents = NULL;
    size_t start = g->rr++ % g->part_cnt;
    for (size_t k = 0; k < g->part_cnt && n < max; k++) {
        part_t *p = g->parts[(start + k) % g->part_cnt];
        if (!wants_topic(c, p->topic))
            continue;
        ks_win_entry_t *e;
        while (n < max && (e = ks_ack_window_lease_next(&p->win))) {
            if (!ents) {
                ents = malloc(max * sizeof(*ents));
                eparts = malloc(max * sizeof(*eparts));
                if (!ents || !eparts)
                    abort();
            }
            ents[n] = e;
            eparts[n] = p;
            n++;
        }
    }
    ks_batch_t *b = n ? build_batch(g, eparts, ents, n) : NULL;
    free(ents);
    free(eparts);
    return b;
}

static void wait_unlink(ks_group_t *g, cmd_t *prev, cmd_t *c)
{
    if (prev)
        prev->next_wait = c->next_wait;
    else
        g->wait_head = c->next_wait;
    if (g->wait_tail == c)
        g->wait_tail = prev;
}

static void finish_fetch(cmd_t *c, ks_batch_t *b)
{
    c->u.fetch.cb(b, c->u.fetch.opaque);
    cmd_free(c);
}

/* Serves parked fetches that records are ready for, and ends those past their wait.
 * @locality group loop */
static void serve_waiting(ks_group_t *g, int64_t now)
{
    cmd_t *prev = NULL, *c = g->wait_head;
    while (c) {
        cmd_t *next = c->next_wait;
        ks_batch_t *b = NULL;
        if (!g->delivering)
            b = batch_error(KS_E_UNAVAILABLE, "ksidecar is shutting down; fetch again elsewhere");
        else if (!(b = try_fill(g, c)) && now >= c->u.fetch.deadline_ms)
            b = calloc(1, sizeof(ks_batch_t)); /* the wait ran out: an empty batch */
        if (b) {
            wait_unlink(g, prev, c);
            finish_fetch(c, b);
        } else {
            prev = c;
        }
        c = next;
    }
}

/* ---- commands ---- */

static void subscribe_topics(ks_group_t *g, const cmd_t *c)
{
    bool changed = false;
    for (size_t i = 0; i < c->u.fetch.topic_cnt; i++) {
        bool have = false;
        for (size_t j = 0; j < g->topic_cnt; j++)
            if (strcmp(g->topics[j], c->u.fetch.topics[i]) == 0)
                have = true;
        if (have)
            continue;
        g->topics = realloc(g->topics, (g->topic_cnt + 1) * sizeof(char *));
        if (!g->topics)
            abort();
        g->topics[g->topic_cnt++] = xstrdup(c->u.fetch.topics[i]);
        changed = true;
    }
    if (!changed)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)g->topic_cnt);
    for (size_t j = 0; j < g->topic_cnt; j++)
        rd_kafka_topic_partition_list_add(l, g->topics[j], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(g->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (err)
        ks_err(g->log_name, "subscribe failed: %s", rd_kafka_err2str(err));
    else
        ks_info(g->log_name, "subscription is now %zu topic(s)", g->topic_cnt);
}

static ks_ack_result_t ack_one(ks_group_t *g, const char *text, part_t **touched)
{
    ks_ack_id_t id;
    *touched = NULL;
    if (ks_ack_id_parse(text, &id) < 0)
        return (ks_ack_result_t){KS_E_INVALID, "malformed ack id"};
    if (id.group_hash != g->group_hash)
        return (ks_ack_result_t){KS_E_INVALID, "ack id belongs to another group"};
    if (id.instance != g->instance)
        return (ks_ack_result_t){KS_E_STALE, "stale ack id: it was issued by an earlier ksidecar "
                                             "process; the record will be redelivered"};
    part_t *p = part_find(g, id.topic, id.partition);
    if (!p)
        return (ks_ack_result_t){KS_E_STALE, "stale ack id: its partition is no longer "
                                             "assigned to this process"};
    if (p->epoch != id.epoch)
        return (ks_ack_result_t){KS_E_STALE, "stale ack id: its partition was reassigned "
                                             "since delivery (epoch changed)"};
    *touched = p;
    switch (ks_ack_window_ack(&p->win, id.offset)) {
    case KS_ACK_OK:
        return (ks_ack_result_t){KS_OK, "acked"};
    case KS_ACK_DUPLICATE:
        return (ks_ack_result_t){KS_OK, "already acked"};
    case KS_ACK_NOT_DELIVERED:
    case KS_ACK_UNKNOWN_OFFSET:
        break;
    }
    return (ks_ack_result_t){KS_E_NOT_FOUND, "unknown ack id: no delivered record has it"};
}

static void handle_ack(ks_group_t *g, cmd_t *c)
{
    ks_ack_result_t *res = calloc(c->u.ack.n ? c->u.ack.n : 1, sizeof(*res));
    if (!res)
        abort();
    for (size_t i = 0; i < c->u.ack.n; i++) {
        part_t *p;
        res[i] = ack_one(g, c->u.ack.ids[i], &p);
        if (p)
            part_check_bound(g, p);
    }
    c->u.ack.cb(res, c->u.ack.n, c->u.ack.opaque);
    cmd_free(c);
}

static void handle_cmd(ks_group_t *g, cmd_t *c, int64_t now)
{
    switch (c->type) {
    case CMD_FETCH:
        if (!g->delivering) {
            finish_fetch(c, batch_error(KS_E_UNAVAILABLE, "ksidecar is shutting down"));
            return;
        }
        subscribe_topics(g, c);
        c->next_wait = NULL;
        if (g->wait_tail)
            g->wait_tail->next_wait = c;
        else
            g->wait_head = c;
        g->wait_tail = c;
        break;
    case CMD_ACK:
        handle_ack(g, c);
        break;
    case CMD_STOP_DELIVERING:
        g->delivering = false;
        cmd_free(c);
        break;
    case CMD_SHUTDOWN:
        g->delivering = false;
        g->stopping = true;
        cmd_free(c);
        break;
    }
}

/* ---- consuming ---- */

static void handle_message(ks_group_t *g, rd_kafka_message_t *m)
{
    if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            ks_warn(g->log_name, "consumer: %s%s%s", rd_kafka_message_errstr(m),
                    m->rkt ? " topic " : "", m->rkt ? rd_kafka_topic_name(m->rkt) : "");
        rd_kafka_message_destroy(m);
        return;
    }
    part_t *p = part_find(g, rd_kafka_topic_name(m->rkt), m->partition);
    if (!p || ks_ack_window_push(&p->win, m->offset, (uint32_t)(m->len + m->key_len), m) < 0) {
        /* Not ours any more, or fetched again after a pause: already held. */
        rd_kafka_message_destroy(m);
        return;
    }
    part_check_bound(g, p);
}

static void drain_consumer(ks_group_t *g)
{
    char buf[256];
    while (read(g->rk_pipe[0], buf, sizeof(buf)) > 0)
        ;
    rd_kafka_message_t *m;
    while ((m = rd_kafka_consumer_poll(g->rk, 0)))
        handle_message(g, m);
}

static void arm_timer(ks_group_t *g, int64_t now)
{
    int64_t next = g->next_commit_ms;
    for (cmd_t *c = g->wait_head; c; c = c->next_wait)
        if (c->u.fetch.deadline_ms < next)
            next = c->u.fetch.deadline_ms;
    int64_t d = next - now;
    if (d < 1)
        d = 1;
    struct itimerspec its = {.it_value = {.tv_sec = d / 1000, .tv_nsec = (d % 1000) * 1000000}};
    timerfd_settime(g->tfd, 0, &its, NULL);
}

static void close_consumer(ks_group_t *g)
{
    /* Final commit, then leave: consumer_close runs the revoke callback, which
     * commits each partition's final point synchronously and drops its window. */
    commit_moved(g, true, NULL);
    rd_kafka_resp_err_t err = rd_kafka_consumer_close(g->rk);
    if (err)
        ks_warn(g->log_name, "leaving the group: %s", rd_kafka_err2str(err));
    while (g->part_cnt)
        part_remove(g, g->parts[0]);
}

static void *loop_main(void *arg)
{
    ks_group_t *g = arg;
    ks_owner_enter(&g->owner);
    ks_info(g->log_name, "group loop started");
    g->next_commit_ms = ks_now_ms() + g->cfg->commit_interval_ms;

    while (!g->stopping) {
        arm_timer(g, ks_now_ms());
        ks_owner_leave(&g->owner);
        struct epoll_event evs[4];
        int n = epoll_wait(g->epfd, evs, 4, -1);
        ks_owner_enter(&g->owner);
        if (n < 0 && errno != EINTR) {
            ks_err(g->log_name, "epoll_wait: %s", strerror(errno));
            break;
        }
        uint64_t ticks;
        ssize_t r = read(g->tfd, &ticks, sizeof(ticks));
        (void)r;

        drain_consumer(g);
        int64_t now = ks_now_ms();
        for (ks_inbox_node_t *nd = ks_inbox_take_all(&g->inbox), *next; nd; nd = next) {
            next = nd->next;
            handle_cmd(g, (cmd_t *)nd, now);
        }
        serve_waiting(g, now);
        if (now >= g->next_commit_ms) {
            commit_moved(g, false, NULL);
            g->next_commit_ms = now + g->cfg->commit_interval_ms;
        }
    }

    /* Shutdown: refuse new commands, answer what is still queued, commit, leave. */
    for (ks_inbox_node_t *nd = ks_inbox_close(&g->inbox), *next; nd; nd = next) {
        next = nd->next;
        handle_cmd(g, (cmd_t *)nd, ks_now_ms());
    }
    serve_waiting(g, ks_now_ms());
    close_consumer(g);
    ks_info(g->log_name, "group loop stopped: committed and left the group");
    ks_owner_leave(&g->owner);
    atomic_store(&g->exited, true);
    return NULL;
}

/* ---- setup ---- */

static void rk_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    ks_log_level_t l = level <= 3   ? KS_LOG_ERROR
                       : level <= 5 ? KS_LOG_WARN
                       : level <= 6 ? KS_LOG_INFO
                                    : KS_LOG_DEBUG;
    ks_log(l, "rdkafka", "%s: %s: %s", rd_kafka_name(rk), fac, buf);
}

static void rk_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    ks_group_t *g = opaque;
    ks_warn(g->log_name, "kafka: %s: %s", rd_kafka_err2name(err), reason);
}

static int conf_set(rd_kafka_conf_t *conf, const char *k, const char *v, char *err, size_t errsize)
{
    char e[256];
    if (rd_kafka_conf_set(conf, k, v, e, sizeof(e)) != RD_KAFKA_CONF_OK) {
        snprintf(err, errsize, "config key 'kafka.%s': %s", k, e);
        return -1;
    }
    return 0;
}

int ks_group_check_kafka_conf(const ks_config_t *cfg, char *err, size_t errsize)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc = 0;
    for (size_t i = 0; i < cfg->kafka_cnt && rc == 0; i++)
        rc = conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value, err, errsize);
    rd_kafka_conf_destroy(conf);
    return rc;
}

ks_group_t *ks_group_start(const char *name, const ks_config_t *cfg, uint32_t instance, char *err,
                           size_t errsize)
{
    ks_group_t *g = calloc(1, sizeof(*g));
    if (!g)
        abort();
    g->name = xstrdup(name);
    snprintf(g->log_name, sizeof(g->log_name), "group:%s", name);
    g->group_hash = ks_ack_id_group_hash(name);
    g->instance = instance;
    g->cfg = cfg;
    g->delivering = true;
    g->epfd = g->tfd = g->rk_pipe[0] = g->rk_pipe[1] = -1;
    atomic_init(&g->exited, false);
    atomic_init(&g->owner.tid, 0);

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* Defaults a proxy needs; the user's kafka.* may override the soft ones. */
    if (conf_set(conf, "auto.offset.reset", "earliest", err, errsize) < 0 ||
        conf_set(conf, "partition.assignment.strategy", "cooperative-sticky", err, errsize) < 0 ||
        conf_set(conf, "queued.max.messages.kbytes", "16384", err, errsize) < 0)
        goto fail_conf;
    for (size_t i = 0; i < cfg->kafka_cnt; i++)
        if (conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value, err, errsize) < 0)
            goto fail_conf;
    /* What ksidecar's guarantees rest on: not overridable. */
    if (conf_set(conf, "group.id", name, err, errsize) < 0 ||
        conf_set(conf, "enable.auto.commit", "false", err, errsize) < 0 ||
        conf_set(conf, "enable.auto.offset.store", "false", err, errsize) < 0 ||
        conf_set(conf, "enable.partition.eof", "false", err, errsize) < 0)
        goto fail_conf;
    rd_kafka_conf_set_opaque(conf, g);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, offset_commit_cb);
    rd_kafka_conf_set_log_cb(conf, rk_log_cb);
    rd_kafka_conf_set_error_cb(conf, rk_error_cb);

    char e[512];
    g->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof(e));
    if (!g->rk) {
        snprintf(err, errsize, "creating the consumer for group %s: %s", name, e);
        goto fail_conf;
    }
    rd_kafka_poll_set_consumer(g->rk);
    g->cq = rd_kafka_queue_get_consumer(g->rk);

    if (ks_inbox_init(&g->inbox) < 0 || pipe2(g->rk_pipe, O_NONBLOCK | O_CLOEXEC) < 0 ||
        (g->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
        (g->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        snprintf(err, errsize, "group %s: making its fds: %s", name, strerror(errno));
        goto fail;
    }
    rd_kafka_queue_io_event_enable(g->cq, g->rk_pipe[1], "1", 1);
    int fds[3] = {g->rk_pipe[0], ks_inbox_fd(&g->inbox), g->tfd};
    for (int i = 0; i < 3; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
            snprintf(err, errsize, "group %s: epoll_ctl: %s", name, strerror(errno));
            goto fail;
        }
    }
    if (pthread_create(&g->thread, NULL, loop_main, g) != 0) {
        snprintf(err, errsize, "group %s: cannot start its thread", name);
        goto fail;
    }
    return g;

fail_conf:
    if (!g->rk)
        rd_kafka_conf_destroy(conf);
fail:
    atomic_store(&g->exited, true);
    g->thread = 0;
    ks_group_destroy(g);
    return NULL;
}

static ks_status_t post(ks_group_t *g, cmd_t *c)
{
    if (ks_inbox_post(&g->inbox, &c->node) < 0) {
        cmd_free(c);
        return KS_E_UNAVAILABLE;
    }
    return KS_OK;
}

ks_status_t ks_group_fetch(ks_group_t *g, const char *const *topics, size_t topic_cnt, int max,
                           int wait_ms, ks_fetch_cb *cb, void *opaque)
{
    cmd_t *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->type = CMD_FETCH;
    c->u.fetch.topics = dup_strv(topics, topic_cnt);
    c->u.fetch.topic_cnt = topic_cnt;
    c->u.fetch.max = max;
    c->u.fetch.deadline_ms = ks_now_ms() + wait_ms;
    c->u.fetch.cb = cb;
    c->u.fetch.opaque = opaque;
    return post(g, c);
}

ks_status_t ks_group_ack(ks_group_t *g, const char *const *ids, size_t n, ks_ack_cb *cb,
                         void *opaque)
{
    cmd_t *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->type = CMD_ACK;
    c->u.ack.ids = dup_strv(ids, n);
    c->u.ack.n = n;
    c->u.ack.cb = cb;
    c->u.ack.opaque = opaque;
    return post(g, c);
}

static void post_simple(ks_group_t *g, cmd_type_t t)
{
    cmd_t *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->type = t;
    post(g, c);
}

void ks_group_stop_delivering(ks_group_t *g)
{
    post_simple(g, CMD_STOP_DELIVERING);
}

void ks_group_request_shutdown(ks_group_t *g)
{
    post_simple(g, CMD_SHUTDOWN);
}

int ks_group_join(ks_group_t *g, int64_t deadline_ms)
{
    if (!g->thread)
        return 0;
    int64_t left = deadline_ms - ks_now_ms();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (left < 0)
        left = 0;
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    if (pthread_timedjoin_np(g->thread, NULL, &ts) != 0)
        return -1;
    g->thread = 0;
    return 0;
}

void ks_group_destroy(ks_group_t *g)
{
    if (g->rk) {
        if (g->cq) {
            rd_kafka_queue_io_event_enable(g->cq, -1, NULL, 0);
            rd_kafka_queue_destroy(g->cq);
        }
        rd_kafka_destroy(g->rk);
    }
    if (g->epfd >= 0)
        close(g->epfd);
    if (g->tfd >= 0)
        close(g->tfd);
    if (g->rk_pipe[0] >= 0) {
        close(g->rk_pipe[0]);
        close(g->rk_pipe[1]);
    }
    if (g->inbox.efd > 0)
        ks_inbox_destroy(&g->inbox);
    free_strv(g->topics, g->topic_cnt);
    free(g->parts);
    free(g->name);
    free(g);
}
