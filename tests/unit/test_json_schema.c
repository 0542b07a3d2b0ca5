/* test_json_schema.c: tests JSON Schema (codec/json_schema.c): for each keyword checked, a value
 * that fits and one that does not, with the error naming where and why; schemas that do not
 * compile; $ref within the document, looping and not; nesting past the bound; the registry's
 * schema object; the consume path's body to JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"

#include "assert_contains.h"

/* A schema, a value, and what checking says: NULL when it fits, else words the error holds. */
typedef struct tcase {
    const char *schema;
    const char *value;
    const char *err;
} tcase_t;

static void run(const tcase_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char err[512] = "";
        ks_json_schema_t *js =
            ks_json_schema_new(t[i].schema, strlen(t[i].schema), err, sizeof(err));
        if (!js)
            fail_msg("case %zu: schema %s: %s", i, t[i].schema, err);
        json_error_t je;
        json_t *v = json_loads(t[i].value, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!v)
            fail_msg("case %zu: value %s: %s", i, t[i].value, je.text);
        err[0] = '\0';
        int rc = ks_json_schema_check(js, v, err, sizeof(err));
        if (!t[i].err && rc)
            fail_msg("case %zu: %s should fit %s: %s", i, t[i].value, t[i].schema, err);
        if (t[i].err) {
            if (!rc)
                fail_msg("case %zu: %s should not fit %s", i, t[i].value, t[i].schema);
            assert_contains(err, t[i].err);
        }
        json_decref(v);
        ks_json_schema_free(js);
    }
}

#define RUN(cases) run(cases, sizeof(cases) / sizeof(cases[0]))

static void test_types(void **state)
{
    (void)state;
    static const tcase_t cases[] = {
        {"{\"type\":\"string\"}", "\"a\"", NULL},
        {"{\"type\":\"string\"}", "1", "the value: 1 is not of type string"},
        {"{\"type\":\"integer\"}", "7", NULL},
        {"{\"type\":\"integer\"}", "7.0", NULL}, /* no fraction: an integer */
        {"{\"type\":\"integer\"}", "7.5", "7.5 is not of type integer"},
        {"{\"type\":\"number\"}", "7", NULL},
        {"{\"type\":\"number\"}", "\"7\"", "\"7\" is not of type number"},
        {"{\"type\":[\"null\",\"boolean\"]}", "null", NULL},
        {"{\"type\":[\"null\",\"boolean\"]}", "false", NULL},
        {"{\"type\":[\"null\",\"boolean\"]}", "{}", "an object is not of type null or boolean"},
        {"{\"type\":\"array\"}", "[]", NULL},
        {"{\"type\":\"object\"}", "[1]", "an array is not of type object"},
        {"true", "{\"x\":1}", NULL},
        {"false", "1", "the value: 1 is not allowed here (the schema is false)"},
        {"{}", "[1,{\"a\":null}]", NULL},
        /* unknown keywords are ignored */
        {"{\"format\":\"email\",\"x-note\":1,\"title\":\"t\"}", "\"not an email\"", NULL},
    };
    RUN(cases);
}

static void test_objects(void **state)
{
    (void)state;
    static const char props[] =
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},"
        "\"s\":{\"type\":\"string\"}},\"required\":[\"n\"],\"additionalProperties\":false}";
    static const char addl[] = "{\"properties\":{\"a\":{}},\"additionalProperties\":"
                               "{\"type\":\"number\"}}";
    static const char pats[] = "{\"patternProperties\":{\"^x-\":{\"type\":\"string\"}},"
                               "\"additionalProperties\":false}";
    static const char counts[] = "{\"minProperties\":1,\"maxProperties\":2}";
    static const tcase_t cases[] = {
        {props, "{\"n\":1,\"s\":\"a\"}", NULL},
        {props, "{\"n\":1}", NULL},
        {props, "{\"n\":\"1\"}", "/n: \"1\" is not of type integer"},
        {props, "{\"s\":\"a\"}", "/n: missing (required)"},
        {props, "{\"n\":1,\"extra\":2}",
         "/extra: a property the schema does not name (additionalProperties is false)"},
        {addl, "{\"a\":\"any\",\"b\":2.5}", NULL},
        {addl, "{\"a\":\"any\",\"b\":\"2\"}", "/b: \"2\" is not of type number"},
        {pats, "{\"x-a\":\"s\"}", NULL},
        {pats, "{\"x-a\":1}", "/x-a: 1 is not of type string"},
        {pats, "{\"y\":1}", "/y: a property the schema does not name"},
        {counts, "{\"a\":1}", NULL},
        {counts, "{}", "an object of 0 properties, fewer than minProperties 1"},
        {counts, "{\"a\":1,\"b\":2,\"c\":3}",
         "an object of 3 properties, more than maxProperties 2"},
        /* a key with / and ~ in the path */
        {"{\"properties\":{\"a/b~c\":{\"type\":\"null\"}}}", "{\"a/b~c\":1}",
         "/a~1b~0c: 1 is not of type null"},
        /* keywords for another type pass it by */
        {props, "\"not an object\"", "is not of type object"},
        {"{\"required\":[\"a\"],\"minLength\":3}", "5", NULL},
    };
    RUN(cases);
}

