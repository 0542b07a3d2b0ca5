/* group_loop.c: one consumer group's single-threaded loop: epoll, its timer, the inbox drain and
 * the dispatch of each command. */
#include "group_int.h"

/* A command's handler: it owns c (answers and frees it, or parks it). c->req is the
 * request as the edge submitted it, validated. @locality group loop */
typedef void(cmd_fn)(ks_group_t *g, cmd_t *c, int64_t now);

static void cmd_fetch(ks_group_t *g, cmd_t *c, int64_t now)
{
    const ks_fetch_opts_t *opts = &c->req.u.fetch.opts;
    g->last_activity_ms = now;
    if (!group_delivering(g)) {
        finish_fetch(c, batch_error(KS_E_UNAVAILABLE, "ksidecar is shutting down"));
        return;
    }
    {
        sub_t *s = sub_get(g, opts->subscriber, now);
        if (opts->credit_records > 0)
            s->credit_records = opts->credit_records;
        if (opts->credit_bytes > 0)
            s->credit_bytes = opts->credit_bytes;
        s->hold_stalled = s->hold_stalled || opts->hold_stalled;
    }
    subscribe_to(g, c->req.u.fetch.topics, c->req.u.fetch.topic_cnt);
    c->next_wait = NULL;
    if (g->wait_tail)
        g->wait_tail->next_wait = c;
    else
        g->wait_head = c;
    g->wait_tail = c;
}

static void cmd_settle(ks_group_t *g, cmd_t *c, int64_t now)
{
    g->last_activity_ms = now;
    handle_settle(g, c, now);
}

/* One group's status, as an array of one (ks_status_cb; the engine gathers them). */
static void cmd_status(ks_group_t *g, cmd_t *c, int64_t now)
{
    ks_group_status_t **one = malloc(sizeof(*one));
    if (!one)
        abort();
    one[0] = build_status(g, now);
    c->req.u.status.cb(one, 1, c->req.u.status.opaque);
    cmd_free(c);
}

static void cmd_seek(ks_group_t *g, cmd_t *c, int64_t now)
{
    handle_seek(g, c);
}

static void cmd_release(ks_group_t *g, cmd_t *c, int64_t now)
{
    handle_release(g, c->req.u.release.subscriber, false);
    cmd_free(c);
}

static void cmd_release_unread(ks_group_t *g, cmd_t *c, int64_t now)
{
    handle_release(g, c->req.u.release.subscriber, true);
    cmd_free(c);
}

static void cmd_delivered(ks_group_t *g, cmd_t *c, int64_t now)
{
    handle_delivered(g, c->req.u.delivered.token, c->req.u.delivered.taken, now);
    cmd_free(c);
}

static void cmd_stop_delivering(ks_group_t *g, cmd_t *c, int64_t now)
{
    group_life_move(g, GROUP_NOT_DELIVERING);
    cmd_free(c);
}

static void cmd_shutdown(ks_group_t *g, cmd_t *c, int64_t now)
{
    group_life_move(g, GROUP_DRAINING);
    g->drain_until_ms = c->req.u.shutdown.ack_deadline_ms;
    cmd_free(c);
}

/* The producer's, never posted to a group (ks_group_post refuses it). */
#define cmd_produce NULL

/* The redrive's own thread's (redrive.c), never posted to a group either. */
#define cmd_redrive NULL

/* The handler of each command, indexed by it and made from the catalogue: a row whose
 * cmd_<name> is missing here does not build. */
static cmd_fn *const cmd_fns[KS_CMD__CNT] = {
#define CMD_FN_ROW(n, s, f) [KS_CMD_##n] = cmd_##s,
    KS_CMD_LIST(CMD_FN_ROW)
#undef CMD_FN_ROW
};

bool group_serves(ks_cmd_t t)
{
    return (unsigned)t < KS_CMD__CNT && cmd_fns[t];
}

