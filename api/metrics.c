/* metrics.c: the Prometheus exposition of GET /metrics, generated from the status field lists
 * (proxy/status_fields.h), plus kafka_exporter's consumer group families and the edges'
 * request counters. */
#include "metrics.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "status_fields.h"

/* ---- the edges' request counters: fixed arrays, so counting never allocates or locks ---- */

enum { HM_GET, HM_HEAD, HM_POST, HM_OTHER, HM_N };
static const char *const http_methods[HM_N] = {"GET", "HEAD", "POST", "OTHER"};
#define HTTP_CODE_MIN 100
#define HTTP_CODES    500 /* 100..599 */
#define GRPC_CODES    17
static atomic_uint_fast64_t http_reqs[HM_N][HTTP_CODES];
static atomic_uint_fast64_t grpc_reqs[KS_METRICS_GRPC_SLOTS][GRPC_CODES];
static _Atomic(const char *) grpc_paths[KS_METRICS_GRPC_SLOTS];
static atomic_uint_fast64_t series_dropped;
static atomic_uint_fast64_t streams_cut;
static int64_t start_ms; /* written once, before main */

static const char *const grpc_code_names[GRPC_CODES] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

__attribute__((constructor)) static void note_start(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    start_ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

void ks_metrics_http_request(const char *method, unsigned status)
{
    int m = HM_OTHER;
    for (int i = 0; i < HM_OTHER; i++)
        if (!strcmp(method, http_methods[i]))
            m = i;
    if (status >= HTTP_CODE_MIN && status < HTTP_CODE_MIN + HTTP_CODES)
        atomic_fetch_add_explicit(&http_reqs[m][status - HTTP_CODE_MIN], 1, memory_order_relaxed);
}

void ks_metrics_grpc_request(unsigned slot, const char *path, int code)
{
    if (slot >= KS_METRICS_GRPC_SLOTS || code < 0 || code >= GRPC_CODES)
        return;
    if (path && !atomic_load_explicit(&grpc_paths[slot], memory_order_relaxed))
        atomic_store(&grpc_paths[slot], path); /* always the same static text for a slot */
    atomic_fetch_add_explicit(&grpc_reqs[slot][code], 1, memory_order_relaxed);
}

void ks_metrics_stream_cut(void)
{
    atomic_fetch_add_explicit(&streams_cut, 1, memory_order_relaxed);
}

/* ---- the writer ---- */

typedef struct {
    ks_jbuf_t *b;
    int64_t series, max; /* samples written, and the cap */
    bool ms;             /* the family's values are milliseconds, written as seconds */
    uint64_t dropped;
} out_t;

/* A label value, escaped as the format wants (\\, \", \n); bytes of a name that is not
 * UTF-8 come out as '?', since the format allows UTF-8 only. */
static void put_label(out_t *o, const char *s)
{
    bool utf8 = ks_utf8_valid(s, strlen(s));
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '\\' || ch == '"')
            ks_jbuf_raw(o->b, "\\", 1);
        if (ch == '\n')
            ks_jbuf_lit(o->b, "\\n");
        else if (ch >= 0x80 && !utf8)
            ks_jbuf_lit(o->b, "?");
        else
            ks_jbuf_raw(o->b, p, 1);
    }
}

static void family(out_t *o, const char *name, const char *type, const char *help)
{
    o->ms = false;
    ks_jbuf_lit(o->b, "# HELP ");
    ks_jbuf_lit(o->b, name);
    ks_jbuf_lit(o->b, " ");
    ks_jbuf_lit(o->b, help);
    ks_jbuf_lit(o->b, "\n# TYPE ");
    ks_jbuf_lit(o->b, name);
    ks_jbuf_lit(o->b, " ");
    ks_jbuf_lit(o->b, type);
    ks_jbuf_lit(o->b, "\n");
}

/* The labels of one sample: up to 4 name/value pairs (a NULL name ends them). */
typedef struct {
    const char *k[4], *v[4];
    int32_t partition; /* written as the label "partition" when >= 0 */
} labels_t;

/* Whether one more sample fits under the cap (else it is counted as dropped). */
static bool room(out_t *o)
{
    if (o->series < o->max) {
        o->series++;
        return true;
    }
    o->dropped++;
    return false;
}

