/* test_grpc_wire.c: the gRPC edge's hand-written encoders (api/grpc/grpc_wire.c, reached by
 * including the file) write byte for byte what protobuf-c packs for the same messages, and
 * the fast ack decoder reads back the acks protobuf-c packs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../api/grpc/grpc_wire.c"
#include "util.h"

/* The bytes of bb, as one slice. */
static void assert_bb_equals(grpc_byte_buffer *bb, const uint8_t *want, size_t want_len)
{
    grpc_slice sl = grpc_flatten(bb);
    assert_int_equal(GRPC_SLICE_LENGTH(sl), want_len);
    assert_memory_equal(GRPC_SLICE_START_PTR(sl), want, want_len);
    grpc_slice_unref(sl);
    grpc_byte_buffer_destroy(bb);
}

static uint8_t *pack_pb(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(*len + 1);
    assert_non_null(buf);
    assert_int_equal(protobuf_c_message_pack(m, buf), *len);
    return buf;
}

/* Encodes the records with encode_records, as a FetchResponse and as
 * SubscribeResponse{batch}, and compares both with protobuf-c's packing of the same
 * records (ack ids as ks_record_ack_id writes them). */
static void check_records(ks_record_t *recs, size_t n)
{
    ks_batch_t b = {.cnt = n, .recs = recs};
    Ksidecar__V1__Record *pr = calloc(n + 1, sizeof(*pr));
    Ksidecar__V1__Record **pp = calloc(n + 1, sizeof(*pp));
    char(*ids)[KS_ACK_ID_MAX] = calloc(n + 1, KS_ACK_ID_MAX);
    size_t nh = 0;
    for (size_t i = 0; i < n; i++)
        nh += recs[i].header_cnt;
    Ksidecar__V1__Header *hs = calloc(nh + 1, sizeof(*hs));
    Ksidecar__V1__Header **hp = calloc(nh + 1, sizeof(*hp));
    assert_true(pr && pp && ids && hs && hp);
    size_t h = 0;
    for (size_t i = 0; i < n; i++) {
        const ks_record_t *r = &recs[i];
        ksidecar__v1__record__init(&pr[i]);
        pr[i].topic = (char *)(uintptr_t)r->topic;
        pr[i].partition = r->partition;
        pr[i].offset = r->offset;
        pr[i].timestamp_ms = r->timestamp;
        pr[i].key.data = (uint8_t *)(uintptr_t)r->key;
        pr[i].key.len = r->key_len;
        pr[i].key_null = r->key == NULL;
        pr[i].value.data = (uint8_t *)(uintptr_t)r->value;
        pr[i].value.len = r->value_len;
        pr[i].value_null = r->value == NULL;
        pr[i].n_headers = r->header_cnt;
        pr[i].headers = &hp[h];
        for (size_t k = 0; k < r->header_cnt; k++, h++) {
            ksidecar__v1__header__init(&hs[h]);
            hs[h].key = (char *)(uintptr_t)r->headers[k].name;
            hs[h].value.data = (uint8_t *)(uintptr_t)r->headers[k].value;
            hs[h].value.len = r->headers[k].value_len;
            hs[h].value_null = r->headers[k].value == NULL;
            hp[h] = &hs[h];
        }
        ks_record_ack_id(r, ids[i], KS_ACK_ID_MAX);
        pr[i].ack_id = ids[i];
        pr[i].attempt = r->attempt;
        pr[i].ordering_chain = r->ordering_chain;
        pp[i] = &pr[i];
    }
    Ksidecar__V1__FetchResponse fr = KSIDECAR__V1__FETCH_RESPONSE__INIT;
    fr.n_records = n;
    fr.records = pp;
    size_t len;
    uint8_t *want = pack_pb(&fr.base, &len);
    assert_bb_equals(encode_records(&b, false), want, len);
    free(want);

    Ksidecar__V1__RecordBatch rb = KSIDECAR__V1__RECORD_BATCH__INIT;
    rb.n_records = n;
    rb.records = pp;
    Ksidecar__V1__SubscribeResponse sr = KSIDECAR__V1__SUBSCRIBE_RESPONSE__INIT;
    sr.kind_case = KSIDECAR__V1__SUBSCRIBE_RESPONSE__KIND_BATCH;
    sr.batch = &rb;
    want = pack_pb(&sr.base, &len);
    assert_bb_equals(encode_records(&b, true), want, len);
    free(want);
    free(pr);
    free(pp);
    free(ids);
    free(hs);
    free(hp);
}

