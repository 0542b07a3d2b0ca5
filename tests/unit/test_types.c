/* test_types.c: tests the status table of proxy/types.c against grpc's own status codes and
 * the HTTP statuses the edges answer with. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <grpc/status.h>
#include <string.h>

#include "types.h"

/* Written out independently of types.c: each code, its name, gRPC code and HTTP status. */
static const struct {
    ks_status_t s;
    const char *name;
    grpc_status_code grpc;
    int http;
    int retry_s;
} want[] = {
    {KS_OK, "OK", GRPC_STATUS_OK, 200, 0},
    {KS_E_INVALID, "INVALID_ARGUMENT", GRPC_STATUS_INVALID_ARGUMENT, 400, 0},
    {KS_E_NOT_FOUND, "NOT_FOUND", GRPC_STATUS_NOT_FOUND, 404, 0},
    {KS_E_STALE, "FAILED_PRECONDITION", GRPC_STATUS_FAILED_PRECONDITION, 409, 0},
    {KS_E_EXHAUSTED, "RESOURCE_EXHAUSTED", GRPC_STATUS_RESOURCE_EXHAUSTED, 429, 0},
    {KS_E_UNAVAILABLE, "UNAVAILABLE", GRPC_STATUS_UNAVAILABLE, 503, 0},
    {KS_E_PERMISSION, "PERMISSION_DENIED", GRPC_STATUS_PERMISSION_DENIED, 403, 0},
    {KS_E_UNAUTH, "UNAUTHENTICATED", GRPC_STATUS_UNAUTHENTICATED, 401, 0},
    {KS_E_INTERNAL, "INTERNAL", GRPC_STATUS_INTERNAL, 500, 0},
    {KS_E_URI_TOO_LONG, "RESOURCE_EXHAUSTED", GRPC_STATUS_RESOURCE_EXHAUSTED, 414, 0},
    {KS_E_BUSY, "RESOURCE_EXHAUSTED", GRPC_STATUS_RESOURCE_EXHAUSTED, 429, 1},
    {KS_E_ABORTED, "ABORTED", GRPC_STATUS_ABORTED, 409, 0},
    {KS_E_DEADLINE, "DEADLINE_EXCEEDED", GRPC_STATUS_DEADLINE_EXCEEDED, 504, 0},
};

static void test_every_code(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_string_equal(ks_status_name(want[i].s), want[i].name);
        assert_int_equal(ks_status_grpc_code(want[i].s), (int)want[i].grpc);
        assert_int_equal(ks_status_http(want[i].s), want[i].http);
        assert_int_equal(ks_status_retry_after(want[i].s), want[i].retry_s);
    }
}

static void test_outside_the_enum(void **state)
{
    (void)state;
    const int bad[] = {1, -13, -100, 42};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ks_status_t s = (ks_status_t)bad[i];
        assert_string_equal(ks_status_name(s), "UNKNOWN");
        assert_int_equal(ks_status_grpc_code(s), (int)GRPC_STATUS_INTERNAL);
        assert_int_equal(ks_status_http(s), 500);
        assert_int_equal(ks_status_retry_after(s), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code),
        cmocka_unit_test(test_outside_the_enum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
