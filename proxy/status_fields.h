/* status_fields.h: the group status, every field once: how it is held, its name on the wire,
 * its proto field number, its kind and what it means. */
#ifndef KS_STATUS_FIELDS_H
#define KS_STATUS_FIELDS_H

/* One list per level of the status; each row is
 *   X(TYPE, member, pb, "name", number, KIND, "what it is")
 * member: the C member in the level's struct (types.h); pb: protobuf-c's member for the
 * proto field (the name, but static_ for static); "name": the JSON key and the proto field's
 * name; number: the proto field number in the level's message (0: none of its own).
 *
 * From the lists come the structs (types.h), the JSON writer (api/http/http_json.c), the
 * protobuf encoder (api/grpc/grpc_methods.c), the /metrics families (api/metrics.c) and
 * docs/status-fields.md (tools/status_fields_md.c); the test unit_status_fields holds them to
 * proto/ksidecar/v1/consumer.proto, unit_openapi_status to api/openapi.yaml's GroupStatus,
 * docs_status_fields the committed doc to them. A new field is a row here, its proto field,
 * its property in api/openapi.yaml, and its value set in proxy/group_status.c (a group
 * counter: the group's st_<member>, copied by a loop there). A new TYPE is one macro in each
 * of those files (KS_SF_C_, J_, PB_, M_V_, TYPE_), a row of test_status_fields.c's type_map
 * and one of test_openapi_status.c's; a row of an unknown TYPE or KIND fails to build.
 *
 * TYPE (C; JSON; proto):
 *   NAME      char[KS_STATUS_NAME_MAX]; a string (bytes that are not UTF-8 as \xNN); string
 *   NAME_OPT  as NAME, but JSON null when empty
 *   TEXT      const char *, static text; a string; string
 *   BOOL      int, 0 or 1; true or false; bool
 *   I32       int32_t; a number; int32
 *   I64       int64_t; a number; int64
 *   I64_OPT   int64_t, -1 when unknown; a number, or null when negative; int64 (-1)
 *   TOPICS    char **member (NULL-terminated) and size_t topic_cnt; an array of strings;
 *             repeated string
 *   PARTS     ks_part_status_t *member and size_t part_cnt; an array of objects; repeated
 *             PartitionStatus
 *   SUBS      ks_sub_status_t *member and size_t sub_cnt; as PARTS, of SubscriberStatus
 *   COUNTERS  the KS_STATUS_COUNTER_FIELDS rows: members of the group struct and fields of
 *             GroupStatus itself, but a JSON object of their own
 *   MEMORY    ks_mem_status_t; an object; MemoryStatus
 *   CREDITS   ks_credits_status_t; an object; Credits
 *   HIST      ks_hist_t (types.h); an object {"bounds_ms":[...],"counts":[... one more],
 *             "sum_ms","count"}; Histogram
 * KIND (what /metrics makes of it; api/metric_list.h names each level's family prefix and
 * labels): COUNTER only grows while the group runs (a family named ..._total); GAUGE a value
 * now; GAUGE_MS a value now in milliseconds, its name ending in _ms (a family in seconds, named
 * ..._seconds); HISTOGRAM a distribution of durations in ms, counters only (a histogram in
 * seconds, named ..._seconds); REASON text that, while not empty, is the label "reason" of
 * the GAUGE row just above it; LABEL names what the level's other values are of; TEXT a
 * setting or a state, as text; NESTED a level below (or the list TOPICS). LABEL, TEXT and
 * NESTED rows are not in /metrics. */

/* The group: ks_group_status_t, GroupStatus, one object of GET /v1/groups. */
#define KS_STATUS_GROUP_FIELDS(X)                                                                  \
    X(NAME, name, group, "group", 1, LABEL, "the consumer group")                                  \
    X(BOOL, is_static, static_, "static", 2, GAUGE,                                                \
      "declared in the config (groups.static) and started with the process")                       \
    X(TEXT, ordering, ordering, "ordering", 3, TEXT, "group.ordering: key, partition or none")     \
    X(TOPICS, topics, topics, "topics", 4, NESTED,                                                 \
      "the subscription: every topic the group reads")                                             \
    X(PARTS, parts, partitions, "partitions", 7, NESTED,                                           \
      "the partitions assigned to this process")                                                   \
    X(SUBS, subs, subscribers, "subscribers", 8, NESTED,                                           \
      "the subscribers (pull sessions and streams) and their credits")                             \
    X(NAME_OPT, dead_letter_topic, dead_letter_topic, "dead_letter_topic", 5, TEXT,                \
      "group.dead_letter_topic")                                                                   \
    X(I32, max_attempts, max_attempts, "max_attempts", 6, GAUGE,                                   \
      "group.max_attempts: deliveries before a record is dead-lettered")                           \
    X(COUNTERS, counters, counters, "counters", 0, NESTED,                                         \
      "the group's counters since it started here (in the proto: GroupStatus's own fields)")       \
    X(MEMORY, memory, memory, "memory", 15, NESTED, "the process's memory budget")

