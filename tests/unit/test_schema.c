/* test_schema.c: tests the schema object (codec/schema.c): its fields and references, the
 * parsed form made once however many threads ask at once, a parse failure kept, and splitting
 * Confluent's wire format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

static atomic_int parses, frees;

/* A parser that takes a while, so that concurrent first calls overlap, and fails on "bad". */
static void *slow_parse(const char *text, size_t len, char *err, size_t errsize)
{
    (void)len;
    atomic_fetch_add(&parses, 1);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (!strcmp(text, "bad")) {
        snprintf(err, errsize, "bad is bad");
        return NULL;
    }
    return strdup(text);
}

static void count_free(void *p)
{
    atomic_fetch_add(&frees, 1);
    free(p);
}

static const ks_schema_parser_t parser = {KS_SCHEMA_AVRO, slow_parse, count_free};
static const ks_schema_parser_t other = {KS_SCHEMA_AVRO, slow_parse, count_free};

static void test_fields(void **state)
{
    (void)state;
    ks_schema_t *s = ks_schema_new(42, KS_SCHEMA_PROTOBUF, "abc\0def", 7, "[{\"name\":\"x\"}]");
    size_t len;
    assert_int_equal(ks_schema_id(s), 42);
    assert_int_equal(ks_schema_type(s), KS_SCHEMA_PROTOBUF);
    assert_memory_equal(ks_schema_text(s, &len), "abc\0def", 8); /* NUL-terminated too */
    assert_int_equal(len, 7);
    assert_string_equal(ks_schema_references(s), "[{\"name\":\"x\"}]");
    assert_ptr_equal(ks_schema_ref(s), s);
    ks_schema_unref(s);
    ks_schema_unref(s);
    ks_schema_unref(NULL);
    assert_string_equal(ks_schema_type_str(KS_SCHEMA_AVRO), "AVRO");
    assert_string_equal(ks_schema_type_str(KS_SCHEMA_JSON), "JSON");
    assert_int_equal(ks_schema_type_from_str("PROTOBUF"), KS_SCHEMA_PROTOBUF);
    assert_int_equal(ks_schema_type_from_str("avro"), -1);
}

typedef struct {
    ks_schema_t *s;
    const void *got;
} job_t;

static void *ask(void *arg)
{
    job_t *j = arg;
    char err[64];
    j->got = ks_schema_parsed(j->s, &parser, err, sizeof(err));
    return NULL;
}

static void test_parsed_once(void **state)
{
    (void)state;
    atomic_store(&parses, 0);
    atomic_store(&frees, 0);
    ks_schema_t *s = ks_schema_new(1, KS_SCHEMA_AVRO, "\"string\"", 8, NULL);
    pthread_t t[6];
    job_t jobs[6];
    for (int i = 0; i < 6; i++) {
        jobs[i] = (job_t){s, NULL};
        pthread_create(&t[i], NULL, ask, &jobs[i]);
    }
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&parses), 1);
    for (int i = 0; i < 6; i++) {
        assert_non_null(jobs[i].got);
        assert_ptr_equal(jobs[i].got, jobs[0].got);
    }
    assert_string_equal(jobs[0].got, "\"string\"");
    /* Another parser on the same schema is refused. */
    char err[128];
    assert_null(ks_schema_parsed(s, &other, err, sizeof(err)));
    assert_non_null(strstr(err, "another decoder"));
    assert_int_equal(atomic_load(&frees), 0);
    ks_schema_unref(s);
    assert_int_equal(atomic_load(&frees), 1);
}

static void test_parse_failure_kept(void **state)
{
    (void)state;
    atomic_store(&parses, 0);
    ks_schema_t *s = ks_schema_new(2, KS_SCHEMA_AVRO, "bad", 3, NULL);
    char err[128];
    for (int i = 0; i < 3; i++) {
        err[0] = '\0';
        assert_null(ks_schema_parsed(s, &parser, err, sizeof(err)));
        assert_string_equal(err, "bad is bad");
    }
    assert_int_equal(atomic_load(&parses), 1);
    ks_schema_unref(s);
}

static void test_wire_split(void **state)
{
    (void)state;
    const unsigned char ok[] = {0, 0x01, 0x02, 0x03, 0x04, 'h', 'i'};
    int32_t id;
    const void *body;
    size_t blen;
    char err[128];
    assert_int_equal(ks_wire_split(ok, sizeof(ok), &id, &body, &blen, err, sizeof(err)), 0);
    assert_int_equal(id, 0x01020304);
    assert_ptr_equal(body, ok + 5);
    assert_int_equal(blen, 2);
    assert_int_equal(ks_wire_split(ok, 5, &id, &body, &blen, err, sizeof(err)), 0);
    assert_int_equal(blen, 0);
    assert_int_equal(ks_wire_split(ok, 4, &id, &body, &blen, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "4 bytes"));
    const unsigned char magic[] = {1, 0, 0, 0, 1, 2};
    assert_int_equal(ks_wire_split(magic, sizeof(magic), &id, &body, &blen, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "first byte 0x01"));
    const unsigned char high[] = {0, 0xff, 0xff, 0xff, 0xfe};
    assert_int_equal(ks_wire_split(high, sizeof(high), &id, &body, &blen, err, sizeof(err)), 0);
    assert_int_equal(id, -2); /* a Java int, as the serializers write it */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_parsed_once),
        cmocka_unit_test(test_parse_failure_kept),
        cmocka_unit_test(test_wire_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
