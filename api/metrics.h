/* metrics.h: GET /metrics, the Prometheus text exposition (0.0.4) rendered from the groups'
 * status snapshots, and the edges' request counters it also shows. */
#ifndef KS_METRICS_H
#define KS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "json_out.h"
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
 * into b: kafka_exporter's consumer group families, the ksidecar_ families generated from
 * proxy/status_fields.h, and the process's own (requests, groups, start time, build).
 * At most max_series samples are written; the rest are counted in
 * ksidecar_metrics_series_dropped_total, which is always written. Any thread. */
void ks_metrics_render(ks_jbuf_t *b, const ks_group_status_t *const *groups, size_t n,
                       int64_t max_series);

#endif