/* The group's counters: members of ks_group_status_t, fields of GroupStatus, the object
 * "counters" in JSON. */
#define KS_STATUS_COUNTER_FIELDS(X)                                                                \
    X(I64, delivered, delivered, "delivered", 9, COUNTER, "deliveries, redeliveries included")     \
    X(I64, redelivered, redelivered, "redelivered", 10, COUNTER,                                   \
      "deliveries of a record delivered before")                                                   \
    X(I64, expired, expired, "expired", 11, COUNTER, "leases that ended with no ack")              \
    X(I64, nacked, nacked, "nacked", 12, COUNTER, "records nacked")                                \
    X(I64, acked, acked, "acked", 13, COUNTER, "records acked")                                    \
    X(I64, dead_lettered, dead_lettered, "dead_lettered", 14, COUNTER,                             \
      "records produced to the dead-letter topic")                                                 \
    X(I64, acks_lost_to_move, acks_lost_to_move, "acks_lost_to_move", 16, COUNTER,                 \
      "accepted acks no confirmed commit covered when their partition moved (delivered again)")    \
    X(I64, commits_sent, commits_sent, "commits_sent", 17, COUNTER,                                \
      "partition commits sent to Kafka (one a partition a commit)")                                \
    X(I64, commits_confirmed, commits_confirmed, "commits_confirmed", 18, COUNTER,                 \
      "partition commits the broker confirmed")                                                    \
    X(I64, commits_failed, commits_failed, "commits_failed", 19, COUNTER,                          \
      "partition commits that failed (retried)")                                                   \
    X(I64, acks_stale, acks_stale, "acks_stale", 23, COUNTER,                                      \
      "ack ids (of acks, nacks and deadline changes) refused as stale: the lease ended, the "      \
      "record was settled or committed, or its partition moved")                                   \
    X(I64, acks_unknown, acks_unknown, "acks_unknown", 24, COUNTER,                                \
      "ack ids refused as unknown: no delivered record has them")                                  \
    X(I64, acks_invalid, acks_invalid, "acks_invalid", 25, COUNTER,                                \
      "ack ids refused as malformed or of another group")                                          \
    X(HIST, delivery_to_ack, delivery_to_ack_ms, "delivery_to_ack_ms", 20, HISTOGRAM,              \
      "from a record's delivery (its lease's start) to its ack")                                   \
    X(HIST, commit_round_trip, commit_round_trip_ms, "commit_round_trip_ms", 21, HISTOGRAM,        \
      "from a partition commit sent to the broker's confirmation")                                 \
    X(HIST, record_age_at_delivery, record_age_at_delivery_ms, "record_age_at_delivery_ms", 22,    \
      HISTOGRAM, "from a record's Kafka timestamp to its delivery (end-to-end lag in time)")

/* The process's one memory budget (memory.max_bytes), shared by every group:
 * ks_mem_status_t, MemoryStatus. */
#define KS_STATUS_MEMORY_FIELDS(X)                                                                 \
    X(I64, max_bytes, max_bytes, "max_bytes", 1, GAUGE, "memory.max_bytes")                        \
    X(I64, used_bytes, used_bytes, "used_bytes", 2, GAUGE,                                         \
      "held by every window of the process now")                                                   \
    X(I64, partitions, partitions, "partitions", 3, GAUGE,                                         \
      "partitions assigned across every group of the process")                                     \
    X(I64, window_share_bytes, window_share_bytes, "window_share_bytes", 4, GAUGE,                 \
      "each partition's window share now")                                                         \
    X(I64, kafka_queue_kbytes, kafka_queue_kbytes, "kafka_queue_kbytes", 5, GAUGE,                 \
      "librdkafka's queued.max.messages.kbytes for this group (per partition)")                    \
    X(I64, kafka_fetch_bytes, kafka_fetch_bytes, "kafka_fetch_bytes", 6, GAUGE,                    \
      "librdkafka's fetch.message.max.bytes for this group (per partition)")

