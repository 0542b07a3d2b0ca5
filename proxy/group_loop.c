/* group_loop.c: one consumer group's loop: consumer, windows, leases, delivery, commits. */
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
#include "commit_meta.h"
#include "commit_track.h"
#include "inbox.h"
#include "key_sched.h"
#include "lease.h"
#include "log.h"
#include "mem_budget.h"
#include "owner.h"
#include "pstate.h"
#include "rejoin_guard.h"
#include "util.h"

#define DEFAULT_SUB  "default"
#define DLQ_RETRY_MS 1000
/* A subscriber with hold_stalled whose oldest unreported batch waited this long for its
 * transport is stalled: its leases wait instead of expiring, rechecked this often. */
#define STALL_GRACE_MS   1000
#define STALL_RECHECK_MS 1000

typedef enum {
    CMD_FETCH,
    CMD_SETTLE,
    CMD_STATUS,
    CMD_SEEK,
    CMD_RELEASE,
    CMD_RELEASE_UNREAD, /* u.release_sub */
    CMD_DELIVERED,
    CMD_STOP_DELIVERING,
    CMD_SHUTDOWN
} cmd_type_t;

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
            int deadline_ms;
            char sub[KS_SUBSCRIBER_KEY_MAX];
            int64_t credit_records, credit_bytes;
            int64_t max_bytes; /* 0: no bound */
            bool notify;
            bool confirm, hold_stalled;
            int64_t wait_until_ms;
            ks_fetch_cb *cb;
            void *opaque;
        } fetch;
        struct {
            ks_settle_op_t op;
            int64_t ms;
            char *reason;
            char **ids;
            ks_ack_ref_t *refs; /* ids parsed, one each */
            size_t n;
            ks_ack_cb *cb;
            void *opaque;
        } settle;
        struct {
            ks_group_status_cb *cb;
            void *opaque;
        } status;
        struct {
            char topic[256];
            int32_t partition;
            ks_seek_kind_t kind;
            int64_t value;
            ks_seek_cb *cb;
            void *opaque;
        } seek;
        char release_sub[KS_SUBSCRIBER_KEY_MAX];
        struct {
            uint64_t token;
            bool taken;
        } delivered;
        int64_t ack_deadline_ms; /* CMD_SHUTDOWN */
    } u;
} cmd_t;

/* One assigned partition. @locality group loop */
typedef struct part {
    char *topic;
    int32_t partition;
    uint32_t epoch; /* this assignment's epoch; ack ids carry it */
    ks_pstate_t state;
    ks_ack_window_t win;
    ks_key_sched_t sched;
    size_t leased;            /* entries in LEASED state */
    int64_t committed;        /* the last offset sent in a commit, -1 if none */
    ks_commit_track_t ct;     /* commits confirmed by the broker, and the acks they cover */
    bool meta_dirty;          /* acks or attempts above the commit point changed */
    bool held_back;           /* metadata overflowed: no new deliveries from meta_cut on */
    int64_t meta_cut;         /* held_back: the lowest offset the metadata had to drop */
    int64_t held_since_ms;    /* held_back: since when */
    int64_t held_warned_ms;   /* held_back: when it was last warned about */
    int64_t held_commit_ms;   /* held_back: when commit_held last committed it */
    int64_t meta_truncations; /* commits whose metadata had to drop acks */
    /* What the commit metadata said at assignment, for offsets not fetched yet. */
    ks_commit_meta_t restore;
    size_t restore_ack_i, restore_att_i;
    /* The partition's own librdkafka queue (not forwarded to the consumer queue), so
     * librdkafka's queued.* limits apply to this partition alone. Records wait there
     * while the window is full; nothing fetched is thrown away. */
    rd_kafka_queue_t *q;
    bool q_was_full;     /* seen near librdkafka's queued.* limits: its fetcher may sleep */
    double q_avg_bytes;  /* average key+value size of the last batch taken from q */
    int64_t mem_tallied; /* what this window last added to the process's budget tally */
    size_t q_len;        /* records in q, as of the last intake pass (less what it took) */

    int64_t q_tallied;     /* what part_queue_mem last added to the process's queued tally */
    bool kpaused;          /* paused in librdkafka by part_kafka_pause, its queue emptied */
    int64_t kpaused_mem;   /* kpaused: part_mem when it was paused */
    int64_t budget_pauses; /* times part_kafka_pause paused it */
} part_t;

/* A subscriber: a pull session (HTTP long-poll, unary fetch) named by the client. */
typedef struct sub {
    uint32_t id;
    char name[KS_SUBSCRIBER_KEY_MAX];
    int64_t credit_records, credit_bytes; /* the most it may hold unacked */
    int64_t out_records, out_bytes;
    int64_t last_seen_ms;
    uint64_t seen_assign_ver; /* the assignment version its last batch showed */
    bool hold_stalled;        /* opts.hold_stalled: its leases wait while it is stalled */
    bool was_stalled;         /* a batch it never took had waited STALL_GRACE_MS: still stalled
                               * when it is released, though that batch's report came first */
    size_t turn;              /* serve_waiting: index of its fetch being filled now */
} sub_t;

/* A confirmed batch (opts.confirm) on its way to a client: its records are LEASED but
 * unsent (KS_WIN_F_UNSENT: no deadline, so they cannot expire) until the edge says the
 * transport took the batch (CMD_DELIVERED). The edge names it by token; one command per
 * batch, not per record. p is cleared when the partition goes; epoch tells a seek.
 * @locality group loop */
typedef struct dlv_rec {
    part_t *p;
    int64_t offset;
    uint32_t epoch;
    uint16_t attempts;
} dlv_rec_t;

typedef struct dlv {
    struct dlv *next;
    uint64_t token;
    uint32_t sub_id;
    int deadline_ms;
    int64_t at_ms; /* when it was handed to the edge */
    size_t n;
    dlv_rec_t recs[];
} dlv_t;

/* What a dead-letter produce remembers until its delivery report. */
typedef struct dlq_ref {
    char topic[256];
    int32_t partition;
    uint32_t epoch;
    int64_t offset;
} dlq_ref_t;

struct ks_group {
    char *name;
    char log_name[300]; /* "group:<name>" */
    uint32_t group_hash;
    uint32_t instance;
    const ks_config_t *cfg;
    const ks_group_conf_t *gconf;
    bool is_static;
    ks_group_idle_fn *idle_fn;
    void *idle_opaque;
    pthread_t thread;
    bool joined;
    atomic_bool exited;
    /* librdkafka's join state is wait-join, wait-metadata or wait-sync: a JoinGroup or
     * SyncGroup is in flight (commit_moved). @locality written by librdkafka's log
     * callback on its own thread, read on the group loop */
    atomic_bool cgrp_joining;

    ks_inbox_t inbox; /* the one thread-safe door */

    /* Everything below is group loop state. @locality group loop (checked by owner) */
    ks_owner_t owner;
    rd_kafka_t *rk;
    rd_kafka_queue_t *cq; /* the consumer queue */
    rd_kafka_t *dlq_rk;   /* dead-letter producer, made on first use */
    int epfd, tfd, rk_pipe[2], dlq_pipe[2];
    int64_t q_max_msgs, q_max_bytes;   /* librdkafka's queued.min.messages / .max.messages.kbytes */
    int64_t q_kbytes, fetch_max_bytes; /* its queued.max.messages.kbytes, fetch.message.max.bytes */
    part_t **parts;
    size_t part_cnt, part_cap, rr;
    sub_t **subs;
    size_t sub_cnt;
    uint32_t next_sub_id;
    ks_leases_t leases;
    char **topics; /* the subscription */
    size_t topic_cnt;
    cmd_t *wait_head, *wait_tail;
    cmd_t *deferred;            /* fetches that arrived inside a rebalance callback */
    dlv_t *dlv_head, *dlv_tail; /* confirmed batches not reported yet, oldest first */
    uint64_t next_token;
    uint32_t next_epoch;
    uint64_t assign_ver; /* bumped on every assignment change */
    bool delivering;
    bool draining; /* shutdown asked: waiting for acks until drain_until_ms */
    int64_t drain_until_ms;
    bool stopping;
    bool in_rebalance;
    bool ever_assigned;   /* an assignment callback has run: see ks_group_destroy */
    ks_rejoin_guard_t rj; /* no commits during a cooperative rejoin (librdkafka#4059) */
    int64_t max_poll_ms;  /* max.poll.interval.ms: the broker's bound on a rebalance */
    int64_t st_acks_lost; /* accepted acks no confirmed commit covered when a partition moved */
    /* The consumer's "all brokers down" error, "" after an assignment. A fetch whose wait
     * runs out before the group ever had an assignment answers UNAVAILABLE with it. */
    char down[256];
    bool mem_pressed; /* ks_mem_pressed, as of the last intake pass */
    int64_t next_commit_ms;
    int64_t timer_due_ms; /* what the timerfd is armed for; 0 when it fired or is unset */
    int64_t last_activity_ms;
    int64_t st_delivered, st_redelivered, st_expired, st_nacked, st_acked, st_dead_lettered;
};

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void cmd_free(cmd_t *c)
{
    if (c->type == CMD_FETCH)
        free(c->u.fetch.topics); /* one block: ks_strv_pack */
    else if (c->type == CMD_SETTLE) {
        free(c->u.settle.ids); /* one block: ks_strv_pack */
        free(c->u.settle.refs);
        free(c->u.settle.reason);
    }
    free(c);
}

const char *ks_group_name(const ks_group_t *g)
{
    return g->name;
}

bool ks_group_exited(const ks_group_t *g)
{
    return atomic_load(&g->exited);
}

static uint64_t fnv64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* ---- subscribers ---- */

static sub_t *sub_get(ks_group_t *g, const char *name, int64_t now)
{
    for (size_t i = 0; i < g->sub_cnt; i++)
        if (!strcmp(g->subs[i]->name, name)) {
            g->subs[i]->last_seen_ms = now;
            return g->subs[i];
        }
    sub_t *s = calloc(1, sizeof(*s));
    g->subs = realloc(g->subs, (g->sub_cnt + 1) * sizeof(*g->subs));
    if (!s || !g->subs)
        abort();
    s->id = ++g->next_sub_id;
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->credit_records = g->cfg->sub_max_records;
    s->credit_bytes = g->cfg->sub_max_bytes;
    s->last_seen_ms = now;
    g->subs[g->sub_cnt++] = s;
    ks_dbg(g->log_name, "subscriber %s joined", s->name);
    return s;
}

static sub_t *sub_by_id(ks_group_t *g, uint32_t id)
{
    for (size_t i = 0; i < g->sub_cnt; i++)
        if (g->subs[i]->id == id)
            return g->subs[i];
    return NULL;
}

/* Forgets subscribers that hold nothing and have not fetched for a while. */
static void subs_reap(ks_group_t *g, int64_t now)
{
    int64_t idle = g->cfg->idle_close_ms > 0 ? g->cfg->idle_close_ms : 60000;
    for (size_t i = 0; i < g->sub_cnt;) {
        sub_t *s = g->subs[i];
        bool parked = false;
        for (cmd_t *c = g->wait_head; c; c = c->next_wait)
            if (!strcmp(c->u.fetch.sub, s->name))
                parked = true;
        if (!parked && s->out_records == 0 && now - s->last_seen_ms > idle) {
            g->subs[i] = g->subs[--g->sub_cnt];
            free(s);
        } else {
            i++;
        }
    }
}

/* e leaves LEASED: its subscriber gets the credit back. */
static void unlease(ks_group_t *g, part_t *p, ks_win_entry_t *e)
{
    sub_t *s = sub_by_id(g, e->sub_id);
    if (s) {
        s->out_records--;
        s->out_bytes -= e->bytes;
    }
    e->flags &= (uint8_t)~KS_WIN_F_UNSENT;
    p->leased--;
}

/* e, LEASED but never taken by the transport, goes back: READY, its attempt not
 * counted. */
static void unsent_back(ks_group_t *g, part_t *p, ks_win_entry_t *e, int64_t now)
{
    unlease(g, p, e);
    if (e->attempts > 0)
        e->attempts--;
    ks_lease_release(&g->leases, &p->win, p, e, now, 0);
    ks_key_sched_requeue(&p->sched, &p->win, e);
}

static void dlv_unlink(ks_group_t *g, dlv_t *prev, dlv_t *d)
{
    if (prev)
        prev->next = d->next;
    else
        g->dlv_head = d->next;
    if (g->dlv_tail == d)
        g->dlv_tail = prev;
}

/* Forgets the confirmed batches of subscriber sub_id (0: every one) or only the records
 * of partition p in them (p != NULL: it is going). */
static void dlv_forget(ks_group_t *g, uint32_t sub_id, const part_t *p)
{
    dlv_t *prev = NULL;
    for (dlv_t *d = g->dlv_head, *next; d; d = next) {
        next = d->next;
        if (p) {
            for (size_t i = 0; i < d->n; i++)
                if (d->recs[i].p == p)
                    d->recs[i].p = NULL;
            prev = d;
            continue;
        }
        if (sub_id && d->sub_id != sub_id) {
            prev = d;
            continue;
        }
        dlv_unlink(g, prev, d);
        free(d);
    }
}

