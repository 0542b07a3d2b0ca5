/* group.c: a group's lifecycle: its librdkafka consumer's setup, the commands posted to its inbox,
 * join and destroy. */
#include "group_int.h"
#include "schema_gate.h"
#include "kconf.h"

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* How many records a settle's ids name: a range id names each of its offsets. */
static size_t settle_records(const ks_cmd_req_t *req)
{
    if (req->u.settle.records) /* ks_cmd_validate counted them */
        return req->u.settle.records;
    size_t n = 0;
    for (size_t i = 0; i < req->u.settle.n; i++)
        n += ks_ack_id_count(req->u.settle.ack_ids[i]);
    return n;
}

cmd_t *cmd_copy(const ks_cmd_req_t *req)
{
    size_t nrefs = req->type == KS_CMD_SETTLE ? settle_records(req) : 0;
    size_t refs = align8(nrefs * sizeof(ks_ack_ref_t));
    cmd_t *c = malloc(sizeof(*c) + refs + ks_cmd_copy_size(req));
    if (!c)
        abort();
    memset(c, 0, sizeof(*c));
    c->posted_ms = ks_now_ms();
    ks_cmd_copy(&c->req, req, c->data + refs);
    if (nrefs) {
        /* Each ref's topic points into its id's copy, in this same block; a range id becomes
         * one ref per offset, in order. */
        c->refs = (ks_ack_ref_t *)(void *)c->data;
        c->nrefs = nrefs;
        ks_ack_parse_cache_t pc = {0};
        size_t j = 0;
        for (size_t i = 0; i < c->req.u.settle.n; i++) {
            ks_ack_ref_t *r = &c->refs[j++];
            ks_ack_id_parse_ref_cached(c->req.u.settle.ack_ids[i], r, &pc);
            if (!r->ok || !r->range)
                continue;
            if ((uint64_t)(r->last - r->offset) > nrefs - j) /* counted otherwise: never */
                abort();
            /* Counted, not compared: last may be INT64_MAX. */
            for (uint64_t k = 1; k <= (uint64_t)(r->last - r->offset); k++) {
                c->refs[j] = *r;
                c->refs[j++].offset = r->offset + (int64_t)k;
            }
        }
    }
    return c;
}

void cmd_free(cmd_t *c)
{
    free(c); /* one block: cmd_copy */
}

const char *group_life_str(group_life_t s)
{
    static const char *const names[] = {
        [GROUP_DELIVERING] = "delivering",
        [GROUP_NOT_DELIVERING] = "not-delivering",
        [GROUP_DRAINING] = "draining",
        [GROUP_STOPPING] = "stopping",
    };
    return (size_t)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

void group_life_move(ks_group_t *g, group_life_t to)
{
    if (to <= g->life)
        return;
    ks_dbg(g->log_name, "group %s -> %s", group_life_str(g->life), group_life_str(to));
    g->life = to;
}

const char *ks_group_name(const ks_group_t *g)
{
    return g->name;
}

bool ks_group_exited(const ks_group_t *g)
{
    return atomic_load(&g->exited);
}

void part_move(ks_group_t *g, part_t *p, ks_pstate_t to)
{
    ks_pstate_t from = p->state;
    if (!ks_pstate_move(&p->state, to))
        ks_warn(g->log_name, "%s[%d]: ignored illegal transition %s -> %s", p->topic, p->partition,
                ks_pstate_str(from), ks_pstate_str(to));
    else
        ks_dbg(g->log_name, "%s[%d]: %s -> %s", p->topic, p->partition, ks_pstate_str(from),
               ks_pstate_str(to));
}

/* From librdkafka's "Group "g" changed join state A -> B (state S)" debug line: whether a
 * JoinGroup or SyncGroup is in flight. Returns -1 for a line that is not one. */
static int join_state_line(const char *fac, const char *buf)
{
    if (strcmp(fac, "CGRPJOINSTATE") != 0)
        return -1;
    const char *to = strstr(buf, "-> ");
    if (!to)
        return -1;
    to += 3;
    return strncmp(to, "wait-join", 9) == 0 || strncmp(to, "wait-metadata", 13) == 0 ||
           strncmp(to, "wait-sync", 9) == 0;
}

/* @locality any librdkafka thread */
static void rk_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    int joining = join_state_line(fac, buf);
    if (joining >= 0 && rd_kafka_type(rk) == RD_KAFKA_CONSUMER) {
        ks_group_t *g = rd_kafka_opaque(rk);
        atomic_store(&g->cgrp_joining, joining == 1);
    }
    ks_log_level_t l = level <= 3   ? KS_LOG_ERROR
                       : level <= 5 ? KS_LOG_WARN
                       : level <= 6 ? KS_LOG_INFO
                                    : KS_LOG_DEBUG;
    ks_log(l, "rdkafka", "%s: %s: %s", rd_kafka_name(rk), fac, buf);
}

