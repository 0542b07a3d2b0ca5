/* redrive.c: dead-letter redrive: reads a group's dead-letter topic up to the high watermarks
 * taken at the start, produces each record back to its original topic and commits its place
 * as the consumer group "<group>.redrive", on a thread per running redrive. */
#include "redrive.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kconf.h"
#include "log.h"
#include "util.h"

#define LOGC            "redrive"
#define CHUNK           1000  /* records produced before their delivery is waited for */
#define KAFKA_WAIT_MS   10000 /* one metadata, watermark or committed-offsets request */
#define IDLE_MAX_MS     30000 /* nothing read this long below the watermarks: give up */
#define STOP_WAIT_MS    5000  /* on shutdown, the most a redrive waits for delivery reports */
#define COMMIT_WAIT_MS  30000 /* committing the place through a coordinator's move */
#define COMMIT_RETRY_MS 500

int32_t ks_redrive_parse_count(const void *v, size_t len)
{
    const char *s = v;
    int64_t n = 0;
    if (!s || len == 0 || len > 10)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        n = n * 10 + (s[i] - '0');
    }
    return n > INT32_MAX ? -1 : (int32_t)n;
}

void ks_redrive_meta_read(const ks_header_t *hs, size_t n, ks_redrive_meta_t *out)
{
    memset(out, 0, sizeof(*out));
    out->partition = -1;
    for (size_t i = 0; i < n; i++) {
        const char *v = hs[i].value ? hs[i].value : "";
        size_t len = hs[i].value ? hs[i].value_len : 0;
        if (!strcmp(hs[i].name, KS_HDR_ORIG_TOPIC)) {
            out->has_topic = true;
            out->topic_ok = len > 0 && len < sizeof(out->topic) && !memchr(v, '\0', len);
            out->topic[0] = '\0';
            if (out->topic_ok) {
                memcpy(out->topic, v, len);
                out->topic[len] = '\0';
                out->topic_ok = ks_valid_kafka_name(out->topic);
            }
            if (!out->topic_ok)
                out->topic[0] = '\0';
        } else if (!strcmp(hs[i].name, KS_HDR_ORIG_PART)) {
            out->partition = ks_redrive_parse_count(v, len);
        } else if (!strcmp(hs[i].name, KS_HDR_REDRIVEN)) {
            out->redriven = ks_redrive_parse_count(v, len);
        } else if (!strcmp(hs[i].name, KS_HDR_GROUP)) {
            out->has_group = true;
            size_t k = len < sizeof(out->group) - 1 ? len : sizeof(out->group) - 1;
            memcpy(out->group, v, k);
            out->group[k] = '\0';
        }
    }
}

size_t ks_redrive_headers(const ks_header_t *in, size_t n, int32_t redriven, char *buf,
                          ks_header_t *out)
{
    size_t k = 0, plen = strlen(KS_REDRIVE_PREFIX);
    for (size_t i = 0; i < n; i++)
        if (strncmp(in[i].name, KS_REDRIVE_PREFIX, plen))
            out[k++] = in[i];
    snprintf(buf, KS_REDRIVE_COUNT_BUF, "%d", (int)redriven);
    out[k++] = (ks_header_t){.name = KS_HDR_REDRIVEN, .value = buf, .value_len = strlen(buf)};
    return k;
}

/* ---- one redrive ---- */

typedef struct run run_t;

struct ks_redriver {
    const ks_config_t *cfg;
    pthread_mutex_t lock; /* guards runs, stopping and each run's done */
    run_t *runs;          /* running, and ended but not joined yet */
    bool stopping;
    atomic_bool stop; /* read by the running threads */
};

/* A topic a redrive produces to: its partition count (0: it does not exist). */
typedef struct dest {
    char name[256];
    int32_t partitions;
    int64_t moved;
} dest_t;

/* A record produced and not yet reported delivered. */
typedef struct pending {
    int32_t partition; /* of the dead-letter topic */
    int64_t offset;
    size_t dest;
    bool done, failed;
    char error[160];
} pending_t;

