/* test_status_pb.c: the gRPC edge's group status encoder (api/grpc/grpc_methods.c, included for
 * its static status_to_pb) on filled statuses, against the exact bytes it packed before
 * the status fields were declared in one list (proxy/status_fields.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../api/grpc/grpc_methods.c"
#include "status_fixture.h"

/* The packed GroupStatus of g (freed here), as lowercase hex (caller frees). */
static char *pb_hex_of(ks_group_status_t *g)
{
    pb_arena_t a = {0};
    Ksidecar__V1__GroupStatus *o = status_to_pb(g, &a);
    size_t len = protobuf_c_message_get_packed_size(&o->base);
    uint8_t *buf = malloc(len + 1);
    assert_non_null(buf);
    assert_int_equal(protobuf_c_message_pack(&o->base, buf), len);
    char *hex = malloc(2 * len + 1);
    assert_non_null(hex);
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", buf[i]);
    hex[2 * len] = '\0';
    free(buf);
    pb_arena_free(&a);
    ks_group_status_free(g);
    return hex;
}

/* The three histograms of GroupStatus (fields 20 to 22), empty: their bounds, zero counts. */
#define HIST_EMPTY                                                                                 \
    "2d0a1a050a193264fa01f403e807c4138827904eb0ea01e0d403e0a712120f000000000000000000000000000000"
#define HISTS_EMPTY "a201" HIST_EMPTY "aa01" HIST_EMPTY "b201" HIST_EMPTY

static void test_orders(void **state)
{
    (void)state;
    char *hex = pb_hex_of(fixture_orders());
    assert_string_equal(
        hex,
        "0a066f72646572731a036b657922096f72646572732e657522096f72646572732e75732a0a6f72646572732d"
        "646c7130053a700a096f72646572732e657510031a064143544956452080d0acf30e286430fa013896014014"
        "489601509875580160d2096802700178807d8001ac02880178900109a00101aa0106706f69736f6eb2011c6f"
        "6666736574203130302064656c69766572656420332074696d6573b80194233a530a096f72646572732e7573"
        "1a0c494e495449414c495a494e47200128ffffffffffffffffff0130ffffffffffffffffff0138ffffffffff"
        "ffffffff0160ffffffffffffffffff018801ffffffffffffffffff01421c0a0764656661756c74120808e807"
        "10808080051a05081410d00f200142100a067a6fc3ab23321204080110021a00420a0a04626164ff12001a00"
        "4880e497d012500c580360046898dc97d01270017a1808808080800110808040180220808080402880203081"
        "8040800107" HISTS_EMPTY);
    free(hex);
}

static void test_idle(void **state)
{
    (void)state;
    char *hex = pb_hex_of(fixture_idle());
    assert_string_equal(hex, "0a0469646c6510011a09706172746974696f6e7a06088080808001" HISTS_EMPTY);
    free(hex);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