/* One sample line; secs: v is milliseconds, written as seconds. */
static void sample_as(out_t *o, const char *name, const labels_t *l, int64_t v, bool secs)
{
    if (!room(o))
        return;
    ks_jbuf_lit(o->b, name);
    const char *sep = "{";
    for (int i = 0; i < 4 && l && l->k[i]; i++) {
        ks_jbuf_lit(o->b, sep);
        ks_jbuf_lit(o->b, l->k[i]);
        ks_jbuf_lit(o->b, "=\"");
        put_label(o, l->v[i]);
        ks_jbuf_lit(o->b, "\"");
        sep = ",";
    }
    if (l && l->partition >= 0) {
        ks_jbuf_lit(o->b, sep);
        ks_jbuf_lit(o->b, "partition=\"");
        ks_jbuf_int(o->b, l->partition);
        ks_jbuf_lit(o->b, "\"");
        sep = ",";
    }
    if (*sep == ',')
        ks_jbuf_lit(o->b, "}");
    ks_jbuf_lit(o->b, " ");
    if (secs) {
        char t[32];
        snprintf(t, sizeof(t), "%s%lld.%03lld\n", v < 0 ? "-" : "", llabs(v) / 1000LL,
                 llabs(v) % 1000LL);
        ks_jbuf_lit(o->b, t);
        return;
    }
    ks_jbuf_int(o->b, v);
    ks_jbuf_lit(o->b, "\n");
}

/* One sample of the family being written (in seconds if its values are milliseconds). */
static void sample(out_t *o, const char *name, const labels_t *l, int64_t v)
{
    sample_as(o, name, l, v, o->ms);
}

/* ---- families generated from the status field lists ----
 * A COUNTER or GAUGE row of a level becomes a family: ksidecar_<level prefix><name>, with
 * _total for a counter, one sample per group (per partition for the partition level).
 * LABEL, TEXT and NESTED rows render nothing of their own. A value's TYPE says how it is
 * read: M_GET_<TYPE>(s, m, v) sets v and is false when the value is unknown. */
#define M_GET_BOOL(s, m, v)    ((v) = (s)->m, true)
#define M_GET_I32(s, m, v)     ((v) = (s)->m, true)
#define M_GET_I64(s, m, v)     ((v) = (s)->m, true)
#define M_GET_I64_OPT(s, m, v) ((v) = (s)->m, (v) >= 0)
#define M_TYPE_COUNTER         "counter", "_total"
#define M_TYPE_GAUGE           "gauge", ""

/* A level of one struct per group (s = &EXPR(g)): its labels are the group's. */
#define M_GROUP_ROW(type, m, pb, fname, num, kind, doc) M_GROUP_##kind(type, m, fname, doc)
#define M_GROUP_LABEL(type, m, fname, doc)
#define M_GROUP_TEXT(type, m, fname, doc)
#define M_GROUP_NESTED(type, m, fname, doc)
/* A histogram (of durations in ms): its buckets, sum and count per group, in seconds. */
#define M_GROUP_HISTOGRAM(type, m, fname, doc)                                                     \
    {                                                                                              \
        const char *fam = fam_begin(o, nb, sizeof(nb), prefix, fname, "", "histogram", doc);       \
        for (size_t i = 0; i < n; i++)                                                             \
            hist_samples(o, fam, groups[i]->name, &LEVEL_OF(groups[i]).m);                         \
    }
