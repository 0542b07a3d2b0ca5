/* test_status_fields.c: the status field list (proxy/status_fields.h) against the proto
 * (protobuf-c's descriptors of consumer.proto): every row with a proto field names one of
 * its level's message, by name, number and type, and every field of those messages has its
 * row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ksidecar/v1/consumer.pb-c.h"
#include "status_fields.h"

typedef struct {
    const char *type, *name;
    unsigned num;
} row_t;

#define ROW(type, m, pb, name, num, kind, doc) {#type, name, num},
static const row_t group_rows[] = {KS_STATUS_GROUP_FIELDS(ROW)};
static const row_t counter_rows[] = {KS_STATUS_COUNTER_FIELDS(ROW)};
static const row_t memory_rows[] = {KS_STATUS_MEMORY_FIELDS(ROW)};
static const row_t part_rows[] = {KS_STATUS_PART_FIELDS(ROW)};
static const row_t sub_rows[] = {KS_STATUS_SUB_FIELDS(ROW)};
static const row_t credits_rows[] = {KS_STATUS_CREDITS_FIELDS(ROW)};
#define ROWS(v) v, sizeof(v) / sizeof(v[0])

/* What the proto field of a row of type `type` must be. */
typedef struct {
    const char *type;
    ProtobufCType pb;
    bool repeated;
    const ProtobufCMessageDescriptor *msg; /* for MESSAGE */
} type_map_t;

static const type_map_t type_map[] = {
    {"NAME", PROTOBUF_C_TYPE_STRING, false, NULL},
    {"NAME_OPT", PROTOBUF_C_TYPE_STRING, false, NULL},
    {"TEXT", PROTOBUF_C_TYPE_STRING, false, NULL},
    {"BOOL", PROTOBUF_C_TYPE_BOOL, false, NULL},
    {"I32", PROTOBUF_C_TYPE_INT32, false, NULL},
    {"I64", PROTOBUF_C_TYPE_INT64, false, NULL},
    {"I64_OPT", PROTOBUF_C_TYPE_INT64, false, NULL},
    {"TOPICS", PROTOBUF_C_TYPE_STRING, true, NULL},
    {"PARTS", PROTOBUF_C_TYPE_MESSAGE, true, &ksidecar__v1__partition_status__descriptor},
    {"SUBS", PROTOBUF_C_TYPE_MESSAGE, true, &ksidecar__v1__subscriber_status__descriptor},
    {"MEMORY", PROTOBUF_C_TYPE_MESSAGE, false, &ksidecar__v1__memory_status__descriptor},
    {"CREDITS", PROTOBUF_C_TYPE_MESSAGE, false, &ksidecar__v1__credits__descriptor},
    {"HIST", PROTOBUF_C_TYPE_MESSAGE, false, &ksidecar__v1__histogram__descriptor},
};

static const type_map_t *type_of(const char *type)
{
    for (size_t i = 0; i < sizeof(type_map) / sizeof(type_map[0]); i++)
        if (!strcmp(type_map[i].type, type))
            return &type_map[i];
    return NULL;
}

/* The problems between message d and the rows of its level (rows, plus flat: rows whose
 * fields are d's own though the JSON nests them; may be NULL), each printed. */
