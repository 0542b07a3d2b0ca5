/* group_stall.c: stall detection, a group loop timer: a partition with lag whose confirmed
 * commit point has not moved for health.stall_ms is stalled, and the loop says why. */
#include "group_int.h"

/* How often the partitions are checked: a quarter of health.stall_ms, at most a second. */
static int64_t stall_interval(const ks_group_t *g)
{
    int64_t q = g->cfg->health_stall_ms / 4;
    return q < 1000 ? q : 1000;
}

/* The entry at p's commit point, NULL when the window does not hold it. */
static ks_win_entry_t *head_entry(part_t *p)
{
    return ks_ack_window_count(&p->win) ? ks_ack_window_at(&p->win, 0) : NULL;
}

static void stall_describe(ks_group_t *g, part_t *p, ks_stall_t why, int64_t idle)
{
    ks_win_entry_t *e = head_entry(p);
    /* Past the cap on unconfirmed acks, the detail says so first: no new deliveries. */
    int off = 0;
    if (why != KS_STALL_NONE && p->acks_capped)
        off = snprintf(p->stall_detail, sizeof(p->stall_detail),
                       "new deliveries wait: %lld acks without a confirmed commit "
                       "(group.max_unconfirmed_acks %d); ",
                       (long long)ks_commit_track_unconfirmed(&p->ct),
                       g->gconf->max_unconfirmed_acks);
    char *d = p->stall_detail + off;
    size_t dsz = sizeof(p->stall_detail) - (size_t)off;
    switch (why) {
    case KS_STALL_KAFKA:
        snprintf(d, dsz, "%.190s", *p->commit_err ? p->commit_err : g->down);
        return;
    case KS_STALL_POISON:
        snprintf(d, dsz, "offset %lld delivered %d times, last nack: %.120s", (long long)e->offset,
                 e->attempts, e->reason ? e->reason : "none");
        return;
    case KS_STALL_METADATA:
        snprintf(d, dsz,
                 "the commit metadata would not fit (commit.metadata_max_bytes); deliveries "
                 "held back from offset %lld",
                 (long long)p->meta_cut);
        return;
    case KS_STALL_SCHEMA:
        snprintf(p->stall_detail, sizeof(p->stall_detail),
                 "deliveries wait for a schema the schema registry has not served (unreachable "
                 "or slow); they resume by themselves when it does");
        return;
    case KS_STALL_MEMORY:
        snprintf(d, dsz, "paused by the memory budget (memory.max_bytes %lld, used %lld)",
                 (long long)g->cfg->memory_max_bytes, (long long)ks_mem_used());
        return;
    case KS_STALL_NO_SUBSCRIBER:
        snprintf(d, dsz, "no subscriber for %s for %lld ms", p->topic, (long long)idle);
        return;
    case KS_STALL_NO_CREDITS:
        snprintf(d, dsz, "all %zu subscribers hold every record their credits allow", g->sub_cnt);
        return;
    case KS_STALL_UNKNOWN:
        snprintf(d, dsz, "the record at the commit point (offset %lld) is not settled",
                 e ? (long long)e->offset : -1LL);
        return;
    case KS_STALL_NONE:
        break;
    }
    p->stall_detail[0] = '\0';
}

void cp_note(part_t *p, int64_t now)
{
    if (p->ct.confirmed != p->cp_seen) {
        p->cp_seen = p->ct.confirmed;
        p->cp_moved_ms = now;
    }
}

void stall_check(ks_group_t *g, int64_t now)
{
    g->next_stall_ms = now + stall_interval(g);
    size_t credited = 0;
    for (size_t i = 0; i < g->sub_cnt; i++) {
        const sub_t *s = g->subs[i];
        credited += s->out_records < s->credit_records && s->out_bytes < s->credit_bytes;
    }
    int cnt = 0;
    char why[sizeof(g->stall_why)] = "";
    size_t wlen = 0;
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        cp_note(p, now);
        ks_win_entry_t *e = head_entry(p);
        int64_t hw;
        ks_stall_in_t in = {
            .lag = p->state == KS_PS_INITIALIZING ? 0 : part_lag(g, p, &hw),
            .idle_ms = now - p->cp_moved_ms,
            .stall_ms = g->cfg->health_stall_ms,
            .kafka_error = *p->commit_err || *g->down,
            .head_attempts = e && e->state != KS_REC_ACKED ? e->attempts : 0,
            .held_back = p->held_back,
            .schema_wait = p->schema_wait,
            .memory_paused = p->kpaused,
            .subs = g->sub_cnt,
            .subs_credited = credited,
        };
        ks_stall_t was = p->stall;
        p->stall = ks_stall_reason(&in);
        stall_describe(g, p, p->stall, in.idle_ms);
        if (p->stall && !was)
            ks_warn(g->log_name,
                    "%s[%d]: stalled (%s): the commit point has not moved for %lld ms: %s",
                    p->topic, p->partition, ks_stall_str(p->stall), (long long)in.idle_ms,
                    p->stall_detail);
        else if (!p->stall && was)
            ks_info(g->log_name, "%s[%d]: no longer stalled (was %s)", p->topic, p->partition,
                    ks_stall_str(was));
        if (p->stall) {
            cnt++;
            if (wlen < sizeof(why))
                wlen += (size_t)snprintf(why + wlen, sizeof(why) - wlen, "%s%s[%d]: %s: %s",
                                         wlen ? "; " : "", p->topic, p->partition,
                                         ks_stall_str(p->stall), p->stall_detail);
        }
    }
    pthread_mutex_lock(&g->stall_lock);
    g->stall_cnt = cnt;
    snprintf(g->stall_why, sizeof(g->stall_why), "%s", why);
    pthread_mutex_unlock(&g->stall_lock);
}

int ks_group_stalled(ks_group_t *g, char *why, size_t size)
{
    pthread_mutex_lock(&g->stall_lock);
    int n = g->stall_cnt;
    snprintf(why, size, "%s", g->stall_why);
    pthread_mutex_unlock(&g->stall_lock);
    return n;
}