void handle_cmd(ks_group_t *g, cmd_t *c, int64_t now)
{
    cmd_fns[c->req.type](g, c, now);
}

void drain_inbox(ks_group_t *g, int64_t now, bool close)
{
    /* Fetches held back by a revoke that has ended since, first (they came first). */
    while (g->deferred && !g->rv_parts) {
        cmd_t *c = g->deferred;
        g->deferred = c->next_wait;
        handle_cmd(g, c, now);
    }
    cmd_t **tail = &g->deferred;
    while (*tail)
        tail = &(*tail)->next_wait;
    ks_inbox_node_t *all = close ? ks_inbox_close(&g->inbox) : ks_inbox_take_all(&g->inbox);
    for (ks_inbox_node_t *nd = all, *next; nd; nd = next) {
        next = nd->next;
        cmd_t *c = (cmd_t *)nd;
        if (g->rv_parts && !(ks_cmd_flags(c->req.type) & KS_CMDF_REBALANCE)) {
            c->next_wait = NULL; /* a fetch: after the revoke, in the order they came */
            *tail = c;
            tail = &c->next_wait;
        } else {
            handle_cmd(g, c, now);
        }
    }
}

static size_t total_leased(const ks_group_t *g)
{
    size_t n = 0;
    for (size_t i = 0; i < g->part_cnt; i++)
        n += g->parts[i]->leased;
    return n;
}

static int64_t idle_due(const ks_group_t *g)
{
    if (g->is_static || g->cfg->idle_close_ms <= 0)
        return INT64_MAX;
    return g->last_activity_ms + g->cfg->idle_close_ms;
}

