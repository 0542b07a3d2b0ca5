/* group_deliver.c: leasing records to subscribers: parked fetches, credits, batches, confirmed
 * deliveries and released subscribers. */
#include "group_int.h"
#include "otel.h"
#include "schema_gate.h"

#include <unistd.h>

sub_t *sub_get(ks_group_t *g, const char *name, int64_t now)
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

/* Forgets subscribers that hold nothing and have not fetched for a while. */
void subs_reap(ks_group_t *g, int64_t now)
{
    int64_t idle = g->cfg->idle_close_ms > 0 ? g->cfg->idle_close_ms : 60000;
    for (size_t i = 0; i < g->sub_cnt;) {
        sub_t *s = g->subs[i];
        bool parked = false;
        for (cmd_t *c = g->wait_head; c; c = c->next_wait)
            if (!strcmp(c->req.u.fetch.opts.subscriber, s->name))
                parked = true;
        if (!parked && s->out_records == 0 && now - s->last_seen_ms > idle) {
            for (size_t k = 0; k < g->part_cnt; k++)
                ks_key_sched_forget_sub(&g->parts[k]->sched, s->id);
            g->subs[i] = g->subs[--g->sub_cnt];
            free(s);
        } else {
            i++;
        }
    }
}

/* e, LEASED but never taken by the transport, goes back: READY, its attempt not
 * counted. */
static void unsent_back(ks_group_t *g, part_t *p, ks_win_entry_t *e, int64_t now)
{
    unlease(g, p, e);
    chain_back(g, p, e, now);
    if (e->attempts > 0)
        e->attempts--;
    ks_lease_release(&g->leases, &p->win, p, e, now, 0);
    ks_key_sched_requeue(&p->sched, &p->win, e);
}

