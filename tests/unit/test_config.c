/* test_config.c: tests config defaults, JSON/env/flag parsing and layering, validation, dump
 * masking and ks_valid_kafka_name (proxy/config.c, proxy/config_load.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "key_sched.h"

/* ---- helpers ---------------------------------------------------------------------------- */

#include "assert_contains.h"

#define assert_not_contains(hay, needle)                                                           \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (h_ && strstr(h_, n_))                                                                  \
            fail_msg("expected \"%s\" not to contain \"%s\"", h_, n_);                             \
    } while (0)

/* A mutable, NULL-terminated copy of a string vector (argv/envp want char **). */
static char **dupv(const char *const *v, int *countp)
{
    int n = 0;
    while (v[n])
        n++;
    char **out = calloc((size_t)n + 1, sizeof(char *));
    assert_non_null(out);
    for (int i = 0; i < n; i++) {
        out[i] = strdup(v[i]);
        assert_non_null(out[i]);
    }
    if (countp)
        *countp = n;
    return out;
}

static void freev(char **v)
{
    for (int i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* Writes text to a fresh temp file; path receives its name. */
static void write_temp(char *path, size_t pathsize, const char *text)
{
    snprintf(path, pathsize, "/tmp/ks_test_config_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
}

/* Runs ks_config_from_args with the given argv tail and envp (both NULL-terminated). */
static int run_args(ks_config_t *cfg, const char *const *args, const char *const *env,
                    ks_config_action_t *action, char *err, size_t errsize)
{
    int argc;
    char **argv = dupv(args, &argc);
    char **envp = dupv(env, NULL);
    err[0] = '\0';
    int rc = ks_config_from_args(cfg, argc, argv, envp, action, err, errsize);
    freev(argv);
    freev(envp);
    return rc;
}

static int load(ks_config_t *cfg, const char *json, char *err, size_t errsize)
{
    err[0] = '\0';
    return ks_config_load_json(cfg, json, "test.json", err, errsize);
}

static int group_setup(void **state)
{
    /* ks_config_from_args must take the environment from its envp argument only. */
    unsetenv("KSIDECAR_CONFIG");
    return 0;
}

/* ---- defaults ---------------------------------------------------------------------------- */

static void test_defaults(void **state)
{
    ks_config_t cfg;
    ks_config_defaults(&cfg);
    assert_int_equal(cfg.commit_interval_ms, 500);
    assert_int_equal(cfg.health_stall_ms, 60000);
    assert_string_equal(cfg.http_listen, "127.0.0.1:8080");
    assert_string_equal(cfg.grpc_listen, "127.0.0.1:50051");
    assert_int_equal(cfg.log_level, KS_LOG_INFO);
    assert_false(cfg.log_json);
    assert_false(cfg.dev);
    assert_null(cfg.config_file);
    assert_int_equal(cfg.group_pattern_cnt, 1);
    assert_string_equal(cfg.group_patterns[0], "*");
    assert_int_equal(cfg.shutdown_grace_ms, 10000);
    assert_int_equal(cfg.fetch_max_records, 10000);
    assert_int_equal(cfg.fetch_default_wait_ms, 5000);
    assert_int_equal(cfg.fetch_max_wait_ms, 60000);
    assert_int_equal(cfg.window_max_records, 20000);
    assert_int_equal(cfg.window_max_bytes, INT64_C(64) << 20);
    assert_int_equal(cfg.max_request_bytes, INT64_C(32) << 20);
    assert_int_equal(cfg.groups_max, 64);
    assert_false(cfg.topics_allow_internal);
    assert_false(cfg.http_access_log);
    assert_string_equal(cfg.dev_topic, "demo");
    assert_int_equal(cfg.dev_partitions, 3);
    assert_int_equal(cfg.dev_rate, 3);
    assert_int_equal(cfg.kafka_cnt, 0);
    assert_null(ks_config_kafka_get(&cfg, "bootstrap.servers"));
    assert_int_equal(cfg.lease_deadline_ms, 30000);
    assert_int_equal(cfg.lease_max_deadline_ms, 600000);
    assert_true(cfg.lease_deadline_ms <= cfg.lease_max_deadline_ms);
    assert_true(cfg.fetch_default_wait_ms <= cfg.fetch_max_wait_ms);
    assert_int_equal(cfg.group_defaults.ordering, KS_ORDER_KEY);
    assert_non_null(cfg.group_defaults.dead_letter_topic);
    assert_string_equal(cfg.group_defaults.dead_letter_topic, "");
    assert_int_equal(cfg.group_defaults.max_attempts, 5);
    assert_int_equal(cfg.group_defaults.redrive_max, 3);
    assert_int_equal(cfg.static_group_cnt, 0);
    /* any group gets the defaults */
    assert_ptr_equal(ks_config_group(&cfg, "anything"), &cfg.group_defaults);

    /* Defaults alone are not runnable: Kafka must be named, or --dev given. */
    char err[512] = "";
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), -1);
    assert_contains(err, "kafka.bootstrap.servers");
    cfg.dev = true;
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), 0);
    ks_config_free(&cfg);

    /* free leaves a state that may be filled again (and freed again). */
    assert_null(cfg.http_listen);
    ks_config_free(&cfg);
    ks_config_defaults(&cfg);
    assert_int_equal(cfg.commit_interval_ms, 500);
    ks_config_free(&cfg);
}

/* ---- JSON -------------------------------------------------------------------------------- */

static void test_json_nested(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    int rc = load(&cfg,
                  "{\"commit\":{\"interval_ms\":250},"
                  " \"http\":{\"listen\":\"0.0.0.0:9000\",\"max_request_bytes\":2048},"
                  " \"log\":{\"level\":\"debug\",\"format\":\"json\"},"
                  " \"groups\":{\"allowed\":[\"orders-*\",\"pay\"]},"
                  " \"window\":{\"max_records\":42,\"max_bytes\":4096},"
                  " \"dev\":true,"
                  " \"fetch\":{\"max_records\":7,\"default_wait_ms\":0,\"max_wait_ms\":100}}",
                  err, sizeof(err));
    assert_int_equal(rc, 0);
    assert_int_equal(cfg.commit_interval_ms, 250);
    assert_string_equal(cfg.http_listen, "0.0.0.0:9000");
    assert_int_equal(cfg.max_request_bytes, 2048);
    assert_int_equal(cfg.log_level, KS_LOG_DEBUG);
    assert_true(cfg.log_json);
    assert_int_equal(cfg.group_pattern_cnt, 2);
    assert_string_equal(cfg.group_patterns[0], "orders-*");
    assert_string_equal(cfg.group_patterns[1], "pay");
    assert_int_equal(cfg.window_max_records, 42);
    assert_int_equal(cfg.window_max_bytes, 4096);
    assert_true(cfg.dev);
    assert_int_equal(cfg.fetch_max_records, 7);
    assert_int_equal(cfg.fetch_default_wait_ms, 0);
    assert_int_equal(cfg.fetch_max_wait_ms, 100);
    /* Untouched keys keep their defaults. */
    assert_int_equal(cfg.shutdown_grace_ms, 10000);
    assert_string_equal(cfg.dev_topic, "demo");
    ks_config_free(&cfg);
}

static void test_json_dotted_keys(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(load(&cfg,
                          "{\"commit.interval_ms\":300,\"dev.topic\":\"t-1\","
                          " \"dev.partitions\":64,\"window.max_bytes\":1099511627776}",
                          err, sizeof(err)),
                     0);
    assert_int_equal(cfg.commit_interval_ms, 300);
    assert_string_equal(cfg.dev_topic, "t-1");
    assert_int_equal(cfg.dev_partitions, 64);
    assert_int_equal(cfg.window_max_bytes, INT64_C(1) << 40);

    /* Dotted and nested forms can mix. */
    assert_int_equal(
        load(&cfg, "{\"shutdown\":{\"grace_ms\":0},\"fetch.max_records\":3}", err, sizeof(err)), 0);
    assert_int_equal(cfg.shutdown_grace_ms, 0);
    assert_int_equal(cfg.fetch_max_records, 3);
    /* A later load overrides an earlier one. */
    assert_int_equal(load(&cfg, "{\"commit\":{\"interval_ms\":400}}", err, sizeof(err)), 0);
    assert_int_equal(cfg.commit_interval_ms, 400);
    ks_config_free(&cfg);
}

/* "dev" is a key (a boolean) and also the prefix of dev.topic, dev.partitions and dev.rate.
 * The nested form must reach those keys just as it does for commit.* or fetch.*. */
static void test_json_nested_dev_prefix(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    int rc =
        load(&cfg, "{\"dev\":{\"topic\":\"demo2\",\"partitions\":5,\"rate\":9}}", err, sizeof(err));
    if (rc != 0) {
        ks_config_free(&cfg);
        fail_msg("nested {\"dev\":{...}} refused: %s", err);
    }
    assert_string_equal(cfg.dev_topic, "demo2");
    assert_int_equal(cfg.dev_partitions, 5);
    assert_int_equal(cfg.dev_rate, 9);
    assert_false(cfg.dev);
    ks_config_free(&cfg);
}

