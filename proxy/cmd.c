/* cmd.c: the command catalogue's tables, and the one validator of a command's arguments. */
#include "cmd.h"

#include "ack_id.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned flags;
} cmd_tab[] = {
#define KS_CMD_ROW(n, s, f) [KS_CMD_##n] = {#s, f},
    KS_CMD_LIST(KS_CMD_ROW)
#undef KS_CMD_ROW
};
_Static_assert(sizeof(cmd_tab) / sizeof(cmd_tab[0]) == KS_CMD__CNT, "a row per command");

const char *ks_cmd_name(ks_cmd_t t)
{
    return (unsigned)t < KS_CMD__CNT ? cmd_tab[t].name : "unknown";
}

unsigned ks_cmd_flags(ks_cmd_t t)
{
    return (unsigned)t < KS_CMD__CNT ? cmd_tab[t].flags : 0;
}

/* One pointer a command's arguments hold that ks_cmd_copy copies deep: a string, or (vec) an
 * array of cnt_off's count strings. Offsets are into ks_cmd_req_t; off 0 (type's) ends a row
 * shorter than DEEP_MAX (a longer one warns: excess elements). */
typedef struct deep {
    size_t off, cnt_off;
    bool vec;
} deep_t;

#define DEEP_MAX 4 /* the most pointers one command holds, its group included */

/* _Generic refuses (does not build) a field of another type than the copy reads. */
#define DEEP_S(f)                                                                                  \
    {_Generic(((ks_cmd_req_t *)0)->u.f, const char * : offsetof(ks_cmd_req_t, u.f)), 0, false},
#define DEEP_V(f, n)                                                                               \
    {_Generic(((ks_cmd_req_t *)0)->u.f, const char *const *: offsetof(ks_cmd_req_t, u.f)),         \
     _Generic(((ks_cmd_req_t *)0)->u.n, size_t: offsetof(ks_cmd_req_t, u.n)), true},
