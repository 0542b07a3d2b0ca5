/* group_settle.c: settling leased records (ack, nack, extend), lease expiry, and seek. */
#include "group_int.h"
#include "otel.h"

#define STR_(x) #x
#define STR(x)  STR_(x) /* a macro's value as a string literal */

/* A record is done with one delivery (nack, expiry, delay over): dead-letter it once
 * it reached max_attempts and a dead-letter topic is set, else make it ready again. */
static void requeue(ks_group_t *g, part_t *p, ks_win_entry_t *e)
{
    if (*g->gconf->dead_letter_topic && ks_win_attempts_counted(e) >= g->gconf->max_attempts) {
        dead_letter(g, p, e);
        return;
    }
    (void)ks_rec_move(e, KS_REC_READY);
    ks_key_sched_requeue(&p->sched, &p->win, e);
}

/* The group's retry policy's delay before e's next delivery, from its attempts counted (restored
 * from the commit metadata after a restart, so the backoff goes on where it was). 0: at once. */
static int64_t retry_delay(const ks_group_t *g, const ks_win_entry_t *e)
{
    return ks_retry_delay_ms(&g->gconf->retry, ks_win_attempts_counted(e),
                             (double)random() / ((double)RAND_MAX + 1));
}

/* True when s holds its leases while stalled and its oldest batch not yet reported by
 * the edge has waited STALL_GRACE_MS for the transport: the client reads nothing. */
bool sub_stalled(const ks_group_t *g, const sub_t *s, int64_t now)
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

typedef struct back_ctx {
    ks_group_t *g;
    part_t *p;
    int64_t now;
    size_t n;
} back_ctx_t;

/* A later record of a chain going back with an earlier one: its delivery does not count, but
 * keeps its number, so the next gets a new one and an ack of this one stays stale. (One whose
 * batch the transport has not taken yet may still reach the client all the same.) */
static void later_back(void *opaque, ks_win_entry_t *e)
{
    back_ctx_t *x = opaque;
    if (e->uncounted < UINT16_MAX)
        e->uncounted++;
    e->flags |= KS_WIN_F_TAKEN_BACK;
    unlease(x->g, x->p, e);
    ks_lease_release(&x->g->leases, &x->p->win, x->p, e, x->now, 0);
    x->n++;
}

size_t chain_back(ks_group_t *g, part_t *p, ks_win_entry_t *e, int64_t now)
{
    back_ctx_t x = {.g = g, .p = p, .now = now};
    ks_key_sched_back(&p->sched, &p->win, e, later_back, &x);
    if (x.n)
        ks_dbg(g->log_name, "%s[%d]@%lld came back: %zu later records of its chain go back too",
               p->topic, p->partition, (long long)e->offset, x.n);
    return x.n;
}

void lease_event(void *owner, ks_win_entry_t *e, ks_lease_event_t ev, void *opaque)
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
        if (__builtin_expect(ks_otel_on, 0))
            otel_lease_end(g, p, e, "expiry", "lease deadline expired",
                           *g->gconf->dead_letter_topic &&
                               ks_win_attempts_counted(e) >= g->gconf->max_attempts);
        unlease(g, p, e);
        chain_back(g, p, e, now);
        ks_key_sched_narrow(&p->sched, e);
        ks_dbg(g->log_name, "%s[%d]@%lld: lease expired after attempt %u", p->topic, p->partition,
               (long long)e->offset, ks_win_attempts_counted(e));
        if (!e->reason)
            e->reason = ks_xstrdup("lease deadline expired");
        int64_t delay = retry_delay(g, e);
        bool exhausted =
            *g->gconf->dead_letter_topic && ks_win_attempts_counted(e) >= g->gconf->max_attempts;
        if (delay > 0 && !exhausted) { /* back to ready when it is over (this callback) */
            (void)ks_lease_release(&g->leases, &p->win, p, e, now, delay);
            return;
        }
    }
    requeue(g, p, e);
}

