/* test_openapi_status.c: api/openapi.yaml's GroupStatus schema, as compiled in, against the
 * status field list (proxy/status_fields.h): every field of every level is a property of its
 * place in the schema with the type its TYPE gives, and the schema has no property the list
 * lacks. Read with libyaml, so any YAML form the spec uses is read as YAML means it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <yaml.h>

#include "status_fields.h"

extern const unsigned char ks_openapi_yaml[];
extern const size_t ks_openapi_yaml_len;

/* What the schema must say of a field of each TYPE: its type ("a|b" for a list of types, in
 * the order written), and the level its object or its array's items hold (or a $ref). A
 * TYPE without a row here fails to build. */
typedef enum { L_NONE, L_GROUP, L_COUNTERS, L_MEMORY, L_PARTS, L_SUBS, L_CREDITS } level_t;
typedef struct {
    const char *type;
    level_t level; /* an object's properties, or an array's items' */
    const char *ref;
} want_t;
static const want_t W_NAME = {.type = "string"}, W_NAME_OPT = {.type = "string|null"},
                    W_TEXT = {.type = "string"}, W_BOOL = {.type = "boolean"},
                    W_I32 = {.type = "integer"}, W_I64 = {.type = "integer"},
                    W_I64_OPT = {.type = "integer|null"}, W_TOPICS = {.type = "array"},
                    W_PARTS = {.type = "array", .level = L_PARTS},
                    W_SUBS = {.type = "array", .level = L_SUBS},
                    W_COUNTERS = {.type = "object", .level = L_COUNTERS},
                    W_MEMORY = {.type = "object", .level = L_MEMORY},
                    W_CREDITS = {.type = "object", .level = L_CREDITS},
                    W_HIST = {.ref = "#/components/schemas/Histogram"};

typedef struct {
    const want_t *want;
    const char *name;
} row_t;
#define ROW(type, m, pb, name, num, kind, doc) {&W_##type, name},
static const row_t group_rows[] = {KS_STATUS_GROUP_FIELDS(ROW)};
static const row_t counter_rows[] = {KS_STATUS_COUNTER_FIELDS(ROW)};
static const row_t memory_rows[] = {KS_STATUS_MEMORY_FIELDS(ROW)};
static const row_t part_rows[] = {KS_STATUS_PART_FIELDS(ROW)};
static const row_t sub_rows[] = {KS_STATUS_SUB_FIELDS(ROW)};
static const row_t credits_rows[] = {KS_STATUS_CREDITS_FIELDS(ROW)};
#undef ROW
#define LEVEL(v)                                                                                   \
    {                                                                                              \
        v, sizeof(v) / sizeof(v[0])                                                                \
    }
static const struct {
    const row_t *rows;
    size_t n;
} levels[] = {[L_GROUP] = LEVEL(group_rows),   [L_COUNTERS] = LEVEL(counter_rows),
              [L_MEMORY] = LEVEL(memory_rows), [L_PARTS] = LEVEL(part_rows),
              [L_SUBS] = LEVEL(sub_rows),      [L_CREDITS] = LEVEL(credits_rows)};

/* The JSON keys of a Histogram (HIST's object), as http_json.c writes them. */
static const char *const hist_keys[] = {"bounds_ms", "counts", "sum_ms", "count"};

static yaml_document_t doc;
static int problems;

static void problem(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    print_error("%s\n", msg);
    problems++;
}

