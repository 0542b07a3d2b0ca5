/* test_http_routes.c: the HTTP edge's route table and path patterns (api/http/http_routes.c,
 * included for its static table, as h2o's unit tests do; the router, api/http/http_router.c,
 * matches on it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../api/http/http_routes.c"

#define ROWS (sizeof(routes) / sizeof(routes[0]))

/* The router's lookups (api/http/http_router.c) on this table. */
static const route_t *route_find(const char *url, char *buf, size_t size, const char **group)
{
    return http_route_find(routes, ROWS, url, buf, size, group);
}

static const route_t *route_method(const route_t *first, const char *method, char *allow,
                                   size_t size)
{
    return http_route_method(first, routes + ROWS, method, allow, size);
}

/* The row serving url (its path, or NULL) and the {group} it names ("" if none). */
static const char *find(const char *url, const char **group, char *buf, size_t size)
{
    const route_t *rt = route_find(url, buf, size, group);
    return rt ? rt->path : NULL;
}

static void test_rows(void **state)
{
    (void)state;
    char buf[512];
    const char *g;
    assert_string_equal(find("/healthz", &g, buf, sizeof(buf)), "/healthz");
    assert_null(g);
    assert_string_equal(find("/readyz", &g, buf, sizeof(buf)), "/readyz");
    assert_string_equal(find("/v1/groups", &g, buf, sizeof(buf)), "/v1/groups");
    assert_null(g);
    assert_string_equal(find("/v1/groups/", &g, buf, sizeof(buf)), "/v1/groups/");
    assert_null(g);
    /* A group that ends the URL is named in place. */
    const char *url = "/v1/groups/orders";
    assert_string_equal(find(url, &g, buf, sizeof(buf)), "/v1/groups/{group}");
    assert_ptr_equal(g, url + 11);
    /* One below it is copied out. */
    assert_string_equal(find("/v1/groups/orders/records", &g, buf, sizeof(buf)),
                        "/v1/groups/{group}/records");
    assert_ptr_equal(g, buf);
    assert_string_equal(g, "orders");
    const struct {
        const char *url, *path;
        int op;
    } settles[] = {{"/v1/groups/g/acks", "/v1/groups/{group}/acks", KS_SETTLE_ACK},
                   {"/v1/groups/g/nacks", "/v1/groups/{group}/nacks", KS_SETTLE_NACK},
                   {"/v1/groups/g/deadline", "/v1/groups/{group}/deadline", KS_SETTLE_EXTEND}};
    for (size_t i = 0; i < 3; i++) {
        const route_t *rt = route_find(settles[i].url, buf, sizeof(buf), &g);
        assert_non_null(rt);
        assert_string_equal(rt->path, settles[i].path);
        assert_int_equal(rt->op, settles[i].op);
        assert_string_equal(rt->method, "POST");
        assert_ptr_equal(rt->encode, http_reply_ack);
        assert_string_equal(g, "g");
    }
}

/* / is the status page, answered by the edge with no caller check. */
static void test_page_row(void **state)
{
    (void)state;
    char buf[512];
    const char *g;
    const route_t *rt = route_find("/", buf, sizeof(buf), &g);
    assert_non_null(rt);
    assert_string_equal(rt->path, "/");
    assert_string_equal(rt->method, "GET");
    assert_int_equal(rt->cmd, KS_CMD_NONE);
    assert_int_equal(rt->auth, AUTH_NONE);
    assert_ptr_equal(rt->decode, http_page_decode);
    assert_null(g);
}

/* A {topic} segment matches as {group} does; only the groups scope looks for "{group}". */
static void test_topic_row(void **state)
{
    (void)state;
    char buf[512];
    const char *t;
    const route_t *rt = route_find("/v1/topics/orders/records", buf, sizeof(buf), &t);
    assert_non_null(rt);
    assert_string_equal(rt->path, "/v1/topics/{topic}/records");
    assert_int_equal(rt->cmd, KS_CMD_PRODUCE);
    assert_ptr_equal(rt->encode, http_produce_reply);
    assert_string_equal(t, "orders");
    assert_null(route_find("/v1/topics//records", buf, sizeof(buf), &t));
    assert_null(route_find("/v1/topics/orders", buf, sizeof(buf), &t));
    assert_null(route_find("/v1/topics/orders/records/x", buf, sizeof(buf), &t));
}

