/* config_keys.c: the config key table (each key once: name, type, scopes, default, range,
 * help), and what walks it for every key: the defaults, the group defaults' propagation, freeing,
 * lookups. The dump and the usage text: config_dump.c. */
#include "config_int.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "key_sched.h"
#include "types.h"
#include "util.h"

/* A push bearer token goes into the Authorization header as it is: visible ASCII only
 * (what a bearer token is made of), so no byte can end the header or need escaping. */
static bool bearer_ok(const char *s)
{
    for (; *s; s++)
        if (*s < 0x21 || *s > 0x7e)
            return false;
    return true;
}

static bool push_url_ok(const char *s)
{
    return (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8)) && strlen(s) > 8 &&
           !strpbrk(s, " \r\n\t");
}

/* A schema registry's base URL. */
static bool registry_url_ok(const char *s)
{
    return push_url_ok(s);
}

/* "user:password", or nothing. */
static bool basic_auth_ok(const char *s)
{
    return !*s || (strchr(s, ':') && !strpbrk(s, "\r\n"));
}

/* How a group shows keys or values (group.value_format, group.key_format). */
static bool rec_format_ok(const char *s)
{
    return ks_rec_format_from_str(s) >= 0;
}

/* What a record that cannot be decoded becomes (group.decode_errors). */
static bool decode_errors_ok(const char *s)
{
    return !strcmp(s, "deliver") || !strcmp(s, "dead_letter");
}

/* A dead-letter topic, or none. */
static bool topic_or_none(const char *s)
{
    return !*s || ks_valid_kafka_name(s);
}

/* Where a key lives, and its type with range and default. */
#define P(f)           .scope = KS_SCOPE_PROCESS, .off = offsetof(ks_config_t, f)
#define G(sc, f)       .scope = (sc), .off = offsetof(ks_group_conf_t, f)
#define INT(lo, hi, d) .type = T_INT, .min = (lo), .max = (hi), .def = (d)
#define I64(lo, hi, d) .type = T_I64, .min = (lo), .max = (hi), .def = (d)
#define DBL(lo, hi, d) .type = T_DOUBLE, .min = (lo), .max = (hi), .ddef = (d)
#define STR(d)         .type = T_STR, .sdef = (d)
/* The scopes of group keys: a group default a static group may set (GD), and a push body too
 * (GDP); a group object's own field, in a static group and a push body (SP), or a static
 * group only (S). */
#define GD  (KS_SCOPE_GROUP | KS_SCOPE_STATIC)
#define GDP (KS_SCOPE_GROUP | KS_SCOPE_STATIC | KS_SCOPE_PUSH)
#define SP  (KS_SCOPE_STATIC | KS_SCOPE_PUSH)
#define S   KS_SCOPE_STATIC

/* Every key ksidecar knows, besides kafka.*. The env name is KSIDECAR_ + the key upper-cased
 * with '.' as '_'. The order is that of --help and --print-config. */
