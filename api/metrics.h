/* metrics.h: GET /metrics, the Prometheus text exposition (0.0.4) of the metric list
 * (metric_list.h): the groups' status snapshots, the edges' request counters, the process's
 * own, and the families a transport's collector registers. */
#ifndef KS_METRICS_H
#define KS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json_out.h"
#include "metric_list.h"
#include "types.h"

/* The content type of what ks_metrics_render writes. */
#define KS_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Counts one answered HTTP request: its method (GET, HEAD, POST; another counts as OTHER)
 * and status. Lock-free; any thread. */
void ks_metrics_http_request(const char *method, unsigned status);

/* Counts one finished gRPC call: slot, the edge's method id (< KS_METRICS_GRPC_SLOTS; 0
 * for an unknown method), path its static method path (NULL: "unknown"; never a name a
 * client sent), code its gRPC status code (0..16). Lock-free; any thread. */
#define KS_METRICS_GRPC_SLOTS 32
void ks_metrics_grpc_request(unsigned slot, const char *path, int code);

/* Counts one stream cut off for taking no message within its stall time. Lock-free; any
 * thread. */
void ks_metrics_stream_cut(void);

/* Writes the exposition of groups[0..n) (borrowed snapshots, the ones the caller may see)
 * into b: every family of the metric list (metric_list.h), in its order, each with the
 * samples its collector writes. At most max_series samples are written; the rest are counted
 * in ksidecar_metrics_series_dropped_total, which, with the start time, is always written.
 * Any thread. */
void ks_metrics_render(ks_jbuf_t *b, const ks_group_status_t *const *groups, size_t n,
                       int64_t max_series);

/* ---- the families, as the list declares them ---- */

typedef enum { KS_METRIC_COUNTER, KS_METRIC_GAUGE, KS_METRIC_HISTOGRAM } ks_metric_type_t;

/* A family's collector (KS_METRIC_SRC_<SOURCE> of its row). */
#define KS_METRIC_SRC_(s) KS_METRIC_SRC_##s,
typedef enum { KS_METRIC_SOURCES(KS_METRIC_SRC_) KS_METRIC_SRC_N } ks_metric_source_t;
#undef KS_METRIC_SRC_

/* A family of an X row: KS_METRIC_<ID>; KS_METRIC_FIELD: one of a status field. */
#define KS_METRIC_ID_(id, ...) KS_METRIC_##id,
#define KS_METRIC_NO_ID_(...)
typedef enum { KS_METRIC_LIST(KS_METRIC_ID_, KS_METRIC_NO_ID_) KS_METRIC_FIELD } ks_metric_id_t;
#undef KS_METRIC_ID_
#undef KS_METRIC_NO_ID_

#define KS_METRIC_LABELS_MAX 4
typedef struct {
    const char *name; /* the full name, _total or _seconds included */
    ks_metric_type_t type;
    ks_metric_id_t id;
    ks_metric_source_t source;
    const char *labels[KS_METRIC_LABELS_MAX + 1]; /* NULL-terminated, in the samples' order */
    const char *help;
    /* A status field's family: the field's place in the status JSON ("counters.acked",
     * "partitions[].lag"), and the field whose text, while not empty, is the label "reason"
     * (written before "partition"); else NULL. */
    const char *field, *reason_field;
} ks_metric_family_t;

/* Every family, in the order /metrics writes them; *n gets how many. The array lives as long
 * as the process. Any thread. */
const ks_metric_family_t *ks_metrics_families(size_t *n);

/* ---- collectors: a transport's own families ----
 * A row's SOURCE names the collector that writes its samples. STATUS, EDGES and PROCESS are
 * this file's; another (PUSH) registers itself while it runs. A family whose collector is not
 * registered is not written. */

typedef struct ks_metrics_out ks_metrics_out_t;

/* Writes the samples of family id (one of the source's) into o, through the calls below. Runs
 * on the thread rendering /metrics, with the registry's lock held for reading: it must not
 * register or unregister. */
typedef void ks_metrics_collect_fn(void *ctx, ks_metric_id_t id, ks_metrics_out_t *o);

/* Makes fn (with ctx, borrowed) the collector of src. Returns 0, or -1 when src has one
 * already. Any thread. */
int ks_metrics_register(ks_metric_source_t src, ks_metrics_collect_fn *fn, void *ctx);
/* Takes src's collector away if ctx registered it; once this returns no render runs it.
 * Any thread but a collector's. */
void ks_metrics_unregister(ks_metric_source_t src, void *ctx);

/* The group is one the scrape's caller may see (a collector writes no sample of another). */
bool ks_metrics_sees(const ks_metrics_out_t *o, const char *group);
/* One sample of the family being written: values[i] the value of its labels[i] (as many as
 * it has), v the value. */
void ks_metrics_put(ks_metrics_out_t *o, const char *const *values, int64_t v);
/* A histogram family's samples for one set of label values: buckets (le, in seconds), sum
 * (seconds) and count of h, whose values are ms. */
void ks_metrics_put_hist(ks_metrics_out_t *o, const char *const *values, const ks_hist_t *h);

#endif
