/* test_ack_id.c: tests the ack id text format: format/parse round trips, parse rejections and the
 * group hash (proxy/ack_id.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ack_id.h"

static ks_ack_id_t make_id(uint32_t instance, uint32_t group_hash, uint32_t epoch,
                           int32_t partition, int64_t offset, uint32_t attempt, const char *topic)
{
    ks_ack_id_t id;
    memset(&id, 0, sizeof(id));
    id.instance = instance;
    id.group_hash = group_hash;
    id.epoch = epoch;
    id.partition = partition;
    id.offset = offset;
    id.attempt = attempt;
    snprintf(id.topic, sizeof(id.topic), "%s", topic);
    return id;
}

static void round_trip(const ks_ack_id_t *id)
{
    char buf[KS_ACK_ID_MAX];
    size_t n = ks_ack_id_format(id, buf, sizeof(buf));
    assert_int_equal(n, strlen(buf));
    assert_true(n > 0 && n < KS_ACK_ID_MAX);
    ks_ack_id_t out;
    memset(&out, 0xa5, sizeof(out));
    if (ks_ack_id_parse(buf, &out) != 0)
        fail_msg("ks_ack_id_parse refused its own output: %s", buf);
    assert_int_equal(out.instance, id->instance);
    assert_int_equal(out.group_hash, id->group_hash);
    assert_int_equal(out.epoch, id->epoch);
    assert_int_equal(out.partition, id->partition);
    assert_int_equal(out.offset, id->offset);
    assert_int_equal(out.attempt, id->attempt);
    assert_string_equal(out.topic, id->topic);
    /* formatting the parse gives the same text */
    char again[KS_ACK_ID_MAX];
    ks_ack_id_format(&out, again, sizeof(again));
    assert_string_equal(again, buf);
}

static void test_wire_format(void **state)
{
    /* Pin the text form: ids handed out must stay parseable across versions. */
    ks_ack_id_t id = make_id(0xa, 0x1, 2, 3, 4, 5, "t");
    char buf[KS_ACK_ID_MAX];
    assert_int_equal(ks_ack_id_format(&id, buf, sizeof(buf)),
                     strlen("a10000000a00000001-2-3-4-5-t"));
    assert_string_equal(buf, "a10000000a00000001-2-3-4-5-t");

    id = make_id(0xdeadbeef, 0x0badf00d, 17, 0, 123456789, 1, "orders");
    ks_ack_id_format(&id, buf, sizeof(buf));
    assert_string_equal(buf, "a1deadbeef0badf00d-17-0-123456789-1-orders");

    /* The attempt is its own field: the smallest and the largest. */
    id.attempt = 0;
    ks_ack_id_format(&id, buf, sizeof(buf));
    assert_string_equal(buf, "a1deadbeef0badf00d-17-0-123456789-0-orders");
    id.attempt = UINT32_MAX;
    ks_ack_id_format(&id, buf, sizeof(buf));
    assert_string_equal(buf, "a1deadbeef0badf00d-17-0-123456789-4294967295-orders");
}