struct run {
    run_t *next;
    ks_redriver_t *rd;
    pthread_t thread;
    bool done; /* its work is over (its callback may still run); @locks rd->lock */
    char group[256];
    int32_t max;
    bool dry_run;
    int redrive_max;
    ks_redrive_allow_fn *allow;
    void *allow_opaque;
    ks_redrive_cb *cb;
    void *opaque;
    /* The thread's own, from here on. */
    ks_redrive_result_t *res;
    rd_kafka_t *cons, *prod;
    int32_t nparts;
    int64_t *high, *read_to, *commit_to; /* per partition of the dead-letter topic */
    bool *finished;
    dest_t *dests;
    size_t dest_cnt;
    pending_t *pend;
    size_t pend_cnt;
};

static void fail(run_t *r, ks_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(run_t *r, ks_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->res->message, sizeof(r->res->message), fmt, ap);
    va_end(ap);
    r->res->status = st;
}

/* Notes a produce failure (the first one counts) for the report. */
static void note_error(run_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note_error(run_t *r, const char *fmt, ...)
{
    if (r->res->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->res->error, sizeof(r->res->error), fmt, ap);
    va_end(ap);
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    run_t *r = opaque;
    pending_t *p = &r->pend[(size_t)(uintptr_t)m->_private];
    p->done = true;
    p->failed = m->err != RD_KAFKA_RESP_ERR_NO_ERROR;
    if (p->failed)
        snprintf(p->error, sizeof(p->error), "%s", rd_kafka_err2str(m->err));
}

static int open_clients(run_t *r, char *e, size_t esize)
{
    char group_id[300];
    snprintf(group_id, sizeof(group_id), "%s.redrive", r->group);
    rd_kafka_conf_t *conf = ks_kconf_new(r->rd->cfg, KS_KCONF_REDRIVE_CONSUMER, group_id, e, esize);
    if (!conf)
        return -1;
    if (!(r->cons = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, esize)))
        return -1;
    rd_kafka_poll_set_consumer(r->cons);
    if (r->dry_run)
        return 0;
    if (!(conf = ks_kconf_new(r->rd->cfg, KS_KCONF_REDRIVE_PRODUCER, NULL, e, esize)))
        return -1;
    rd_kafka_conf_set_opaque(conf, r);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    return (r->prod = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, esize)) ? 0 : -1;
}

/* topic's partition count from the broker: 0 when it does not exist, -1 when the broker did
 * not answer (err says why). */
static int32_t topic_partitions(rd_kafka_t *rk, const char *topic, char *err, size_t errsize)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e =
        rkt ? rd_kafka_metadata(rk, 0, rkt, &md, KAFKA_WAIT_MS) : RD_KAFKA_RESP_ERR__INVALID_ARG;
    int32_t n = -1;
    if (e)
        snprintf(err, errsize, "%s", rd_kafka_err2str(e));
    else if (md->topic_cnt != 1 || md->topics[0].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        n = 0;
    else if (md->topics[0].err)
        snprintf(err, errsize, "%s", rd_kafka_err2str(md->topics[0].err));
    else
        n = md->topics[0].partition_cnt;
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    return n;
}

/* Where each partition of the dead-letter topic starts (the committed offset of
 * <group>.redrive, else the first kept) and ends (its high watermark now); assigns those with
 * records between. Returns 0, or -1 with the result's status set. */
