/* group_status.c: a group's status snapshot: the values of the fields proxy/status_fields.h
 * declares. */
#include "group_int.h"

int64_t part_lag(ks_group_t *g, const part_t *p, int64_t *hw)
{
    int64_t lo = -1, hi = -1;
    if (!g->rk || rd_kafka_get_watermark_offsets(g->rk, p->topic, p->partition, &lo, &hi) != 0)
        hi = -1;
    *hw = hi;
    int64_t base = p->ct.confirmed >= 0 ? p->ct.confirmed : ks_ack_window_commit_point(&p->win);
    return hi >= 0 && base >= 0 ? hi - base : -1;
}

ks_group_status_t *build_status(ks_group_t *g, int64_t now)
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
    st->topics = ks_strv_pack((const char *const *)g->topics, g->topic_cnt);
    st->topic_cnt = g->topic_cnt;
    /* Each counter of the list is the group's st_<its member>. */
#define COUNTER_COPY(type, m, pb, name, num, kind, doc) st->m = g->st_##m;
    KS_STATUS_COUNTER_FIELDS(COUNTER_COPY)
#undef COUNTER_COPY
    ks_mem_status_t *mem = &st->memory;
    mem->max_bytes = g->cfg->memory_max_bytes;
    mem->used_bytes = ks_mem_used();
    mem->partitions = (int64_t)ks_mem_parts();
    mem->window_share_bytes = part_share(g);
    mem->kafka_queue_kbytes = g->q_kbytes;
    mem->kafka_fetch_bytes = g->fetch_max_bytes;
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
        ps->lag = part_lag(g, p, &ps->high_watermark);
        size_t window = ks_ack_window_count(&p->win);
        ps->in_flight = (int64_t)p->leased;
        ps->window = (int64_t)window;
        ps->window_bytes = ks_ack_window_bytes(&p->win);
        ps->paused = p->state == KS_PS_PAUSED;
        ps->oldest_lease_age_ms = -1;
        for (size_t j = 0; j < window && p->leased; j++) {
            ks_win_entry_t *e = ks_ack_window_at(&p->win, j);
            if (e->state == KS_REC_LEASED && now - e->leased_at_ms > ps->oldest_lease_age_ms)
                ps->oldest_lease_age_ms = now - e->leased_at_ms;
        }
        ps->metadata_truncations = p->meta_truncations;
        ps->held_back = p->held_back || p->acks_capped;
        ps->window_memory_bytes = part_mem(p);
        ps->kafka_queue_records = p->q ? (int64_t)rd_kafka_queue_length(p->q) : 0;
        ps->budget_pauses = p->budget_pauses;
        ps->budget_dropped = p->budget_dropped;
        ps->commit_point_age_ms = now - p->cp_moved_ms;
        ps->stalled = p->stall != KS_STALL_NONE;
        ps->stall_reason = ks_stall_str(p->stall);
        snprintf(ps->stall_detail, sizeof(ps->stall_detail), "%s", p->stall_detail);
    }
    for (size_t i = 0; i < g->sub_cnt; i++) {
        sub_t *s = g->subs[i];
        ks_sub_status_t *ss = &st->subs[i];
        snprintf(ss->name, sizeof(ss->name), "%s", s->name);
        ss->credits.records = s->credit_records;
        ss->credits.bytes = s->credit_bytes;
        ss->outstanding.records = s->out_records;
        ss->outstanding.bytes = s->out_bytes;
        for (cmd_t *c = g->wait_head; c; c = c->next_wait)
            if (!strcmp(c->req.u.fetch.opts.subscriber, s->name))
                ss->waiting = 1;
    }
    return st;
}