#define DEEP_ROW(n, s, f)                                                                          \
    [KS_CMD_##n] = {{offsetof(ks_cmd_req_t, group), 0, false}, KS_CMD_DEEP_##n(DEEP_S, DEEP_V)},

static const deep_t deep_tab[KS_CMD__CNT][DEEP_MAX] = {KS_CMD_LIST(DEEP_ROW)};

#undef DEEP_ROW
#undef DEEP_V
#undef DEEP_S

static const char *deep_str(const ks_cmd_req_t *req, const deep_t *d)
{
    return *(const char *const *)(const void *)((const char *)req + d->off);
}

static const char *const *deep_vec(const ks_cmd_req_t *req, const deep_t *d, size_t *n)
{
    *n = *(const size_t *)(const void *)((const char *)req + d->cnt_off);
    return *(const char *const *const *)(const void *)((const char *)req + d->off);
}

/* t's row: DEEP_MAX entries, the used ones first. */
static const deep_t *deep_row(ks_cmd_t t)
{
    static const deep_t none[DEEP_MAX];
    return (unsigned)t < KS_CMD__CNT ? deep_tab[t] : none;
}

size_t ks_cmd_copy_size(const ks_cmd_req_t *req)
{
    const deep_t *row = deep_row(req->type);
    size_t size = 0;
    for (const deep_t *d = row; d < row + DEEP_MAX && d->off; d++) {
        if (!d->vec) {
            const char *str = deep_str(req, d);
            size += str ? strlen(str) + 1 : 0;
            continue;
        }
        size_t n;
        const char *const *v = deep_vec(req, d, &n);
        for (size_t i = 0; v && i < n; i++)
            size += sizeof(char *) + strlen(v[i]) + 1;
    }
    return size;
}

/* Appends the n bytes at src to *strs and returns where they went. */
static char *put(char **strs, const char *src, size_t n)
{
    char *at = *strs;
    memcpy(at, src, n);
    *strs += n;
    return at;
}

void ks_cmd_copy(ks_cmd_req_t *dst, const ks_cmd_req_t *req, void *buf)
{
    *dst = *req;
    const deep_t *row = deep_row(req->type);
    /* The arrays first, at buf's alignment, then the strings. */
    size_t arrays = 0;
    for (const deep_t *d = row; d < row + DEEP_MAX && d->off; d++) {
        size_t n = 0;
        if (d->vec && deep_vec(req, d, &n))
            arrays += n;
    }
    const char **vecs = buf;
    char *strs = (char *)buf + arrays * sizeof(char *);
    for (const deep_t *d = row; d < row + DEEP_MAX && d->off; d++) {
        void *field = (char *)dst + d->off;
        if (!d->vec) {
            const char *str = deep_str(req, d);
            const char *copy = str ? put(&strs, str, strlen(str) + 1) : NULL;
            memcpy(field, &copy, sizeof(copy));
            continue;
        }
        size_t n;
        const char *const *v = deep_vec(req, d, &n);
        const char *const *copy = v ? vecs : NULL;
        for (size_t i = 0; v && i < n; i++)
            *vecs++ = put(&strs, v[i], strlen(v[i]) + 1);
        memcpy(field, &copy, sizeof(copy));
    }
}

ks_status_t ks_cmd_check_name(ks_name_kind_t kind, const char *name, char *err, size_t errsize)
{
    static const char *const kinds[] = {"group", "topic", "subscriber"};
    if (kind == KS_NAME_SUBSCRIBER) {
        /* Any characters; a trailing "#<digits>" (the gRPC edge's stream number) is not
         * part of the name the client chose. */
        size_t n = strlen(name), d = n;
        while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
            d--;
        if (d > 0 && d < n && name[d - 1] == '#')
            n = d - 1;
        if (n <= KS_NAME_MAX)
            return KS_OK;
        snprintf(err, errsize,
                 "subscriber name \"%.60s...\" is too long: %zu characters, at most %d", name, n,
                 KS_NAME_MAX);
        return KS_E_INVALID;
    }
    if (ks_valid_kafka_name(name))
        return KS_OK;
    snprintf(err, errsize,
             "%s name \"%.100s\"%s is invalid: use 1-%d characters of A-Z a-z 0-9 . _ -",
             kinds[kind], name, strlen(name) > 100 ? "..." : "", KS_NAME_MAX);
    return KS_E_INVALID;
}

bool ks_cmd_internal_topic(const ks_config_t *cfg, const char *topic)
{
    return !cfg->topics_allow_internal && !strncmp(topic, "__", 2);
}

ks_status_t ks_cmd_check_group(const ks_config_t *cfg, const char *group, char *err, size_t errsize)
{
    ks_status_t st = ks_cmd_check_name(KS_NAME_GROUP, group, err, errsize);
    if (st)
        return st;
    for (size_t i = 0; i < cfg->static_group_cnt; i++)
        if (!strcmp(cfg->static_groups[i].name, group))
            return KS_OK;
    for (size_t i = 0; i < cfg->group_pattern_cnt; i++)
        if (fnmatch(cfg->group_patterns[i], group, 0) == 0)
            return KS_OK;
    snprintf(err, errsize, "group \"%s\" does not match any pattern in groups.allowed", group);
    return KS_E_PERMISSION;
}

ks_status_t ks_cmd_check_topics(const ks_config_t *cfg, const char *const *topics, size_t n,
                                const char *verb, char *err, size_t errsize)
{
    if (n == 0) {
        snprintf(err, errsize, "name at least one topic");
        return KS_E_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        ks_status_t st = ks_cmd_check_name(KS_NAME_TOPIC, topics[i], err, errsize);
        if (st)
            return st;
        if (ks_cmd_internal_topic(cfg, topics[i])) {
            snprintf(err, errsize,
                     "topic \"%s\" is internal to Kafka (a name starting \"__\"); clients may "
                     "not %s it unless topics.allow_internal is set",
                     topics[i], verb);
            return KS_E_PERMISSION;
        }
    }
    return KS_OK;
}

static ks_status_t check_fetch(const ks_config_t *cfg, ks_cmd_req_t *req, char *err, size_t errsize)
{
    ks_fetch_opts_t *opts = &req->u.fetch.opts;
    unsigned unset = req->u.fetch.unset;
    ks_status_t st = ks_cmd_check_topics(cfg, req->u.fetch.topics, req->u.fetch.topic_cnt,
                                         "consume", err, errsize);
    if (st)
        return st;
    /* The defaults of what the client left out; what it gave is checked below. */
    if (unset & KS_FETCH_UNSET_MAX)
        opts->max = cfg->fetch_max_records < KS_CMD_DEFAULT_MAX ? cfg->fetch_max_records
                                                                : KS_CMD_DEFAULT_MAX;
    if (unset & KS_FETCH_UNSET_WAIT)
        opts->wait_ms = cfg->fetch_default_wait_ms;
    if (unset & KS_FETCH_UNSET_DEADLINE)
        opts->deadline_ms = cfg->lease_deadline_ms;
    req->u.fetch.unset = 0;
    if (opts->max < 1 || opts->max > cfg->fetch_max_records) {
        snprintf(err, errsize, "max must be from 1 to %d (fetch.max_records), got %d",
                 cfg->fetch_max_records, opts->max);
        return KS_E_INVALID;
    }
    if (opts->wait_ms < 0 || opts->wait_ms > cfg->fetch_max_wait_ms) {
        snprintf(err, errsize, "wait_ms must be from 0 to %d (fetch.max_wait_ms), got %d",
                 cfg->fetch_max_wait_ms, opts->wait_ms);
        return KS_E_INVALID;
    }
    if (opts->deadline_ms < 1 || opts->deadline_ms > cfg->lease_max_deadline_ms) {
        snprintf(err, errsize,
                 "deadline_ms must be from 1 to %d (lease.max_deadline_ms), got %d; leave it "
                 "out for lease.deadline_ms (%d)",
                 cfg->lease_max_deadline_ms, opts->deadline_ms, cfg->lease_deadline_ms);
        return KS_E_INVALID;
    }
    /* A subscriber's credits: 0 takes subscriber.max_records / max_bytes. */
    if (opts->credit_records < 0 || opts->credit_bytes < 0) {
        snprintf(err, errsize, "credits must not be negative");
        return KS_E_INVALID;
    }
    if (opts->credit_records > cfg->sub_max_credit_records ||
        opts->credit_bytes > cfg->sub_max_credit_bytes) {
        snprintf(err, errsize,
                 "credits above the limit (subscriber.max_credit_records %lld, "
                 "subscriber.max_credit_bytes %lld)",
                 (long long)cfg->sub_max_credit_records, (long long)cfg->sub_max_credit_bytes);
        return KS_E_EXHAUSTED;
    }
    if (opts->subscriber &&
        (st = ks_cmd_check_name(KS_NAME_SUBSCRIBER, opts->subscriber, err, errsize)))
        return st;
    if (!opts->subscriber || !*opts->subscriber)
        opts->subscriber = KS_CMD_DEFAULT_SUBSCRIBER;
    /* The group loop keeps a subscriber's name in KS_SUBSCRIBER_KEY_MAX bytes. */
    if (strlen(opts->subscriber) >= KS_SUBSCRIBER_KEY_MAX) {
        snprintf(err, errsize, "subscriber name \"%.60s...\" is too long: at most %d characters",
                 opts->subscriber, KS_SUBSCRIBER_KEY_MAX - 1);
        return KS_E_INVALID;
    }
    opts->notify = opts->notify != 0;
    opts->confirm = opts->confirm != 0;
    opts->hold_stalled = opts->confirm && opts->hold_stalled; /* it means nothing without */
    return KS_OK;
}

static ks_status_t check_settle(const ks_config_t *cfg, ks_cmd_req_t *req, char *err,
                                size_t errsize)
{
    if (req->u.settle.reason && !*req->u.settle.reason)
        req->u.settle.reason = NULL;
    ks_settle_op_t op = req->u.settle.op;
    int64_t ms = req->u.settle.ms;
    if (req->u.settle.n == 0 || req->u.settle.n > KS_MAX_ACK_IDS) {
        snprintf(err, errsize, "ack_ids must hold 1 to %d ack ids, got %zu", KS_MAX_ACK_IDS,
                 req->u.settle.n);
        return KS_E_INVALID;
    }
    size_t records = 0; /* a range id names each of its offsets */
    for (size_t i = 0; i < req->u.settle.n && records <= KS_MAX_ACK_IDS; i++)
        records += ks_ack_id_count(req->u.settle.ack_ids[i]);
    req->u.settle.records = records;
    if (records > KS_MAX_ACK_IDS) {
        snprintf(err, errsize,
                 "ack_ids (ranges counted by their offsets) must name at most %d "
                 "records",
                 KS_MAX_ACK_IDS);
        return KS_E_INVALID;
    }
    if (records > req->u.settle.n && records > KS_ACK_RANGE_MAX) {
        snprintf(err, errsize,
                 "ack_ids with ack ranges must name at most %d records in all (ranges "
                 "counted by their offsets), got %zu",
                 KS_ACK_RANGE_MAX, records);
        return KS_E_INVALID;
    }
    if (op != KS_SETTLE_NACK)
        req->u.settle.dead_letter = false;
    if (op == KS_SETTLE_NACK && (ms < 0 || ms > cfg->nack_max_delay_ms)) {
        snprintf(err, errsize, "delay_ms must be from 0 to %d (nack.max_delay_ms), got %lld",
                 cfg->nack_max_delay_ms, (long long)ms);
        return KS_E_INVALID;
    }
    if (op == KS_SETTLE_EXTEND && (ms < 1 || ms > cfg->lease_max_deadline_ms)) {
        snprintf(err, errsize, "deadline_ms must be from 1 to %d (lease.max_deadline_ms), got %lld",
                 cfg->lease_max_deadline_ms, (long long)ms);
        return KS_E_INVALID;
    }
    if (req->u.settle.wait_commit && op != KS_SETTLE_ACK) {
        snprintf(err, errsize, "waiting for the commit applies to acks only");
        return KS_E_INVALID;
    }
    int32_t wms = req->u.settle.commit_timeout_ms;
    if (wms < 0 || wms > KS_CMD_COMMIT_WAIT_MAX_MS) {
        snprintf(err, errsize, "the commit wait (timeout_ms) must be from 1 to %d ms, got %d",
                 KS_CMD_COMMIT_WAIT_MAX_MS, (int)wms);
        return KS_E_INVALID;
    }
    if (req->u.settle.wait_commit && wms == 0)
        req->u.settle.commit_timeout_ms = KS_CMD_COMMIT_WAIT_DEFAULT_MS;
    return KS_OK;
}

static ks_status_t check_seek(const ks_config_t *cfg, const ks_cmd_req_t *req, char *err,
                              size_t errsize)
{
    ks_status_t st = ks_cmd_check_topics(cfg, &req->u.seek.topic, 1, "seek", err, errsize);
    if (st)
        return st;
    if (!req->u.seek.all_partitions && req->u.seek.partition < 0) {
        snprintf(err, errsize, "partition must be >= 0, got %d", req->u.seek.partition);
        return KS_E_INVALID;
    }
    /* A negative timestamp is not one: Kafka's ListOffsets reads -1 and -2 as latest and
     * earliest and refuses other negatives ("API version not supported"). */
    if ((req->u.seek.kind == KS_SEEK_OFFSET || req->u.seek.kind == KS_SEEK_TIMESTAMP) &&
        req->u.seek.value < 0) {
        snprintf(err, errsize, "%s must be >= 0, got %lld",
                 req->u.seek.kind == KS_SEEK_OFFSET ? "offset" : "timestamp_ms",
                 (long long)req->u.seek.value);
        return KS_E_INVALID;
    }
    return KS_OK;
}

static ks_status_t check_produce(const ks_config_t *cfg, const ks_cmd_req_t *req, char *err,
                                 size_t errsize)
{
    if (req->u.produce.n == 0) {
        snprintf(err, errsize, "records is empty: give at least one record");
        return KS_E_INVALID;
    }
    for (size_t i = 0; i < req->u.produce.n; i++) {
        ks_status_t st;
        const ks_produce_rec_t *r = &req->u.produce.recs[i];
        if (r->topic && (st = ks_cmd_check_topics(cfg, &r->topic, 1, "produce to", err, errsize)))
            return st;
    }
    return KS_OK;
}

static ks_status_t check_redrive(const ks_config_t *cfg, ks_cmd_req_t *req, char *err,
                                 size_t errsize)
{
    int32_t max = req->u.redrive.max;
    if (max < 0 || max > KS_CMD_REDRIVE_MAX) {
        snprintf(err, errsize, "max must be from 1 to %d, got %d; leave it out for %d",
                 KS_CMD_REDRIVE_MAX, (int)max, KS_CMD_REDRIVE_DEFAULT_MAX);
        return KS_E_INVALID;
    }
    if (max == 0)
        req->u.redrive.max = KS_CMD_REDRIVE_DEFAULT_MAX;
    req->u.redrive.dry_run = req->u.redrive.dry_run != 0;
    const ks_group_conf_t *gc = ks_config_group(cfg, req->group);
    if (!*gc->dead_letter_topic) {
        snprintf(
            err, errsize, "group \"%s\" has no dead-letter topic to redrive: set %s", req->group,
            gc->name ? "dead_letter_topic in its groups.static entry" : "group.dead_letter_topic");
        return KS_E_INVALID;
    }
    return KS_OK;
}

/* A command added to the catalogue without its case here does not build, with or without a
 * default (there is none: a command with nothing to check says so in its case). */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
#pragma GCC diagnostic error "-Wswitch-enum"

ks_status_t ks_cmd_validate(const ks_config_t *cfg, ks_cmd_req_t *req, char *err, size_t errsize)
{
    if ((unsigned)req->type >= KS_CMD__CNT) {
        snprintf(err, errsize, "unknown command %d", (int)req->type);
        return KS_E_INVALID;
    }
    /* STATUS names a group or none; a command with no reply is not checked (its group is
     * looked up, and a bad name finds none). */
    unsigned fl = ks_cmd_flags(req->type);
    bool named = ((fl & KS_CMDF_GROUP) && !(fl & KS_CMDF_NO_REPLY)) ||
                 (req->type == KS_CMD_STATUS && req->group) || req->type == KS_CMD_REDRIVE;
    ks_status_t st;
    if (named && (st = ks_cmd_check_group(cfg, req->group, err, errsize)))
        return st;
    switch (req->type) {
    case KS_CMD_FETCH:
        return check_fetch(cfg, req, err, errsize);
    case KS_CMD_SETTLE:
        return check_settle(cfg, req, err, errsize);
    case KS_CMD_SEEK:
        return check_seek(cfg, req, err, errsize);
    case KS_CMD_PRODUCE:
        return check_produce(cfg, req, err, errsize);
    case KS_CMD_REDRIVE:
        return check_redrive(cfg, req, err, errsize);
    case KS_CMD_STATUS: /* its group, checked above, is all it names */
        return KS_OK;
    case KS_CMD_RELEASE:
    case KS_CMD_RELEASE_UNREAD:
    case KS_CMD_DELIVERED: /* no reply: a name or token that matches nothing does nothing */
        return KS_OK;
    case KS_CMD_STOP_DELIVERING:
    case KS_CMD_SHUTDOWN: /* the engine's own (ks_engine_submit refuses them from an edge) */
        return KS_OK;
    case KS_CMD__CNT:
        break;
    }
    snprintf(err, errsize, "unknown command %d", (int)req->type);
    return KS_E_INVALID;
}

#pragma GCC diagnostic pop
