/* config_keys.c: the config key table, the defaults, and what reads the table whole: the dump
 * and the usage text. */
#include "config_int.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "key_sched.h"
#include "util.h"

#define OFF(f) offsetof(ks_config_t, f)

/* Every key ksidecar knows, besides kafka.*. The env name is KSIDECAR_ + the key
 * upper-cased with '.' as '_'. */
const key_t_ config_keys[] = {
    {"config", T_STR, OFF(config_file), 0, 0, "JSON config file to read first"},
    {"dev", T_BOOL, OFF(dev), 0, 0, "start an in-process mock Kafka cluster with a demo topic"},
    {"http.listen", T_STR, OFF(http_listen), 0, 0, "HTTP listen address host:port (empty: off)"},
    {"grpc.listen", T_STR, OFF(grpc_listen), 0, 0,
     "gRPC listen address host:port (empty: no gRPC listener)"},
    {"log.level", T_LEVEL, OFF(log_level), 0, 0, "error, warn, info or debug"},
    {"log.format", T_LOGFMT, OFF(log_json), 0, 0, "text or json"},
    {"groups.allowed", T_LIST, OFF(group_patterns), 0, 0,
     "glob patterns a group name must match (comma-separated as a flag)"},
    {"commit.interval_ms", T_INT, OFF(commit_interval_ms), 10, 600000,
     "how often acked offsets are committed"},
    {"health.stall_ms", T_INT, OFF(health_stall_ms), 100, 86400000,
     "a partition with lag whose commit point has not moved this long is stalled"},
    {"shutdown.grace_ms", T_INT, OFF(shutdown_grace_ms), 0, 600000,
     "longest a clean shutdown may take"},
    {"fetch.max_records", T_INT, OFF(fetch_max_records), 1, 1000000,
     "largest max a fetch may ask for"},
    {"fetch.default_wait_ms", T_INT, OFF(fetch_default_wait_ms), 0, 3600000,
     "long-poll wait when a fetch gives no wait_ms"},
    {"fetch.max_wait_ms", T_INT, OFF(fetch_max_wait_ms), 0, 3600000,
     "longest long-poll wait a fetch may ask for"},
    {"window.max_records", T_INT, OFF(window_max_records), 1, 10000000,
     "per-partition bound on uncommitted records; the partition pauses there"},
    {"window.max_bytes", T_I64, OFF(window_max_bytes), 1024, INT64_C(1) << 40,
     "per-partition bound on uncommitted bytes"},
    {"memory.max_bytes", T_I64, OFF(memory_max_bytes), INT64_C(16) << 20, INT64_C(1) << 40,
     "the process's budget for records held (windows and librdkafka's queues), all groups"},
    {"http.max_request_bytes", T_I64, OFF(max_request_bytes), 1024, INT64_C(1) << 30,
     "largest request body accepted (the default holds 100,000 ack ids)"},
    {"http.health_listen", T_STR, OFF(http_health_listen), 0, 0,
     "listen address host:port of a second listener for /healthz, /readyz and /metrics only, "
     "with no caller check (empty: none)"},
    {"http.max_connections", T_INT, OFF(http_max_connections), 1, 1000000,
     "most open connections to http.listen"},
    {"http.max_connections_per_client", T_INT, OFF(http_max_conns_per_client), 0, 1000000,
     "most open connections to http.listen from one client address (0: no bound)"},
    {"http.header_timeout_ms", T_INT, OFF(http_header_timeout_ms), 100, 3600000,
     "a request's headers must all arrive within this, however slowly they drip"},
    {"http.body_timeout_ms", T_INT, OFF(http_body_timeout_ms), 100, 3600000,
     "a request's body must all arrive within this after its headers"},
    {"http.max_long_polls", T_INT, OFF(http_max_long_polls), 1, 1000000,
     "most concurrent waiting fetches; more are answered 429 with Retry-After"},
    {"http.max_produce_records", T_INT, OFF(http_max_produce_records), 1, 100000,
     "most records in one POST /v1/topics/{topic}/records; more are answered 400"},
    {"metrics.max_series", T_INT, OFF(metrics_max_series), 100, 10000000,
     "most samples in one GET /metrics; the rest are left out and counted in "
     "ksidecar_metrics_series_dropped_total"},
    {"http.max_streams", T_INT, OFF(http_max_streams), 1, 1000000,
     "most concurrent record streams (GET /v1/groups/{group}/stream); more are answered 429 "
     "with Retry-After"},
    {"http.stream_queue_messages", T_INT, OFF(http_stream_queue_messages), 1, 1000,
     "record batches one HTTP stream may have queued and not yet written before ksidecar stops "
     "delivering to it"},
    {"http.stream_queue_bytes", T_I64, OFF(http_stream_queue_bytes), 1024, INT64_C(1) << 32,
     "key+value bytes one HTTP stream may have queued and not yet written before ksidecar stops "
     "delivering to it"},
    {"http.stream_stall_ms", T_INT, OFF(http_stream_stall_ms), 1000, 3600000,
     "an HTTP stream whose client takes no bytes for this long is cut off; its records go back "
     "without counting an attempt"},
    {"http.stream_heartbeat_ms", T_INT, OFF(http_stream_heartbeat_ms), 100, 600000,
     "an HTTP stream with nothing to write sends a heartbeat (an empty line, or an SSE comment) "
     "this often, so proxies keep the connection"},
    {"http.access_log", T_BOOL, OFF(http_access_log), 0, 0,
     "log a line per HTTP request (method, path, status, bytes, duration, request id); off by "
     "default, as acks come at thousands a second; requests answered 5xx are always logged"},
    {"lease.deadline_ms", T_INT, OFF(lease_deadline_ms), 1, 86400000,
     "lease deadline of a delivered record when a fetch gives none"},
    {"lease.max_deadline_ms", T_INT, OFF(lease_max_deadline_ms), 1, 86400000,
     "longest lease deadline a fetch or extension may ask for"},
    {"nack.max_delay_ms", T_INT, OFF(nack_max_delay_ms), 0, 86400000,
     "longest redelivery delay a nack may ask for"},
    {"group.ordering", T_ORDER, OFF(group_defaults.ordering), 0, 0,
     "key (default), partition or none: which records are processed in offset order"},
    {"ordering.max_in_flight_per_key", T_INT, OFF(group_defaults.max_in_flight_per_key), 1, 100000,
     "records of one key (or, with group.ordering partition, of one partition) a subscriber "
     "that asked for ordered batches may hold at once; others get one at a time"},
    {"group.dead_letter_topic", T_STR, OFF(group_defaults.dead_letter_topic), 0, 0,
     "topic for records that reach group.max_attempts (empty: retry forever)"},
    {"group.max_attempts", T_INT, OFF(group_defaults.max_attempts), 1, 1000000,
     "deliveries before a record is dead-lettered (needs a dead-letter topic)"},
    {"group.redrive.max", T_INT, OFF(group_defaults.redrive_max), 1, 1000000,
     "times a redrive moves one record back from the dead-letter topic; a record redriven this "
     "often stays there"},
    {"group.push.concurrency", T_INT, OFF(group_defaults.push_concurrency), 1, 10000,
     "push delivery: requests in flight to a group's push url at once"},
    {"group.push.timeout_ms", T_INT, OFF(group_defaults.push_timeout_ms), 100, 3600000,
     "push delivery: a request not answered within this is a failure, and its records are "
     "nacked"},
    {"group.push.batch", T_INT, OFF(group_defaults.push_batch), 1, 10000,
     "push delivery: records in one request (1: the record's value is the body; more: a JSON "
     "array of records)"},
    {"push.allowed_urls", T_STR, OFF(push_allowed_urls), 0, 0,
     "push delivery set by API call (PUT /v1/groups/{group}/push): comma-separated URL "
     "prefixes its url must start with, each http(s)://host[:port]/..., e.g. "
     "http://127.0.0.1:9000/ (empty: no push by API call)"},
    {"group.retry.initial_ms", T_INT, OFF(group_defaults.retry.initial_ms), 0, 86400000,
     "redelivery delay after a record's first failed delivery (a nack without a delay, or an "
     "expired lease), growing by group.retry.multiplier up to group.retry.max_ms; 0: none, "
     "redelivered at once"},
    {"group.retry.max_ms", T_INT, OFF(group_defaults.retry.max_ms), 1, 86400000,
     "longest redelivery delay group.retry.initial_ms grows to"},
    {"group.retry.multiplier", T_DOUBLE, OFF(group_defaults.retry.multiplier), 1, 100,
     "factor the redelivery delay grows by with each further attempt"},
    {"group.retry.jitter", T_DOUBLE, OFF(group_defaults.retry.jitter), 0, 1,
     "fraction of a redelivery delay taken off at random (0.2: 80% to 100% of it)"},
    {"group.retry.backoff_ms", T_MSLIST, OFF(group_defaults.retry), 0, 0,
     "redelivery delays by attempt, as a list (\"100,1000,5000\"; the last repeats); set, it "
     "replaces initial_ms, multiplier and max_ms"},
    {"group.idle_close_ms", T_INT, OFF(idle_close_ms), 0, 86400000,
     "a dynamic group with no activity this long commits and leaves (0: never)"},
    {"group.revoke_grace_ms", T_INT, OFF(revoke_grace_ms), 0, 600000,
     "how long a revoked partition's leases may still be acked"},
    {"groups.static", T_STATIC, OFF(static_groups), 0, 0,
     "groups started at boot: [{\"name\",\"topics\",\"ordering\",\"dead_letter_topic\","
     "\"max_attempts\",\"redrive_max\",\"max_in_flight_per_key\",\"push\",\"retry\"}] (JSON "
     "text as a flag); push "
     "is {\"url\",\"concurrency\",\"timeout_ms\",\"batch\",\"bearer_token\",\"ca_file\","
     "\"insecure\",\"cloudevents\"}, see docs/push.md; retry is {\"initial_ms\",\"max_ms\","
     "\"multiplier\",\"jitter\",\"backoff_ms\"}"},
    {"commit.metadata_max_bytes", T_INT, OFF(meta_max_bytes), 16, 1048576,
     "size bound of the commit metadata (the broker's offset.metadata.max.bytes)"},
    {"subscriber.max_records", T_INT, OFF(sub_max_records), 1, 10000000,
     "credits: most unacked records one subscriber may hold"},
    {"subscriber.max_bytes", T_I64, OFF(sub_max_bytes), 1, INT64_C(1) << 40,
     "credits: most unacked bytes one subscriber may hold"},
    {"tls.cert_file", T_STR, OFF(tls_cert_file), 0, 0,
     "PEM certificate: turns on TLS for gRPC and HTTP (with tls.key_file)"},
    {"tls.key_file", T_STR, OFF(tls_key_file), 0, 0, "PEM private key of tls.cert_file"},
    {"tls.client_ca_file", T_STR, OFF(tls_client_ca_file), 0, 0,
     "PEM CA: clients must present a certificate it signed (mTLS)"},
    {"auth.tokens_file", T_STR, OFF(auth_tokens_file), 0, 0,
     "tokens and certificate subjects with group, consume and produce scopes (JSON; "
     "empty: no auth)"},
    {"grpc.max_message_bytes", T_I64, OFF(grpc_max_message_bytes), 1024, INT64_C(1) << 30,
     "largest gRPC message received or sent"},
    {"grpc.max_streams_per_client", T_INT, OFF(grpc_max_streams_per_client), 1, 100000,
     "most concurrent Subscribe streams per authenticated identity, else per address"},
    {"grpc.threads", T_INT, OFF(grpc_threads), 1, 64, "completion-queue threads"},
    {"grpc.stream_queue_messages", T_INT, OFF(grpc_stream_queue_messages), 1, 1000,
     "record messages one Subscribe stream may have queued or in flight before ksidecar stops "
     "delivering to it"},
    {"grpc.stream_queue_bytes", T_I64, OFF(grpc_stream_queue_bytes), 1024, INT64_C(1) << 32,
     "key+value bytes one Subscribe stream may have queued or in flight before ksidecar stops "
     "delivering to it"},
    {"grpc.stream_stall_ms", T_INT, OFF(grpc_stream_stall_ms), 1000, 3600000,
     "a Subscribe stream whose client takes no message for this long is cut off; its records "
     "go back without counting an attempt"},
    {"subscriber.max_credit_records", T_I64, OFF(sub_max_credit_records), 1, INT64_C(1) << 40,
     "largest record credits a subscriber may ask for"},
    {"subscriber.max_credit_bytes", T_I64, OFF(sub_max_credit_bytes), 1, INT64_C(1) << 50,
     "largest byte credits a subscriber may ask for"},
    {"groups.max", T_INT, OFF(groups_max), 1, 100000,
     "most groups running at once, static ones included (each costs threads and fds)"},
    {"topics.allow_internal", T_BOOL, OFF(topics_allow_internal), 0, 0,
     "clients may consume and produce Kafka's internal topics (names starting \"__\")"},
    {"dev.topic", T_STR, OFF(dev_topic), 0, 0, "dev mode: the demo topic"},
    {"dev.partitions", T_INT, OFF(dev_partitions), 1, 64, "dev mode: the demo topic's partitions"},
    {"dev.rate", T_INT, OFF(dev_rate), 0, 100000, "dev mode: sample records produced per second"},
};
#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))
const size_t config_nkeys = NKEYS;