static void test_round_trip(void **state)
{
    ks_ack_id_t id = make_id(0xdeadbeef, ks_ack_id_group_hash("orders-group"), 7, 3, 12345, 2,
                             "orders.v1-eu_west");
    round_trip(&id);

    /* Attempts 0, 1 and UINT32_MAX with every other field at its smallest. */
    id = make_id(0, 0, 0, 0, 0, 0, "a");
    round_trip(&id);
    id.attempt = 1;
    round_trip(&id);
    id.attempt = UINT32_MAX;
    round_trip(&id);

    /* ... and at its largest. */
    id = make_id(UINT32_MAX, UINT32_MAX, UINT32_MAX, INT32_MAX, INT64_MAX, UINT32_MAX, "x.y-z_W9");
    round_trip(&id);
    id.attempt = 0;
    round_trip(&id);
    id.attempt = 1;
    round_trip(&id);
    id.attempt = UINT32_MAX;
    id.offset = INT64_MAX - 1;
    round_trip(&id);
    id.offset = (INT64_C(1) << 62) + 12345;
    round_trip(&id);

    /* Topic names made of only the allowed punctuation, and topics that look like more numeric
     * fields (they must come back as the topic, not shift the fields). */
    static const char *topics[] = {
        "...", "-", "_", "._-", "__consumer_offsets", "a.b.c", "A-Z", "7", "7-8", "0-0-t", "-1"};
    for (size_t i = 0; i < sizeof(topics) / sizeof(topics[0]); i++) {
        id = make_id(1, 2, 3, 4, 5, 6, topics[i]);
        round_trip(&id);
    }

    /* The longest topic (249 chars) with every field, the attempt included, at its largest:
     * still under the max. */
    char topic[250];
    for (int i = 0; i < 249; i++)
        topic[i] = "ab.-_9Z"[i % 7];
    topic[249] = '\0';
    id = make_id(UINT32_MAX, UINT32_MAX, UINT32_MAX, INT32_MAX, INT64_MAX, UINT32_MAX, topic);
    char big[2 * KS_ACK_ID_MAX];
    size_t n = ks_ack_id_format(&id, big, sizeof(big));
    /* "a1" + 16 hex + "-4294967295-2147483647-9223372036854775807-4294967295-" + 249 chars */
    assert_int_equal(n, 2 + 16 + 1 + 10 + 1 + 10 + 1 + 19 + 1 + 10 + 1 + 249);
    assert_true(n < KS_ACK_ID_MAX);
    round_trip(&id);
}

/* Builds "a1<16 hex>-" + rest. */
static void with_prefix(char *buf, size_t size, const char *rest)
{
    snprintf(buf, size, "a1deadbeef0badf00d-%s", rest);
}

static void expect_reject(const char *s)
{
    ks_ack_id_t out;
    if (ks_ack_id_parse(s, &out) != -1)
        fail_msg("ks_ack_id_parse accepted \"%s\" (offset %lld, attempt %u, topic \"%s\")", s,
                 (long long)out.offset, (unsigned)out.attempt, out.topic);
}

static void expect_reject_rest(const char *rest)
{
    char buf[1024];
    with_prefix(buf, sizeof(buf), rest);
    expect_reject(buf);
}

static void test_parse_accepts_control(void **state)
{
    /* The control case for the rejections below: the same prefix with a good tail. */
    char buf[256];
    ks_ack_id_t out;
    with_prefix(buf, sizeof(buf), "1-2-3-4-t");
    assert_int_equal(ks_ack_id_parse(buf, &out), 0);
    assert_int_equal(out.instance, 0xdeadbeef);
    assert_int_equal(out.group_hash, 0x0badf00d);
    assert_int_equal(out.epoch, 1);
    assert_int_equal(out.partition, 2);
    assert_int_equal(out.offset, 3);
    assert_int_equal(out.attempt, 4);
    assert_string_equal(out.topic, "t");
    /* Bounds that fit. */
    with_prefix(buf, sizeof(buf), "4294967295-2147483647-9223372036854775807-4294967295-t");
    assert_int_equal(ks_ack_id_parse(buf, &out), 0);
    assert_int_equal(out.epoch, UINT32_MAX);
    assert_int_equal(out.partition, INT32_MAX);
    assert_int_equal(out.offset, INT64_MAX);
    assert_int_equal(out.attempt, UINT32_MAX);
    /* Attempt 0, and a topic of digits and dashes after the attempt. */
    with_prefix(buf, sizeof(buf), "0-0-0-0-5-6");
    assert_int_equal(ks_ack_id_parse(buf, &out), 0);
    assert_int_equal(out.epoch, 0);
    assert_int_equal(out.partition, 0);
    assert_int_equal(out.offset, 0);
    assert_int_equal(out.attempt, 0);
    assert_string_equal(out.topic, "5-6");
}

