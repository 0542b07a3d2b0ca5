/* metric_list.h: every family GET /metrics writes, once, in the order it writes them: its
 * name, type, labels, help and the collector its samples come from. */
#ifndef KS_METRIC_LIST_H
#define KS_METRIC_LIST_H

/* KS_METRIC_LIST(X, FIELDS) has two kinds of row:
 *   X(ID, "name", TYPE, SOURCE, ("label", ...), "help")
 *     one family. ID names it to its collector (KS_METRIC_<ID>, metrics.h); TYPE is COUNTER,
 *     GAUGE or HISTOGRAM (in seconds); SOURCE is the collector that writes its samples
 *     (KS_METRIC_SRC_<SOURCE>): STATUS the groups' status snapshots, EDGES the HTTP and gRPC
 *     request counters, PROCESS the process's own, PUSH push delivery (registered while it
 *     runs). The labels are in the order the samples carry them; (NULL) for none.
 *   FIELDS(LEVEL, "prefix", ("label", ...))
 *     one family for each COUNTER, GAUGE, GAUGE_MS or HISTOGRAM row of the status field list
 *     KS_STATUS_<LEVEL>_FIELDS (proxy/status_fields.h): "prefix" + the field's name (less
 *     "_ms", plus "_seconds", for a value in ms) + "_total" for a counter, the row's text as
 *     its help, one sample for each group (or partition) with these labels.
 *
 * /metrics (api/metrics.c) renders from this list and docs/metrics.md is generated from it
 * (tools/metrics_md.c; the test docs_metrics fails until it is regenerated). A new family
 * is a row here and its case in its collector; a new status field needs nothing here. */
#define KS_METRIC_LIST(X, FIELDS)                                                                  \
    X(KAFKA_CURRENT_OFFSET, "kafka_consumergroup_current_offset", GAUGE, STATUS,                   \
      ("consumergroup", "topic", "partition"),                                                     \
      "the group's last commit the broker confirmed, per partition")                               \
    X(KAFKA_LAG, "kafka_consumergroup_lag", GAUGE, STATUS,                                         \
      ("consumergroup", "topic", "partition"),                                                     \
      "high watermark - the group's committed offset, per partition")                              \
    X(KAFKA_LAG_SUM, "kafka_consumergroup_lag_sum", GAUGE, STATUS, ("consumergroup", "topic"),     \
      "the group's lag summed over a topic's partitions assigned here")                            \
    X(KAFKA_HIGH_WATERMARK, "kafka_topic_partition_current_offset", GAUGE, STATUS,                 \
      ("topic", "partition"),                                                                      \
      "the partition's high watermark (the offset the next record produced gets)")                 \
    FIELDS(COUNTER, "ksidecar_", ("group"))                                                        \
    FIELDS(GROUP, "ksidecar_group_", ("group"))                                                    \
    FIELDS(MEMORY, "ksidecar_memory_", ("group"))                                                  \
    FIELDS(PART, "ksidecar_partition_", ("group", "topic", "partition"))                           \
    X(SUBSCRIBERS, "ksidecar_subscribers", GAUGE, STATUS, ("group"),                               \
      "subscribers (pull sessions and streams) now")                                               \
    X(STREAMS, "ksidecar_streams", GAUGE, STATUS, ("group"),                                       \
      "subscribers that are streams (gRPC or HTTP) now")                                           \
    X(REQUESTS, "ksidecar_requests_total", COUNTER, EDGES, ("edge", "method", "code"),             \
      "requests answered, by edge, method and code")                                               \
    X(STREAMS_CUT, "ksidecar_streams_cut_total", COUNTER, PROCESS, (NULL),                         \
      "streams (gRPC Subscribe, HTTP) cut off for taking no message within their stall time")      \
    X(GROUPS, "ksidecar_groups", GAUGE, STATUS, (NULL),                                            \
      "groups running in this process (that the caller may see)")                                  \
    X(BUILD_INFO, "ksidecar_build_info", GAUGE, PROCESS, ("version"),                              \
      "the version built; always 1")                                                               \
    X(PUSH_REQUESTS, "ksidecar_push_requests_total", COUNTER, PUSH, ("group", "code"),             \
      "push requests ended, by the app's HTTP status (none: no answer came)")                      \
    X(PUSH_RECORDS, "ksidecar_push_records_total", COUNTER, PUSH, ("group", "verdict"),            \
      "pushed records settled by the app's answer: ack, retry (pushed again) or dead_letter")      \
    X(PUSH_IN_FLIGHT, "ksidecar_push_requests_in_flight", GAUGE, PUSH, ("group"),                  \
      "push requests waiting for the app's answer now")                                            \
    X(PUSH_DURATION, "ksidecar_push_request_duration_seconds", HISTOGRAM, PUSH, ("group"),         \
      "from a push request's start to the app's answer (or the request's failure)")                \
    X(OTEL_SPANS_EXPORTED, "ksidecar_otel_spans_exported_total", COUNTER, PROCESS, (NULL),         \
      "spans the OTLP endpoint took")                                                              \
    X(OTEL_SPANS_DROPPED, "ksidecar_otel_spans_dropped_total", COUNTER, PROCESS, (NULL),           \
      "spans dropped: the export queue was full, or the endpoint refused or did not answer")       \
    X(START_TIME, "ksidecar_process_start_time_seconds", GAUGE, PROCESS, (NULL),                   \
      "when the process started, in seconds since the epoch")                                      \
    X(SERIES_DROPPED, "ksidecar_metrics_series_dropped_total", COUNTER, PROCESS, (NULL),           \
      "samples left out of scrapes by metrics.max_series")

/* The collectors a row may name. */
#define KS_METRIC_SOURCES(S) S(STATUS) S(EDGES) S(PROCESS) S(PUSH)

#endif