const key_t_ config_keys[] = {
    {.name = "config",
     P(config_file),
     STR(NULL),
     .flags = KF_NULL,
     .help = "JSON config file to read first"},
    {.name = "dev",
     P(dev),
     .type = T_BOOL,
     .help = "start an in-process mock Kafka cluster with a demo topic"},
    {.name = "http.listen",
     P(http_listen),
     STR("127.0.0.1:8080"),
     .help = "HTTP listen address host:port (empty: off)"},
    {.name = "grpc.listen",
     P(grpc_listen),
     STR("127.0.0.1:50051"),
     .help = "gRPC listen address host:port (empty: no gRPC listener)"},
    {.name = "log.level",
     P(log_level),
     .type = T_LEVEL,
     .def = KS_LOG_INFO,
     .help = "error, warn, info or debug"},
    {.name = "log.format", P(log_json), .type = T_LOGFMT, .help = "text or json"},
    {.name = "groups.allowed",
     P(group_patterns),
     .type = T_LIST,
     .cnt_off = offsetof(ks_config_t, group_pattern_cnt),
     .sdef = "*",
     .help = "glob patterns a group name must match (comma-separated as a flag)"},
    {.name = "commit.interval_ms",
     P(commit_interval_ms),
     INT(10, 600000, 500),
     .help = "how often acked offsets are committed"},
    {.name = "health.stall_ms",
     P(health_stall_ms),
     INT(100, 86400000, 60000),
     .help = "a partition with lag whose commit point has not moved this long is stalled"},
    {.name = "shutdown.grace_ms",
     P(shutdown_grace_ms),
     INT(0, 600000, 10000),
     .help = "longest a clean shutdown may take"},
    {.name = "fetch.max_records",
     P(fetch_max_records),
     INT(1, 1000000, 10000),
     .help = "largest max a fetch may ask for"},
    {.name = "fetch.default_wait_ms",
     P(fetch_default_wait_ms),
     INT(0, 3600000, 5000),
     .help = "long-poll wait when a fetch gives no wait_ms"},
    {.name = "fetch.max_wait_ms",
     P(fetch_max_wait_ms),
     INT(0, 3600000, 60000),
     .help = "longest long-poll wait a fetch may ask for"},
    {.name = "window.max_records",
     P(window_max_records),
     INT(1, 10000000, 20000),
     .help = "per-partition bound on uncommitted records; the partition pauses there"},
    {.name = "window.max_bytes",
     P(window_max_bytes),
     I64(1024, INT64_C(1) << 40, INT64_C(64) << 20),
     .help = "per-partition bound on uncommitted bytes"},
    {.name = "memory.max_bytes",
     P(memory_max_bytes),
     I64(INT64_C(16) << 20, INT64_C(1) << 40, INT64_C(256) << 20),
     .help = "the process's budget for records held (windows and librdkafka's queues), all groups"},
    {.name = "http.max_request_bytes",
     P(max_request_bytes),
     I64(1024, INT64_C(1) << 30, KS_DEFAULT_REQUEST_BYTES),
     .help = "largest request body accepted (the default holds 100,000 ack ids)"},
    {.name = "http.health_listen",
     P(http_health_listen),
     STR(NULL),
     .help = "listen address host:port of a second listener for /healthz, /readyz and /metrics "
             "only, with no caller check (empty: none)"},
    {.name = "http.max_connections",
     P(http_max_connections),
     INT(1, 1000000, 4096),
     .help = "most open connections to http.listen"},
    {.name = "http.max_connections_per_client",
     P(http_max_conns_per_client),
     INT(0, 1000000, 1024),
     .help = "most open connections to http.listen from one client address (0: no bound)"},
    {.name = "http.header_timeout_ms",
     P(http_header_timeout_ms),
     INT(100, 3600000, 10000),
     .help = "a request's headers must all arrive within this, however slowly they drip"},
    {.name = "http.body_timeout_ms",
     P(http_body_timeout_ms),
     INT(100, 3600000, 30000),
     .help = "a request's body must all arrive within this after its headers"},
    {.name = "http.max_long_polls",
     P(http_max_long_polls),
     INT(1, 1000000, 1000),
     .help = "most concurrent waiting fetches; more are answered 429 with Retry-After"},
    {.name = "http.max_produce_records",
     P(http_max_produce_records),
     INT(1, 100000, 1000),
     .help = "most records in one POST /v1/topics/{topic}/records; more are answered 400"},
    {.name = "produce.timeout_ms",
     P(produce_timeout_ms),
     INT(1, 300000, 10000),
     .help = "a produce's deadline unless the request gives timeout_ms: then it is answered "
             "504 / DEADLINE_EXCEEDED, though a record not yet acknowledged may still be written"},
    {.name = "metrics.max_series",
     P(metrics_max_series),
     INT(100, 10000000, 100000),
     .help = "most samples in one GET /metrics; the rest are left out and counted in "
             "ksidecar_metrics_series_dropped_total"},
    {.name = "http.max_streams",
     P(http_max_streams),
     INT(1, 1000000, 1000),
     .help = "most concurrent record streams (GET /v1/groups/{group}/stream); more are answered "
             "429 with Retry-After"},
    {.name = "http.stream_queue_messages",
     P(http_stream_queue_messages),
     INT(1, 1000, 4),
     .help = "record batches one HTTP stream may have queued and not yet written before ksidecar "
             "stops delivering to it"},
    {.name = "http.stream_queue_bytes",
     P(http_stream_queue_bytes),
     I64(1024, INT64_C(1) << 32, INT64_C(16) << 20),
     .help = "key+value bytes one HTTP stream may have queued and not yet written before ksidecar "
             "stops delivering to it"},
    {.name = "http.stream_stall_ms",
     P(http_stream_stall_ms),
     INT(1000, 3600000, 30000),
     .help = "an HTTP stream whose client takes no bytes for this long is cut off; its records go "
             "back without counting an attempt"},
    {.name = "http.stream_heartbeat_ms",
     P(http_stream_heartbeat_ms),
     INT(100, 600000, 5000),
     .help = "an HTTP stream with nothing to write sends a heartbeat (an empty line, or an SSE "
             "comment) this often, so proxies keep the connection"},
    {.name = "http.access_log",
     P(http_access_log),
     .type = T_BOOL,
     .help =
         "log a line per HTTP request (method, path, status, bytes, duration, request id); off by "
         "default, as acks come at thousands a second; requests answered 5xx are always logged"},
    {.name = "lease.deadline_ms",
     P(lease_deadline_ms),
     INT(1, 86400000, 30000),
     .help = "lease deadline of a delivered record when a fetch gives none"},
    {.name = "lease.max_deadline_ms",
     P(lease_max_deadline_ms),
     INT(1, 86400000, 600000),
     .help = "longest lease deadline a fetch or extension may ask for"},
    {.name = "nack.max_delay_ms",
     P(nack_max_delay_ms),
     INT(0, 86400000, 3600000),
     .help = "longest redelivery delay a nack may ask for"},
    /* A group object's own fields: no key, no group default. */
    {.name = "group.name",
     G(S, name),
     STR(NULL),
     .flags = KF_NULL | KF_NEEDED,
     .ok = ks_valid_kafka_name,
     .hint = "a valid group name",
     .help = "the group's name (its Kafka group id)"},
    {.name = "group.topics",
     G(S, topics),
     .type = T_LIST,
     .cnt_off = offsetof(ks_group_conf_t, topic_cnt),
     .flags = KF_NEEDED,
     .ok = ks_valid_kafka_name,
     .hint = "a non-empty array of topic names",
     .help = "the topics the group subscribes to at start"},
    {.name = "group.ordering",
     G(GD, ordering),
     .type = T_ORDER,
     .def = KS_ORDER_KEY,
     .help = "key (default), partition or none: which records are processed in offset order"},
    {.name = "ordering.max_in_flight_per_key",
     G(GD, max_in_flight_per_key),
     INT(1, 100000, 500),
     .help =
         "records of one key (or, with group.ordering partition, of one partition) a subscriber "
         "that asked for ordered batches may hold at once; others get one at a time"},
    {.name = "group.max_unconfirmed_acks",
     G(GD, max_unconfirmed_acks),
     INT(0, 100000000, 20000),
     .help = "acks a partition may accept that no confirmed commit covers yet; past it, its new "
             "deliveries wait until a commit is confirmed (commits failing, the coordinator "
             "moving), so a lost assignment delivers at most this many acked records again "
             "(0: no cap)"},
    {.name = "group.dead_letter_topic",
     G(GD, dead_letter_topic),
     STR(NULL),
     .ok = topic_or_none,
     .hint = "a valid topic name",
     .help = "topic for records that reach group.max_attempts (empty: retry forever)"},
    {.name = "group.max_attempts",
     G(GD, max_attempts),
     INT(1, 1000000, 5),
     .help = "deliveries before a record is dead-lettered (needs a dead-letter topic)"},
    {.name = "group.redrive.max",
     G(GD, redrive_max),
     INT(1, 1000000, 3),
     .alias = "redrive_max",
     .help = "times a redrive moves one record back from the dead-letter topic; a record redriven "
             "this often stays there"},
    {.name = "group.push.url",
     G(SP, push_url),
     STR(NULL),
     .flags = KF_NEEDED,
     .ok = push_url_ok,
     .hint = "a url (http:// or https://)",
     .help = "push delivery: the app's url its records are POSTed to (see docs/push.md)"},
    {.name = "group.push.concurrency",
     G(GDP, push_concurrency),
     INT(1, 10000, 16),
     .help = "push delivery: requests in flight to a group's push url at once"},
    {.name = "group.push.timeout_ms",
     G(GDP, push_timeout_ms),
     INT(100, 3600000, 30000),
     .help = "push delivery: a request not answered within this is a failure, and its records are "
             "nacked"},
    {.name = "group.push.batch",
     G(GDP, push_batch),
     INT(1, 10000, 1),
     .help = "push delivery: records in one request (1: the record's value is the body; more: a "
             "JSON array of records)"},
    {.name = "group.push.bearer_token",
     G(SP, push_bearer_token),
     STR(NULL),
     .flags = KF_SECRET,
     .ok = bearer_ok,
     .hint = "visible ASCII",
     .help = "push delivery: sent as Authorization: Bearer (empty: none)"},
    {.name = "group.push.ca_file",
     G(S, push_ca_file),
     STR(NULL),
     .hint = "a path",
     .help = "push delivery: PEM CA file for an https url (empty: the system's); not in a push "
             "set by API call"},
    {.name = "group.push.insecure",
     G(SP, push_insecure),
     .type = T_BOOL,
     .help = "push delivery: https without checking the app's certificate"},
    {.name = "group.push.cloudevents",
     G(SP, push_cloudevents),
     .type = T_BOOL,
     .help = "push delivery, batch 1: also CloudEvents binary-mode ce-* headers"},
    {.name = "group.value_format",
     G(GD, value_format),
     STR("binary"),
     .ok = rec_format_ok,
     .hint = KS_REC_FORMAT_NAMES,
     .help = "how values are shown: binary (text or base64), avro (decoded to Avro's JSON "
             "encoding with the schema registry), avro_plain (the same with unions unwrapped), "
             "json_schema (the JSON after the schema header, checked), protobuf (decoded by "
             "Protobuf's JSON mapping), auto (decoded when the "
             "value is in the schema "
             "wire format with an id the registry knows); needs schema_registry.url but for "
             "binary"},
    {.name = "group.key_format",
     G(GD, key_format),
     STR("binary"),
     .ok = rec_format_ok,
     .hint = KS_REC_FORMAT_NAMES,
     .help = "how keys are shown: as group.value_format"},
    {.name = "group.decode_errors",
     G(GD, decode_errors),
     STR("deliver"),
     .ok = decode_errors_ok,
     .hint = "deliver or dead_letter",
     .help = "a key or value of a schema format that cannot be decoded (unknown schema id, "
             "corrupt bytes): deliver (as binary, with value_decode_error) or dead_letter (to "
             "group.dead_letter_topic at once)"},
    {.name = "push.allowed_urls",
     P(push_allowed_urls),
     STR(NULL),
     .help = "push delivery set by API call (PUT /v1/groups/{group}/push): comma-separated URL "
             "prefixes its url must start with, each http(s)://host[:port]/..., e.g. "
             "http://127.0.0.1:9000/ (empty: no push by API call)"},
    {.name = "otel.endpoint",
     P(otel_endpoint),
     STR(""),
     .help = "OTLP/HTTP url spans are POSTed to, as it is (empty: OTEL_EXPORTER_OTLP_TRACES_"
             "ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces; none: no tracing)"},
    {.name = "otel.protocol",
     P(otel_protocol),
     STR(""),
     .help = "http/protobuf or http/json (empty: OTEL_EXPORTER_OTLP_PROTOCOL, else "
             "http/protobuf)"},
    {.name = "otel.headers",
     P(otel_headers),
     STR(""),
     .flags = KF_SECRET,
     .help = "headers of the export requests, k=v,k2=v2, values URL-encoded (empty: "
             "OTEL_EXPORTER_OTLP_HEADERS)"},
    {.name = "otel.service_name",
     P(otel_service_name),
     STR(""),
     .help = "the spans' service.name (empty: OTEL_SERVICE_NAME, else ksidecar)"},
    {.name = "otel.sampler",
     P(otel_sampler),
     STR(""),
     .help = "always_on, always_off, traceidratio or parentbased_ of one (empty: "
             "OTEL_TRACES_SAMPLER, else parentbased_always_on)"},
    {.name = "otel.sampler_arg",
     P(otel_sampler_arg),
     STR(""),
     .help = "traceidratio's ratio in [0, 1] (empty: OTEL_TRACES_SAMPLER_ARG, else 1)"},
    {.name = "otel.queue_size",
     P(otel_queue_size),
     INT(0, 10000000, 0),
     .help = "spans queued for export; more are dropped and counted (0: "
             "OTEL_BSP_MAX_QUEUE_SIZE, else 2048)"},
    {.name = "otel.batch_size",
     P(otel_batch_size),
     INT(0, 10000000, 0),
     .help = "spans in one export request (0: OTEL_BSP_MAX_EXPORT_BATCH_SIZE, else 512)"},
    {.name = "otel.delay_ms",
     P(otel_delay_ms),
     INT(0, 3600000, 0),
     .help = "longest a span waits for a batch to fill (0: OTEL_BSP_SCHEDULE_DELAY, else 5000)"},
    {.name = "group.retry.initial_ms",
     G(GD, retry.initial_ms),
     INT(0, 86400000, 0),
     .help = "redelivery delay after a record's first failed delivery (a nack without a delay, or "
             "an expired lease), growing by group.retry.multiplier up to group.retry.max_ms; 0: "
             "none, redelivered at once"},
    {.name = "group.retry.max_ms",
     G(GD, retry.max_ms),
     INT(1, 86400000, 60000),
     .help = "longest redelivery delay group.retry.initial_ms grows to"},
    {.name = "group.retry.multiplier",
     G(GD, retry.multiplier),
     DBL(1, 100, 2.0),
     .help = "factor the redelivery delay grows by with each further attempt"},
    {.name = "group.retry.jitter",
     G(GD, retry.jitter),
     DBL(0, 1, 0),
     .help = "fraction of a redelivery delay taken off at random (0.2: 80% to 100% of it)"},
    {.name = "group.retry.backoff_ms",
     G(GD, retry),
     .type = T_MSLIST,
     .help = "redelivery delays by attempt, as a list (\"100,1000,5000\"; the last repeats); set, "
             "it replaces initial_ms, multiplier and max_ms"},
    {.name = "group.idle_close_ms",
     P(idle_close_ms),
     INT(0, 86400000, 60000),
     .help = "a dynamic group with no activity this long commits and leaves (0: never)"},
    {.name = "group.revoke_grace_ms",
     P(revoke_grace_ms),
     INT(0, 600000, 5000),
     .help = "how long a revoked partition's leases may still be acked"},
    {.name = "groups.static",
     P(static_groups),
     .type = T_STATIC,
     .help = "groups started at boot: an array of group objects (JSON text as a flag) with the "
             "group fields (below, and in --help), e.g. [{\"name\":\"g\",\"topics\":[\"t\"],"
             "\"push\":{\"url\":\"http://app/in\"}}]; push: see docs/push.md"},
    {.name = "commit.metadata_max_bytes",
     P(meta_max_bytes),
     INT(16, 1048576, 4096),
     .help = "size bound of the commit metadata (the broker's offset.metadata.max.bytes)"},
    {.name = "subscriber.max_records",
     P(sub_max_records),
     INT(1, 10000000, 1000),
     .help = "credits: most unacked records one subscriber may hold"},
    {.name = "subscriber.max_bytes",
     P(sub_max_bytes),
     I64(1, INT64_C(1) << 40, INT64_C(10) << 20),
     .help = "credits: most unacked bytes one subscriber may hold"},
    {.name = "tls.cert_file",
     P(tls_cert_file),
     STR(NULL),
     .help = "PEM certificate: turns on TLS for gRPC and HTTP (with tls.key_file)"},
    {.name = "tls.key_file",
     P(tls_key_file),
     STR(NULL),
     .help = "PEM private key of tls.cert_file"},
    {.name = "tls.client_ca_file",
     P(tls_client_ca_file),
     STR(NULL),
     .help = "PEM CA: clients must present a certificate it signed (mTLS)"},
    {.name = "auth.tokens_file",
     P(auth_tokens_file),
     STR(NULL),
     .help = "tokens and certificate subjects with group, consume and produce scopes (JSON; empty: "
             "no auth)"},
    {.name = "grpc.max_message_bytes",
     P(grpc_max_message_bytes),
     I64(1024, INT64_C(1) << 30, INT64_C(4) << 20),
     .help = "largest gRPC message received or sent"},
    {.name = "grpc.max_streams_per_client",
     P(grpc_max_streams_per_client),
     INT(1, 100000, 100),
     .help = "most concurrent Subscribe streams per authenticated identity, else per address"},
    {.name = "grpc.threads", P(grpc_threads), INT(1, 64, 2), .help = "completion-queue threads"},
    {.name = "grpc.stream_queue_messages",
     P(grpc_stream_queue_messages),
     INT(1, 1000, 4),
     .help = "record messages one Subscribe stream may have queued or in flight before ksidecar "
             "stops delivering to it"},
    {.name = "grpc.stream_queue_bytes",
     P(grpc_stream_queue_bytes),
     I64(1024, INT64_C(1) << 32, INT64_C(16) << 20),
     .help = "key+value bytes one Subscribe stream may have queued or in flight before ksidecar "
             "stops delivering to it"},
    {.name = "grpc.stream_stall_ms",
     P(grpc_stream_stall_ms),
     INT(1000, 3600000, 30000),
     .help = "a Subscribe stream whose client takes no message for this long is cut off; its "
             "records go back without counting an attempt"},
    {.name = "subscriber.max_credit_records",
     P(sub_max_credit_records),
     I64(1, INT64_C(1) << 40, 100000),
     .help = "largest record credits a subscriber may ask for"},
    {.name = "subscriber.max_credit_bytes",
     P(sub_max_credit_bytes),
     I64(1, INT64_C(1) << 50, INT64_C(1) << 30),
     .help = "largest byte credits a subscriber may ask for"},
    {.name = "groups.max",
     P(groups_max),
     INT(1, 100000, 64),
     .help = "most groups running at once, static ones included (each costs threads and fds)"},
    {.name = "topics.allow_internal",
     P(topics_allow_internal),
     .type = T_BOOL,
     .help = "clients may consume and produce Kafka's internal topics (names starting \"__\")"},
    {.name = "schema_registry.url",
     P(schema_registry_urls),
     .type = T_LIST,
     .cnt_off = offsetof(ks_config_t, schema_registry_url_cnt),
     .ok = registry_url_ok,
     .hint = "an http:// or https:// URL",
     .help = "schema registry base URLs (Confluent's API, e.g. http://host:8081 or Apicurio's "
             ".../apis/ccompat/v7), tried in turn; comma-separated as a flag (none: no registry)"},
    {.name = "schema_registry.basic_auth",
     P(schema_registry_basic_auth),
     STR(NULL),
     .flags = KF_SECRET,
     .ok = basic_auth_ok,
     .hint = "user:password",
     .help = "user:password for the schema registry (HTTP basic auth); a secret: better set "
             "through the environment variable than as a flag, which ps shows"},
    {.name = "schema_registry.bearer_token_file",
     P(schema_registry_bearer_token_file),
     STR(NULL),
     .help = "file holding a bearer token for the schema registry, read again when it changes"},
    {.name = "schema_registry.ca_file",
     P(schema_registry_ca_file),
     STR(NULL),
     .help = "PEM CA for an https schema registry (empty: the system's)"},
    {.name = "schema_registry.cert_file",
     P(schema_registry_cert_file),
     STR(NULL),
     .help = "PEM client certificate for the schema registry (mTLS, with "
             "schema_registry.key_file)"},
    {.name = "schema_registry.key_file",
     P(schema_registry_key_file),
     STR(NULL),
     .help = "PEM private key of schema_registry.cert_file"},
    {.name = "schema_registry.timeout_ms",
     P(schema_registry_timeout_ms),
     INT(100, 600000, 5000),
     .help = "one schema registry request's whole time, connecting included (each URL tried gets "
             "this)"},
    {.name = "schema_registry.cache_max",
     P(schema_registry_cache_max),
     INT(1, 10000000, 1000),
     .help = "schemas kept (and ids the registry lacks or failed on, remembered for a backoff); "
             "the least recently used go first"},
    {.name = "schema_registry.auto_register",
     P(schema_registry_auto_register),
     .type = T_BOOL,
     .help = "a produced key or value given with its schema (value_schema, key_schema) registers "
             "that schema under its subject, or finds the id it has there (off: such records are "
             "refused, and only schemas the registry has are used)"},
    {.name = "dev.topic",
     P(dev_topic),
     STR("demo"),
     .ok = ks_valid_kafka_name,
     .hint = "a valid topic name",
     .help = "dev mode: the demo topic"},
    {.name = "dev.partitions",
     P(dev_partitions),
     INT(1, 64, 3),
     .help = "dev mode: the demo topic's partitions"},
    {.name = "dev.rate",
     P(dev_rate),
     INT(0, 100000, 3),
     .help = "dev mode: sample records produced per second"},
};
#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))
const size_t config_nkeys = NKEYS;
_Static_assert(NKEYS <= KS_CONFIG_MAX_KEYS,
               "raise KS_CONFIG_MAX_KEYS for the explicit_keys bitmap");