static void test_json_kafka_passthrough(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    int rc = load(&cfg,
                  "{\"kafka\":{\"bootstrap.servers\":\"x:1\","
                  "            \"queued.min.messages\":100000,"
                  "            \"enable.partition.eof\":false,"
                  "            \"check.crcs\":true,"
                  "            \"sasl\":{\"mechanism\":\"PLAIN\"}},"
                  " \"kafka.client.id\":\"cid\"}",
                  err, sizeof(err));
    assert_int_equal(rc, 0);
    assert_string_equal(ks_config_kafka_get(&cfg, "bootstrap.servers"), "x:1");
    assert_string_equal(ks_config_kafka_get(&cfg, "queued.min.messages"), "100000");
    assert_string_equal(ks_config_kafka_get(&cfg, "enable.partition.eof"), "false");
    assert_string_equal(ks_config_kafka_get(&cfg, "check.crcs"), "true");
    assert_string_equal(ks_config_kafka_get(&cfg, "sasl.mechanism"), "PLAIN");
    assert_string_equal(ks_config_kafka_get(&cfg, "client.id"), "cid");
    assert_int_equal(cfg.kafka_cnt, 6);
    assert_null(ks_config_kafka_get(&cfg, "kafka.bootstrap.servers"));
    assert_null(ks_config_kafka_get(&cfg, "bootstrap"));
    assert_null(ks_config_kafka_get(&cfg, "nope"));

    /* Setting a property again replaces it, it does not add a second entry. */
    assert_int_equal(load(&cfg, "{\"kafka\":{\"bootstrap.servers\":\"y:2\"}}", err, sizeof(err)),
                     0);
    assert_string_equal(ks_config_kafka_get(&cfg, "bootstrap.servers"), "y:2");
    assert_int_equal(cfg.kafka_cnt, 6);

    /* Negative integers are stringified too. */
    assert_int_equal(load(&cfg, "{\"kafka.some.int\":-5}", err, sizeof(err)), 0);
    assert_string_equal(ks_config_kafka_get(&cfg, "some.int"), "-5");

    /* A float, an array or null is not a librdkafka value. */
    assert_int_equal(load(&cfg, "{\"kafka\":{\"fetch.wait\":1.5}}", err, sizeof(err)), -1);
    assert_contains(err, "kafka.fetch.wait");
    assert_contains(err, "expected");
    assert_int_equal(load(&cfg, "{\"kafka.x\":[1]}", err, sizeof(err)), -1);
    assert_contains(err, "kafka.x");
    assert_int_equal(load(&cfg, "{\"kafka.y\":null}", err, sizeof(err)), -1);
    assert_contains(err, "kafka.y");
    ks_config_free(&cfg);
}

static void test_json_unknown_key(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(load(&cfg, "{\"commit\":{\"intervl_ms\":250}}", err, sizeof(err)), -1);
    assert_contains(err, "commit.intervl_ms");
    assert_contains(err, "test.json"); /* the origin names where it came from */

    assert_int_equal(load(&cfg, "{\"bogus\":1}", err, sizeof(err)), -1);
    assert_contains(err, "'bogus'");

    /* "kafka" alone (not an object) is not a key. */
    assert_int_equal(load(&cfg, "{\"kafka\":\"x:1\"}", err, sizeof(err)), -1);
    assert_contains(err, "kafka");
    assert_int_equal(cfg.kafka_cnt, 0);

    assert_int_equal(load(&cfg, "{\"http\":{\"listen\":\"a:1\",\"port\":1}}", err, sizeof(err)),
                     -1);
    assert_contains(err, "http.port");
    ks_config_free(&cfg);
}

static void test_json_wrong_type(void **state)
{
    static const struct {
        const char *json, *key;
    } cases[] = {
        {"{\"commit\":{\"interval_ms\":\"250\"}}", "commit.interval_ms"},
        {"{\"commit\":{\"interval_ms\":2.5}}", "commit.interval_ms"},
        {"{\"commit\":{\"interval_ms\":true}}", "commit.interval_ms"},
        {"{\"commit\":{\"interval_ms\":{\"x\":1}}}", "commit.interval_ms"},
        {"{\"window.max_bytes\":\"1024\"}", "window.max_bytes"},
        {"{\"dev\":\"yes\"}", "dev"},
        {"{\"dev\":1}", "dev"},
        {"{\"http\":{\"listen\":8080}}", "http.listen"},
        {"{\"log\":{\"level\":3}}", "log.level"},
        {"{\"log\":{\"format\":false}}", "log.format"},
        {"{\"groups\":{\"allowed\":\"orders-*\"}}", "groups.allowed"},
        {"{\"groups\":{\"allowed\":[]}}", "groups.allowed"},
        {"{\"groups\":{\"allowed\":[\"a\",1]}}", "groups.allowed"},
        {"{\"groups\":{\"allowed\":[\"a\",\"\"]}}", "groups.allowed"},
        {"{\"dev.topic\":null}", "dev.topic"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ks_config_t cfg;
        char err[512];
        ks_config_defaults(&cfg);
        if (load(&cfg, cases[i].json, err, sizeof(err)) != -1)
            fail_msg("%s: accepted", cases[i].json);
        char quoted[128];
        snprintf(quoted, sizeof(quoted), "'%s'", cases[i].key);
        assert_contains(err, quoted);
        assert_contains(err, "expected");
        /* Nothing was set by the failed value. */
        assert_int_equal(cfg.commit_interval_ms, 500);
        assert_false(cfg.dev);
        assert_string_equal(cfg.http_listen, "127.0.0.1:8080");
        assert_int_equal(cfg.group_pattern_cnt, 1);
        assert_string_equal(cfg.group_patterns[0], "*");
        ks_config_free(&cfg);
    }
}

static void test_json_out_of_range(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(load(&cfg, "{\"commit\":{\"interval_ms\":9}}", err, sizeof(err)), -1);
    assert_contains(err, "commit.interval_ms");
    assert_int_equal(cfg.commit_interval_ms, 500);
    assert_int_equal(load(&cfg, "{\"commit\":{\"interval_ms\":600001}}", err, sizeof(err)), -1);
    assert_contains(err, "commit.interval_ms");
    assert_int_equal(load(&cfg, "{\"commit\":{\"interval_ms\":-1}}", err, sizeof(err)), -1);
    assert_int_equal(load(&cfg, "{\"health\":{\"stall_ms\":99}}", err, sizeof(err)), -1);
    assert_contains(err, "health.stall_ms");
    /* Larger than an int: must be refused, not truncated into range. */
    assert_int_equal(load(&cfg, "{\"commit\":{\"interval_ms\":4294967796}}", err, sizeof(err)), -1);
    assert_contains(err, "commit.interval_ms");
    assert_int_equal(cfg.commit_interval_ms, 500);
    /* The bounds themselves are fine. */
    assert_int_equal(load(&cfg, "{\"commit\":{\"interval_ms\":10}}", err, sizeof(err)), 0);
    assert_int_equal(cfg.commit_interval_ms, 10);
    assert_int_equal(load(&cfg, "{\"commit\":{\"interval_ms\":600000}}", err, sizeof(err)), 0);
    assert_int_equal(cfg.commit_interval_ms, 600000);

    assert_int_equal(load(&cfg, "{\"dev.partitions\":65}", err, sizeof(err)), -1);
    assert_contains(err, "dev.partitions");
    assert_int_equal(load(&cfg, "{\"dev.partitions\":0}", err, sizeof(err)), -1);
    assert_int_equal(cfg.dev_partitions, 3);
    assert_int_equal(load(&cfg, "{\"window\":{\"max_bytes\":1023}}", err, sizeof(err)), -1);
    assert_contains(err, "window.max_bytes");
    assert_int_equal(load(&cfg, "{\"window\":{\"max_bytes\":1099511627777}}", err, sizeof(err)),
                     -1);
    assert_int_equal(cfg.window_max_bytes, INT64_C(64) << 20);
    ks_config_free(&cfg);
}

static void test_json_malformed(void **state)
{
    static const char *bad[] = {
        "",
        "{",
        "{\"commit\":}",
        "{\"commit\":{\"interval_ms\":250}",
        "{commit: 1}",
        "[1,2,3]",
        "42",
        "\"text\"",
        "{\"dev\":true,\"dev\":false}", /* duplicate keys are refused */
        "{\"dev\":true} trailing",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ks_config_t cfg;
        char err[512];
        ks_config_defaults(&cfg);
        if (load(&cfg, bad[i], err, sizeof(err)) != -1)
            fail_msg("malformed JSON accepted: %s", bad[i]);
        assert_contains(err, "test.json");
        assert_false(cfg.dev);
        ks_config_free(&cfg);
    }
}

static void test_load_file(void **state)
{
    char path[64];
    write_temp(path, sizeof(path), "{\"commit\":{\"interval_ms\":321},\"kafka.acks\":\"all\"}\n");
    ks_config_t cfg;
    char err[512] = "";
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_load_file(&cfg, path, err, sizeof(err)), 0);
    assert_int_equal(cfg.commit_interval_ms, 321);
    assert_string_equal(ks_config_kafka_get(&cfg, "acks"), "all");
    unlink(path);

    /* A missing file names the path. */
    assert_int_equal(ks_config_load_file(&cfg, path, err, sizeof(err)), -1);
    assert_contains(err, path);

    /* A bad file names the path too. */
    write_temp(path, sizeof(path), "{\"commit\":{\"interval_ms\":\"x\"}}");
    assert_int_equal(ks_config_load_file(&cfg, path, err, sizeof(err)), -1);
    assert_contains(err, path);
    assert_contains(err, "commit.interval_ms");
    unlink(path);
    write_temp(path, sizeof(path), "{ not json");
    assert_int_equal(ks_config_load_file(&cfg, path, err, sizeof(err)), -1);
    assert_contains(err, path);
    unlink(path);
    assert_int_equal(cfg.commit_interval_ms, 321);
    ks_config_free(&cfg);
}

