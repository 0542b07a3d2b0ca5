/* test_openapi_routes.c: the route table (api/http/http_routes.c) and api/openapi.yaml, as
 * compiled into the binary, name the same methods and paths. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http_int.h"

extern const unsigned char ks_openapi_yaml[];
extern const size_t ks_openapi_yaml_len;

#define MAX_OPS 64

typedef struct {
    char method[8]; /* upper case */
    char path[128];
} op_t;

/* The operations under the spec's top-level paths: (two-space "  /path:" lines, four-space
 * "    get:" lines below them). A line-based reading is enough for the file we write; the
 * flow and quoted forms of YAML are not used for these keys. */
static size_t spec_ops(op_t *ops, size_t max)
{
    const char *p = (const char *)ks_openapi_yaml, *end = p + ks_openapi_yaml_len;
    static const char *const methods[] = {"get",   "put",     "post", "delete",
                                          "patch", "options", "head", "trace"};
    bool in_paths = false;
    char path[128] = "";
    size_t n = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char line[512];
        snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) ? len : sizeof(line) - 1), p);
        p += len + 1;
        if (line[0] && line[0] != ' ' && line[0] != '#') {
            in_paths = !strcmp(line, "paths:");
            continue;
        }
        if (!in_paths)
            continue;
        if (!strncmp(line, "  /", 3) && line[len - 1] == ':') {
            snprintf(path, sizeof(path), "%.*s", (int)(len - 3), line + 2);
            continue;
        }
        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
            size_t ml = strlen(methods[i]);
            if (!strncmp(line, "    ", 4) && !strncmp(line + 4, methods[i], ml) &&
                line[4 + ml] == ':' && path[0]) {
                assert_true(n < max);
                for (size_t k = 0; k <= ml; k++)
                    ops[n].method[k] = (char)toupper((unsigned char)methods[i][k]);
                snprintf(ops[n].path, sizeof(ops[n].path), "%s", path);
                n++;
            }
        }
    }
    return n;
}

/* The table's rows as operations. A row whose path is another's with a '/' added (the
 * "/v1/groups/" spelling of "/v1/groups") serves the same thing and is not in the spec. */
static size_t table_ops(op_t *ops, size_t max)
{
    size_t rows;
    const route_t *rt = http_route_table(&rows);
    size_t n = 0;
    for (size_t i = 0; i < rows; i++) {
        size_t pl = strlen(rt[i].path);
        bool alias = false;
        for (size_t j = 0; j < rows; j++)
            alias |= pl > 1 && rt[i].path[pl - 1] == '/' && strlen(rt[j].path) == pl - 1 &&
                     !strncmp(rt[j].path, rt[i].path, pl - 1);
        if (alias)
            continue;
        assert_true(n < max);
        snprintf(ops[n].method, sizeof(ops[n].method), "%s", rt[i].method);
        snprintf(ops[n].path, sizeof(ops[n].path), "%s", rt[i].path);
        n++;
    }
    return n;
}

static bool has(const op_t *ops, size_t n, const op_t *o)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ops[i].method, o->method) && !strcmp(ops[i].path, o->path))
            return true;
    return false;
}

static void test_table_and_spec_agree(void **state)
{
    (void)state;
    op_t spec[MAX_OPS], table[MAX_OPS];
    size_t ns = spec_ops(spec, MAX_OPS), nt = table_ops(table, MAX_OPS);
    assert_true(ns > 5); /* the parse found the paths at all */
    int missing = 0;
    for (size_t i = 0; i < nt; i++)
        if (!has(spec, ns, &table[i])) {
            print_error("the route table serves %s %s; api/openapi.yaml does not describe it\n",
                        table[i].method, table[i].path);
            missing++;
        }
    for (size_t i = 0; i < ns; i++)
        if (!has(table, nt, &spec[i])) {
            print_error("api/openapi.yaml describes %s %s; the route table does not serve it\n",
                        spec[i].method, spec[i].path);
            missing++;
        }
    assert_int_equal(missing, 0);
}

static void test_spec_is_3_1(void **state)
{
    (void)state;
    assert_true(ks_openapi_yaml_len > 16);
    assert_memory_equal(ks_openapi_yaml, "openapi: 3.1.", 13);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_and_spec_agree),
        cmocka_unit_test(test_spec_is_3_1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