void free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

void ks_config_defaults(ks_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->http_listen = ks_xstrdup("127.0.0.1:8080");
    cfg->grpc_listen = ks_xstrdup("127.0.0.1:50051");
    cfg->log_level = KS_LOG_INFO;
    cfg->group_patterns = calloc(1, sizeof(char *));
    if (!cfg->group_patterns)
        abort();
    cfg->group_patterns[0] = ks_xstrdup("*");
    cfg->group_pattern_cnt = 1;
    cfg->commit_interval_ms = 500;
    cfg->health_stall_ms = 60000;
    cfg->shutdown_grace_ms = 10000;
    cfg->fetch_max_records = 10000;
    cfg->fetch_default_wait_ms = 5000;
    cfg->fetch_max_wait_ms = 60000;
    cfg->window_max_records = 20000;
    cfg->window_max_bytes = INT64_C(64) << 20;
    cfg->memory_max_bytes = INT64_C(256) << 20;
    cfg->max_request_bytes = KS_DEFAULT_REQUEST_BYTES;
    cfg->http_health_listen = ks_xstrdup("");
    cfg->http_max_connections = 4096;
    cfg->http_max_conns_per_client = 1024;
    cfg->http_header_timeout_ms = 10000;
    cfg->http_body_timeout_ms = 30000;
    cfg->http_max_long_polls = 1000;
    cfg->http_max_streams = 1000;
    cfg->http_max_produce_records = 1000;
    cfg->metrics_max_series = 100000;
    cfg->http_stream_queue_messages = 4;
    cfg->http_stream_queue_bytes = INT64_C(16) << 20;
    cfg->http_stream_stall_ms = 30000;
    cfg->http_stream_heartbeat_ms = 5000;
    cfg->lease_deadline_ms = 30000;
    cfg->lease_max_deadline_ms = 600000;
    cfg->nack_max_delay_ms = 3600000;
    cfg->idle_close_ms = 60000;
    cfg->revoke_grace_ms = 5000;
    cfg->meta_max_bytes = 4096;
    cfg->sub_max_records = 1000;
    cfg->sub_max_bytes = INT64_C(10) << 20;
    cfg->tls_cert_file = ks_xstrdup("");
    cfg->tls_key_file = ks_xstrdup("");
    cfg->tls_client_ca_file = ks_xstrdup("");
    cfg->push_allowed_urls = ks_xstrdup("");
    cfg->auth_tokens_file = ks_xstrdup("");
    cfg->grpc_max_message_bytes = INT64_C(4) << 20;
    cfg->grpc_max_streams_per_client = 100;
    cfg->grpc_threads = 2;
    cfg->grpc_stream_queue_messages = 4;
    cfg->grpc_stream_queue_bytes = INT64_C(16) << 20;
    cfg->grpc_stream_stall_ms = 30000;
    cfg->sub_max_credit_records = 100000;
    cfg->sub_max_credit_bytes = INT64_C(1) << 30;
    cfg->groups_max = 64;
    cfg->group_defaults.ordering = KS_ORDER_KEY;
    cfg->group_defaults.dead_letter_topic = ks_xstrdup("");
    cfg->group_defaults.max_attempts = 5;
    cfg->group_defaults.redrive_max = 3;
    cfg->group_defaults.max_in_flight_per_key = 500;
    cfg->group_defaults.push_url = ks_xstrdup("");
    cfg->group_defaults.push_concurrency = 16;
    cfg->group_defaults.push_timeout_ms = 30000;
    cfg->group_defaults.push_batch = 1;
    cfg->group_defaults.push_bearer_token = ks_xstrdup("");
    cfg->group_defaults.push_ca_file = ks_xstrdup("");
    cfg->group_defaults.retry = (ks_retry_t){.max_ms = 60000, .multiplier = 2.0};
    cfg->dev_topic = ks_xstrdup("demo");
    cfg->dev_partitions = 3;
    cfg->dev_rate = 3;
}