static int find_range(run_t *r)
{
    const char *dlt = r->res->dead_letter_topic;
    char why[256];
    int32_t n = topic_partitions(r->cons, dlt, why, sizeof(why));
    if (n < 0) {
        fail(r, KS_E_UNAVAILABLE, "reading the metadata of dead-letter topic \"%s\": %s", dlt, why);
        return -1;
    }
    if (n == 0) {
        fail(r, KS_E_NOT_FOUND,
             "dead-letter topic \"%s\" does not exist (nothing was dead-lettered?)", dlt);
        return -1;
    }
    r->nparts = n;
    r->high = calloc((size_t)n, sizeof(*r->high));
    r->read_to = calloc((size_t)n, sizeof(*r->read_to));
    r->commit_to = calloc((size_t)n, sizeof(*r->commit_to));
    r->finished = calloc((size_t)n, sizeof(*r->finished));
    r->res->parts = calloc((size_t)n, sizeof(*r->res->parts));
    if (!r->high || !r->read_to || !r->commit_to || !r->finished || !r->res->parts)
        abort();
    r->res->part_cnt = (size_t)n;
    rd_kafka_topic_partition_list_t *tl = rd_kafka_topic_partition_list_new(n);
    int64_t *low = calloc((size_t)n, sizeof(*low));
    if (!low)
        abort();
    int rc = -1;
    for (int32_t p = 0; p < n; p++) {
        rd_kafka_resp_err_t e =
            rd_kafka_query_watermark_offsets(r->cons, dlt, p, &low[p], &r->high[p], KAFKA_WAIT_MS);
        if (e) {
            fail(r, KS_E_UNAVAILABLE, "reading the offsets of %s[%d]: %s", dlt, p,
                 rd_kafka_err2str(e));
            goto out;
        }
        rd_kafka_topic_partition_list_add(tl, dlt, p);
    }
    rd_kafka_resp_err_t e = rd_kafka_committed(r->cons, tl, KAFKA_WAIT_MS);
    if (e) {
        fail(r, KS_E_UNAVAILABLE, "reading the committed offsets of group \"%s.redrive\": %s",
             r->group, rd_kafka_err2str(e));
        goto out;
    }
    for (int i = 0; i < tl->cnt; i++) {
        int32_t p = tl->elems[i].partition;
        int64_t at = tl->elems[i].offset;
        if (at < low[p])
            at = low[p]; /* none committed yet, or retention removed what was */
        if (at > r->high[p])
            at = r->high[p];
        r->read_to[p] = r->commit_to[p] = at;
        r->finished[p] = at >= r->high[p];
        tl->elems[i].offset = at;
    }
    rc = 0;
out:
    free(low);
    if (rc == 0) {
        rd_kafka_resp_err_t ae = rd_kafka_assign(r->cons, tl);
        if (ae) {
            fail(r, KS_E_UNAVAILABLE, "assigning %s: %s", dlt, rd_kafka_err2str(ae));
            rc = -1;
        }
    }
    rd_kafka_topic_partition_list_destroy(tl);
    return rc;
}

/* The index of topic in r->dests, looked up on first use; its partitions are 0 when it does
 * not exist, -1 when the broker did not answer (why says so). */
static size_t dest_of(run_t *r, const char *topic, char *why, size_t whysize)
{
    for (size_t i = 0; i < r->dest_cnt; i++)
        if (!strcmp(r->dests[i].name, topic))
            return i;
    dest_t *n = realloc(r->dests, (r->dest_cnt + 1) * sizeof(*n));
    if (!n)
        abort();
    r->dests = n;
    dest_t *d = &r->dests[r->dest_cnt];
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", topic);
    d->partitions = topic_partitions(r->cons, topic, why, whysize);
    if (d->partitions < 0)
        return SIZE_MAX; /* not kept: asked again next time */
    return r->dest_cnt++;
}

static void list_add(ks_redrive_item_t **list, size_t *cnt, int64_t *total, int32_t partition,
                     int64_t offset, int32_t redriven, const char *reason)
{
    (*total)++;
    if (*cnt >= KS_REDRIVE_LIST_MAX)
        return;
    ks_redrive_item_t *n = realloc(*list, (*cnt + 1) * sizeof(*n));
    if (!n)
        abort();
    *list = n;
    n[*cnt] = (ks_redrive_item_t){.partition = partition, .offset = offset, .redriven = redriven};
    snprintf(n[*cnt].reason, sizeof(n[*cnt].reason), "%s", reason ? reason : "");
    (*cnt)++;
}

