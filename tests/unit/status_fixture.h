/* status_fixture.h: two group statuses with every field set, for the status encoders'
 * tests: "orders" (two partitions, one with every optional value unknown, and three
 * subscribers, one of them named in bytes that are not UTF-8) and "idle" (static, with
 * nothing assigned, subscribed or dead-lettered). */
#ifndef KS_STATUS_FIXTURE_H
#define KS_STATUS_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "types.h"
#include "util.h"

static ks_group_status_t *fixture_orders(void)
{
    ks_group_status_t *g = calloc(1, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "orders");
    g->ordering = "key";
    const char *topics[] = {"orders.eu", "orders.us"};
    g->topics = ks_strv_pack(topics, 2);
    g->topic_cnt = 2;
    snprintf(g->dead_letter_topic, sizeof(g->dead_letter_topic), "orders-dlq");
    g->max_attempts = 5;
    g->delivered = 5000000000;
    g->redelivered = 12;
    g->expired = 3;
    g->nacked = 4;
    g->acked = 4999999000;
    g->dead_lettered = 1;
    g->acks_lost_to_move = 7;
    g->memory.max_bytes = 268435456;
    g->memory.used_bytes = 1048576;
    g->memory.partitions = 2;
    g->memory.window_share_bytes = 134217728;
    g->memory.kafka_queue_kbytes = 4096;
    g->memory.kafka_fetch_bytes = 1048577;
    g->part_cnt = 2;
    g->parts = calloc(2, sizeof(*g->parts));
    ks_part_status_t *p = &g->parts[0];
    snprintf(p->topic, sizeof(p->topic), "orders.eu");
    p->partition = 3;
    p->epoch = 4000000000u;
    p->state = "ACTIVE";
    p->committed = 100;
    p->high_watermark = 250;
    p->lag = 150;
    p->in_flight = 20;
    p->window = 150;
    p->window_bytes = 15000;
    p->paused = 1;
    p->oldest_lease_age_ms = 1234;
    p->metadata_truncations = 2;
    p->held_back = 1;
    p->window_memory_bytes = 16000;
    p->kafka_queue_records = 300;
    p->commit_in_flight = 120;
    p->budget_pauses = 9;
    p->budget_dropped = 4500;
    p->stalled = 1;
    p->stall_reason = "poison";
    snprintf(p->stall_detail, sizeof(p->stall_detail), "offset 100 delivered 3 times");
    p = &g->parts[1];
    snprintf(p->topic, sizeof(p->topic), "orders.us");
    p->partition = 0;
    p->epoch = 1;
    p->state = "INITIALIZING";
    p->stall_reason = "";
    p->committed = -1;
    p->high_watermark = -1;
    p->lag = -1;
    p->oldest_lease_age_ms = -1;
    p->commit_in_flight = -1;
    g->sub_cnt = 3;
    g->subs = calloc(3, sizeof(*g->subs));
    ks_sub_status_t *s = &g->subs[0];
    snprintf(s->name, sizeof(s->name), "default");
    s->credits.records = 1000;
    s->credits.bytes = 10485760;
    s->outstanding.records = 20;
    s->outstanding.bytes = 2000;
    s->waiting = 1;
    s = &g->subs[1];
    snprintf(s->name, sizeof(s->name), "zo\xc3\xab#2"); /* valid UTF-8 */
    s->credits.records = 1;
    s->credits.bytes = 2;
    s = &g->subs[2];
    snprintf(s->name, sizeof(s->name), "bad\xff"); /* not UTF-8 */
    return g;
}

static ks_group_status_t *fixture_idle(void)
{
    ks_group_status_t *g = calloc(1, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "idle");
    g->is_static = 1;
    g->ordering = "partition";
    g->max_attempts = 0;
    g->memory.max_bytes = 268435456;
    g->parts = calloc(1, sizeof(*g->parts));
    g->subs = calloc(1, sizeof(*g->subs));
    return g;
}

#endif
