/* test_config_keys.c: tests the config key table as a whole (proxy/config_keys.c): every row is
 * well formed, every range holds from every source a key may come from (flag, environment, the
 * file, a static group, a push body), group defaults propagate by row, old spellings still work,
 * and a push body takes only the fields its scope allows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"

/* Fails unless text holds part. */
static void assert_contains(const char *text, const char *part)
{
    if (!text || !strstr(text, part))
        fail_msg("expected \"%s\" to contain \"%s\"", text ? text : "(null)", part);
}

static bool has_range(const key_t_ *k)
{
    return k->type == T_INT || k->type == T_I64 || k->type == T_DOUBLE;
}

/* The integer field of group key k in g. */
static int group_int(const ks_group_conf_t *g, const key_t_ *k)
{
    return *(const int *)((const char *)g + k->off);
}

/* A JSON object {"a":{"b":v}} for the dotted field name "a.b" (nested, as a file writes it);
 * steals v. */
static json_t *nested(const char *name, json_t *v)
{
    const char *dot = strrchr(name, '.');
    if (!dot) {
        json_t *o = json_object();
        json_object_set_new(o, name, v);
        return o;
    }
    char head[128];
    snprintf(head, sizeof(head), "%.*s", (int)(dot - name), name);
    json_t *o = json_object();
    json_object_set_new(o, dot + 1, v);
    return nested(head, o);
}

/* A value key k takes: the bottom of its range, or one its check passes. New reference. */
static json_t *good_value(const key_t_ *k)
{
    static const char *strs[] = {"http://app:8080/in", "tok3n", "/etc/ca.pem"};
    switch (k->type) {
    case T_INT:
    case T_I64:
        return json_integer(k->min);
    case T_DOUBLE:
        return json_real((double)k->min);
    case T_BOOL:
        return json_true();
    case T_ORDER:
        return json_string("none");
    case T_MSLIST:
        return json_string("100,200");
    case T_LIST:
        return json_pack("[s]", "orders");
    case T_STR:
        for (size_t i = 0; i < 3; i++)
            if (!k->ok || k->ok(strs[i]))
                return json_string(strs[i]);
        return json_string("orders");
    default:
        return json_null();
    }
}

/* Every row is well formed: a unique name and field name, help, a range that holds its default,
 * an alias that is no other field's name, a check with its words. */
static void test_rows_well_formed(void **state)
{
    (void)state;
    assert_true(config_nkeys <= KS_CONFIG_MAX_KEYS);
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        assert_non_null(k->help);
        assert_true(*k->help);
        assert_true(k->scope != 0);
        /* A key is of ks_config_t, or of ks_group_conf_t: never both. */
        assert_false((k->scope & KS_SCOPE_PROCESS) && (k->scope & KS_SCOPE_OBJECT));
        if (k->ok)
            assert_non_null(k->hint);
        if (has_range(k)) {
            assert_true(k->min <= k->max);
            if (k->type == T_DOUBLE)
                assert_true(k->ddef >= (double)k->min && k->ddef <= (double)k->max);
            else if (k->def < k->min || k->def > k->max)
                fail_msg("%s: default %lld outside %lld-%lld", k->name, (long long)k->def,
                         (long long)k->min, (long long)k->max);
        }
        for (size_t j = 0; j < i; j++) {
            const key_t_ *o = &config_keys[j];
            if (!strcmp(k->name, o->name))
                fail_msg("key %s twice", k->name);
            if ((k->scope & KS_SCOPE_OBJECT) && (o->scope & KS_SCOPE_OBJECT) &&
                !strcmp(key_field_name(k), key_field_name(o)))
                fail_msg("group field %s twice (%s, %s)", key_field_name(k), o->name, k->name);
        }
        if (k->alias)
            assert_ptr_equal(find_field(k->alias), k);
        if (k->scope & KS_SCOPE_OBJECT)
            assert_ptr_equal(find_field(key_field_name(k)), k);
        if (k->scope & KS_SCOPE_KEY)
            assert_ptr_equal(find_key(k->name), k);
        else
            assert_null(find_key(k->name)); /* no flag for a group object's own field */
    }
}