/* ---- ks_config_set ----------------------------------------------------------------------- */

static void test_set_bools(void **state)
{
    static const char *yes[] = {"true", "1", "yes", "on"};
    static const char *no[] = {"false", "0", "no", "off"};
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    for (size_t i = 0; i < 4; i++) {
        cfg.dev = false;
        assert_int_equal(ks_config_set(&cfg, "dev", yes[i], err, sizeof(err)), 0);
        assert_true(cfg.dev);
        assert_int_equal(ks_config_set(&cfg, "dev", no[i], err, sizeof(err)), 0);
        assert_false(cfg.dev);
    }
    static const char *bad[] = {"maybe", "", "2", "truee", " true"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg.dev = true;
        err[0] = '\0';
        if (ks_config_set(&cfg, "dev", bad[i], err, sizeof(err)) != -1)
            fail_msg("dev=\"%s\" accepted", bad[i]);
        assert_contains(err, "'dev'");
        assert_contains(err, "expected");
        assert_true(cfg.dev); /* unchanged */
    }
    ks_config_free(&cfg);
}

static void test_set_ints(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_set(&cfg, "commit.interval_ms", "250", err, sizeof(err)), 0);
    assert_int_equal(cfg.commit_interval_ms, 250);
    assert_int_equal(ks_config_set(&cfg, "window.max_bytes", "1099511627776", err, sizeof(err)), 0);
    assert_int_equal(cfg.window_max_bytes, INT64_C(1) << 40);
    assert_int_equal(ks_config_set(&cfg, "fetch.max_records", "1000000", err, sizeof(err)), 0);
    assert_int_equal(cfg.fetch_max_records, 1000000);

    static const char *bad[] = {"abc", "", "12x", "2.5", "0x10", "99999999999999999999", "9"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (ks_config_set(&cfg, "commit.interval_ms", bad[i], err, sizeof(err)) != -1)
            fail_msg("commit.interval_ms=\"%s\" accepted", bad[i]);
        assert_contains(err, "'commit.interval_ms'");
        assert_contains(err, "expected");
        assert_int_equal(cfg.commit_interval_ms, 250);
    }
    assert_int_equal(ks_config_set(&cfg, "fetch.max_records", "0", err, sizeof(err)), -1);
    assert_contains(err, "fetch.max_records");
    assert_int_equal(ks_config_set(&cfg, "window.max_bytes", "1099511627777", err, sizeof(err)),
                     -1);
    assert_int_equal(cfg.window_max_bytes, INT64_C(1) << 40);
    ks_config_free(&cfg);
}

static void test_set_strings_levels_formats(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_set(&cfg, "http.listen", "", err, sizeof(err)), 0);
    assert_string_equal(cfg.http_listen, "");
    assert_int_equal(ks_config_set(&cfg, "http.listen", "[::1]:81", err, sizeof(err)), 0);
    assert_string_equal(cfg.http_listen, "[::1]:81");
    assert_int_equal(ks_config_set(&cfg, "log.level", "warn", err, sizeof(err)), 0);
    assert_int_equal(cfg.log_level, KS_LOG_WARN);
    assert_int_equal(ks_config_set(&cfg, "log.level", "error", err, sizeof(err)), 0);
    assert_int_equal(cfg.log_level, KS_LOG_ERROR);
    assert_int_equal(ks_config_set(&cfg, "log.level", "loud", err, sizeof(err)), -1);
    assert_contains(err, "log.level");
    assert_int_equal(cfg.log_level, KS_LOG_ERROR);
    assert_int_equal(ks_config_set(&cfg, "log.format", "json", err, sizeof(err)), 0);
    assert_true(cfg.log_json);
    assert_int_equal(ks_config_set(&cfg, "log.format", "xml", err, sizeof(err)), -1);
    assert_contains(err, "log.format");
    assert_true(cfg.log_json);
    assert_int_equal(ks_config_set(&cfg, "log.format", "text", err, sizeof(err)), 0);
    assert_false(cfg.log_json);

    /* kafka.* is passed through from text as well. */
    assert_int_equal(ks_config_set(&cfg, "kafka.bootstrap.servers", "b:9092", err, sizeof(err)), 0);
    assert_string_equal(ks_config_kafka_get(&cfg, "bootstrap.servers"), "b:9092");
    /* "kafka." with no property, and unknown keys, are refused by name. */
    assert_int_equal(ks_config_set(&cfg, "kafka.", "x", err, sizeof(err)), -1);
    assert_contains(err, "kafka.");
    assert_int_equal(ks_config_set(&cfg, "commit.intervalms", "5", err, sizeof(err)), -1);
    assert_contains(err, "'commit.intervalms'");
    assert_int_equal(cfg.kafka_cnt, 1);
    ks_config_free(&cfg);
}

static void test_set_groups_allowed(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(
        ks_config_set(&cfg, "groups.allowed", "orders-*,payments,audit?", err, sizeof(err)), 0);
    assert_int_equal(cfg.group_pattern_cnt, 3);
    assert_string_equal(cfg.group_patterns[0], "orders-*");
    assert_string_equal(cfg.group_patterns[1], "payments");
    assert_string_equal(cfg.group_patterns[2], "audit?");

    /* Empty items are skipped, leading blanks dropped. */
    assert_int_equal(ks_config_set(&cfg, "groups.allowed", ",a,, b,", err, sizeof(err)), 0);
    assert_int_equal(cfg.group_pattern_cnt, 2);
    assert_string_equal(cfg.group_patterns[0], "a");
    assert_string_equal(cfg.group_patterns[1], "b");

    /* Nothing but separators is an error and leaves the list alone. */
    assert_int_equal(ks_config_set(&cfg, "groups.allowed", " , ,", err, sizeof(err)), -1);
    assert_contains(err, "groups.allowed");
    assert_int_equal(ks_config_set(&cfg, "groups.allowed", "", err, sizeof(err)), -1);
    assert_int_equal(cfg.group_pattern_cnt, 2);
    assert_string_equal(cfg.group_patterns[0], "a");
    ks_config_free(&cfg);
}

/* Blanks around a comma must not end up inside a pattern: "orders-* " can never match a
 * group name, since names cannot contain blanks. */
static void test_set_groups_allowed_trailing_blanks(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(
        ks_config_set(&cfg, "groups.allowed", "orders-* , payments ", err, sizeof(err)), 0);
    size_t n = cfg.group_pattern_cnt;
    char p0[64] = "", p1[64] = "";
    if (n == 2) {
        snprintf(p0, sizeof(p0), "%s", cfg.group_patterns[0]);
        snprintf(p1, sizeof(p1), "%s", cfg.group_patterns[1]);
    }
    ks_config_free(&cfg);
    assert_int_equal(n, 2);
    assert_string_equal(p0, "orders-*");
    assert_string_equal(p1, "payments");
}

/* ---- group settings and static groups ------------------------------------------------ */