void free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

static char **list_dup(char *const *list, size_t n)
{
    char **out = calloc(n ? n : 1, sizeof(char *));
    if (!out)
        abort();
    for (size_t i = 0; i < n; i++)
        out[i] = ks_xstrdup(list[i]);
    return out;
}

/* Sets the field of k at field, zeroed, to k's default. */
static void field_default(const key_t_ *k, void *field)
{
    switch (k->type) {
    case T_STR:
        *(char **)field = (k->flags & KF_NULL) ? NULL : ks_xstrdup(k->sdef ? k->sdef : "");
        return;
    case T_INT:
    case T_ORDER:
        *(int *)field = (int)k->def;
        return;
    case T_LEVEL:
        *(ks_log_level_t *)field = (ks_log_level_t)k->def;
        return;
    case T_I64:
        *(int64_t *)field = k->def;
        return;
    case T_DOUBLE:
        *(double *)field = k->ddef;
        return;
    case T_BOOL:
    case T_LOGFMT:
        *(bool *)field = k->def != 0;
        return;
    case T_LIST:
        if (k->sdef) {
            char **l = calloc(1, sizeof(char *));
            if (!l)
                abort();
            l[0] = ks_xstrdup(k->sdef);
            *(char ***)field = l;
            *(size_t *)((char *)field - k->off + k->cnt_off) = 1;
        }
        return;
    case T_STATIC: /* none */
    case T_MSLIST: /* no list */
        return;
    }
}