static void arm_timer(ks_group_t *g, int64_t now)
{
    int64_t next = g->next_commit_ms;
    for (cmd_t *c = g->wait_head; c; c = c->next_wait)
        if (cmd_wait_until(c) < next)
            next = cmd_wait_until(c);
    int64_t due = ks_leases_next_due(&g->leases);
    if (due < next)
        next = due;
    if (idle_due(g) < next)
        next = idle_due(g);
    if (g->life == GROUP_DRAINING && g->drain_until_ms < next)
        next = g->drain_until_ms;
    if (g->rv_parts && g->rv_until_ms < next)
        next = g->rv_until_ms;
    if (g->next_stall_ms < next)
        next = g->next_stall_ms;
    if (g->cwait_head && cwait_next_due(g) < next)
        next = cwait_next_due(g);
    if (g->pause_due_ms < next)
        next = g->pause_due_ms;
    if (next < now + 1)
        next = now + 1;
    if (next == g->timer_due_ms)
        return; /* armed for that already: one syscall less per wakeup */
    g->timer_due_ms = next;
    /* ks_now_ms is CLOCK_MONOTONIC in ms, like the timer's absolute time. */
    struct itimerspec its = {
        .it_value = {.tv_sec = next / 1000, .tv_nsec = (next % 1000) * 1000000}};
    timerfd_settime(g->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void close_consumer(ks_group_t *g)
{
    /* Final commit, then leave: consumer_close runs the revoke callback, which
     * commits each partition's final point synchronously and drops its window. */
    commit_moved(g, true, NULL);
    rd_kafka_resp_err_t err = rd_kafka_consumer_close(g->rk);
    if (err)
        ks_warn(g->log_name, "leaving the group: %s", rd_kafka_err2str(err));
    while (g->part_cnt)
        part_remove(g, g->parts[0]);
    cwait_expire(g, ks_now_ms(), true); /* none should be left: every partition went */
    if (g->dlq_rk)
        rd_kafka_flush(g->dlq_rk, 5000);
}

void *loop_main(void *arg)
{
    ks_group_t *g = arg;
    ks_owner_enter(&g->owner);
    /* Freed record copies are kept for the next ones, up to a 128th of the budget (2 MiB
     * at most) for all groups together: an ack batch's worth of 100-byte records. */
    int64_t keep = g->cfg->memory_max_bytes / 128;
    ks_rec_pool_start((size_t)(keep < (INT64_C(2) << 20) ? keep : (INT64_C(2) << 20)));
    ks_info(g->log_name, "group loop started (ordering %s%s%s)",
            ks_ordering_str((ks_ordering_t)g->gconf->ordering),
            *g->gconf->dead_letter_topic ? ", dead letters to " : "", g->gconf->dead_letter_topic);
    g->next_commit_ms = ks_now_ms() + g->cfg->commit_interval_ms;
    g->last_activity_ms = ks_now_ms();
    if (g->is_static)
        subscribe_to(g, (const char *const *)g->gconf->topics, g->gconf->topic_cnt);

    while (g->life != GROUP_STOPPING) {
        arm_timer(g, ks_now_ms());
        ks_owner_leave(&g->owner);
        struct epoll_event evs[4];
        int n = epoll_wait(g->epfd, evs, 4, g->intake_more ? 0 : -1);
        ks_owner_enter(&g->owner);
        if (n < 0 && errno != EINTR) {
            ks_err(g->log_name, "epoll_wait: %s", strerror(errno));
            break;
        }
        bool timer = false, rk_ev = false, dlq_ev = false;
        for (int i = 0; i < n; i++) {
            timer = timer || evs[i].data.fd == g->tfd;
            rk_ev = rk_ev || evs[i].data.fd == g->rk_pipe[0];
            dlq_ev = dlq_ev || evs[i].data.fd == g->dlq_pipe[0];
        }
        if (timer) {
            uint64_t ticks;
            ssize_t r = read(g->tfd, &ticks, sizeof(ticks));
            (void)r;
            g->timer_due_ms = 0;
        }
        drain_consumer(g, rk_ev);
        if (dlq_ev)
            drain_dlq(g);
        int64_t now = ks_now_ms();
        drain_inbox(g, now, false);
        intake(g, now); /* after the acks above made room */
        ks_leases_run(&g->leases, now, lease_event, g);
        revoke_step(g, now, false); /* after the acks and expiries above */
        commit_held(g, now);
        serve_waiting(g, now);
        if (now >= g->next_commit_ms) {
            commit_moved(g, false, NULL);
            for (size_t i = 0; i < g->part_cnt; i++)
                ks_ack_window_compact(&g->parts[i]->win);
            subs_reap(g, now);
            g->next_commit_ms = now + g->cfg->commit_interval_ms;
        }
        if (g->cwait_head)
            cwait_expire(g, now, false);
        if (now >= g->next_stall_ms)
            stall_check(g, now);
        if (g->life == GROUP_DRAINING && (total_leased(g) == 0 || now >= g->drain_until_ms)) {
            if (total_leased(g))
                ks_warn(g->log_name,
                        "shutdown: %zu records still leased; they will be "
                        "redelivered",
                        total_leased(g));
            group_life_move(g, GROUP_STOPPING);
        } else if (now >= idle_due(g)) {
            if (!g->wait_head && total_leased(g) == 0 && g->idle_fn(g, g->idle_opaque)) {
                ks_info(g->log_name, "idle for %d ms with no subscribers: closing",
                        g->cfg->idle_close_ms);
                group_life_move(g, GROUP_STOPPING);
            } else {
                g->last_activity_ms = now; /* busy after all: look again later */
            }
        }
    }

    /* Refuse new commands, end a revoke's grace, answer what is still queued, commit,
     * leave. */
    group_life_move(g, GROUP_NOT_DELIVERING);
    revoke_step(g, ks_now_ms(), true);
    drain_inbox(g, ks_now_ms(), true);
    serve_waiting(g, ks_now_ms());
    close_consumer(g);
    ks_rec_pool_stop();
    rec_pool_tally(g);
    ks_info(g->log_name, "group loop stopped: committed and left the group");
    ks_owner_leave(&g->owner);
    atomic_store(&g->exited, true);
    return NULL;
}