static void rk_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    ks_group_t *g = opaque;
    ks_warn(g->log_name, "kafka: %s: %s", rd_kafka_err2name(err), reason);
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        snprintf(g->down, sizeof(g->down), "Kafka is unreachable: %s", reason);
}

static int64_t conf_int(rd_kafka_t *rk, const char *name)
{
    char buf[64];
    size_t n = sizeof(buf);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), name, buf, &n) != RD_KAFKA_CONF_OK)
        return INT64_MAX;
    return strtoll(buf, NULL, 10);
}

ks_group_t *ks_group_start(const char *name, const ks_config_t *cfg, const ks_group_conf_t *gconf,
                           bool is_static, uint32_t instance, ks_group_idle_fn *idle_fn,
                           void *idle_opaque, char *err, size_t errsize)
{
    ks_group_t *g = calloc(1, sizeof(*g));
    if (!g)
        abort();
    g->name = ks_xstrdup(name);
    snprintf(g->log_name, sizeof(g->log_name), "group:%s", name);
    g->group_hash = ks_ack_id_group_hash(name);
    g->instance = instance;
    g->cfg = cfg;
    g->gconf = gconf;
    g->key_format = gconf->key_format ? ks_rec_format_from_str(gconf->key_format) : KS_FMT_BINARY;
    g->value_format =
        gconf->value_format ? ks_rec_format_from_str(gconf->value_format) : KS_FMT_BINARY;
    if ((int)g->key_format < 0)
        g->key_format = KS_FMT_BINARY;
    if ((int)g->value_format < 0)
        g->value_format = KS_FMT_BINARY;
    g->is_static = is_static;
    g->idle_fn = idle_fn;
    g->idle_opaque = idle_opaque;
    g->life = GROUP_DELIVERING;
    g->epfd = g->tfd = g->rk_pipe[0] = g->rk_pipe[1] = g->dlq_pipe[0] = g->dlq_pipe[1] = -1;
    g->inbox.efd = -1;
    ks_leases_init(&g->leases);
    atomic_init(&g->exited, false);
    atomic_init(&g->cgrp_joining, false);
    atomic_init(&g->owner.tid, 0);

    g->fetch_taken = ks_mem_fetch_take(cfg->memory_max_bytes, cfg->static_group_cnt);
    rd_kafka_conf_t *conf = ks_kconf_new_consumer(cfg, name, g->fetch_taken, err, errsize);
    if (!conf)
        goto fail;
    rd_kafka_conf_set_opaque(conf, g);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, offset_commit_cb);
    rd_kafka_conf_set_log_cb(conf, rk_log_cb);
    rd_kafka_conf_set_error_cb(conf, rk_error_cb);

    char e[512];
    g->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof(e));
    if (!g->rk) {
        snprintf(err, errsize, "creating the consumer for group %s: %s", name, e);
        goto fail_conf;
    }
    rd_kafka_poll_set_consumer(g->rk);
    g->cq = rd_kafka_queue_get_consumer(g->rk);
    g->q_max_msgs = conf_int(g->rk, "queued.min.messages");
    g->first_fetch = KS_MEM_FIRST_FETCH;
    g->pause_due_ms = INT64_MAX;
    g->max_poll_ms = conf_int(g->rk, "max.poll.interval.ms");
    int64_t q_kb = conf_int(g->rk, "queued.max.messages.kbytes");
    g->q_max_bytes = q_kb < INT64_MAX / 1024 ? q_kb * 1024 : INT64_MAX;
    g->q_kbytes = q_kb;
    g->fetch_max_bytes = conf_int(g->rk, "fetch.message.max.bytes");

    pthread_mutex_init(&g->stall_lock, NULL);
    if (ks_inbox_init(&g->inbox) < 0 || pipe2(g->rk_pipe, O_NONBLOCK | O_CLOEXEC) < 0 ||
        pipe2(g->dlq_pipe, O_NONBLOCK | O_CLOEXEC) < 0 ||
        (g->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
        (g->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        snprintf(err, errsize, "group %s: making its fds: %s", name, strerror(errno));
        goto fail;
    }
    rd_kafka_queue_io_event_enable(g->cq, g->rk_pipe[1], "1", 1);
    int fds[4] = {g->rk_pipe[0], ks_inbox_fd(&g->inbox), g->tfd, g->dlq_pipe[0]};
    for (int i = 0; i < 4; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
            snprintf(err, errsize, "group %s: epoll_ctl: %s", name, strerror(errno));
            goto fail;
        }
    }
    if (pthread_create(&g->thread, NULL, loop_main, g) != 0) {
        snprintf(err, errsize, "group %s: cannot start its thread", name);
        goto fail;
    }
    /* "ks:" and the group's name, cut to the 15 bytes a thread name holds, for top -H and
     * per-thread CPU: otherwise it inherits the name of whichever thread created it. */
    char tname[16];
    snprintf(tname, sizeof(tname), "ks:%s", name);
    pthread_setname_np(g->thread, tname);
    return g;

fail_conf:
    if (!g->rk)
        rd_kafka_conf_destroy(conf);
fail:
    atomic_store(&g->exited, true);
    g->joined = true;
    ks_group_destroy(g);
    return NULL;
}

