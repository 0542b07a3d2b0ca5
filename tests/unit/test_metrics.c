/* test_metrics.c: tests the /metrics renderer (api/metrics.c) on status snapshots built here:
 * families from the field lists, kafka_exporter's names, one high watermark per partition,
 * milliseconds as seconds, label escaping, the series cap and the request counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

static ks_part_status_t parts_a[2], parts_b[1];
static char topic_t[] = "t", *topics_a[] = {topic_t, NULL};
static ks_group_status_t ga, gb;

static void fixture(void)
{
    memset(&ga, 0, sizeof(ga));
    memset(&gb, 0, sizeof(gb));
    snprintf(ga.name, sizeof(ga.name), "a");
    snprintf(gb.name, sizeof(gb.name), "b\"q\\x\n");
    ga.delivered = 13;
    ks_hist_add(&ga.delivery_to_ack, 3);    /* <= 5 ms */
    ks_hist_add(&ga.delivery_to_ack, 7);    /* <= 10 ms */
    ks_hist_add(&ga.delivery_to_ack, 1000); /* <= 1 s */
    ks_hist_add(&ga.delivery_to_ack, 400000);
    ga.acked = 9;
    ga.topics = topics_a;
    ga.topic_cnt = 1;
    for (int i = 0; i < 2; i++) {
        parts_a[i] = (ks_part_status_t){.partition = i,
                                        .committed = 10,
                                        .high_watermark = 14,
                                        .lag = 4,
                                        .oldest_lease_age_ms = -1};
        snprintf(parts_a[i].topic, sizeof(parts_a[i].topic), "t");
    }
    parts_a[1].oldest_lease_age_ms = 1234;
    parts_a[1].stalled = true;
    parts_a[1].stall_reason = "poison";
    parts_a[0].stall_reason = "";
    parts_a[1].committed = parts_a[1].lag = -1; /* before any commit: unknown */
    ga.parts = parts_a;
    ga.part_cnt = 2;
    /* Group b reads partition 0 of the same topic: its high watermark is one series. */
    parts_b[0] = parts_a[0];
    gb.parts = parts_b;
    gb.part_cnt = 1;
}

static char *render(int64_t max)
{
    const ks_group_status_t *groups[] = {&ga, &gb};
    ks_jbuf_t b;
    ks_jbuf_init(&b, 64);
    ks_metrics_render(&b, groups, 2, max);
    return ks_jbuf_take(&b, NULL);
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void test_families(void **state)
{
    (void)state;
    fixture();
    char *t = render(100000);
    assert_non_null(strstr(t, "# TYPE ksidecar_delivered_total counter\n"
                              "ksidecar_delivered_total{group=\"a\"} 13\n"));
    assert_non_null(strstr(t, "ksidecar_acked_total{group=\"a\"} 9\n"));
    assert_non_null(strstr(t, "# TYPE ksidecar_partition_lag gauge\n"));
    assert_non_null(strstr(t, "kafka_consumergroup_lag{consumergroup=\"a\",topic=\"t\","
                              "partition=\"0\"} 4\n"));
    /* Unknown values are left out, not written as -1. */
    assert_null(strstr(t, "partition=\"1\"} -1"));
    assert_non_null(strstr(t, "kafka_consumergroup_lag_sum{consumergroup=\"a\",topic=\"t\"} 4\n"));
    /* t[0] (read by both groups) and t[1]: two series, not three. */
    assert_int_equal(count(t, "kafka_topic_partition_current_offset{"), 2);
    /* Milliseconds come out as seconds. */
    assert_non_null(strstr(t, "ksidecar_partition_oldest_lease_age_seconds{group=\"a\",topic="
                              "\"t\",partition=\"1\"} 1.234\n"));
    assert_null(strstr(t, "_ms{"));
    /* A label value escaped as the format wants. */
    assert_non_null(strstr(t, "ksidecar_delivered_total{group=\"b\\\"q\\\\x\\n\"} 0\n"));
    assert_non_null(strstr(t, "ksidecar_groups 2\n"));
    /* A stalled partition's sample carries its reason; one not stalled has none. */
    assert_non_null(strstr(t,
                           "ksidecar_partition_stalled{group=\"a\",topic=\"t\",reason=\"poison\","
                           "partition=\"1\"} 1\n"));
    assert_non_null(
        strstr(t, "ksidecar_partition_stalled{group=\"a\",topic=\"t\",partition=\"0\"} 0\n"));
    /* A histogram: cumulative buckets by le in seconds, the sum in seconds, the count. */
    assert_non_null(strstr(t,
                           "# TYPE ksidecar_delivery_to_ack_seconds histogram\n"
                           "ksidecar_delivery_to_ack_seconds_bucket{group=\"a\",le=\"0.005\"} 1\n"
                           "ksidecar_delivery_to_ack_seconds_bucket{group=\"a\",le=\"0.01\"} 2\n"));
    assert_non_null(strstr(t, "ksidecar_delivery_to_ack_seconds_bucket{group=\"a\",le=\"1\"} 3\n"));
    assert_non_null(strstr(t, "ksidecar_delivery_to_ack_seconds_bucket{group=\"a\",le=\"300\"} 3\n"
                              "ksidecar_delivery_to_ack_seconds_bucket{group=\"a\",le=\"+Inf\"} 4\n"
                              "ksidecar_delivery_to_ack_seconds_sum{group=\"a\"} 401.010\n"
                              "ksidecar_delivery_to_ack_seconds_count{group=\"a\"} 4\n"));
    free(t);
}

static void test_cap(void **state)
{
    (void)state;
    fixture();
    char *all = render(100000);
    int samples = 0;
    for (const char *p = all; *p; p = strchr(p, '\n') + 1)
        samples += *p != '#';
    free(all);
    /* Of the samples, 10 fit; the rest are counted, and the last two lines always come. */
    char *t = render(10);
    int kept = 0;
    for (const char *p = t; *p; p = strchr(p, '\n') + 1)
        kept += *p != '#';
    assert_int_equal(kept, 10 + 2);
    char want[96];
    snprintf(want, sizeof(want), "ksidecar_metrics_series_dropped_total %d\n", samples - 2 - 10);
    assert_non_null(strstr(t, want));
    free(t);
}

static void test_requests(void **state)
{
    (void)state;
    fixture();
    ks_metrics_http_request("POST", 200);
    ks_metrics_http_request("POST", 200);
    ks_metrics_http_request("PATCH", 405);
    ks_metrics_http_request("GET", 42); /* out of range: not counted */
    ks_metrics_grpc_request(3, "/ksidecar.v1.Consumer/Ack", 5);
    ks_metrics_grpc_request(40, "/x", 0); /* no such slot */
    char *t = render(100000);
    assert_non_null(
        strstr(t, "ksidecar_requests_total{edge=\"http\",method=\"POST\",code=\"200\"} 2\n"));
    assert_non_null(
        strstr(t, "ksidecar_requests_total{edge=\"http\",method=\"OTHER\",code=\"405\"} 1\n"));
    assert_null(strstr(t, "code=\"42\""));
    assert_non_null(strstr(t, "ksidecar_requests_total{edge=\"grpc\",method=\"/ksidecar.v1."
                              "Consumer/Ack\",code=\"NOT_FOUND\"} 1\n"));
    assert_null(strstr(t, "method=\"/x\""));
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
