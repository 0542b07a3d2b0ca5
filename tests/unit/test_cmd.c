/* test_cmd.c: tests the command catalogue's tables and the one validator (proxy/cmd.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "util.h"

static ks_config_t cfg;
static char err[512];

static int setup(void **state)
{
    (void)state;
    ks_config_defaults(&cfg);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ks_config_free(&cfg);
    return 0;
}

static ks_cmd_req_t fetch_req(const char *group, const char *const *topics, size_t n)
{
    return (ks_cmd_req_t){.type = KS_CMD_FETCH,
                          .group = group,
                          .u.fetch = {.topics = topics,
                                      .topic_cnt = n,
                                      .opts = {.max = 10},
                                      .unset = KS_FETCH_UNSET_DEADLINE}};
}

/* Validates r and expects want, with an error that holds want_text when it is not KS_OK. */
static void expect(ks_cmd_req_t r, ks_status_t want, const char *want_text)
{
    err[0] = '\0';
    ks_status_t st = ks_cmd_validate(&cfg, &r, err, sizeof(err));
    if (st != want || (want_text && !strstr(err, want_text)))
        fail_msg("got %s \"%s\", want %s \"%s\"", ks_status_name(st), err, ks_status_name(want),
                 want_text ? want_text : "");
}

static void test_tables(void **state)
{
    (void)state;
    assert_string_equal(ks_cmd_name(KS_CMD_FETCH), "fetch");
    assert_string_equal(ks_cmd_name(KS_CMD_SHUTDOWN), "shutdown");
    assert_string_equal(ks_cmd_name(KS_CMD__CNT), "unknown");
    assert_int_equal(ks_cmd_flags(KS_CMD__CNT), 0);
    /* Only a fetch may make a group, and only a fetch waits out a revoke. */
    for (int t = 0; t < KS_CMD__CNT; t++) {
        unsigned f = ks_cmd_flags((ks_cmd_t)t);
        assert_int_equal((f & KS_CMDF_CREATE) != 0, t == KS_CMD_FETCH);
        assert_int_equal((f & KS_CMDF_REBALANCE) == 0,
                         t == KS_CMD_FETCH || t == KS_CMD_PRODUCE || t == KS_CMD_REDRIVE);
        assert_true(strcmp(ks_cmd_name((ks_cmd_t)t), "unknown") != 0);
    }
    assert_int_equal(ks_cmd_flags(KS_CMD_PRODUCE) & KS_CMDF_GROUP, 0);
    /* A redrive names a group that need not run here. */
    assert_int_equal(ks_cmd_flags(KS_CMD_REDRIVE) & KS_CMDF_GROUP, 0);
}

/* A redrive: max from 1 to KS_CMD_REDRIVE_MAX (0: the default), and the group must have a
 * dead-letter topic, named by the key that sets it. */
static void test_redrive(void **state)
{
    (void)state;
    ks_cmd_req_t r = {.type = KS_CMD_REDRIVE, .group = "g"};
    expect(r, KS_E_INVALID, "group.dead_letter_topic");
    free(cfg.group_defaults.dead_letter_topic);
    cfg.group_defaults.dead_letter_topic = ks_xstrdup("g.dlt");
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.redrive.max, KS_CMD_REDRIVE_DEFAULT_MAX);
    r.u.redrive.max = KS_CMD_REDRIVE_MAX + 1;
    expect(r, KS_E_INVALID, "max must be from 1 to 100000");
    r.u.redrive.max = -1;
    expect(r, KS_E_INVALID, "max must be");
    r.group = "bad name";
    r.u.redrive.max = 5;
    expect(r, KS_E_INVALID, "group name");
    free(cfg.group_defaults.dead_letter_topic);
    cfg.group_defaults.dead_letter_topic = ks_xstrdup("");
}

