/* group_intake.c: records in from librdkafka: each partition's queue into its window, within the
 * window's bounds and the memory budget. */
#include "group_int.h"
#include "otel.h"

static uint64_t fnv64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

void rec_free(void *rec)
{
    if (rec)
        ks_rec_pool_free(rec, ((rec_t *)rec)->pool_cls);
}

void rec_pool_tally(ks_group_t *g)
{
    int64_t h = ks_rec_pool_held();
    if (h != g->pool_tallied) {
        ks_mem_used_add(h - g->pool_tallied);
        g->pool_tallied = h;
    }
}

static rec_t *rec_copy(rd_kafka_message_t *m)
{
    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(m, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
        hdrs = NULL;
    size_t hc = hdrs ? rd_kafka_header_cnt(hdrs) : 0;
    size_t need = align8(sizeof(rec_t)) + hc * sizeof(ks_header_t) + m->key_len + m->len + 2;
    const char *name;
    const void *val;
    size_t vlen;
    for (size_t h = 0; h < hc && rd_kafka_header_get_all(hdrs, h, &name, &val, &vlen) == 0; h++)
        need += strlen(name) + 1 + vlen + 1;
    uint16_t cls;
    rec_t *r = ks_rec_pool_alloc(need, &cls);
    r->pool_cls = cls;
    rd_kafka_timestamp_type_t tstype;
    r->timestamp = rd_kafka_message_timestamp(m, &tstype);
    ks_header_t *rh = (ks_header_t *)(void *)r->data;
    r->header_cnt = (uint32_t)hc; /* rec_key and rec_value skip hc headers */
    char *pos = r->data + hc * sizeof(ks_header_t);
    r->has_key = m->key != NULL;
    r->key_len = m->key ? (uint32_t)m->key_len : 0;
    if (m->key)
        memcpy(pos, m->key, m->key_len);
    pos += r->key_len;
    *pos++ = '\0';
    r->has_value = m->payload != NULL;
    r->value_len = m->payload ? (uint32_t)m->len : 0;
    if (m->payload)
        memcpy(pos, m->payload, m->len);
    pos += r->value_len;
    *pos++ = '\0';
    size_t h = 0;
    for (; h < hc && rd_kafka_header_get_all(hdrs, h, &name, &val, &vlen) == 0; h++) {
        size_t nl = strlen(name) + 1;
        memcpy(pos, name, nl);
        rh[h].name = pos;
        pos += nl;
        rh[h].value = val ? pos : NULL;
        rh[h].value_len = val ? vlen : 0;
        if (val)
            memcpy(pos, val, vlen);
        pos += vlen;
        *pos++ = '\0';
    }
    for (; h < hc; h++) /* a header librdkafka would not give back: empty */
        rh[h] = (ks_header_t){.name = "", .value = NULL, .value_len = 0};
    return r;
}

#define INTAKE_BATCH 256

/* Records one pass takes from a partition's queue at most: with many partitions, a pass
 * that copied every queue whole before looking at the budget again took a startup's
 * burst of fetches into the windows (peak RSS 300-310 MB at 64 partitions, 236-240 MB
 * with this bound). */
#define INTAKE_PASS_MAX 4096

/* Brings the process's tallies up to date with p's window and queue. */
static void part_tally(part_t *p)
{
    int64_t m = part_mem(p), q = part_queue_mem(p);
    if (m != p->mem_tallied) {
        ks_mem_used_add(m - p->mem_tallied);
        p->mem_tallied = m;
    }
    if (q != p->q_tallied) {
        ks_mem_queued_add(q - p->q_tallied);
        p->q_tallied = q;
    }
}

static void handle_message(ks_group_t *g, part_t *p, rd_kafka_message_t *m)
{
    if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            ks_warn(g->log_name, "consumer: %s%s%s", rd_kafka_message_errstr(m),
                    m->rkt ? " topic " : "", m->rkt ? rd_kafka_topic_name(m->rkt) : "");
        rd_kafka_message_destroy(m);
        return;
    }
    if (!p)
        p = part_find(g, rd_kafka_topic_name(m->rkt), m->partition);
    if (!p || p->state == KS_PS_REVOKING || m->offset < p->win.end_offset) {
        /* Not ours any more, or already held (fetched again after a seek). */
        rd_kafka_message_destroy(m);
        return;
    }
    /* Restored metadata: acked before a restart means done now; attempts carry on. */
    ks_commit_meta_t *r = &p->restore;
    while (p->restore_ack_i < r->acked_cnt && r->acked[p->restore_ack_i] < m->offset)
        p->restore_ack_i++;
    while (p->restore_att_i < r->attempt_cnt && r->attempts[p->restore_att_i].offset < m->offset)
        p->restore_att_i++;
    if (p->restore_ack_i < r->acked_cnt && r->acked[p->restore_ack_i] == m->offset) {
        ks_ack_window_push_done(&p->win, m->offset);
        rd_kafka_message_destroy(m);
        return;
    }
    int64_t off = m->offset;
    uint32_t bytes = (uint32_t)(m->len + m->key_len);
    bool has_key = m->key != NULL;
    uint64_t kh = m->key ? fnv64(m->key, m->key_len) : 0;
    rec_t *rec = rec_copy(m);
    rd_kafka_message_destroy(m); /* frees librdkafka's buffer as soon as possible */
    if (ks_ack_window_push(&p->win, off, bytes, rec) < 0) {
        rec_free(rec);
        return;
    }
    ks_win_entry_t *e = ks_ack_window_get(&p->win, off);
    if (p->restore_att_i < r->attempt_cnt && r->attempts[p->restore_att_i].offset == off) {
        uint32_t a = r->attempts[p->restore_att_i].attempts;
        e->attempts = (uint16_t)(a > UINT16_MAX ? UINT16_MAX : a);
        ks_ack_window_touched(&p->win, off);
    }
    if (__builtin_expect(ks_otel_on, 0))
        otel_ready_since(e); /* its first receive span starts here */
    ks_key_sched_add(&p->sched, &p->win, e, has_key, kh);
}