ks_status_t ks_group_post(ks_group_t *g, const ks_cmd_req_t *req)
{
    if (!group_serves(req->type))
        return KS_E_INVALID;
    cmd_t *c = cmd_copy(req);
    if (ks_inbox_post(&g->inbox, &c->node) < 0) {
        cmd_free(c);
        return KS_E_UNAVAILABLE;
    }
    return KS_OK;
}

int ks_group_join(ks_group_t *g, int64_t deadline_ms)
{
    if (g->joined)
        return 0;
    int64_t left = deadline_ms - ks_now_ms();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (left < 0)
        left = 0;
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    if (pthread_timedjoin_np(g->thread, NULL, &ts) != 0)
        return -1;
    g->joined = true;
    return 0;
}

/* True if the consumer's assignment strategies include cooperative-sticky. */
static bool uses_cooperative_sticky(rd_kafka_t *rk)
{
    char buf[256];
    size_t n = sizeof(buf);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), "partition.assignment.strategy", buf, &n) !=
        RD_KAFKA_CONF_OK)
        return true; /* unknown: assume the worst */
    return strstr(buf, "cooperative-sticky") != NULL;
}

void ks_group_destroy(ks_group_t *g)
{
    bool keep = false;  /* the struct outlives a handle left alive (below) */
    if (g->fetch_taken) /* a handle kept alive below holds no partitions: it fetches nothing */
        ks_mem_fetch_give(g->fetch_taken);
    g->fetch_taken = 0;
    if (g->dlq_rk) {
        rd_kafka_queue_t *q = rd_kafka_queue_get_main(g->dlq_rk);
        rd_kafka_queue_io_event_enable(q, -1, NULL, 0);
        rd_kafka_queue_destroy(q);
        rd_kafka_destroy(g->dlq_rk);
    }
    if (g->rk) {
        if (g->cq) {
            rd_kafka_queue_io_event_enable(g->cq, -1, NULL, 0);
            rd_kafka_queue_destroy(g->cq);
        }
        /* librdkafka 2.0.2 (#4312, fixed in 2.3.0) asserts in
         * rd_kafka_sticky_assignor_state_destroy when a cooperative-sticky consumer that
         * joined but never got its assignment is destroyed: a SIGTERM mid-join aborted the
         * process (exit -6). Such a handle is left to the process exit instead; it holds
         * no partitions and has already left the group. Its threads may still call
         * rk_log_cb, which reads the group through the handle's opaque: the group's own
         * struct is kept too (everything else it holds is freed). */
        if (!g->ever_assigned && uses_cooperative_sticky(g->rk)) {
            ks_warn(g->log_name, "consumer never got an assignment: its handle is not destroyed "
                                 "(librdkafka 2.0.2 would abort, its issue #4312)");
            keep = true;
        } else {
            rd_kafka_destroy(g->rk);
        }
    }
    ks_schema_gate_cancel(g); /* no schema fetch wakes the inbox closed below */
    int fds[] = {g->epfd, g->tfd, g->rk_pipe[0], g->rk_pipe[1], g->dlq_pipe[0], g->dlq_pipe[1]};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (g->inbox.efd >= 0)
        ks_inbox_destroy(&g->inbox);
    ks_leases_destroy(&g->leases);
    pthread_mutex_destroy(&g->stall_lock);
    dlv_forget(g, 0, NULL);
    for (size_t i = 0; i < g->sub_cnt; i++)
        free(g->subs[i]);
    free(g->subs);
    free_strv(g->topics, g->topic_cnt);
    free(g->parts);
    free(g->name);
    g->name = NULL;
    if (!keep)
        free(g);
}
