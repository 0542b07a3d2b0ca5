/* push_metrics.c: what /metrics shows of push delivery: each stream's requests by the app's
 * status, its records by verdict, its requests in flight and how long they took, counted on
 * the push thread and written by the collector push registers (metrics.h). */
#include "push_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "util.h"

void push_stats_started(pusher_t *p)
{
    atomic_fetch_add_explicit(&p->stats.in_flight, 1, memory_order_relaxed);
}

void push_stats_ended(pusher_t *p)
{
    atomic_fetch_sub_explicit(&p->stats.in_flight, 1, memory_order_relaxed);
}

void push_stats_answered(pusher_t *p, const preq_t *r, long code, const ks_push_verdict_t *v)
{
    push_stats_t *st = &p->stats;
    size_t c = code >= 100 && code < 100 + PUSH_CODES ? (size_t)(code - 100) : PUSH_CODES;
    atomic_fetch_add_explicit(&st->codes[c], 1, memory_order_relaxed);
    for (size_t i = 0; i < r->n; i++)
        atomic_fetch_add_explicit(&st->verdicts[v[i]], 1, memory_order_relaxed);
    int64_t ms = ks_now_ms() - r->t0_ms;
    if (ms < 0)
        ms = 0;
    size_t b = 0;
    while (b < KS_HIST_BUCKETS && ms > ks_hist_bounds_ms[b])
        b++;
    atomic_fetch_add_explicit(&st->hist[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->hist_sum_ms, ms, memory_order_relaxed);
}

/* The verdicts as /metrics names them, by ks_push_verdict_t. */
static const char *const verdict_names[] = {
    [KS_PUSH_ACK] = "ack", [KS_PUSH_RETRY] = "retry", [KS_PUSH_TERMINAL] = "dead_letter"};

/* One stream's samples of family id. */
static void stream_samples(const pusher_t *p, ks_metric_id_t id, ks_metrics_out_t *o)
{
    const push_stats_t *st = &p->stats;
    const char *group = p->gc->name;
    switch (id) {
    case KS_METRIC_PUSH_REQUESTS:
        for (size_t c = 0; c <= PUSH_CODES; c++) {
            uint64_t v = atomic_load_explicit(&st->codes[c], memory_order_relaxed);
            char code[16] = "none";
            if (c < PUSH_CODES)
                snprintf(code, sizeof(code), "%zu", c + 100);
            if (v)
                ks_metrics_put(o, (const char *const[]){group, code}, (int64_t)v);
        }
        return;
    case KS_METRIC_PUSH_RECORDS:
        for (size_t k = 0; k < sizeof(verdict_names) / sizeof(verdict_names[0]); k++)
            ks_metrics_put(o, (const char *const[]){group, verdict_names[k]},
                           (int64_t)atomic_load_explicit(&st->verdicts[k], memory_order_relaxed));
        return;
    case KS_METRIC_PUSH_IN_FLIGHT:
        ks_metrics_put(o, (const char *const[]){group},
                       (int64_t)atomic_load_explicit(&st->in_flight, memory_order_relaxed));
        return;
    case KS_METRIC_PUSH_DURATION: {
        /* The count is the buckets' sum, so the +Inf bucket and the count always agree. */
        ks_hist_t h = {.sum_ms = atomic_load_explicit(&st->hist_sum_ms, memory_order_relaxed)};
        for (size_t b = 0; b <= KS_HIST_BUCKETS; b++) {
            h.counts[b] = (int64_t)atomic_load_explicit(&st->hist[b], memory_order_relaxed);
            h.count += h.counts[b];
        }
        ks_metrics_put_hist(o, (const char *const[]){group}, &h);
        return;
    }
    default:
        abort(); /* a PUSH row of metric_list.h without its case */
    }
}

void push_metrics_collect(void *ctx, ks_metric_id_t id, ks_metrics_out_t *o)
{
    ks_push_t *e = ctx;
    pthread_mutex_lock(&e->ps_lock);
    for (size_t i = 0; i < e->n; i++)
        if (ks_metrics_sees(o, e->ps[i]->gc->name))
            stream_samples(e->ps[i], id, o);
    pthread_mutex_unlock(&e->ps_lock);
}