static void test_fetch_defaults(void **state)
{
    (void)state;
    const char *topics[] = {"t1"};
    ks_cmd_req_t r = fetch_req("g", topics, 1);
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.fetch.opts.deadline_ms, cfg.lease_deadline_ms);
    assert_string_equal(r.u.fetch.opts.subscriber, KS_CMD_DEFAULT_SUBSCRIBER);
    r = fetch_req("g", topics, 1);
    r.u.fetch.opts.deadline_ms = 1234;
    r.u.fetch.opts.subscriber = "mine";
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.fetch.opts.deadline_ms, cfg.lease_deadline_ms); /* unset wins */
    r = fetch_req("g", topics, 1);
    r.u.fetch.unset = 0;
    r.u.fetch.opts.deadline_ms = 1234;
    r.u.fetch.opts.subscriber = "mine";
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.fetch.opts.deadline_ms, 1234);
    assert_string_equal(r.u.fetch.opts.subscriber, "mine");
}

/* What an edge leaves out takes its default here, and only here: max, wait_ms, deadline_ms. */
static void test_fetch_unset_defaults(void **state)
{
    (void)state;
    const char *topics[] = {"t1"};
    cfg.fetch_default_wait_ms = 777;
    cfg.lease_deadline_ms = 4321;
    ks_cmd_req_t r = fetch_req("g", topics, 1);
    r.u.fetch.opts = (ks_fetch_opts_t){0};
    r.u.fetch.unset = KS_FETCH_UNSET_MAX | KS_FETCH_UNSET_WAIT | KS_FETCH_UNSET_DEADLINE;
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.fetch.opts.max, KS_CMD_DEFAULT_MAX);
    assert_int_equal(KS_CMD_DEFAULT_MAX, 100);
    assert_int_equal(r.u.fetch.opts.wait_ms, 777);
    assert_int_equal(r.u.fetch.opts.deadline_ms, 4321);
    assert_int_equal(r.u.fetch.unset, 0);
    /* Validating the filled-in request again changes nothing (ks_engine_submit does). */
    ks_cmd_req_t again = r;
    assert_int_equal(ks_cmd_validate(&cfg, &again, err, sizeof(err)), KS_OK);
    assert_memory_equal(&again.u.fetch.opts, &r.u.fetch.opts, sizeof(r.u.fetch.opts));
    /* A given wait_ms of 0 is no wait, not the default. */
    r = fetch_req("g", topics, 1);
    r.u.fetch.opts.wait_ms = 0;
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.fetch.opts.wait_ms, 0);
    /* The default max never passes fetch.max_records. */
    cfg.fetch_max_records = 20;
    r = fetch_req("g", topics, 1);
    r.u.fetch.unset |= KS_FETCH_UNSET_MAX;
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.fetch.opts.max, 20);
    ks_config_free(&cfg);
    ks_config_defaults(&cfg);
}

/* A subscriber's credits: 0 .. subscriber.max_credit_records / max_credit_bytes. */
static void test_fetch_credits(void **state)
{
    (void)state;
    const char *topics[] = {"t1"};
    ks_cmd_req_t r = fetch_req("g", topics, 1);
    r.u.fetch.opts.credit_records = -1;
    expect(r, KS_E_INVALID, "credits must not be negative");
    r.u.fetch.opts.credit_records = 0;
    r.u.fetch.opts.credit_bytes = -1;
    expect(r, KS_E_INVALID, "credits must not be negative");
    r.u.fetch.opts.credit_bytes = cfg.sub_max_credit_bytes;
    r.u.fetch.opts.credit_records = cfg.sub_max_credit_records;
    expect(r, KS_OK, NULL);
    r.u.fetch.opts.credit_records = cfg.sub_max_credit_records + 1;
    expect(r, KS_E_EXHAUSTED,
           "credits above the limit (subscriber.max_credit_records 100000, "
           "subscriber.max_credit_bytes 1073741824)");
    r.u.fetch.opts.credit_records = 1;
    r.u.fetch.opts.credit_bytes = cfg.sub_max_credit_bytes + 1;
    expect(r, KS_E_EXHAUSTED, "credits above the limit");
}