static void test_group_defaults_keys(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_set(&cfg, "group.ordering", "partition", err, sizeof(err)), 0);
    assert_int_equal(cfg.group_defaults.ordering, KS_ORDER_PARTITION);
    assert_int_equal(ks_config_set(&cfg, "group.ordering", "sideways", err, sizeof(err)), -1);
    assert_contains(err, "'group.ordering'");
    assert_int_equal(cfg.group_defaults.ordering, KS_ORDER_PARTITION);

    assert_int_equal(load(&cfg,
                          "{\"group\":{\"ordering\":\"none\",\"max_attempts\":3,"
                          "            \"dead_letter_topic\":\"dlq.orders\"},"
                          " \"lease\":{\"deadline_ms\":1000,\"max_deadline_ms\":2000}}",
                          err, sizeof(err)),
                     0);
    assert_int_equal(cfg.group_defaults.ordering, KS_ORDER_NONE);
    assert_int_equal(cfg.group_defaults.max_attempts, 3);
    assert_string_equal(cfg.group_defaults.dead_letter_topic, "dlq.orders");
    assert_int_equal(cfg.lease_deadline_ms, 1000);
    assert_int_equal(cfg.lease_max_deadline_ms, 2000);
    assert_int_equal(load(&cfg, "{\"group\":{\"ordering\":1}}", err, sizeof(err)), -1);
    assert_contains(err, "'group.ordering'");
    assert_contains(err, "expected");
    assert_int_equal(load(&cfg, "{\"group\":{\"max_attempts\":0}}", err, sizeof(err)), -1);
    assert_contains(err, "group.max_attempts");

    /* Validation of dependent values. */
    cfg.dev = true;
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), 0);
    assert_int_equal(ks_config_set(&cfg, "lease.deadline_ms", "3000", err, sizeof(err)), 0);
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), -1);
    assert_contains(err, "lease.deadline_ms");
    assert_int_equal(ks_config_set(&cfg, "lease.deadline_ms", "2000", err, sizeof(err)), 0);
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), 0);
    assert_int_equal(ks_config_set(&cfg, "group.dead_letter_topic", "bad topic", err, sizeof(err)),
                     0);
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), -1);
    assert_contains(err, "group.dead_letter_topic");
    assert_int_equal(ks_config_set(&cfg, "group.dead_letter_topic", "", err, sizeof(err)), 0);
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), 0);
    /* groups.max: a range, and room for the static groups. */
    assert_int_equal(ks_config_set(&cfg, "groups.max", "0", err, sizeof(err)), -1);
    assert_contains(err, "groups.max");
    assert_int_equal(ks_config_set(&cfg, "topics.allow_internal", "true", err, sizeof(err)), 0);
    assert_true(cfg.topics_allow_internal);
    assert_int_equal(ks_config_set(&cfg, "groups.max", "1", err, sizeof(err)), 0);
    assert_int_equal(ks_config_set(&cfg, "groups.static",
                                   "[{\"name\":\"a\",\"topics\":[\"t\"]},"
                                   "{\"name\":\"b\",\"topics\":[\"t\"]}]",
                                   err, sizeof(err)),
                     0);
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), -1);
    assert_contains(err, "'groups.max' (1)");
    assert_int_equal(ks_config_set(&cfg, "groups.max", "2", err, sizeof(err)), 0);
    assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), 0);
    ks_config_free(&cfg);
}

/* group.push.*: defaults and ranges; a static group's push object inherits what it does not
 * set, whatever the order of the keys, and a bad field is named. */
static void test_push(void **state)
{
    (void)state;
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_string_equal(cfg.group_defaults.push_url, "");
    assert_int_equal(cfg.group_defaults.push_concurrency, 16);
    assert_int_equal(cfg.group_defaults.push_timeout_ms, 30000);
    assert_int_equal(cfg.group_defaults.push_batch, 1);
    assert_int_equal(ks_config_set(&cfg, "group.push.concurrency", "0", err, sizeof(err)), -1);
    assert_contains(err, "'group.push.concurrency'");
    assert_int_equal(ks_config_set(&cfg, "group.push.batch", "10001", err, sizeof(err)), -1);
    assert_int_equal(ks_config_set(&cfg, "group.push.timeout_ms", "99", err, sizeof(err)), -1);
    assert_int_equal(load(&cfg,
                          "{\"groups\":{\"static\":["
                          "  {\"name\":\"g1\",\"topics\":[\"a\"],"
                          "   \"push\":{\"url\":\"http://app:8080/in\",\"batch\":50}},"
                          "  {\"name\":\"g2\",\"topics\":[\"a\"]}]},"
                          " \"group\":{\"push\":{\"concurrency\":64,\"batch\":9}}}",
                          err, sizeof(err)),
                     0);
    assert_string_equal(cfg.static_groups[0].push_url, "http://app:8080/in");
    assert_int_equal(cfg.static_groups[0].push_concurrency, 64);
    assert_int_equal(cfg.static_groups[0].push_batch, 50);
    assert_int_equal(cfg.static_groups[0].push_timeout_ms, 30000);
    assert_false(cfg.static_groups[0].push_cloudevents);
    assert_string_equal(cfg.static_groups[1].push_url, "");
    assert_int_equal(load(&cfg,
                          "{\"groups\":{\"static\":[{\"name\":\"g\",\"topics\":[\"a\"],"
                          "\"push\":{\"url\":\"ftp://x/y\"}}]}}",
                          err, sizeof(err)),
                     -1);
    assert_contains(err, "push field \"url\"");
    assert_int_equal(load(&cfg,
                          "{\"groups\":{\"static\":[{\"name\":\"g\",\"topics\":[\"a\"],"
                          "\"push\":{\"batch\":2}}]}}",
                          err, sizeof(err)),
                     -1);
    assert_contains(err, "push needs a url");
    ks_config_free(&cfg);
}

static void test_ordering_max_in_flight_per_key(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(cfg.group_defaults.max_in_flight_per_key, 500);
    assert_int_equal(ks_config_set(&cfg, "ordering.max_in_flight_per_key", "0", err, sizeof(err)),
                     -1);
    assert_contains(err, "'ordering.max_in_flight_per_key'");
    assert_int_equal(
        ks_config_set(&cfg, "ordering.max_in_flight_per_key", "100001", err, sizeof(err)), -1);
    char var[] = "KSIDECAR_ORDERING_MAX_IN_FLIGHT_PER_KEY=64";
    char *envp[] = {var, NULL};
    assert_int_equal(ks_config_apply_env(&cfg, envp, err, sizeof(err)), 0);
    assert_int_equal(cfg.group_defaults.max_in_flight_per_key, 64);
    /* A static group inherits it unless it sets its own, whatever the order of the keys. */
    assert_int_equal(load(&cfg,
                          "{\"groups\":{\"static\":["
                          "  {\"name\":\"g1\",\"topics\":[\"a\"]},"
                          "  {\"name\":\"g2\",\"topics\":[\"a\"],\"max_in_flight_per_key\":7}]},"
                          " \"ordering\":{\"max_in_flight_per_key\":32}}",
                          err, sizeof(err)),
                     0);
    assert_int_equal(cfg.group_defaults.max_in_flight_per_key, 32);
    assert_int_equal(ks_config_group(&cfg, "g1")->max_in_flight_per_key, 32);
    assert_int_equal(ks_config_group(&cfg, "g2")->max_in_flight_per_key, 7);
    assert_int_equal(load(&cfg,
                          "{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"],"
                          "\"max_in_flight_per_key\":0}]}",
                          err, sizeof(err)),
                     -1);
    assert_contains(err, "groups.static[0]");
    char *out = ks_config_dump(&cfg);
    assert_non_null(out);
    assert_contains(out, "\"ordering.max_in_flight_per_key\": 32");
    assert_contains(out, "\"max_in_flight_per_key\": 7");
    free(out);
    ks_config_free(&cfg);
}

static void test_retry_policy(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    /* Off by default: a nack without a delay is redelivered at once. */
    const ks_retry_t *d = &cfg.group_defaults.retry;
    assert_int_equal(d->initial_ms, 0);
    assert_int_equal(d->max_ms, 60000);
    assert_true(d->multiplier == 2.0 && d->jitter == 0.0 && d->list_cnt == 0);
    assert_int_equal(ks_retry_delay_ms(d, 3, 0.5), 0);
    assert_int_equal(ks_config_set(&cfg, "group.retry.multiplier", "0.5", err, sizeof(err)), -1);
    assert_contains(err, "'group.retry.multiplier': expected a number from 1 to 100");
    assert_int_equal(ks_config_set(&cfg, "group.retry.jitter", "lots", err, sizeof(err)), -1);
    assert_contains(err, "expected a number");
    assert_int_equal(ks_config_set(&cfg, "group.retry.jitter", "1.5", err, sizeof(err)), -1);
    assert_int_equal(ks_config_set(&cfg, "group.retry.max_ms", "0", err, sizeof(err)), -1);
    assert_int_equal(ks_config_set(&cfg, "group.retry.backoff_ms", "100,x", err, sizeof(err)), -1);
    assert_contains(err, "'group.retry.backoff_ms': entry 2");
    assert_int_equal(ks_config_set(&cfg, "group.retry.initial_ms", "200", err, sizeof(err)), 0);
    assert_int_equal(ks_config_set(&cfg, "group.retry.jitter", "0.25", err, sizeof(err)), 0);
    assert_true(d->initial_ms == 200 && d->jitter == 0.25);
    /* The file's forms, and a static group's own policy over the defaults. */
    assert_int_equal(load(&cfg,
                          "{\"group\":{\"retry\":{\"multiplier\":3,\"backoff_ms\":[10,20]}},"
                          " \"groups.static\":["
                          "  {\"name\":\"g1\",\"topics\":[\"a\"]},"
                          "  {\"name\":\"g2\",\"topics\":[\"a\"],"
                          "   \"retry\":{\"initial_ms\":50,\"backoff_ms\":\"\",\"jitter\":0}}]}",
                          err, sizeof(err)),
                     0);
    assert_true(d->multiplier == 3.0 && d->list_cnt == 2 && d->list[1] == 20);
    const ks_group_conf_t *g1 = ks_config_group(&cfg, "g1"), *g2 = ks_config_group(&cfg, "g2");
    assert_int_equal(g1->retry.list_cnt, 2);
    assert_int_equal(ks_retry_delay_ms(&g1->retry, 5, 0), 20);
    assert_int_equal(g2->retry.list_cnt, 0);
    assert_int_equal(ks_retry_delay_ms(&g2->retry, 2, 0), 150); /* 50 * the defaults' 3 */
    assert_int_equal(load(&cfg, "{\"group.retry.backoff_ms\":[1,\"x\"]}", err, sizeof(err)), -1);
    assert_contains(err, "expected an array of integers");
    assert_int_equal(load(&cfg,
                          "{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"],"
                          "\"retry\":{\"jitter\":2}}]}",
                          err, sizeof(err)),
                     -1);
    assert_contains(err, "groups.static[0]");
    assert_contains(err, "retry.jitter must be a number from 0 to 1");
    assert_int_equal(load(&cfg,
                          "{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"],"
                          "\"retry\":{\"soon\":1}}]}",
                          err, sizeof(err)),
                     -1);
    assert_contains(err, "unknown field retry.soon");
    char *out = ks_config_dump(&cfg);
    assert_non_null(out);
    assert_contains(out, "\"group.retry.backoff_ms\": \"10,20\"");
    assert_contains(out, "\"group.retry.multiplier\": 3.0");
    free(out);
    ks_config_free(&cfg);
}

