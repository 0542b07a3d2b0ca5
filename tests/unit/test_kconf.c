/* test_kconf.c: the librdkafka client config builder: kafka.* lands in every role but dev
 * mode's, a role's defaults give way to kafka.* and its fixed keys do not, and a property
 * librdkafka refuses fails the build with its name and librdkafka's message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "config.h"
#include "kconf.h"
#include "mem_budget.h"

/* A config with the defaults and the given kafka.* pairs (NULL-ended). */
static void cfg_with(ks_config_t *cfg, const char *const *kv)
{
    char err[256];
    ks_config_defaults(cfg);
    for (size_t i = 0; kv && kv[i]; i += 2) {
        char key[128];
        snprintf(key, sizeof(key), "kafka.%s", kv[i]);
        assert_int_equal(ks_config_set(cfg, key, kv[i + 1], err, sizeof(err)), 0);
    }
}

/* The value of property name in role's conf, as librdkafka reports it (static buffer). */
static const char *get(const ks_config_t *cfg, ks_kconf_role_t role, const char *group_id,
                       const char *name)
{
    static char buf[1024];
    char err[256] = "";
    rd_kafka_conf_t *conf = ks_kconf_new(cfg, role, group_id, err, sizeof(err));
    if (!conf)
        fail_msg("role %s: %s", ks_kconf_role_name(role), err);
    size_t n = sizeof(buf);
    if (rd_kafka_conf_get(conf, name, buf, &n) != RD_KAFKA_CONF_OK)
        snprintf(buf, sizeof(buf), "(unset)");
    rd_kafka_conf_destroy(conf);
    return buf;
}

static void test_passthrough_lands(void **state)
{
    (void)state;
    const char *kv[] = {"client.id", "kconf-test", "bootstrap.servers", "127.0.0.1:1", NULL};
    ks_config_t cfg;
    cfg_with(&cfg, kv);
    for (int r = 0; r < KS_KCONF_ROLE_CNT; r++) {
        const char *want = r == KS_KCONF_DEV ? "rdkafka" : "kconf-test";
        assert_string_equal(get(&cfg, (ks_kconf_role_t)r, "g", "client.id"), want);
        assert_string_equal(get(&cfg, (ks_kconf_role_t)r, "g", "bootstrap.servers"),
                            r == KS_KCONF_DEV ? "(unset)" : "127.0.0.1:1");
    }
    ks_config_free(&cfg);
}

/* What role's conf (for group) must say of a property. */
typedef struct {
    ks_kconf_role_t role;
    const char *group;
    const char *name;
    const char *want;
} expect_t;

static void expect_all(const ks_config_t *cfg, const expect_t *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *got = get(cfg, e[i].role, e[i].group, e[i].name);
        if (strcmp(got, e[i].want))
            fail_msg("%s: %s is \"%s\", not \"%s\"", ks_kconf_role_name(e[i].role), e[i].name, got,
                     e[i].want);
    }
}

#define EXPECT_ALL(cfg, rows) expect_all(cfg, rows, sizeof(rows) / sizeof(rows[0]))