/* librdkafka 2.0.2 stops fetching a partition whose queue is at queued.min.messages or
 * queued.max.messages.kbytes, and looks again only when its broker thread next wakes:
 * up to a second later when no other fetch is running. An asynchronous seek to where
 * the window ends wakes it now. Done once the queue is empty (or on a resume, whose own
 * barrier emptied it): the seek's version barrier throws away no record taken, only a
 * fetch still in flight, fetched again from the same offset. */
static void part_wake_fetcher(ks_group_t *g, part_t *p)
{
    if (p->win.end_offset < 0)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = p->win.end_offset;
    rd_kafka_error_t *err = rd_kafka_seek_partitions(g->rk, l, 0);
    if (err) {
        ks_warn(g->log_name, "%s[%d]: waking the fetcher: %s", p->topic, p->partition,
                rd_kafka_error_string(err));
        rd_kafka_error_destroy(err);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

bool part_caught_up(ks_group_t *g, const part_t *p)
{
    int64_t lo, hi;
    return p->win.end_offset >= 0 &&
           rd_kafka_get_watermark_offsets(g->rk, p->topic, p->partition, &lo, &hi) ==
               RD_KAFKA_RESP_ERR_NO_ERROR &&
           hi >= 0 && p->win.end_offset >= hi;
}

/* Pauses (pause true) or resumes p in librdkafka. @locality group loop, between batch
 * calls (librdkafka 2.0.x's batch consume mishandles a pause or resume made meanwhile). */
void part_kafka_pause(ks_group_t *g, part_t *p, bool pause)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, p->topic, p->partition);
    rd_kafka_resp_err_t err =
        pause ? rd_kafka_pause_partitions(g->rk, l) : rd_kafka_resume_partitions(g->rk, l);
    if (!err)
        err = l->elems[0].err;
    rd_kafka_topic_partition_list_destroy(l);
    if (err) {
        ks_warn(g->log_name, "%s[%d]: %s in librdkafka: %s", p->topic, p->partition,
                pause ? "pausing" : "resuming", rd_kafka_err2str(err));
        return;
    }
    /* Judged before kpause_ms moves: whether p paused a moment ago, caught up then. */
    bool caught_up = !pause && part_caught_up_now(g, p, ks_now_ms());
    p->kpaused = pause;
    if (!pause && p->admit_wait) {
        p->admit_wait = false;
        g->admit_ms = ks_now_ms();
    }
    /* A resumed partition's next fetch counts as queued until it comes (or a while has
     * passed: a partition at its end fetches nothing), so that the partitions resumed at
     * once stay within ks_mem_fetch_fits together. One caught up expects nothing: at 256
     * partitions, whose first fetches brought each one's whole backlog, the partitions
     * resumed at their end held most of the budget's quarter with fetches that never came,
     * and a new assignment's partitions waited for them (part_admit). */
    p->q_reserved = pause || caught_up ? 0 : part_fetch_cost(g, p);
    p->kpause_ms = ks_now_ms();
    if (pause) {
        p->budget_pauses++;
        if (!p->admit_wait) /* at an assignment the queue holds no record yet */
            p->budget_dropped += (int64_t)rd_kafka_queue_length(p->q);
        /* The pause's version barrier makes what the queue holds outdated, but librdkafka
         * 2.0.2 left it there (6,000+ records a partition, seen in its status): a batch
         * consume drops outdated records without returning them, which gives the memory
         * back. The resume fetches again from the last record taken (librdkafka's app
         * position), so no fetcher is left to wake with a seek. A record it did return
         * (none expected) is taken as usual. */
        rd_kafka_message_t *ms[INTAKE_BATCH];
        ssize_t n;
        while ((n = rd_kafka_consume_batch_queue(p->q, 0, ms, INTAKE_BATCH)) > 0)
            for (ssize_t k = 0; k < n; k++)
                handle_message(g, p, ms[k]);
        p->q_len = 0;
        p->q_was_full = false;
        p->taken_run = 0;
    } else if (ks_pstate_deliverable(p->state)) {
        /* librdkafka 2.0.2 looks at a resumed partition only when its broker thread next
         * wakes: 0.8 to 0.9 s after the resume, seen in its fetch debug log (at 64
         * partitions every window ran dry in the wait). */
        part_wake_fetcher(g, p);
    }
    part_tally(p);
}