static void test_no_row(void **state)
{
    (void)state;
    char buf[512];
    const char *g;
    const char *none[] = {"//",
                          "/index.html",
                          "/v1",
                          "/v1/groupsx",
                          "/healthz/",
                          "/v1/groups//records",
                          "/v1/groups/g/records/",
                          "/v1/groups/g/acks/x",
                          "/v1/groups/g/other",
                          "/v1/groups/g/"};
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        assert_null(find(none[i], &g, buf, sizeof(buf)));
    /* A group too long to copy matches no row below it, but in place it does. */
    char url[700];
    snprintf(url, sizeof(url), "/v1/groups/%0600d/records", 0);
    assert_null(find(url, &g, buf, sizeof(buf)));
    url[strlen(url) - strlen("/records")] = '\0';
    assert_string_equal(find(url, &g, buf, sizeof(buf)), "/v1/groups/{group}");
    assert_int_equal(strlen(g), 600);
    /* The boundary: gsize - 1 bytes fit. */
    char small[8];
    assert_non_null(find("/v1/groups/1234567/acks", &g, small, sizeof(small)));
    assert_null(find("/v1/groups/12345678/acks", &g, small, sizeof(small)));
}

static void test_table(void **state)
{
    (void)state;
    /* Every row decodes, and every row that sends a command has an encoder for its answer;
     * the probes check no caller; /metrics, served on the probe listener too (which checks
     * no caller), shows a caller only its groups on the API listener. */
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const route_t *rt = &routes[i];
        assert_non_null(rt->decode);
        assert_true((rt->cmd == KS_CMD_NONE) == !rt->encode);
        assert_true(!rt->probe || rt->auth == AUTH_NONE || !strcmp(rt->path, "/metrics"));
        assert_true(!strcmp(rt->method, "GET") || !strcmp(rt->method, "POST") ||
                    !strcmp(rt->method, "PUT") || !strcmp(rt->method, "DELETE"));
    }
}

static void test_allow(void **state)
{
    (void)state;
    /* A path's rows give the method's row and Allow: a GET row serves HEAD too. */
    char buf[512], allow[64];
    const char *g;
    const route_t *rt = route_find("/v1/groups/g/acks", buf, sizeof(buf), &g);
    assert_ptr_equal(route_method(rt, "POST", allow, sizeof(allow)), rt);
    assert_null(route_method(rt, "GET", allow, sizeof(allow)));
    assert_string_equal(allow, "POST");
    rt = route_find("/v1/groups/g/records", buf, sizeof(buf), &g);
    assert_ptr_equal(route_method(rt, "HEAD", allow, sizeof(allow)), rt);
    assert_null(route_method(rt, "DELETE", allow, sizeof(allow)));
    assert_string_equal(allow, "GET, HEAD");
    /* The push path: three methods, each its own row. */
    rt = route_find("/v1/groups/g/push", buf, sizeof(buf), &g);
    assert_non_null(route_method(rt, "PUT", allow, sizeof(allow)));
    assert_non_null(route_method(rt, "DELETE", allow, sizeof(allow)));
    assert_null(route_method(rt, "POST", allow, sizeof(allow)));
    assert_string_equal(allow, "GET, HEAD, PUT, DELETE");
}

static void test_parse_int(void **state)
{
    (void)state;
    long v = -7;
    assert_int_equal(http_parse_int("42", 1, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(http_parse_int("0", 1, 100, &v), -1);
    assert_int_equal(http_parse_int("101", 1, 100, &v), -1);
    assert_int_equal(http_parse_int("4x", 1, 100, &v), -1);
    assert_int_equal(http_parse_int("", 1, 100, &v), -1);
    assert_int_equal(http_parse_int("99999999999999999999", 1, 100, &v), -1);
    assert_int_equal(v, 42);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),      cmocka_unit_test(test_page_row),
        cmocka_unit_test(test_topic_row), cmocka_unit_test(test_no_row),
        cmocka_unit_test(test_table),     cmocka_unit_test(test_allow),
        cmocka_unit_test(test_parse_int),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