/* Ends every lease of p (it is being dropped or moved): the credits go back.
 * Returns how many there were. */
static size_t drop_leases(ks_group_t *g, part_t *p)
{
    size_t n = p->leased;
    for (size_t i = 0; i < ks_ack_window_count(&p->win) && p->leased; i++) {
        ks_win_entry_t *e = ks_ack_window_at(&p->win, i);
        if (e->state == KS_REC_LEASED)
            unlease(g, p, e);
    }
    return n;
}

/* ---- partitions ---- */

/* A record as the window holds it: copied out of librdkafka when it arrives, in one
 * block. Holding the rd_kafka_message_t instead kept its whole fetch response buffer
 * (shared by every partition in the response, up to fetch.max.bytes) alive until the last
 * of its records was acked, so a window of small records could pin far more memory than
 * window.max_bytes says, and it made larger windows unaffordable. */
typedef struct rec {
    int64_t timestamp; /* -1 if unknown */
    uint32_t key_len, value_len;
    uint32_t header_cnt;
    uint8_t has_key, has_value; /* 0 for a null key or value */
    /* header_cnt ks_header_t, then key '\0', value '\0', then header names and values */
    _Alignas(8) char data[]; /* aligned: the ks_header_t array starts here */
} rec_t;
/* What mem_budget.h charges each record for its copy's header. */
_Static_assert(sizeof(rec_t) == KS_MEM_REC_HEADER, "rec_t size");

/* A record's parts, all inside its one block (borrowed; writable for librdkafka's
 * producev, which copies them). */
static const ks_header_t *rec_headers(const rec_t *r)
{
    return (const ks_header_t *)(const void *)r->data;
}
static char *rec_key(const rec_t *r)
{
    return r->has_key ? (char *)(uintptr_t)(r->data + r->header_cnt * sizeof(ks_header_t)) : NULL;
}
static char *rec_value(const rec_t *r)
{
    return r->has_value
               ? (char *)(uintptr_t)(r->data + r->header_cnt * sizeof(ks_header_t) + r->key_len + 1)
               : NULL;
}

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static rec_t *rec_copy(rd_kafka_message_t *m)
{
    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
        hdrs = NULL;
    size_t hc = hdrs ? rd_kafka_header_cnt(hdrs) : 0;
    size_t need = align8(sizeof(rec_t)) + hc * sizeof(ks_header_t) + m->key_len + m->len + 2;
    const char *name;
    const void *val;
    size_t vlen;
    for (size_t h = 0; h < hc && rd_kafka_header_get_all(hdrs, h, &name, &val, &vlen) == 0; h++)
        need += strlen(name) + 1 + vlen + 1;
    rec_t *r = malloc(need);
    if (!r)
        abort();
    rd_kafka_timestamp_type_t tstype;
    r->timestamp = rd_kafka_message_timestamp(m, &tstype);
    ks_header_t *rh = (ks_header_t *)(void *)r->data;
    r->header_cnt = (uint32_t)hc; /* rec_key and rec_value skip hc headers */
    char *pos = r->data + hc * sizeof(ks_header_t);
    r->has_key = m->key != NULL;
    r->key_len = m->key ? (uint32_t)m->key_len : 0;
    if (m->key)
        memcpy(pos, m->key, m->key_len);
    pos += r->key_len;
    *pos++ = '\0';
    r->has_value = m->payload != NULL;
    r->value_len = m->payload ? (uint32_t)m->len : 0;
    if (m->payload)
        memcpy(pos, m->payload, m->len);
    pos += r->value_len;
    *pos++ = '\0';
    size_t h = 0;
    for (; h < hc && rd_kafka_header_get_all(hdrs, h, &name, &val, &vlen) == 0; h++) {
        size_t nl = strlen(name) + 1;
        memcpy(pos, name, nl);
        rh[h].name = pos;
        pos += nl;
        rh[h].value = val ? pos : NULL;
        rh[h].value_len = val ? vlen : 0;
        if (val)
            memcpy(pos, val, vlen);
        pos += vlen;
        *pos++ = '\0';
    }
    for (; h < hc; h++) /* a header librdkafka would not give back: empty */
        rh[h] = (ks_header_t){.name = "", .value = NULL, .value_len = 0};
    return r;
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

static void part_move(ks_group_t *g, part_t *p, ks_pstate_t to)
{
    ks_pstate_t from = p->state;
    if (!ks_pstate_move(&p->state, to))
        ks_warn(g->log_name, "%s[%d]: ignored illegal transition %s -> %s", p->topic, p->partition,
                ks_pstate_str(from), ks_pstate_str(to));
    else
        ks_dbg(g->log_name, "%s[%d]: %s -> %s", p->topic, p->partition, ks_pstate_str(from),
               ks_pstate_str(to));
}

static part_t *part_add(ks_group_t *g, const char *topic, int32_t partition)
{
    ks_owner_assert(&g->owner);
    part_t *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    p->topic = ks_xstrdup(topic);
    p->partition = partition;
    p->epoch = ++g->next_epoch;
    p->state = KS_PS_INITIALIZING;
    p->committed = -1;
    ks_commit_track_init(&p->ct, -1);
    ks_ack_window_init(&p->win, free); /* a rec_t is one block */
    ks_key_sched_init(&p->sched, (ks_ordering_t)g->gconf->ordering);
    if (g->part_cnt == g->part_cap) {
        g->part_cap = g->part_cap ? g->part_cap * 2 : 16;
        g->parts = realloc(g->parts, g->part_cap * sizeof(*g->parts));
        if (!g->parts)
            abort();
    }
    g->parts[g->part_cnt++] = p;
    ks_mem_parts_add(1); /* every partition's window share shrinks */
    /* Take the partition's records from its own queue. Cleared before assign, the
     * forward stays cleared (librdkafka keeps an application's choice). */
    p->q = rd_kafka_queue_get_partition(g->rk, topic, partition);
    if (p->q) {
        rd_kafka_queue_forward(p->q, NULL);
        rd_kafka_queue_io_event_enable(p->q, g->rk_pipe[1], "1", 1);
    }
    return p;
}

static void part_kafka_pause(ks_group_t *g, part_t *p, bool pause);
static void handle_message(ks_group_t *g, part_t *p, rd_kafka_message_t *m);
#define INTAKE_BATCH 256

static void part_remove(ks_group_t *g, part_t *p)
{
    ks_owner_assert(&g->owner);
    for (size_t i = 0; i < g->part_cnt; i++) {
        if (g->parts[i] == p) {
            g->parts[i] = g->parts[--g->part_cnt];
            break;
        }
    }
    /* Leases of a revoked partition are gone: give their subscribers the credits back. */
    size_t leased = drop_leases(g, p);
    if (p->state != KS_PS_REVOKING)
        part_move(g, p, KS_PS_REVOKING);
    part_move(g, p, KS_PS_GONE);
    ks_info(g->log_name, "revoked %s[%d] (epoch %u): %zu records left in its window, %zu leased",
            p->topic, p->partition, p->epoch, ks_ack_window_count(&p->win), leased);
    ks_leases_forget(&g->leases, p);
    if (p->kpaused) /* librdkafka keeps an application's pause for a later assignment */
        part_kafka_pause(g, p, false);
    ks_mem_parts_add(-1);
    ks_mem_used_add(-p->mem_tallied);
    dlv_forget(g, 0, p);
    ks_mem_queued_add(-p->q_tallied);
    ks_ack_window_destroy(&p->win);
    ks_key_sched_destroy(&p->sched);
    ks_commit_meta_free(&p->restore);
    if (p->q) {
        rd_kafka_queue_io_event_enable(p->q, -1, NULL, 0);
        rd_kafka_queue_destroy(p->q);
    }
    free(p->topic);
    free(p);
}

/* What p's window costs against the memory budget: the key and value bytes of records
 * not yet acked, plus ks_mem_record_overhead() for every record held. */
static int64_t part_mem(const part_t *p)
{
    return ks_ack_window_bytes(&p->win) +
           (int64_t)ks_ack_window_count(&p->win) * ks_mem_record_overhead();
}

/* p's window share of the process's memory budget now: it shrinks as partitions are
 * assigned to any group of the process, and grows as they go. */
static int64_t part_share(const ks_group_t *g)
{
    return ks_mem_window_share(g->cfg->memory_max_bytes, ks_mem_parts());
}

/* What p's librdkafka queue holds, estimated at the last batch's average size. Its limits
 * cannot keep it small: a fetch returns at least one whole producer batch (KIP-74), up to
 * the producer's batch.size (librdkafka's default 1 MB), whatever fetch.message.max.bytes. */
static int64_t part_queue_mem(const part_t *p)
{
    return (int64_t)((double)p->q_len * (p->q_avg_bytes + KS_MEM_KAFKA_RECORD_OVERHEAD));
}

/* How many more bytes p's window may take now (<= 0: none). The share covers the window
 * and the records librdkafka holds for the partition, but a window always gets its floor:
 * taking records from the queue is what lets it shrink, and the only way to progress. */
static int64_t part_room_bytes(const ks_group_t *g, const part_t *p)
{
    int64_t share = part_share(g), mem = part_mem(p);
    int64_t by_share = share - mem - part_queue_mem(p);
    int64_t by_floor = (share < KS_MEM_WINDOW_FLOOR ? share : KS_MEM_WINDOW_FLOOR) - mem;
    return by_share > by_floor ? by_share : by_floor;
}

static bool part_has_room(const ks_group_t *g, const part_t *p)
{
    return ks_ack_window_count(&p->win) < (size_t)g->cfg->window_max_records &&
           ks_ack_window_bytes(&p->win) < g->cfg->window_max_bytes && part_room_bytes(g, p) > 0;
}

/* Brings the process's tallies up to date with p's window and queue. */
static void part_tally(part_t *p)
{
    int64_t m = part_mem(p), q = part_queue_mem(p);
    if (m != p->mem_tallied) {
        ks_mem_used_add(m - p->mem_tallied);
        p->mem_tallied = m;
    }
    if (q != p->q_tallied) {
        ks_mem_queued_add(q - p->q_tallied);
        p->q_tallied = q;
    }
}

/* Pauses (pause true) or resumes p in librdkafka. @locality group loop, between batch
 * calls (librdkafka 2.0.x's batch consume mishandles a pause or resume made meanwhile). */
static void part_kafka_pause(ks_group_t *g, part_t *p, bool pause)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, p->topic, p->partition);
    rd_kafka_resp_err_t err =
        pause ? rd_kafka_pause_partitions(g->rk, l) : rd_kafka_resume_partitions(g->rk, l);
    if (!err)
        err = l->elems[0].err;
    rd_kafka_topic_partition_list_destroy(l);
    if (err) {
        ks_warn(g->log_name, "%s[%d]: %s in librdkafka: %s", p->topic, p->partition,
                pause ? "pausing" : "resuming", rd_kafka_err2str(err));
        return;
    }
    p->kpaused = pause;
    if (pause) {
        p->budget_pauses++;
        p->kpaused_mem = part_mem(p);
        /* The pause's version barrier makes what the queue holds outdated, but librdkafka
         * 2.0.2 left it there (6,000+ records a partition, seen in its status): a batch
         * consume drops outdated records without returning them, which gives the memory
         * back. The resume fetches again from the last record taken (librdkafka's app
         * position), so no fetcher is left to wake with a seek. A record it did return
         * (none expected) is taken as usual. */
        rd_kafka_message_t *ms[INTAKE_BATCH];
        ssize_t n;
        while ((n = rd_kafka_consume_batch_queue(p->q, 0, ms, INTAKE_BATCH)) > 0)
            for (ssize_t k = 0; k < n; k++)
                handle_message(g, p, ms[k]);
        p->q_len = 0;
        p->q_was_full = false;
    }
}

/* PAUSED means the window is at its bound: ksidecar takes no more of the partition's
 * records from librdkafka, whose queue then stops fetching at its queued.* limits. Its
 * limits cannot stop one more fetch (up to fetch.message.max.bytes, or a whole producer
 * batch), at ~5x the payload in memory, which stays there while the window is full. So
 * while windows and queues hold a quarter of the budget or more (ks_mem_pressed), a
 * partition at its share (window and queue together, part_room_bytes) whose queue holds
 * records is paused in librdkafka, and its queue emptied; it resumes once its window
 * drained to half of what it held then (or it is no longer deliverable), and librdkafka
 * fetches again from the last record taken. A partition bound by window.max_records or
 * .max_bytes (8 partitions at the default budget), or with a small tally, never pauses.
 * @locality group loop */