static void test_arrays(void **state)
{
    (void)state;
    static const char items[] = "{\"items\":{\"type\":\"object\",\"properties\":"
                                "{\"qty\":{\"type\":\"integer\",\"minimum\":1}}},"
                                "\"minItems\":1,\"maxItems\":3}";
    static const char tuple[] = "{\"items\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
                                "\"additionalItems\":false}";
    static const char prefix[] = "{\"prefixItems\":[{\"type\":\"string\"}],"
                                 "\"items\":{\"type\":\"boolean\"}}";
    static const char unique[] = "{\"uniqueItems\":true}";
    static const tcase_t cases[] = {
        {items, "[{\"qty\":1},{\"qty\":2}]", NULL},
        {items, "[{\"qty\":1},{\"qty\":2},{\"qty\":0}]", "/2/qty: 0 is less than minimum 1"},
        {items, "[]", "an array of 0 items, fewer than minItems 1"},
        {items, "[{},{},{},{}]", "an array of 4 items, more than maxItems 3"},
        {tuple, "[\"a\",1]", NULL},
        {tuple, "[\"a\",\"b\"]", "/1: \"b\" is not of type integer"},
        {tuple, "[\"a\",1,null]", "/2: null is not allowed here (the schema is false)"},
        {prefix, "[\"a\",true,false]", NULL},
        {prefix, "[\"a\",true,1]", "/2: 1 is not of type boolean"},
        {prefix, "[1]", "/0: 1 is not of type string"},
        {unique, "[1,2,{\"a\":1,\"b\":2},{\"b\":2,\"a\":3}]", NULL},
        {unique, "[1,2,1.0]", "items 0 and 2 are equal (uniqueItems)"},
        {unique, "[{\"a\":1,\"b\":[2]},{\"b\":[2],\"a\":1}]", "items 0 and 1 are equal"},
        {"{\"uniqueItems\":false}", "[1,1]", NULL},
    };
    RUN(cases);
}

static void test_numbers(void **state)
{
    (void)state;
    static const char range[] = "{\"minimum\":1,\"maximum\":10}";
    static const char excl[] = "{\"exclusiveMinimum\":1,\"exclusiveMaximum\":10}";
    static const char draft4[] = "{\"minimum\":1,\"exclusiveMinimum\":true,"
                                 "\"maximum\":10,\"exclusiveMaximum\":true}";
    static const tcase_t cases[] = {
        {range, "1", NULL},
        {range, "10", NULL},
        {range, "0", "the value: 0 is less than minimum 1"},
        {range, "10.5", "10.5 is greater than maximum 10"},
        {excl, "1.5", NULL},
        {excl, "1", "1 is not greater than exclusiveMinimum 1"},
        {excl, "10", "10 is not less than exclusiveMaximum 10"},
        {draft4, "2", NULL},
        {draft4, "1", "1 is not greater than exclusiveMinimum 1"},
        {draft4, "10", "10 is not less than exclusiveMaximum 10"},
        /* integers compared exactly, past what a double holds */
        {"{\"maximum\":9007199254740992}", "9007199254740993",
         "9007199254740993 is greater than maximum 9007199254740992"},
        {"{\"multipleOf\":3}", "9", NULL},
        {"{\"multipleOf\":3}", "10", "10 is not a multiple of 3"},
        {"{\"multipleOf\":0.1}", "0.3", NULL},
        {"{\"multipleOf\":0.1}", "0.35", "0.35 is not a multiple of 0.1"},
        {"{\"multipleOf\":1}", "2500000000.5", "is not a multiple of 1"},
    };
    RUN(cases);
}