static void test_parse_rejects_framing(void **state)
{
    expect_reject("");
    expect_reject("a");
    expect_reject("a1");
    expect_reject("a1deadbeef0badf00d");
    expect_reject("a1deadbeef0badf00d-");
    expect_reject("b1deadbeef0badf00d-1-2-3-4-t"); /* wrong prefix */
    expect_reject("A1deadbeef0badf00d-1-2-3-4-t");
    expect_reject("a2deadbeef0badf00d-1-2-3-4-t");
    expect_reject("1deadbeef0badf00d-1-2-3-4-t");
    expect_reject(" a1deadbeef0badf00d-1-2-3-4-t");
    /* bad hex: uppercase, non-hex, too short, too long, missing separator */
    expect_reject("a1DEADBEEF0badf00d-1-2-3-4-t");
    expect_reject("a1deadbeef0BADF00D-1-2-3-4-t");
    expect_reject("a1deadbeeg0badf00d-1-2-3-4-t");
    expect_reject("a1deadbeef0badf00z-1-2-3-4-t");
    expect_reject("a1deadbeef0badf00-1-2-3-4-t");
    expect_reject("a1deadbeef0badf00d0-1-2-3-4-t");
    expect_reject("a1deadbeef-0badf00d-1-2-3-4-t");
    expect_reject("a1deadbeef0badf00d_1-2-3-4-t");
    expect_reject("a1 deadbeef0badf00d-1-2-3-4-t");
}

static void test_parse_rejects_fields(void **state)
{
    /* missing fields */
    expect_reject_rest("1-2-3-4");
    expect_reject_rest("1-2-3-4-");
    expect_reject_rest("1-2-3");
    expect_reject_rest("1-2-3-");
    expect_reject_rest("1-2");
    expect_reject_rest("1");
    expect_reject_rest("");
    expect_reject_rest("-2-3-4-t");
    expect_reject_rest("1--3-4-t");
    expect_reject_rest("1-2--4-t");
    expect_reject_rest("1-2-3--t");
    expect_reject_rest("t");
    /* missing attempt: the old format without it */
    expect_reject_rest("1-2-3-t");
    expect_reject_rest("1-2-3-orders");
    expect_reject("a10000000a00000001-2-3-4-t");
    /* non-digits */
    expect_reject_rest("x-2-3-4-t");
    expect_reject_rest("1-y-3-4-t");
    expect_reject_rest("1-2-z-4-t");
    expect_reject_rest("1-2-3-w-t");
    expect_reject_rest("1a-2-3-4-t");
    expect_reject_rest("1-2a-3-4-t");
    expect_reject_rest("1-2-3a-4-t");
    expect_reject_rest("1-2-3-4a-t");
    expect_reject_rest("1-2-0x3-4-t");
    expect_reject_rest("1-2-3-0x4-t");
    expect_reject_rest("1-2- 3-4-t");
    expect_reject_rest("1-2-3- 4-t");
    expect_reject_rest("1-2-3-4 -t");
    expect_reject_rest("1-2-3.5-4-t");
    expect_reject_rest("1-2-3-4.5-t");
    expect_reject_rest("1-2-3-4e0-t");
    /* negative numbers */
    expect_reject_rest("-1-2-3-4-t");
    expect_reject_rest("1--2-3-4-t");
    expect_reject_rest("1-2--3-4-t");
    expect_reject_rest("1-2-3--4-t");
    expect_reject_rest("+1-2-3-4-t");
    expect_reject_rest("1-2-3-+4-t");
    /* invalid topics */
    expect_reject_rest("1-2-3-4-a/b");
    expect_reject_rest("1-2-3-4-a b");
    expect_reject_rest("1-2-3-4-.");
    expect_reject_rest("1-2-3-4-..");
    expect_reject_rest("1-2-3-4-t\n");
    expect_reject_rest("1-2-3-4-t:x");
    expect_reject_rest("1-2-3-4-t*");
    char rest[300];
    memcpy(rest, "1-2-3-4-", 8);
    memset(rest + 8, 'a', 250); /* 250-char topic */
    rest[258] = '\0';
    expect_reject_rest(rest);
}