/* The defaults are the rows': every ranged key of cfg and of its group defaults holds its row's
 * default, and --print-config shows every key (no group object's own field). */
static void test_defaults_from_rows(void **state)
{
    (void)state;
    ks_config_t cfg;
    ks_config_defaults(&cfg);
    char *out = ks_config_dump(&cfg);
    json_t *dump = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(dump);
    size_t keys = 0;
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        const char *field = (const char *)&cfg + key_off(k);
        if (!(k->scope & KS_SCOPE_KEY)) {
            assert_null(json_object_get(dump, k->name));
            continue;
        }
        keys++;
        json_t *v = json_object_get(dump, k->name);
        if (!v)
            fail_msg("%s not in the dump", k->name);
        if (k->type == T_INT)
            assert_int_equal(*(const int *)field, k->def);
        else if (k->type == T_I64)
            assert_int_equal(*(const int64_t *)field, k->def);
        else if (k->type == T_DOUBLE)
            assert_true(*(const double *)field == k->ddef);
        else if (k->type == T_STR && !(k->flags & KF_NULL))
            assert_string_equal(*(char *const *)field, k->sdef ? k->sdef : "");
    }
    assert_int_equal(json_object_size(dump), keys);
    json_decref(dump);
    ks_config_free(&cfg);
}

/* Sets one value of key k through each source it has and returns how many refused it; err
 * holds the last refusal. */
static int refusals(const key_t_ *k, const char *text, char *err, size_t errsize)
{
    int n = 0;
    char msg[1024];
    if (k->scope & KS_SCOPE_KEY) {
        ks_config_t cfg;
        /* A flag. */
        ks_config_defaults(&cfg);
        if (ks_config_set(&cfg, k->name, text, msg, sizeof(msg)) < 0) {
            n++;
            assert_contains(msg, k->name);
            snprintf(err, errsize, "%s", msg);
        }
        ks_config_free(&cfg);
        /* The environment. */
        char var[300];
        env_name(k->name, var, sizeof(var));
        snprintf(var + strlen(var), sizeof(var) - strlen(var), "=%s", text);
        char *envp[] = {var, NULL};
        ks_config_defaults(&cfg);
        if (ks_config_apply_env(&cfg, envp, msg, sizeof(msg)) < 0) {
            n++;
            assert_contains(msg, k->name);
            snprintf(err, errsize, "%s", msg);
        }
        ks_config_free(&cfg);
        /* The file, nested and dotted. */
        for (int dotted = 0; dotted < 2; dotted++) {
            json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
            assert_non_null(v);
            json_t *o = dotted ? json_pack("{s:o}", k->name, v) : nested(k->name, v);
            char *doc = json_dumps(o, 0);
            json_decref(o);
            ks_config_defaults(&cfg);
            if (ks_config_load_json(&cfg, doc, "t.json", msg, sizeof(msg)) < 0) {
                n++;
                assert_contains(msg, k->name);
                snprintf(err, errsize, "%s", msg);
            }
            free(doc);
            ks_config_free(&cfg);
        }
    }
    if (k->scope & KS_SCOPE_STATIC) {
        json_t *g = json_pack("{s:s,s:[s]}", "name", "g", "topics", "t");
        json_t *field = nested(key_field_name(k), json_loads(text, JSON_DECODE_ANY, NULL));
        json_object_update_recursive(g, field);
        json_decref(field);
        if (strncmp(key_field_name(k), "push.", 5) == 0 && strcmp(key_field_name(k), "push.url"))
            json_object_set_new(json_object_get(g, "push"), "url",
                                json_string("http://app:8080/in"));
        char *doc = json_dumps(g, 0);
        json_decref(g);
        char arr[1200];
        snprintf(arr, sizeof(arr), "[%s]", doc);
        free(doc);
        ks_config_t cfg;
        ks_config_defaults(&cfg);
        if (ks_config_set(&cfg, "groups.static", arr, msg, sizeof(msg)) < 0) {
            n++;
            assert_contains(msg, "groups.static[0]");
            snprintf(err, errsize, "%s", msg);
        }
        ks_config_free(&cfg);
    }
    if (k->scope & KS_SCOPE_PUSH) {
        const char *leaf = key_field_name(k) + strlen("push.");
        json_t *body = json_pack("{s:s}", "url", "http://app:8080/in");
        json_object_set_new(body, leaf, json_loads(text, JSON_DECODE_ANY, NULL));
        ks_config_t cfg;
        ks_config_defaults(&cfg);
        const char *topics[] = {"t"};
        ks_group_conf_t *g = ks_config_push_group(&cfg, "g", topics, 1, body, msg, sizeof(msg));
        if (!g) {
            n++;
            assert_contains(msg, leaf);
            snprintf(err, errsize, "%s", msg);
        }
        ks_config_push_group_free(g);
        json_decref(body);
        ks_config_free(&cfg);
    }
    return n;
}