void group_conf_free(ks_group_conf_t *g)
{
    free(g->name);
    free_list(g->topics, g->topic_cnt);
    free(g->dead_letter_topic);
    free(g->push_url);
    free(g->push_bearer_token);
    free(g->push_ca_file);
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
    free(cfg->tls_cert_file);
    free(cfg->tls_key_file);
    free(cfg->tls_client_ca_file);
    free(cfg->push_allowed_urls);
    free(cfg->auth_tokens_file);
    static_groups_free(cfg);
    free(cfg->config_file);
    free(cfg->http_listen);
    free(cfg->http_health_listen);
    free(cfg->grpc_listen);
    free_list(cfg->group_patterns, cfg->group_pattern_cnt);
    free(cfg->dev_topic);
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
        if (strcmp(config_keys[i].name, name) == 0)
            return &config_keys[i];
    return NULL;
}

/* Env name for a key: KSIDECAR_ + upper-case, '.' → '_'. */
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

static bool is_secret(const char *prop)
{
    static const char *words[] = {"password",    "secret",  "token",  "sasl.oauthbearer.config",
                                  "ssl.key.pem", "ssl_key", "private"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(prop, words[i]))
            return true;
    return false;
}

/* s as a JSON string. Text that is not UTF-8 (a flag or variable may hold any bytes) would
 * make json_string fail and the key vanish from the dump; it is shown instead with every
 * byte above 0x7f written as \xHH. Never NULL. */