static void skip(run_t *r, const rd_kafka_message_t *m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void skip(run_t *r, const rd_kafka_message_t *m, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    list_add(&r->res->skipped, &r->res->skipped_cnt, &r->res->skipped_total, m->partition,
             m->offset, 0, why);
}

/* Produces m to dest d as a redriven record (redriven: its new count). A produce refused at
 * once counts as a failed delivery. */
static void produce(run_t *r, const rd_kafka_message_t *m, const ks_header_t *hs, size_t nh,
                    const ks_redrive_meta_t *meta, size_t d)
{
    ks_header_t *out = malloc((nh + 1) * sizeof(*out));
    if (!out)
        abort();
    char count[KS_REDRIVE_COUNT_BUF];
    size_t n = ks_redrive_headers(hs, nh, meta->redriven + 1, count, out);
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(n);
    for (size_t i = 0; i < n; i++)
        rd_kafka_header_add(hdrs, out[i].name, -1, out[i].value, (ssize_t)out[i].value_len);
    free(out);
    size_t i = r->pend_cnt++;
    r->pend[i] = (pending_t){.partition = m->partition, .offset = m->offset, .dest = d};
    int32_t part = meta->partition >= 0 && meta->partition < r->dests[d].partitions
                       ? meta->partition
                       : RD_KAFKA_PARTITION_UA;
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            r->prod, RD_KAFKA_V_TOPIC(r->dests[d].name), RD_KAFKA_V_PARTITION(part),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(m->key, m->key_len),
            RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_HEADERS(hdrs),
            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)i), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(r->prod, 100);
            continue;
        }
        if (e) {
            rd_kafka_headers_destroy(hdrs);
            r->pend[i].done = r->pend[i].failed = true;
            snprintf(r->pend[i].error, sizeof(r->pend[i].error), "%s", rd_kafka_err2str(e));
        }
        return;
    }
}

/* Decides what becomes of one dead letter (m) and does it: held, skipped, counted (dry run)
 * or produced. */
static void take(run_t *r, const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *rh = NULL;
    if (rd_kafka_message_headers(m, &rh) != RD_KAFKA_RESP_ERR_NO_ERROR)
        rh = NULL;
    size_t cnt = rh ? rd_kafka_header_cnt(rh) : 0, nh = 0;
    ks_header_t *hs = malloc((cnt + 1) * sizeof(*hs)); /* borrowed from m */
    if (!hs)
        abort();
    const char *name;
    const void *val;
    size_t size;
    while (nh < cnt && !rd_kafka_header_get_all(rh, nh, &name, &val, &size)) {
        hs[nh] = (ks_header_t){.name = name, .value = val, .value_len = size};
        nh++;
    }
    ks_redrive_meta_t meta;
    ks_redrive_meta_read(hs, nh, &meta);
    r->read_to[m->partition] = m->offset + 1;
    char why[256] = "";
    size_t d;
    if (meta.has_group && strcmp(meta.group, r->group)) {
        /* Groups may share a dead-letter topic (every dynamic group has the default one):
         * each redrives only its own, from its own place. */
        skip(r, m, "group \"%.100s\" dead-lettered it (its own redrive moves it)", meta.group);
    } else if (meta.redriven < 0) {
        skip(r, m, "its %s header is not a count", KS_HDR_REDRIVEN);
    } else if (meta.redriven >= r->redrive_max) {
        list_add(&r->res->held, &r->res->held_cnt, &r->res->held_total, m->partition, m->offset,
                 meta.redriven, "");
    } else if (!meta.has_topic) {
        skip(r, m, "it has no %s header", KS_HDR_ORIG_TOPIC);
    } else if (!meta.topic_ok) {
        skip(r, m, "its %s header is not a valid topic name", KS_HDR_ORIG_TOPIC);
    } else if (ks_cmd_internal_topic(r->rd->cfg, meta.topic)) {
        skip(r, m, "topic \"%s\" is internal to Kafka", meta.topic);
    } else if (r->allow && !r->allow(meta.topic, r->allow_opaque)) {
        skip(r, m, "the caller may not produce to topic \"%s\" (produce scope)", meta.topic);
    } else if ((d = dest_of(r, meta.topic, why, sizeof(why))) == SIZE_MAX) {
        /* The broker did not say: not moved, and the place stops before it. */
        note_error(r, "reading the metadata of topic \"%s\": %s", meta.topic, why);
        r->read_to[m->partition] = m->offset;
        r->finished[m->partition] = true;
    } else if (r->dests[d].partitions == 0) {
        skip(r, m, "topic \"%s\" does not exist", meta.topic);
    } else if (r->dry_run) {
        r->dests[d].moved++;
        r->res->moved++;
    } else {
        produce(r, m, hs, nh, &meta, d);
    }
    free(hs);
}