static void test_fetch_ranges(void **state)
{
    (void)state;
    const char *topics[] = {"t1"};
    ks_cmd_req_t r = fetch_req("g", topics, 1);
    r.u.fetch.opts.max = 0;
    expect(r, KS_E_INVALID, "max must be from 1 to 10000 (fetch.max_records), got 0");
    r.u.fetch.opts.max = cfg.fetch_max_records + 1;
    expect(r, KS_E_INVALID, "fetch.max_records");
    r.u.fetch.opts.max = cfg.fetch_max_records;
    expect(r, KS_OK, NULL);
    r.u.fetch.opts.wait_ms = -1;
    expect(r, KS_E_INVALID, "wait_ms must be from 0 to 60000 (fetch.max_wait_ms), got -1");
    r.u.fetch.opts.wait_ms = cfg.fetch_max_wait_ms;
    expect(r, KS_OK, NULL);
    r.u.fetch.unset = 0; /* a deadline given is checked, not replaced */
    r.u.fetch.opts.deadline_ms = cfg.lease_max_deadline_ms + 1;
    expect(r, KS_E_INVALID, "(lease.max_deadline_ms)");
    r.u.fetch.opts.deadline_ms = -1;
    expect(r, KS_E_INVALID, "(lease.max_deadline_ms)");
    r.u.fetch.opts.deadline_ms = 0; /* given as 0 (HTTP deadline_ms=0): no deadline is 0 ms */
    expect(r, KS_E_INVALID, "deadline_ms must be from 1 to 600000 (lease.max_deadline_ms), got 0");
    r.u.fetch.opts.deadline_ms = 1;
    expect(r, KS_OK, NULL);
    r.u.fetch.opts.deadline_ms = cfg.lease_max_deadline_ms;
    expect(r, KS_OK, NULL);
}

static void test_names_and_scopes(void **state)
{
    (void)state;
    const char *topics[] = {"t1"}, *internal[] = {"__consumer_offsets"}, *bad[] = {"a b"};
    expect(fetch_req("g", topics, 0), KS_E_INVALID, "name at least one topic");
    expect(fetch_req("g", internal, 1), KS_E_PERMISSION, "clients may not consume it");
    expect(fetch_req("g", bad, 1), KS_E_INVALID, "topic name \"a b\" is invalid");
    expect(fetch_req("no/slash", topics, 1), KS_E_INVALID, "group name");
    /* Checked first: the group, then the topics. */
    expect(fetch_req("no/slash", topics, 0), KS_E_INVALID, "group name");
    char pattern[] = "orders-*", *patterns[] = {pattern};
    char **saved = cfg.group_patterns;
    cfg.group_patterns = patterns;
    expect(fetch_req("payments", topics, 1), KS_E_PERMISSION,
           "group \"payments\" does not match any pattern in groups.allowed");
    expect(fetch_req("orders-1", topics, 1), KS_OK, NULL);
    cfg.group_patterns = saved;
    cfg.topics_allow_internal = true;
    expect(fetch_req("g", internal, 1), KS_OK, NULL);
    cfg.topics_allow_internal = false;
    char longsub[KS_NAME_MAX + 2];
    memset(longsub, 'x', sizeof(longsub) - 1);
    longsub[sizeof(longsub) - 1] = '\0';
    ks_cmd_req_t r = fetch_req("g", topics, 1);
    r.u.fetch.opts.subscriber = longsub;
    expect(r, KS_E_INVALID, "is too long");
}

