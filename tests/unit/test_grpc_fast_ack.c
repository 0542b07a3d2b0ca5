/* test_grpc_fast_ack.c: the gRPC edge's fast ack decoder (api/grpc/grpc_wire.c's grpc_fast_ack_ids,
 * reached by including the file) agrees with protobuf-c, on the inputs fuzz_grpc_ack found. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../api/grpc/grpc_wire.c"

/* Decodes msg with both; the fast decoder may decline, but what it reads must be what
 * protobuf-c reads. Returns the fast decoder's id count (0: declined). */
static size_t both(const uint8_t *msg, size_t len)
{
    size_t n = 0;
    bool by_position = false;
    char **fast = grpc_fast_ack_ids(grpc_slice_from_static_buffer(msg, len), &n, &by_position);
    Ksidecar__V1__SubscribeRequest *r = ksidecar__v1__subscribe_request__unpack(NULL, len, msg);
    if (fast) {
        assert_non_null(r);
        assert_int_equal(r->kind_case, KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_ACK);
        assert_int_equal(r->ack->n_ack_ids, n);
        assert_int_equal(r->ack->results_by_position, by_position);
        for (size_t i = 0; i < n; i++)
            assert_string_equal(fast[i], r->ack->ack_ids[i]);
        free(fast);
    }
    if (r)
        ksidecar__v1__subscribe_request__free_unpacked(r, NULL);
    return fast ? n : 0;
}

static void test_usual_acks_take_the_fast_path(void **state)
{
    static const uint8_t one[] = "\x12\x21\x0a\x1f"
                                 "a18bea1b5d43ce1e18-1-0-0-1-demo";
    assert_int_equal(both(one, sizeof(one) - 1), 1);
    static const uint8_t two_empty[] = {0x12, 0x04, 0x0a, 0x00, 0x0a, 0x00};
    assert_int_equal(both(two_empty, sizeof(two_empty)), 2);
    /* A 5-byte length prefix (overlong, value 0): protobuf-c takes it, so may we. */
    static const uint8_t five[] = {0x12, 0x06, 0x0a, 0x80, 0x80, 0x80, 0x80, 0x00};
    assert_int_equal(both(five, sizeof(five)), 1);
}

static void test_six_byte_length_prefixes_are_refused_as_protobuf_c_does(void **state)
{
    /* fuzz_grpc_ack: an id's length written in 6 bytes (value 0). protobuf-c refuses the
     * message; the fast decoder took it as one empty id. */
    static const uint8_t inner[] = {0x12, 0x07, 0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    assert_int_equal(both(inner, sizeof(inner)), 0);
    /* The same for the outer length (value 2, in 6 bytes). */
    static const uint8_t outer[] = {0x12, 0x82, 0x80, 0x80, 0x80, 0x80, 0x00, 0x0a, 0x00};
    assert_int_equal(both(outer, sizeof(outer)), 0);
}

static void test_a_nack_with_dead_letter_is_left_to_protobuf_c(void **state)
{
    /* NackIds{ack_ids: "x", reason: "p", dead_letter: true}: not the ack shape. */
    static const uint8_t nack[] = {0x1a, 0x08, 0x0a, 0x01, 'x', 0x1a, 0x01, 'p', 0x20, 0x01};
    assert_int_equal(both(nack, sizeof(nack)), 0);
    Ksidecar__V1__SubscribeRequest *r =
        ksidecar__v1__subscribe_request__unpack(NULL, sizeof(nack), nack);
    assert_non_null(r);
    assert_int_equal(r->kind_case, KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_NACK);
    assert_true(r->nack->dead_letter);
    assert_string_equal(r->nack->reason, "p");
    ksidecar__v1__subscribe_request__free_unpacked(r, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_nack_with_dead_letter_is_left_to_protobuf_c),
        cmocka_unit_test(test_usual_acks_take_the_fast_path),
        cmocka_unit_test(test_six_byte_length_prefixes_are_refused_as_protobuf_c_does),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