/* The commit errors of a coordinator that is moving or loading the group: the commit is
 * sent again, not failed. */
static bool commit_retriable(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
    case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__WAIT_COORD:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
        return true;
    default:
        return false;
    }
}

/* Commits the place: commit_to in every partition. A coordinator's move (its broker died)
 * answers "Coordinator load in progress" and the like for about 10 s: the commit is sent
 * again for up to COMMIT_WAIT_MS, else the redrive stopped there and the chunk it had
 * written moved again on the next call. Returns 0 or the error. */
static rd_kafka_resp_err_t commit_place(run_t *r)
{
    int64_t give_up = ks_now_ms() + COMMIT_WAIT_MS;
    for (;;) {
        rd_kafka_topic_partition_list_t *tl = rd_kafka_topic_partition_list_new(r->nparts);
        for (int32_t p = 0; p < r->nparts; p++)
            rd_kafka_topic_partition_list_add(tl, r->res->dead_letter_topic, p)->offset =
                r->commit_to[p];
        rd_kafka_resp_err_t e = rd_kafka_commit(r->cons, tl, 0);
        for (int i = 0; !e && i < tl->cnt; i++)
            e = tl->elems[i].err;
        rd_kafka_topic_partition_list_destroy(tl);
        if (!e || !commit_retriable(e) || atomic_load(&r->rd->stop) || ks_now_ms() > give_up)
            return e;
        ks_info(LOGC, "group %s: committing the place in %s: %s; again in %d ms", r->group,
                r->res->dead_letter_topic, rd_kafka_err2str(e), COMMIT_RETRY_MS);
        nanosleep(&(struct timespec){.tv_nsec = COMMIT_RETRY_MS * 1000000L}, NULL);
    }
}

/* Waits for every pending delivery, counts what moved and commits the place: in each
 * partition, up to the first record that failed, else up to what was read. Returns 0, or -1
 * when a delivery or the commit failed (the result's error says which). */
static int settle_chunk(run_t *r)
{
    int rc = 0;
    /* message.timeout.ms bounds the wait; on shutdown, STOP_WAIT_MS does: what is not
     * reported delivered by then counts as failed, and is read again next time. */
    int64_t give_up = 0;
    while (r->prod && rd_kafka_outq_len(r->prod) > 0) {
        if (atomic_load(&r->rd->stop) && !give_up)
            give_up = ks_now_ms() + STOP_WAIT_MS;
        if (give_up && ks_now_ms() > give_up)
            break;
        rd_kafka_poll(r->prod, 100);
    }
    for (int32_t p = 0; p < r->nparts; p++)
        r->commit_to[p] = r->commit_to[p] > r->read_to[p] ? r->commit_to[p] : r->read_to[p];
    /* Records are in read order, so the first failure of a partition has its lowest offset. */
    bool *stopped = calloc((size_t)r->nparts, sizeof(*stopped));
    if (!stopped)
        abort();
    for (size_t i = 0; i < r->pend_cnt; i++) {
        pending_t *pd = &r->pend[i];
        if (pd->done && !pd->failed) {
            r->dests[pd->dest].moved++;
            r->res->moved++;
            continue;
        }
        if (!pd->done)
            snprintf(pd->error, sizeof(pd->error), "no delivery report");
        note_error(r,
                   "producing %s[%d]@%lld back to topic \"%s\" failed: %s; the place stops there",
                   r->res->dead_letter_topic, pd->partition, (long long)pd->offset,
                   r->dests[pd->dest].name, pd->error);
        if (!stopped[pd->partition]) {
            stopped[pd->partition] = true;
            r->commit_to[pd->partition] = pd->offset;
        }
        rc = -1;
    }
    free(stopped);
    r->pend_cnt = 0;
    if (r->dry_run)
        return rc;
    rd_kafka_resp_err_t e = commit_place(r);
    if (e) {
        note_error(r,
                   "committing the place in %s as group \"%s.redrive\" failed: %s; what moved "
                   "since the last commit moves again next time",
                   r->res->dead_letter_topic, r->group, rd_kafka_err2str(e));
        rc = -1;
    }
    return rc;
}

