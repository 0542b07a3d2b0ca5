/* test_auth.c: the tokens file (JSON and legacy), identities and the scope check; reloads
 * free the tables they replace once no principal of theirs is held. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ack_id.h"
#include "auth.h"

/* sha256("s3cret") and sha256("other") */
#define H_S3CRET "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0"
#define H_OTHER  "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa"

static const char *json_file =
    "{\"tokens\":[{\"sha256\":\"" H_S3CRET "\",\"groups\":[\"orders-*\"],"
    "\"consume\":[\"orders\",\"orders.*\"],\"produce\":[\"orders-out\"]},"
    "{\"subject\":\"CN=app1,O=Acme\",\"groups\":[\"billing\"],\"consume\":[\"billing\"]},"
    "{\"sha256\":\"" H_OTHER "\"}]}";

static void test_json_scopes(void **state)
{
    (void)state;
    char err[512] = "";
    ks_auth_t *a = ks_auth_parse(json_file, "t.json", err, sizeof(err));
    assert_non_null(a);
    const ks_principal_t *who = NULL;
    assert_int_equal(ks_auth_identify(a, "Bearer s3cret", NULL, &who, err, sizeof(err)), KS_OK);
    assert_string_equal(ks_auth_principal_id(who), "token#1");
    assert_true(ks_auth_covers(a, who, KS_SCOPE_GROUPS, "orders-x"));
    assert_false(ks_auth_covers(a, who, KS_SCOPE_GROUPS, "billing"));
    const char *ok[] = {"orders", "orders.eu"};
    assert_int_equal(ks_auth_allow(a, who, KS_SCOPE_CONSUME, ok, 2, err, sizeof(err)), KS_OK);
    const char *bad[] = {"orders", "secret-billing"};
    assert_int_equal(ks_auth_allow(a, who, KS_SCOPE_CONSUME, bad, 2, err, sizeof(err)),
                     KS_E_PERMISSION);
    assert_string_equal(err, "token may not consume topic \"secret-billing\" (consume scope)");
    const char *orders[] = {"orders"};
    assert_int_equal(ks_auth_allow(a, who, KS_SCOPE_PRODUCE, orders, 1, err, sizeof(err)),
                     KS_E_PERMISSION);
    assert_string_equal(err, "token may not produce to topic \"orders\" (produce scope)");

    /* No scope at all: no access. */
    assert_int_equal(ks_auth_identify(a, "Bearer other", NULL, &who, err, sizeof(err)), KS_OK);
    assert_false(ks_auth_covers(a, who, KS_SCOPE_GROUPS, "orders-x"));
    assert_false(ks_auth_covers(a, who, KS_SCOPE_CONSUME, "orders"));

    /* A subject: used when no token is sent; a sent token wins. */
    assert_int_equal(ks_auth_identify(a, NULL, "CN=app1,O=Acme", &who, err, sizeof(err)), KS_OK);
    assert_string_equal(ks_auth_principal_id(who), "subject#2");
    assert_true(ks_auth_covers(a, who, KS_SCOPE_CONSUME, "billing"));
    const char *g[] = {"orders-x"};
    assert_int_equal(ks_auth_allow(a, who, KS_SCOPE_GROUPS, g, 1, err, sizeof(err)),
                     KS_E_PERMISSION);
    assert_string_equal(err,
                        "the client certificate may not use group \"orders-x\" (groups scope)");
    assert_int_equal(ks_auth_identify(a, "Bearer s3cret", "CN=app1,O=Acme", &who, err, sizeof(err)),
                     KS_OK);
    assert_string_equal(ks_auth_principal_id(who), "token#1");

    /* Unknown subject, wrong or missing token. */
    assert_int_equal(ks_auth_identify(a, NULL, "CN=nobody", &who, err, sizeof(err)), KS_E_UNAUTH);
    assert_non_null(strstr(err, "CN=nobody"));
    assert_int_equal(ks_auth_identify(a, "Bearer nope", NULL, &who, err, sizeof(err)), KS_E_UNAUTH);
    assert_int_equal(ks_auth_identify(a, NULL, NULL, &who, err, sizeof(err)), KS_E_UNAUTH);
    assert_int_equal(ks_auth_identify(a, "Basic czNjcmV0", NULL, &who, err, sizeof(err)),
                     KS_E_UNAUTH);
    /* Ack ids: each one's topic against the consume scope; malformed ones are left alone. */
    assert_int_equal(ks_auth_identify(a, "Bearer s3cret", NULL, &who, err, sizeof(err)), KS_OK);
    char i1[KS_ACK_ID_MAX], i2[KS_ACK_ID_MAX], i3[KS_ACK_ID_MAX];
    ks_ack_id_write(i1, sizeof(i1), 1, 2, 3, 0, 10, 1, "orders", 6);
    ks_ack_id_write(i2, sizeof(i2), 1, 2, 3, 0, 11, 1, "orders", 6);
    ks_ack_id_write(i3, sizeof(i3), 1, 2, 3, 0, 12, 1, "billing", 7);
    const char *ids_ok[] = {i1, "junk", i2};
    assert_int_equal(ks_auth_allow_ack_ids(a, who, ids_ok, 3, err, sizeof(err)), KS_OK);
    const char *ids_bad[] = {i1, i2, i3};
    assert_int_equal(ks_auth_allow_ack_ids(a, who, ids_bad, 3, err, sizeof(err)), KS_E_PERMISSION);
    assert_string_equal(err, "ack_ids[2]: token may not consume topic \"billing\" (consume scope)");
    /* A range's topic is checked as an id's (a range parsed as malformed slipped through). */
    const char *ids_range[] = {i1, "a10000000100000002-3-0-12~20-1-billing"};
    assert_int_equal(ks_auth_allow_ack_ids(a, who, ids_range, 2, err, sizeof(err)),
                     KS_E_PERMISSION);
    assert_string_equal(err, "ack_ids[1]: token may not consume topic \"billing\" (consume scope)");
    assert_int_equal(ks_auth_allow_ack_ids(NULL, NULL, ids_bad, 3, err, sizeof(err)), KS_OK);
    ks_auth_free(a);
}