static json_t *dump_str(const char *s)
{
    json_t *v = json_string(s);
    if (v)
        return v;
    size_t n = strlen(s);
    char *esc = malloc(4 * n + 1), *p = esc;
    if (!esc)
        abort();
    for (const unsigned char *q = (const unsigned char *)s; *q; q++)
        p += *q < 0x80 ? sprintf(p, "%c", *q) : sprintf(p, "\\x%02x", *q);
    v = json_string(esc);
    free(esc);
    return v;
}

char *ks_config_dump(const ks_config_t *cfg)
{
    json_t *root = json_object();
    for (size_t i = 0; i < NKEYS; i++) {
        const key_t_ *k = &config_keys[i];
        const void *field = (const char *)cfg + k->off;
        json_t *v = NULL;
        switch (k->type) {
        case T_STR: {
            const char *s = *(char *const *)field;
            v = s ? dump_str(s) : json_null();
            break;
        }
        case T_INT:
            v = json_integer(*(const int *)field);
            break;
        case T_I64:
            v = json_integer(*(const int64_t *)field);
            break;
        case T_DOUBLE:
            v = json_real(*(const double *)field);
            break;
        case T_MSLIST: {
            char s[KS_RETRY_LIST_MAX * 12];
            retry_list_str(field, s, sizeof(s));
            v = json_string(s);
            break;
        }
        case T_BOOL:
            v = json_boolean(*(const bool *)field);
            break;
        case T_LEVEL:
            v = json_string(ks_log_level_str(*(const ks_log_level_t *)field));
            break;
        case T_LOGFMT:
            v = json_string(*(const bool *)field ? "json" : "text");
            break;
        case T_LIST:
            v = json_array();
            for (size_t j = 0; j < cfg->group_pattern_cnt; j++)
                json_array_append_new(v, dump_str(cfg->group_patterns[j]));
            break;
        case T_ORDER:
            v = json_string(ks_ordering_str((ks_ordering_t) * (const int *)field));
            break;
        case T_STATIC:
            v = json_array();
            for (size_t j = 0; j < cfg->static_group_cnt; j++) {
                const ks_group_conf_t *g = &cfg->static_groups[j];
                json_t *ts = json_array();
                for (size_t t = 0; t < g->topic_cnt; t++)
                    json_array_append_new(ts, json_string(g->topics[t]));
                char list[KS_RETRY_LIST_MAX * 12];
                retry_list_str(&g->retry, list, sizeof(list));
                json_t *retry =
                    json_pack("{s:i,s:i,s:f,s:f,s:s}", "initial_ms", g->retry.initial_ms, "max_ms",
                              g->retry.max_ms, "multiplier", g->retry.multiplier, "jitter",
                              g->retry.jitter, "backoff_ms", list);
                json_array_append_new(v, json_pack("{s:s,s:o,s:s,s:s,s:i,s:i,s:i,s:o}", "name",
                                                   g->name, "topics", ts, "ordering",
                                                   ks_ordering_str((ks_ordering_t)g->ordering),
                                                   "dead_letter_topic", g->dead_letter_topic,
                                                   "max_attempts", g->max_attempts, "redrive_max",
                                                   g->redrive_max, "max_in_flight_per_key",
                                                   g->max_in_flight_per_key, "retry", retry));
                if (*g->push_url)
                    json_object_set_new(
                        json_array_get(v, j), "push",
                        json_pack("{s:o,s:i,s:i,s:i,s:s,s:o,s:b,s:b}", "url", dump_str(g->push_url),
                                  "concurrency", g->push_concurrency, "timeout_ms",
                                  g->push_timeout_ms, "batch", g->push_batch, "bearer_token",
                                  *g->push_bearer_token ? "********" : "", "ca_file",
                                  dump_str(g->push_ca_file), "insecure", g->push_insecure,
                                  "cloudevents", g->push_cloudevents));
            }
            break;
        }
        json_object_set_new(root, k->name, v);
    }
    for (size_t i = 0; i < cfg->kafka_cnt; i++) {
        json_t *name = dump_str(cfg->kafka[i].key);
        char *key = malloc(strlen(json_string_value(name)) + sizeof("kafka."));
        if (!key)
            abort();
        sprintf(key, "kafka.%s", json_string_value(name));
        json_decref(name);
        json_object_set_new(
            root, key, dump_str(is_secret(cfg->kafka[i].key) ? "********" : cfg->kafka[i].value));
        free(key);
    }
    char *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return out;
}