static ks_ack_result_t settle_one(ks_group_t *g, const cmd_t *c, size_t i, int64_t now)
{
    const ks_ack_ref_t id = c->refs[i]; /* parsed on the caller's thread */
    if (!id.ok)
        return (ks_ack_result_t){
            .status = KS_E_INVALID,
            id.range ? "malformed ack id range: the offset field must be "
                       "<first>~<last>, first <= last, at most " STR(KS_ACK_RANGE_MAX) " offsets"
                     : "malformed ack id"};
    if (id.group_hash != g->group_hash)
        return (ks_ack_result_t){.status = KS_E_INVALID, "ack id belongs to another group"};
    if (id.instance != g->instance)
        return (ks_ack_result_t){.status = KS_E_STALE,
                                 "stale ack id: it was issued by an earlier ksidecar "
                                 "process; the record will be redelivered"};
    part_t *p = part_find(g, id.topic, id.partition);
    if (!p)
        return (ks_ack_result_t){.status = KS_E_STALE,
                                 "stale ack id: its partition is no longer "
                                 "assigned to this process"};
    if (p->epoch != id.epoch)
        return (ks_ack_result_t){.status = KS_E_STALE,
                                 "stale ack id: its partition was reassigned "
                                 "since delivery (epoch changed)"};
    ks_win_entry_t *e = ks_ack_window_get(&p->win, id.offset);
    if (!e) {
        /* Committed past: which of the record's ids was acked is no longer known, so this
         * one may be stale, and an OK could claim an ack that never happened. */
        if (ks_ack_window_ack(&p->win, id.offset) == KS_ACK_DUPLICATE)
            return (ks_ack_result_t){.status = KS_E_STALE,
                                     "already committed: the record was acked "
                                     "(under this ack id or a newer one) and its "
                                     "offset committed; nothing to redo"};
        return (ks_ack_result_t){.status = KS_E_NOT_FOUND,
                                 "unknown ack id: no delivered record has it"};
    }
    if ((e->flags & KS_WIN_F_TAKEN_BACK) && e->state != KS_REC_LEASED && id.attempt == e->attempts)
        return (ks_ack_result_t){.status = KS_E_STALE,
                                 "stale ack id: the record was taken back before it "
                                 "was processed (an earlier record of its ordering "
                                 "chain came back) and will be delivered again"};
    if (e->attempts == 0)
        return (ks_ack_result_t){.status = KS_E_NOT_FOUND,
                                 "unknown ack id: no delivered record has it"};
    if (e->attempts != id.attempt)
        return (ks_ack_result_t){.status = KS_E_STALE,
                                 "stale ack id: the lease ended and the record was "
                                 "delivered again; use the newer ack id"};
    if (e->state == KS_REC_ACKED)
        return (ks_ack_result_t){.status = c->req.u.settle.op == KS_SETTLE_ACK ? KS_OK : KS_E_STALE,
                                 "already acked"};

    switch (c->req.u.settle.op) {
    case KS_SETTLE_ACK:
        if (e->state == KS_REC_DEAD_LETTERING)
            return (ks_ack_result_t){.status = KS_E_STALE, "the record is being dead-lettered"};
        if (e->state == KS_REC_LEASED) {
            ks_hist_add(&g->st_delivery_to_ack, ks_now_ms() - e->leased_at_ms);
            if (__builtin_expect(ks_otel_on, 0))
                otel_lease_end(g, p, e, "ack", NULL, false);
            unlease(g, p, e);
        }
        mark_done(g, p, e);
        ks_ack_window_ack_entry(&p->win, e);
        g->st_acked++;
        p->ct.acks++;
        part_check_bound(g, p);
        return (ks_ack_result_t){.status = KS_OK, "acked"};
    case KS_SETTLE_NACK: {
        if (e->state != KS_REC_LEASED)
            return (ks_ack_result_t){.status = KS_E_STALE,
                                     "not leased: the lease already ended (expired "
                                     "or nacked) and the record will be redelivered"};
        if (__builtin_expect(ks_otel_on, 0))
            otel_lease_end(g, p, e, "nack", c->req.u.settle.reason,
                           *g->gconf->dead_letter_topic &&
                               (c->req.u.settle.dead_letter ||
                                ks_win_attempts_counted(e) >= g->gconf->max_attempts));
        unlease(g, p, e);
        chain_back(g, p, e, now);
        ks_key_sched_narrow(&p->sched, e);
        g->st_nacked++;
        if (c->req.u.settle.reason) {
            free(e->reason);
            e->reason = ks_xstrdup(c->req.u.settle.reason);
        }
        /* A terminal reject takes the exhausted record's path, whatever its attempts. */
        bool reject = c->req.u.settle.dead_letter;
        if (*g->gconf->dead_letter_topic &&
            (reject || ks_win_attempts_counted(e) >= g->gconf->max_attempts)) {
            (void)ks_rec_move(e, KS_REC_READY);
            dead_letter(g, p, e);
            return (ks_ack_result_t){.status = KS_OK,
                                     reject ? "rejected: dead-lettered"
                                            : "nacked; max_attempts reached: dead-lettered"};
        }
        if (reject) /* nowhere to put it: retried as a nack, so nothing is lost */
            ks_warn(g->log_name,
                    "%s[%d]@%lld: poison record (nack with dead_letter) but the group has no "
                    "dead-letter topic (group.dead_letter_topic): it will be redelivered; "
                    "reason: %s",
                    p->topic, p->partition, (long long)e->offset, e->reason ? e->reason : "none");
        /* A delay given wins; none (0) takes the retry policy's. */
        int64_t delay = c->req.u.settle.ms > 0 ? c->req.u.settle.ms : retry_delay(g, e);
        if (ks_lease_release(&g->leases, &p->win, p, e, now, delay) == 1)
            ks_key_sched_requeue(&p->sched, &p->win, e);
        if (reject)
            return (ks_ack_result_t){.status = KS_OK,
                                     "nacked; no dead-letter topic (group.dead_letter_topic) "
                                     "to reject to: redelivery as for a nack"};
        return (ks_ack_result_t){.status = KS_OK,
                                 c->req.u.settle.ms > 0 ? "nacked; redelivery after the delay"
                                 : delay > 0 ? "nacked; redelivery after the retry policy's delay"
                                             : "nacked; redelivery now"};
    }
    case KS_SETTLE_EXTEND:
        if (ks_lease_extend(&g->leases, &p->win, p, e, now, c->req.u.settle.ms) < 0)
            return (ks_ack_result_t){.status = KS_E_STALE,
                                     "not leased: the lease already ended (expired "
                                     "or nacked) and the record will be redelivered"};
        return (ks_ack_result_t){.status = KS_OK, "deadline extended"};
    }
    return (ks_ack_result_t){.status = KS_E_INTERNAL, "unknown operation"};
}