static ks_record_t rec(const char *topic, int32_t partition, int64_t offset, const char *key,
                       const char *value)
{
    return (ks_record_t){.topic = topic,
                         .partition = partition,
                         .offset = offset,
                         .timestamp = 1700000000123,
                         .key = key,
                         .key_len = key ? strlen(key) : 0,
                         .value = value,
                         .value_len = value ? strlen(value) : 0,
                         .ack_instance = 0xa18bea1b,
                         .ack_group_hash = 0x5d43ce1e,
                         .ack_epoch = 1,
                         .attempt = 1};
}

static void test_plain_records(void **state)
{
    ks_record_t r[2] = {rec("orders", 3, 42, "k1", "v1"), rec("orders", 0, 0, "k2", "v2")};
    check_records(r, 1);
    check_records(r, 2);
}

static void test_null_and_empty_keys_and_values(void **state)
{
    ks_record_t r[4] = {
        rec("t", 1, 7, NULL, "value, no key"), rec("t", 1, 8, "tombstone", NULL),
        rec("t", 1, 9, NULL, NULL), rec("t", 1, 10, "", ""), /* empty, not null: no field at all */
    };
    check_records(r, 4);
}

static void test_headers(void **state)
{
    static const ks_header_t hs[] = {
        {.name = "trace", .value = "abc", .value_len = 3},
        {.name = "", .value = "no name", .value_len = 7},
        {.name = "null-value", .value = NULL, .value_len = 0},
        {.name = "empty-value", .value = "", .value_len = 0},
        {.name = "binary", .value = "\x00\xff\x80", .value_len = 3},
    };
    ks_record_t r[2] = {rec("h", 2, 100, "k", "v"), rec("h", 2, 101, NULL, NULL)};
    r[0].headers = hs;
    r[0].header_cnt = 5;
    r[1].headers = &hs[2];
    r[1].header_cnt = 1;
    check_records(r, 2);
}

static void test_large_numbers(void **state)
{
    ks_record_t r[4] = {rec("big", INT32_MAX, INT64_MAX, "k", "v"), rec("big", 0, 0, "k", "v"),
                        rec("big", 1, ((int64_t)1 << 35) + 5, "k", "v"),
                        rec("big", 5, 127, "k", "v")};
    r[0].attempt = INT32_MAX;
    r[0].ack_epoch = UINT32_MAX;
    r[1].timestamp = -1; /* unknown: ten varint bytes, as protobuf-c writes an int64 -1 */
    r[1].attempt = 0;
    r[2].timestamp = 0;
    r[3].offset = 128; /* the first two-byte varint */
    check_records(r, 4);
}

static void test_ordering_chain(void **state)
{
    ks_record_t r[4] = {rec("o", 0, 1, "k", "v"), rec("o", 0, 2, "k", "v"),
                        rec("o", 0, 3, NULL, "v"), rec("o", 0, 4, "k", "v")};
    r[0].ordering_chain = 1;
    r[1].ordering_chain = UINT64_MAX; /* ten varint bytes */
    r[2].ordering_chain = 0;          /* no chain: no field */
    r[3].ordering_chain = 0x8000000000000000ull;
    check_records(r, 4);
}

static void test_long_values_and_many_records(void **state)
{
    /* Lengths that need two and three varint bytes, in records and in the batch. */
    size_t big = 70000;
    char *v = malloc(big + 1);
    assert_non_null(v);
    for (size_t i = 0; i < big; i++)
        v[i] = (char)('a' + i % 26);
    v[big] = '\0';
    ks_record_t one[2] = {rec("long", 0, 1, v + big - 200, v), rec("long", 0, 2, "k", v + 1000)};
    check_records(one, 2);
    size_t n = 1500;
    ks_record_t *many = calloc(n, sizeof(*many));
    assert_non_null(many);
    for (size_t i = 0; i < n; i++)
        many[i] = rec(i % 2 ? "a" : "another-topic", (int32_t)(i % 7), (int64_t)i * 1000, "key",
                      v + big - i % 300);
    check_records(many, n);
    free(many);
    free(v);
}

