/* group_rebalance.c: the subscription, and assignment and revocation of partitions (the rebalance
 * callback, and the revoke grace that the group loop runs). */
#include "group_int.h"

part_t *part_new(ks_group_t *g, const char *topic, int32_t partition)
{
    part_t *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    p->topic = ks_xstrdup(topic);
    p->topic_hash = 1469598103934665603ULL;
    for (const char *c = topic; *c; c++)
        p->topic_hash = (p->topic_hash ^ (unsigned char)*c) * 1099511628211ULL;
    p->partition = partition;
    p->epoch = ++g->next_epoch;
    p->state = KS_PS_INITIALIZING;
    p->committed = -1;
    p->cp_seen = -1;
    p->cp_moved_ms = ks_now_ms();
    ks_commit_track_init(&p->ct, -1);
    ks_ack_window_init(&p->win, rec_free); /* a rec_t is one block */
    ks_key_sched_init(&p->sched, (ks_ordering_t)g->gconf->ordering);
    if (g->part_cnt == g->part_cap) {
        g->part_cap = g->part_cap ? g->part_cap * 2 : 16;
        g->parts = realloc(g->parts, g->part_cap * sizeof(*g->parts));
        if (!g->parts)
            abort();
    }
    g->parts[g->part_cnt++] = p;
    ks_mem_parts_add(1); /* every partition's window share shrinks */
    return p;
}

static part_t *part_add(ks_group_t *g, const char *topic, int32_t partition)
{
    ks_owner_assert(&g->owner);
    part_t *p = part_new(g, topic, partition);
    /* Take the partition's records from its own queue. Cleared before assign, the
     * forward stays cleared (librdkafka keeps an application's choice). */
    p->q = rd_kafka_queue_get_partition(g->rk, topic, partition);
    if (p->q) {
        rd_kafka_queue_forward(p->q, NULL);
        rd_kafka_queue_io_event_enable(p->q, g->rk_pipe[1], "1", 1);
    }
    return p;
}

