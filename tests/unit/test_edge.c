/* test_edge.c: the policy both edges share (api/edge.c): caller checks, the ack summary
 * rule, the status walk and the subscription's topic names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "edge.h"

/* sha256("s3cret") and sha256("other") */
#define H_S3CRET "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0"
#define H_OTHER  "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa"

static const char *tokens = "{\"tokens\":[{\"sha256\":\"" H_S3CRET "\",\"groups\":[\"orders-*\"],"
                            "\"consume\":[\"orders\",\"orders.*\"]},"
                            "{\"sha256\":\"" H_OTHER "\",\"groups\":[\"billing\"]}]}";

static ks_auth_t *load_tokens(void)
{
    char err[512] = "";
    ks_auth_t *a = ks_auth_parse(tokens, "t.json", err, sizeof(err));
    if (!a)
        fail_msg("tokens: %s", err);
    return a;
}

static void test_authorize(void **state)
{
    (void)state;
    ks_auth_t *a = load_tokens();
    char err[512] = "";
    const ks_principal_t *who = NULL;
    assert_int_equal(
        ks_edge_authorize(a, "Bearer s3cret", NULL, "orders-1", &who, err, sizeof(err)), KS_OK);
    assert_string_equal(ks_auth_principal_id(who), "token#1");
    /* Identity only: any group. */
    who = NULL;
    assert_int_equal(ks_edge_authorize(a, "Bearer other", NULL, NULL, &who, err, sizeof(err)),
                     KS_OK);
    assert_string_equal(ks_auth_principal_id(who), "token#2");
    /* The groups scope refuses, and says which scope. */
    assert_int_equal(ks_edge_authorize(a, "Bearer other", NULL, "orders-1", &who, err, sizeof(err)),
                     KS_E_PERMISSION);
    assert_non_null(strstr(err, "orders-1"));
    assert_non_null(strstr(err, "groups scope"));
    /* No token, no subject: unauthenticated. */
    assert_int_equal(ks_edge_authorize(a, NULL, NULL, "orders-1", &who, err, sizeof(err)),
                     KS_E_UNAUTH);
    assert_int_equal(ks_edge_authorize(a, "Bearer wrong", NULL, NULL, &who, err, sizeof(err)),
                     KS_E_UNAUTH);
    /* Auth off: everyone, no identity. */
    who = (const ks_principal_t *)(uintptr_t)1;
    assert_int_equal(ks_edge_authorize(NULL, NULL, NULL, "any", &who, err, sizeof(err)), KS_OK);
    assert_null(who);
    ks_auth_free(a);
}

static void test_check_topics(void **state)
{
    (void)state;
    ks_config_t cfg;
    ks_config_defaults(&cfg);
    char err[512] = "";
    ks_engine_t *eng = ks_engine_new(&cfg, err, sizeof(err));
    assert_non_null(eng);
    ks_auth_t *a = load_tokens();
    const ks_principal_t *who = NULL;
    assert_int_equal(ks_auth_identify(a, "Bearer s3cret", NULL, &who, err, sizeof(err)), KS_OK);

    const char *ok[] = {"orders", "orders.eu"};
    assert_int_equal(
        ks_edge_check_topics(eng, a, who, KS_SCOPE_CONSUME, "consume", ok, 2, err, sizeof(err)),
        KS_OK);
    const char *refused[] = {"orders", "payments"};
    assert_int_equal(ks_edge_check_topics(eng, a, who, KS_SCOPE_CONSUME, "consume", refused, 2, err,
                                          sizeof(err)),
                     KS_E_PERMISSION);
    assert_non_null(strstr(err, "\"payments\""));
    assert_non_null(strstr(err, "consume scope"));
    /* A bad name is answered before the scope check: it is named as invalid even though
     * the scope does not cover it either. */
    const char *bad[] = {"no spaces"};
    assert_int_equal(
        ks_edge_check_topics(eng, a, who, KS_SCOPE_CONSUME, "consume", bad, 1, err, sizeof(err)),
        KS_E_INVALID);
    assert_non_null(strstr(err, "invalid"));
    /* An internal topic, with the verb in the message. */
    const char *internal[] = {"__consumer_offsets"};
    assert_int_equal(
        ks_edge_check_topics(eng, a, who, KS_SCOPE_CONSUME, "seek", internal, 1, err, sizeof(err)),
        KS_E_PERMISSION);
    assert_non_null(strstr(err, "internal"));
    assert_non_null(strstr(err, "not seek it"));
    assert_int_equal(
        ks_edge_check_topics(eng, a, who, KS_SCOPE_CONSUME, "consume", ok, 0, err, sizeof(err)),
        KS_E_INVALID);
    ks_auth_free(a);
    ks_engine_destroy(eng);
    ks_config_free(&cfg);
}