static void test_empty_batch(void **state)
{
    check_records(NULL, 0);
}

/* encode_ack_results against protobuf-c's SubscribeResponse{ack_results}: an accepted ack
 * carries no message on the stream, a refused one its reason. One known difference: an
 * empty ack id (only a client's bad input gives one) is written as an explicit empty field
 * (0a 00), which protobuf-c leaves out; both read back as the same message. With empty ids
 * in ids, the bytes are compared after protobuf-c reads ours back and packs it again. */
static void check_ack_results(const char *const *ids, const ks_ack_result_t *res, size_t n)
{
    char **block = ks_strv_pack(ids, n);
    settle_ctx_t x = {.ids = block, .n = n, .nres = n, .stream = true};
    Ksidecar__V1__AckResult *rs = calloc(n + 1, sizeof(*rs));
    Ksidecar__V1__AckResult **rp = calloc(n + 1, sizeof(*rp));
    assert_true(rs && rp);
    for (size_t i = 0; i < n; i++) {
        ksidecar__v1__ack_result__init(&rs[i]);
        rs[i].ack_id = (char *)(uintptr_t)ids[i];
        rs[i].status = ack_result_status(&res[i]);
        bool says = res[i].status != KS_OK || res[i].commit == KS_COMMIT_LOST ||
                    res[i].commit == KS_COMMIT_FAILED;
        rs[i].message = (char *)(uintptr_t)(says && res[i].reason ? res[i].reason : "");
        rs[i].committed_offset = res[i].commit ? res[i].committed_offset : 0;
        rp[i] = &rs[i];
    }
    Ksidecar__V1__AckResults ar = KSIDECAR__V1__ACK_RESULTS__INIT;
    ar.n_results = n;
    ar.results = rp;
    Ksidecar__V1__SubscribeResponse sr = KSIDECAR__V1__SUBSCRIBE_RESPONSE__INIT;
    sr.kind_case = KSIDECAR__V1__SUBSCRIBE_RESPONSE__KIND_ACK_RESULTS;
    sr.ack_results = &ar;
    size_t len, empties = 0;
    for (size_t i = 0; i < n; i++)
        empties += !*ids[i];
    uint8_t *want = pack_pb(&sr.base, &len);
    grpc_byte_buffer *ours = encode_ack_results(&x, res);
    if (empties) {
        grpc_slice sl = grpc_flatten(ours);
        grpc_byte_buffer_destroy(ours);
        size_t l = GRPC_SLICE_LENGTH(sl);
        assert_true(l >= len + 2 * empties);
        Ksidecar__V1__SubscribeResponse *back =
            ksidecar__v1__subscribe_response__unpack(NULL, l, GRPC_SLICE_START_PTR(sl));
        assert_non_null(back);
        size_t blen;
        uint8_t *again = pack_pb(&back->base, &blen);
        assert_int_equal(blen, len);
        assert_memory_equal(again, want, len);
        free(again);
        ksidecar__v1__subscribe_response__free_unpacked(back, NULL);
        grpc_slice_unref(sl);
    } else {
        assert_bb_equals(ours, want, len);
    }
    free(want);
    free(rs);
    free(rp);
    free(block);
}

/* By position: a range id's results one per offset, only the refused ones written, each with
 * its offset's own id and its entry's position, and the accepted count. */
