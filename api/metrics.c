/* metrics.c: the Prometheus exposition of GET /metrics, rendered from the one metric list
 * (metric_list.h): its families, those the status field lists (proxy/status_fields.h) make,
 * and the collectors that write their samples (this file's three, and any a transport
 * registers). */
#include "metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "otel.h"
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

/* ---- the family table, built once from the list ---- */

/* A status field row as /metrics reads it: its kind, its C type, its name, where it is in
 * its level's struct and its text. A row of an unknown TYPE or KIND fails to build. */
typedef enum {
    V_NAME,
    V_NAME_OPT,
    V_TEXT,
    V_BOOL,
    V_I32,
    V_I64,
    V_I64_OPT,
    V_TOPICS,
    V_PARTS,
    V_SUBS,
    V_COUNTERS,
    V_MEMORY,
    V_CREDITS,
    V_HIST
} vtype_t;
typedef enum { K_NONE, K_COUNTER, K_GAUGE, K_GAUGE_MS, K_HISTOGRAM, K_REASON } mkind_t;
#define M_K_COUNTER   K_COUNTER
#define M_K_GAUGE     K_GAUGE
#define M_K_GAUGE_MS  K_GAUGE_MS
#define M_K_HISTOGRAM K_HISTOGRAM
#define M_K_REASON    K_REASON
#define M_K_LABEL     K_NONE
#define M_K_TEXT      K_NONE
#define M_K_NESTED    K_NONE
/* Where a row's value is: only rows /metrics reads have a member to point at (the counters'
 * NESTED row has none). */
#define M_OFF_COUNTER(T, m)   offsetof(T, m)
#define M_OFF_GAUGE(T, m)     offsetof(T, m)
#define M_OFF_GAUGE_MS(T, m)  offsetof(T, m)
#define M_OFF_HISTOGRAM(T, m) offsetof(T, m)
#define M_OFF_REASON(T, m)    offsetof(T, m)
#define M_OFF_LABEL(T, m)     0
#define M_OFF_TEXT(T, m)      0
#define M_OFF_NESTED(T, m)    0

typedef struct {
    mkind_t kind;
    vtype_t vt;
    const char *name;
    size_t off;
    const char *doc;
} frow_t;