static void test_parse_rejects_overflow(void **state)
{
    /* one past each field's range */
    expect_reject_rest("4294967296-2-3-4-t");
    expect_reject_rest("99999999999-2-3-4-t");
    expect_reject_rest("1-2147483648-3-4-t");
    expect_reject_rest("1-4294967296-3-4-t");
    expect_reject_rest("1-2-9223372036854775808-4-t");
    expect_reject_rest("1-2-99999999999999999999-4-t");
    expect_reject_rest("1-2-18446744073709551615-4-t");
    expect_reject_rest("1-2-3-4294967296-t");
    expect_reject_rest("1-2-3-4294967300-t");
    expect_reject_rest("1-2-3-99999999999-t");
    expect_reject_rest("1-2-3-9223372036854775807-t");
    expect_reject_rest("1-2-3-18446744073709551615-t");
    expect_reject_rest("1-2-3-18446744073709551616-t"); /* 2^64: wraps to 0 */
    expect_reject_rest("1-2-3-99999999999999999999-t");
}

/* Offsets of 20 digits whose value wraps an unsigned 64-bit accumulator back into range:
 * 18446744073709551616 is 2^64 (wraps to 0), 18446744073709551620 wraps to 4. Both are far
 * above INT64_MAX and must be refused, not read as small offsets. */
static void test_parse_rejects_wrapping_offset(void **state)
{
    expect_reject_rest("1-2-18446744073709551616-4-t");
    expect_reject_rest("1-2-18446744073709551620-4-t");
    expect_reject_rest("1-2-18446744073709561615-4-t");
}

static void test_parse_rejects_overlong(void **state)
{
    char buf[2048];
    /* Structurally valid (leading zeros) but KS_ACK_ID_MAX chars long, and much longer. */
    size_t pad = KS_ACK_ID_MAX - strlen("a1deadbeef0badf00d-") - strlen("1-2-3-4-t");
    char rest[KS_ACK_ID_MAX + 16];
    memset(rest, '0', pad);
    snprintf(rest + pad, sizeof(rest) - pad, "1-2-3-4-t");
    with_prefix(buf, sizeof(buf), rest);
    assert_int_equal(strlen(buf), KS_ACK_ID_MAX);
    expect_reject(buf);
    /* One char shorter (KS_ACK_ID_MAX - 1 chars) still parses: the zeros are only padding. */
    with_prefix(buf, sizeof(buf), rest + 1);
    assert_int_equal(strlen(buf), KS_ACK_ID_MAX - 1);
    ks_ack_id_t out;
    assert_int_equal(ks_ack_id_parse(buf, &out), 0);
    assert_int_equal(out.epoch, 1);
    assert_int_equal(out.attempt, 4);
    assert_string_equal(out.topic, "t");

    memset(buf, 'a', sizeof(buf) - 1);
    buf[sizeof(buf) - 1] = '\0';
    memcpy(buf, "a1deadbeef0badf00d-1-2-3-4-", strlen("a1deadbeef0badf00d-1-2-3-4-"));
    expect_reject(buf);
}