/* Frees what the field of k at field holds (a list's count is the caller's). */
static void field_free(const key_t_ *k, void *field)
{
    if (k->type == T_STR)
        free(*(char **)field);
    else if (k->type == T_LIST)
        free_list(*(char ***)field, *(size_t *)((char *)field - k->off + k->cnt_off));
}

/* Copies group key k from group conf src to dst. */
static void field_copy(const key_t_ *k, ks_group_conf_t *dst, const ks_group_conf_t *src)
{
    void *to = (char *)dst + k->off;
    const void *from = (const char *)src + k->off;
    switch (k->type) {
    case T_STR: {
        const char *s = *(char *const *)from;
        char **d = to;
        if (!*d || !s || strcmp(*d, s)) {
            free(*d);
            *d = s ? ks_xstrdup(s) : NULL;
        }
        return;
    }
    case T_INT:
    case T_ORDER:
        *(int *)to = *(const int *)from;
        return;
    case T_DOUBLE:
        *(double *)to = *(const double *)from;
        return;
    case T_BOOL:
        *(bool *)to = *(const bool *)from;
        return;
    case T_MSLIST: {
        const ks_retry_t *r = from;
        ks_retry_t *w = to;
        memcpy(w->list, r->list, sizeof(r->list));
        w->list_cnt = r->list_cnt;
        return;
    }
    case T_LIST: {
        size_t n = *(const size_t *)((const char *)src + k->cnt_off);
        free_list(*(char ***)to, *(size_t *)((char *)dst + k->cnt_off));
        *(char ***)to = list_dup(*(char **const *)from, n);
        *(size_t *)((char *)dst + k->cnt_off) = n;
        return;
    }
    case T_I64:
    case T_LEVEL:
    case T_LOGFMT:
    case T_STATIC: /* no group key has these types */
        abort();
    }
}

