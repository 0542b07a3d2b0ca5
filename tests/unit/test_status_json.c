/* test_status_json.c: the HTTP edge's group status writer (api/http/http_json.c, included for
 * its static status_json) on filled statuses, against the exact text it wrote before the
 * status fields were declared in one list (proxy/status_fields.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../api/http/http_json.c"
#include "status_fixture.h"

/* status_json's compact text of g (freed here). */
static char *json_of(ks_group_status_t *g)
{
    json_t *o = status_json(g);
    assert_non_null(o);
    char *text = json_dumps(o, JSON_COMPACT);
    assert_non_null(text);
    json_decref(o);
    ks_group_status_free(g);
    return text;
}

/* The three histograms of the counters, empty: their bounds and zero counts. */
#define HIST_EMPTY                                                                                 \
    "{\"bounds_ms\":[5,10,25,50,100,250,500,1000,2500,5000,10000,30000,60000,300000],\"counts\":"  \
    "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],\"sum_ms\":0,\"count\":0}"
#define HISTS_EMPTY                                                                                \
    ",\"delivery_to_ack_ms\":" HIST_EMPTY ",\"commit_round_trip_ms\":" HIST_EMPTY                  \
    ",\"record_age_at_delivery_ms\":" HIST_EMPTY

/* The refused ack ids' counters, at zero. */
#define ACKS_ZERO ",\"acks_stale\":0,\"acks_unknown\":0,\"acks_invalid\":0"

static void test_orders(void **state)
{
    (void)state;
    char *text = json_of(fixture_orders());
    assert_string_equal(
        text,
        "{\"group\":\"orders\",\"static\":false,\"ordering\":\"key\",\"topics\":[\"orders.eu\",\""
        "orders.us\"],\"partitions\":[{\"topic\":\"orders.eu\",\"partition\":3,\"state\":\"ACTIVE"
        "\",\"epoch\":4000000000,\"committed_offset\":100,\"commit_in_flight\":120,\"high_waterma"
        "rk\":250,\"lag\":150,\"in_flight\":20,\"window_records\":150,\"window_bytes\":15000,\"pa"
        "used\":true,\"oldest_lease_age_ms\":1234,\"metadata_truncations\":2,\"held_back\":true,"
        "\"window_memory_bytes\":16000,\"kafka_queue_records\":300,\"budget_pauses\":9,"
        "\"budget_dropped_records\":4500,\"commit_p"
        "oint_age_ms\":0,\"stalled\":true,\"stall_reason\":\"poison\",\"stall_detail\":\"offset "
        "100 "
        "delivered 3 times\"},{\"topic"
        "\":\"orders.us\",\"partition\":0,\"state\":\"INITIALIZING\",\"epoch\":1,\"committed_offs"
        "et\":null,\"commit_in_flight\":null,\"high_watermark\":null,\"lag\":null,\"in_flight\":0"
        ",\"window_records\":0,\"window_bytes\":0,\"paused\":false,\"oldest_lease_age_ms\":null,"
        "\"metadata_truncations\":0,\"held_back\":false,\"window_memory_bytes\":0,\"kafka_queue_r"
        "ecords\":0,\"budget_pauses\":0,\"budget_dropped_records\":0,"
        "\"commit_point_age_ms\":0,\"stalled\":false,\"stall_reason"
        "\":\"\",\"stall_detail\":\"\"}],\"subscribers\":[{\"name\":\"default\",\"credits\":{\"r"
        "ecords\":1000,\"bytes\":10485760},\"outstanding\":{\"records\":20,\"bytes\":2000},\"wait"
        "ing\":true},{\"name\":\"zo\xc3\xab#2\",\"credits\":{\"records\":1,\"bytes\":2},\"outstan"
        "ding\":{\"records\":0,\"bytes\":0},\"waiting\":false},{\"name\":\"bad\\\\xFF\",\"credits"
        "\":{\"records\":0,\"bytes\":0},\"outstanding\":{\"records\":0,\"bytes\":0},\"waiting\":f"
        "alse}],\"dead_letter_topic\":\"orders-dlq\",\"max_attempts\":5,\"counters\":{\"delivered"
        "\":5000000000,\"redelivered\":12,\"expired\":3,\"nacked\":4,\"acked\":4999999000,\"dead_"
        "lettered\":1,\"acks_lost_to_move\":7,\"commits_sent\":0,\"commits_confirmed\":0,"
        "\"commits_failed\":0" ACKS_ZERO HISTS_EMPTY
        "},\"memory\":{\"max_bytes\":268435456,\"used_bytes\""
        ":1048576,\"partitions\":2,\"window_share_bytes\":134217728,\"kafka_queue_kbytes\":4096,"
        "\"kafka_fetch_bytes\":1048577}}");
    free(text);
}

static void test_idle(void **state)
{
    (void)state;
    char *text = json_of(fixture_idle());
    assert_string_equal(
        text,
        "{\"group\":\"idle\",\"static\":true,\"ordering\":\"partition\",\"topics\":[],\"partition"
        "s\":[],\"subscribers\":[],\"dead_letter_topic\":null,\"max_attempts\":0,\"counters\":{\""
        "delivered\":0,\"redelivered\":0,\"expired\":0,\"nacked\":0,\"acked\":0,\"dead_lettered\""
        ":0,\"acks_lost_to_move\":0,\"commits_sent\":0,\"commits_confirmed\":0,\"commits_fa"
        "iled\":0" ACKS_ZERO HISTS_EMPTY
        "},\"memory\":{\"max_bytes\":268435456,\"used_bytes\":0,\"parti"
        "tions\":0,\"window_share_bytes\":0,\"kafka_queue_kbytes\":0,\"kafka_fetch_bytes\":0}}");
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