#define FROW(type, m, pb, fname, num, kind, doc)                                                   \
    {M_K_##kind, V_##type, fname, M_OFF_##kind(FROW_T, m), doc},
#define FROW_T ks_group_status_t
static const frow_t rows_counter[] = {KS_STATUS_COUNTER_FIELDS(FROW)};
static const frow_t rows_group[] = {KS_STATUS_GROUP_FIELDS(FROW)};
#undef FROW_T
#define FROW_T ks_mem_status_t
static const frow_t rows_memory[] = {KS_STATUS_MEMORY_FIELDS(FROW)};
#undef FROW_T
#define FROW_T ks_part_status_t
static const frow_t rows_part[] = {KS_STATUS_PART_FIELDS(FROW)};
#undef FROW_T
#undef FROW

/* The levels a FIELDS row may name: their rows, and where they sit in the status JSON. */
typedef enum { LV_COUNTER, LV_GROUP, LV_MEMORY, LV_PART } level_t;
#define NROWS(a) (sizeof(a) / sizeof((a)[0]))
static const struct {
    const frow_t *rows;
    size_t n;
    const char *path;
} levels[] = {
    [LV_COUNTER] = {rows_counter, NROWS(rows_counter), "counters."},
    [LV_GROUP] = {rows_group, NROWS(rows_group), ""},
    [LV_MEMORY] = {rows_memory, NROWS(rows_memory), "memory."},
    [LV_PART] = {rows_part, NROWS(rows_part), "partitions[]."},
};

typedef struct {
    ks_metric_family_t pub;
    bool ms;       /* its values are milliseconds, written as seconds */
    level_t level; /* a status field's family: its level, row and reason row */
    const frow_t *row, *reason;
    char name[128], field[96], reason_field[96];
} fam_t;

#define FAMS_MAX 128
static fam_t fams[FAMS_MAX];
static ks_metric_family_t fams_pub[FAMS_MAX]; /* what ks_metrics_families shows */
static size_t nfams;
static pthread_once_t fams_once = PTHREAD_ONCE_INIT;

static fam_t *fam_add(ks_metric_id_t id, ks_metric_type_t type, ks_metric_source_t src,
                      const char *const *labels, const char *help)
{
    if (nfams == FAMS_MAX)
        abort(); /* FAMS_MAX is below the list's length */
    fam_t *f = &fams[nfams++];
    f->pub = (ks_metric_family_t){.type = type, .id = id, .source = src, .help = help};
    for (size_t i = 0; labels[i]; i++) {
        if (i == KS_METRIC_LABELS_MAX)
            abort();
        f->pub.labels[i] = labels[i];
    }
    f->pub.name = f->name;
    return f;
}

/* The families of one level's rows (a FIELDS row of the list). A row in ms must be named
 * ..._ms: its family is named ..._seconds. */
static void fam_add_fields(level_t lv, const char *prefix, const char *const *labels)
{
    fam_t *last = NULL;
    for (size_t i = 0; i < levels[lv].n; i++) {
        const frow_t *r = &levels[lv].rows[i];
        if (r->kind == K_NONE)
            continue;
        if (r->kind == K_REASON) {
            if (!last || last->row->kind != K_GAUGE) {
                fprintf(stderr, "status field %s: a REASON row follows a GAUGE row\n", r->name);
                abort();
            }
            last->reason = r;
            snprintf(last->reason_field, sizeof(last->reason_field), "%s%s", levels[lv].path,
                     r->name);
            last->pub.reason_field = last->reason_field;
            continue;
        }
        bool ms = r->kind == K_GAUGE_MS || r->kind == K_HISTOGRAM;
        size_t len = strlen(r->name);
        if (ms && (len < 4 || strcmp(r->name + len - 3, "_ms") != 0)) {
            fprintf(stderr, "status field %s: a value in ms is named ..._ms\n", r->name);
            abort();
        }
        ks_metric_type_t type = r->kind == K_COUNTER     ? KS_METRIC_COUNTER
                                : r->kind == K_HISTOGRAM ? KS_METRIC_HISTOGRAM
                                                         : KS_METRIC_GAUGE;
        fam_t *f = fam_add(KS_METRIC_FIELD, type, KS_METRIC_SRC_STATUS, labels, r->doc);
        snprintf(f->name, sizeof(f->name), "%s%.*s%s%s", prefix, (int)(ms ? len - 3 : len), r->name,
                 ms ? "_seconds" : "", type == KS_METRIC_COUNTER ? "_total" : "");
        snprintf(f->field, sizeof(f->field), "%s%s", levels[lv].path, r->name);
        f->pub.field = f->field;
        f->ms = ms;
        f->level = lv;
        f->row = r;
        last = f;
    }
}

#define KS_ML_(...) __VA_ARGS__
#define ADD_X(id_, name_, type_, src_, labels_, help_)                                             \
    snprintf(fam_add(KS_METRIC_##id_, KS_METRIC_##type_, KS_METRIC_SRC_##src_,                     \
                     (const char *const[]){KS_ML_ labels_, NULL}, help_)                           \
                 ->name,                                                                           \
             sizeof(fams[0].name), "%s", name_);
#define ADD_FIELDS(level_, prefix_, labels_)                                                       \
    fam_add_fields(LV_##level_, prefix_, (const char *const[]){KS_ML_ labels_, NULL});

static void fams_build(void)
{
    KS_METRIC_LIST(ADD_X, ADD_FIELDS)
    for (size_t i = 0; i < nfams; i++) {
        fams[i].pub.name = fams[i].name;
        fams_pub[i] = fams[i].pub;
    }
}

const ks_metric_family_t *ks_metrics_families(size_t *n)
{
    pthread_once(&fams_once, fams_build);
    *n = nfams;
    return fams_pub;
}

/* ---- the writer ---- */

struct ks_metrics_out {
    ks_jbuf_t *b;
    int64_t series, max; /* samples written, and the cap */
    bool ms;             /* the family's values are milliseconds, written as seconds */
    bool uncapped;       /* the family is written whatever the cap */
    uint64_t dropped;
    const ks_group_status_t *const *groups; /* the snapshots the caller may see */
    size_t n;
    const fam_t *fam; /* the family being written */
};
typedef struct ks_metrics_out out_t;

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

static const char *const type_names[] = {[KS_METRIC_COUNTER] = "counter",
                                         [KS_METRIC_GAUGE] = "gauge",
                                         [KS_METRIC_HISTOGRAM] = "histogram"};

/* A family's HELP and TYPE lines. */
static void family(out_t *o, const fam_t *f)
{
    ks_jbuf_lit(o->b, "# HELP ");
    ks_jbuf_lit(o->b, f->name);
    ks_jbuf_lit(o->b, " ");
    ks_jbuf_lit(o->b, f->pub.help);
    ks_jbuf_lit(o->b, "\n# TYPE ");
    ks_jbuf_lit(o->b, f->name);
    ks_jbuf_lit(o->b, " ");
    ks_jbuf_lit(o->b, type_names[f->pub.type]);
    ks_jbuf_lit(o->b, "\n");
}

/* The labels of one sample: up to 4 name/value pairs (a NULL name ends them). */
typedef struct {
    const char *k[KS_METRIC_LABELS_MAX], *v[KS_METRIC_LABELS_MAX];
    int32_t partition; /* written as the label "partition", last, when >= 0 */
} labels_t;

/* Whether one more sample fits under the cap (else it is counted as dropped). */
static bool room(out_t *o)
{
    if (o->uncapped)
        return true;
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
    for (int i = 0; i < KS_METRIC_LABELS_MAX && l && l->k[i]; i++) {
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
static void sample(out_t *o, const labels_t *l, int64_t v)
{
    sample_as(o, o->fam->name, l, v, o->ms);
}

/* A histogram's samples for one set of labels (l, with no partition): cumulative buckets by
 * le (seconds), +Inf, the sum (seconds) and the count. */
static void hist_samples(out_t *o, const labels_t *l, const ks_hist_t *h)
{
    char name[160], le[32];
    int64_t cum = 0;
    int nl = 0;
    while (nl < KS_METRIC_LABELS_MAX && l->k[nl])
        nl++;
    if (nl == KS_METRIC_LABELS_MAX)
        abort(); /* no room for le: the list gives a histogram at most 3 labels */
    labels_t bl = *l;
    bl.k[nl] = "le";
    bl.v[nl] = le;
    snprintf(name, sizeof(name), "%s_bucket", o->fam->name);
    for (size_t b = 0; b <= KS_HIST_BUCKETS; b++) {
        cum += h->counts[b];
        if (b < KS_HIST_BUCKETS)
            snprintf(le, sizeof(le), "%g", (double)ks_hist_bounds_ms[b] / 1000.0);
        else
            snprintf(le, sizeof(le), "+Inf");
        sample_as(o, name, &bl, cum, false);
    }
    snprintf(name, sizeof(name), "%s_sum", o->fam->name);
    sample_as(o, name, l, h->sum_ms, true);
    snprintf(name, sizeof(name), "%s_count", o->fam->name);
    sample_as(o, name, l, h->count, false);
}

/* The labels of the family being written, with values (as many as it has labels). */
static labels_t fam_labels(const out_t *o, const char *const *values)
{
    labels_t l = {.partition = -1};
    for (int i = 0; i < KS_METRIC_LABELS_MAX && o->fam->pub.labels[i]; i++) {
        l.k[i] = o->fam->pub.labels[i];
        l.v[i] = values[i];
    }
    return l;
}

bool ks_metrics_sees(const ks_metrics_out_t *o, const char *group)
{
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->groups[i]->name, group))
            return true;
    return false;
}

void ks_metrics_put(ks_metrics_out_t *o, const char *const *values, int64_t v)
{
    labels_t l = fam_labels(o, values);
    sample(o, &l, v);
}

void ks_metrics_put_hist(ks_metrics_out_t *o, const char *const *values, const ks_hist_t *h)
{
    labels_t l = fam_labels(o, values);
    hist_samples(o, &l, h);
}

/* ---- the STATUS collector: the groups' snapshots ---- */

/* A status field's value at off in the level struct s; false when unknown (-1 of an
 * I64_OPT). */
static bool field_value(const void *s, const frow_t *r, int64_t *v)
{
    const char *p = (const char *)s + r->off;
    switch (r->vt) {
    case V_BOOL: {
        int x;
        memcpy(&x, p, sizeof(x));
        *v = x;
        return true;
    }
    case V_I32: {
        int32_t x;
        memcpy(&x, p, sizeof(x));
        *v = x;
        return true;
    }
    case V_I64:
    case V_I64_OPT:
        memcpy(v, p, sizeof(*v));
        return r->vt == V_I64 || *v >= 0;
    default:
        abort(); /* a COUNTER or GAUGE row of a type /metrics cannot write */
    }
}

/* A status field's family: one sample per group (per partition for the partition level). A
 * stalled partition's sample also says why (ksidecar_partition_stalled{...,reason="poison"}
 * 1); one not stalled has no reason label (0). */
static void collect_field(out_t *o)
{
    const fam_t *f = o->fam;
    for (size_t i = 0; i < o->n; i++) {
        const ks_group_status_t *g = o->groups[i];
        if (f->level != LV_PART) {
            labels_t l = fam_labels(o, (const char *const[]){g->name});
            const void *s = f->level == LV_MEMORY ? (const void *)&g->memory : (const void *)g;
            int64_t v;
            if (f->row->vt == V_HIST)
                hist_samples(o, &l, (const ks_hist_t *)((const char *)s + f->row->off));
            else if (field_value(s, f->row, &v))
                sample(o, &l, v);
            continue;
        }
        for (size_t j = 0; j < g->part_cnt; j++) {
            const ks_part_status_t *p = &g->parts[j];
            labels_t pl = {{"group", "topic"}, {g->name, p->topic}, p->partition};
            if (f->reason) {
                const char *why;
                memcpy(&why, (const char *)p + f->reason->off, sizeof(why));
                if (why && *why) {
                    pl.k[2] = "reason";
                    pl.v[2] = why;
                }
            }
            int64_t v;
            if (field_value(p, f->row, &v))
                sample(o, &pl, v);
        }
    }
}

/* kafka_exporter's families, under its names and labels, so its dashboards and autoscalers
 * read ksidecar unchanged. */

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
static void kafka_part_family(out_t *o, size_t off)
{
    for (size_t i = 0; i < o->n; i++)
        for (size_t j = 0; j < o->groups[i]->part_cnt; j++) {
            const ks_part_status_t *p = &o->groups[i]->parts[j];
            int64_t v;
            memcpy(&v, (const char *)p + off, sizeof(v));
            labels_t l = {{"consumergroup", "topic"}, {o->groups[i]->name, p->topic}, p->partition};
            if (v >= 0)
                sample(o, &l, v);
        }
}

static void kafka_lag_sum(out_t *o)
{
    for (size_t i = 0; i < o->n; i++) {
        const ks_group_status_t *g = o->groups[i];
        for (size_t t = 0; t < g->topic_cnt; t++) {
            const char *topic = g->topics[t];
            int64_t sum = 0;
            bool any = false;
            for (size_t j = 0; j < g->part_cnt; j++) {
                const ks_part_status_t *p = &g->parts[j];
                if (p->lag >= 0 && !strcmp(p->topic, topic)) {
                    sum += p->lag;
                    any = true;
                }
            }
            labels_t l = {{"consumergroup", "topic"}, {g->name, topic}, -1};
            if (any)
                sample(o, &l, sum);
        }
    }
}

/* A partition two groups read is one series: its high watermark once. */
static void kafka_high_watermarks(out_t *o)
{
    size_t cnt = 0, k = 0;
    for (size_t i = 0; i < o->n; i++)
        cnt += o->groups[i]->part_cnt;
    hw_t *hw = calloc(cnt ? cnt : 1, sizeof(*hw));
    if (!hw)
        abort();
    for (size_t i = 0; i < o->n; i++)
        for (size_t j = 0; j < o->groups[i]->part_cnt; j++) {
            const ks_part_status_t *p = &o->groups[i]->parts[j];
            if (p->high_watermark >= 0)
                hw[k++] = (hw_t){p->topic, p->partition, p->high_watermark};
        }
    qsort(hw, k, sizeof(*hw), hw_cmp);
    for (size_t i = 0; i < k; i++) {
        if (i && !hw_cmp(&hw[i], &hw[i - 1]))
            continue;
        labels_t l = {{"topic"}, {hw[i].topic}, hw[i].partition};
        sample(o, &l, hw[i].hw);
    }
    free(hw);
}

/* A subscriber's name ends in '#' and its number when it is a stream (status_fields.h);
 * names are never labels, only counted. */
static bool sub_is_stream(const char *name)
{
    const char *h = strrchr(name, '#');
    return h && h[1] && strspn(h + 1, "0123456789") == strlen(h + 1);
}

static void collect_status(void *ctx, ks_metric_id_t id, out_t *o)
{
    (void)ctx;
    switch (id) {
    case KS_METRIC_FIELD:
        collect_field(o);
        return;
    case KS_METRIC_KAFKA_CURRENT_OFFSET:
        kafka_part_family(o, offsetof(ks_part_status_t, committed));
        return;
    case KS_METRIC_KAFKA_LAG:
        kafka_part_family(o, offsetof(ks_part_status_t, lag));
        return;
    case KS_METRIC_KAFKA_LAG_SUM:
        kafka_lag_sum(o);
        return;
    case KS_METRIC_KAFKA_HIGH_WATERMARK:
        kafka_high_watermarks(o);
        return;
    case KS_METRIC_SUBSCRIBERS:
    case KS_METRIC_STREAMS:
        for (size_t i = 0; i < o->n; i++) {
            const ks_group_status_t *g = o->groups[i];
            int64_t v = (int64_t)g->sub_cnt;
            if (id == KS_METRIC_STREAMS) {
                v = 0;
                for (size_t j = 0; j < g->sub_cnt; j++)
                    v += sub_is_stream(g->subs[j].name);
            }
            ks_metrics_put(o, (const char *const[]){g->name}, v);
        }
        return;
    case KS_METRIC_GROUPS:
        sample(o, NULL, (int64_t)o->n);
        return;
    default:
        abort(); /* a STATUS row without its case */
    }
}

/* ---- the EDGES collector: requests answered ---- */

static void collect_edges(void *ctx, ks_metric_id_t id, out_t *o)
{
    (void)ctx;
    if (id != KS_METRIC_REQUESTS)
        abort(); /* an EDGES row without its case */
    char code[16];
    for (int m = 0; m < HM_N; m++)
        for (int c = 0; c < HTTP_CODES; c++) {
            uint64_t v = atomic_load_explicit(&http_reqs[m][c], memory_order_relaxed);
            snprintf(code, sizeof(code), "%d", c + HTTP_CODE_MIN);
            if (v)
                ks_metrics_put(o, (const char *const[]){"http", http_methods[m], code}, (int64_t)v);
        }
    for (int s = 0; s < KS_METRICS_GRPC_SLOTS; s++)
        for (int c = 0; c < GRPC_CODES; c++) {
            uint64_t v = atomic_load_explicit(&grpc_reqs[s][c], memory_order_relaxed);
            const char *path = atomic_load(&grpc_paths[s]);
            if (v)
                ks_metrics_put(
                    o, (const char *const[]){"grpc", path ? path : "unknown", grpc_code_names[c]},
                    (int64_t)v);
        }
}

/* ---- the PROCESS collector ---- */

static void collect_process(void *ctx, ks_metric_id_t id, out_t *o)
{
    (void)ctx;
    switch (id) {
    case KS_METRIC_STREAMS_CUT:
        sample(o, NULL, (int64_t)atomic_load_explicit(&streams_cut, memory_order_relaxed));
        return;
    case KS_METRIC_BUILD_INFO:
        ks_metrics_put(o, (const char *const[]){KSIDECAR_VERSION}, 1);
        return;
    case KS_METRIC_OTEL_SPANS_EXPORTED:
        sample(o, NULL, (int64_t)ks_otel_exported());
        return;
    case KS_METRIC_OTEL_SPANS_DROPPED:
        sample(o, NULL, (int64_t)ks_otel_dropped());
        return;
    /* The last two are written whatever the cap, so what it dropped always shows. */
    case KS_METRIC_START_TIME:
        o->uncapped = true;
        sample_as(o, o->fam->name, NULL, start_ms, true);
        o->uncapped = false;
        return;
    case KS_METRIC_SERIES_DROPPED: {
        uint64_t dropped =
            atomic_fetch_add_explicit(&series_dropped, o->dropped, memory_order_relaxed) +
            o->dropped;
        o->uncapped = true;
        sample(o, NULL, (int64_t)dropped);
        o->uncapped = false;
        return;
    }
    default:
        abort(); /* a PROCESS row without its case */
    }
}

/* ---- the registry ---- */

static pthread_rwlock_t reg_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct {
    ks_metrics_collect_fn *fn;
    void *ctx;
} collectors[KS_METRIC_SRC_N] = {
    [KS_METRIC_SRC_STATUS] = {collect_status, NULL},
    [KS_METRIC_SRC_EDGES] = {collect_edges, NULL},
    [KS_METRIC_SRC_PROCESS] = {collect_process, NULL},
};

int ks_metrics_register(ks_metric_source_t src, ks_metrics_collect_fn *fn, void *ctx)
{
    int rc = -1;
    pthread_rwlock_wrlock(&reg_lock);
    if (src < KS_METRIC_SRC_N && !collectors[src].fn) {
        collectors[src].fn = fn;
        collectors[src].ctx = ctx;
        rc = 0;
    }
    pthread_rwlock_unlock(&reg_lock);
    return rc;
}

void ks_metrics_unregister(ks_metric_source_t src, void *ctx)
{
    pthread_rwlock_wrlock(&reg_lock);
    if (ctx && src < KS_METRIC_SRC_N && collectors[src].ctx == ctx) {
        collectors[src].fn = NULL;
        collectors[src].ctx = NULL;
    }
    pthread_rwlock_unlock(&reg_lock);
}

void ks_metrics_render(ks_jbuf_t *b, const ks_group_status_t *const *groups, size_t n,
                       int64_t max_series)
{
    pthread_once(&fams_once, fams_build);
    out_t o = {.b = b, .max = max_series, .groups = groups, .n = n};
    pthread_rwlock_rdlock(&reg_lock);
    for (size_t i = 0; i < nfams; i++) {
        ks_metrics_collect_fn *fn = collectors[fams[i].pub.source].fn;
        if (!fn)
            continue; /* a transport's family, and it does not run */
        o.fam = &fams[i];
        o.ms = fams[i].ms;
        family(&o, &fams[i]);
        fn(collectors[fams[i].pub.source].ctx, fams[i].pub.id, &o);
    }
    pthread_rwlock_unlock(&reg_lock);
}
