/* group_fixture.h: a group with no librdkafka handle and partitions filled by hand, for unit
 * tests of the group files (through proxy/group_int.h). @locality the test's one thread */
#ifndef KS_GROUP_FIXTURE_H
#define KS_GROUP_FIXTURE_H

#include "group_int.h"

static ks_config_t fx_cfg;
static ks_group_conf_t fx_gconf;

/* A group named name, delivering, with every config default. Free with fx_group_free. */
static inline ks_group_t *fx_group(const char *name, ks_ordering_t ordering)
{
    ks_config_defaults(&fx_cfg);
    fx_gconf = fx_cfg.group_defaults;
    fx_gconf.ordering = ordering;
    ks_group_t *g = calloc(1, sizeof(*g));
    if (!g)
        abort();
    g->name = ks_xstrdup(name);
    snprintf(g->log_name, sizeof(g->log_name), "group:%s", name);
    g->group_hash = ks_ack_id_group_hash(name);
    g->instance = 7;
    g->cfg = &fx_cfg;
    g->gconf = &fx_gconf;
    g->life = GROUP_DELIVERING;
    ks_leases_init(&g->leases);
    atomic_init(&g->exited, false);
    atomic_init(&g->owner.tid, 0);
    return g;
}

/* An ACTIVE partition of g with no librdkafka queue (part_add's partition, less the queue). */
static inline part_t *fx_part(ks_group_t *g, const char *topic, int32_t partition)
{
    part_t *p = part_new(g, topic, partition);
    part_move(g, p, KS_PS_ACTIVE);
    return p;
}

/* Appends records [from, to) of value "v<offset>" and no key to p's window, READY. */
static inline void fx_push(part_t *p, int64_t from, int64_t to)
{
    for (int64_t off = from; off < to; off++) {
        char val[32];
        int vl = snprintf(val, sizeof(val), "v%lld", (long long)off);
        rec_t *r = calloc(1, sizeof(rec_t) + (size_t)vl + 2);
        if (!r)
            abort();
        r->timestamp = -1;
        r->has_value = 1;
        r->value_len = (uint32_t)vl;
        r->data[0] = '\0'; /* the null key's terminator, then the value */
        memcpy(r->data + 1, val, (size_t)vl + 1);
        if (ks_ack_window_push(&p->win, off, (uint32_t)vl, r) < 0)
            abort();
        ks_key_sched_add(&p->sched, &p->win, ks_ack_window_get(&p->win, off), false, 0);
    }
}

/* A fetch parked on g (as handle_cmd parks one), for subscriber sub, answered to cb. */
static inline cmd_t *fx_park_fetch(ks_group_t *g, const char *topic, const char *sub, int max,
                                   int64_t wait_until_ms, ks_fetch_cb *cb, void *opaque)
{
    const char *topics[] = {topic};
    ks_cmd_req_t req = {.type = KS_CMD_FETCH,
                        .group = g->name,
                        .u.fetch = {.topics = topics,
                                    .topic_cnt = 1,
                                    .opts = {.max = max, .deadline_ms = 30000, .subscriber = sub},
                                    .cb = cb,
                                    .opaque = opaque}};
    cmd_t *c = cmd_copy(&req);
    c->posted_ms = wait_until_ms; /* with wait_ms 0: it waits until then */
    if (g->wait_tail)
        g->wait_tail->next_wait = c;
    else
        g->wait_head = c;
    g->wait_tail = c;
    return c;
}

static inline void fx_group_free(ks_group_t *g)
{
    while (g->part_cnt) {
        part_t *p = g->parts[--g->part_cnt];
        ks_ack_window_destroy(&p->win);
        ks_key_sched_destroy(&p->sched);
        ks_commit_meta_free(&p->restore);
        ks_mem_parts_add(-1);
        free(p->topic);
        free(p);
    }
    for (size_t i = 0; i < g->sub_cnt; i++)
        free(g->subs[i]);
    free(g->subs);
    free(g->parts);
    ks_leases_destroy(&g->leases);
    free(g->name);
    free(g);
    ks_config_free(&fx_cfg);
}

#endif