static void test_static_groups(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    int rc = load(&cfg,
                  "{\"groups\":{\"static\":["
                  "  {\"name\":\"g1\",\"topics\":[\"a\",\"b.c\"],\"ordering\":\"none\"},"
                  "  {\"name\":\"g2\",\"topics\":[\"c\"],\"max_attempts\":7,\"redrive_max\":1,"
                  "   \"dead_letter_topic\":\"dlq2\"}]}}",
                  err, sizeof(err));
    if (rc != 0)
        fail_msg("groups.static refused: %s", err);
    assert_int_equal(cfg.static_group_cnt, 2);
    const ks_group_conf_t *g1 = ks_config_group(&cfg, "g1");
    assert_ptr_not_equal(g1, &cfg.group_defaults);
    assert_string_equal(g1->name, "g1");
    assert_int_equal(g1->topic_cnt, 2);
    assert_string_equal(g1->topics[0], "a");
    assert_string_equal(g1->topics[1], "b.c");
    assert_int_equal(g1->ordering, KS_ORDER_NONE);
    assert_int_equal(g1->max_attempts, 5); /* from the defaults */
    assert_int_equal(g1->redrive_max, 3);
    assert_string_equal(g1->dead_letter_topic, ""); /* from the defaults */
    const ks_group_conf_t *g2 = ks_config_group(&cfg, "g2");
    assert_string_equal(g2->name, "g2");
    assert_int_equal(g2->ordering, KS_ORDER_KEY);
    assert_int_equal(g2->max_attempts, 7);
    assert_int_equal(g2->redrive_max, 1);
    assert_string_equal(g2->dead_letter_topic, "dlq2");
    assert_ptr_equal(ks_config_group(&cfg, "g3"), &cfg.group_defaults);
    assert_ptr_equal(ks_config_group(&cfg, "g"), &cfg.group_defaults);

    /* The dump lists them. */
    char *out = ks_config_dump(&cfg);
    assert_non_null(out);
    json_t *root = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(root);
    json_t *arr = json_object_get(root, "groups.static");
    assert_true(json_is_array(arr));
    assert_int_equal(json_array_size(arr), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 1), "name")), "g2");
    json_decref(root);

    /* Errors name the entry and leave the groups alone. */
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"groups.static\":[{\"name\":\"x\"}]}", "groups.static[0]"},
        {"{\"groups.static\":[{\"topics\":[\"t\"]}]}", "groups.static[0]"},
        {"{\"groups.static\":[{\"name\":\"x\",\"topics\":[]}]}", "groups.static[0]"},
        {"{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"a/b\"]}]}", "groups.static[0]"},
        {"{\"groups.static\":[{\"name\":\"x y\",\"topics\":[\"t\"]}]}", "groups.static[0]"},
        {"{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"],\"color\":\"red\"}]}", "color"},
        {"{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"],\"ordering\":\"up\"}]}",
         "groups.static[0]"},
        {"{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"],\"max_attempts\":0}]}",
         "groups.static[0]"},
        {"{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"],\"redrive_max\":0}]}",
         "redrive_max: 1-1000000"},
        {"{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"]},"
         "                    {\"name\":\"x\",\"topics\":[\"u\"]}]}",
         "groups.static[1]"},
        {"{\"groups.static\":[{\"name\":\"x\",\"topics\":[\"t\"]}, 3]}", "groups.static[1]"},
        {"{\"groups.static\":{\"name\":\"x\"}}", "groups.static"},
        {"{\"groups.static\":\"x\"}", "groups.static"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (load(&cfg, bad[i].json, err, sizeof(err)) != -1)
            fail_msg("accepted: %s", bad[i].json);
        assert_contains(err, bad[i].needle);
        assert_int_equal(cfg.static_group_cnt, 2);
        assert_string_equal(cfg.static_groups[0].name, "g1");
    }

    /* As text (a flag or the environment). */
    assert_int_equal(ks_config_set(&cfg, "groups.static",
                                   "[{\"name\":\"solo\",\"topics\":[\"t1\"]}]", err, sizeof(err)),
                     0);
    assert_int_equal(cfg.static_group_cnt, 1);
    assert_string_equal(ks_config_group(&cfg, "solo")->topics[0], "t1");
    assert_ptr_equal(ks_config_group(&cfg, "g1"), &cfg.group_defaults);
    assert_int_equal(ks_config_set(&cfg, "groups.static", "[{", err, sizeof(err)), -1);
    assert_contains(err, "groups.static");
    assert_int_equal(cfg.static_group_cnt, 1);
    /* An empty array clears them. */
    assert_int_equal(ks_config_set(&cfg, "groups.static", "[]", err, sizeof(err)), 0);
    assert_int_equal(cfg.static_group_cnt, 0);
    ks_config_free(&cfg);
}

/* A static group that sets no ordering must follow group.ordering however the keys of the
 * JSON object happen to be ordered (JSON objects are unordered). */
static void test_static_groups_inherit_defaults_order_independent(void **state)
{
    static const char *texts[] = {
        "{\"group\":{\"ordering\":\"none\",\"max_attempts\":9},"
        " \"groups\":{\"static\":[{\"name\":\"g\",\"topics\":[\"t\"]}]}}",
        "{\"groups\":{\"static\":[{\"name\":\"g\",\"topics\":[\"t\"]}]},"
        " \"group\":{\"ordering\":\"none\",\"max_attempts\":9}}",
    };
    for (size_t i = 0; i < 2; i++) {
        ks_config_t cfg;
        char err[512];
        ks_config_defaults(&cfg);
        assert_int_equal(load(&cfg, texts[i], err, sizeof(err)), 0);
        const ks_group_conf_t *g = ks_config_group(&cfg, "g");
        assert_string_equal(g->name, "g");
        int ordering = g->ordering, attempts = g->max_attempts;
        ks_config_free(&cfg);
        if (ordering != KS_ORDER_NONE || attempts != 9)
            fail_msg("text %zu: static group got ordering %d, max_attempts %d; expected the "
                     "group.* defaults (ordering none = %d, max_attempts 9)",
                     i, ordering, attempts, KS_ORDER_NONE);
    }
}

/* ---- environment ------------------------------------------------------------------------- */