static void test_settle_seek_produce(void **state)
{
    (void)state;
    const char *ids[] = {"x"};
    ks_cmd_req_t r = {.type = KS_CMD_SETTLE, .group = "g", .u.settle = {.op = KS_SETTLE_ACK}};
    expect(r, KS_E_INVALID, "ack_ids must hold 1 to 100000 ack ids, got 0");
    r.u.settle.ack_ids = ids;
    r.u.settle.n = 1;
    expect(r, KS_OK, NULL); /* the ids themselves are the group loop's to judge */
    /* At most KS_MAX_ACK_IDS per request, on every edge. */
    static const char *many[KS_MAX_ACK_IDS + 1];
    for (size_t i = 0; i <= KS_MAX_ACK_IDS; i++)
        many[i] = "x";
    r.u.settle.ack_ids = many;
    r.u.settle.n = KS_MAX_ACK_IDS;
    expect(r, KS_OK, NULL);
    r.u.settle.n = KS_MAX_ACK_IDS + 1;
    expect(r, KS_E_INVALID, "ack_ids must hold 1 to 100000 ack ids, got 100001");
    r.u.settle.ack_ids = ids;
    r.u.settle.n = 1;
    r.u.settle.op = KS_SETTLE_NACK;
    r.u.settle.ms = cfg.nack_max_delay_ms + 1;
    expect(r, KS_E_INVALID, "(nack.max_delay_ms)");
    r.u.settle.ms = -1;
    expect(r, KS_E_INVALID, "delay_ms must be from 0");
    r.u.settle.op = KS_SETTLE_EXTEND;
    r.u.settle.ms = 0;
    expect(r, KS_E_INVALID, "deadline_ms must be from 1 to 600000 (lease.max_deadline_ms), got 0");

    ks_cmd_req_t s = {.type = KS_CMD_SEEK,
                      .group = "g",
                      .u.seek = {.topic = "t", .partition = -1, .kind = KS_SEEK_OFFSET}};
    expect(s, KS_E_INVALID, "partition must be >= 0, got -1");
    s.u.seek.partition = 0;
    s.u.seek.value = -5;
    expect(s, KS_E_INVALID, "offset must be >= 0, got -5");
    s.u.seek.kind = KS_SEEK_TIMESTAMP;
    expect(s, KS_E_INVALID, "timestamp_ms must be >= 0, got -5");
    s.u.seek.value = 0;
    expect(s, KS_OK, NULL);
    s.u.seek.value = -5;
    s.u.seek.kind = KS_SEEK_LATEST;
    expect(s, KS_OK, NULL);
    s.u.seek.topic = "__x";
    expect(s, KS_E_PERMISSION, "clients may not seek it");
    /* Every partition of the topic: its partition is not looked at, the rest is. */
    s.u.seek.topic = "t";
    s.u.seek.all_partitions = true;
    s.u.seek.partition = -1;
    expect(s, KS_OK, NULL);
    s.u.seek.kind = KS_SEEK_OFFSET;
    expect(s, KS_E_INVALID, "offset must be >= 0, got -5");

    ks_produce_rec_t recs[2] = {{.topic = "t"}, {.topic = "__transaction_state"}};
    ks_cmd_req_t p = {.type = KS_CMD_PRODUCE, .u.produce = {.recs = recs, .n = 0}};
    expect(p, KS_E_INVALID, "records is empty");
    p.u.produce.n = 1;
    expect(p, KS_OK, NULL);
    p.u.produce.n = 2;
    expect(p, KS_E_PERMISSION, "clients may not produce to it");
}