static void test_legacy_lines(void **state)
{
    (void)state;
    char err[512] = "";
    ks_auth_t *a =
        ks_auth_parse("# comment\n\n" H_S3CRET " orders-*,billing\n", "t.txt", err, sizeof(err));
    assert_non_null(a);
    const ks_principal_t *who = NULL;
    assert_int_equal(ks_auth_identify(a, "bearer s3cret", NULL, &who, err, sizeof(err)), KS_OK);
    assert_true(ks_auth_covers(a, who, KS_SCOPE_GROUPS, "billing"));
    assert_true(ks_auth_covers(a, who, KS_SCOPE_GROUPS, "orders-1"));
    const char *t[] = {"orders"};
    assert_int_equal(ks_auth_allow(a, who, KS_SCOPE_CONSUME, t, 1, err, sizeof(err)),
                     KS_E_PERMISSION);
    assert_non_null(strstr(err, "(consume scope; "));
    assert_non_null(strstr(err, "legacy"));
    assert_int_equal(ks_auth_allow(a, who, KS_SCOPE_PRODUCE, t, 1, err, sizeof(err)),
                     KS_E_PERMISSION);
    assert_int_equal(ks_auth_check(a, "Bearer s3cret", "billing", err, sizeof(err)), KS_OK);
    assert_int_equal(ks_auth_check(a, "Bearer s3cret", "x", err, sizeof(err)), KS_E_PERMISSION);
    ks_auth_free(a);
}

static void test_auth_off_allows_everything(void **state)
{
    (void)state;
    char err[64];
    const ks_principal_t *who = (const ks_principal_t *)&who;
    assert_int_equal(ks_auth_identify(NULL, NULL, NULL, &who, err, sizeof(err)), KS_OK);
    assert_null(who);
    const char *t[] = {"anything"};
    assert_int_equal(ks_auth_allow(NULL, NULL, KS_SCOPE_PRODUCE, t, 1, err, sizeof(err)), KS_OK);
    assert_null(ks_auth_principal_id(NULL));
}

