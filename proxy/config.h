/* config.h: ksidecar's configuration: defaults, JSON file, environment and flags. */
#ifndef KS_CONFIG_H
#define KS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "retry.h"

struct json_t; /* jansson's */

typedef struct ks_kv {
    char *key; /* librdkafka property name, e.g. "bootstrap.servers" */
    char *value;
} ks_kv_t;

/* Most config keys (rows of the key table), for the bitmap below. */
#define KS_CONFIG_MAX_KEYS 128

/* Per-group settings: the defaults (group.*), one static group (groups.static), or a push set
 * by API call. Each field but explicit_keys is a row of the key table (config_keys.c). */
typedef struct ks_group_conf {
    char *name;    /* NULL for the defaults */
    char **topics; /* static groups subscribe to these at start */
    size_t topic_cnt;
    int ordering;              /* ks_ordering_t */
    char *dead_letter_topic;   /* empty: none, retries never stop */
    int max_attempts;          /* deliveries before dead-lettering (with a dead-letter topic) */
    int redrive_max;           /* redrives of one record before a redrive leaves it (loop guard) */
    int max_in_flight_per_key; /* records of one chain an ordered-batches subscriber may hold */
    int max_unconfirmed_acks;  /* acks a partition accepts past its last confirmed commit before
                                  its new deliveries wait for one (0: no cap) */
    /* Push delivery (api/push.c): a static group with a url gets its records POSTed there. */
    char *push_url;          /* http:// or https://; empty: no push */
    int push_concurrency;    /* requests in flight */
    int push_timeout_ms;     /* one request's whole time */
    int push_batch;          /* records in one request (1: the value is the body) */
    char *push_bearer_token; /* sent as Authorization: Bearer; empty: none */
    char *push_ca_file;      /* PEM CA for an https url; empty: the system's */
    bool push_insecure;      /* https without checking the app's certificate */
    bool push_cloudevents;   /* batch 1: also CloudEvents binary-mode ce-* headers */
    char *value_format;      /* ks_rec_format_t by name: binary, avro, json_schema, auto */
    char *key_format;
    char *decode_errors; /* deliver or dead_letter */
    ks_retry_t retry;    /* the delay of a nack without one, and of an expired lease */
    /* Static groups: bit i is set when key i of the table was set on the group itself, so it
     * does not follow its group default. */
    uint64_t explicit_keys[KS_CONFIG_MAX_KEYS / 64];
} ks_group_conf_t;

typedef struct ks_config {
    char *config_file;
    bool dev;
    char *http_listen; /* "host:port"; empty disables HTTP */
    char *grpc_listen; /* the gRPC listener's host:port; empty: none */
    ks_log_level_t log_level;
    bool log_json;
    char **group_patterns; /* fnmatch(3) patterns a group name must match */
    size_t group_pattern_cnt;
    int commit_interval_ms;
    int health_stall_ms; /* a partition with lag whose commit point sat this long is stalled */
    int shutdown_grace_ms;
    int fetch_max_records;
    int fetch_default_wait_ms;
    int fetch_max_wait_ms;
    int window_max_records;
    int64_t window_max_bytes;
    int64_t memory_max_bytes; /* the process's one budget for records held (mem_budget.h) */
    int64_t max_request_bytes;
    char *http_health_listen;        /* "host:port" of the probe-only listener; empty: none */
    int http_max_connections;        /* total, API listener */
    int http_max_conns_per_client;   /* per client address, API listener; 0: no bound */
    int http_header_timeout_ms;      /* a request's headers must arrive within this */
    int http_body_timeout_ms;        /* and its body within this after the headers */
    int http_max_long_polls;         /* concurrent waiting fetches; more get 429 */
    int http_max_streams;            /* concurrent record streams (GET .../stream); more get 429 */
    int http_stream_queue_messages;  /* record batches a stream may have queued, unwritten */
    int64_t http_stream_queue_bytes; /* ... and their key+value bytes */
    int http_stream_stall_ms;        /* written bytes not taken this long cut the stream off */
    int http_stream_heartbeat_ms;    /* an idle stream writes a heartbeat this often */
    bool http_access_log;            /* a log line per request (5xx ones always) */
    int http_max_produce_records;    /* records in one POST /v1/topics/{topic}/records */
    int produce_timeout_ms;          /* a produce's deadline when the request gives none */
    int metrics_max_series;          /* samples in one GET /metrics; the rest are dropped */
    char *dev_topic;
    int dev_partitions;
    int dev_rate;
    int lease_deadline_ms;
    int lease_max_deadline_ms;
    int nack_max_delay_ms;
    int idle_close_ms;
    int revoke_grace_ms;
    int meta_max_bytes;
    int sub_max_records;
    int64_t sub_max_bytes;
    char *tls_cert_file, *tls_key_file, *tls_client_ca_file; /* empty: plaintext */
    char *push_allowed_urls; /* comma-separated url prefixes a push set by API call may use */
    /* OpenTelemetry (proxy/otel.h): each empty (or 0) takes the OTEL_* environment's */
    char *otel_endpoint, *otel_protocol, *otel_headers, *otel_service_name, *otel_sampler,
        *otel_sampler_arg;
    int otel_queue_size, otel_batch_size, otel_delay_ms;
    char *auth_tokens_file; /* empty: no auth */
    int64_t grpc_max_message_bytes;
    int grpc_max_streams_per_client;
    int grpc_stream_queue_messages;  /* record messages a stream may have queued or in flight */
    int64_t grpc_stream_queue_bytes; /* ... and their key+value bytes */
    int grpc_stream_stall_ms;        /* a send in flight this long cuts the stream off */
    int grpc_threads;
    int64_t sub_max_credit_records, sub_max_credit_bytes;
    int groups_max;             /* most groups running at once, static ones included */
    bool topics_allow_internal; /* clients may consume and produce "__*" topics */
    /* The schema registry client (codec/registry.h); no URL: none. */
    char **schema_registry_urls; /* tried in turn */
    size_t schema_registry_url_cnt;
    char *schema_registry_basic_auth;        /* "user:password"; empty: none */
    char *schema_registry_bearer_token_file; /* re-read when it changes; empty: none */
    char *schema_registry_ca_file, *schema_registry_cert_file, *schema_registry_key_file;
    int schema_registry_timeout_ms;     /* one request to one URL */
    int schema_registry_cache_max;      /* schemas (and remembered failures) kept */
    bool schema_registry_auto_register; /* produce may register a schema it is given */
    ks_group_conf_t group_defaults;
    ks_group_conf_t *static_groups;
    size_t static_group_cnt;
    ks_kv_t *kafka; /* pass-through librdkafka properties, in the order set */
    size_t kafka_cnt;
} ks_config_t;

