/* group_confirm.c: commit confirmations: settles that wait until a broker-confirmed commit
 * covers each of their accepted acks. */
#include "group_int.h"

/* An ack counts as durable only once a confirmed commit's offset is past it: the contiguous
 * commit point. An ack above it, carried in the commit metadata, is not claimed: a later
 * commit may have to cut it from the metadata (commit.metadata_max_bytes), and then the
 * next owner delivers it again. Such an ack waits for the records below it. */

/* One accepted ack a settle waits for: its record's partition, as of the ack. */
typedef struct cwait_ent {
    part_t *p; /* cleared when the partition goes */
    int64_t offset;
    size_t i;     /* its result in the settle's results */
    bool settled; /* its result says how it ended */
} cwait_ent_t;

/* A settle waiting for its commits; answered, and freed, once pending is 0 or until_ms came.
 * @locality group loop */
struct cwait {
    struct cwait *next;
    cmd_t *c;
    ks_ack_result_t *res; /* given to the callback */
    int64_t until_ms;
    size_t pending, n;
    cwait_ent_t ents[];
};

static const char lost_revoked[] = "the partition was revoked before a confirmed commit covered "
                                   "the ack; its next owner delivers the record again";
static const char lost_seek[] = "the partition was seeked before a confirmed commit covered the "
                                "ack; the record may be delivered again";

void cwait_answer_cmd(cmd_t *c, ks_ack_result_t *res)
{
    if (c->req.u.settle.confirm_cb)
        c->req.u.settle.confirm_cb(res, c->nrefs, c->req.u.settle.confirm_opaque);
    else
        c->req.u.settle.cb(res, c->nrefs, c->req.u.settle.opaque);
}

/* Fills in every result's commit point as of now (of those whose partition is still here),
 * answers the settle and frees w. */
static void cwait_answer(ks_group_t *g, cwait_t *w)
{
    for (size_t k = 0; k < w->n; k++) {
        cwait_ent_t *e = &w->ents[k];
        if (e->p)
            w->res[e->i].committed_offset = e->p->ct.confirmed;
    }
    cwait_answer_cmd(w->c, w->res);
    cmd_free(w->c);
    free(w);
    g->cwait_cnt--;
}

/* Answers and unlinks every waiter with nothing pending. */
static void cwait_sweep(ks_group_t *g)
{
    for (cwait_t **pp = &g->cwait_head; *pp;) {
        cwait_t *w = *pp;
        if (w->pending) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        cwait_answer(g, w);
    }
}

static void ent_settle(cwait_t *w, cwait_ent_t *e, ks_commit_wait_t to, const char *reason)
{
    ks_ack_result_t *r = &w->res[e->i];
    r->commit = to;
    r->committed_offset = e->p->ct.confirmed;
    if (reason)
        r->reason = reason;
    e->settled = true;
    w->pending--;
}

bool cwait_settle(ks_group_t *g, cmd_t *c, ks_ack_result_t *res, int64_t now)
{
    size_t n = c->nrefs, waits = 0;
    for (size_t i = 0; i < n; i++)
        waits += res[i].status == KS_OK;
    if (!waits)
        return false; /* nothing accepted: the results say why, at once */
    cwait_t *w = calloc(1, sizeof(*w) + waits * sizeof(cwait_ent_t));
    if (!w)
        abort();
    w->c = c;
    w->res = res;
    w->until_ms = now + c->req.u.settle.commit_timeout_ms;
    for (size_t i = 0; i < n; i++) {
        if (res[i].status != KS_OK)
            continue;
        /* Accepted: its partition is assigned (settle_one looked it up). */
        part_t *p = part_find(g, c->refs[i].topic, c->refs[i].partition);
        res[i].commit = KS_COMMIT_ACCEPTED;
        res[i].committed_offset = p ? p->ct.confirmed : -1;
        if (!p)
            continue;
        cwait_ent_t *e = &w->ents[w->n++];
        *e = (cwait_ent_t){.p = p, .offset = c->refs[i].offset, .i = i};
        w->pending++;
        if (e->offset < p->ct.confirmed) /* committed past already */
            ent_settle(w, e, KS_COMMIT_COMMITTED, "committed");
    }
    w->next = g->cwait_head;
    g->cwait_head = w;
    g->cwait_cnt++;
    cwait_sweep(g);
    return true;
}

bool cwait_full(const ks_group_t *g)
{
    return g->cwait_cnt >= KS_CMD_COMMIT_WAITERS_MAX;
}

/* Settles p's entries: those a confirmed commit covers COMMITTED, the rest below `below`
 * `rest` (with reason), or left waiting for KS_COMMIT_NONE. gone: p is about to go (its
 * pointer is forgotten). */
static void cwait_part(ks_group_t *g, const part_t *p, int64_t below, ks_commit_wait_t rest,
                       const char *reason, bool gone)
{
    for (cwait_t *w = g->cwait_head; w; w = w->next) {
        for (size_t k = 0; k < w->n; k++) {
            cwait_ent_t *e = &w->ents[k];
            if (e->p != p)
                continue;
            bool open = !e->settled;
            if (open && e->offset < p->ct.confirmed)
                ent_settle(w, e, KS_COMMIT_COMMITTED, "committed");
            else if (open && rest != KS_COMMIT_NONE && e->offset < below)
                ent_settle(w, e, rest, reason);
            if (gone)
                e->p = NULL; /* its result keeps the last commit point */
        }
    }
    cwait_sweep(g);
}

void cwait_confirmed(ks_group_t *g, const part_t *p)
{
    if (g->cwait_head)
        cwait_part(g, p, 0, KS_COMMIT_NONE, NULL, false);
}

void cwait_failed(ks_group_t *g, const part_t *p, int64_t offset, rd_kafka_resp_err_t err)
{
    if (g->cwait_head)
        cwait_part(g, p, offset, KS_COMMIT_FAILED, rd_kafka_err2str(err), false);
}

void cwait_part_gone(ks_group_t *g, const part_t *p, bool seek)
{
    if (g->cwait_head)
        cwait_part(g, p, INT64_MAX, KS_COMMIT_LOST, seek ? lost_seek : lost_revoked, true);
}

void cwait_expire(ks_group_t *g, int64_t now, bool all)
{
    for (cwait_t *w = g->cwait_head; w; w = w->next)
        if (all || now >= w->until_ms)
            w->pending = 0; /* the rest stay ACCEPTED, with the commit point reached */
    cwait_sweep(g);
}

int64_t cwait_next_due(const ks_group_t *g)
{
    int64_t next = INT64_MAX;
    for (const cwait_t *w = g->cwait_head; w; w = w->next)
        if (w->until_ms < next)
            next = w->until_ms;
    return next;
}
