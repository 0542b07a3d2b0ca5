/* group_commit.c: commit points and their metadata: building, sending, confirming and restoring
 * them. */
#include "group_int.h"

#include <assert.h>

/* Warns about a partition held back for HELD_WARN_MS, then every HELD_REWARN_MS while it
 * stays so, with what its commit point waits for. @locality group loop */
#define HELD_WARN_MS   5000
#define HELD_REWARN_MS 30000

/* A commit unanswered this long is sent again (commit_moved). */
#define COMMIT_OVERDUE_MS 10000

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
            p->topic, p->partition, (long long)part_hold_from(g, p),
            (long long)((now - p->held_since_ms) / 1000), g->cfg->meta_max_bytes, (long long)cp,
            e ? ks_rec_state_str((ks_rec_state_t)e->state) : "not fetched yet",
            e ? (int)e->attempts : 0, p->leased);
}

/* A held-back partition whose commit point moved commits at once, at most every
 * HELD_COMMIT_MS, not on the next interval: its cut follows the commit point, and the
 * records that come below it go out without waiting for the tick. A commit that failed
 * (committed == -1) is retried on the interval, as usual. @locality group loop */
#define HELD_COMMIT_MS 20

/* A partition past half its cap on unconfirmed acks (group.max_unconfirmed_acks) commits at
 * once when none of its commits is out, at most every HELD_COMMIT_MS: at full speed its cap
 * is then not reached while commits are confirmed. Reaching it, and leaving it, is logged.
 * @locality group loop */
static void commit_capped(ks_group_t *g, part_t *p, int64_t now)
{
    int cap = g->gconf->max_unconfirmed_acks;
    int64_t n = ks_commit_track_unconfirmed(&p->ct);
    bool capped = part_acks_capped(g, p);
    if (capped != p->acks_capped) {
        p->acks_capped = capped;
        if (capped)
            ks_warn(g->log_name,
                    "%s[%d]: %lld accepted acks wait for a confirmed commit "
                    "(group.max_unconfirmed_acks=%d%s%s): new deliveries wait for one",
                    p->topic, p->partition, (long long)n, cap, *p->commit_err ? "; " : "",
                    p->commit_err);
        else
            ks_info(g->log_name, "%s[%d]: a commit was confirmed; deliveries resume", p->topic,
                    p->partition);
    }
    if (cap <= 0 || n < cap / 2 || p->state == KS_PS_INITIALIZING || p->committed < 0 ||
        ks_commit_track_in_flight(&p->ct) >= 0 || now - p->held_commit_ms < HELD_COMMIT_MS)
        return;
    p->held_commit_ms = now;
    p->meta_dirty = true; /* sent even if the commit point did not move: it confirms the acks */
    commit_moved(g, false, p);
}

void commit_held(ks_group_t *g, int64_t now)
{
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        commit_capped(g, p, now);
        if (p->held_back && p->state != KS_PS_INITIALIZING && p->committed >= 0 &&
            now - p->held_commit_ms >= HELD_COMMIT_MS &&
            ks_ack_window_commit_point(&p->win) != p->committed) {
            p->held_commit_ms = now;
            commit_moved(g, false, p);
        }
    }
}

/* The attempts an entry's record counts in the metadata: an unsent record's attempt does not
 * count yet, nor one taken back. */