static void test_group_hash(void **state)
{
    /* FNV-1a 32-bit reference values. */
    assert_int_equal(ks_ack_id_group_hash(""), 0x811c9dc5u);
    assert_int_equal(ks_ack_id_group_hash("a"), 0xe40c292cu);
    assert_int_equal(ks_ack_id_group_hash("foobar"), 0xbf9cf968u);

    /* Stable, and different for different groups. */
    uint32_t h1 = ks_ack_id_group_hash("orders");
    assert_int_equal(ks_ack_id_group_hash("orders"), h1);
    assert_int_not_equal(ks_ack_id_group_hash("payments"), h1);
    assert_int_not_equal(ks_ack_id_group_hash("Orders"), h1);
    assert_int_not_equal(ks_ack_id_group_hash("orders2"), h1);
    assert_int_not_equal(ks_ack_id_group_hash("order"), h1);
    assert_int_not_equal(ks_ack_id_group_hash("a"), ks_ack_id_group_hash("b"));

    /* No collisions among a small family of similar names. */
    enum { N = 500 };
    uint32_t hs[N];
    for (int i = 0; i < N; i++) {
        char g[32];
        snprintf(g, sizeof(g), "group-%d", i);
        hs[i] = ks_ack_id_group_hash(g);
        for (int j = 0; j < i; j++)
            if (hs[j] == hs[i])
                fail_msg("group-%d and group-%d hash alike", j, i);
    }

    /* The hash survives a round trip inside an id. */
    ks_ack_id_t id = make_id(9, ks_ack_id_group_hash("payments"), 1, 1, 1, 1, "p");
    char buf[KS_ACK_ID_MAX];
    ks_ack_id_format(&id, buf, sizeof(buf));
    ks_ack_id_t out;
    assert_int_equal(ks_ack_id_parse(buf, &out), 0);
    assert_int_equal(out.group_hash, ks_ack_id_group_hash("payments"));
    assert_int_not_equal(out.group_hash, ks_ack_id_group_hash("orders"));
}

/* The writer gives the same text as ks_ack_id_write for every id of a run, whatever
 * changes from one id to the next (partition, also to one of the same slot, epoch,
 * instance, topic, or nothing). */
static void test_writer_matches_write(void **state)
{
    static const char t1[] = "orders", t2[] = "orders.v2", t3[] = "orders"; /* t3: t1's text */
    struct {
        uint32_t inst, hash, epoch;
        int32_t part;
        int64_t off;
        uint32_t att;
        const char *topic;
    } seq[] = {
        {1, 2, 3, 0, 0, 1, t1},
        {1, 2, 3, 0, 1, 1, t1},
        {1, 2, 3, 0, 99, 7, t1},
        {1, 2, 3, 1, 5, 1, t1},
        {1, 2, 4, 1, 6, 1, t1},
        {1, 9, 4, 1, 6, 1, t1},
        {8, 9, 4, 1, 6, 1, t1},
        {8, 9, 4, 1, 7, 2, t2},
        {8, 9, 4, 1, 8, 2, t3},
        {8, 9, 4, 1, 8, 2, t3},
        {UINT32_MAX, UINT32_MAX, UINT32_MAX, INT32_MAX, INT64_MAX, UINT32_MAX, t2},
        {0, 0, 0, 0, 0, 0, t1},
    };
    ks_ack_id_writer_t w = {0};
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        char a[KS_ACK_ID_MAX], b[KS_ACK_ID_MAX];
        size_t na =
            ks_ack_id_write(a, sizeof(a), seq[i].inst, seq[i].hash, seq[i].epoch, seq[i].part,
                            seq[i].off, seq[i].att, seq[i].topic, strlen(seq[i].topic));
        size_t nb = ks_ack_id_writer_put(&w, b, sizeof(b), seq[i].inst, seq[i].hash, seq[i].epoch,
                                         seq[i].part, seq[i].off, seq[i].att, seq[i].topic);
        if (na != nb || strcmp(a, b) != 0)
            fail_msg("id %zu: writer gave %s, ks_ack_id_write %s", i, b, a);
    }
}

/* Partitions in turn, more of them than the writer has slots (two partitions to a slot),
 * over a writer started with ks_ack_id_writer_init over stale bytes: each id is what
 * ks_ack_id_write gives. */