static bool all_finished(const run_t *r)
{
    for (int32_t p = 0; p < r->nparts; p++)
        if (!r->finished[p])
            return false;
    return true;
}

/* Reads up to max records below the high watermarks, chunk by chunk. */
static void read_loop(run_t *r)
{
    int64_t read = 0, idle_since = ks_now_ms();
    bool failed = false;
    while (!failed && read < r->max && !all_finished(r)) {
        if (atomic_load(&r->rd->stop)) {
            note_error(r, "ksidecar is shutting down: the redrive stopped early");
            break;
        }
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->cons, 200);
        if (!m) {
            if (ks_now_ms() - idle_since > IDLE_MAX_MS) {
                note_error(r, "nothing came from %s for %d s below its high watermarks",
                           r->res->dead_letter_topic, IDLE_MAX_MS / 1000);
                break;
            }
            continue;
        }
        idle_since = ks_now_ms();
        int32_t p = m->partition;
        bool ours = m->rkt && p >= 0 && p < r->nparts && !r->finished[p];
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (ours)
                r->finished[p] = true; /* read_committed: the last stable offset */
        } else if (m->err) {
            ks_warn(LOGC, "group %s: reading %s: %s", r->group, r->res->dead_letter_topic,
                    rd_kafka_message_errstr(m));
        } else if (ours && m->offset >= r->high[p]) {
            r->finished[p] = true;
        } else if (ours) {
            take(r, m);
            read++;
            if (m->offset + 1 >= r->high[p])
                r->finished[p] = true;
        }
        rd_kafka_message_destroy(m);
        if (r->pend_cnt >= CHUNK)
            failed = settle_chunk(r) < 0;
    }
    if (!failed)
        (void)settle_chunk(r);
}

static void report(run_t *r)
{
    ks_redrive_result_t *res = r->res;
    res->by_topic = calloc(r->dest_cnt + 1, sizeof(*res->by_topic));
    if (!res->by_topic)
        abort();
    for (size_t i = 0; i < r->dest_cnt; i++)
        if (r->dests[i].moved) {
            ks_redrive_topic_t *t = &res->by_topic[res->topic_cnt++];
            snprintf(t->topic, sizeof(t->topic), "%s", r->dests[i].name);
            t->moved = r->dests[i].moved;
        }
    for (int32_t p = 0; p < r->nparts; p++) {
        int64_t next = r->dry_run ? r->read_to[p] : r->commit_to[p];
        res->parts[p] = (ks_redrive_part_t){.partition = p, .next_offset = next};
        res->remaining += r->high[p] > next ? r->high[p] - next : 0;
    }
}

static void redrive(run_t *r)
{
    char e[512];
    ks_info(LOGC, "group %s: redrive of %s started (max %d%s)", r->group, r->res->dead_letter_topic,
            (int)r->max, r->dry_run ? ", dry run" : "");
    if (open_clients(r, e, sizeof(e)) < 0) {
        fail(r, KS_E_INTERNAL, "making the redrive's Kafka clients: %s", e);
        return;
    }
    if (find_range(r) < 0)
        return;
    r->pend = calloc(CHUNK, sizeof(*r->pend));
    if (!r->pend)
        abort();
    read_loop(r);
    report(r);
    ks_info(LOGC, "group %s: %lld records %s back from %s, %lld held, %lld skipped, %lld left%s%s",
            r->group, (long long)r->res->moved, r->dry_run ? "would move (dry run)" : "moved",
            r->res->dead_letter_topic, (long long)r->res->held_total,
            (long long)r->res->skipped_total, (long long)r->res->remaining,
            r->res->error[0] ? "; " : "", r->res->error);
}

