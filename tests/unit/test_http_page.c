/* test_http_page.c: the status page's Content-Security-Policy hashes (api/http/http_page.c,
 * included for its static functions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../api/http/http_page.c"

/* The source is the SHA-256 of exactly the text between the tags, in base64, as the
 * browser computes it (the expected values from Python's hashlib and base64). */
static void test_csp_hash(void **state)
{
    (void)state;
    const char page[] = "<p>x</p><script>let x = 1;</script><style></style>";
    char buf[128] = "";
    assert_true(csp_hash(page, strlen(page), "<script>", "</script>", buf, sizeof(buf)));
    assert_string_equal(buf, " 'sha256-qtc3jf64UXA5J6U02kfQ0Cvn9Uz4wXUaN3NNUVgR2v4='");
    buf[0] = '\0';
    assert_true(csp_hash(page, strlen(page), "<style>", "</style>", buf, sizeof(buf)));
    assert_string_equal(buf, " 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='");
    /* No element, or one never closed: nothing is allowed for it. */
    buf[0] = '\0';
    assert_false(csp_hash(page, strlen(page), "<template>", "</template>", buf, sizeof(buf)));
    assert_false(csp_hash("<script>x", 9, "<script>", "</script>", buf, sizeof(buf)));
    assert_string_equal(buf, "");
}

/* The page compiled in has its script, its style and the placeholder the server fills. */
static void test_embedded_page(void **state)
{
    (void)state;
    const char *p = (const char *)ks_status_page;
    char buf[128] = "";
    assert_true(csp_hash(p, ks_status_page_len, "<script>", "</script>", buf, sizeof(buf)));
    assert_true(csp_hash(p, ks_status_page_len, "<style>", "</style>", buf, sizeof(buf)));
    assert_non_null(memmem(p, ks_status_page_len, PROCESS_MARK, strlen(PROCESS_MARK)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csp_hash),
        cmocka_unit_test(test_embedded_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
