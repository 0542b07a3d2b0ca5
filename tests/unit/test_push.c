/* test_push.c: push delivery's rules that need no app and no broker (api/push/push_request.c,
 * included so its static functions can be called): what an answer does to each record, and how a
 * record's key and headers are written as HTTP headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../api/push/push_request.c"

#define ACK   KS_PUSH_ACK
#define RETRY KS_PUSH_RETRY
#define TERM  KS_PUSH_TERMINAL

/* The verdicts for n records of an answer (code, body), as a string of 'a', 'r' and 't'. */
static const char *verdicts(long code, const char *body, size_t n, char *reason)
{
    static char out[16];
    ks_push_verdict_t v[16];
    reason[0] = '\0';
    push_verdicts(code, body, body ? strlen(body) : 0, n, v, reason, 256);
    for (size_t i = 0; i < n; i++)
        out[i] = v[i] == ACK ? 'a' : v[i] == RETRY ? 'r' : 't';
    out[n] = '\0';
    return out;
}

static void test_status_codes(void **state)
{
    (void)state;
    char reason[256];
    assert_string_equal(verdicts(200, "", 2, reason), "aa");
    assert_string_equal(verdicts(204, NULL, 1, reason), "a");
    assert_string_equal(verdicts(429, "slow", 1, reason), "r");
    assert_string_equal(verdicts(503, "", 1, reason), "r");
    assert_string_equal(verdicts(500, "", 3, reason), "rrr");
    assert_string_equal(reason, "push: HTTP 500");
    assert_string_equal(verdicts(302, "", 1, reason), "r");
    assert_string_equal(verdicts(0, NULL, 1, reason), "r"); /* no answer at all */
    assert_string_equal(verdicts(400, "bad\nrecord", 2, reason), "tt");
    assert_string_equal(reason, "push: HTTP 400: bad?record"); /* control bytes masked */
    assert_string_equal(verdicts(404, "", 1, reason), "t");
}

static void test_json_answers(void **state)
{
    (void)state;
    char reason[256];
    assert_string_equal(verdicts(200, "{\"status\":\"SUCCESS\"}", 1, reason), "a");
    assert_string_equal(verdicts(200, "{\"status\":\"RETRY\"}", 1, reason), "r");
    assert_string_equal(verdicts(200, "{\"status\":\"DROP\"}", 2, reason), "tt");
    assert_string_equal(reason, "push: the app answered {\"status\":\"DROP\"}");
    assert_string_equal(verdicts(200, "{\"status\":\"whatever\"}", 1, reason), "r");
    /* Per record, in order; records the list leaves out are retried. */
    assert_string_equal(verdicts(200, "{\"statuses\":[\"SUCCESS\",\"DROP\",\"RETRY\"]}", 4, reason),
                        "atrr");
    /* Only a 200's body overrides; another body is just text. */
    assert_string_equal(verdicts(500, "{\"status\":\"SUCCESS\"}", 1, reason), "r");
    assert_string_equal(verdicts(201, "{\"status\":\"RETRY\"}", 1, reason), "a");
    assert_string_equal(verdicts(200, "{not json", 1, reason), "a");
}

static void test_headers(void **state)
{
    (void)state;
    struct curl_slist *l = NULL;
    add_header(&l, "ksidecar-key", "a b%\r\n\xff", 7);
    assert_string_equal(l->data, "ksidecar-key: a%20b%25%0D%0A%FF");
    ks_header_t hs[] = {{.name = "trace id", .value = "x", .value_len = 1},
                        {.name = "empty", .value = NULL}};
    ks_record_t r = {.topic = "t",
                     .partition = 3,
                     .offset = 42,
                     .timestamp = -1,
                     .key = NULL,
                     .value = NULL,
                     .headers = hs,
                     .header_cnt = 2,
                     .attempt = 2};
    struct curl_slist *rl = NULL;
    record_headers(&rl, &r, "id1");
    const char *want[] = {"ksidecar-topic: t",
                          "ksidecar-partition: 3",
                          "ksidecar-offset: 42",
                          "ksidecar-attempt: 2",
                          "ksidecar-ack-id: id1",
                          "ksidecar-value-null: true",
                          "ksidecar-header-trace%20id: x",
                          "ksidecar-header-empty: "};
    size_t i = 0;
    for (struct curl_slist *c = rl; c; c = c->next, i++) {
        assert_true(i < sizeof(want) / sizeof(want[0]));
        assert_string_equal(c->data, want[i]);
    }
    assert_int_equal(i, sizeof(want) / sizeof(want[0]));
    curl_slist_free_all(l);
    curl_slist_free_all(rl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_codes),
        cmocka_unit_test(test_json_answers),
        cmocka_unit_test(test_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