void ks_config_usage(void *file)
{
    FILE *f = file;
    fprintf(f, "usage: ksidecar [--config FILE] [--dev] [--KEY=VALUE ...]\n"
               "       ksidecar --help | --version | --print-config\n\n"
               "ksidecar serves a Kafka consumer group to clients over HTTP/JSON and\n"
               "commits their acks as contiguous offsets.\n\n"
               "Every key can be set in the JSON config file, as --KEY=VALUE, or as the\n"
               "environment variable KSIDECAR_<KEY> (upper case, '.' as '_'). Flags win over\n"
               "the environment, which wins over the file.\n\nKeys:\n");
    for (size_t i = 0; i < NKEYS; i++) {
        char en[128];
        env_name(config_keys[i].name, en, sizeof(en));
        fprintf(f, "  --%-24s %s\n  %-26s (env %s)\n", config_keys[i].name, config_keys[i].help, "",
                en);
    }
    fprintf(f, "  --kafka.<property>         any librdkafka property, passed through\n"
               "                             (env KSIDECAR_KAFKA_<PROPERTY>, '.' as '_')\n");
}

int set_double(void *field, const key_t_ *k, double v, char *err, size_t errsize)
{
    if (!(v >= (double)k->min && v <= (double)k->max)) {
        snprintf(err, errsize, "config key '%s': expected a number from %lld to %lld, got %g",
                 k->name, (long long)k->min, (long long)k->max, v);
        return -1;
    }
    *(double *)field = v;
    return 0;
}