static void test_status_and_no_reply_commands(void **state)
{
    (void)state;
    expect((ks_cmd_req_t){.type = KS_CMD_STATUS}, KS_OK, NULL); /* every group */
    expect((ks_cmd_req_t){.type = KS_CMD_STATUS, .group = ".."}, KS_E_INVALID, "group name");
    /* No reply to carry an error: not checked, the engine finds no such group. */
    expect((ks_cmd_req_t){.type = KS_CMD_RELEASE, .group = ".."}, KS_OK, NULL);
    expect((ks_cmd_req_t){.type = KS_CMD_DELIVERED, .group = ".."}, KS_OK, NULL);
    expect((ks_cmd_req_t){.type = KS_CMD_RELEASE_UNREAD, .group = ".."}, KS_OK, NULL);
    /* The engine's own: nothing to check (the engine refuses them from an edge). */
    expect((ks_cmd_req_t){.type = KS_CMD_STOP_DELIVERING}, KS_OK, NULL);
    expect((ks_cmd_req_t){.type = KS_CMD_SHUTDOWN}, KS_OK, NULL);
    expect((ks_cmd_req_t){.type = KS_CMD__CNT}, KS_E_INVALID, "unknown command");
}

/* A copy of r in a block of exactly the size ks_cmd_copy_size gives (so ASan sees an overrun). */
static ks_cmd_req_t *copy_of(const ks_cmd_req_t *r, char **buf, size_t *size)
{
    *size = ks_cmd_copy_size(r);
    *buf = malloc(*size ? *size : 1);
    ks_cmd_req_t *c = malloc(sizeof(*c));
    assert_non_null(*buf);
    assert_non_null(c);
    ks_cmd_copy(c, r, *buf);
    return c;
}

/* s is a copy of want inside [buf, buf + size). */
static void in_copy(const char *s, const char *want, const char *buf, size_t size)
{
    assert_non_null(s);
    assert_ptr_not_equal(s, want);
    assert_true(s >= buf && s + strlen(s) < buf + size);
    assert_string_equal(s, want);
}

static void test_copy_is_deep(void **state)
{
    (void)state;
    char group[] = "g", t1[] = "t1", t2[] = "topic-2", sub[] = "s#4";
    const char *topics[] = {t1, t2};
    ks_cmd_req_t f = fetch_req(group, topics, 2);
    f.u.fetch.opts.subscriber = sub;
    f.u.fetch.opts.max = 7;
    char *buf;
    size_t size;
    ks_cmd_req_t *c = copy_of(&f, &buf, &size);
    assert_int_equal(size,
                     2 * sizeof(char *) + sizeof(group) + sizeof(t1) + sizeof(t2) + sizeof(sub));
    memset(group, 'x', 1); /* the caller's strings change: the copy does not */
    memset(t1, 'x', 2);
    in_copy(c->group, "g", buf, size);
    assert_true((const char *)c->u.fetch.topics >= buf);
    in_copy(c->u.fetch.topics[0], "t1", buf, size);
    in_copy(c->u.fetch.topics[1], "topic-2", buf, size);
    in_copy(c->u.fetch.opts.subscriber, "s#4", buf, size);
    assert_int_equal(c->u.fetch.topic_cnt, 2);
    assert_int_equal(c->u.fetch.opts.max, 7);
    free(c);
    free(buf);

    /* A settle's ids and reason; no reason stays NULL. */
    const char *ids[] = {"id-1", "id-22", "id-333"};
    ks_cmd_req_t st = {.type = KS_CMD_SETTLE,
                       .group = "g",
                       .u.settle = {.op = KS_SETTLE_NACK, .ms = 5, .ack_ids = ids, .n = 3}};
    c = copy_of(&st, &buf, &size);
    for (size_t i = 0; i < 3; i++)
        in_copy(c->u.settle.ack_ids[i], ids[i], buf, size);
    assert_null(c->u.settle.reason);
    assert_int_equal(c->u.settle.ms, 5);
    free(c);
    free(buf);
    st.u.settle.reason = "poison";
    c = copy_of(&st, &buf, &size);
    in_copy(c->u.settle.reason, "poison", buf, size);
    free(c);
    free(buf);

    /* A seek's topic, a release's subscriber; STATUS of every group copies nothing. */
    ks_cmd_req_t sk = {.type = KS_CMD_SEEK, .group = "g", .u.seek = {.topic = "t", .value = 9}};
    c = copy_of(&sk, &buf, &size);
    in_copy(c->u.seek.topic, "t", buf, size);
    assert_int_equal(c->u.seek.value, 9);
    free(c);
    free(buf);
    ks_cmd_req_t rl = {.type = KS_CMD_RELEASE_UNREAD, .group = "g", .u.release = {"s#1"}};
    c = copy_of(&rl, &buf, &size);
    in_copy(c->u.release.subscriber, "s#1", buf, size);
    free(c);
    free(buf);
    ks_cmd_req_t all = {.type = KS_CMD_STATUS};
    assert_int_equal(ks_cmd_copy_size(&all), 0);
    c = copy_of(&all, &buf, &size);
    assert_null(c->group);
    free(c);
    free(buf);
}

