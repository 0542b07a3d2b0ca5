/* test_metrics.c: tests the /metrics renderer (api/metrics.c) on status snapshots built here:
 * families from the field lists, kafka_exporter's names, one high watermark per partition,
 * milliseconds as seconds, label escaping, the series cap, the request counters, a
 * transport's registered collector, and every family shown being one of the metric list's. */
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

/* A transport's collector, as push's: its samples for the groups the caller sees. */
static int collected;
static void fake_push(void *ctx, ks_metric_id_t id, ks_metrics_out_t *o)
{
    assert_ptr_equal(ctx, &collected);
    collected++;
    static const char *const groups[] = {"a", "not-seen"};
    for (size_t i = 0; i < 2; i++) {
        if (!ks_metrics_sees(o, groups[i]))
            continue;
        if (id == KS_METRIC_PUSH_REQUESTS) {
            ks_metrics_put(o, (const char *const[]){groups[i], "503"}, 2);
        } else if (id == KS_METRIC_PUSH_DURATION) {
            ks_hist_t h = {0};
            ks_hist_add(&h, 30);
            ks_metrics_put_hist(o, (const char *const[]){groups[i]}, &h);
        } else {
            ks_metrics_put(o, (const char *const[]){groups[i], "retry"}, 7);
        }
    }
}

static void test_a_registered_collector_writes_its_families(void **state)
{
    (void)state;
    fixture();
    char *t = render(100000);
    /* Not registered: push's families are not written at all. */
    assert_null(strstr(t, "ksidecar_push_"));
    free(t);
    assert_int_equal(ks_metrics_register(KS_METRIC_SRC_PUSH, fake_push, &collected), 0);
    assert_int_equal(ks_metrics_register(KS_METRIC_SRC_PUSH, fake_push, NULL), -1);
    assert_int_equal(ks_metrics_register(KS_METRIC_SRC_STATUS, fake_push, NULL), -1);
    collected = 0;
    t = render(100000);
    assert_int_equal(collected, 4); /* once for each of its families */
    assert_non_null(strstr(t, "# TYPE ksidecar_push_requests_total counter\n"
                              "ksidecar_push_requests_total{group=\"a\",code=\"503\"} 2\n"));
    assert_non_null(strstr(t, "ksidecar_push_records_total{group=\"a\",verdict=\"retry\"} 7\n"));
    assert_non_null(
        strstr(t, "# TYPE ksidecar_push_request_duration_seconds histogram\n"
                  "ksidecar_push_request_duration_seconds_bucket{group=\"a\",le=\"0.005\"} "
                  "0\n"));
    assert_non_null(
        strstr(t, "ksidecar_push_request_duration_seconds_bucket{group=\"a\",le=\"0.05\"} 1\n"
                  "ksidecar_push_request_duration_seconds_bucket{group=\"a\",le=\"0.1\"} 1\n"));
    assert_non_null(strstr(t, "ksidecar_push_request_duration_seconds_sum{group=\"a\"} 0.030\n"
                              "ksidecar_push_request_duration_seconds_count{group=\"a\"} 1\n"));
    /* A group the caller does not see has no sample. */
    assert_null(strstr(t, "not-seen"));
    free(t);
    /* Only the one that registered takes it away; then its families are gone. */
    ks_metrics_unregister(KS_METRIC_SRC_PUSH, NULL);
    t = render(100000);
    assert_non_null(strstr(t, "ksidecar_push_requests_total{"));
    free(t);
    ks_metrics_unregister(KS_METRIC_SRC_PUSH, &collected);
    t = render(100000);
    assert_null(strstr(t, "ksidecar_push_"));
    free(t);
}

/* Every family a scrape shows is one of the list's (docs/metrics.md is generated from the
 * list, and docs_metrics holds it to it), each once, under its type; every family of this
 * file's collectors is shown. */
static void test_every_family_shown_is_in_the_list(void **state)
{
    (void)state;
    fixture();
    size_t n;
    const ks_metric_family_t *fams = ks_metrics_families(&n);
    assert_true(n > 40);
    assert_int_equal(ks_metrics_register(KS_METRIC_SRC_PUSH, fake_push, &collected), 0);
    char *t = render(100000);
    ks_metrics_unregister(KS_METRIC_SRC_PUSH, &collected);
    static const char *const types[] = {"counter", "gauge", "histogram"};
    int shown = 0;
    for (const char *p = t; (p = strstr(p, "# TYPE ")); p++) {
        char name[160], type[16];
        assert_int_equal(sscanf(p, "# TYPE %159s %15s", name, type), 2);
        size_t k = 0;
        while (k < n && strcmp(fams[k].name, name))
            k++;
        if (k == n)
            fail_msg("%s is shown and not in the metric list", name);
        assert_string_equal(type, types[fams[k].type]);
        char again[200];
        snprintf(again, sizeof(again), "# TYPE %s ", name);
        assert_ptr_equal(strstr(t, again), p); /* once */
        shown++;
    }
    assert_int_equal(shown, (int)n);
    /* The status fields' families: named by kind and unit, not by guesswork. */
    size_t k = 0;
    while (k < n && strcmp(fams[k].name, "ksidecar_partition_commit_point_age_seconds"))
        k++;
    assert_true(k < n);
    assert_string_equal(fams[k].field, "partitions[].commit_point_age_ms");
    while (k < n && strcmp(fams[k].name, "ksidecar_partition_stalled"))
        k++;
    assert_true(k < n);
    assert_string_equal(fams[k].reason_field, "partitions[].stall_reason");
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_a_registered_collector_writes_its_families),
        cmocka_unit_test(test_every_family_shown_is_in_the_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