static const char *scalar(yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The value of key in mapping m, or NULL. */
static yaml_node_t *get(yaml_node_t *m, const char *key)
{
    if (!m || m->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const char *k = scalar(yaml_document_get_node(&doc, p->key));
        if (k && !strcmp(k, key))
            return yaml_document_get_node(&doc, p->value);
    }
    return NULL;
}

/* A schema's type as "a" or "a|b" (a list of types), "" when it has none. */
static void type_of(yaml_node_t *schema, char *out, size_t size)
{
    yaml_node_t *t = get(schema, "type");
    out[0] = '\0';
    if (scalar(t)) {
        snprintf(out, size, "%s", scalar(t));
        return;
    }
    if (!t || t->type != YAML_SEQUENCE_NODE)
        return;
    for (yaml_node_item_t *i = t->data.sequence.items.start; i < t->data.sequence.items.top; i++) {
        const char *s = scalar(yaml_document_get_node(&doc, *i));
        size_t len = strlen(out);
        snprintf(out + len, size - len, "%s%s", len ? "|" : "", s ? s : "?");
    }
}

/* components/schemas/<name> of a "#/components/schemas/<name>" ref, or NULL. */
static yaml_node_t *deref(const char *ref)
{
    static const char prefix[] = "#/components/schemas/";
    if (!ref || strncmp(ref, prefix, sizeof(prefix) - 1))
        return NULL;
    yaml_node_t *schemas = get(get(yaml_document_get_root_node(&doc), "components"), "schemas");
    return get(schemas, ref + sizeof(prefix) - 1);
}

static void check_level(yaml_node_t *schema, level_t lv, const char *path);

/* One field's schema against its row. */
static void check_field(yaml_node_t *prop, const row_t *r, const char *path)
{
    const want_t *w = r->want;
    const char *ref = scalar(get(prop, "$ref"));
    if (w->ref) {
        if (!ref || strcmp(ref, w->ref))
            problem("%s%s: api/openapi.yaml has %s, status_fields.h's type wants $ref %s", path,
                    r->name, ref ? ref : "no $ref", w->ref);
        return;
    }
    if (ref)
        prop = deref(ref);
    char type[64];
    type_of(prop, type, sizeof(type));
    if (strcmp(type, w->type)) {
        problem("%s%s: api/openapi.yaml says type %s, status_fields.h's type means %s", path,
                r->name, *type ? type : "(none)", w->type);
        return;
    }
    char below[160];
    if (!strcmp(w->type, "array")) {
        yaml_node_t *items = get(prop, "items");
        if (w->level == L_NONE) { /* TOPICS: strings */
            char it[64];
            type_of(items, it, sizeof(it));
            if (strcmp(it, "string"))
                problem("%s%s: its items are %s in api/openapi.yaml, strings in the list", path,
                        r->name, *it ? it : "(untyped)");
            return;
        }
        snprintf(below, sizeof(below), "%s%s[].", path, r->name);
        check_level(items, w->level, below);
    } else if (w->level != L_NONE) {
        snprintf(below, sizeof(below), "%s%s.", path, r->name);
        check_level(prop, w->level, below);
    }
}

/* An object schema's properties against the rows of level lv, both ways. */
static void check_level(yaml_node_t *schema, level_t lv, const char *path)
{
    const char *ref = scalar(get(schema, "$ref"));
    if (ref)
        schema = deref(ref);
    yaml_node_t *props = get(schema, "properties");
    if (!props || props->type != YAML_MAPPING_NODE) {
        problem("%s: no properties in api/openapi.yaml", *path ? path : "GroupStatus");
        return;
    }
    for (size_t i = 0; i < levels[lv].n; i++) {
        const row_t *r = &levels[lv].rows[i];
        yaml_node_t *prop = get(props, r->name);
        if (!prop)
            problem("%s%s: in status_fields.h, not in api/openapi.yaml's GroupStatus", path,
                    r->name);
        else
            check_field(prop, r, path);
    }
    for (yaml_node_pair_t *p = props->data.mapping.pairs.start; p < props->data.mapping.pairs.top;
         p++) {
        const char *k = scalar(yaml_document_get_node(&doc, p->key));
        bool known = false;
        for (size_t i = 0; k && i < levels[lv].n; i++)
            known |= !strcmp(levels[lv].rows[i].name, k);
        if (!known)
            problem("%s%s: in api/openapi.yaml's GroupStatus, not in status_fields.h", path,
                    k ? k : "?");
    }
}

static int load(void **state)
{
    (void)state;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return -1;
    yaml_parser_set_input_string(&parser, ks_openapi_yaml, ks_openapi_yaml_len);
    int ok = yaml_parser_load(&parser, &doc);
    if (!ok)
        print_error("api/openapi.yaml: %s at line %zu\n", parser.problem ? parser.problem : "?",
                    parser.problem_mark.line + 1);
    yaml_parser_delete(&parser);
    return ok && yaml_document_get_root_node(&doc) ? 0 : -1;
}

static int unload(void **state)
{
    (void)state;
    yaml_document_delete(&doc);
    return 0;
}

static void test_group_status_is_the_field_list(void **state)
{
    (void)state;
    problems = 0;
    yaml_node_t *gs = deref("#/components/schemas/GroupStatus");
    assert_non_null(gs);
    check_level(gs, L_GROUP, "");
    assert_int_equal(problems, 0);
}

static void test_histogram_is_what_a_hist_field_writes(void **state)
{
    (void)state;
    problems = 0;
    yaml_node_t *props = get(deref("#/components/schemas/Histogram"), "properties");
    assert_non_null(props);
    size_t n = props->data.mapping.pairs.top - props->data.mapping.pairs.start;
    assert_int_equal(n, sizeof(hist_keys) / sizeof(hist_keys[0]));
    for (size_t i = 0; i < n; i++) {
        char type[64];
        type_of(get(props, hist_keys[i]), type, sizeof(type));
        if (strcmp(type, i < 2 ? "array" : "integer"))
            problem("Histogram.%s: type %s", hist_keys[i], *type ? type : "(none)");
    }
    assert_int_equal(problems, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_status_is_the_field_list),
        cmocka_unit_test(test_histogram_is_what_a_hist_field_writes),
    };
    return cmocka_run_group_tests(tests, load, unload);
}