static void test_strings(void **state)
{
    (void)state;
    static const char len[] = "{\"minLength\":2,\"maxLength\":3}";
    static const tcase_t cases[] = {
        {len, "\"ab\"", NULL},
        {len, "\"caf\\u00e9\"", "a string of 4 characters, longer than maxLength 3"},
        {len, "\"\\u00e9\\ud83c\\udf75\"", NULL}, /* 2 code points, 6 bytes */
        {len, "\"a\"", "a string of 1 characters, shorter than minLength 2"},
        {"{\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}", "\"AB-123\"", NULL},
        {"{\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}", "\"AB-12x\"",
         "\"AB-12x\" does not match pattern \"^[A-Z]{2}-\\d+$\""},
        {"{\"pattern\":\"b\"}", "\"abc\"", NULL}, /* unanchored */
        {"{\"pattern\":\"^[\\\\w.]+$\"}", "\"a_b.c\"", NULL},
        {"{\"pattern\":\"^[\\\\w.]+$\"}", "\"a b\"", "does not match pattern"},
        {"{\"pattern\":\"^\\\\S+$\"}", "\"a b\"", "does not match pattern"},
        {"{\"pattern\":\"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$\"}",
         "\"0b5e8a8e-3c1f-4c5b-9a51-2f0e9d7c6b4a\"", NULL},
        {"{\"pattern\":\"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$\"}",
         "\"0b5e8a8e-3c1f-4c5b-9a51\"", "does not match pattern"},
        {"{\"pattern\":\"^.{1,255}$\"}", "\"x\"", NULL},
        /* the whole string, past a U+0000 */
        {"{\"pattern\":\"^a$\"}", "\"a\\u0000b\"", "does not match pattern"},
        {"{\"pattern\":\"b$\"}", "\"a\\u0000b\"", NULL},
    };
    RUN(cases);
}

static void test_enum_const(void **state)
{
    (void)state;
    static const char en[] = "{\"enum\":[\"GOLD\",\"SILVER\",1,null,{\"a\":[1]}]}";
    static const tcase_t cases[] = {
        {en, "\"GOLD\"", NULL},
        {en, "1.0", NULL},
        {en, "null", NULL},
        {en, "{\"a\":[1]}", NULL},
        {en, "\"PLATINUM\"",
         "\"PLATINUM\" is not one of enum [\"GOLD\",\"SILVER\",1,null,{\"a\":[1]}]"},
        {en, "{\"a\":[2]}", "an object is not one of enum"},
        {"{\"const\":\"x\"}", "\"x\"", NULL},
        {"{\"const\":\"x\"}", "\"y\"", "\"y\" is not const \"x\""},
        {"{\"const\":null}", "0", "0 is not const null"},
    };
    RUN(cases);
}

static void test_combinators(void **state)
{
    (void)state;
    static const char all[] = "{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":5}]}";
    static const char any[] = "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},"
                              "{\"type\":\"integer\"}]}";
    static const char one[] = "{\"oneOf\":[{\"multipleOf\":3},{\"multipleOf\":5}]}";
    static const char not [] = "{\"not\":{\"type\":\"string\"}}";
    static const tcase_t cases[] = {
        {all, "5", NULL},
        {all, "4", "4 is less than minimum 5"},
        {all, "5.5", "5.5 is not of type integer"},
        {any, "\"ab\"", NULL},
        {any, "7", NULL},
        {any, "\"abc\"",
         "fits none of anyOf's 2 schemas (the first: the value: a string of 3 characters"},
        {any, "null", "fits none of anyOf's 2 schemas"},
        {one, "9", NULL},
        {one, "10", NULL},
        {one, "15", "fits more than one of oneOf's schemas (0 and 1)"},
        {one, "7", "fits none of oneOf's 2 schemas (the first: the value: 7 is not a multiple"},
        {not, "1", NULL},
        {not, "\"s\"", "\"s\" fits the schema under not"},
        /* nested: the path reaches into the branch */
        {"{\"properties\":{\"a\":{\"anyOf\":[{\"type\":\"null\"},{\"items\":"
         "{\"type\":\"integer\"}}]}}}",
         "{\"a\":[1,\"x\"]}", "/a: fits none of anyOf's 2 schemas"},
    };
    RUN(cases);
}