static void part_check_bound(ks_group_t *g, part_t *p)
{
    bool room = part_has_room(g, p);
    if (p->state == KS_PS_ACTIVE && !room)
        part_move(g, p, KS_PS_PAUSED);
    else if (p->state == KS_PS_PAUSED && room)
        part_move(g, p, KS_PS_ACTIVE);
    if (!p->q)
        return;
    if (p->kpaused) {
        if (part_mem(p) * 2 < p->kpaused_mem || !ks_pstate_deliverable(p->state))
            part_kafka_pause(g, p, false);
    } else if (!room && g->mem_pressed && ks_pstate_deliverable(p->state) &&
               part_room_bytes(g, p) <= 0 && (p->q_len > 0 || rd_kafka_queue_length(p->q) > 0)) {
        part_kafka_pause(g, p, true);
    }
}

/* Where p's new deliveries are held back now (KS_HOLD_NONE: nowhere). The records below
 * the metadata's cut, and the commit point's own, always go out. @locality group loop */
static int64_t part_hold_from(const part_t *p)
{
    return p->held_back ? ks_key_sched_hold_from(p->meta_cut, ks_ack_window_commit_point(&p->win))
                        : KS_HOLD_NONE;
}

/* Warns about a partition held back for HELD_WARN_MS, then every HELD_REWARN_MS while it
 * stays so, with what its commit point waits for. @locality group loop */
#define HELD_WARN_MS   5000
#define HELD_REWARN_MS 30000
static void part_warn_held(ks_group_t *g, part_t *p, int64_t now)
{
    int64_t every = p->held_warned_ms == p->held_since_ms ? HELD_WARN_MS : HELD_REWARN_MS;
    if (!p->held_back || now - p->held_warned_ms < every)
        return;
    p->held_warned_ms = now;
    int64_t cp = ks_ack_window_commit_point(&p->win);
    const ks_win_entry_t *e = cp >= 0 ? ks_ack_window_get(&p->win, cp) : NULL;
    ks_warn(g->log_name,
            "%s[%d]: new deliveries from offset %lld on held back for %lld s: the commit "
            "metadata (commit.metadata_max_bytes=%d) cannot carry the acks above commit point "
            "%lld, which waits for its record (%s, attempt %d; %zu records of the partition "
            "leased); only records below the cut are delivered until it moves",
            p->topic, p->partition, (long long)part_hold_from(p),
            (long long)((now - p->held_since_ms) / 1000), g->cfg->meta_max_bytes, (long long)cp,
            e ? ks_rec_state_str((ks_rec_state_t)e->state) : "not fetched yet",
            e ? (int)e->attempts : 0, p->leased);
}

/* ---- commits and their metadata ---- */

static rd_kafka_resp_err_t commit_moved(ks_group_t *g, bool sync, part_t *only);

/* A held-back partition whose commit point moved commits at once, at most every
 * HELD_COMMIT_MS, not on the next interval: its cut follows the commit point, and the
 * records that come below it go out without waiting for the tick. A commit that failed
 * (committed == -1) is retried on the interval, as usual. @locality group loop */
#define HELD_COMMIT_MS 20
static void commit_held(ks_group_t *g, int64_t now)
{
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (p->held_back && p->state != KS_PS_INITIALIZING && p->committed >= 0 &&
            now - p->held_commit_ms >= HELD_COMMIT_MS &&
            ks_ack_window_commit_point(&p->win) != p->committed) {
            p->held_commit_ms = now;
            commit_moved(g, false, p);
        }
    }
}

/* Builds p's metadata: acks above the commit point and the attempt counts of records
 * delivered but not acked, from the window
 * and from restored metadata for offsets not fetched yet. Returns the text length or -1. */
static int build_meta(ks_group_t *g, part_t *p, int64_t cp, char *buf, size_t size)
{
    ks_commit_meta_t m = {.commit_offset = cp};
    size_t n = ks_ack_window_count(&p->win);
    size_t extra_a = p->restore.acked_cnt - p->restore_ack_i;
    size_t extra_t = p->restore.attempt_cnt - p->restore_att_i;
    m.acked = malloc((n + extra_a + 1) * sizeof(int64_t));
    m.attempts = malloc((n + extra_t + 1) * sizeof(ks_meta_attempt_t));
    if (!m.acked || !m.attempts)
        abort();
    for (size_t i = 0; i < n; i++) {
        ks_win_entry_t *e = ks_ack_window_at(&p->win, i);
        if (e->offset < cp)
            continue;
        if (e->state == KS_REC_ACKED) {
            if (e->offset > cp)
                m.acked[m.acked_cnt++] = e->offset;
        } else if (e->attempts - ((e->flags & KS_WIN_F_UNSENT) ? 1 : 0) >= 1) {
            /* An unsent record's attempt does not count yet. */
            uint32_t att = e->attempts - ((e->flags & KS_WIN_F_UNSENT) ? 1u : 0u);
            m.attempts[m.attempt_cnt++] = (ks_meta_attempt_t){e->offset, att};
        }
    }
    for (size_t i = p->restore_ack_i; i < p->restore.acked_cnt; i++)
        if (p->restore.acked[i] >= p->win.end_offset && p->restore.acked[i] > cp)
            m.acked[m.acked_cnt++] = p->restore.acked[i];
    for (size_t i = p->restore_att_i; i < p->restore.attempt_cnt; i++)
        if (p->restore.attempts[i].offset >= p->win.end_offset &&
            p->restore.attempts[i].offset >= cp)
            m.attempts[m.attempt_cnt++] = p->restore.attempts[i];
    int64_t cut = -1;
    int len = ks_commit_meta_encode_fit(&m, buf, size, &cut);
    bool was = p->held_back;
    p->held_back = cut >= 0;
    p->meta_cut = cut;
    if (cut >= 0) {
        p->meta_truncations++;
        if (!was) {
            p->held_since_ms = p->held_warned_ms = ks_now_ms();
            ks_warn(g->log_name,
                    "%s[%d]: commit metadata exceeds %zu bytes; acks from offset %lld on are "
                    "dropped from it (they would be redelivered after a crash) and new "
                    "deliveries from there on are held back until it fits",
                    p->topic, p->partition, size, (long long)cut);
        }
    } else if (was) {
        ks_info(g->log_name, "%s[%d]: commit metadata fits again; deliveries resume", p->topic,
                p->partition);
    }
    free(m.acked);
    free(m.attempts);
    return len;
}

/* Commits every partition whose commit point or metadata changed (only `only`, if
 * given, and then, if sync, also when an earlier commit of it is not confirmed yet: the
 * revoke's final commit). sync waits for the broker. Sends nothing during a cooperative
 * rejoin, unless called from inside the rebalance callback (see rejoin_guard.h). Returns
 * the commit's error, or 0 (also when nothing was sent). @locality group loop */
static rd_kafka_resp_err_t commit_moved(ks_group_t *g, bool sync, part_t *only)
{
    /* librdkafka's cgrp debug log tells when a JoinGroup or SyncGroup is in flight
     * (rk_log_cb); nothing else in its API does (rejoin_guard.h). */
    bool joining = atomic_load(&g->cgrp_joining);
    bool held = g->rj.rejoining;
    if (!ks_rejoin_guard_may_commit(&g->rj, g->in_rebalance, joining, ks_now_ms(), g->max_poll_ms))
        return RD_KAFKA_RESP_ERR_NO_ERROR;
    if (held && !g->rj.rejoining)
        ks_warn(g->log_name,
                "the cooperative rejoin did not end within %lld ms "
                "(max.poll.interval.ms); commits resume",
                (long long)g->max_poll_ms);
    size_t mcap = (size_t)g->cfg->meta_max_bytes;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)g->part_cnt + 1);
    char *buf = malloc(mcap);
    if (!buf)
        abort();
    int64_t now = ks_now_ms();
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if ((only && p != only) || p->state == KS_PS_INITIALIZING)
            continue;
        part_warn_held(g, p, now);
        int64_t cp = ks_ack_window_commit_point(&p->win);
        bool unconfirmed = only && sync && ks_commit_track_unconfirmed(&p->ct) > 0;
        if (cp < 0 || (cp == p->committed && !p->meta_dirty && !unconfirmed))
            continue;
        rd_kafka_topic_partition_t *tp =
            rd_kafka_topic_partition_list_add(l, p->topic, p->partition);
        tp->offset = cp;
        int len = build_meta(g, p, cp, buf, mcap);
        if (len > 0) {
            tp->metadata = malloc((size_t)len);
            if (!tp->metadata)
                abort();
            memcpy(tp->metadata, buf, (size_t)len);
            tp->metadata_size = (size_t)len;
        }
        p->committed = cp;
        p->meta_dirty = false;
        ks_commit_track_sent(&p->ct, cp, tp->metadata, tp->metadata_size);
    }
    free(buf);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (l->cnt > 0) {
        err = rd_kafka_commit(g->rk, l, sync ? 0 : 1);
        for (int i = 0; i < l->cnt; i++) {
            rd_kafka_topic_partition_t *tp = &l->elems[i];
            part_t *p = part_find(g, tp->topic, tp->partition);
            if (p && err) {
                p->committed = -1; /* retried on the next tick */
                ks_commit_track_failed(&p->ct);
            } else if (p && sync && l->cnt == 1) {
                /* A sync commit reports an error only when every partition failed, so
                 * only a one-partition one confirms here; offset_commit_cb does the rest. */
                ks_commit_track_confirmed(&p->ct, tp->offset, tp->metadata, tp->metadata_size);
            }
        }
        if (err) {
            ks_warn(g->log_name, "commit failed: %s", rd_kafka_err2str(err));
        } else if (ks_log_enabled(KS_LOG_DEBUG)) {
            for (int i = 0; i < l->cnt; i++)
                ks_dbg(g->log_name, "commit %s[%d] @ %lld meta %zu bytes%s", l->elems[i].topic,
                       l->elems[i].partition, (long long)l->elems[i].offset,
                       l->elems[i].metadata_size, sync ? " (sync)" : "");
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
    return err;
}

/* Async commit results. @locality group loop (served from the consumer queue) */
static void offset_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    ks_group_t *g = opaque;
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return;
    if (err)
        ks_warn(g->log_name, "async commit failed: %s; retrying", rd_kafka_err2str(err));
    bool rebalancing = err == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS;
    for (int i = 0; offsets && i < offsets->cnt; i++)
        rebalancing =
            rebalancing || offsets->elems[i].err == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS;
    if (rebalancing && strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0 &&
        !g->rj.rejoining) {
        /* Another member began a rebalance: hold commits until its ASSIGN (rejoin_guard.h). */
        ks_rejoin_guard_rebalancing(&g->rj, ks_now_ms());
        ks_info(g->log_name, "the group is rebalancing: commits wait for the new assignment");
    }
    for (int i = 0; offsets && i < offsets->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &offsets->elems[i];
        part_t *p = part_find(g, tp->topic, tp->partition);
        if (!p)
            continue;
        if (!err && !tp->err) {
            ks_commit_track_confirmed(&p->ct, tp->offset, tp->metadata, tp->metadata_size);
            continue;
        }
        if (!err)
            ks_warn(g->log_name, "commit of %s[%d] failed: %s; retrying", tp->topic, tp->partition,
                    rd_kafka_err2str(tp->err));
        ks_commit_track_failed(&p->ct);
        p->committed = -1;
        p->meta_dirty = true;
    }
}

/* Reads the committed offsets and metadata of newly assigned partitions and keeps
 * what the metadata says, so only unacked records are redelivered. */