void part_admit(ks_group_t *g, part_t *p, int64_t now)
{
    if (!p->q || p->kpaused)
        return;
    int64_t cost = part_fetch_cost(g, p);
    if (ks_mem_fetch_fits(g->cfg->memory_max_bytes, cost)) {
        /* Counted until it comes: the next partitions of the assignment see it. */
        p->q_reserved = cost;
        p->kpause_ms = now;
        part_tally(p);
        return;
    }
    /* All of a large assignment's partitions fetching at once brought more than the
     * windows could take: at 256 partitions the budget's pauses threw away 1.2-2.2M of a
     * 2,000,000-record backlog, fetched again later (tests/bench partitions rows). Paused
     * now, before its first fetch, the partition has nothing to throw away. */
    p->admit_wait = true;
    part_kafka_pause(g, p, true);
    p->admit_wait = p->kpaused;
}

/* Serves the consumer queue (records, errors, rebalance callbacks) on every wakeup:
 * polling it is also what keeps the member within max.poll.interval.ms. */
void drain_consumer(ks_group_t *g, bool pipe_ready)
{
    char buf[256];
    while (pipe_ready && read(g->rk_pipe[0], buf, sizeof(buf)) > 0)
        ;
    rd_kafka_message_t *m;
    while ((m = rd_kafka_consumer_poll(g->rk, 0)))
        handle_message(g, NULL, m);
}

/* A fetch response that reaches fetch.max.bytes cuts its last partition's records short,
 * so one first fetch may be a small part of the others: the estimate is the most of the
 * first KS_FIRST_FETCH_SAMPLES first fetches (KS_MEM_FIRST_FETCH until then), and of any
 * later one that cost more. A smaller estimate admitted a whole 256-partition assignment
 * at once in one run of three (1.76M records fetched twice). */
#define KS_FIRST_FETCH_SAMPLES 4

static void first_fetch_seen(ks_group_t *g, int64_t cost)
{
    if (cost < KS_MEM_WINDOW_FLOOR)
        cost = KS_MEM_WINDOW_FLOOR;
    g->first_max = cost > g->first_max ? cost : g->first_max;
    if (++g->first_seen >= KS_FIRST_FETCH_SAMPLES)
        g->first_fetch = g->first_max;
}