void handle_settle(ks_group_t *g, cmd_t *c, int64_t now)
{
    ks_ack_result_t *res = calloc(c->nrefs ? c->nrefs : 1, sizeof(*res));
    if (!res)
        abort();
    bool wait = c->req.u.settle.wait_commit;
    if (wait && cwait_full(g) && !c->req.u.settle.confirm_cb) {
        /* Refused before any is taken: nothing to redo but the request. */
        for (size_t i = 0; i < c->nrefs; i++)
            res[i] = (ks_ack_result_t){.status = KS_E_EXHAUSTED,
                                       "too many acks of this group wait for "
                                       "their commit already; retry later or "
                                       "without waiting"};
        wait = false;
    } else {
        for (size_t i = 0; i < c->nrefs; i++) {
            res[i] = settle_one(g, c, i, now);
            g->st_acks_stale += res[i].status == KS_E_STALE;
            g->st_acks_unknown += res[i].status == KS_E_NOT_FOUND;
            g->st_acks_invalid += res[i].status == KS_E_INVALID;
        }
        /* A stream's acks are taken whatever the waiters: its second answer then says
         * ACCEPTED at once. */
        wait = wait && !cwait_full(g);
    }
    if (c->req.u.settle.confirm_cb) {
        /* A stream's wait: the results now, and where their commits stand later. */
        ks_ack_result_t *now_res = ks_xmemdup(res, (c->nrefs ? c->nrefs : 1) * sizeof(*res));
        c->req.u.settle.cb(now_res, c->nrefs, c->req.u.settle.opaque);
    }
    if (wait && cwait_settle(g, c, res, now))
        return; /* answered once its commits are confirmed */
    cwait_answer_cmd(c, res);
    cmd_free(c);
}

/* Answers a seek with r (taken), or with the error st and msg when r is NULL. */
static void seek_done(cmd_t *c, ks_seek_result_t *r, ks_status_t st, const char *msg)
{
    if (!r && !(r = calloc(1, sizeof(*r))))
        abort();
    r->status = st;
    snprintf(r->message, sizeof(r->message), "%s", msg);
    if (st)
        r->offset = -1;
    c->req.u.seek.cb(r, c->req.u.seek.opaque);
    cmd_free(c);
}

/* Where p goes for the seek's kind and value, into *target. Returns KS_OK, or an error with
 * msg. */
static ks_status_t seek_target(ks_group_t *g, part_t *p, const cmd_t *c, int64_t *target, char *msg,
                               size_t msize)
{
    *target = c->req.u.seek.value;
    switch (c->req.u.seek.kind) {
    case KS_SEEK_EARLIEST:
        *target = RD_KAFKA_OFFSET_BEGINNING;
        break;
    case KS_SEEK_LATEST:
        *target = RD_KAFKA_OFFSET_END;
        break;
    case KS_SEEK_TIMESTAMP: {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = c->req.u.seek.value;
        rd_kafka_resp_err_t err = rd_kafka_offsets_for_times(g->rk, l, 5000);
        if (!err)
            err = l->elems[0].err;
        *target = l->elems[0].offset;
        rd_kafka_topic_partition_list_destroy(l);
        if (err) {
            snprintf(msg, msize, "%s", rd_kafka_err2str(err));
            return KS_E_UNAVAILABLE;
        }
        if (*target < 0)
            *target = RD_KAFKA_OFFSET_END; /* no record that late */
        break;
    }
    case KS_SEEK_OFFSET: /* >= 0: ks_cmd_validate */
        break;
    }
    return KS_OK;
}