static int check_level(const ProtobufCMessageDescriptor *d, const row_t *rows, size_t n,
                       const row_t *flat, size_t nflat)
{
    int bad = 0;
    for (size_t i = 0; i < n + nflat; i++) {
        const row_t *r = i < n ? &rows[i] : &flat[i - n];
        for (size_t j = 0; j < i; j++) {
            const row_t *o = j < n ? &rows[j] : &flat[j - n];
            if (!strcmp(o->name, r->name)) {
                printf("%s: \"%s\" has two rows\n", d->name, r->name);
                bad++;
            }
        }
        if (r->num == 0) { /* no field of its own: only COUNTERS, whose rows are flat */
            if (strcmp(r->type, "COUNTERS") != 0) {
                printf("%s: \"%s\" has no proto field number\n", d->name, r->name);
                bad++;
            }
            continue;
        }
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field_by_name(d, r->name);
        const type_map_t *t = type_of(r->type);
        if (!f) {
            printf("%s: \"%s\" is in the list, not in the proto\n", d->name, r->name);
            bad++;
        } else if (f->id != r->num) {
            printf("%s: \"%s\" is %u in the list, %u in the proto\n", d->name, r->name, r->num,
                   f->id);
            bad++;
        } else if (!t || f->type != t->pb ||
                   (f->label == PROTOBUF_C_LABEL_REPEATED) != t->repeated ||
                   (t->msg && f->descriptor != t->msg)) {
            printf("%s: \"%s\" is of type %s in the list, not its proto type\n", d->name, r->name,
                   r->type);
            bad++;
        }
    }
    for (unsigned i = 0; i < d->n_fields; i++) {
        const char *name = d->fields[i].name;
        bool found = false;
        for (size_t j = 0; j < n + nflat && !found; j++)
            found = !strcmp((j < n ? &rows[j] : &flat[j - n])->name, name);
        if (!found) {
            printf("%s: \"%s\" = %u is in the proto, not in the list\n", d->name, name,
                   d->fields[i].id);
            bad++;
        }
    }
    return bad;
}

static void test_list_matches_proto(void **state)
{
    (void)state;
    assert_int_equal(
        check_level(&ksidecar__v1__group_status__descriptor, ROWS(group_rows), ROWS(counter_rows)),
        0);
    assert_int_equal(
        check_level(&ksidecar__v1__memory_status__descriptor, ROWS(memory_rows), NULL, 0), 0);
    assert_int_equal(
        check_level(&ksidecar__v1__partition_status__descriptor, ROWS(part_rows), NULL, 0), 0);
    assert_int_equal(
        check_level(&ksidecar__v1__subscriber_status__descriptor, ROWS(sub_rows), NULL, 0), 0);
    assert_int_equal(check_level(&ksidecar__v1__credits__descriptor, ROWS(credits_rows), NULL, 0),
                     0);
}

/* The check itself finds each kind of mismatch. */
static void test_check_finds_mismatches(void **state)
{
    (void)state;
    /* A field of the proto with no row: the counters left out. */
    assert_int_equal(
        check_level(&ksidecar__v1__group_status__descriptor, ROWS(group_rows), NULL, 0),
        (int)(sizeof(counter_rows) / sizeof(counter_rows[0])));
    /* A row with no field, a wrong number, a wrong type, a row twice. */
    const row_t wrong[] = {{"I64", "records", 1}, {"I64", "bytes", 2}, {"I64", "messages", 3}};
    assert_int_equal(check_level(&ksidecar__v1__credits__descriptor, ROWS(wrong), NULL, 0), 1);
    const row_t renumbered[] = {{"I64", "records", 2}, {"I64", "bytes", 1}};
    assert_int_equal(check_level(&ksidecar__v1__credits__descriptor, ROWS(renumbered), NULL, 0), 2);
    const row_t retyped[] = {{"I32", "records", 1}, {"TEXT", "bytes", 2}};
    assert_int_equal(check_level(&ksidecar__v1__credits__descriptor, ROWS(retyped), NULL, 0), 2);
    const row_t twice[] = {{"I64", "records", 1}, {"I64", "bytes", 2}, {"I64", "bytes", 2}};
    assert_int_equal(check_level(&ksidecar__v1__credits__descriptor, ROWS(twice), NULL, 0), 1);
    const row_t unnumbered[] = {{"I64", "records", 1}, {"I64", "bytes", 0}};
    assert_int_equal(check_level(&ksidecar__v1__credits__descriptor, ROWS(unnumbered), NULL, 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_matches_proto),
        cmocka_unit_test(test_check_finds_mismatches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