/* The number of sources key k has: flag, environment, file nested and dotted; a static group;
 * a push body. */
static int sources(const key_t_ *k)
{
    return ((k->scope & KS_SCOPE_KEY) ? 4 : 0) + ((k->scope & KS_SCOPE_STATIC) ? 1 : 0) +
           ((k->scope & KS_SCOPE_PUSH) ? 1 : 0);
}

/* Every key with a range refuses a value just outside it from each source, naming the key and
 * its range, and takes both ends. */
static void test_ranges_from_every_source(void **state)
{
    (void)state;
    size_t ranged = 0;
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        if (!has_range(k))
            continue;
        ranged++;
        char text[64], err[1024] = "", lo[32], hi[32];
        snprintf(lo, sizeof(lo), "%lld", (long long)k->min);
        snprintf(hi, sizeof(hi), "%lld", (long long)k->max);
        if (refusals(k, lo, err, sizeof(err)) != 0 || refusals(k, hi, err, sizeof(err)) != 0)
            fail_msg("%s refused an end of its range: %s", k->name, err);
        for (int below = 0; below < 2; below++) {
            snprintf(text, sizeof(text), "%lld",
                     below ? (long long)k->min - 1 : (long long)k->max + 1);
            int n = refusals(k, text, err, sizeof(err));
            if (n != sources(k))
                fail_msg("%s = %s refused by %d of its %d sources", k->name, text, n, sources(k));
            /* The last refusal names the range: "from 1 to 10" for a key, "1-10" for a field. */
            if (!strstr(err, lo) || !strstr(err, hi))
                fail_msg("%s: \"%s\" does not name the range %s to %s", k->name, err, lo, hi);
        }
    }
    assert_true(ranged > 40);
}

/* Each group key set in group.* reaches the static groups that do not set it and not one that
 * does, whichever comes first in the file. */