/* Moves p to the seek's target: its leases turn stale (new epoch), its window starts over.
 * Returns KS_OK with *out filled, or an error with msg (p unchanged). */
static ks_status_t seek_part(ks_group_t *g, part_t *p, const cmd_t *c, ks_seek_part_t *out,
                             char *msg, size_t msize)
{
    int64_t target;
    ks_status_t st = seek_target(g, p, c, &target, msg, msize);
    if (st)
        return st;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = target;
    rd_kafka_error_t *error = rd_kafka_seek_partitions(g->rk, l, 5000);
    rd_kafka_resp_err_t perr = l->elems[0].err;
    rd_kafka_topic_partition_list_destroy(l);
    if (error || perr) {
        snprintf(msg, msize, "seek failed: %s",
                 error ? rd_kafka_error_string(error) : rd_kafka_err2str(perr));
        if (error)
            rd_kafka_error_destroy(error);
        return KS_E_UNAVAILABLE;
    }
    int64_t stale = (int64_t)drop_leases(g, p);
    ks_leases_forget(&g->leases, p);
    ks_ack_window_destroy(&p->win);
    ks_key_sched_destroy(&p->sched);
    ks_commit_meta_free(&p->restore);
    p->restore_ack_i = p->restore_att_i = 0;
    p->held_back = false;
    cwait_part_gone(g, p, true);
    ks_commit_track_init(&p->ct, -1); /* a new position: nothing confirmed on it yet */
    p->epoch = ++g->next_epoch;
    if (p->state == KS_PS_PAUSED)
        part_move(g, p, KS_PS_ACTIVE);
    ks_info(g->log_name, "%s[%d]: seek to %lld; %lld leases are stale now (epoch %u)", p->topic,
            p->partition, (long long)target, (long long)stale, p->epoch);
    *out = (ks_seek_part_t){.partition = p->partition, .offset = target, .stale_leases = stale};
    return KS_OK;
}

/* Whether p is one the seek moves: its partition, or with all_partitions any of its topic;
 * assigned here and delivering. */
static bool seek_covers(const cmd_t *c, const part_t *p)
{
    return !strcmp(p->topic, c->req.u.seek.topic) &&
           (c->req.u.seek.all_partitions || p->partition == c->req.u.seek.partition) &&
           ks_pstate_deliverable(p->state);
}

/* Moves one partition, or every assigned one of the topic, one after another. A partition
 * that fails stops the seek there: the answer is its error, naming the partitions already
 * moved (their leases are stale). */
void handle_seek(ks_group_t *g, cmd_t *c)
{
    const char *topic = c->req.u.seek.topic;
    size_t n = 0;
    for (size_t i = 0; i < g->part_cnt; i++)
        n += seek_covers(c, g->parts[i]);
    char msg[256];
    if (n == 0) {
        if (c->req.u.seek.all_partitions)
            snprintf(msg, sizeof(msg),
                     "no partition of topic \"%.200s\" is assigned to this process", topic);
        else
            snprintf(msg, sizeof(msg),
                     "partition %d of topic \"%.200s\" is not assigned to this process",
                     c->req.u.seek.partition, topic);
        seek_done(c, NULL, KS_E_NOT_FOUND, msg);
        return;
    }
    ks_seek_result_t *r = calloc(1, sizeof(*r) + n * sizeof(r->parts[0]));
    if (!r)
        abort();
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (!seek_covers(c, p))
            continue;
        ks_status_t st = seek_part(g, p, c, &r->parts[r->part_cnt], msg, sizeof(msg));
        if (st) {
            if (r->part_cnt) {
                char whole[256];
                snprintf(whole, sizeof(whole),
                         "partition %d: %.120s (%zu partitions moved before it)", p->partition, msg,
                         r->part_cnt);
                snprintf(msg, sizeof(msg), "%s", whole);
            }
            free(r);
            seek_done(c, NULL, st, msg);
            return;
        }
        r->stale_leases += r->parts[r->part_cnt++].stale_leases;
    }
    r->offset = r->parts[0].offset;
    seek_done(c, r, KS_OK, "");
}