/* Moves records from p's queue into its window while the window has room, up to cap
 * bytes of window memory (a window may pass window.max_bytes by one batch, and cap by
 * about one record). Returns true when it left the queue empty. */
static bool intake_part(ks_group_t *g, part_t *p, int64_t cap)
{
    size_t len = rd_kafka_queue_length(p->q);
    p->q_len = len; /* one look per pass: it takes librdkafka's queue lock */
    /* Marked only once the pass takes records: the length counts events too, and the
     * barrier of part_wake_fetcher's own seek counted as a full queue of 10 KB records
     * started the next seek, each dropping the fetch in flight (a seek storm that kept a
     * partition's window from filling for a minute). Judged by the average size with the
     * batch just taken: before a partition's first batch there is none, and its first
     * fetch, at the limit, then waited out librdkafka's second (issue 22's seed scenario:
     * 770 ms lost after the first 8,774 records). */
    bool full = (int64_t)len * 2 >= g->q_max_msgs;
    /* In batches: one call for many records. librdkafka 2.0.x's batch consume mishandles
     * pause and resume (fixed in 2.1.0); ksidecar's pauses (part_check_bound), seeks and
     * rebalances all run on this thread between batches. */
    rd_kafka_message_t *ms[INTAKE_BATCH];
    for (size_t taken = 0; taken < INTAKE_PASS_MAX && part_has_room(g, p) && part_mem(p) < cap;) {
        size_t room = (size_t)g->cfg->window_max_records - ks_ack_window_count(&p->win);
        /* Records that fit the cap at the last batch's average size, at least one. */
        double per = p->q_avg_bytes + (double)ks_mem_record_overhead();
        double fit = (double)(cap - part_mem(p)) / per + 1;
        if (fit < (double)room)
            room = (size_t)fit;
        ssize_t n =
            rd_kafka_consume_batch_queue(p->q, 0, ms, room < INTAKE_BATCH ? room : INTAKE_BATCH);
        if (n <= 0) {
            /* What the pass began with but did not get was thrown away by librdkafka as
             * outdated: a fetch that was in flight when the last wake's seek went out
             * came back after it. Counted against the queue's limit before this pass
             * dropped it, it stopped the fetcher as surely as records taken would have
             * (185 records, 18 KB against a limit of 12: the next fetch a second later;
             * the latency bench at 50,000 rec/s had one such second a run, p99 0.85 s).
             * One op of it is the seek's own barrier. Once until records come again: a wake
             * whose own barrier, or a resume's, counted as lost must not seek again and
             * again (each seek outdates the fetch in flight). */
            double lost = (double)len - (double)taken - 1;
            bool lost_full = lost > 0 && lost * p->q_avg_bytes * 2 >= (double)g->q_max_bytes;
            if (p->q_was_full || (lost_full && !p->lost_woke)) {
                p->lost_woke = !p->q_was_full;
                part_wake_fetcher(g, p);
            }
            p->q_was_full = false;
            p->q_len = 0;
            if (p->taken_run > 0) { /* what the fetch just emptied brought */
                bool first = p->fetch_recs == 0;
                p->fetch_recs = p->taken_run;
                if (first) /* what the assignment's other first fetches may bring */
                    first_fetch_seen(g, part_fetch_cost(g, p));
            }
            p->taken_run = 0;
            return true;
        }
        size_t bytes = 0;
        for (ssize_t k = 0; k < n; k++) {
            bytes += ms[k]->len + ms[k]->key_len;
            handle_message(g, p, ms[k]);
        }
        p->q_len = p->q_len > (size_t)n ? p->q_len - (size_t)n : 0;
        p->taken_run = p->taken_run + (uint32_t)n;
        p->lost_woke = false; /* records came: a wake may be needed again */
        taken += (size_t)n;
        p->q_reserved = 0; /* the fetch a resume waited for came */
        p->q_avg_bytes = (double)bytes / (double)n;
        if (full || (double)len * p->q_avg_bytes * 2 >= (double)g->q_max_bytes)
            p->q_was_full = true;
        /* The pass's bound, not the window's, stopped it with records left: the loop comes
         * round again at once. Nothing else would wake it: librdkafka signals the pipe only
         * when a record comes to an empty queue, and fetches nothing for a queue at its
         * limit. */
        if (taken >= INTAKE_PASS_MAX && part_has_room(g, p) && part_mem(p) < cap)
            g->intake_more = true;
    }
    return false;
}