static void test_consumer_defaults_and_fixed(void **state)
{
    (void)state;
    ks_config_t cfg;
    cfg_with(&cfg, NULL);
    char kb[32];
    snprintf(kb, sizeof(kb), "%lld", (long long)ks_mem_kafka_queue_kbytes(cfg.memory_max_bytes));
    const expect_t plain[] = {
        {KS_KCONF_CONSUMER, "orders", "queued.max.messages.kbytes", kb},
        {KS_KCONF_CONSUMER, "orders", "session.timeout.ms", "30000"},
        {KS_KCONF_CONSUMER, "orders", "heartbeat.interval.ms", "1000"},
        {KS_KCONF_CONSUMER, "orders", "socket.timeout.ms", "10000"},
        {KS_KCONF_CONSUMER, "orders", "fetch.wait.max.ms", "100"},
        {KS_KCONF_CONSUMER, "orders", "fetch.max.bytes", "2097152"},
        {KS_KCONF_CONSUMER, "orders", "fetch.message.max.bytes", "1048576"},
        {KS_KCONF_CONSUMER, "orders", "queued.min.messages", "100000"},
        {KS_KCONF_CONSUMER, "orders", "partition.assignment.strategy", "cooperative-sticky"},
        {KS_KCONF_CONSUMER, "orders", "group.id", "orders"},
        {KS_KCONF_CONSUMER, "orders", "debug", "cgrp"},
        /* The pass-through alone: none of the consumer's own. */
        {KS_KCONF_CHECK, NULL, "session.timeout.ms", "45000"},
        {KS_KCONF_CHECK, NULL, "socket.timeout.ms", "60000"},
        {KS_KCONF_CHECK, NULL, "debug", ""},
    };
    EXPECT_ALL(&cfg, plain);
    ks_config_free(&cfg);

    /* kafka.* changes the defaults, not what the guarantees rest on. */
    const char *kv[] = {"session.timeout.ms",
                        "20000",
                        "socket.timeout.ms",
                        "30000",
                        "partition.assignment.strategy",
                        "range",
                        "enable.auto.commit",
                        "true",
                        "enable.auto.offset.store",
                        "true",
                        "group.id",
                        "someone-else",
                        "enable.partition.eof",
                        "true",
                        "debug",
                        "broker",
                        NULL};
    cfg_with(&cfg, kv);
    const expect_t set[] = {
        {KS_KCONF_CONSUMER, "orders", "session.timeout.ms", "20000"},
        {KS_KCONF_CONSUMER, "orders", "socket.timeout.ms", "30000"},
        {KS_KCONF_CONSUMER, "orders", "partition.assignment.strategy", "range"},
        {KS_KCONF_CONSUMER, "orders", "enable.auto.commit", "false"},
        {KS_KCONF_CONSUMER, "orders", "enable.auto.offset.store", "false"},
        {KS_KCONF_CONSUMER, "orders", "enable.partition.eof", "false"},
        {KS_KCONF_CONSUMER, "orders", "group.id", "orders"},
        {KS_KCONF_CONSUMER, "orders", "debug", "broker,cgrp"},
    };
    EXPECT_ALL(&cfg, set);
    ks_config_free(&cfg);
}

static void test_producers(void **state)
{
    (void)state;
    const char *kv[] = {"linger.ms", "50", "enable.idempotence", "false",  "log_level", "7",
                        "acks",      "1",  "auto.offset.reset",  "latest", NULL};
    ks_config_t cfg;
    cfg_with(&cfg, kv);
    const expect_t rows[] = {
        /* The Produce API's producer: its linger and quiet log over kafka.*, the rest
         * kafka.*'s. */
        {KS_KCONF_PRODUCER, NULL, "linger.ms", "2"},
        {KS_KCONF_PRODUCER, NULL, "log_level", "3"},
        {KS_KCONF_PRODUCER, NULL, "enable.idempotence", "false"},
        {KS_KCONF_PRODUCER, NULL, "acks", "1"},
        {KS_KCONF_PRODUCER, NULL, "socket.timeout.ms", "60000"},
        /* The dead-letter producer is idempotent whatever kafka.* says. */
        {KS_KCONF_DEAD_LETTER, NULL, "enable.idempotence", "true"},
        {KS_KCONF_DEAD_LETTER, NULL, "linger.ms", "5"},
        {KS_KCONF_DEAD_LETTER, NULL, "log_level", "3"},
        {KS_KCONF_DEAD_LETTER, NULL, "socket.timeout.ms", "10000"},
        /* The redrive's producer: idempotent, every replica, a minute to deliver. */
        {KS_KCONF_REDRIVE_PRODUCER, NULL, "enable.idempotence", "true"},
        {KS_KCONF_REDRIVE_PRODUCER, NULL, "acks", "-1"},
        {KS_KCONF_REDRIVE_PRODUCER, NULL, "linger.ms", "5"},
        {KS_KCONF_REDRIVE_PRODUCER, NULL, "message.timeout.ms", "60000"},
        {KS_KCONF_REDRIVE_PRODUCER, NULL, "socket.timeout.ms", "10000"},
        /* The redrive's consumer reads committed records from the start, to the end it
         * found. */
        {KS_KCONF_REDRIVE_CONSUMER, "orders.redrive", "group.id", "orders.redrive"},
        {KS_KCONF_REDRIVE_CONSUMER, "x", "auto.offset.reset", "smallest"},
        {KS_KCONF_REDRIVE_CONSUMER, "x", "isolation.level", "read_committed"},
        {KS_KCONF_REDRIVE_CONSUMER, "x", "enable.partition.eof", "true"},
        {KS_KCONF_REDRIVE_CONSUMER, "x", "enable.auto.commit", "false"},
        {KS_KCONF_REDRIVE_CONSUMER, "x", "log_level", "3"},
        {KS_KCONF_REDRIVE_CONSUMER, "x", "socket.timeout.ms", "10000"},
        /* Dev mode's mock cluster takes none of kafka.*. */
        {KS_KCONF_DEV, NULL, "test.mock.num.brokers", "1"},
        {KS_KCONF_DEV, NULL, "linger.ms", "5"},
        {KS_KCONF_DEV, NULL, "log_level", "6"},
    };
    EXPECT_ALL(&cfg, rows);
    assert_string_equal(get(NULL, KS_KCONF_DEV, NULL, "linger.ms"), "5");
    ks_config_free(&cfg);
}