static void test_ack_summary(void **state)
{
    (void)state;
    ks_edge_ack_summary_t s;
    /* Some accepted: the request succeeds, whatever the rest say. */
    ks_ack_result_t mixed[] = {{.status = KS_E_STALE, .reason = "stale"},
                               {.status = KS_OK, .reason = "ok"},
                               {.status = KS_E_NOT_FOUND, .reason = "gone"},
                               {.status = KS_OK, .reason = "ok"}};
    ks_edge_ack_summarize(mixed, 4, &s);
    assert_int_equal(s.accepted, 2);
    assert_int_equal(s.rejected, 2);
    assert_int_equal(s.status, KS_OK);
    assert_null(s.message);
    /* Every id rejected: the request fails with the first rejection's status and reason. */
    ks_ack_result_t none[] = {{.status = KS_E_NOT_FOUND, .reason = "unknown ack id"},
                              {.status = KS_E_STALE, .reason = "stale epoch"},
                              {.status = KS_E_INVALID, .reason = "bad"}};
    ks_edge_ack_summarize(none, 3, &s);
    assert_int_equal(s.accepted, 0);
    assert_int_equal(s.rejected, 3);
    assert_int_equal(s.status, KS_E_NOT_FOUND);
    assert_string_equal(s.message, "unknown ack id");
    ks_edge_ack_summarize(none + 1, 2, &s);
    assert_int_equal(s.status, KS_E_STALE);
    assert_string_equal(s.message, "stale epoch");
    /* All accepted, and nothing at all. */
    ks_edge_ack_summarize(mixed + 1, 1, &s);
    assert_int_equal(s.accepted, 1);
    assert_int_equal(s.status, KS_OK);
    ks_edge_ack_summarize(NULL, 0, &s);
    assert_int_equal(s.accepted + s.rejected, 0);
    assert_int_equal(s.status, KS_OK);
}

typedef struct {
    char seen[512];
} walk_t;

static void note(const ks_group_status_t *g, void *ctx)
{
    walk_t *w = ctx;
    size_t n = strlen(w->seen);
    snprintf(w->seen + n, sizeof(w->seen) - n, "%s%s", n ? "," : "", g->name);
}

static void test_status_walk(void **state)
{
    (void)state;
    ks_auth_t *a = load_tokens();
    char err[512];
    const ks_principal_t *who = NULL;
    assert_int_equal(ks_auth_identify(a, "Bearer s3cret", NULL, &who, err, sizeof(err)), KS_OK);
    ks_group_status_t g[3];
    memset(g, 0, sizeof(g));
    snprintf(g[0].name, sizeof(g[0].name), "orders-a");
    snprintf(g[1].name, sizeof(g[1].name), "billing");
    snprintf(g[2].name, sizeof(g[2].name), "orders-b");
    ks_group_status_t *gp[] = {&g[0], &g[1], &g[2]};
    const char *msg = NULL;

    /* A listing shows only the groups the token's scope covers, in order. */
    walk_t w = {""};
    assert_int_equal(ks_edge_status_walk(gp, 3, false, a, who, note, &w, &msg), KS_OK);
    assert_string_equal(w.seen, "orders-a,orders-b");
    /* Auth off: every group. */
    walk_t all = {""};
    assert_int_equal(ks_edge_status_walk(gp, 3, false, NULL, NULL, note, &all, &msg), KS_OK);
    assert_string_equal(all.seen, "orders-a,billing,orders-b");
    /* One group: the route checked the scope already; the walk gives it as it is. */
    walk_t one = {""};
    assert_int_equal(ks_edge_status_walk(gp + 1, 1, true, a, who, note, &one, &msg), KS_OK);
    assert_string_equal(one.seen, "billing");
    /* One group that closed meanwhile: not found, and fn never runs. */
    walk_t gone = {""};
    assert_int_equal(ks_edge_status_walk(gp, 0, true, a, who, note, &gone, &msg), KS_E_NOT_FOUND);
    assert_string_equal(msg, "the group closed meanwhile");
    assert_string_equal(gone.seen, "");
    /* An empty listing is a success. */
    assert_int_equal(ks_edge_status_walk(gp, 0, false, a, who, note, &gone, &msg), KS_OK);
    assert_string_equal(gone.seen, "");
    ks_auth_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_authorize),
        cmocka_unit_test(test_check_topics),
        cmocka_unit_test(test_ack_summary),
        cmocka_unit_test(test_status_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