static void test_refs(void **state)
{
    (void)state;
    static const char defs[] = "{\"definitions\":{\"qty\":{\"type\":\"integer\",\"minimum\":1}},"
                               "\"$defs\":{\"line\":{\"type\":\"object\",\"properties\":"
                               "{\"qty\":{\"$ref\":\"#/definitions/qty\"}}}},"
                               "\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\","
                               "\"items\":{\"$ref\":\"#/$defs/line\"}}}}";
    /* A linked list: a $ref back to the root. */
    static const char list[] = "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                               "\"next\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#\"}]}},"
                               "\"required\":[\"v\"]}";
    static const tcase_t cases[] = {
        {defs, "{\"items\":[{\"qty\":1},{\"qty\":5}]}", NULL},
        {defs, "{\"items\":[{\"qty\":1},{\"qty\":2},{\"qty\":0}]}",
         "/items/2/qty: 0 is less than minimum 1"},
        {list, "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}", NULL},
        {list, "{\"v\":1,\"next\":{\"v\":\"2\",\"next\":null}}", "/next: fits none of anyOf's"},
        /* a $ref to itself never ends: cut */
        {"{\"$ref\":\"#\"}", "1", "stacks more than 512 schemas"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
         "\"$ref\":\"#/$defs/a\"}",
         "1", "a $ref that loops"},
        /* a pointer with escapes, into an array */
        {"{\"x\":[{\"type\":\"null\"}],\"a/b\":{\"$ref\":\"#/x/0\"},\"$ref\":\"#/a~1b\"}", "null",
         NULL},
        {"{\"x\":[{\"type\":\"null\"}],\"a/b\":{\"$ref\":\"#/x/0\"},\"$ref\":\"#/a~1b\"}", "1",
         "1 is not of type null"},
    };
    RUN(cases);
}

static void test_not_compiling(void **state)
{
    (void)state;
    static const struct {
        const char *schema, *err;
    } cases[] = {
        {"{", "not JSON"},
        {"1", "the schema: a schema must be an object or a boolean"},
        {"{\"type\":\"text\"}", "/type: must be a type's name"},
        {"{\"type\":[\"string\",3]}", "/type: must be a type's name"},
        {"{\"properties\":{\"a\":3}}", "/properties/a: a schema must be an object or a boolean"},
        {"{\"properties\":[]}", "/properties: must be an object of schemas"},
        {"{\"required\":[1]}", "/required: must be an array of property names"},
        {"{\"minimum\":\"1\"}", "/minimum: must be a number"},
        {"{\"multipleOf\":0}", "/multipleOf: must be greater than 0"},
        {"{\"minLength\":-1}", "/minLength: must be a non-negative integer"},
        {"{\"maxItems\":1.5}", "/maxItems: must be a non-negative integer"},
        {"{\"uniqueItems\":1}", "/uniqueItems: must be a boolean"},
        {"{\"enum\":1}", "/enum: must be an array"},
        {"{\"anyOf\":[]}", "/anyOf: must be an array of schemas, not empty"},
        {"{\"allOf\":[{},1]}", "/allOf/1: a schema must be"},
        {"{\"$ref\":\"other.json#/x\"}", "/$ref: only a reference within the schema"},
        {"{\"$ref\":\"#/definitions/none\"}", "names nothing in the schema"},
        {"{\"pattern\":\"(?=a)b\"}", "/pattern: \"(?=a)b\" does not compile as a POSIX"},
        {"{\"pattern\":\"[\\\\D]\"}", "negates a class inside brackets"},
        {"{\"patternProperties\":{\"(\":{}}}", "/patternProperties: \"(\" does not compile"},
        /* regcomp copies each repeat: a schema may not make it take gigabytes */
        {"{\"pattern\":\"(a{1000}){1000}\"}", "/pattern: \"(a{1000}){1000}\" repeats too much"},
        {"{\"pattern\":\"((a{20}){20}){20}\"}", "repeats too much"},
        {"{\"pattern\":\"a{40000}\"}", "repeats too much"},
        {"{\"pattern\":\"a+++++++++++++++++++++++++++++++++++++++++++++++\"}", "repeats too much"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512] = "";
        ks_json_schema_t *js =
            ks_json_schema_new(cases[i].schema, strlen(cases[i].schema), err, sizeof(err));
        if (js)
            fail_msg("case %zu: %s compiled", i, cases[i].schema);
        assert_contains(err, cases[i].err);
    }
}