void ks_config_defaults(ks_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NKEYS; i++)
        if (config_keys[i].scope & (KS_SCOPE_PROCESS | KS_SCOPE_OBJECT))
            field_default(&config_keys[i], (char *)cfg + key_off(&config_keys[i]));
}

void group_conf_init(ks_group_conf_t *g, const ks_group_conf_t *d)
{
    for (size_t i = 0; i < NKEYS; i++) {
        const key_t_ *k = &config_keys[i];
        if (k->scope & KS_SCOPE_GROUP)
            field_copy(k, g, d);
        else if (k->scope & KS_SCOPE_OBJECT)
            field_default(k, (char *)g + k->off);
    }
}

void propagate_defaults(ks_config_t *cfg)
{
    for (size_t i = 0; i < cfg->static_group_cnt; i++)
        for (size_t j = 0; j < NKEYS; j++)
            if ((config_keys[j].scope & KS_SCOPE_GROUP) &&
                !key_explicit(&cfg->static_groups[i], &config_keys[j]))
                field_copy(&config_keys[j], &cfg->static_groups[i], &cfg->group_defaults);
}

void group_conf_free(ks_group_conf_t *g)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (config_keys[i].scope & KS_SCOPE_OBJECT)
            field_free(&config_keys[i], (char *)g + config_keys[i].off);
    memset(g, 0, sizeof(*g));
}

