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
} want[] = {
    {KS_OK, "OK", GRPC_STATUS_OK, 200},
    {KS_E_INVALID, "INVALID_ARGUMENT", GRPC_STATUS_INVALID_ARGUMENT, 400},
    {KS_E_NOT_FOUND, "NOT_FOUND", GRPC_STATUS_NOT_FOUND, 404},
    {KS_E_STALE, "FAILED_PRECONDITION", GRPC_STATUS_FAILED_PRECONDITION, 409},
    {KS_E_EXHAUSTED, "RESOURCE_EXHAUSTED", GRPC_STATUS_RESOURCE_EXHAUSTED, 429},
    {KS_E_UNAVAILABLE, "UNAVAILABLE", GRPC_STATUS_UNAVAILABLE, 503},
    {KS_E_PERMISSION, "PERMISSION_DENIED", GRPC_STATUS_PERMISSION_DENIED, 403},
    {KS_E_UNAUTH, "UNAUTHENTICATED", GRPC_STATUS_UNAUTHENTICATED, 401},
    {KS_E_INTERNAL, "INTERNAL", GRPC_STATUS_INTERNAL, 500},
};

static void test_every_code(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_string_equal(ks_status_name(want[i].s), want[i].name);
        assert_int_equal(ks_status_grpc_code(want[i].s), (int)want[i].grpc);
        assert_int_equal(ks_status_http(want[i].s), want[i].http);
    }
}

static void test_outside_the_enum(void **state)
{
    (void)state;
    const int bad[] = {1, -9, -100, 42};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ks_status_t s = (ks_status_t)bad[i];
        assert_string_equal(ks_status_name(s), "UNKNOWN");
        assert_int_equal(ks_status_grpc_code(s), (int)GRPC_STATUS_INTERNAL);
        assert_int_equal(ks_status_http(s), 500);
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
