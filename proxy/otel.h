/* otel.h: ksidecar's own OpenTelemetry spans. A span is made on the thread where its event
 * happens and handed to a bounded queue (one lock, held for a copy); an exporter thread of its
 * own sends the queue in batches over OTLP/HTTP (protobuf or JSON), with retries on 429 and 503,
 * and drops and counts what the queue cannot hold. Set up from the standard OTEL_* environment and
 * the otel.* config keys; with tracing off, ks_otel_on is false and nothing else runs. */
#ifndef KS_OTEL_H
#define KS_OTEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "types.h"

/* True once ks_otel_start set up an exporter: the one test on the record path. */
extern bool ks_otel_on;

#define KS_OTEL_EVENTS_MAX 2
/* A batch's receive span links at most this many records' contexts; the rest are counted in
 * the span's dropped links. */
#define KS_OTEL_LINKS_MAX 32

typedef struct ks_otel_event {
    const char *name; /* "ack", "nack", "expiry", "dead_letter" (static) */
    int64_t time_ns;
    char reason[200]; /* empty: none */
} ks_otel_event_t;

/* A link to another span's context: a record's creation context, or a delivery's receive
 * span. */
typedef struct ks_otel_link {
    uint8_t trace_id[16], span_id[8];
    uint8_t flags;
} ks_otel_link_t;

/* One finished span (copied into the queue). */
typedef struct ks_otel_span {
    uint8_t trace_id[16], span_id[8], parent_id[8];
    bool has_parent;
    const char *op; /* messaging.operation.type: "receive" or "process" (static) */
    char name[280]; /* "<op> <topic>" */
    int64_t start_ns, end_ns;
    char topic[256], group[256], subscriber[288], key[128];
    const char *transport; /* "grpc", "http", "push" (static); NULL: not known */
    int32_t partition;     /* < 0: a batch's span, no one record's */
    int64_t offset;
    int attempt;
    bool has_key;   /* key is text (UTF-8 printable, short enough) */
    uint32_t batch; /* > 1: a receive span for a batch of this many records */
    size_t event_cnt;
    ks_otel_event_t events[KS_OTEL_EVENTS_MAX];
    size_t link_cnt;
    uint32_t links_dropped;
    ks_otel_link_t links[KS_OTEL_LINKS_MAX];
} ks_otel_span_t;

/* Reads the OTEL_* environment (envp) over cfg's otel.* keys; starts the exporter thread when
 * an endpoint is set and OTEL_SDK_DISABLED is not true. 0, or -1 with err filled. */
int ks_otel_start(const ks_config_t *cfg, char **envp, char *err, size_t errsize);
/* Sends what is queued (for up to grace_ms) and stops the thread. */
void ks_otel_stop(int grace_ms);

/* The record's W3C trace context: true with trace, parent and flags filled when it has exactly
 * one valid traceparent header. */
bool ks_otel_context(const ks_header_t *hs, size_t n, uint8_t trace[16], uint8_t parent[8],
                     uint8_t *flags);
/* v[0..n) is a W3C traceparent of version 00 ("00-" 32 hex trace id "-" 16 hex parent id "-"
 * 2 hex flags, lower-case, neither id all zero): true with trace, parent and flags filled. */
bool ks_otel_traceparent_parse(const char *v, size_t n, uint8_t trace[16], uint8_t parent[8],
                               uint8_t *flags);
/* The sampler's decision for a span of trace (a parent's flags when has_parent). */
bool ks_otel_sampled(const uint8_t trace[16], bool has_parent, uint8_t parent_flags);
/* Ids derived from where a delivery is (seed: group, topic, partition, offset, attempt), so a
 * dead letter written later names the same span as its parent. */
void ks_otel_ids(uint64_t seed, uint8_t trace[16], uint8_t span[8]);
/* Queues s; false (counted) when the queue is full. */
bool ks_otel_push(const ks_otel_span_t *s);

/* Counters for /metrics. */
uint64_t ks_otel_dropped(void);
uint64_t ks_otel_exported(void);

/* Writes "00-<trace>-<span>-<flags>" into out (56 bytes). */
void ks_otel_traceparent(char out[56], const uint8_t trace[16], const uint8_t span[8],
                         uint8_t flags);

#endif