static void expect_error(const char *text, const char *want)
{
    char err[512] = "";
    ks_auth_t *a = ks_auth_parse(text, "f", err, sizeof(err));
    if (a)
        fail_msg("parsed: %s", text);
    if (!strstr(err, want))
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static void test_bad_files(void **state)
{
    (void)state;
    expect_error("", "holds no token");
    expect_error("# only a comment\n", "holds no token");
    expect_error("{\"tokens\":[]}", "holds no token");
    expect_error("abc orders", "line 1");
    expect_error(H_S3CRET, "line 1");
    expect_error(H_S3CRET " a b", "line 1");
    expect_error("{\"tokens\":[{\"sha256\":\"" H_S3CRET "\",\"subject\":\"CN=x\"}]}",
                 "exactly one of");
    expect_error("{\"tokens\":[{\"groups\":[\"a\"]}]}", "exactly one of");
    expect_error("{\"tokens\":[{\"subject\":\"\"}]}", "exactly one of");
    expect_error("{\"tokens\":[{\"sha256\":\"abc\"}]}", "tokens[0].sha256");
    expect_error("{\"tokens\":[{\"sha256\":\"" H_S3CRET "\",\"topics\":[\"a\"]}]}", "\"topics\"");
    expect_error("{\"tokens\":[{\"sha256\":\"" H_S3CRET "\",\"consume\":\"a\"}]}", "\"consume\"");
    expect_error("{\"tokens\":[{\"sha256\":\"" H_S3CRET "\",\"consume\":[1]}]}",
                 "tokens[0].consume[0]");
    expect_error("{\"tokens\":[1]}", "tokens[0] is not an object");
    expect_error("{\"tokens\":{}}", "expected {\"tokens\":[...]}");
    expect_error("{\"tokens\":[], \"x\":1}", "expected {\"tokens\":[...]}");
    expect_error("{\"tokens\":[", "line 1");
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The tokens file with s3cret's groups scope `groups` (a JSON string). */
static void write_tokens(const char *path, const char *groups)
{
    char text[512];
    snprintf(text, sizeof(text),
             "{\"tokens\":[{\"sha256\":\"" H_S3CRET "\",\"groups\":[%s],\"consume\":[\"orders\"]},"
             "{\"sha256\":\"" H_OTHER "\",\"groups\":[\"billing\"]}]}",
             groups);
    write_text(path, text);
}

/* A tokens file of its own for the test named tag (s3cret's groups "orders-*"), loaded. */
static ks_auth_t *load_own(char *path, size_t size, const char *tag)
{
    char err[512] = "";
    snprintf(path, size, "/tmp/ks_test_auth_%s_%d.json", tag, (int)getpid());
    write_tokens(path, "\"orders-*\"");
    ks_auth_t *a = ks_auth_load(path, err, sizeof(err));
    if (!a)
        fail_msg("%s", err);
    return a;
}

/* Reloads replace the table in force; one nobody holds is freed at once, one a principal of
 * which is held stays (and reads as it did) until its last holder lets go. */
static void test_reloads_free_replaced_tables(void **state)
{
    (void)state;
    char path[64], err[512] = "";
    ks_auth_t *a = load_own(path, sizeof(path), "reloads");
    assert_int_equal(ks_auth_tables(a), 1);

    /* Nobody holds anything: each reload frees the table it replaces. */
    for (int i = 0; i < 200; i++) {
        write_tokens(path, i % 2 ? "\"billing-*\"" : "\"orders-*\"");
        assert_int_equal(ks_auth_reload(a, path, err, sizeof(err)), 0);
        assert_int_equal(ks_auth_tables(a), 1);
    }

    /* A principal held (as a request or a stream holds its caller) keeps its table through
     * any number of reloads; requests served meanwhile hold and let go of the new ones. */
    write_tokens(path, "\"orders-*\"");
    assert_int_equal(ks_auth_reload(a, path, err, sizeof(err)), 0);
    const ks_principal_t *old = NULL, *now = NULL;
    assert_int_equal(ks_auth_identify(a, "Bearer s3cret", NULL, &old, err, sizeof(err)), KS_OK);
    assert_ptr_equal(ks_auth_hold(old), old); /* a second holder: a stream it opened */
    for (int i = 0; i < 1000; i++) {
        write_tokens(path, "\"billing-*\"");
        assert_int_equal(ks_auth_reload(a, path, err, sizeof(err)), 0);
        assert_int_equal(ks_auth_tables(a), 2);
        assert_int_equal(ks_auth_identify(a, "Bearer s3cret", NULL, &now, err, sizeof(err)), KS_OK);
        assert_false(ks_auth_covers(a, now, KS_SCOPE_GROUPS, "orders-1"));
        ks_auth_release(now);
        /* The old table reads as it did: its scopes, its id. */
        assert_true(ks_auth_covers(a, old, KS_SCOPE_GROUPS, "orders-1"));
        assert_false(ks_auth_covers(a, old, KS_SCOPE_GROUPS, "billing-1"));
        assert_string_equal(ks_auth_principal_id(old), "token#1");
        const ks_principal_t *cur = ks_auth_current(a, old);
        assert_non_null(cur);
        assert_ptr_not_equal(cur, old);
        assert_true(ks_auth_covers(a, cur, KS_SCOPE_GROUPS, "billing-1"));
        assert_int_equal(ks_auth_tables(a), 2);
        ks_auth_release(cur);
    }
    ks_auth_release(old);
    assert_int_equal(ks_auth_tables(a), 2); /* the stream still holds it */
    assert_true(ks_auth_covers(a, old, KS_SCOPE_CONSUME, "orders"));
    ks_auth_release(old);
    assert_int_equal(ks_auth_tables(a), 1);

    /* The table in force, held across a reload, goes when its holder lets go. */
    assert_int_equal(ks_auth_identify(a, NULL, NULL, &now, err, sizeof(err)), KS_E_UNAUTH);
    assert_null(now);
    assert_int_equal(ks_auth_identify(a, "Bearer other", NULL, &now, err, sizeof(err)), KS_OK);
    assert_int_equal(ks_auth_tables(a), 1);
    assert_int_equal(ks_auth_reload(a, path, err, sizeof(err)), 0);
    assert_int_equal(ks_auth_tables(a), 2);
    assert_true(ks_auth_covers(a, now, KS_SCOPE_GROUPS, "billing"));
    ks_auth_release(now);
    assert_int_equal(ks_auth_tables(a), 1);
    ks_auth_release(NULL);
    assert_null(ks_auth_hold(NULL));
    ks_auth_free(a);
    unlink(path);
}

typedef struct reader {
    ks_auth_t *a;
    int rounds;
    int served;
} reader_t;

/* A request's worth of auth, again and again: identify, check, look the caller up in the
 * table in force, let go. */
static void *reader_main(void *arg)
{
    reader_t *r = arg;
    char err[256];
    for (int i = 0; i < r->rounds; i++) {
        const ks_principal_t *who = NULL;
        const char *hdr = i % 2 ? "Bearer s3cret" : "Bearer other";
        if (ks_auth_identify(r->a, hdr, NULL, &who, err, sizeof(err)) != KS_OK)
            continue;
        const char *g = "billing";
        (void)ks_auth_allow(r->a, who, KS_SCOPE_GROUPS, &g, 1, err, sizeof(err));
        const ks_principal_t *cur = ks_auth_current(r->a, who);
        if (cur && ks_auth_principal_id(cur)[0] == 't')
            r->served++;
        ks_auth_release(cur);
        ks_auth_release(who);
    }
    return NULL;
}

/* Readers on two threads while another reloads: every table but the one in force is freed
 * in the end (ASan and TSan builds check the reads). */
static void test_reload_under_readers(void **state)
{
    (void)state;
    char path[64], err[512] = "";
    ks_auth_t *a = load_own(path, sizeof(path), "readers");
    reader_t r[2] = {{a, 20000, 0}, {a, 20000, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &r[i]), 0);
    for (int i = 0; i < 300; i++)
        assert_int_equal(ks_auth_reload(a, path, err, sizeof(err)), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].served, r[i].rounds);
    }
    assert_int_equal(ks_auth_tables(a), 1);
    ks_auth_free(a);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_scopes),
        cmocka_unit_test(test_legacy_lines),
        cmocka_unit_test(test_auth_off_allows_everything),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_reloads_free_replaced_tables),
        cmocka_unit_test(test_reload_under_readers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