static void test_group_defaults_propagate(void **state)
{
    (void)state;
    size_t checked = 0;
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        if (!(k->scope & KS_SCOPE_GROUP) || k->type != T_INT)
            continue;
        checked++;
        for (int defaults_first = 0; defaults_first < 2; defaults_first++) {
            char doc[1024], err[1024];
            /* The default's max, the own group's min, by the group key and the field names. */
            json_t *def = nested(k->name, json_integer(k->max));
            json_t *own = nested(key_field_name(k), json_integer(k->min));
            json_t *id = json_pack("{s:s,s:[s]}", "name", "own", "topics", "t");
            json_object_update(own, id);
            json_decref(id);
            if (!strncmp(key_field_name(k), "push.", 5))
                json_object_set_new(json_object_get(own, "push"), "url",
                                    json_string("http://a:1/x"));
            json_t *statics = json_pack("{s:{s:[{s:s,s:[s]},o]}}", "groups", "static", "name",
                                        "plain", "topics", "t", own);
            char *a = json_dumps(def, JSON_COMPACT), *b = json_dumps(statics, JSON_COMPACT);
            /* Two objects joined into one text, in either order (their keys differ). */
            snprintf(doc, sizeof(doc), "{%.*s,%.*s}", (int)strlen(defaults_first ? a : b) - 2,
                     (defaults_first ? a : b) + 1, (int)strlen(defaults_first ? b : a) - 2,
                     (defaults_first ? b : a) + 1);
            free(a);
            free(b);
            json_decref(def);
            json_decref(statics);
            ks_config_t cfg;
            ks_config_defaults(&cfg);
            if (ks_config_load_json(&cfg, doc, "t.json", err, sizeof(err)) < 0)
                fail_msg("%s: %s refused: %s", k->name, doc, err);
            assert_int_equal(group_int(&cfg.group_defaults, k), k->max);
            if (group_int(ks_config_group(&cfg, "plain"), k) != k->max)
                fail_msg("%s did not reach a static group (%s)", k->name, doc);
            if (group_int(ks_config_group(&cfg, "own"), k) != k->min)
                fail_msg("%s overrode a static group's own value (%s)", k->name, doc);
            /* A later flag moves the one that did not set it, not the other. */
            char v[32];
            snprintf(v, sizeof(v), "%lld", (long long)k->min + 1);
            assert_int_equal(ks_config_set(&cfg, k->name, v, err, sizeof(err)), 0);
            assert_int_equal(group_int(ks_config_group(&cfg, "plain"), k), k->min + 1);
            assert_int_equal(group_int(ks_config_group(&cfg, "own"), k), k->min);
            ks_config_free(&cfg);
        }
    }
    assert_true(checked >= 8);
}

/* A static group's own retry field keeps it from following that one default, not the others:
 * the policy is per field, whatever order the keys come in. */
static void test_retry_fields_propagate_apart(void **state)
{
    (void)state;
    ks_config_t cfg;
    char err[1024];
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_load_json(&cfg,
                                         "{\"groups.static\":[{\"name\":\"g\",\"topics\":[\"t\"],"
                                         "\"retry\":{\"initial_ms\":50}}],"
                                         " \"group.retry.multiplier\":3}",
                                         "t.json", err, sizeof(err)),
                     0);
    const ks_group_conf_t *g = ks_config_group(&cfg, "g");
    assert_int_equal(g->retry.initial_ms, 50);
    assert_true(g->retry.multiplier == 3.0);
    assert_int_equal(ks_config_set(&cfg, "group.retry.backoff_ms", "10,20", err, sizeof(err)), 0);
    assert_int_equal(g->retry.list_cnt, 2);
    assert_int_equal(ks_config_set(&cfg, "group.retry.initial_ms", "7", err, sizeof(err)), 0);
    assert_int_equal(g->retry.initial_ms, 50);
    ks_config_free(&cfg);
}

/* A group key goes by one name in a static group, nested or dotted; the old spelling
 * redrive_max still works, and the dump shows the one name. */
static void test_field_names_and_alias(void **state)
{
    (void)state;
    static const char *forms[] = {"\"redrive\":{\"max\":2}", "\"redrive.max\":2",
                                  "\"redrive_max\":2"};
    for (size_t i = 0; i < 3; i++) {
        ks_config_t cfg;
        char doc[512], err[1024];
        ks_config_defaults(&cfg);
        snprintf(doc, sizeof(doc),
                 "{\"group\":{\"redrive\":{\"max\":9}},"
                 " \"groups.static\":[{\"name\":\"g\",\"topics\":[\"t\"],%s},"
                 "                    {\"name\":\"h\",\"topics\":[\"t\"]}]}",
                 forms[i]);
        if (ks_config_load_json(&cfg, doc, "t.json", err, sizeof(err)) < 0)
            fail_msg("%s: %s", forms[i], err);
        assert_int_equal(ks_config_group(&cfg, "g")->redrive_max, 2);
        assert_int_equal(ks_config_group(&cfg, "h")->redrive_max, 9);
        char *out = ks_config_dump(&cfg);
        json_t *d = json_loads(out, 0, NULL);
        free(out);
        json_t *g0 = json_array_get(json_object_get(d, "groups.static"), 0);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(g0, "redrive"), "max")),
                         2);
        assert_null(json_object_get(g0, "redrive_max"));
        json_decref(d);
        ks_config_free(&cfg);
    }
    /* The push fields by their dotted names, too. */
    ks_config_t cfg;
    char err[1024];
    ks_config_defaults(&cfg);
    assert_int_equal(
        ks_config_set(&cfg, "groups.static",
                      "[{\"name\":\"g\",\"topics\":[\"t\"],\"push.url\":\"http://a:1/x\","
                      "\"push.batch\":4}]",
                      err, sizeof(err)),
        0);
    assert_string_equal(cfg.static_groups[0].push_url, "http://a:1/x");
    assert_int_equal(cfg.static_groups[0].push_batch, 4);
    assert_int_equal(ks_config_set(&cfg, "groups.static",
                                   "[{\"name\":\"g\",\"topics\":[\"t\"],\"push.batch\":4}]", err,
                                   sizeof(err)),
                     -1);
    assert_contains(err, "push needs a url");
    ks_config_free(&cfg);
}