static void restore_committed(ks_group_t *g, rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_copy(parts);
    rd_kafka_resp_err_t err = rd_kafka_committed(g->rk, l, 10000);
    if (err) {
        ks_warn(g->log_name,
                "reading committed offsets: %s; acks above the commit point "
                "will be redelivered",
                rd_kafka_err2str(err));
        rd_kafka_topic_partition_list_destroy(l);
        return;
    }
    for (int i = 0; i < l->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &l->elems[i];
        part_t *p = part_find(g, tp->topic, tp->partition);
        if (!p || tp->offset < 0)
            continue;
        p->committed = tp->offset;
        ks_commit_track_init(&p->ct, tp->offset);
        if (!tp->metadata || tp->metadata_size == 0)
            continue;
        if (tp->metadata_size < 4 || memcmp(tp->metadata, "ks1:", 4) != 0) {
            ks_warn(g->log_name, "%s[%d]: ignoring commit metadata that is not ksidecar's",
                    tp->topic, tp->partition);
            continue;
        }
        if (ks_commit_meta_decode(tp->metadata, tp->metadata_size, tp->offset, &p->restore) < 0) {
            ks_warn(g->log_name, "%s[%d]: ignoring corrupt commit metadata (%zu bytes)", tp->topic,
                    tp->partition, tp->metadata_size);
            continue;
        }
        ks_info(g->log_name,
                "%s[%d]: restored %zu acks and %zu attempt counts above committed offset %lld",
                tp->topic, tp->partition, p->restore.acked_cnt, p->restore.attempt_cnt,
                (long long)tp->offset);
        p->meta_dirty = true;
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* ---- settling (ack, nack, extend) ---- */

static void dead_letter(ks_group_t *g, part_t *p, ks_win_entry_t *e);

/* A record is done with one delivery (nack, expiry, delay over): dead-letter it once
 * it reached max_attempts and a dead-letter topic is set, else make it ready again. */
static void requeue(ks_group_t *g, part_t *p, ks_win_entry_t *e)
{
    if (*g->gconf->dead_letter_topic && e->attempts >= g->gconf->max_attempts) {
        dead_letter(g, p, e);
        return;
    }
    e->state = KS_REC_READY;
    ks_key_sched_requeue(&p->sched, &p->win, e);
}

/* True when s holds its leases while stalled and its oldest batch not yet reported by
 * the edge has waited STALL_GRACE_MS for the transport: the client reads nothing. */
static bool sub_stalled(const ks_group_t *g, const sub_t *s, int64_t now)
{
    if (!s || !s->hold_stalled)
        return false;
    if (s->was_stalled)
        return true;
    for (const dlv_t *d = g->dlv_head; d; d = d->next)
        if (d->sub_id == s->id)
            return now - d->at_ms >= STALL_GRACE_MS;
    return false;
}

static void lease_event(void *owner, ks_win_entry_t *e, ks_lease_event_t ev, void *opaque)
{
    ks_group_t *g = opaque;
    part_t *p = owner;
    if (ev == KS_LEASE_EXPIRED) {
        int64_t now = ks_now_ms();
        if (sub_stalled(g, sub_by_id(g, e->sub_id), now)) {
            /* Its client reads nothing, so it may never have seen the record: the lease
             * waits (no attempt counted) until the client reads again, or until the edge
             * cuts it off and its leases go back uncounted. */
            ks_lease_extend(&g->leases, &p->win, p, e, now, STALL_RECHECK_MS);
            return;
        }
        g->st_expired++;
        unlease(g, p, e);
        ks_dbg(g->log_name, "%s[%d]@%lld: lease expired after attempt %u", p->topic, p->partition,
               (long long)e->offset, e->attempts);
        if (!e->reason)
            e->reason = ks_xstrdup("lease deadline expired");
    }
    requeue(g, p, e);
}

static void mark_done(ks_group_t *g, part_t *p, ks_win_entry_t *e)
{
    ks_key_sched_done(&p->sched, &p->win, e);
    p->meta_dirty = true;
}

static ks_ack_result_t settle_one(ks_group_t *g, const cmd_t *c, size_t i, int64_t now)
{
    const ks_ack_ref_t id = c->u.settle.refs[i]; /* parsed on the caller's thread */
    if (!id.ok)
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
    ks_win_entry_t *e = ks_ack_window_get(&p->win, id.offset);
    if (!e) {
        /* Committed past: which of the record's ids was acked is no longer known, so this
         * one may be stale, and an OK could claim an ack that never happened. */
        if (ks_ack_window_ack(&p->win, id.offset) == KS_ACK_DUPLICATE)
            return (ks_ack_result_t){KS_E_STALE, "already committed: the record was acked "
                                                 "(under this ack id or a newer one) and its "
                                                 "offset committed; nothing to redo"};
        return (ks_ack_result_t){KS_E_NOT_FOUND, "unknown ack id: no delivered record has it"};
    }
    if (e->attempts == 0)
        return (ks_ack_result_t){KS_E_NOT_FOUND, "unknown ack id: no delivered record has it"};
    if (e->attempts != id.attempt)
        return (ks_ack_result_t){KS_E_STALE, "stale ack id: the lease ended and the record was "
                                             "delivered again; use the newer ack id"};
    if (e->state == KS_REC_ACKED)
        return (ks_ack_result_t){c->u.settle.op == KS_SETTLE_ACK ? KS_OK : KS_E_STALE,
                                 "already acked"};

    switch (c->u.settle.op) {
    case KS_SETTLE_ACK:
        if (e->state == KS_REC_DEAD_LETTERING)
            return (ks_ack_result_t){KS_E_STALE, "the record is being dead-lettered"};
        if (e->state == KS_REC_LEASED)
            unlease(g, p, e);
        mark_done(g, p, e);
        ks_ack_window_ack_entry(&p->win, e);
        g->st_acked++;
        p->ct.acks++;
        part_check_bound(g, p);
        return (ks_ack_result_t){KS_OK, "acked"};
    case KS_SETTLE_NACK: {
        if (e->state != KS_REC_LEASED)
            return (ks_ack_result_t){KS_E_STALE, "not leased: the lease already ended (expired "
                                                 "or nacked) and the record will be redelivered"};
        unlease(g, p, e);
        g->st_nacked++;
        if (c->u.settle.reason) {
            free(e->reason);
            e->reason = ks_xstrdup(c->u.settle.reason);
        }
        if (*g->gconf->dead_letter_topic && e->attempts >= g->gconf->max_attempts) {
            e->state = KS_REC_READY;
            dead_letter(g, p, e);
            return (ks_ack_result_t){KS_OK, "nacked; max_attempts reached: dead-lettered"};
        }
        if (ks_lease_release(&g->leases, &p->win, p, e, now, c->u.settle.ms) == 1)
            ks_key_sched_requeue(&p->sched, &p->win, e);
        return (ks_ack_result_t){KS_OK, c->u.settle.ms > 0 ? "nacked; redelivery after the delay"
                                                           : "nacked; redelivery now"};
    }
    case KS_SETTLE_EXTEND:
        if (ks_lease_extend(&g->leases, &p->win, p, e, now, c->u.settle.ms) < 0)
            return (ks_ack_result_t){KS_E_STALE, "not leased: the lease already ended (expired "
                                                 "or nacked) and the record will be redelivered"};
        return (ks_ack_result_t){KS_OK, "deadline extended"};
    }
    return (ks_ack_result_t){KS_E_INTERNAL, "unknown operation"};
}

static void handle_settle(ks_group_t *g, cmd_t *c, int64_t now)
{
    ks_ack_result_t *res = calloc(c->u.settle.n ? c->u.settle.n : 1, sizeof(*res));
    if (!res)
        abort();
    for (size_t i = 0; i < c->u.settle.n; i++)
        res[i] = settle_one(g, c, i, now);
    c->u.settle.cb(res, c->u.settle.n, c->u.settle.opaque);
    cmd_free(c);
}

/* ---- dead letters ---- */

static void dlq_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    ks_group_t *g = opaque;
    dlq_ref_t *ref = m->_private;
    part_t *p = part_find(g, ref->topic, ref->partition);
    ks_win_entry_t *e =
        p && p->epoch == ref->epoch ? ks_ack_window_get(&p->win, ref->offset) : NULL;
    if (!e || e->state != KS_REC_DEAD_LETTERING) {
        /* The partition moved on; its new owner redelivers the record. */
        free(ref);
        return;
    }
    if (m->err) {
        ks_warn(g->log_name, "%s[%d]@%lld: producing to dead-letter topic %s failed: %s; retrying",
                ref->topic, ref->partition, (long long)ref->offset, g->gconf->dead_letter_topic,
                rd_kafka_err2str(m->err));
        ks_lease_delay(&g->leases, &p->win, p, e, ks_now_ms(), DLQ_RETRY_MS);
        free(ref);
        return;
    }
    ks_info(g->log_name, "%s[%d]@%lld: dead-lettered to %s after %u attempts", ref->topic,
            ref->partition, (long long)ref->offset, g->gconf->dead_letter_topic, e->attempts);
    g->st_dead_lettered++;
    mark_done(g, p, e);
    ks_ack_window_ack(&p->win, ref->offset);
    part_check_bound(g, p);
    free(ref);
}

static int dlq_start(ks_group_t *g)
{
    char e[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (size_t i = 0; i < g->cfg->kafka_cnt; i++)
        rd_kafka_conf_set(conf, g->cfg->kafka[i].key, g->cfg->kafka[i].value, e, sizeof(e));
    rd_kafka_conf_set(conf, "enable.idempotence", "true", e, sizeof(e));
    rd_kafka_conf_set(conf, "linger.ms", "5", e, sizeof(e));
    rd_kafka_conf_set(conf, "log_level", "3", e, sizeof(e)); /* consumer keys: not warnings */
    rd_kafka_conf_set_opaque(conf, g);
    rd_kafka_conf_set_dr_msg_cb(conf, dlq_dr_cb);
    g->dlq_rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (!g->dlq_rk) {
        ks_err(g->log_name, "cannot make the dead-letter producer: %s", e);
        return -1;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_get_main(g->dlq_rk);
    rd_kafka_queue_io_event_enable(q, g->dlq_pipe[1], "1", 1);
    rd_kafka_queue_destroy(q);
    return 0;
}

static void dead_letter(ks_group_t *g, part_t *p, ks_win_entry_t *e)
{
    const rec_t *m = e->msg;
    e->state = KS_REC_DEAD_LETTERING;
    if (!g->dlq_rk && dlq_start(g) < 0) {
        e->state = KS_REC_READY;
        ks_key_sched_requeue(&p->sched, &p->win, e);
        return;
    }
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new((m ? m->header_cnt : 0) + 6);
    for (size_t h = 0; m && h < m->header_cnt; h++)
        rd_kafka_header_add(hdrs, rec_headers(m)[h].name, -1, rec_headers(m)[h].value,
                            (ssize_t)rec_headers(m)[h].value_len);
    char part[16], off[32], att[16];
    snprintf(part, sizeof(part), "%d", p->partition);
    snprintf(off, sizeof(off), "%lld", (long long)e->offset);
    snprintf(att, sizeof(att), "%u", e->attempts);
    rd_kafka_header_add(hdrs, "ksidecar.original.topic", -1, p->topic, -1);
    rd_kafka_header_add(hdrs, "ksidecar.original.partition", -1, part, -1);
    rd_kafka_header_add(hdrs, "ksidecar.original.offset", -1, off, -1);
    rd_kafka_header_add(hdrs, "ksidecar.attempts", -1, att, -1);
    rd_kafka_header_add(hdrs, "ksidecar.last_error", -1, e->reason ? e->reason : "", -1);
    rd_kafka_header_add(hdrs, "ksidecar.group", -1, g->name, -1);
    dlq_ref_t *ref = calloc(1, sizeof(*ref));
    if (!ref)
        abort();
    snprintf(ref->topic, sizeof(ref->topic), "%s", p->topic);
    ref->partition = p->partition;
    ref->epoch = p->epoch;
    ref->offset = e->offset;
    rd_kafka_resp_err_t err =
        rd_kafka_producev(g->dlq_rk, RD_KAFKA_V_TOPIC(g->gconf->dead_letter_topic),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_KEY(m ? rec_key(m) : NULL, m ? m->key_len : 0),
                          RD_KAFKA_V_VALUE(m ? rec_value(m) : NULL, m ? m->value_len : 0),
                          RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(ref), RD_KAFKA_V_END);
    if (err) {
        rd_kafka_headers_destroy(hdrs);
        free(ref);
        ks_warn(g->log_name, "dead-letter produce: %s; retrying", rd_kafka_err2str(err));
        ks_lease_delay(&g->leases, &p->win, p, e, ks_now_ms(), DLQ_RETRY_MS);
    }
}

/* ---- rebalance ---- */

static void handle_cmd(ks_group_t *g, cmd_t *c, int64_t now);

/* Inside a revoke: keep taking acks for the revoking partitions until their leases
 * are all settled or revoke_grace_ms ran out. Fetches wait until after the callback. */
static void revoke_grace(ks_group_t *g, part_t **revoking, size_t n)
{
    /* At shutdown the drain already waited for acks. */
    int64_t until = g->stopping ? 0 : ks_now_ms() + g->cfg->revoke_grace_ms;
    for (;;) {
        size_t leased = 0;
        for (size_t i = 0; i < n; i++)
            leased += revoking[i]->leased;
        int64_t now = ks_now_ms();
        if (leased == 0 || now >= until)
            break;
        int64_t next = ks_leases_next_due(&g->leases);
        int64_t wait = (next < until ? next : until) - now;
        if (wait < 1)
            wait = 1;
        struct epoll_event ev;
        int efd = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event want = {.events = EPOLLIN, .data.fd = ks_inbox_fd(&g->inbox)};
        epoll_ctl(efd, EPOLL_CTL_ADD, ks_inbox_fd(&g->inbox), &want);
        epoll_wait(efd, &ev, 1, (int)(wait > 1000 ? 1000 : wait));
        close(efd);
        now = ks_now_ms();
        for (ks_inbox_node_t *nd = ks_inbox_take_all(&g->inbox), *next_nd; nd; nd = next_nd) {
            next_nd = nd->next;
            cmd_t *c = (cmd_t *)nd;
            if (c->type == CMD_FETCH) {
                c->next_wait = g->deferred;
                g->deferred = c;
            } else {
                handle_cmd(g, c, now);
            }
        }
        ks_leases_run(&g->leases, now, lease_event, g);
    }
}

/* A revoked partition leaves: acks accepted on it that no confirmed commit covers will be
 * delivered again by its next owner. Counts and logs them; why says what failed. */
static void count_lost_acks(ks_group_t *g, part_t *p, const char *why)
{
    int64_t n = ks_commit_track_unconfirmed(&p->ct);
    if (n <= 0)
        return;
    g->st_acks_lost += n;
    ks_warn(g->log_name,
            "%s[%d]: up to %lld accepted acks lost to a move (%s): no confirmed commit covers "
            "them, so the partition's next owner delivers those records again",
            p->topic, p->partition, (long long)n, why);
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    ks_group_t *g = opaque;
    ks_owner_enter(&g->owner);
    g->in_rebalance = true;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    rd_kafka_error_t *error = NULL;
    rd_kafka_resp_err_t aerr = RD_KAFKA_RESP_ERR_NO_ERROR;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        g->ever_assigned = true;
        g->down[0] = '\0';
        for (int i = 0; i < parts->cnt; i++)
            if (!part_find(g, parts->elems[i].topic, parts->elems[i].partition))
                part_add(g, parts->elems[i].topic, parts->elems[i].partition);
        restore_committed(g, parts);
        for (int i = 0; i < parts->cnt; i++) {
            part_t *p = part_find(g, parts->elems[i].topic, parts->elems[i].partition);
            if (p && p->state == KS_PS_INITIALIZING) {
                part_move(g, p, KS_PS_ACTIVE);
                ks_info(g->log_name, "assigned %s[%d] (epoch %u, committed %lld)", p->topic,
                        p->partition, p->epoch, (long long)p->committed);
            }
        }
        g->assign_ver++;
        if (coop && ks_rejoin_guard_assign(&g->rj))
            ks_info(g->log_name, "cooperative rebalance complete after %lld ms; commits resume",
                    (long long)(ks_now_ms() - g->rj.since_ms));
        if (coop)
            error = rd_kafka_incremental_assign(rk, parts);
        else
            aerr = rd_kafka_assign(rk, parts);
    } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        /* 1. stop delivering (streams hear of it); 2. let leases finish; 3. commit;
         * 4. give them up. */
        g->assign_ver++;
        part_t **rev = calloc((size_t)parts->cnt + 1, sizeof(*rev));
        size_t n = 0;
        if (!rev)
            abort();
        for (int i = 0; i < parts->cnt; i++) {
            part_t *p = part_find(g, parts->elems[i].topic, parts->elems[i].partition);
            if (p) {
                part_move(g, p, KS_PS_REVOKING);
                rev[n++] = p;
            }
        }
        /* A lost assignment can no longer be committed (librdkafka has dropped the
         * generation): no grace, no commit, and its unconfirmed acks are counted. */
        bool lost = rd_kafka_assignment_lost(rk) == 1;
        if (lost)
            ks_warn(g->log_name, "assignment lost: %zu partition(s) revoked without a commit", n);
        else
            revoke_grace(g, rev, n);
        for (size_t i = 0; i < n; i++) {
            rd_kafka_resp_err_t cerr =
                lost ? RD_KAFKA_RESP_ERR_NO_ERROR : commit_moved(g, true, rev[i]);
            count_lost_acks(g, rev[i], lost ? "the assignment was lost" : rd_kafka_err2str(cerr));
        }
        for (size_t i = 0; i < n; i++)
            part_remove(g, rev[i]);
        free(rev);
        /* From here to the ASSIGN that ends the rebalance, no commit may go out. */
        if (coop)
            ks_rejoin_guard_revoke(&g->rj, lost, ks_now_ms());
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
    g->in_rebalance = false;
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

/* Copies the leased entries into one batch the API thread can own. */
static ks_batch_t *build_batch(ks_group_t *g, part_t **eparts, ks_win_entry_t **ents, size_t n)
{
    size_t need = align8(n * sizeof(ks_record_t));
    for (size_t i = 0; i < n; i++) {
        const rec_t *r = ents[i]->msg;
        size_t tl = strlen(eparts[i]->topic);
        need += align8(tl + 1) + align8(r->key_len + 1) + align8(r->value_len + 1) +
                align8(r->header_cnt * sizeof(ks_header_t));
        for (size_t h = 0; h < r->header_cnt; h++)
            need += align8(strlen(rec_headers(r)[h].name) + 1) +
                    align8(rec_headers(r)[h].value_len + 1);
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
        const rec_t *m = ents[i]->msg;
        const part_t *p = eparts[i];
        ks_record_t *r = &b->recs[i];
        size_t tl = strlen(p->topic);
        r->topic = PUT(p->topic, tl);
        r->partition = p->partition;
        r->offset = ents[i]->offset;
        r->timestamp = m->timestamp;
        r->key = m->has_key ? PUT(rec_key(m), m->key_len) : NULL;
        r->key_len = m->key_len;
        r->value = m->has_value ? PUT(rec_value(m), m->value_len) : NULL;
        r->value_len = m->value_len;
        r->attempt = ents[i]->attempts;
        r->ack_instance = g->instance;
        r->ack_group_hash = g->group_hash;
        r->ack_epoch = p->epoch;
        r->headers = NULL;
        r->header_cnt = m->header_cnt;
        if (m->header_cnt) {
            ks_header_t *hv = (ks_header_t *)pos;
            pos += align8(m->header_cnt * sizeof(ks_header_t));
            for (size_t h = 0; h < m->header_cnt; h++) {
                const ks_header_t *src = &rec_headers(m)[h];
                hv[h].name = PUT(src->name, strlen(src->name));
                hv[h].value = src->value ? PUT(src->value, src->value_len) : NULL;
                hv[h].value_len = src->value_len;
            }
            r->headers = hv;
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

/* One parked fetch being filled. */
typedef struct take {
    cmd_t *c;
    sub_t *sub;
    size_t n, cap;
    int64_t bytes; /* key+value bytes taken */
    ks_win_entry_t **ents;
    part_t **eparts;
    size_t pcur;      /* round-robin cursor over partitions */
    size_t next_same; /* serve_waiting: its subscriber's next parked fetch, or SIZE_MAX */
    bool dry;
} take_t;

/* Leases one more record for t, or marks t dry. @locality group loop */
static void take_one(ks_group_t *g, take_t *t, int64_t now)
{
    sub_t *s = t->sub;
    if (t->n >= t->cap || s->out_records >= s->credit_records ||
        (s->out_bytes >= s->credit_bytes && s->out_records > 0)) {
        t->dry = true;
        return;
    }
    for (size_t k = 0; k < g->part_cnt; k++) {
        size_t idx = (t->pcur + k) % g->part_cnt;
        part_t *p = g->parts[idx];
        if (!ks_pstate_deliverable(p->state) || !ks_key_sched_maybe_ready(&p->sched) ||
            !wants_topic(t->c, p->topic))
            continue;
        ks_win_entry_t *e = ks_key_sched_take(&p->sched, &p->win, part_hold_from(p));
        if (!e)
            continue;
        int64_t max_bytes = t->c->u.fetch.max_bytes;
        if ((s->out_records > 0 && s->out_bytes + e->bytes > s->credit_bytes) ||
            (t->n > 0 && max_bytes > 0 && t->bytes + (int64_t)e->bytes > max_bytes)) {
            ks_key_sched_requeue(&p->sched, &p->win, e);
            t->dry = true;
            return;
        }
        if (t->c->u.fetch.confirm) {
            /* Counted as delivered, and its lease started, once the transport took it. */
            ks_lease_hold(e, s->id, now);
            e->flags |= KS_WIN_F_UNSENT;
        } else {
            if (e->attempts > 0)
                g->st_redelivered++;
            g->st_delivered++;
            ks_lease_grant(&g->leases, &p->win, p, e, s->id, now, t->c->u.fetch.deadline_ms);
        }
        p->leased++;
        p->meta_dirty = true; /* its attempt count goes into the next commit */
        s->out_records++;
        s->out_bytes += e->bytes;
        if (!t->ents) {
            t->ents = malloc(t->cap * sizeof(*t->ents));
            t->eparts = malloc(t->cap * sizeof(*t->eparts));
            if (!t->ents || !t->eparts)
                abort();
        }
        t->bytes += e->bytes;
        t->ents[t->n] = e;
        t->eparts[t->n] = p;
        t->n++;
        t->pcur = idx + 1;
        return;
    }
    t->dry = true;
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

/* Remembers t's records until the edge reports the batch b (opts.confirm). */
static void dlv_add(ks_group_t *g, const take_t *t, ks_batch_t *b)
{
    dlv_t *d = malloc(sizeof(*d) + t->n * sizeof(dlv_rec_t));
    if (!d)
        abort();
    d->next = NULL;
    d->token = ++g->next_token;
    d->sub_id = t->sub->id;
    d->deadline_ms = t->c->u.fetch.deadline_ms;
    d->at_ms = ks_now_ms();
    d->n = t->n;
    for (size_t i = 0; i < t->n; i++)
        d->recs[i] = (dlv_rec_t){.p = t->eparts[i],
                                 .offset = t->ents[i]->offset,
                                 .epoch = t->eparts[i]->epoch,
                                 .attempts = t->ents[i]->attempts};
    if (g->dlv_tail)
        g->dlv_tail->next = d;
    else
        g->dlv_head = d;
    g->dlv_tail = d;
    b->deliver_token = d->token;
}

/* The edge reported a confirmed batch: taken, its leases start now; else its records
 * that are still unsent go back, their attempts not counted. */
static void handle_delivered(ks_group_t *g, uint64_t token, bool taken, int64_t now)
{
    dlv_t *prev = NULL, *d = g->dlv_head;
    while (d && d->token != token) { /* reports come about in order: near the head */
        prev = d;
        d = d->next;
    }
    if (!d)
        return; /* its subscriber was released: nothing is unsent any more */
    dlv_unlink(g, prev, d);
    sub_t *s = sub_by_id(g, d->sub_id);
    if (s && s->hold_stalled)
        s->was_stalled = !taken && now - d->at_ms >= STALL_GRACE_MS;
    size_t back = 0;
    for (size_t i = 0; i < d->n; i++) {
        const dlv_rec_t *r = &d->recs[i];
        part_t *p = r->p;
        if (!p || p->epoch != r->epoch)
            continue;
        ks_win_entry_t *e = ks_ack_window_get(&p->win, r->offset);
        if (!e || e->state != KS_REC_LEASED || !(e->flags & KS_WIN_F_UNSENT) ||
            e->attempts != r->attempts || e->sub_id != d->sub_id)
            continue; /* settled or released since */
        if (taken) {
            e->flags &= (uint8_t)~KS_WIN_F_UNSENT;
            if (e->attempts > 1)
                g->st_redelivered++;
            g->st_delivered++;
            ks_lease_start(&g->leases, &p->win, p, e, now, d->deadline_ms);
        } else {
            unsent_back(g, p, e, now);
            back++;
        }
    }
    if (back)
        ks_info(g->log_name, "%zu records the transport did not take go back (no attempt counted)",
                back);
    free(d);
}

static void finish_fetch(cmd_t *c, ks_batch_t *b)
{
    c->u.fetch.cb(b, c->u.fetch.opaque);
    cmd_free(c);
}

/* Puts the current assignment (of c's topics) into b. */
static void attach_assignment(ks_group_t *g, const cmd_t *c, sub_t *s, ks_batch_t *b)
{
    b->has_assignment = 1;
    b->assigned = calloc(g->part_cnt ? g->part_cnt : 1, sizeof(ks_tp_t));
    if (!b->assigned)
        abort();
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (!wants_topic(c, p->topic) || p->state == KS_PS_REVOKING)
            continue;
        snprintf(b->assigned[b->assign_cnt].topic, sizeof(b->assigned[0].topic), "%s", p->topic);
        b->assigned[b->assign_cnt++].partition = p->partition;
    }
    s->seen_assign_ver = g->assign_ver;
}

/* Records one subscriber takes in its turn while others wait too. */
#define SERVE_TURN 32

/* Serves parked fetches, a few records to each subscriber in turn so concurrent subscribers share
 * the load, and ends those past their wait. @locality group loop */
static void serve_waiting(ks_group_t *g, int64_t now)
{
    size_t nw = 0;
    for (cmd_t *c = g->wait_head; c; c = c->next_wait)
        nw++;
    if (nw == 0)
        return;
    take_t *ts = calloc(nw, sizeof(*ts));
    if (!ts)
        abort();
    size_t i = 0;
    for (cmd_t *c = g->wait_head; c; c = c->next_wait, i++) {
        ts[i].c = c;
        ts[i].sub = sub_get(g, c->u.fetch.sub, now);
        ts[i].cap = (size_t)c->u.fetch.max;
        ts[i].pcur = g->rr + i;
        ts[i].dry = !g->delivering;
        ts[i].next_same = SIZE_MAX;
        ts[i].sub->turn = SIZE_MAX;
    }
    for (i = nw; i-- > 0;) { /* link each subscriber's fetches, first parked first */
        ts[i].next_same = ts[i].sub->turn;
        ts[i].sub->turn = i;
    }
    g->rr++;
    /* Subscribers take turns, a few records a turn. One subscriber's fetches fill one
     * after another, not in turns: interleaving them would split each partition's
     * offsets across batches, and a client that acks batch by batch would then leave
     * every other run unacked (commit metadata full of gaps). */
    for (bool progress = true; progress;) {
        progress = false;
        for (i = 0; i < nw; i++) {
            if (ts[i].dry)
                continue;
            if (ts[i].sub->turn != i)
                continue; /* an earlier fetch of its subscriber is still filling */
            size_t before = ts[i].n;
            for (int k = 0; k < SERVE_TURN && !ts[i].dry; k++)
                take_one(g, &ts[i], now);
            if (ts[i].dry)
                ts[i].sub->turn = ts[i].next_same;
            progress = progress || ts[i].n > before || ts[i].dry;
        }
    }
    cmd_t *prev = NULL;
    for (i = 0; i < nw; i++) {
        cmd_t *c = ts[i].c;
        ks_batch_t *b = NULL;
        bool notify = c->u.fetch.notify && ts[i].sub->seen_assign_ver != g->assign_ver;
        if (!g->delivering)
            b = batch_error(KS_E_UNAVAILABLE, "ksidecar is shutting down; fetch again elsewhere");
        else if (ts[i].n > 0) {
            b = build_batch(g, ts[i].eparts, ts[i].ents, ts[i].n);
            b->bytes = ts[i].bytes;
            if (c->u.fetch.confirm)
                dlv_add(g, &ts[i], b);
        } else if ((notify || now >= c->u.fetch.wait_until_ms) && g->assign_ver == 0 && *g->down)
            b = batch_error(KS_E_UNAVAILABLE, g->down); /* never joined: not just "no records" */
        else if (notify || now >= c->u.fetch.wait_until_ms)
            b = calloc(1, sizeof(ks_batch_t)); /* the wait ran out: an empty batch */
        if (b && notify && !b->status)
            attach_assignment(g, c, ts[i].sub, b);
        free(ts[i].ents);
        free(ts[i].eparts);
        if (!b) {
            prev = c;
            continue;
        }
        wait_unlink(g, prev, c);
        finish_fetch(c, b);
    }
    free(ts);
}

/* ---- commands ---- */

static void subscribe_to(ks_group_t *g, char *const *topics, size_t n)
{
    bool changed = false;
    for (size_t i = 0; i < n; i++) {
        bool have = false;
        for (size_t j = 0; j < g->topic_cnt; j++)
            if (strcmp(g->topics[j], topics[i]) == 0)
                have = true;
        if (have)
            continue;
        g->topics = realloc(g->topics, (g->topic_cnt + 1) * sizeof(char *));
        if (!g->topics)
            abort();
        g->topics[g->topic_cnt++] = ks_xstrdup(topics[i]);
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

static ks_group_status_t *build_status(ks_group_t *g, int64_t now)
{
    ks_group_status_t *st = calloc(1, sizeof(*st));
    if (!st)
        abort();
    snprintf(st->name, sizeof(st->name), "%s", g->name);
    st->is_static = g->is_static;
    st->ordering = ks_ordering_str((ks_ordering_t)g->gconf->ordering);
    snprintf(st->dead_letter_topic, sizeof(st->dead_letter_topic), "%s",
             g->gconf->dead_letter_topic);
    st->max_attempts = g->gconf->max_attempts;
    size_t tl = 0;
    for (size_t i = 0; i < g->topic_cnt && tl + 1 < sizeof(st->topics); i++)
        tl += (size_t)snprintf(st->topics + tl, sizeof(st->topics) - tl, "%s%s", i ? "," : "",
                               g->topics[i]);
    st->delivered = g->st_delivered;
    st->redelivered = g->st_redelivered;
    st->expired = g->st_expired;
    st->nacked = g->st_nacked;
    st->acked = g->st_acked;
    st->dead_lettered = g->st_dead_lettered;
    st->mem_max_bytes = g->cfg->memory_max_bytes;
    st->mem_used_bytes = ks_mem_used();
    st->mem_partitions = (int64_t)ks_mem_parts();
    st->mem_window_share_bytes = part_share(g);
    st->mem_kafka_queue_kbytes = g->q_kbytes;
    st->mem_kafka_fetch_bytes = g->fetch_max_bytes;
    st->acks_lost_to_move = g->st_acks_lost;
    st->part_cnt = g->part_cnt;
    st->parts = calloc(g->part_cnt ? g->part_cnt : 1, sizeof(*st->parts));
    st->sub_cnt = g->sub_cnt;
    st->subs = calloc(g->sub_cnt ? g->sub_cnt : 1, sizeof(*st->subs));
    if (!st->parts || !st->subs)
        abort();
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        ks_part_status_t *ps = &st->parts[i];
        snprintf(ps->topic, sizeof(ps->topic), "%s", p->topic);
        ps->partition = p->partition;
        ps->epoch = p->epoch;
        ps->state = ks_pstate_str(p->state);
        ps->committed = p->ct.confirmed;
        ps->commit_in_flight = ks_commit_track_in_flight(&p->ct);
        int64_t lo = -1, hi = -1;
        if (rd_kafka_get_watermark_offsets(g->rk, p->topic, p->partition, &lo, &hi) != 0)
            hi = -1;
        ps->high_watermark = hi;
        int64_t base = p->ct.confirmed >= 0 ? p->ct.confirmed : ks_ack_window_commit_point(&p->win);
        ps->lag = hi >= 0 && base >= 0 ? hi - base : -1;
        ps->in_flight = p->leased;
        ps->window = ks_ack_window_count(&p->win);
        ps->window_bytes = ks_ack_window_bytes(&p->win);
        ps->paused = p->state == KS_PS_PAUSED;
        ps->oldest_lease_age_ms = -1;
        for (size_t j = 0; j < ps->window && p->leased; j++) {
            ks_win_entry_t *e = ks_ack_window_at(&p->win, j);
            if (e->state == KS_REC_LEASED && now - e->leased_at_ms > ps->oldest_lease_age_ms)
                ps->oldest_lease_age_ms = now - e->leased_at_ms;
        }
        ps->metadata_truncations = p->meta_truncations;
        ps->held_back = p->held_back;
        ps->window_memory_bytes = part_mem(p);
        ps->kafka_queue_records = p->q ? (int64_t)rd_kafka_queue_length(p->q) : 0;
        ps->budget_pauses = p->budget_pauses;
    }
    for (size_t i = 0; i < g->sub_cnt; i++) {
        sub_t *s = g->subs[i];
        ks_sub_status_t *ss = &st->subs[i];
        snprintf(ss->name, sizeof(ss->name), "%s", s->name);
        ss->credit_records = s->credit_records;
        ss->credit_bytes = s->credit_bytes;
        ss->outstanding_records = s->out_records;
        ss->outstanding_bytes = s->out_bytes;
        for (cmd_t *c = g->wait_head; c; c = c->next_wait)
            if (!strcmp(c->u.fetch.sub, s->name))
                ss->waiting = 1;
    }
    return st;
}

/* A subscriber is gone: its leases go back now, its parked fetches end. Unsent
 * records count no attempt; with unread (or while it is stalled), none of its leases
 * does. */
static void handle_release(ks_group_t *g, const char *name, bool unread)
{
    sub_t *s = NULL;
    for (size_t i = 0; i < g->sub_cnt; i++)
        if (!strcmp(g->subs[i]->name, name))
            s = g->subs[i];
    if (!s)
        return;
    size_t released = 0;
    int64_t now = ks_now_ms();
    /* A stream that ends while stalled read none of what it holds as far as we know. */
    unread = unread || sub_stalled(g, s, now);
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        for (size_t j = 0; j < ks_ack_window_count(&p->win) && p->leased; j++) {
            ks_win_entry_t *e = ks_ack_window_at(&p->win, j);
            if (e->state != KS_REC_LEASED || e->sub_id != s->id)
                continue;
            if ((unread || (e->flags & KS_WIN_F_UNSENT)) && e->attempts > 0)
                e->attempts--;
            unlease(g, p, e);
            ks_lease_release(&g->leases, &p->win, p, e, now, 0);
            ks_key_sched_requeue(&p->sched, &p->win, e);
            released++;
        }
    }
    cmd_t *prev = NULL, *c = g->wait_head;
    while (c) {
        cmd_t *next = c->next_wait;
        if (!strcmp(c->u.fetch.sub, name)) {
            wait_unlink(g, prev, c);
            finish_fetch(c, batch_error(KS_E_UNAVAILABLE, "the subscriber was released"));
        } else {
            prev = c;
        }
        c = next;
    }
    dlv_forget(g, s->id, NULL);
    for (size_t i = 0; i < g->sub_cnt; i++)
        if (g->subs[i] == s) {
            g->subs[i] = g->subs[--g->sub_cnt];
            break;
        }
    free(s);
    if (released)
        ks_info(g->log_name, "subscriber %s left: %zu leased records go back now", name, released);
}

static void seek_done(cmd_t *c, ks_status_t st, const char *msg, int64_t offset, int64_t stale)
{
    ks_seek_result_t *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    r->status = st;
    snprintf(r->message, sizeof(r->message), "%s", msg);
    r->offset = offset;
    r->stale_leases = stale;
    c->u.seek.cb(r, c->u.seek.opaque);
    cmd_free(c);
}

/* Moves a partition: its leases turn stale (new epoch), its window starts over. */
static void handle_seek(ks_group_t *g, cmd_t *c)
{
    part_t *p = part_find(g, c->u.seek.topic, c->u.seek.partition);
    if (!p || !ks_pstate_deliverable(p->state)) {
        seek_done(c, KS_E_NOT_FOUND, "that partition is not assigned to this process", -1, 0);
        return;
    }
    int64_t target = c->u.seek.value;
    switch (c->u.seek.kind) {
    case KS_SEEK_EARLIEST:
        target = RD_KAFKA_OFFSET_BEGINNING;
        break;
    case KS_SEEK_LATEST:
        target = RD_KAFKA_OFFSET_END;
        break;
    case KS_SEEK_TIMESTAMP: {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = c->u.seek.value;
        rd_kafka_resp_err_t err = rd_kafka_offsets_for_times(g->rk, l, 5000);
        if (!err)
            err = l->elems[0].err;
        target = l->elems[0].offset;
        rd_kafka_topic_partition_list_destroy(l);
        if (err) {
            seek_done(c, KS_E_UNAVAILABLE, rd_kafka_err2str(err), -1, 0);
            return;
        }
        if (target < 0)
            target = RD_KAFKA_OFFSET_END; /* no record that late */
        break;
    }
    case KS_SEEK_OFFSET:
        if (target < 0) {
            seek_done(c, KS_E_INVALID, "offset must be >= 0", -1, 0);
            return;
        }
        break;
    }
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = target;
    rd_kafka_error_t *error = rd_kafka_seek_partitions(g->rk, l, 5000);
    rd_kafka_resp_err_t perr = l->elems[0].err;
    rd_kafka_topic_partition_list_destroy(l);
    if (error || perr) {
        char msg[256];
        snprintf(msg, sizeof(msg), "seek failed: %s",
                 error ? rd_kafka_error_string(error) : rd_kafka_err2str(perr));
        if (error)
            rd_kafka_error_destroy(error);
        seek_done(c, KS_E_UNAVAILABLE, msg, -1, 0);
        return;
    }
    int64_t stale = (int64_t)drop_leases(g, p);
    ks_leases_forget(&g->leases, p);
    ks_ack_window_destroy(&p->win);
    ks_key_sched_destroy(&p->sched);
    ks_commit_meta_free(&p->restore);
    p->restore_ack_i = p->restore_att_i = 0;
    p->held_back = false;
    ks_commit_track_init(&p->ct, -1); /* a new position: nothing confirmed on it yet */
    p->epoch = ++g->next_epoch;
    if (p->state == KS_PS_PAUSED)
        part_move(g, p, KS_PS_ACTIVE);
    ks_info(g->log_name, "%s[%d]: seek to %lld; %lld leases are stale now (epoch %u)", p->topic,
            p->partition, (long long)target, (long long)stale, p->epoch);
    seek_done(c, KS_OK, "", target, stale);
}

static void handle_cmd(ks_group_t *g, cmd_t *c, int64_t now)
{
    switch (c->type) {
    case CMD_FETCH:
        g->last_activity_ms = now;
        if (!g->delivering) {
            finish_fetch(c, batch_error(KS_E_UNAVAILABLE, "ksidecar is shutting down"));
            return;
        }
        {
            sub_t *s = sub_get(g, c->u.fetch.sub, now);
            if (c->u.fetch.credit_records > 0)
                s->credit_records = c->u.fetch.credit_records;
            if (c->u.fetch.credit_bytes > 0)
                s->credit_bytes = c->u.fetch.credit_bytes;
            s->hold_stalled = s->hold_stalled || c->u.fetch.hold_stalled;
        }
        subscribe_to(g, c->u.fetch.topics, c->u.fetch.topic_cnt);
        c->next_wait = NULL;
        if (g->wait_tail)
            g->wait_tail->next_wait = c;
        else
            g->wait_head = c;
        g->wait_tail = c;
        break;
    case CMD_SETTLE:
        g->last_activity_ms = now;
        handle_settle(g, c, now);
        break;
    case CMD_STATUS:
        c->u.status.cb(build_status(g, now), c->u.status.opaque);
        cmd_free(c);
        break;
    case CMD_SEEK:
        handle_seek(g, c);
        break;
    case CMD_RELEASE:
    case CMD_RELEASE_UNREAD:
        handle_release(g, c->u.release_sub, c->type == CMD_RELEASE_UNREAD);
        cmd_free(c);
        break;
    case CMD_DELIVERED:
        handle_delivered(g, c->u.delivered.token, c->u.delivered.taken, now);
        cmd_free(c);
        break;
    case CMD_STOP_DELIVERING:
        g->delivering = false;
        cmd_free(c);
        break;
    case CMD_SHUTDOWN:
        g->delivering = false;
        g->draining = true;
        g->drain_until_ms = c->u.ack_deadline_ms;
        cmd_free(c);
        break;
    }
}

/* ---- consuming ---- */

static void handle_message(ks_group_t *g, part_t *p, rd_kafka_message_t *m)
{
    if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            ks_warn(g->log_name, "consumer: %s%s%s", rd_kafka_message_errstr(m),
                    m->rkt ? " topic " : "", m->rkt ? rd_kafka_topic_name(m->rkt) : "");
        rd_kafka_message_destroy(m);
        return;
    }
    if (!p)
        p = part_find(g, rd_kafka_topic_name(m->rkt), m->partition);
    if (!p || p->state == KS_PS_REVOKING || m->offset < p->win.end_offset) {
        /* Not ours any more, or already held (fetched again after a seek). */
        rd_kafka_message_destroy(m);
        return;
    }
    /* Restored metadata: acked before a restart means done now; attempts carry on. */
    ks_commit_meta_t *r = &p->restore;
    while (p->restore_ack_i < r->acked_cnt && r->acked[p->restore_ack_i] < m->offset)
        p->restore_ack_i++;
    while (p->restore_att_i < r->attempt_cnt && r->attempts[p->restore_att_i].offset < m->offset)
        p->restore_att_i++;
    if (p->restore_ack_i < r->acked_cnt && r->acked[p->restore_ack_i] == m->offset) {
        ks_ack_window_push_done(&p->win, m->offset);
        rd_kafka_message_destroy(m);
        return;
    }
    int64_t off = m->offset;
    uint32_t bytes = (uint32_t)(m->len + m->key_len);
    bool has_key = m->key != NULL;
    uint64_t kh = m->key ? fnv64(m->key, m->key_len) : 0;
    rec_t *rec = rec_copy(m);
    rd_kafka_message_destroy(m); /* frees librdkafka's buffer as soon as possible */
    if (ks_ack_window_push(&p->win, off, bytes, rec) < 0) {
        free(rec);
        return;
    }
    ks_win_entry_t *e = ks_ack_window_get(&p->win, off);
    if (p->restore_att_i < r->attempt_cnt && r->attempts[p->restore_att_i].offset == off) {
        uint32_t a = r->attempts[p->restore_att_i].attempts;
        e->attempts = (uint16_t)(a > UINT16_MAX ? UINT16_MAX : a);
    }
    ks_key_sched_add(&p->sched, &p->win, e, has_key, kh);
}

/* Serves the consumer queue (records, errors, rebalance callbacks) on every wakeup:
 * polling it is also what keeps the member within max.poll.interval.ms. */
static void drain_consumer(ks_group_t *g, bool pipe_ready)
{
    char buf[256];
    while (pipe_ready && read(g->rk_pipe[0], buf, sizeof(buf)) > 0)
        ;
    rd_kafka_message_t *m;
    while ((m = rd_kafka_consumer_poll(g->rk, 0)))
        handle_message(g, NULL, m);
}

/* librdkafka 2.0.2 stops fetching a partition whose queue is at queued.min.messages or
 * queued.max.messages.kbytes, and looks again only when its broker thread next wakes:
 * up to a second later when no other fetch is running. An asynchronous seek to where
 * the queue ends wakes it now. Only done once the queue is empty, so the seek's version
 * barrier throws nothing away. */
static void part_wake_fetcher(ks_group_t *g, part_t *p)
{
    if (p->win.end_offset < 0)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = p->win.end_offset;
    rd_kafka_error_t *err = rd_kafka_seek_partitions(g->rk, l, 0);
    if (err) {
        ks_warn(g->log_name, "%s[%d]: waking the fetcher: %s", p->topic, p->partition,
                rd_kafka_error_string(err));
        rd_kafka_error_destroy(err);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* Moves records from p's queue into its window while the window has room (a window may
 * pass window.max_bytes by one batch, and its memory share by about one record). */
static void intake_part(ks_group_t *g, part_t *p)
{
    size_t len = rd_kafka_queue_length(p->q);
    p->q_len = len; /* one look per pass: it takes librdkafka's queue lock */
    if ((int64_t)len * 2 >= g->q_max_msgs ||
        (double)len * p->q_avg_bytes * 2 >= (double)g->q_max_bytes)
        p->q_was_full = true;
    /* In batches: one call for many records. librdkafka 2.0.x's batch consume mishandles
     * pause and resume (fixed in 2.1.0); ksidecar's pauses (part_check_bound), seeks and
     * rebalances all run on this thread between batches. */
    rd_kafka_message_t *ms[INTAKE_BATCH];
    while (part_has_room(g, p)) {
        size_t room = (size_t)g->cfg->window_max_records - ks_ack_window_count(&p->win);
        /* Records that fit the share at the last batch's average size, at least one. */
        double per = p->q_avg_bytes + (double)ks_mem_record_overhead();
        double fit = (double)part_room_bytes(g, p) / per + 1;
        if (fit < (double)room)
            room = (size_t)fit;
        ssize_t n =
            rd_kafka_consume_batch_queue(p->q, 0, ms, room < INTAKE_BATCH ? room : INTAKE_BATCH);
        if (n <= 0) {
            if (p->q_was_full)
                part_wake_fetcher(g, p);
            p->q_was_full = false;
            return;
        }
        size_t bytes = 0;
        for (ssize_t k = 0; k < n; k++) {
            bytes += ms[k]->len + ms[k]->key_len;
            handle_message(g, p, ms[k]);
        }
        p->q_len = p->q_len > (size_t)n ? p->q_len - (size_t)n : 0;
        p->q_avg_bytes = (double)bytes / (double)n;
    }
}

/* Fills the windows that have room, then marks each partition at its bound PAUSED (or
 * ACTIVE again), records from the consumer queue included. */
static void intake(ks_group_t *g)
{
    g->mem_pressed = ks_mem_pressed(g->cfg->memory_max_bytes);
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (p->q && !p->kpaused && ks_pstate_deliverable(p->state) && part_has_room(g, p))
            intake_part(g, p);
        part_check_bound(g, p);
        part_tally(p);
    }
}

static void drain_dlq(ks_group_t *g)
{
    char buf[256];
    while (read(g->dlq_pipe[0], buf, sizeof(buf)) > 0)
        ;
    if (g->dlq_rk)
        rd_kafka_poll(g->dlq_rk, 0);
}

static size_t total_leased(const ks_group_t *g)
{
    size_t n = 0;
    for (size_t i = 0; i < g->part_cnt; i++)
        n += g->parts[i]->leased;
    return n;
}

static int64_t idle_due(const ks_group_t *g)
{
    if (g->is_static || g->cfg->idle_close_ms <= 0)
        return INT64_MAX;
    return g->last_activity_ms + g->cfg->idle_close_ms;
}

static void arm_timer(ks_group_t *g, int64_t now)
{
    int64_t next = g->next_commit_ms;
    for (cmd_t *c = g->wait_head; c; c = c->next_wait)
        if (c->u.fetch.wait_until_ms < next)
            next = c->u.fetch.wait_until_ms;
    int64_t due = ks_leases_next_due(&g->leases);
    if (due < next)
        next = due;
    if (idle_due(g) < next)
        next = idle_due(g);
    if (g->draining && g->drain_until_ms < next)
        next = g->drain_until_ms;
    if (next < now + 1)
        next = now + 1;
    if (next == g->timer_due_ms)
        return; /* armed for that already: one syscall less per wakeup */
    g->timer_due_ms = next;
    /* ks_now_ms is CLOCK_MONOTONIC in ms, like the timer's absolute time. */
    struct itimerspec its = {
        .it_value = {.tv_sec = next / 1000, .tv_nsec = (next % 1000) * 1000000}};
    timerfd_settime(g->tfd, TFD_TIMER_ABSTIME, &its, NULL);
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
    if (g->dlq_rk)
        rd_kafka_flush(g->dlq_rk, 5000);
}

static void *loop_main(void *arg)
{
    ks_group_t *g = arg;
    ks_owner_enter(&g->owner);
    ks_info(g->log_name, "group loop started (ordering %s%s%s)",
            ks_ordering_str((ks_ordering_t)g->gconf->ordering),
            *g->gconf->dead_letter_topic ? ", dead letters to " : "", g->gconf->dead_letter_topic);
    g->next_commit_ms = ks_now_ms() + g->cfg->commit_interval_ms;
    g->last_activity_ms = ks_now_ms();
    if (g->is_static)
        subscribe_to(g, g->gconf->topics, g->gconf->topic_cnt);

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
        bool timer = false, rk_ev = false, dlq_ev = false;
        for (int i = 0; i < n; i++) {
            timer = timer || evs[i].data.fd == g->tfd;
            rk_ev = rk_ev || evs[i].data.fd == g->rk_pipe[0];
            dlq_ev = dlq_ev || evs[i].data.fd == g->dlq_pipe[0];
        }
        if (timer) {
            uint64_t ticks;
            ssize_t r = read(g->tfd, &ticks, sizeof(ticks));
            (void)r;
            g->timer_due_ms = 0;
        }
        drain_consumer(g, rk_ev);
        if (dlq_ev)
            drain_dlq(g);
        int64_t now = ks_now_ms();
        while (g->deferred) {
            cmd_t *c = g->deferred;
            g->deferred = c->next_wait;
            handle_cmd(g, c, now);
        }
        for (ks_inbox_node_t *nd = ks_inbox_take_all(&g->inbox), *next; nd; nd = next) {
            next = nd->next;
            handle_cmd(g, (cmd_t *)nd, now);
        }
        intake(g); /* after the acks above made room */
        ks_leases_run(&g->leases, now, lease_event, g);
        commit_held(g, now);
        serve_waiting(g, now);
        if (now >= g->next_commit_ms) {
            commit_moved(g, false, NULL);
            subs_reap(g, now);
            g->next_commit_ms = now + g->cfg->commit_interval_ms;
        }
        if (g->draining && (total_leased(g) == 0 || now >= g->drain_until_ms)) {
            if (total_leased(g))
                ks_warn(g->log_name,
                        "shutdown: %zu records still leased; they will be "
                        "redelivered",
                        total_leased(g));
            g->stopping = true;
        } else if (now >= idle_due(g)) {
            if (!g->wait_head && total_leased(g) == 0 && g->idle_fn(g, g->idle_opaque)) {
                ks_info(g->log_name, "idle for %d ms with no subscribers: closing",
                        g->cfg->idle_close_ms);
                g->delivering = false;
                g->stopping = true;
            } else {
                g->last_activity_ms = now; /* busy after all: look again later */
            }
        }
    }

    /* Refuse new commands, answer what is still queued, commit, leave. */
    g->delivering = false;
    for (ks_inbox_node_t *nd = ks_inbox_close(&g->inbox), *next; nd; nd = next) {
        next = nd->next;
        handle_cmd(g, (cmd_t *)nd, ks_now_ms());
    }
    while (g->deferred) {
        cmd_t *c = g->deferred;
        g->deferred = c->next_wait;
        handle_cmd(g, c, ks_now_ms());
    }
    serve_waiting(g, ks_now_ms());
    close_consumer(g);
    ks_info(g->log_name, "group loop stopped: committed and left the group");
    ks_owner_leave(&g->owner);
    atomic_store(&g->exited, true);
    return NULL;
}

/* ---- setup ---- */

/* From librdkafka's "Group "g" changed join state A -> B (state S)" debug line: whether a
 * JoinGroup or SyncGroup is in flight. Returns -1 for a line that is not one. */
static int join_state_line(const char *fac, const char *buf)
{
    if (strcmp(fac, "CGRPJOINSTATE") != 0)
        return -1;
    const char *to = strstr(buf, "-> ");
    if (!to)
        return -1;
    to += 3;
    return strncmp(to, "wait-join", 9) == 0 || strncmp(to, "wait-metadata", 13) == 0 ||
           strncmp(to, "wait-sync", 9) == 0;
}

/* @locality any librdkafka thread */
static void rk_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    int joining = join_state_line(fac, buf);
    if (joining >= 0 && rd_kafka_type(rk) == RD_KAFKA_CONSUMER) {
        ks_group_t *g = rd_kafka_opaque(rk);
        atomic_store(&g->cgrp_joining, joining == 1);
    }
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
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        snprintf(g->down, sizeof(g->down), "Kafka is unreachable: %s", reason);
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

static int64_t conf_int(rd_kafka_t *rk, const char *name)
{
    char buf[64];
    size_t n = sizeof(buf);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), name, buf, &n) != RD_KAFKA_CONF_OK)
        return INT64_MAX;
    return strtoll(buf, NULL, 10);
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

ks_group_t *ks_group_start(const char *name, const ks_config_t *cfg, const ks_group_conf_t *gconf,
                           bool is_static, uint32_t instance, ks_group_idle_fn *idle_fn,
                           void *idle_opaque, char *err, size_t errsize)
{
    ks_group_t *g = calloc(1, sizeof(*g));
    if (!g)
        abort();
    g->name = ks_xstrdup(name);
    snprintf(g->log_name, sizeof(g->log_name), "group:%s", name);
    g->group_hash = ks_ack_id_group_hash(name);
    g->instance = instance;
    g->cfg = cfg;
    g->gconf = gconf;
    g->is_static = is_static;
    g->idle_fn = idle_fn;
    g->idle_opaque = idle_opaque;
    g->delivering = true;
    g->epfd = g->tfd = g->rk_pipe[0] = g->rk_pipe[1] = g->dlq_pipe[0] = g->dlq_pipe[1] = -1;
    g->inbox.efd = -1;
    ks_leases_init(&g->leases);
    atomic_init(&g->exited, false);
    atomic_init(&g->cgrp_joining, false);
    atomic_init(&g->owner.tid, 0);

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char q_kb_s[32];
    snprintf(q_kb_s, sizeof(q_kb_s), "%lld",
             (long long)ks_mem_kafka_queue_kbytes(cfg->memory_max_bytes));
    /* Defaults a proxy needs; the user's kafka.* may override the soft ones. */
    if (conf_set(conf, "auto.offset.reset", "earliest", err, errsize) < 0 ||
        conf_set(conf, "partition.assignment.strategy", "cooperative-sticky", err, errsize) < 0 ||
        /* Each partition's records wait in its own queue (see part_add), so these limits
         * are per partition; the bytes one from the memory budget (mem_budget.h). */
        conf_set(conf, "queued.max.messages.kbytes", q_kb_s, err, errsize) < 0 ||
        conf_set(conf, "queued.min.messages", "100000", err, errsize) < 0 ||
        /* One Fetch at a time goes to a broker. A partition that becomes fetchable while
         * a Fetch for partitions at their end waits on the broker waits with it, up to
         * this long: at 500 ms that stalled the tail of a 2M-record drain by ~350 ms in
         * about half the runs (its fetch debug log shows it). */
        conf_set(conf, "fetch.wait.max.ms", "100", err, errsize) < 0 ||
        conf_set(conf, "fetch.max.bytes", "8388608", err, errsize) < 0 ||
        /* A killed sidecar's partitions wait this long for another member: librdkafka's
         * 45 s default left them idle ~44 s after a kill -9, 10 s takes ~11 s. It stays above
         * the broker's default group.min.session.timeout.ms (6 s) with room for a broker or
         * network hiccup; heartbeats every second give it ten chances. A restarted process
         * takes its partitions back at once with kafka.group.instance.id (README). */
        conf_set(conf, "session.timeout.ms", "10000", err, errsize) < 0 ||
        conf_set(conf, "heartbeat.interval.ms", "1000", err, errsize) < 0)
        goto fail_conf;
    for (size_t i = 0; i < cfg->kafka_cnt; i++)
        if (conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value, err, errsize) < 0)
            goto fail_conf;
    /* The cgrp debug log is how commit_moved learns that librdkafka is joining: add
     * "cgrp" to whatever the user asked for (its lines are logged at debug level). */
    char dbg[512];
    size_t dbg_n = sizeof(dbg);
    if (rd_kafka_conf_get(conf, "debug", dbg, &dbg_n) != RD_KAFKA_CONF_OK)
        dbg[0] = '\0';
    if (!strstr(dbg, "cgrp") && !strstr(dbg, "all")) {
        char want[600];
        snprintf(want, sizeof(want), "%s%scgrp", dbg, dbg[0] ? "," : "");
        if (conf_set(conf, "debug", want, err, errsize) < 0)
            goto fail_conf;
    }
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
    g->q_max_msgs = conf_int(g->rk, "queued.min.messages");
    g->max_poll_ms = conf_int(g->rk, "max.poll.interval.ms");
    int64_t q_kb = conf_int(g->rk, "queued.max.messages.kbytes");
    g->q_max_bytes = q_kb < INT64_MAX / 1024 ? q_kb * 1024 : INT64_MAX;
    g->q_kbytes = q_kb;
    g->fetch_max_bytes = conf_int(g->rk, "fetch.message.max.bytes");

    if (ks_inbox_init(&g->inbox) < 0 || pipe2(g->rk_pipe, O_NONBLOCK | O_CLOEXEC) < 0 ||
        pipe2(g->dlq_pipe, O_NONBLOCK | O_CLOEXEC) < 0 ||
        (g->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
        (g->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        snprintf(err, errsize, "group %s: making its fds: %s", name, strerror(errno));
        goto fail;
    }
    rd_kafka_queue_io_event_enable(g->cq, g->rk_pipe[1], "1", 1);
    int fds[4] = {g->rk_pipe[0], ks_inbox_fd(&g->inbox), g->tfd, g->dlq_pipe[0]};
    for (int i = 0; i < 4; i++) {
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
    g->joined = true;
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

static cmd_t *cmd_new(cmd_type_t t)
{
    cmd_t *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->type = t;
    return c;
}

ks_status_t ks_group_fetch(ks_group_t *g, const char *const *topics, size_t topic_cnt,
                           const ks_fetch_opts_t *opts, ks_fetch_cb *cb, void *opaque)
{
    cmd_t *c = cmd_new(CMD_FETCH);
    c->u.fetch.topics = ks_strv_pack(topics, topic_cnt);
    c->u.fetch.topic_cnt = topic_cnt;
    c->u.fetch.max = opts->max;
    c->u.fetch.deadline_ms = opts->deadline_ms > 0 ? opts->deadline_ms : g->cfg->lease_deadline_ms;
    snprintf(c->u.fetch.sub, sizeof(c->u.fetch.sub), "%s",
             opts->subscriber && *opts->subscriber ? opts->subscriber : DEFAULT_SUB);
    c->u.fetch.wait_until_ms = ks_now_ms() + opts->wait_ms;
    c->u.fetch.credit_records = opts->credit_records;
    c->u.fetch.credit_bytes = opts->credit_bytes;
    c->u.fetch.max_bytes = opts->max_bytes;
    c->u.fetch.notify = opts->notify != 0;
    c->u.fetch.confirm = opts->confirm != 0;
    c->u.fetch.hold_stalled = opts->confirm && opts->hold_stalled;
    c->u.fetch.cb = cb;
    c->u.fetch.opaque = opaque;
    return post(g, c);
}

ks_status_t ks_group_settle(ks_group_t *g, ks_settle_op_t op, int64_t ms, const char *reason,
                            const char *const *ids, size_t n, ks_ack_cb *cb, void *opaque)
{
    cmd_t *c = cmd_new(CMD_SETTLE);
    c->u.settle.op = op;
    c->u.settle.ms = ms;
    c->u.settle.reason = reason && *reason ? ks_xstrdup(reason) : NULL;
    c->u.settle.ids = ks_strv_pack(ids, n);
    c->u.settle.n = n;
    /* Parsed here, on the edge's thread, so the group loop does not spend its time on it. */
    c->u.settle.refs = malloc((n ? n : 1) * sizeof(ks_ack_ref_t));
    if (!c->u.settle.refs)
        abort();
    for (size_t i = 0; i < n; i++)
        ks_ack_id_parse_ref(c->u.settle.ids[i], &c->u.settle.refs[i]);
    c->u.settle.cb = cb;
    c->u.settle.opaque = opaque;
    return post(g, c);
}

ks_status_t ks_group_seek(ks_group_t *g, const char *topic, int32_t partition, ks_seek_kind_t kind,
                          int64_t value, ks_seek_cb *cb, void *opaque)
{
    cmd_t *c = cmd_new(CMD_SEEK);
    snprintf(c->u.seek.topic, sizeof(c->u.seek.topic), "%s", topic);
    c->u.seek.partition = partition;
    c->u.seek.kind = kind;
    c->u.seek.value = value;
    c->u.seek.cb = cb;
    c->u.seek.opaque = opaque;
    return post(g, c);
}

void ks_group_release(ks_group_t *g, const char *subscriber)
{
    cmd_t *c = cmd_new(CMD_RELEASE);
    snprintf(c->u.release_sub, sizeof(c->u.release_sub), "%s", subscriber);
    post(g, c);
}

void ks_group_release_unread(ks_group_t *g, const char *subscriber)
{
    cmd_t *c = cmd_new(CMD_RELEASE_UNREAD);
    snprintf(c->u.release_sub, sizeof(c->u.release_sub), "%s", subscriber);
    post(g, c);
}

void ks_group_delivered(ks_group_t *g, uint64_t token, bool taken)
{
    cmd_t *c = cmd_new(CMD_DELIVERED);
    c->u.delivered.token = token;
    c->u.delivered.taken = taken;
    post(g, c);
}

ks_status_t ks_group_status(ks_group_t *g, ks_group_status_cb *cb, void *opaque)
{
    cmd_t *c = cmd_new(CMD_STATUS);
    c->u.status.cb = cb;
    c->u.status.opaque = opaque;
    return post(g, c);
}

void ks_group_stop_delivering(ks_group_t *g)
{
    post(g, cmd_new(CMD_STOP_DELIVERING));
}

void ks_group_request_shutdown(ks_group_t *g, int64_t ack_deadline_ms)
{
    cmd_t *c = cmd_new(CMD_SHUTDOWN);
    c->u.ack_deadline_ms = ack_deadline_ms;
    post(g, c);
}

int ks_group_join(ks_group_t *g, int64_t deadline_ms)
{
    if (g->joined)
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
    g->joined = true;
    return 0;
}

/* True if the consumer's assignment strategies include cooperative-sticky. */
static bool uses_cooperative_sticky(rd_kafka_t *rk)
{
    char buf[256];
    size_t n = sizeof(buf);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), "partition.assignment.strategy", buf, &n) !=
        RD_KAFKA_CONF_OK)
        return true; /* unknown: assume the worst */
    return strstr(buf, "cooperative-sticky") != NULL;
}

void ks_group_destroy(ks_group_t *g)
{
    bool keep = false; /* the struct outlives a handle left alive (below) */
    if (g->dlq_rk) {
        rd_kafka_queue_t *q = rd_kafka_queue_get_main(g->dlq_rk);
        rd_kafka_queue_io_event_enable(q, -1, NULL, 0);
        rd_kafka_queue_destroy(q);
        rd_kafka_destroy(g->dlq_rk);
    }
    if (g->rk) {
        if (g->cq) {
            rd_kafka_queue_io_event_enable(g->cq, -1, NULL, 0);
            rd_kafka_queue_destroy(g->cq);
        }
        /* librdkafka 2.0.2 (#4312, fixed in 2.3.0) asserts in
         * rd_kafka_sticky_assignor_state_destroy when a cooperative-sticky consumer that
         * joined but never got its assignment is destroyed: a SIGTERM mid-join aborted the
         * process (exit -6). Such a handle is left to the process exit instead; it holds
         * no partitions and has already left the group. Its threads may still call
         * rk_log_cb, which reads the group through the handle's opaque: the group's own
         * struct is kept too (everything else it holds is freed). */
        if (!g->ever_assigned && uses_cooperative_sticky(g->rk)) {
            ks_warn(g->log_name, "consumer never got an assignment: its handle is not destroyed "
                                 "(librdkafka 2.0.2 would abort, its issue #4312)");
            keep = true;
        } else {
            rd_kafka_destroy(g->rk);
        }
    }
    int fds[] = {g->epfd, g->tfd, g->rk_pipe[0], g->rk_pipe[1], g->dlq_pipe[0], g->dlq_pipe[1]};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (g->inbox.efd >= 0)
        ks_inbox_destroy(&g->inbox);
    ks_leases_destroy(&g->leases);
    dlv_forget(g, 0, NULL);
    for (size_t i = 0; i < g->sub_cnt; i++)
        free(g->subs[i]);
    free(g->subs);
    free_strv(g->topics, g->topic_cnt);
    free(g->parts);
    free(g->name);
    g->name = NULL;
    if (!keep)
        free(g);
}