static void test_apply_env(void **state)
{
    static const char *env[] = {
        "PATH=/usr/bin",
        "HOME=/root",
        "KSIDECAR_COMMIT_INTERVAL_MS=123",
        "KSIDECAR_KAFKA_BOOTSTRAP_SERVERS=h:9",
        "KSIDECAR_KAFKA_SASL_MECHANISM=PLAIN",
        "KSIDECAR_DEV=true",
        "KSIDECAR_HTTP_LISTEN=",
        "KSIDECAR_WINDOW_MAX_BYTES=2048",
        "KSIDECAR_GROUPS_ALLOWED=a-*,b",
        "KSIDECAR_LOG_LEVEL=debug",
        "KSIDECAR_TEST_SOMETHING=1", /* test tooling's variables are ignored */
        "KSIDECAR_BUILD_WERROR=1",
        "KSIDECAR_BENCH_NO_RESULTS=1",
        "KSIDECAR_CACHE=/tmp/x",
        "NOT_KSIDECAR_FOO=1",
        NULL,
    };
    char **envp = dupv(env, NULL);
    ks_config_t cfg;
    char err[512] = "";
    ks_config_defaults(&cfg);
    int rc = ks_config_apply_env(&cfg, envp, err, sizeof(err));
    if (rc != 0)
        fail_msg("apply_env failed: %s", err);
    assert_int_equal(cfg.commit_interval_ms, 123);
    assert_string_equal(ks_config_kafka_get(&cfg, "bootstrap.servers"), "h:9");
    assert_string_equal(ks_config_kafka_get(&cfg, "sasl.mechanism"), "PLAIN");
    assert_null(ks_config_kafka_get(&cfg, "BOOTSTRAP_SERVERS"));
    assert_int_equal(cfg.kafka_cnt, 2);
    assert_true(cfg.dev);
    assert_string_equal(cfg.http_listen, "");
    assert_int_equal(cfg.window_max_bytes, 2048);
    assert_int_equal(cfg.group_pattern_cnt, 2);
    assert_string_equal(cfg.group_patterns[0], "a-*");
    assert_int_equal(cfg.log_level, KS_LOG_DEBUG);
    ks_config_free(&cfg);
    freev(envp);

    /* NULL and empty environments are fine. */
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_apply_env(&cfg, NULL, err, sizeof(err)), 0);
    char *empty[] = {NULL};
    assert_int_equal(ks_config_apply_env(&cfg, empty, err, sizeof(err)), 0);
    assert_int_equal(cfg.commit_interval_ms, 500);
    ks_config_free(&cfg);
}

static void test_apply_env_errors(void **state)
{
    static const char *unknown[] = {"KSIDECAR_COMMIT_INTERVAL_MS=200", "KSIDECAR_FOO=1", NULL};
    char **envp = dupv(unknown, NULL);
    ks_config_t cfg;
    char err[512] = "";
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_apply_env(&cfg, envp, err, sizeof(err)), -1);
    assert_contains(err, "KSIDECAR_FOO");
    ks_config_free(&cfg);
    freev(envp);

    /* The dotted key spelled as-is is not the env name. */
    static const char *dotted[] = {"KSIDECAR_commit.interval_ms=200", NULL};
    envp = dupv(dotted, NULL);
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_apply_env(&cfg, envp, err, sizeof(err)), -1);
    assert_contains(err, "KSIDECAR_commit.interval_ms");
    ks_config_free(&cfg);
    freev(envp);

    static const char *badval[] = {"KSIDECAR_COMMIT_INTERVAL_MS=soon", NULL};
    envp = dupv(badval, NULL);
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_apply_env(&cfg, envp, err, sizeof(err)), -1);
    assert_contains(err, "KSIDECAR_COMMIT_INTERVAL_MS");
    assert_contains(err, "commit.interval_ms");
    assert_contains(err, "expected");
    assert_int_equal(cfg.commit_interval_ms, 500);
    ks_config_free(&cfg);
    freev(envp);

    static const char *range[] = {"KSIDECAR_DEV_PARTITIONS=65", NULL};
    envp = dupv(range, NULL);
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_apply_env(&cfg, envp, err, sizeof(err)), -1);
    assert_contains(err, "KSIDECAR_DEV_PARTITIONS");
    assert_contains(err, "dev.partitions");
    ks_config_free(&cfg);
    freev(envp);
}

/* ---- ks_config_from_args ----------------------------------------------------------------- */

static void test_args_layering(void **state)
{
    char path[64];
    write_temp(path, sizeof(path),
               "{\"commit\":{\"interval_ms\":250},\"fetch\":{\"max_records\":77},"
               " \"kafka\":{\"bootstrap.servers\":\"file:1\",\"client.id\":\"from-file\"},"
               " \"dev.rate\":5}");
    ks_config_t cfg;
    ks_config_action_t action = KS_CONFIG_HELP;
    char err[512];

    /* File only. */
    {
        const char *args[] = {"ksidecar", "--config", path, NULL};
        const char *env[] = {NULL};
        int rc = run_args(&cfg, args, env, &action, err, sizeof(err));
        if (rc != 0)
            fail_msg("from_args: %s", err);
        assert_int_equal(action, KS_CONFIG_RUN);
        assert_int_equal(cfg.commit_interval_ms, 250);
        assert_int_equal(cfg.fetch_max_records, 77);
        assert_string_equal(ks_config_kafka_get(&cfg, "bootstrap.servers"), "file:1");
        assert_non_null(cfg.config_file);
        assert_string_equal(cfg.config_file, path);
        ks_config_free(&cfg);
    }
    /* The environment wins over the file. */
    {
        const char *args[] = {"ksidecar", "--config", path, NULL};
        const char *env[] = {"KSIDECAR_COMMIT_INTERVAL_MS=123",
                             "KSIDECAR_KAFKA_BOOTSTRAP_SERVERS=env:2", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
        assert_int_equal(cfg.commit_interval_ms, 123);
        assert_string_equal(ks_config_kafka_get(&cfg, "bootstrap.servers"), "env:2");
        assert_int_equal(cfg.fetch_max_records, 77);                              /* file */
        assert_string_equal(ks_config_kafka_get(&cfg, "client.id"), "from-file"); /* file */
        ks_config_free(&cfg);
    }
    /* Flags win over both, in --k=v and --k v forms. */
    {
        const char *args[] = {"ksidecar",
                              "--commit.interval_ms=777",
                              "--kafka.bootstrap.servers",
                              "flag:3",
                              "--config=",
                              NULL};
        /* the config path is appended below, so that --config=PATH is a single argument */
        char cfgarg[96];
        snprintf(cfgarg, sizeof(cfgarg), "--config=%s", path);
        args[4] = cfgarg;
        const char *env[] = {"KSIDECAR_COMMIT_INTERVAL_MS=123",
                             "KSIDECAR_KAFKA_BOOTSTRAP_SERVERS=env:2", "KSIDECAR_DEV_RATE=6", NULL};
        int rc = run_args(&cfg, args, env, &action, err, sizeof(err));
        if (rc != 0)
            fail_msg("from_args: %s", err);
        assert_int_equal(action, KS_CONFIG_RUN);
        assert_int_equal(cfg.commit_interval_ms, 777);
        assert_string_equal(ks_config_kafka_get(&cfg, "bootstrap.servers"), "flag:3");
        assert_int_equal(cfg.dev_rate, 6);           /* env over file, no flag */
        assert_int_equal(cfg.fetch_max_records, 77); /* file only */
        ks_config_free(&cfg);
    }
    /* Flags win over the environment with no file at all. */
    {
        const char *args[] = {"ksidecar", "--dev", "--http.listen", "0.0.0.0:1", NULL};
        const char *env[] = {"KSIDECAR_HTTP_LISTEN=9.9.9.9:9", "KSIDECAR_DEV=false", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
        assert_true(cfg.dev);
        assert_string_equal(cfg.http_listen, "0.0.0.0:1");
        assert_null(cfg.config_file);
        ks_config_free(&cfg);
    }
    unlink(path);
}

/* The config file named by KSIDECAR_CONFIG in envp is read before the rest of envp applies. */
static void test_args_config_file_from_envp(void **state)
{
    char path[64];
    write_temp(path, sizeof(path),
               "{\"commit\":{\"interval_ms\":250},\"kafka\":{\"bootstrap.servers\":\"file:1\"}}");
    char envconf[96];
    snprintf(envconf, sizeof(envconf), "KSIDECAR_CONFIG=%s", path);
    const char *args[] = {"ksidecar", NULL};
    const char *env[] = {envconf, NULL};
    ks_config_t cfg;
    ks_config_action_t action;
    char err[512];
    int rc = run_args(&cfg, args, env, &action, err, sizeof(err));
    unlink(path);
    if (rc != 0) {
        ks_config_free(&cfg);
        fail_msg("KSIDECAR_CONFIG given in envp was not read: %s", err);
    }
    assert_int_equal(cfg.commit_interval_ms, 250);
    assert_string_equal(ks_config_kafka_get(&cfg, "bootstrap.servers"), "file:1");
    ks_config_free(&cfg);
}

static void test_args_actions(void **state)
{
    ks_config_t cfg;
    ks_config_action_t action;
    char err[512];
    const char *env[] = {NULL};
    {
        /* --help wins even with otherwise invalid settings. */
        const char *args[] = {"ksidecar", "--commit.interval_ms=1", "--help", NULL};
        action = KS_CONFIG_RUN;
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
        assert_int_equal(action, KS_CONFIG_HELP);
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "-h", NULL};
        action = KS_CONFIG_RUN;
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
        assert_int_equal(action, KS_CONFIG_HELP);
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--version", NULL};
        action = KS_CONFIG_RUN;
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
        assert_int_equal(action, KS_CONFIG_VERSION);
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--print-config", "--dev", "--commit.interval_ms=99",
                              NULL};
        action = KS_CONFIG_RUN;
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
        assert_int_equal(action, KS_CONFIG_PRINT);
        assert_int_equal(cfg.commit_interval_ms, 99); /* flags still apply for printing */
        assert_true(cfg.dev);
        ks_config_free(&cfg);
    }
}