void part_remove(ks_group_t *g, part_t *p)
{
    ks_owner_assert(&g->owner);
    part_t **hint = &g->part_hint[(uint32_t)p->partition % KS_PART_HINTS];
    if (*hint == p)
        *hint = NULL;
    for (size_t i = 0; i < g->part_cnt; i++) {
        if (g->parts[i] == p) {
            g->parts[i] = g->parts[--g->part_cnt];
            break;
        }
    }
    cwait_part_gone(g, p, false); /* after its final commit, if it made one */
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

/* A revoked partition leaves: acks accepted on it that no confirmed commit covers will be
 * delivered again by its next owner. Counts and logs them; why says what failed. */
static void count_lost_acks(ks_group_t *g, part_t *p, const char *why)
{
    int64_t n = ks_commit_track_unconfirmed(&p->ct);
    if (n <= 0)
        return;
    g->st_acks_lost_to_move += n;
    ks_warn(g->log_name,
            "%s[%d]: up to %lld accepted acks lost to a move (%s): no confirmed commit covers "
            "them, so the partition's next owner delivers those records again",
            p->topic, p->partition, (long long)n, why);
}

/* Records leased on the partitions being revoked: those in REVOKING, which only a revoke
 * moves a partition to (part_remove takes it out right after). */
static size_t revoking_leased(const ks_group_t *g)
{
    size_t leased = 0;
    for (size_t i = 0; i < g->part_cnt; i++)
        if (g->parts[i]->state == KS_PS_REVOKING)
            leased += g->parts[i]->leased;
    return leased;
}

/* Reports what an (un)assign call returned. */
static void assign_result(ks_group_t *g, rd_kafka_error_t *error, rd_kafka_resp_err_t aerr)
{
    if (error) {
        ks_err(g->log_name, "(un)assign failed: %s", rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
    } else if (aerr) {
        ks_err(g->log_name, "assign failed: %s", rd_kafka_err2str(aerr));
    }
}

/* The end of a revoke: the final commit of each revoking partition (synchronous, under the
 * generation that revoked: librdkafka has not rejoined yet), its window dropped, and parts
 * given back to librdkafka. Runs inside the callback when there is nothing to wait for,
 * else from revoke_step. */
static void revoke_finish(ks_group_t *g, rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_t *rk = g->rk;
    bool was = g->in_rebalance;
    g->in_rebalance = true; /* the commit below may go out even during a rejoin */
    /* A lost assignment can no longer be committed (librdkafka has dropped the
     * generation): no commit, and its unconfirmed acks are counted. */
    bool lost = rd_kafka_assignment_lost(rk) == 1;
    size_t n = 0;
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (p->state != KS_PS_REVOKING)
            continue;
        n++;
        rd_kafka_resp_err_t cerr = lost ? RD_KAFKA_RESP_ERR_NO_ERROR : commit_moved(g, true, p);
        count_lost_acks(g, p, lost ? "the assignment was lost" : rd_kafka_err2str(cerr));
    }
    if (lost)
        ks_warn(g->log_name, "assignment lost: %zu partition(s) revoked without a commit", n);
    for (size_t i = 0; i < g->part_cnt;) {
        if (g->parts[i]->state == KS_PS_REVOKING)
            part_remove(g, g->parts[i]); /* moves the last partition to i */
        else
            i++;
    }
    g->assign_ver++;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    rd_kafka_error_t *error = NULL;
    rd_kafka_resp_err_t aerr = RD_KAFKA_RESP_ERR_NO_ERROR;
    /* From here to the ASSIGN that ends the rebalance, no commit may go out. */
    if (coop) {
        ks_rejoin_guard_revoke(&g->rj, lost, ks_now_ms());
        error = rd_kafka_incremental_unassign(rk, parts);
    } else {
        aerr = rd_kafka_assign(rk, NULL);
    }
    assign_result(g, error, aerr);
    g->in_rebalance = was;
}

/* Hands parts to librdkafka as this rebalance's assignment, by the protocol in use. */
static void take_assignment(ks_group_t *g, rd_kafka_t *rk, bool coop,
                            rd_kafka_topic_partition_list_t *parts)
{
    if (coop)
        assign_result(g, rd_kafka_incremental_assign(rk, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
    else
        assign_result(g, NULL, rd_kafka_assign(rk, parts));
}

void revoke_step(ks_group_t *g, int64_t now, bool force)
{
    if (!g->rv_parts)
        return;
    size_t leased = revoking_leased(g);
    if (leased && now < g->rv_until_ms && !force)
        return;
    if (leased)
        ks_warn(g->log_name,
                "revoke grace over (%d ms): %zu records still leased on them will be "
                "delivered again by the partitions' next owner",
                g->cfg->revoke_grace_ms, leased);
    rd_kafka_topic_partition_list_t *parts = g->rv_parts;
    g->rv_parts = NULL;
    revoke_finish(g, parts);
    rd_kafka_topic_partition_list_destroy(parts);
}

void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                  void *opaque)
{
    ks_group_t *g = opaque;
    ks_owner_enter(&g->owner);
    /* librdkafka sends no rebalance while it waits for the unassign of the last one; if it
     * ever does, that revoke ends now, before anything else moves. */
    if (g->rv_parts) {
        ks_warn(g->log_name, "a rebalance came while a revoke's grace ran: ending it now");
        revoke_step(g, ks_now_ms(), true);
    }
    g->in_rebalance = true;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS && g->life == GROUP_STOPPING) {
        /* A join that ends inside consumer_close: the partitions are taken (the protocol
         * wants an assign) and given straight back by the close's revoke, with nothing read
         * or committed. Reading their committed offsets here timed out (10 s: a closing
         * consumer sends no OffsetFetch) and ran the process past its shutdown grace. */
        g->ever_assigned = true;
        ks_info(g->log_name,
                "%d partition(s) assigned while leaving the group: given back as they are",
                parts->cnt);
        take_assignment(g, rk, coop, parts);
    } else if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
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
                p->fresh = true;
                ks_info(g->log_name, "assigned %s[%d] (epoch %u, committed %lld)", p->topic,
                        p->partition, p->epoch, (long long)p->committed);
            }
        }
        g->assign_ver++;
        if (coop && ks_rejoin_guard_assign(&g->rj))
            ks_info(g->log_name, "cooperative rebalance complete after %lld ms; commits resume",
                    (long long)(ks_now_ms() - g->rj.since_ms));
        take_assignment(g, rk, coop, parts);
        /* librdkafka keeps an application's pause made now: it comes before the first
         * fetch, which waits for the committed offsets. */
        int64_t now = ks_now_ms();
        g->admit_ms = now;
        for (int i = 0; i < parts->cnt; i++) {
            part_t *p = part_find(g, parts->elems[i].topic, parts->elems[i].partition);
            if (p && p->fresh) {
                p->fresh = false;
                part_admit(g, p, now);
            }
        }
    } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        /* 1. stop delivering (streams hear of it); 2. let leases finish, in the loop;
         * 3. commit; 4. give them up (revoke_finish). */
        g->assign_ver++;
        size_t n = 0;
        for (int i = 0; i < parts->cnt; i++) {
            part_t *p = part_find(g, parts->elems[i].topic, parts->elems[i].partition);
            if (p) {
                part_move(g, p, KS_PS_REVOKING);
                n++;
            }
        }
        /* A grace only when there are leases to wait for, the assignment can still be
         * committed, and the group is not stopping (its drain already waited for acks). */
        size_t leased = revoking_leased(g);
        if (rd_kafka_assignment_lost(rk) != 1 && g->life != GROUP_STOPPING &&
            g->cfg->revoke_grace_ms > 0 && leased > 0) {
            g->rv_parts = rd_kafka_topic_partition_list_copy(parts);
            g->rv_until_ms = ks_now_ms() + g->cfg->revoke_grace_ms;
            ks_info(g->log_name, "revoking %zu partition(s): up to %d ms for %zu leased records", n,
                    g->cfg->revoke_grace_ms, leased);
        } else {
            revoke_finish(g, parts);
        }
    } else {
        ks_err(g->log_name, "rebalance failed: %s", rd_kafka_err2str(err));
        assign_result(g, NULL, rd_kafka_assign(rk, NULL));
    }
    g->in_rebalance = false;
    ks_owner_leave(&g->owner);
}

void subscribe_to(ks_group_t *g, const char *const *topics, size_t n)
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