static void run_close(run_t *r)
{
    if (r->cons) {
        rd_kafka_consumer_close(r->cons);
        rd_kafka_destroy(r->cons);
    }
    if (r->prod) {
        rd_kafka_flush(r->prod, 5000);
        rd_kafka_destroy(r->prod);
    }
    r->cons = r->prod = NULL;
    free(r->high);
    free(r->read_to);
    free(r->commit_to);
    free(r->finished);
    free(r->dests);
    free(r->pend);
}

static void *run_main(void *arg)
{
    run_t *r = arg;
    redrive(r);
    run_close(r);
    ks_redrive_result_t *res = r->res;
    r->res = NULL;
    /* Done before the answer: a caller that asks again once answered is not refused. */
    pthread_mutex_lock(&r->rd->lock);
    r->done = true;
    pthread_mutex_unlock(&r->rd->lock);
    r->cb(res, r->opaque);
    return NULL;
}

/* ---- the running redrives ---- */

ks_redriver_t *ks_redriver_new(const ks_config_t *cfg)
{
    ks_redriver_t *rd = calloc(1, sizeof(*rd));
    if (!rd)
        abort();
    rd->cfg = cfg;
    pthread_mutex_init(&rd->lock, NULL);
    atomic_init(&rd->stop, false);
    return rd;
}

/* Joins and frees the runs whose work is over. Locked by the caller. */
static void reap_locked(ks_redriver_t *rd)
{
    for (run_t **pp = &rd->runs; *pp;) {
        run_t *r = *pp;
        if (!r->done) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        pthread_join(r->thread, NULL);
        free(r);
    }
}

ks_status_t ks_redriver_start(ks_redriver_t *rd, const ks_cmd_req_t *req, char *err, size_t errsize)
{
    const ks_group_conf_t *gc = ks_config_group(rd->cfg, req->group);
    ks_status_t st = KS_OK;
    pthread_mutex_lock(&rd->lock);
    reap_locked(rd);
    if (rd->stopping) {
        st = KS_E_UNAVAILABLE;
        snprintf(err, errsize, "ksidecar is shutting down");
        goto out;
    }
    for (run_t *o = rd->runs; o; o = o->next)
        if (!strcmp(o->group, req->group)) {
            st = KS_E_ABORTED;
            snprintf(err, errsize,
                     "a redrive of group \"%s\" is running; ask again once it has answered",
                     req->group);
            goto out;
        }
    run_t *r = calloc(1, sizeof(*r));
    ks_redrive_result_t *res = calloc(1, sizeof(*res));
    if (!r || !res)
        abort();
    r->rd = rd;
    snprintf(r->group, sizeof(r->group), "%s", req->group);
    r->max = req->u.redrive.max;
    r->dry_run = req->u.redrive.dry_run;
    r->redrive_max = gc->redrive_max;
    r->allow = req->u.redrive.allow;
    r->allow_opaque = req->u.redrive.allow_opaque;
    r->cb = req->u.redrive.cb;
    r->opaque = req->u.redrive.opaque;
    r->res = res;
    res->dry_run = r->dry_run;
    snprintf(res->dead_letter_topic, sizeof(res->dead_letter_topic), "%s", gc->dead_letter_topic);
    if (pthread_create(&r->thread, NULL, run_main, r) != 0) {
        free(res);
        free(r);
        st = KS_E_UNAVAILABLE;
        snprintf(err, errsize, "cannot start a thread for the redrive");
        goto out;
    }
    pthread_setname_np(r->thread, "ks:redrive");
    r->next = rd->runs;
    rd->runs = r;
out:
    pthread_mutex_unlock(&rd->lock);
    return st;
}

void ks_redriver_stop(ks_redriver_t *rd)
{
    pthread_mutex_lock(&rd->lock);
    rd->stopping = true;
    atomic_store(&rd->stop, true);
    run_t *runs = rd->runs;
    rd->runs = NULL;
    pthread_mutex_unlock(&rd->lock);
    while (runs) {
        run_t *r = runs;
        runs = r->next;
        pthread_join(r->thread, NULL);
        free(r);
    }
}

void ks_redriver_free(ks_redriver_t *rd)
{
    if (!rd)
        return;
    ks_redriver_stop(rd);
    pthread_mutex_destroy(&rd->lock);
    free(rd);
}