int set_mslist(ks_retry_t *r, const char *name, const char *value, char *err, size_t errsize)
{
    char why[200];
    if (ks_retry_parse_list(r, value, why, sizeof(why)) == 0)
        return 0;
    snprintf(err, errsize, "config key '%s': %s", name, why);
    return -1;
}

/* A list of ms from the JSON file: [100, 1000] (or its text form "100,1000"). */
int json_mslist(ks_retry_t *r, const char *name, json_t *v, char *err, size_t errsize)
{
    if (json_is_string(v))
        return set_mslist(r, name, json_string_value(v), err, errsize);
    char text[KS_RETRY_LIST_MAX * 24 + 32] = "";
    size_t at = 0, i;
    json_t *it;
    if (!json_is_array(v) || json_array_size(v) > KS_RETRY_LIST_MAX + 1)
        goto bad;
    json_array_foreach(v, i, it)
    {
        if (!json_is_integer(it))
            goto bad;
        at += (size_t)snprintf(text + at, sizeof(text) - at, "%s%lld", i ? "," : "",
                               (long long)json_integer_value(it));
    }
    return set_mslist(r, name, text, err, errsize);
bad:
    snprintf(err, errsize, "config key '%s': expected an array of integers (ms), as [100, 1000]",
             name);
    return -1;
}