static inline uint32_t meta_attempts(const ks_win_entry_t *e)
{
    uint32_t att = ks_win_attempts_counted(e), unsent = (e->flags & KS_WIN_F_UNSENT) ? 1u : 0u;
    return att > unsent ? att - unsent : 0;
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
    /* Only entries given an attempt or an ack can be in it: the walk stops at the highest
     * (meta_end), not at the window's end (at 256 partitions it visited 31 entries a record
     * served, 12 at 8; callgrind). Debug builds check the rest of the window. */
    for (size_t i = 0; i < n; i++) {
        ks_win_entry_t *e = ks_ack_window_at(&p->win, i);
        if (e->offset >= p->win.meta_end) {
#ifndef NDEBUG
            for (; i < n; i++) {
                e = ks_ack_window_at(&p->win, i);
                assert(e->state != KS_REC_ACKED && meta_attempts(e) == 0);
            }
#endif
            break;
        }
        if (e->offset < cp)
            continue;
        if (e->state == KS_REC_ACKED) {
            if (e->offset > cp)
                m.acked[m.acked_cnt++] = e->offset;
        } else {
            uint32_t att = meta_attempts(e);
            if (att >= 1)
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

/* A commit of p failed: counted, and it is no longer out. */
static void commit_answered_failed(ks_group_t *g, part_t *p)
{
    if (p->commits_out > 0)
        p->commits_out--;
    g->st_commits_failed++;
}

/* Notes p's commit tp confirmed; counted once per commit sent (a sync commit's result may
 * come twice: from the call and from offset_commit_cb). */
static void commit_confirmed(ks_group_t *g, part_t *p, const rd_kafka_topic_partition_t *tp)
{
    int64_t now = ks_now_ms();
    if (ks_commit_track_confirmed(&p->ct, tp->offset, tp->metadata, tp->metadata_size)) {
        ks_warn(g->log_name,
                "%s[%d]: the broker confirmed commit %lld after a later one, so the group "
                "holds it now; committing the commit point again",
                p->topic, p->partition, (long long)tp->offset);
        p->committed = -1;
        p->meta_dirty = true;
    }
    cp_note(p, now);
    p->commit_err[0] = '\0'; /* a stall's kafka reason ends with a confirmed commit */
    /* One answer per commit sent: commits that overlap are each counted when their answer
     * comes, and a sync commit's second report (offset_commit_cb) finds none left. */
    if (p->commits_out > 0) {
        p->commits_out--;
        g->st_commits_confirmed++;
        ks_hist_add(&g->st_commit_round_trip, now - p->commit_sent_ms);
    }
}

/* Commits every partition whose commit point or metadata changed (only `only`, if
 * given, and then, if sync, also when an earlier commit of it is not confirmed yet: the
 * revoke's final commit). sync waits for the broker. Sends nothing during a cooperative
 * rejoin, unless called from inside the rebalance callback (see rejoin_guard.h). Returns
 * the commit's error, or 0 (also when nothing was sent). @locality group loop */
rd_kafka_resp_err_t commit_moved(ks_group_t *g, bool sync, part_t *only)
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
        /* A commit with no answer after COMMIT_OVERDUE_MS is sent again: one that got
         * neither a result nor an error would hold the partition's commit where it is. */
        bool overdue =
            ks_commit_track_in_flight(&p->ct) >= 0 && now - p->commit_sent_ms > COMMIT_OVERDUE_MS;
        if (cp < 0 || (cp == p->committed && !p->meta_dirty && !unconfirmed && !overdue))
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
        p->commit_sent_ms = now;
        p->commits_out++;
        g->st_commits_sent++;
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
                snprintf(p->commit_err, sizeof(p->commit_err), "commit of offset %lld failed: %s",
                         (long long)tp->offset, rd_kafka_err2str(err ? err : tp->err));
                ks_commit_track_failed(&p->ct);
                commit_answered_failed(g, p);
                cwait_failed(g, p, tp->offset, err);
            } else if (p && sync && l->cnt == 1) {
                /* A sync commit reports an error only when every partition failed, so
                 * only a one-partition one confirms here; offset_commit_cb does the rest. */
                commit_confirmed(g, p, tp);
                cwait_confirmed(g, p);
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
void offset_commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
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
            commit_confirmed(g, p, tp);
            cwait_confirmed(g, p);
            continue;
        }
        if (!err)
            ks_warn(g->log_name, "commit of %s[%d] failed: %s; retrying", tp->topic, tp->partition,
                    rd_kafka_err2str(tp->err));
        ks_commit_track_failed(&p->ct);
        commit_answered_failed(g, p);
        cwait_failed(g, p, tp->offset, err ? err : tp->err);
        p->committed = -1;
        p->meta_dirty = true;
    }
}

/* Reads the committed offsets and metadata of newly assigned partitions and keeps
 * what the metadata says, so only unacked records are redelivered. */
void restore_committed(ks_group_t *g, rd_kafka_topic_partition_list_t *parts)
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