static void test_writer_partitions_in_turn(void **state)
{
    (void)state;
    static ks_ack_id_writer_t w;
    memset(&w, 0xA5, sizeof(w)); /* what a stack might hold */
    ks_ack_id_writer_init(&w);
    const char *topics[2] = {"orders", "payments"};
    for (int64_t off = 0; off < 3; off++) {
        for (int32_t part = 0; part < 2 * KS_ACK_ID_WRITER_SLOTS; part++) {
            const char *t = topics[(part / KS_ACK_ID_WRITER_SLOTS + off) % 2];
            char a[KS_ACK_ID_MAX], b[KS_ACK_ID_MAX];
            size_t na = ks_ack_id_write(a, sizeof(a), 7, 9, (uint32_t)off, part, off * 1000 + part,
                                        1, t, strlen(t));
            size_t nb = ks_ack_id_writer_put(&w, b, sizeof(b), 7, 9, (uint32_t)off, part,
                                             off * 1000 + part, 1, t);
            if (na != nb || strcmp(a, b) != 0)
                fail_msg("partition %d offset %lld: writer gave %s, ks_ack_id_write %s", part,
                         (long long)off, b, a);
        }
    }
}

/* Parsing through the cache gives what parsing alone gives, for runs that share a
 * partition's head, alternate partitions, differ in instance or topic, or turn malformed
 * after well-formed ids. */
static void test_parse_cached_matches_parse(void **state)
{
    const char *seq[] = {
        "a10000000a00000001-2-3-4-5-t",
        "a10000000a00000001-2-3-5-1-t",
        "a10000000a00000001-2-19-5-1-t", /* another partition, the same slot (19 & 15 == 3) */
        "a10000000a00000001-2-3-6-1-t2",
        "a10000000a00000001-2-3-7-1-t/2", /* a bad topic after good ones */
        "a10000000a00000001-2-3-8-1-t",
        "a10000000a00000001-2-3-", /* the head alone */
        "a10000000a00000001-2-3",  /* shorter than the head */
        "a10000000a0000000",       /* shorter than the lead */
        "a10000000a00000001-2-3-9-1-t",
        "a10000000a00000001-2-4-9-1-t",  /* another partition */
        "a10000000a00000001-2-3-10-1-t", /* back to the first */
        "a10000000a00000001-2-4-x-1-t",  /* a bad offset */
        "a10000000a00000001-2-4-10-1-",  /* no topic */
        "a10000000a00000001-2-4-10-1-t",
        "a10000000b00000001-2-4-10-1-t", /* another instance */
        "a10000000b0000000g-2-4-10-1-t", /* a bad hex digit */
        "a10000000b00000001+2-4-10-1-t", /* no '-' after the hex */
        "a10000000b00000001-2-4-10-1-t\x01",
        "a10000000b00000001-2-4-10-1-t",
        "",
        "a10000000b00000001-2-4-11-1-t",
    };
    ks_ack_parse_cache_t c = {0};
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        ks_ack_ref_t a, b;
        int ra = ks_ack_id_parse_ref(seq[i], &a);
        int rb = ks_ack_id_parse_ref_cached(seq[i], &b, &c);
        if (ra != rb || a.ok != b.ok)
            fail_msg("id %zu (%s): parsed alone %d, through the cache %d", i, seq[i], ra, rb);
        if (a.ok) {
            assert_int_equal(a.instance, b.instance);
            assert_int_equal(a.group_hash, b.group_hash);
            assert_int_equal(a.epoch, b.epoch);
            assert_int_equal(a.partition, b.partition);
            assert_int_equal(a.offset, b.offset);
            assert_int_equal(a.attempt, b.attempt);
            assert_string_equal(a.topic, b.topic);
        }
    }
}

/* The range form: "<first>~<last>" in the offset field, first <= last, at most
 * KS_ACK_RANGE_MAX offsets; the single-id parser refuses it. */