/* One assigned partition: ks_part_status_t, PartitionStatus. */
#define KS_STATUS_PART_FIELDS(X)                                                                   \
    X(NAME, topic, topic, "topic", 1, LABEL, "the topic")                                          \
    X(I32, partition, partition, "partition", 2, LABEL, "the partition")                           \
    X(TEXT, state, state, "state", 3, TEXT,                                                        \
      "INITIALIZING (restoring its commit), ACTIVE, PAUSED, REVOKING or GONE")                     \
    X(I64, epoch, epoch, "epoch", 4, GAUGE, "this assignment's epoch; ack ids carry it")           \
    X(I64_OPT, committed, committed_offset, "committed_offset", 5, GAUGE,                          \
      "the last commit the broker confirmed")                                                      \
    X(I64_OPT, commit_in_flight, commit_in_flight, "commit_in_flight", 17, GAUGE,                  \
      "the offset of a commit sent and not confirmed yet")                                         \
    X(I64_OPT, high_watermark, high_watermark, "high_watermark", 6, GAUGE,                         \
      "the partition's high watermark")                                                            \
    X(I64_OPT, lag, lag, "lag", 7, GAUGE,                                                          \
      "high watermark - committed offset (before any commit: - the window's start)")               \
    X(I64, in_flight, in_flight, "in_flight", 8, GAUGE, "records leased now")                      \
    X(I64, window, window_records, "window_records", 9, GAUGE,                                     \
      "records held between the commit point and the fetch position")                              \
    X(I64, window_bytes, window_bytes, "window_bytes", 10, GAUGE, "those records' bytes")          \
    X(BOOL, paused, paused, "paused", 11, GAUGE,                                                   \
      "the window is full: no more records taken from librdkafka")                                 \
    X(I64_OPT, oldest_lease_age_ms, oldest_lease_age_ms, "oldest_lease_age_ms", 12, GAUGE_MS,      \
      "how long the oldest lease has run; unknown: nothing leased")                                \
    X(I64, metadata_truncations, metadata_truncations, "metadata_truncations", 13, COUNTER,        \
      "commits whose metadata did not fit and was cut short")                                      \
    X(BOOL, held_back, held_back, "held_back", 14, GAUGE,                                          \
      "new deliveries held back: the commit metadata would not fit, or "                           \
      "group.max_unconfirmed_acks acks wait for a confirmed commit")                               \
    X(I64, window_memory_bytes, window_memory_bytes, "window_memory_bytes", 15, GAUGE,             \
      "what the window costs against the memory budget")                                           \
    X(I64, kafka_queue_records, kafka_queue_records, "kafka_queue_records", 16, GAUGE,             \
      "records waiting in the partition's librdkafka queue")                                       \
    X(I64, budget_pauses, budget_pauses, "budget_pauses", 18, COUNTER,                             \
      "times paused in librdkafka to give its prefetch back to the memory budget")                 \
    X(I64, budget_dropped, budget_dropped_records, "budget_dropped_records", 23, COUNTER,          \
      "records librdkafka had fetched that its budget pauses threw away, to be fetched again")     \
    X(I64, commit_point_age_ms, commit_point_age_ms, "commit_point_age_ms", 19, GAUGE_MS,          \
      "how long since the confirmed commit point last moved")                                      \
    X(BOOL, stalled, stalled, "stalled", 20, GAUGE,                                                \
      "lag, and the commit point has not moved for health.stall_ms")                               \
    X(TEXT, stall_reason, stall_reason, "stall_reason", 21, REASON,                                \
      "why it is stalled: poison, metadata, schema_registry, no_subscriber, no_credits, memory, "  \
      "kafka or unknown; \"\" when not stalled")                                                   \
    X(NAME, stall_detail, stall_detail, "stall_detail", 22, TEXT,                                  \
      "the stall in a sentence: the poison record's offset, attempts and last nack reason, or "    \
      "the last commit error")

/* One subscriber: ks_sub_status_t, SubscriberStatus. */
#define KS_STATUS_SUB_FIELDS(X)                                                                    \
    X(NAME, name, name, "name", 1, LABEL,                                                          \
      "the subscriber; a stream's name ends in # and its number")                                  \
    X(CREDITS, credits, credits, "credits", 2, NESTED,                                             \
      "the bound: it is given no records past it")                                                 \
    X(CREDITS, outstanding, outstanding, "outstanding", 3, NESTED, "what it holds leased now")     \
    X(BOOL, waiting, waiting, "waiting", 4, GAUGE, "a fetch of its waits for records")

/* Records and bytes, of a subscriber's credits or holdings: ks_credits_status_t, Credits. */
#define KS_STATUS_CREDITS_FIELDS(X)                                                                \
    X(I64, records, records, "records", 1, GAUGE, "records")                                       \
    X(I64, bytes, bytes, "bytes", 2, GAUGE, "bytes of keys and values")

#endif