#define M_GROUP_COUNTER(type, m, fname, doc)     M_GROUP_FAMILY(type, m, fname, doc, M_TYPE_COUNTER)
#define M_GROUP_GAUGE(type, m, fname, doc)       M_GROUP_FAMILY(type, m, fname, doc, M_TYPE_GAUGE)
#define M_GROUP_FAMILY(type, m, fname, doc, ...) M_GROUP_FAMILY_(type, m, fname, doc, __VA_ARGS__)
#define M_GROUP_FAMILY_(type, m, fname, doc, ptype, suffix)                                        \
    {                                                                                              \
        const char *fam = fam_begin(o, nb, sizeof(nb), prefix, fname, suffix, ptype, doc);         \
        for (size_t i = 0; i < n; i++) {                                                           \
            int64_t v;                                                                             \
            labels_t l = {{"group"}, {groups[i]->name}, -1};                                       \
            if (M_GET_##type(&LEVEL_OF(groups[i]), m, v))                                          \
                sample(o, fam, &l, v);                                                             \
        }                                                                                          \
    }

/* The partition level: one sample per assigned partition of each group. */
#define M_PART_ROW(type, m, pb, fname, num, kind, doc) M_PART_##kind(type, m, fname, doc)
#define M_PART_LABEL(type, m, fname, doc)
#define M_PART_TEXT(type, m, fname, doc)
#define M_PART_NESTED(type, m, fname, doc)
#define M_PART_COUNTER(type, m, fname, doc)     M_PART_FAMILY(type, m, fname, doc, M_TYPE_COUNTER)
#define M_PART_GAUGE(type, m, fname, doc)       M_PART_FAMILY(type, m, fname, doc, M_TYPE_GAUGE)
#define M_PART_FAMILY(type, m, fname, doc, ...) M_PART_FAMILY_(type, m, fname, doc, __VA_ARGS__)
#define M_PART_FAMILY_(type, m, fname, doc, ptype, suffix)                                         \
    {                                                                                              \
        const char *fam =                                                                          \
            fam_begin(o, nb, sizeof(nb), "ksidecar_partition_", fname, suffix, ptype, doc);        \
        bool stall = !strcmp(fname, "stalled");                                                    \
        for (size_t i = 0; i < n; i++)                                                             \
            for (size_t j = 0; j < groups[i]->part_cnt; j++) {                                     \
                const ks_part_status_t *p = &groups[i]->parts[j];                                  \
                int64_t v;                                                                         \
                labels_t l = {{"group", "topic"}, {groups[i]->name, p->topic}, p->partition};      \
                part_reason(&l, stall, p);                                                         \
                if (M_GET_##type(p, m, v))                                                         \
                    sample(o, fam, &l, v);                                                         \
            }                                                                                      \
    }

/* A stalled partition's sample also says why (ksidecar_partition_stalled{...,reason="poison"}
 * 1); one not stalled has no reason label (0). The reason is one of a few fixed words. */
static void part_reason(labels_t *l, bool stall, const ks_part_status_t *p)
{
    if (stall && p->stall_reason && *p->stall_reason) {
        l->k[2] = "reason";
        l->v[2] = p->stall_reason;
    }
}

/* Starts a generated family: its name prefix + the field's name + suffix into buf, its HELP
 * and TYPE lines. A field in milliseconds (its name ends in _ms) is written in seconds, the
 * unit Prometheus names carry (oldest_lease_age_ms: ..._oldest_lease_age_seconds). */
static const char *fam_begin(out_t *o, char *buf, size_t size, const char *prefix, const char *name,
                             const char *suffix, const char *type, const char *help)
{
    size_t len = strlen(name);
    bool ms = len > 3 && !strcmp(name + len - 3, "_ms");
    snprintf(buf, size, "%s%.*s%s%s", prefix, (int)(ms ? len - 3 : len), name, ms ? "_seconds" : "",
             suffix);
    family(o, buf, type, help);
    o->ms = ms;
    return buf;
}

/* A histogram's samples for one group: cumulative buckets by le (seconds), +Inf, the sum
 * (seconds) and the count. */
static void hist_samples(out_t *o, const char *fam, const char *group, const ks_hist_t *h)
{
    char name[160], le[32];
    int64_t cum = 0;
    snprintf(name, sizeof(name), "%s_bucket", fam);
    for (size_t b = 0; b <= KS_HIST_BUCKETS; b++) {
        cum += h->counts[b];
        if (b < KS_HIST_BUCKETS)
            snprintf(le, sizeof(le), "%g", (double)ks_hist_bounds_ms[b] / 1000.0);
        else
            snprintf(le, sizeof(le), "+Inf");
        labels_t l = {{"group", "le"}, {group, le}, -1};
        sample_as(o, name, &l, cum, false);
    }
    labels_t l = {{"group"}, {group}, -1};
    snprintf(name, sizeof(name), "%s_sum", fam);
    sample_as(o, name, &l, h->sum_ms, true);
    snprintf(name, sizeof(name), "%s_count", fam);
    sample_as(o, name, &l, h->count, false);
}

static void render_fields(out_t *o, const ks_group_status_t *const *groups, size_t n)
{
    char nb[128];
    const char *prefix;
#define LEVEL_OF(g) (*(g))
    prefix = "ksidecar_";
    KS_STATUS_COUNTER_FIELDS(M_GROUP_ROW)
    prefix = "ksidecar_group_";
    KS_STATUS_GROUP_FIELDS(M_GROUP_ROW)
#undef LEVEL_OF
#define LEVEL_OF(g) ((g)->memory)
    prefix = "ksidecar_memory_";
    KS_STATUS_MEMORY_FIELDS(M_GROUP_ROW)
#undef LEVEL_OF
    KS_STATUS_PART_FIELDS(M_PART_ROW)
}

/* ---- kafka_exporter's families, under its names and labels, so its dashboards and
 * autoscalers read ksidecar unchanged ---- */

typedef struct {
    const char *topic;
    int32_t partition;
    int64_t hw;
} hw_t;

static int hw_cmp(const void *a, const void *b)
{
    const hw_t *x = a, *y = b;
    int c = strcmp(x->topic, y->topic);
    return c ? c : (x->partition > y->partition) - (x->partition < y->partition);
}

/* A family of one value per partition of each group: the int64_t at off in its
 * ks_part_status_t, left out when unknown (-1). */
static void kafka_part_family(out_t *o, const ks_group_status_t *const *groups, size_t n,
                              const char *name, const char *help, size_t off)
{
    family(o, name, "gauge", help);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < groups[i]->part_cnt; j++) {
            const ks_part_status_t *p = &groups[i]->parts[j];
            int64_t v;
            memcpy(&v, (const char *)p + off, sizeof(v));
            labels_t l = {{"consumergroup", "topic"}, {groups[i]->name, p->topic}, p->partition};
            if (v >= 0)
                sample(o, name, &l, v);
        }
}

static void render_kafka(out_t *o, const ks_group_status_t *const *groups, size_t n)
{
    kafka_part_family(o, groups, n, "kafka_consumergroup_current_offset",
                      "the group's last commit the broker confirmed, per partition",
                      offsetof(ks_part_status_t, committed));
    kafka_part_family(o, groups, n, "kafka_consumergroup_lag",
                      "high watermark - the group's committed offset, per partition",
                      offsetof(ks_part_status_t, lag));
    family(o, "kafka_consumergroup_lag_sum", "gauge",
           "the group's lag summed over a topic's partitions assigned here");
    for (size_t i = 0; i < n; i++)
        for (size_t t = 0; t < groups[i]->topic_cnt; t++) {
            const char *topic = groups[i]->topics[t];
            int64_t sum = 0;
            bool any = false;
            for (size_t j = 0; j < groups[i]->part_cnt; j++) {
                const ks_part_status_t *p = &groups[i]->parts[j];
                if (p->lag >= 0 && !strcmp(p->topic, topic)) {
                    sum += p->lag;
                    any = true;
                }
            }
            labels_t l = {{"consumergroup", "topic"}, {groups[i]->name, topic}, -1};
            if (any)
                sample(o, "kafka_consumergroup_lag_sum", &l, sum);
        }
    /* A partition two groups read is one series: its high watermark once. */
    size_t cnt = 0, k = 0;
    for (size_t i = 0; i < n; i++)
        cnt += groups[i]->part_cnt;
    hw_t *hw = calloc(cnt ? cnt : 1, sizeof(*hw));
    if (!hw)
        abort();
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < groups[i]->part_cnt; j++) {
            const ks_part_status_t *p = &groups[i]->parts[j];
            if (p->high_watermark >= 0)
                hw[k++] = (hw_t){p->topic, p->partition, p->high_watermark};
        }
    qsort(hw, k, sizeof(*hw), hw_cmp);
    family(o, "kafka_topic_partition_current_offset", "gauge",
           "the partition's high watermark (the offset the next record produced gets)");
    for (size_t i = 0; i < k; i++) {
        if (i && !hw_cmp(&hw[i], &hw[i - 1]))
            continue;
        labels_t l = {{"topic"}, {hw[i].topic}, hw[i].partition};
        sample(o, "kafka_topic_partition_current_offset", &l, hw[i].hw);
    }
    free(hw);
}