void static_groups_free(ks_config_t *cfg)
{
    for (size_t i = 0; i < cfg->static_group_cnt; i++)
        group_conf_free(&cfg->static_groups[i]);
    free(cfg->static_groups);
    cfg->static_groups = NULL;
    cfg->static_group_cnt = 0;
}

void ks_config_free(ks_config_t *cfg)
{
    group_conf_free(&cfg->group_defaults);
    static_groups_free(cfg);
    for (size_t i = 0; i < NKEYS; i++)
        if (config_keys[i].scope & KS_SCOPE_PROCESS)
            field_free(&config_keys[i], (char *)cfg + config_keys[i].off);
    for (size_t i = 0; i < cfg->kafka_cnt; i++) {
        free(cfg->kafka[i].key);
        free(cfg->kafka[i].value);
    }
    free(cfg->kafka);
    memset(cfg, 0, sizeof(*cfg));
}

const key_t_ *find_key(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if ((config_keys[i].scope & KS_SCOPE_KEY) && strcmp(config_keys[i].name, name) == 0)
            return &config_keys[i];
    return NULL;
}

size_t key_off(const key_t_ *k)
{
    return (k->scope & KS_SCOPE_PROCESS) ? k->off : offsetof(ks_config_t, group_defaults) + k->off;
}