/* A static group's "retry" object: its fields are group.retry.*'s, with their ranges; those it
 * leaves out keep the defaults'. */
int static_retry(ks_group_conf_t *g, json_t *o, char *err, size_t errsize)
{
    const char *f;
    json_t *v;
    if (!json_is_object(o)) {
        snprintf(err, errsize, "retry must be an object");
        return -1;
    }
    json_object_foreach(o, f, v)
    {
        char name[64];
        snprintf(name, sizeof(name), "group.retry.%s", f);
        const key_t_ *k = strlen(f) < 24 ? find_key(name) : NULL;
        if (!k) {
            snprintf(err, errsize,
                     "unknown field retry.%.40s (initial_ms, max_ms, multiplier, "
                     "jitter, backoff_ms)",
                     f);
            return -1;
        }
        void *field = (char *)&g->retry + (k->off - offsetof(ks_config_t, group_defaults.retry));
        if (k->type == T_INT && (!json_is_integer(v) || json_integer_value(v) < k->min ||
                                 json_integer_value(v) > k->max)) {
            snprintf(err, errsize, "retry.%s must be an integer from %lld to %lld", f,
                     (long long)k->min, (long long)k->max);
            return -1;
        } else if (k->type == T_INT) {
            *(int *)field = (int)json_integer_value(v);
        } else if (k->type == T_DOUBLE &&
                   (!json_is_number(v) ||
                    set_double(field, k, json_number_value(v), err, errsize))) {
            snprintf(err, errsize, "retry.%s must be a number from %lld to %lld", f,
                     (long long)k->min, (long long)k->max);
            return -1;
        } else if (k->type == T_MSLIST && json_mslist(field, name, v, err, errsize)) {
            return -1;
        }
    }
    return 0;
}