/* The longest name of any kind, group, topic or subscriber: Kafka's bound on topics. */
#define KS_NAME_MAX 249

/* Most ack ids one ack, nack or deadline request may carry (either edge). */
#define KS_MAX_ACK_IDS 100000

/* The default http.max_request_bytes, 32 MiB: a body of KS_MAX_ACK_IDS of the longest
 * ack ids (321 characters, with a KS_NAME_MAX topic) fits, quotes, ", " and all. */
#define KS_DEFAULT_REQUEST_BYTES (INT64_C(32) << 20)

typedef enum {
    KS_CONFIG_RUN = 0,
    KS_CONFIG_HELP,
    KS_CONFIG_VERSION,
    KS_CONFIG_PRINT,
} ks_config_action_t;

/* Fills cfg with the defaults. Never fails. */
void ks_config_defaults(ks_config_t *cfg);

/* Frees what cfg owns. cfg may then be filled again. */
void ks_config_free(ks_config_t *cfg);

/* Sets one key from text, as a flag or an environment variable gives it. `key` is a
 * dotted name ("commit.interval_ms", "kafka.bootstrap.servers"). Returns 0, or -1 with a
 * message in err that names the key and what was expected; cfg is then unchanged. */
int ks_config_set(ks_config_t *cfg, const char *key, const char *value, char *err, size_t errsize);

/* Applies a JSON config file (nested objects or dotted keys). Returns 0 or -1 with err. */
int ks_config_load_file(ks_config_t *cfg, const char *path, char *err, size_t errsize);

/* Applies a JSON text, as ks_config_load_file does. `origin` names it in messages. */
int ks_config_load_json(ks_config_t *cfg, const char *text, const char *origin, char *err,
                        size_t errsize);

/* Applies every KSIDECAR_* variable of envp: KSIDECAR_COMMIT_INTERVAL_MS for
 * commit.interval_ms, KSIDECAR_KAFKA_BOOTSTRAP_SERVERS for kafka.bootstrap.servers.
 * An unknown KSIDECAR_ variable is an error. Returns 0 or -1 with err. */
int ks_config_apply_env(ks_config_t *cfg, char **envp, char *err, size_t errsize);

/* Full start-up resolution: defaults, then the --config file, then the environment,
 * then flags. Flags win. Returns 0 with *action set, or -1 with err. */
int ks_config_from_args(ks_config_t *cfg, int argc, char **argv, char **envp,
                        ks_config_action_t *action, char *err, size_t errsize);

/* Checks values that depend on each other. Returns 0 or -1 with err. */
int ks_config_validate(const ks_config_t *cfg, char *err, size_t errsize);

/* Returns the settings for group: its static entry, else the defaults. Borrowed. */
const ks_group_conf_t *ks_config_group(const ks_config_t *cfg, const char *group);

/* A group's settings for a push set by an API call: the group.* defaults, topics, and the
 * push object's fields (as a static group's "push", but no ca_file). Returns NULL with err
 * naming the field. Free with ks_config_push_group_free. */
ks_group_conf_t *ks_config_push_group(const ks_config_t *cfg, const char *name,
                                      const char *const *topics, size_t topic_cnt,
                                      struct json_t *push, char *err, size_t errsize);
void ks_config_push_group_free(ks_group_conf_t *g);

/* Returns the value of a pass-through librdkafka property, or NULL. Borrowed. */
const char *ks_config_kafka_get(const ks_config_t *cfg, const char *name);

/* Returns the effective config as JSON text, secrets masked. Caller frees. */
char *ks_config_dump(const ks_config_t *cfg);

/* Writes the usage text, with every key, to f. */
void ks_config_usage(void *file);

/* True if name is a valid Kafka group id or topic name: 1-249 of [A-Za-z0-9._-],
 * not "." or "..". */
bool ks_valid_kafka_name(const char *name);

#endif