/* A push body takes the push fields its scope allows, starts from the group defaults, and
 * refuses every other field of a group object with its name: ca_file is a path on this host,
 * the rest are not push fields at all. */
static void test_push_body_scope(void **state)
{
    (void)state;
    ks_config_t cfg;
    char err[1024];
    const char *topics[] = {"t"};
    ks_config_defaults(&cfg);
    assert_int_equal(ks_config_set(&cfg, "group.push.batch", "7", err, sizeof(err)), 0);
    assert_int_equal(ks_config_set(&cfg, "group.redrive.max", "4", err, sizeof(err)), 0);
    size_t taken = 0, refused = 0;
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        const char *f = key_field_name(k);
        if (!(k->scope & (KS_SCOPE_STATIC | KS_SCOPE_PUSH)) || !strncmp(f, "name", 5) ||
            !strcmp(f, "topics"))
            continue;
        bool push = !strncmp(f, "push.", 5);
        const char *leaf = push ? f + 5 : f;
        json_t *body = json_pack("{s:s}", "url", "http://app:8080/in");
        json_object_set_new(body, leaf, good_value(k));
        ks_group_conf_t *g = ks_config_push_group(&cfg, "g", topics, 1, body, err, sizeof(err));
        json_decref(body);
        if (k->scope & KS_SCOPE_PUSH) {
            if (!g)
                fail_msg("push body refused %s: %s", leaf, err);
            assert_true(key_explicit(g, k));
            assert_string_equal(g->name, "g");
            assert_int_equal(g->topic_cnt, 1);
            if (k != find_field("push.batch"))
                assert_int_equal(g->push_batch, 7); /* from the defaults */
            assert_int_equal(g->redrive_max, 4);
            taken++;
        } else {
            if (g)
                fail_msg("push body took %s", leaf);
            assert_contains(err, leaf);
            assert_contains(err,
                            push ? "cannot be set in a push set by API call" : "unknown field");
            refused++;
        }
        ks_config_push_group_free(g);
    }
    assert_true(taken >= 7 && refused >= 8);
    /* The url is needed; a bad one is named with what it takes. */
    json_t *body = json_pack("{s:i}", "batch", 2);
    assert_null(ks_config_push_group(&cfg, "g", topics, 1, body, err, sizeof(err)));
    assert_contains(err, "needs a url");
    json_object_set_new(body, "url", json_string("ftp://x/y"));
    assert_null(ks_config_push_group(&cfg, "g", topics, 1, body, err, sizeof(err)));
    assert_contains(err, "bad push field \"url\"");
    assert_contains(err, "http:// or https://");
    json_decref(body);
    ks_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_well_formed),
        cmocka_unit_test(test_defaults_from_rows),
        cmocka_unit_test(test_ranges_from_every_source),
        cmocka_unit_test(test_group_defaults_propagate),
        cmocka_unit_test(test_retry_fields_propagate_apart),
        cmocka_unit_test(test_field_names_and_alias),
        cmocka_unit_test(test_push_body_scope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