/* Under the budget's pressure, pauses p in librdkafka (part_kafka_pause) where letting it
 * fetch would throw records away: its window is full while its queue still holds records,
 * or windows and queues are past ks_mem_over and its window at its floor (both empty the
 * queue: fetched again later, counted in budget_dropped); or its queue is empty but its
 * window has less room than part_resume_room, a fetch like its last, or it holds records
 * and that fetch would not fit the budget's quarter (paused now, with nothing to throw
 * away: left fetching, that fetch would come to a window that takes part of it, or past
 * ks_mem_over, and be dropped and fetched again; at 64 partitions and 1 MB producer
 * batches every record was fetched three to four times). A window that holds nothing
 * (a partition caught up) is not paused for the tally: it fetches what comes. */
static void budget_check(ks_group_t *g, part_t *p, bool over, bool emptied)
{
    int64_t room = part_room_bytes(g, p);
    bool queued = !emptied && (p->q_len > 0 || rd_kafka_queue_length(p->q) > 0);
    /* Its own expected fetch (q_reserved) is in the tally already. */
    int64_t fetch = part_fetch_cost(g, p) - p->q_reserved;
    if (queued ? room <= 0 || (over && part_mem(p) >= KS_MEM_WINDOW_FLOOR)
               : room < part_resume_room(g, p) ||
                     (part_mem(p) > 0 && !ks_mem_fetch_fits(g->cfg->memory_max_bytes, fetch) &&
                      !part_caught_up_now(g, p, ks_now_ms())))
        part_kafka_pause(g, p, true);
}

/* Fills the windows that have room, then marks each partition at its bound PAUSED (or
 * ACTIVE again), records from the consumer queue included. While windows and queues are
 * past ks_mem_over, a window takes records only up to its floor (KS_MEM_WINDOW_FLOOR: the
 * tally is the whole process's, and every partition must still make progress). */
void intake(ks_group_t *g, int64_t now)
{
    rec_pool_tally(g); /* the copies that the acks before this pass freed */
    g->intake_more = false;
    g->mem_pressed = ks_mem_pressed(g->cfg->memory_max_bytes);
    int64_t due = INT64_MAX;
    bool admitting = false;
    for (size_t i = 0; i < g->part_cnt; i++) {
        part_t *p = g->parts[i];
        if (p->q_reserved && now - p->kpause_ms >= KS_RESERVE_MS)
            p->q_reserved = 0;
        if (p->q && !p->kpaused && ks_pstate_deliverable(p->state)) {
            bool over = g->mem_pressed && ks_mem_over(g->cfg->memory_max_bytes);
            int64_t cap = over ? KS_MEM_WINDOW_FLOOR : part_window_cap(g, p);
            bool emptied = part_has_room(g, p) && part_mem(p) < cap && intake_part(g, p, cap);
            if (g->mem_pressed)
                budget_check(g, p, over, emptied);
        }
        part_check_bound(g, p);
        part_tally(p);
        if (p->kpaused && p->admit_wait)
            admitting = true;
        else if (p->kpaused && p->kpause_ms + KS_BUDGET_PAUSE_MAX_MS > now &&
                 p->kpause_ms + KS_BUDGET_PAUSE_MAX_MS < due)
            due = p->kpause_ms + KS_BUDGET_PAUSE_MAX_MS;
    }
    /* The loop wakes when a paused partition may fetch whatever the tally (a deadline
     * passed waits for room, which an ack brings). */
    if (admitting && g->admit_ms + KS_ADMIT_STEP_MS > now && g->admit_ms + KS_ADMIT_STEP_MS < due)
        due = g->admit_ms + KS_ADMIT_STEP_MS;
    g->pause_due_ms = due;
}