static void test_args_validation(void **state)
{
    ks_config_t cfg;
    ks_config_action_t action;
    char err[512];
    const char *env[] = {NULL};
    {
        const char *args[] = {"ksidecar", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "kafka.bootstrap.servers");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", NULL};
        int rc = run_args(&cfg, args, env, &action, err, sizeof(err));
        if (rc != 0)
            fail_msg("--dev alone: %s", err);
        assert_int_equal(action, KS_CONFIG_RUN);
        assert_true(cfg.dev);
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "false", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "kafka.bootstrap.servers");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--kafka.bootstrap.servers=k:1", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
        assert_false(cfg.dev);
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "--fetch.default_wait_ms=5000",
                              "--fetch.max_wait_ms=4000", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "fetch.default_wait_ms");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "--http.listen=localhost", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "http.listen");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "--dev.topic=a/b", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "dev.topic");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "--commit.interval_ms=fast", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "commit.interval_ms");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "--no.such.key=1", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "no.such.key");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "--commit.interval_ms", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "commit.interval_ms");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "stray", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "stray");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", "--config=/nonexistent/ks.json", NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "/nonexistent/ks.json");
        ks_config_free(&cfg);
    }
    {
        const char *args[] = {"ksidecar", "--dev", NULL};
        const char *badenv[] = {"KSIDECAR_FOO=1", NULL};
        assert_int_equal(run_args(&cfg, args, badenv, &action, err, sizeof(err)), -1);
        assert_contains(err, "KSIDECAR_FOO");
        ks_config_free(&cfg);
    }
}

/* ---- dump and usage ---------------------------------------------------------------------- */

/* The HTTP edge's connection bounds and deadlines: defaults, ranges, and the probe
 * listener's address checks. */
static void test_http_limits_keys(void **state)
{
    ks_config_t cfg;
    ks_config_action_t action;
    char err[512];
    const char *env[] = {NULL};
    ks_config_defaults(&cfg);
    assert_string_equal(cfg.http_health_listen, "");
    assert_int_equal(cfg.http_max_connections, 4096);
    assert_int_equal(cfg.http_max_conns_per_client, 1024);
    assert_int_equal(cfg.http_header_timeout_ms, 10000);
    assert_int_equal(cfg.http_body_timeout_ms, 30000);
    assert_int_equal(cfg.http_max_long_polls, 1000);
    assert_int_equal(ks_config_set(&cfg, "http.max_connections_per_client", "0", err, sizeof(err)),
                     0);
    assert_int_equal(cfg.http_max_conns_per_client, 0);
    assert_int_equal(ks_config_set(&cfg, "http.max_connections", "0", err, sizeof(err)), -1);
    assert_contains(err, "http.max_connections");
    assert_int_equal(ks_config_set(&cfg, "http.header_timeout_ms", "99", err, sizeof(err)), -1);
    assert_contains(err, "http.header_timeout_ms");
    assert_int_equal(ks_config_set(&cfg, "http.body_timeout_ms", "x", err, sizeof(err)), -1);
    assert_contains(err, "http.body_timeout_ms");
    assert_int_equal(ks_config_set(&cfg, "http.max_long_polls", "0", err, sizeof(err)), -1);
    assert_contains(err, "http.max_long_polls");
    /* The produce endpoint's bound on records per request. */
    assert_int_equal(cfg.http_max_produce_records, 1000);
    assert_int_equal(ks_config_set(&cfg, "http.max_produce_records", "0", err, sizeof(err)), -1);
    assert_contains(err, "http.max_produce_records");
    assert_int_equal(ks_config_set(&cfg, "http.max_produce_records", "100001", err, sizeof(err)),
                     -1);
    /* The bound on samples in one GET /metrics. */
    assert_int_equal(cfg.metrics_max_series, 100000);
    assert_int_equal(ks_config_set(&cfg, "metrics.max_series", "99", err, sizeof(err)), -1);
    assert_contains(err, "metrics.max_series");
    assert_int_equal(ks_config_set(&cfg, "metrics.max_series", "10000001", err, sizeof(err)), -1);
    /* The record stream's bound, queue, stall time and heartbeat. */
    assert_int_equal(cfg.http_max_streams, 1000);
    assert_int_equal(cfg.http_stream_queue_messages, 4);
    assert_true(cfg.http_stream_queue_bytes == INT64_C(16) << 20);
    assert_int_equal(cfg.http_stream_stall_ms, 30000);
    assert_int_equal(cfg.http_stream_heartbeat_ms, 5000);
    assert_int_equal(ks_config_set(&cfg, "http.max_streams", "0", err, sizeof(err)), -1);
    assert_contains(err, "http.max_streams");
    assert_int_equal(ks_config_set(&cfg, "http.stream_stall_ms", "999", err, sizeof(err)), -1);
    assert_contains(err, "http.stream_stall_ms");
    assert_int_equal(ks_config_set(&cfg, "http.stream_heartbeat_ms", "99", err, sizeof(err)), -1);
    assert_contains(err, "http.stream_heartbeat_ms");
    assert_int_equal(ks_config_set(&cfg, "http.stream_heartbeat_ms", "100", err, sizeof(err)), 0);
    assert_int_equal(cfg.http_stream_heartbeat_ms, 100);
    assert_int_equal(ks_config_set(&cfg, "http.stream_queue_bytes", "1023", err, sizeof(err)), -1);
    assert_contains(err, "http.stream_queue_bytes");
    ks_config_free(&cfg);
    static const char *bad[] = {"--http.health_listen=nocolon",
                                "--http.health_listen=127.0.0.1:8080"};
    for (size_t i = 0; i < 2; i++) {
        const char *args[] = {"ksidecar", "--dev", bad[i], NULL};
        assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), -1);
        assert_contains(err, "http.health_listen");
        ks_config_free(&cfg);
    }
    const char *args[] = {"ksidecar", "--dev", "--http.health_listen=127.0.0.1:8081", NULL};
    assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
    assert_string_equal(cfg.http_health_listen, "127.0.0.1:8081");
    ks_config_free(&cfg);
}

static void test_dump_masks_secrets(void **state)
{
    ks_config_t cfg;
    char err[512];
    ks_config_defaults(&cfg);
    assert_int_equal(
        ks_config_set(&cfg, "kafka.bootstrap.servers", "broker:9092", err, sizeof(err)), 0);
    assert_int_equal(ks_config_set(&cfg, "kafka.sasl.password", "hunter2", err, sizeof(err)), 0);
    assert_int_equal(ks_config_set(&cfg, "kafka.ssl.key.password", "s3cr3tkey", err, sizeof(err)),
                     0);
    assert_int_equal(ks_config_set(&cfg, "kafka.sasl.oauthbearer.client.secret", "oauthsecretval",
                                   err, sizeof(err)),
                     0);
    assert_int_equal(ks_config_set(&cfg, "kafka.sasl.username", "alice", err, sizeof(err)), 0);
    assert_int_equal(ks_config_set(&cfg, "commit.interval_ms", "250", err, sizeof(err)), 0);

    char *out = ks_config_dump(&cfg);
    assert_non_null(out);
    assert_not_contains(out, "hunter2");
    assert_not_contains(out, "s3cr3tkey");
    assert_not_contains(out, "oauthsecretval");
    assert_contains(out, "broker:9092");
    assert_contains(out, "alice");

    json_error_t jerr;
    json_t *root = json_loads(out, 0, &jerr);
    assert_non_null(root);
    assert_true(json_is_object(root));
    assert_string_equal(json_string_value(json_object_get(root, "kafka.sasl.password")),
                        "********");
    assert_string_equal(json_string_value(json_object_get(root, "kafka.ssl.key.password")),
                        "********");
    assert_string_equal(json_string_value(json_object_get(root, "kafka.bootstrap.servers")),
                        "broker:9092");
    assert_string_equal(json_string_value(json_object_get(root, "kafka.sasl.username")), "alice");
    assert_int_equal(json_integer_value(json_object_get(root, "commit.interval_ms")), 250);
    assert_string_equal(json_string_value(json_object_get(root, "http.listen")), "127.0.0.1:8080");
    assert_string_equal(json_string_value(json_object_get(root, "log.level")), "info");
    assert_string_equal(json_string_value(json_object_get(root, "log.format")), "text");
    assert_true(json_is_false(json_object_get(root, "dev")));
    json_t *groups = json_object_get(root, "groups.allowed");
    assert_true(json_is_array(groups));
    assert_int_equal(json_array_size(groups), 1);
    assert_string_equal(json_string_value(json_array_get(groups, 0)), "*");
    assert_int_equal(json_integer_value(json_object_get(root, "window.max_bytes")), INT64_C(64)
                                                                                        << 20);
    json_decref(root);
    free(out);
    ks_config_free(&cfg);
}