static void test_validate_plain_form(void **state)
{
    (void)state;
    const char *topics[] = {"t1"};
    ks_cmd_req_t r = fetch_req("g", topics, 1);
    r.u.fetch.opts.hold_stalled = 1; /* without confirm it means nothing */
    r.u.fetch.opts.notify = 5;
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.fetch.opts.hold_stalled, 0);
    assert_int_equal(r.u.fetch.opts.notify, 1);
    r.u.fetch.opts.confirm = 1;
    r.u.fetch.opts.hold_stalled = 1;
    assert_int_equal(ks_cmd_validate(&cfg, &r, err, sizeof(err)), KS_OK);
    assert_int_equal(r.u.fetch.opts.hold_stalled, 1);

    /* The loop keeps a subscriber name in KS_SUBSCRIBER_KEY_MAX bytes: a longer one (a name
     * of KS_NAME_MAX with a long "#<digits>") is refused, not cut. */
    char sub[KS_SUBSCRIBER_KEY_MAX + 1];
    memset(sub, 's', KS_NAME_MAX);
    sub[KS_NAME_MAX] = '#';
    memset(sub + KS_NAME_MAX + 1, '7', sizeof(sub) - KS_NAME_MAX - 2);
    sub[sizeof(sub) - 1] = '\0';
    r.u.fetch.opts.subscriber = sub;
    expect(r, KS_E_INVALID, "is too long");
    sub[KS_SUBSCRIBER_KEY_MAX - 1] = '\0';
    expect(r, KS_OK, NULL);

    const char *ids[] = {"x"};
    ks_cmd_req_t st = {.type = KS_CMD_SETTLE,
                       .group = "g",
                       .u.settle = {.op = KS_SETTLE_NACK, .reason = "", .ack_ids = ids, .n = 1}};
    assert_int_equal(ks_cmd_validate(&cfg, &st, err, sizeof(err)), KS_OK);
    assert_null(st.u.settle.reason);   /* "" is no reason */
    st.u.settle.op = KS_SETTLE_EXTEND; /* dead_letter means nothing but on a nack */
    st.u.settle.ms = 1000;
    st.u.settle.dead_letter = true;
    assert_int_equal(ks_cmd_validate(&cfg, &st, err, sizeof(err)), KS_OK);
    assert_false(st.u.settle.dead_letter);
    st.u.settle.op = KS_SETTLE_NACK;
    st.u.settle.dead_letter = true;
    assert_int_equal(ks_cmd_validate(&cfg, &st, err, sizeof(err)), KS_OK);
    assert_true(st.u.settle.dead_letter);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_redrive),
        cmocka_unit_test(test_fetch_defaults),
        cmocka_unit_test(test_fetch_ranges),
        cmocka_unit_test(test_fetch_unset_defaults),
        cmocka_unit_test(test_fetch_credits),
        cmocka_unit_test(test_names_and_scopes),
        cmocka_unit_test(test_settle_seek_produce),
        cmocka_unit_test(test_status_and_no_reply_commands),
        cmocka_unit_test(test_copy_is_deep),
        cmocka_unit_test(test_validate_plain_form),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