/* Every role but dev mode's fails on the property, naming it and what librdkafka said. */
static void expect_refused(const char *name, const char *value, const char *said)
{
    const char *kv[] = {"client.id", "x", name, value, NULL};
    ks_config_t cfg;
    cfg_with(&cfg, kv);
    char key[128];
    snprintf(key, sizeof(key), "config key 'kafka.%s': ", name);
    for (int r = 0; r < KS_KCONF_ROLE_CNT; r++) {
        char err[256] = "";
        rd_kafka_conf_t *conf = ks_kconf_new(&cfg, (ks_kconf_role_t)r, "g", err, sizeof(err));
        if (r == KS_KCONF_DEV) {
            assert_non_null(conf);
            rd_kafka_conf_destroy(conf);
            continue;
        }
        assert_null(conf);
        assert_non_null(strstr(err, key));
        assert_non_null(strstr(err, said));
    }
    char err[256] = "";
    assert_int_equal(ks_kconf_check(&cfg, err, sizeof(err)), -1);
    assert_non_null(strstr(err, key));
    ks_config_free(&cfg);
}

static void test_refused(void **state)
{
    (void)state;
    expect_refused("no.such.prop", "1", "No such configuration property");
    expect_refused("session.timeout.ms", "soon", "Invalid value");
    expect_refused("auto.offset.reset", "sideways", "Invalid value");

    ks_config_t cfg;
    cfg_with(&cfg, NULL);
    char err[256] = "";
    assert_int_equal(ks_kconf_check(&cfg, err, sizeof(err)), 0);
    assert_null(ks_kconf_new(&cfg, KS_KCONF_ROLE_CNT, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "role"));
    ks_config_free(&cfg);
}

static void test_role_names(void **state)
{
    (void)state;
    for (int r = 0; r < KS_KCONF_ROLE_CNT; r++) {
        assert_string_not_equal(ks_kconf_role_name((ks_kconf_role_t)r), "?");
        for (int o = 0; o < r; o++)
            assert_string_not_equal(ks_kconf_role_name((ks_kconf_role_t)r),
                                    ks_kconf_role_name((ks_kconf_role_t)o));
    }
    assert_string_equal(ks_kconf_role_name(KS_KCONF_ROLE_CNT), "?");
}

/* A group's share of the fetch part sets its fetch.max.bytes and, from it, its
 * fetch.message.max.bytes; kafka.* still overrides either. */
static void test_consumer_fetch_share(void **state)
{
    (void)state;
    ks_config_t cfg;
    const char *kv[] = {"fetch.message.max.bytes", "65536", NULL};
    for (int pass = 0; pass < 2; pass++) {
        cfg_with(&cfg, pass ? kv : NULL);
        char err[256] = "", buf[64];
        rd_kafka_conf_t *conf = ks_kconf_new_consumer(&cfg, "orders", 1 << 20, err, sizeof(err));
        if (!conf)
            fail_msg("%s", err);
        size_t n = sizeof(buf);
        assert_int_equal(rd_kafka_conf_get(conf, "fetch.max.bytes", buf, &n), RD_KAFKA_CONF_OK);
        assert_string_equal(buf, "1048576");
        n = sizeof(buf);
        assert_int_equal(rd_kafka_conf_get(conf, "fetch.message.max.bytes", buf, &n),
                         RD_KAFKA_CONF_OK);
        assert_string_equal(buf, pass ? "65536" : "524288");
        rd_kafka_conf_destroy(conf);
        ks_config_free(&cfg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passthrough_lands),
        cmocka_unit_test(test_consumer_defaults_and_fixed),
        cmocka_unit_test(test_consumer_fetch_share),
        cmocka_unit_test(test_producers),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_role_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