static void test_range(void **state)
{
    (void)state;
    ks_ack_ref_t r;
    assert_int_equal(ks_ack_id_parse_ref("a10000000a00000001-2-3-10~19-4-t", &r), 0);
    assert_true(r.ok && r.range);
    assert_int_equal(r.offset, 10);
    assert_int_equal(r.last, 19);
    assert_int_equal(r.attempt, 4);
    assert_int_equal(r.partition, 3);
    assert_string_equal(r.topic, "t");
    assert_int_equal(ks_ack_id_count("a10000000a00000001-2-3-10~19-4-t"), 10);
    assert_int_equal(ks_ack_id_parse_ref("a10000000a00000001-2-3-7~7-4-t", &r), 0);
    assert_int_equal(r.last, 7);
    /* A single id: last is its offset. */
    assert_int_equal(ks_ack_id_parse_ref("a10000000a00000001-2-3-10-4-t", &r), 0);
    assert_false(r.range);
    assert_int_equal(r.last, 10);
    assert_int_equal(ks_ack_id_count("a10000000a00000001-2-3-10-4-t"), 1);
    /* Reversed, empty ends, too long, doubled: malformed, and a malformed range counts 1. */
    static const char *const bad[] = {
        "a10000000a00000001-2-3-19~10-4-t",
        "a10000000a00000001-2-3-~10-4-t",
        "a10000000a00000001-2-3-10~-4-t",
        "a10000000a00000001-2-3-0~8000-4-t",
        "a10000000a00000001-2-3-1~2~3-4-t",
        "a10000000a00000001-2-3-1-4~5-t",
        "a10000000a00000001-2~3-3-1-4-t",
        /* last padded with zeros: an id of any length would otherwise parse */
        "a10000000a00000001-2-3-0~000000000000000000001-4-t",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (ks_ack_id_parse_ref(bad[i], &r) == 0)
            fail_msg("%s parsed", bad[i]);
        assert_int_equal(ks_ack_id_count(bad[i]), 1);
    }
    assert_true(ks_ack_id_parse_ref("a10000000a00000001-2-3-19~10-4-t", &r) < 0 && r.range);
    assert_int_equal(ks_ack_id_parse_ref("a10000000a00000001-2-3-0~7999-4-t", &r), 0);
    assert_int_equal(ks_ack_id_count("a10000000a00000001-2-3-0~7999-4-t"), 8000);
    /* Up to the largest offset; 19 digits after a "~" of at most 20 bytes. */
    assert_int_equal(ks_ack_id_parse_ref(
                         "a10000000a00000001-2-3-9223372036854775806~9223372036854775807-4-t", &r),
                     0);
    assert_int_equal(r.last, INT64_MAX);
    assert_int_equal(ks_ack_id_count("a10000000a00000001-2-3-0~0000000000000000001-4-t"), 2);
    /* The single-id parser refuses a range, as an older server does. */
    ks_ack_id_t id;
    assert_true(ks_ack_id_parse("a10000000a00000001-2-3-10~19-4-t", &id) < 0);
    /* The cached parser agrees. */
    ks_ack_parse_cache_t c = {0};
    assert_int_equal(ks_ack_id_parse_ref_cached("a10000000a00000001-2-3-10~19-4-t", &r, &c), 0);
    assert_int_equal(r.last, 19);
    /* One offset of a range as its own id; a single id as itself. */
    char buf[KS_ACK_ID_MAX];
    ks_ack_id_nth("a10000000a00000001-2-3-10~19-4-t", 3, buf, sizeof(buf));
    assert_string_equal(buf, "a10000000a00000001-2-3-13-4-t");
    ks_ack_id_nth("a10000000a00000001-2-3-10-4-t", 0, buf, sizeof(buf));
    assert_string_equal(buf, "a10000000a00000001-2-3-10-4-t");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_format),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_parse_accepts_control),
        cmocka_unit_test(test_parse_rejects_framing),
        cmocka_unit_test(test_parse_rejects_fields),
        cmocka_unit_test(test_parse_rejects_overflow),
        cmocka_unit_test(test_parse_rejects_wrapping_offset),
        cmocka_unit_test(test_parse_rejects_overlong),
        cmocka_unit_test(test_group_hash),
        cmocka_unit_test(test_writer_matches_write),
        cmocka_unit_test(test_writer_partitions_in_turn),
        cmocka_unit_test(test_parse_cached_matches_parse),
        cmocka_unit_test(test_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