/* ---- the process's own families ---- */

/* A subscriber's name ends in '#' and its number when it is a stream (status_fields.h);
 * names are never labels, only counted. */
static bool sub_is_stream(const char *name)
{
    const char *h = strrchr(name, '#');
    return h && h[1] && strspn(h + 1, "0123456789") == strlen(h + 1);
}

static void render_subs(out_t *o, const ks_group_status_t *const *groups, size_t n)
{
    family(o, "ksidecar_subscribers", "gauge", "subscribers (pull sessions and streams) now");
    for (size_t i = 0; i < n; i++) {
        labels_t l = {{"group"}, {groups[i]->name}, -1};
        sample(o, "ksidecar_subscribers", &l, (int64_t)groups[i]->sub_cnt);
    }
    family(o, "ksidecar_streams", "gauge", "subscribers that are streams (gRPC or HTTP) now");
    for (size_t i = 0; i < n; i++) {
        int64_t streams = 0;
        for (size_t j = 0; j < groups[i]->sub_cnt; j++)
            streams += sub_is_stream(groups[i]->subs[j].name);
        labels_t l = {{"group"}, {groups[i]->name}, -1};
        sample(o, "ksidecar_streams", &l, streams);
    }
}

static void render_requests(out_t *o)
{
    char code[16];
    family(o, "ksidecar_requests_total", "counter", "requests answered, by edge, method and code");
    for (int m = 0; m < HM_N; m++)
        for (int c = 0; c < HTTP_CODES; c++) {
            uint64_t v = atomic_load_explicit(&http_reqs[m][c], memory_order_relaxed);
            snprintf(code, sizeof(code), "%d", c + HTTP_CODE_MIN);
            labels_t l = {{"edge", "method", "code"}, {"http", http_methods[m], code}, -1};
            if (v)
                sample(o, "ksidecar_requests_total", &l, (int64_t)v);
        }
    for (int s = 0; s < KS_METRICS_GRPC_SLOTS; s++)
        for (int c = 0; c < GRPC_CODES; c++) {
            uint64_t v = atomic_load_explicit(&grpc_reqs[s][c], memory_order_relaxed);
            const char *path = atomic_load(&grpc_paths[s]);
            labels_t l = {{"edge", "method", "code"},
                          {"grpc", path ? path : "unknown", grpc_code_names[c]},
                          -1};
            if (v)
                sample(o, "ksidecar_requests_total", &l, (int64_t)v);
        }
}