/* Counts a delivered record's age: from its Kafka timestamp, when it has one, to now. */
static void record_age(ks_group_t *g, const ks_win_entry_t *e, int64_t now)
{
    const rec_t *r = e->msg;
    if (r && r->timestamp >= 0)
        ks_hist_add(&g->st_record_age_at_delivery, now - r->timestamp);
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
void dlv_forget(ks_group_t *g, uint32_t sub_id, const part_t *p)
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
size_t drop_leases(ks_group_t *g, part_t *p)
{
    size_t n = p->leased;
    for (size_t i = 0; i < ks_ack_window_count(&p->win) && p->leased; i++) {
        ks_win_entry_t *e = ks_ack_window_at(&p->win, i);
        if (e->state == KS_REC_LEASED)
            unlease(g, p, e);
    }
    return n;
}

static bool wants_topic(const cmd_t *c, const char *topic)
{
    for (size_t i = 0; i < c->req.u.fetch.topic_cnt; i++)
        if (strcmp(c->req.u.fetch.topics[i], topic) == 0)
            return true;
    return false;
}

/* The records of one partition share one copy of its topic in a batch. seen holds the last
 * partition met in each of 16 slots (by partition number): true when p is not that one, and
 * so needs a copy of its own. A batch takes records from its partitions in turn, so they
 * rarely come two in a row. */
static bool new_topic_copy(const part_t **seen, const part_t *p)
{
    const part_t **sl = &seen[(uint32_t)p->partition & 15];
    if (*sl == p)
        return false;
    *sl = p;
    return true;
}

/* Copies the leased entries into one batch the API thread can own. */
static ks_batch_t *build_batch(ks_group_t *g, part_t **eparts, ks_win_entry_t **ents, size_t n,
                               bool ordered)
{
    size_t need = align8(n * sizeof(ks_record_t));
    const part_t *seen[16] = {0};
    for (size_t i = 0; i < n; i++) {
        const rec_t *r = ents[i]->msg;
        if (new_topic_copy(seen, eparts[i]))
            need += align8(strlen(eparts[i]->topic) + 1);
        need += align8(r->key_len + 1) + align8(r->value_len + 1) +
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
    b->key_format = (uint8_t)g->key_format;
    b->value_format = (uint8_t)g->value_format;
    char *pos = arena + align8(n * sizeof(ks_record_t));
#define PUT(src, len)                                                                              \
    ({                                                                                             \
        char *_d = pos;                                                                            \
        memcpy(_d, (src), (len));                                                                  \
        _d[(len)] = '\0';                                                                          \
        pos += align8((len) + 1);                                                                  \
        _d;                                                                                        \
    })
    memset(seen, 0, sizeof(seen));
    const char *copy[16] = {0};
    for (size_t i = 0; i < n; i++) {
        const rec_t *m = ents[i]->msg;
        const part_t *p = eparts[i];
        ks_record_t *r = &b->recs[i];
        const char **topic = &copy[(uint32_t)p->partition & 15];
        if (new_topic_copy(seen, p)) /* the same calls as in the sizing loop above */
            *topic = PUT(p->topic, strlen(p->topic));
        r->topic = *topic;
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
        r->ordering_chain = ordered ? ks_key_sched_chain_id(ents[i]) : 0;
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

ks_batch_t *batch_error(ks_status_t st, const char *msg)
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
    int64_t *since;   /* tracing on: where each record's receive span starts */
    size_t pcur;      /* round-robin cursor over partitions */
    uint32_t run;     /* records taken in a row from the partition at pcur */
    size_t next_same; /* serve_waiting: its subscriber's next parked fetch, or SIZE_MAX */
    bool dry;
} take_t;

/* Wakes the group loop when a schema fetch settles: on the registry's thread. */
static void schema_wake(void *ctx)
{
    ks_group_t *g = ctx;
    uint64_t one = 1;
    ssize_t r = write(g->inbox.efd, &one, sizeof(one));
    (void)r;
}

/* Whether e's key and value may go: the schema the group's formats need is in the registry's
 * cache (a lookup that never waits). Otherwise a fetch runs on the registry's thread, the
 * record waits (p->schema_wait, its stall reason schema_registry) and schema_wake calls the
 * loop back. The decoding itself runs on the edge that sends the record, at encode time: it
 * is the costly part, and the edges' threads are many while this loop is one. */
typedef enum { SCHEMA_GO, SCHEMA_WAIT, SCHEMA_DEAD } schema_step_t;

/* A key or value a schema format cannot decode for what the group loop sees (not in the wire
 * format, or an id the registry lacks), with group.decode_errors dead_letter and a dead-letter
 * topic: its reason goes into e. Corrupt bytes after a known id are found by the edge only, and
 * delivered with their decode error. */
static bool schema_dead(ks_group_t *g, ks_win_entry_t *e, ks_rec_format_t f, int64_t id,
                        ks_gate_t gate, const char *err)
{
    if (!*g->gconf->dead_letter_topic || !g->gconf->decode_errors ||
        strcmp(g->gconf->decode_errors, "dead_letter"))
        return false;
    char why[320];
    if (id < 0 && f != KS_FMT_AUTO)
        snprintf(why, sizeof(why), "decode: not in the schema wire format");
    else if (id >= 0 && gate == KS_GATE_UNKNOWN)
        snprintf(why, sizeof(why), "decode: unknown schema id %lld: %.250s", (long long)id, err);
    else
        return false;
    free(e->reason);
    e->reason = ks_xstrdup(why);
    return true;
}

static schema_step_t schema_ready(ks_group_t *g, part_t *p, ks_win_entry_t *e, ks_rec_format_t kf,
                                  ks_rec_format_t vf)
{
    const rec_t *r = e->msg;
    int64_t ids[2] = {-1, -1};
    ks_rec_format_t fs[2] = {vf, kf};
    bool has[2] = {vf != KS_FMT_BINARY && r->has_value, kf != KS_FMT_BINARY && r->has_key};
    if (has[0])
        ids[0] = ks_schema_gate_id(rec_value(r), r->value_len);
    if (has[1])
        ids[1] = ks_schema_gate_id(rec_key(r), r->key_len);
    for (int i = 0; i < 2; i++) {
        char err[256] = "";
        ks_gate_t gate = KS_GATE_OK;
        if (!has[i])
            continue;
        if (ids[i] >= 0)
            gate = ks_schema_gate((int32_t)ids[i], schema_wake, g, err, sizeof(err));
        if (gate == KS_GATE_WAIT) {
            if (!p->schema_wait)
                ks_info(g->log_name, "%s[%d]: offset %lld waits for schema id %lld: %s", p->topic,
                        p->partition, (long long)e->offset, (long long)ids[i], err);
            p->schema_wait = true;
            return SCHEMA_WAIT;
        }
        if (schema_dead(g, e, fs[i], ids[i], gate, err))
            return SCHEMA_DEAD;
    }
    if (p->schema_wait)
        ks_info(g->log_name, "%s[%d]: schemas fetched; deliveries resume", p->topic, p->partition);
    p->schema_wait = false;
    return SCHEMA_GO;
}

/* Tracing on: keeps when e became ready (fetched, or its last lease ended) for the receive span,
 * before its lease overwrites leased_at_ms. */
static void take_since(take_t *t, const ks_win_entry_t *e)
{
    if (!t->since && !(t->since = malloc(t->cap * sizeof(*t->since))))
        abort();
    t->since[t->n] = e->leased_at_ms;
}

/* How many records in a row take_one takes from one partition before the next one's turn. */
#define TAKE_RUN 64

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
        /* One record of a chain at a time, unless the subscriber processes them in order. */
        uint32_t limit =
            t->c->req.u.fetch.opts.ordered_batches ? (uint32_t)g->gconf->max_in_flight_per_key : 1;
        ks_win_entry_t *e =
            ks_key_sched_take_for(&p->sched, &p->win, part_hold_from(g, p), s->id, limit);
        if (!e)
            continue;
        const ks_fetch_opts_t *fo = &t->c->req.u.fetch.opts;
        ks_rec_format_t kf = fo->key_format ? (ks_rec_format_t)(fo->key_format - 1) : g->key_format;
        ks_rec_format_t vf =
            fo->value_format ? (ks_rec_format_t)(fo->value_format - 1) : g->value_format;
        schema_step_t step = (kf | vf) ? schema_ready(g, p, e, kf, vf) : SCHEMA_GO;
        if (step == SCHEMA_WAIT) {
            ks_key_sched_requeue(&p->sched, &p->win, e);
            continue;
        }
        if (step == SCHEMA_DEAD) { /* at once, as a reject: no client sees it */
            dead_letter(g, p, e);
            if (e->state == KS_REC_DEAD_LETTERING)
                k--; /* on to the partition's next record (unsigned: wraps back to k) */
            continue;
        }
        int64_t max_bytes = t->c->req.u.fetch.opts.max_bytes;
        if ((s->out_records > 0 && s->out_bytes + e->bytes > s->credit_bytes) ||
            (t->n > 0 && max_bytes > 0 && t->bytes + (int64_t)e->bytes > max_bytes)) {
            ks_key_sched_requeue(&p->sched, &p->win, e); /* untaken: the last of its chain out */
            t->dry = true;
            return;
        }
        e->flags &= (uint8_t)~KS_WIN_F_TAKEN_BACK;
        if (__builtin_expect(ks_otel_on, 0))
            take_since(t, e);
        if (t->c->req.u.fetch.opts.confirm) {
            /* Counted as delivered, and its lease started, once the transport took it. */
            ks_lease_hold(&p->win, e, s->id, now);
            e->flags |= KS_WIN_F_UNSENT;
        } else {
            if (e->attempts > 0)
                g->st_redelivered++;
            g->st_delivered++;
            record_age(g, e, now);
            ks_lease_grant(&g->leases, &p->win, p, e, s->id, now,
                           t->c->req.u.fetch.opts.deadline_ms);
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
        /* Runs of TAKE_RUN records a partition: a partition's records in a row share its
         * window's cache lines, the ack id writer's head and the client's ack ranges. */
        t->run = k > 0 ? 1 : t->run + 1;
        if (t->run >= TAKE_RUN) {
            t->run = 0;
            idx++;
        }
        t->pcur = idx;
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
    d->deadline_ms = t->c->req.u.fetch.opts.deadline_ms;
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
void handle_delivered(ks_group_t *g, uint64_t token, bool taken, int64_t now)
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
            record_age(g, e, now);
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

void finish_fetch(cmd_t *c, ks_batch_t *b)
{
    c->req.u.fetch.cb(b, c->req.u.fetch.opaque);
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
void serve_waiting(ks_group_t *g, int64_t now)
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
        ts[i].sub = sub_get(g, c->req.u.fetch.opts.subscriber, now);
        ts[i].cap = (size_t)c->req.u.fetch.opts.max;
        ts[i].pcur = g->rr + i;
        ts[i].dry = !group_delivering(g);
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
        bool notify = c->req.u.fetch.opts.notify && ts[i].sub->seen_assign_ver != g->assign_ver;
        if (!group_delivering(g))
            b = batch_error(KS_E_UNAVAILABLE, "ksidecar is shutting down; fetch again elsewhere");
        else if (ts[i].n > 0) {
            b = build_batch(g, ts[i].eparts, ts[i].ents, ts[i].n,
                            c->req.u.fetch.opts.ordered_batches);
            b->bytes = ts[i].bytes;
            if (c->req.u.fetch.opts.confirm)
                dlv_add(g, &ts[i], b);
            if (__builtin_expect(ks_otel_on, 0) && ts[i].since)
                otel_receive(g, ts[i].sub, c->req.u.fetch.opts.transport, ts[i].eparts, ts[i].ents,
                             ts[i].since, ts[i].n);
        } else if ((notify || now >= cmd_wait_until(c)) && g->assign_ver == 0 && *g->down)
            b = batch_error(KS_E_UNAVAILABLE, g->down); /* never joined: not just "no records" */
        else if (notify || now >= cmd_wait_until(c))
            b = calloc(1, sizeof(ks_batch_t)); /* the wait ran out: an empty batch */
        if (b && notify && !b->status)
            attach_assignment(g, c, ts[i].sub, b);
        free(ts[i].ents);
        free(ts[i].eparts);
        free(ts[i].since);
        if (!b) {
            prev = c;
            continue;
        }
        wait_unlink(g, prev, c);
        finish_fetch(c, b);
    }
    free(ts);
}

/* A subscriber is gone: its leases go back now, its parked fetches end. Unsent
 * records count no attempt; with unread (or while it is stalled), none of its leases
 * does. */
void handle_release(ks_group_t *g, const char *name, bool unread)
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
            released += chain_back(g, p, e, now);
            ks_lease_release(&g->leases, &p->win, p, e, now, 0);
            ks_key_sched_requeue(&p->sched, &p->win, e);
            released++;
        }
        ks_key_sched_forget_sub(&p->sched, s->id);
    }
    cmd_t *prev = NULL, *c = g->wait_head;
    while (c) {
        cmd_t *next = c->next_wait;
        if (!strcmp(c->req.u.fetch.opts.subscriber, name)) {
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