static void test_ack_results_by_position(void **state)
{
    (void)state;
    static const char *const ids[] = {"a18bea1b5d43ce1e18-1-0-5-1-demo",
                                      "a18bea1b5d43ce1e18-1-0-10~13-1-demo", "bad~"};
    static const ks_ack_result_t res[] = {
        {.status = KS_OK},
        {.status = KS_OK},
        {.status = KS_E_STALE, .reason = "stale"},
        {.status = KS_OK},
        {.status = KS_E_NOT_FOUND, .reason = "unknown"},
        {.status = KS_E_INVALID, .reason = "malformed"},
    };
    char **block = ks_strv_pack(ids, 3);
    settle_ctx_t x = {.ids = block, .n = 3, .nres = 6, .stream = true, .by_position = true};
    grpc_byte_buffer *bb = encode_ack_results(&x, res);
    grpc_slice sl = grpc_flatten(bb);
    grpc_byte_buffer_destroy(bb);
    Ksidecar__V1__SubscribeResponse *back = ksidecar__v1__subscribe_response__unpack(
        NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
    assert_non_null(back);
    Ksidecar__V1__AckResults *ar = back->ack_results;
    assert_int_equal(ar->accepted, 3);
    assert_int_equal(ar->n_results, 3);
    assert_string_equal(ar->results[0]->ack_id, "a18bea1b5d43ce1e18-1-0-11-1-demo");
    assert_int_equal(ar->results[0]->position, 1);
    assert_int_equal(ar->results[0]->status, KSIDECAR__V1__ACK_STATUS__STALE);
    assert_string_equal(ar->results[1]->ack_id, "a18bea1b5d43ce1e18-1-0-13-1-demo");
    assert_int_equal(ar->results[1]->position, 1);
    assert_string_equal(ar->results[2]->ack_id, "bad~");
    assert_int_equal(ar->results[2]->position, 2);
    assert_int_equal(ar->results[2]->status, KSIDECAR__V1__ACK_STATUS__INVALID);
    ksidecar__v1__subscribe_response__free_unpacked(back, NULL);
    grpc_slice_unref(sl);
    free(block);
}

static void test_ack_results(void **state)
{
    static const char *const ids[] = {"a18bea1b5d43ce1e18-1-0-0-1-demo", "", "x", "y", "z", "w"};
    static const ks_ack_result_t res[] = {
        {.status = KS_OK, .reason = NULL},
        {.status = KS_E_INVALID, .reason = "not an ack id"},
        {.status = KS_E_NOT_FOUND, .reason = NULL},
        {.status = KS_E_STALE, .reason = "the partition moved"},
        {.status = KS_OK, .reason = "accepted, said nothing"},
        {.status = KS_E_UNAVAILABLE, .reason = "the group is closing"},
    };
    check_ack_results(ids, res, 6);
    check_ack_results(ids, res, 1);
    check_ack_results(ids + 2, res + 2, 4);
    /* Many results, and a long id: multi-byte lengths at every level. */
    size_t n = 2000;
    const char **many = calloc(n, sizeof(*many));
    ks_ack_result_t *mres = calloc(n, sizeof(*mres));
    char *longid = malloc(301);
    assert_true(many && mres && longid);
    memset(longid, 'q', 300);
    longid[300] = '\0';
    for (size_t i = 0; i < n; i++) {
        many[i] = i % 100 ? ids[0] : longid;
        mres[i] = res[i % 6];
    }
    check_ack_results(many, mres, n);
    /* A stream's second answer to acks that waited for their commit: the commit state as the
     * status, the commit point (-1, none yet: ten bytes), the reason of a lost one. */
    static const ks_ack_result_t waited[] = {
        {.status = KS_OK,
         .reason = "committed",
         .commit = KS_COMMIT_COMMITTED,
         .committed_offset = 300},
        {.status = KS_OK, .reason = NULL, .commit = KS_COMMIT_ACCEPTED, .committed_offset = -1},
        {.status = KS_OK,
         .reason = "revoked first",
         .commit = KS_COMMIT_LOST,
         .committed_offset = 7},
        {.status = KS_OK,
         .reason = "broker said no",
         .commit = KS_COMMIT_FAILED,
         .committed_offset = 0},
        {.status = KS_E_STALE, .reason = "stale", .commit = KS_COMMIT_NONE},
        {.status = KS_OK, .commit = KS_COMMIT_ACCEPTED, .committed_offset = 0},
    };
    check_ack_results(ids + 2, waited, 4);
    check_ack_results(ids, waited, 6);
    free(many);
    free(mres);
    free(longid);
}

/* protobuf-c packs SubscribeRequest{ack: ids}; the fast decoder must read the same ids. */
static void check_fast_ack(const char *const *ids, size_t n)
{
    Ksidecar__V1__AckIds ai = KSIDECAR__V1__ACK_IDS__INIT;
    ai.n_ack_ids = n;
    ai.ack_ids = (char **)(uintptr_t)ids;
    Ksidecar__V1__SubscribeRequest r = KSIDECAR__V1__SUBSCRIBE_REQUEST__INIT;
    r.kind_case = KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_ACK;
    r.ack = &ai;
    size_t len;
    uint8_t *msg = pack_pb(&r.base, &len);
    size_t got = 0;
    bool bp = false;
    char **v = grpc_fast_ack_ids(grpc_slice_from_static_buffer(msg, len), &got, &bp);
    assert_non_null(v);
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(v[i], ids[i]);
    free(v);
    free(msg);
}

static void test_fast_ack_decoder_reads_what_protobuf_c_packs(void **state)
{
    static const char *const ids[] = {"a18bea1b5d43ce1e18-1-0-0-1-demo", "",
                                      "t-0-9223372036854775807"};
    check_fast_ack(ids, 1);
    check_fast_ack(ids, 3);
    /* Ids as the engine writes them, many of them: a three-byte outer length. */
    size_t n = 1000;
    char(*buf)[KS_ACK_ID_MAX] = calloc(n, KS_ACK_ID_MAX);
    const char **many = calloc(n, sizeof(*many));
    assert_true(buf && many);
    for (size_t i = 0; i < n; i++) {
        ks_record_t r = rec(i % 3 ? "orders" : "a-topic-name-of-some-length", (int32_t)(i % 12),
                            INT64_MAX - (int64_t)i, "k", "v");
        r.attempt = (int)i + 1;
        ks_record_ack_id(&r, buf[i], KS_ACK_ID_MAX);
        many[i] = buf[i];
    }
    check_fast_ack(many, n);
    /* One id longer than 127 bytes: a two-byte length. */
    char longid[400];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    const char *one[] = {longid};
    check_fast_ack(one, 1);
    free(buf);
    free(many);
}

/* protobuf-c packs r; the fast decoder must decline it. */
static void assert_declined(const Ksidecar__V1__SubscribeRequest *r)
{
    size_t len, n = 0;
    uint8_t *msg = pack_pb(&r->base, &len);
    bool bp = false;
    assert_null(grpc_fast_ack_ids(grpc_slice_from_static_buffer(msg, len), &n, &bp));
    free(msg);
}

static void test_fast_ack_decoder_declines_other_messages(void **state)
{
    /* An ack with no ids. */
    Ksidecar__V1__AckIds ai = KSIDECAR__V1__ACK_IDS__INIT;
    Ksidecar__V1__SubscribeRequest r = KSIDECAR__V1__SUBSCRIBE_REQUEST__INIT;
    r.kind_case = KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_ACK;
    r.ack = &ai;
    assert_declined(&r);
    /* A nack and a credits message. */
    static const char *const ids[] = {"x"};
    Ksidecar__V1__NackIds ni = KSIDECAR__V1__NACK_IDS__INIT;
    ni.n_ack_ids = 1;
    ni.ack_ids = (char **)(uintptr_t)ids;
    r.kind_case = KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_NACK;
    r.nack = &ni;
    assert_declined(&r);
    Ksidecar__V1__Credits cr = KSIDECAR__V1__CREDITS__INIT;
    cr.records = 10;
    r.kind_case = KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_CREDITS;
    r.credits = &cr;
    assert_declined(&r);
    /* An id with a byte outside printable ASCII: protobuf-c reads that one. */
    static const char *const odd[] = {"tab\there"};
    ai.n_ack_ids = 1;
    ai.ack_ids = (char **)(uintptr_t)odd;
    r.kind_case = KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_ACK;
    r.ack = &ai;
    assert_declined(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_records),
        cmocka_unit_test(test_null_and_empty_keys_and_values),
        cmocka_unit_test(test_headers),
        cmocka_unit_test(test_large_numbers),
        cmocka_unit_test(test_ordering_chain),
        cmocka_unit_test(test_long_values_and_many_records),
        cmocka_unit_test(test_empty_batch),
        cmocka_unit_test(test_ack_results),
        cmocka_unit_test(test_ack_results_by_position),
        cmocka_unit_test(test_fast_ack_decoder_reads_what_protobuf_c_packs),
        cmocka_unit_test(test_fast_ack_decoder_declines_other_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