static void test_usage_lists_keys(void **state)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    ks_config_usage(f);
    long n = ftell(f);
    assert_true(n > 0);
    char *buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    rewind(f);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    assert_contains(buf, "--commit.interval_ms");
    assert_contains(buf, "KSIDECAR_COMMIT_INTERVAL_MS");
    assert_contains(buf, "--groups.allowed");
    assert_contains(buf, "KSIDECAR_HTTP_MAX_REQUEST_BYTES");
    assert_contains(buf, "--kafka.");
    free(buf);
}

/* ---- ks_valid_kafka_name ----------------------------------------------------------------- */

/* push.allowed_urls: each prefix ends its host (and port) with a '/', so no url can add to
 * them; a bad one stops startup, naming it. */
static void test_push_allowed_urls(void **state)
{
    (void)state;
    const char *good[] = {"", "http://127.0.0.1:9000/", "https://app:8443/hooks/",
                          "http://a/, https://b:1/x"};
    const char *bad[] = {"http://127.0.0.1:9000", "ftp://a/", "http:///x", "http://u@h/",
                         "http://a/, http://b:90"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ks_config_t cfg;
        char err[512] = "";
        ks_config_defaults(&cfg);
        cfg.dev = true;
        assert_int_equal(ks_config_set(&cfg, "push.allowed_urls", good[i], err, sizeof(err)), 0);
        assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), 0);
        ks_config_free(&cfg);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ks_config_t cfg;
        char err[512] = "";
        ks_config_defaults(&cfg);
        cfg.dev = true;
        assert_int_equal(ks_config_set(&cfg, "push.allowed_urls", bad[i], err, sizeof(err)), 0);
        assert_int_equal(ks_config_validate(&cfg, err, sizeof(err)), -1);
        assert_contains(err, "push.allowed_urls");
        ks_config_free(&cfg);
    }
}

/* schema_registry.*: defaults, ranges, the URL list from a flag and a file, the secret masked,
 * and the pairs ks_config_validate checks. */
static void test_schema_registry_keys(void **state)
{
    (void)state;
    ks_config_t cfg;
    ks_config_action_t action;
    char err[512];
    const char *env[] = {"KSIDECAR_SCHEMA_REGISTRY_BASIC_AUTH=alice:s3cret", NULL};
    ks_config_defaults(&cfg);
    assert_int_equal(cfg.schema_registry_url_cnt, 0);
    assert_string_equal(cfg.schema_registry_basic_auth, "");
    assert_string_equal(cfg.schema_registry_bearer_token_file, "");
    assert_string_equal(cfg.schema_registry_ca_file, "");
    assert_string_equal(cfg.schema_registry_cert_file, "");
    assert_string_equal(cfg.schema_registry_key_file, "");
    assert_int_equal(cfg.schema_registry_timeout_ms, 5000);
    assert_int_equal(cfg.schema_registry_cache_max, 1000);
    assert_int_equal(ks_config_set(&cfg, "schema_registry.timeout_ms", "99", err, sizeof(err)), -1);
    assert_contains(err, "schema_registry.timeout_ms");
    assert_int_equal(ks_config_set(&cfg, "schema_registry.cache_max", "0", err, sizeof(err)), -1);
    assert_contains(err, "schema_registry.cache_max");
    ks_config_free(&cfg);

    const char *args[] = {"ksidecar", "--dev",
                          "--schema_registry.url=http://r1:8081, https://r2/apis/ccompat/v7", NULL};
    assert_int_equal(run_args(&cfg, args, env, &action, err, sizeof(err)), 0);
    assert_int_equal(cfg.schema_registry_url_cnt, 2);
    assert_string_equal(cfg.schema_registry_urls[0], "http://r1:8081");
    assert_string_equal(cfg.schema_registry_urls[1], "https://r2/apis/ccompat/v7");
    assert_string_equal(cfg.schema_registry_basic_auth, "alice:s3cret");
    char *dump = ks_config_dump(&cfg);
    assert_not_contains(dump, "s3cret");
    assert_contains(dump, "https://r2/apis/ccompat/v7");
    free(dump);
    ks_config_free(&cfg);

    char path[64];
    write_temp(path, sizeof(path),
               "{\"schema_registry\": {\"url\": [\"http://a:1\"], \"timeout_ms\": 250}}");
    const char *fargs[] = {"ksidecar", "--dev", "--config", path, NULL};
    const char *noenv[] = {NULL};
    assert_int_equal(run_args(&cfg, fargs, noenv, &action, err, sizeof(err)), 0);
    assert_int_equal(cfg.schema_registry_url_cnt, 1);
    assert_string_equal(cfg.schema_registry_urls[0], "http://a:1");
    assert_int_equal(cfg.schema_registry_timeout_ms, 250);
    ks_config_free(&cfg);
    unlink(path);

    static const char *bad[][2] = {
        {"--schema_registry.url=ftp://r1", "schema_registry.url"},
        {"--schema_registry.basic_auth=nocolon", "schema_registry.basic_auth"},
        {"--schema_registry.cert_file=/c.pem", "schema_registry.key_file"},
        {"--schema_registry.bearer_token_file=/t", "schema_registry.bearer_token_file"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *a[] = {"ksidecar", "--dev", "--schema_registry.basic_auth=u:p", bad[i][0],
                           NULL};
        if (i == 1)
            a[2] = "--dev"; /* basic auth given once, malformed */
        assert_int_equal(run_args(&cfg, a, noenv, &action, err, sizeof(err)), -1);
        assert_contains(err, bad[i][1]);
        ks_config_free(&cfg);
    }
}

static void test_valid_kafka_name(void **state)
{
    char name[300];
    assert_false(ks_valid_kafka_name(""));
    assert_false(ks_valid_kafka_name("."));
    assert_false(ks_valid_kafka_name(".."));
    assert_true(ks_valid_kafka_name("..."));
    assert_true(ks_valid_kafka_name(".a"));
    assert_true(ks_valid_kafka_name("a"));
    assert_true(ks_valid_kafka_name("-"));
    assert_true(ks_valid_kafka_name("_"));
    assert_true(ks_valid_kafka_name("orders.v1-eu_West9"));
    assert_false(ks_valid_kafka_name("a/b"));
    assert_false(ks_valid_kafka_name("a b"));
    assert_false(ks_valid_kafka_name(" a"));
    assert_false(ks_valid_kafka_name("a\n"));
    assert_false(ks_valid_kafka_name("a:b"));
    assert_false(ks_valid_kafka_name("a*"));
    assert_false(ks_valid_kafka_name("a,b"));
    assert_false(ks_valid_kafka_name("caf\xc3\xa9"));

    memset(name, 'a', 249);
    name[249] = '\0';
    assert_true(ks_valid_kafka_name(name));
    name[248] = '/';
    assert_false(ks_valid_kafka_name(name));
    name[248] = '.';
    assert_true(ks_valid_kafka_name(name));
    memset(name, 'b', 250);
    name[250] = '\0';
    assert_false(ks_valid_kafka_name(name));
    memset(name, 'c', 299);
    name[299] = '\0';
    assert_false(ks_valid_kafka_name(name));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_json_nested),
        cmocka_unit_test(test_json_dotted_keys),
        cmocka_unit_test(test_json_nested_dev_prefix),
        cmocka_unit_test(test_json_kafka_passthrough),
        cmocka_unit_test(test_json_unknown_key),
        cmocka_unit_test(test_json_wrong_type),
        cmocka_unit_test(test_json_out_of_range),
        cmocka_unit_test(test_json_malformed),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_set_bools),
        cmocka_unit_test(test_set_ints),
        cmocka_unit_test(test_set_strings_levels_formats),
        cmocka_unit_test(test_set_groups_allowed),
        cmocka_unit_test(test_set_groups_allowed_trailing_blanks),
        cmocka_unit_test(test_group_defaults_keys),
        cmocka_unit_test(test_retry_policy),
        cmocka_unit_test(test_ordering_max_in_flight_per_key),
        cmocka_unit_test(test_push),
        cmocka_unit_test(test_static_groups),
        cmocka_unit_test(test_static_groups_inherit_defaults_order_independent),
        cmocka_unit_test(test_apply_env),
        cmocka_unit_test(test_apply_env_errors),
        cmocka_unit_test(test_args_layering),
        cmocka_unit_test(test_args_config_file_from_envp),
        cmocka_unit_test(test_args_actions),
        cmocka_unit_test(test_args_validation),
        cmocka_unit_test(test_http_limits_keys),
        cmocka_unit_test(test_dump_masks_secrets),
        cmocka_unit_test(test_usage_lists_keys),
        cmocka_unit_test(test_push_allowed_urls),
        cmocka_unit_test(test_schema_registry_keys),
        cmocka_unit_test(test_valid_kafka_name),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