void ks_metrics_render(ks_jbuf_t *b, const ks_group_status_t *const *groups, size_t n,
                       int64_t max_series)
{
    out_t o = {.b = b, .max = max_series};
    render_kafka(&o, groups, n);
    render_fields(&o, groups, n);
    render_subs(&o, groups, n);
    render_requests(&o);
    family(&o, "ksidecar_streams_cut_total", "counter",
           "streams (gRPC Subscribe, HTTP) cut off for taking no message within their stall time");
    sample(&o, "ksidecar_streams_cut_total", NULL,
           (int64_t)atomic_load_explicit(&streams_cut, memory_order_relaxed));
    family(&o, "ksidecar_groups", "gauge",
           "groups running in this process (that the caller may see)");
    sample(&o, "ksidecar_groups", NULL, (int64_t)n);
    family(&o, "ksidecar_build_info", "gauge", "the version built; always 1");
    labels_t ver = {{"version"}, {KSIDECAR_VERSION}, -1};
    sample(&o, "ksidecar_build_info", &ver, 1);
    /* The last two are written whatever the cap, so what it dropped always shows. */
    ks_jbuf_lit(b, "# HELP ksidecar_process_start_time_seconds when the process started, in "
                   "seconds since the epoch\n# TYPE ksidecar_process_start_time_seconds gauge\n"
                   "ksidecar_process_start_time_seconds ");
    char t[48];
    snprintf(t, sizeof(t), "%lld.%03lld\n", (long long)(start_ms / 1000),
             (long long)(start_ms % 1000));
    ks_jbuf_lit(b, t);
    uint64_t dropped =
        atomic_fetch_add_explicit(&series_dropped, o.dropped, memory_order_relaxed) + o.dropped;
    family(&o, "ksidecar_metrics_series_dropped_total", "counter",
           "samples left out of scrapes by metrics.max_series");
    ks_jbuf_lit(b, "ksidecar_metrics_series_dropped_total ");
    ks_jbuf_int(b, (int64_t)dropped);
    ks_jbuf_lit(b, "\n");
}