const char *key_field_name(const key_t_ *k)
{
    const char *dot = strchr(k->name, '.');
    return dot ? dot + 1 : k->name;
}

const key_t_ *find_field(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++) {
        const key_t_ *k = &config_keys[i];
        if ((k->scope & KS_SCOPE_OBJECT) &&
            (!strcmp(key_field_name(k), name) || (k->alias && !strcmp(k->alias, name))))
            return k;
    }
    return NULL;
}

bool key_explicit(const ks_group_conf_t *g, const key_t_ *k)
{
    size_t i = (size_t)(k - config_keys);
    return (g->explicit_keys[i / 64] >> (i % 64)) & 1;
}

void key_mark_explicit(ks_group_conf_t *g, const key_t_ *k)
{
    size_t i = (size_t)(k - config_keys);
    g->explicit_keys[i / 64] |= UINT64_C(1) << (i % 64);
}

void key_expect(const key_t_ *k, bool brief, char *out, size_t outsize)
{
    if (k->hint) {
        snprintf(out, outsize, "%s", k->hint);
        return;
    }
    switch (k->type) {
    case T_INT:
    case T_I64:
    case T_DOUBLE:
        if (brief)
            snprintf(out, outsize, "%lld-%lld", (long long)k->min, (long long)k->max);
        else
            snprintf(out, outsize, "%s from %lld to %lld",
                     k->type == T_DOUBLE ? "a number" : "an integer", (long long)k->min,
                     (long long)k->max);
        return;
    case T_BOOL:
        snprintf(out, outsize, "a boolean");
        return;
    case T_ORDER:
        snprintf(out, outsize, brief ? "key|partition|none" : "key, partition or none");
        return;
    case T_MSLIST:
        snprintf(out, outsize,
                 brief ? "a list of ms" : "a list of ms, as [100, 1000] or \"100,1000\"");
        return;
    case T_STR:
        snprintf(out, outsize, "a string");
        return;
    case T_LIST:
        snprintf(out, outsize, "a non-empty array of strings");
        return;
    case T_LEVEL:
        snprintf(out, outsize, "error, warn, info or debug");
        return;
    case T_LOGFMT:
        snprintf(out, outsize, "text or json");
        return;
    case T_STATIC:
        snprintf(out, outsize, "an array of group objects");
        return;
    }
}

void retry_list_str(const ks_retry_t *r, char *out, size_t outsize)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < r->list_cnt && at < outsize; i++)
        at += (size_t)snprintf(out + at, outsize - at, "%s%d", i ? "," : "", r->list[i]);
}

void env_name(const char *key, char *out, size_t outsize)
{
    size_t n = (size_t)snprintf(out, outsize, "KSIDECAR_");
    for (; *key && n + 1 < outsize; key++)
        out[n++] = *key == '.' ? '_' : (char)toupper((unsigned char)*key);
    out[n] = '\0';
}