/* A schema nested past the bound, and a value that takes a check past its (two schemas a
 * level: items, then the $ref). */
static void test_depth(void **state)
{
    (void)state;
    char *s = malloc(300 * 16 + 16), *v = malloc(300 * 2 + 16);
    size_t o = 0, w = 0;
    for (int i = 0; i < 300; i++) {
        o += (size_t)sprintf(s + o, "{\"items\":");
        v[w++] = '[';
    }
    o += (size_t)sprintf(s + o, "{}");
    for (int i = 0; i < 300; i++)
        s[o++] = '}', v[w++] = ']';
    s[o] = v[w] = '\0';
    static const char REC[] = "{\"items\":{\"$ref\":\"#\"}}";
    char err[512];
    assert_null(ks_json_schema_new(s, o, err, sizeof(err)));
    assert_contains(err, "nests deeper than 128");
    ks_json_schema_t *js = ks_json_schema_new(REC, strlen(REC), err, sizeof(err));
    assert_non_null(js);
    json_t *j = json_loads(v, 0, NULL);
    assert_non_null(j);
    assert_int_equal(ks_json_schema_check(js, j, err, sizeof(err)), -1);
    assert_contains(err, "stacks more than 512 schemas");
    json_decref(j);
    /* 100 deep fits */
    json_t *x = json_array();
    for (int i = 0; i < 100; i++) {
        json_t *a = json_array();
        json_array_append_new(a, x);
        x = a;
    }
    assert_int_equal(ks_json_schema_check(js, x, err, sizeof(err)), 0);
    json_decref(x);
    ks_json_schema_free(js);
    free(s);
    free(v);
}

static void test_registry_schema_and_body(void **state)
{
    (void)state;
    static const char text[] =
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}}";
    ks_schema_t *s = ks_schema_new(7, KS_SCHEMA_JSON, text, strlen(text), NULL);
    char err[256];
    const ks_json_schema_t *js = ks_schema_parsed(s, &ks_json_schema_parser, err, sizeof(err));
    assert_non_null(js);
    assert_ptr_equal(ks_schema_parsed(s, &ks_json_schema_parser, err, sizeof(err)), js);
    json_t *v = json_pack("{s:s}", "n", "x");
    assert_int_equal(ks_json_schema_check(js, v, err, sizeof(err)), -1);
    assert_string_equal(err, "/n: \"x\" is not of type integer");
    json_decref(v);
    ks_schema_unref(s);
    s = ks_schema_new(8, KS_SCHEMA_AVRO, "\"int\"", 5, NULL);
    assert_null(ks_schema_parsed(s, &ks_json_schema_parser, err, sizeof(err)));
    assert_contains(err, "schema 8 is AVRO, not JSON");
    ks_schema_unref(s);

    ks_jbuf_t b;
    ks_jbuf_init(&b, 16);
    static const char body[] = "{ \"a\" : [1, 2.5, \"x\"] }";
    assert_int_equal(ks_json_schema_body_json(&b, body, strlen(body), err, sizeof(err)), 0);
    assert_string_equal(b.p, "{\"a\":[1,2.5,\"x\"]}");
    size_t before = b.len;
    assert_int_equal(ks_json_schema_body_json(&b, "{\"a\":", 5, err, sizeof(err)), -1);
    assert_int_equal(b.len, before);
    assert_contains(err, "not JSON");
    ks_jbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_objects),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_enum_const),
        cmocka_unit_test(test_combinators),
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_not_compiling),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_registry_schema_and_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
