/* config.c: the one parser of config values, driven by the key table of config_keys.c: a key
 * from text (flags, environment) or JSON (the file), kafka.* properties, and the fields of a
 * group object (a static group's entry, a push body). Where the values come from and the check
 * of the whole: config_load.c. */
#include "config.h"

#include "config_int.h"
#include "key_sched.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_kafka_key(const char *name)
{
    return strncmp(name, "kafka.", 6) == 0 && name[6] != '\0';
}

void kafka_set(ks_config_t *cfg, const char *prop, const char *value)
{
    for (size_t i = 0; i < cfg->kafka_cnt; i++) {
        if (strcmp(cfg->kafka[i].key, prop) == 0) {
            free(cfg->kafka[i].value);
            cfg->kafka[i].value = ks_xstrdup(value);
            return;
        }
    }
    ks_kv_t *n = realloc(cfg->kafka, (cfg->kafka_cnt + 1) * sizeof(*n));
    if (!n)
        abort();
    cfg->kafka = n;
    cfg->kafka[cfg->kafka_cnt].key = ks_xstrdup(prop);
    cfg->kafka[cfg->kafka_cnt].value = ks_xstrdup(value);
    cfg->kafka_cnt++;
}

const char *ks_config_kafka_get(const ks_config_t *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->kafka_cnt; i++)
        if (strcmp(cfg->kafka[i].key, name) == 0)
            return cfg->kafka[i].value;
    return NULL;
}

static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    if (!strcmp(s, "true") || !strcmp(s, "1") || !strcmp(s, "yes") || !strcmp(s, "on"))
        *out = true;
    else if (!strcmp(s, "false") || !strcmp(s, "0") || !strcmp(s, "no") || !strcmp(s, "off"))
        *out = false;
    else
        return -1;
    return 0;
}

/* Sets integer key k's field to v within k's range. Returns 0, or -1 with err. */
static int set_int(const key_t_ *k, void *field, int64_t v, char *err, size_t errsize)
{
    if (v < k->min || v > k->max) {
        snprintf(err, errsize, "config key '%s': expected an integer from %lld to %lld, got %lld",
                 k->name, (long long)k->min, (long long)k->max, (long long)v);
        return -1;
    }
    if (k->type == T_INT)
        *(int *)field = (int)v;
    else
        *(int64_t *)field = v;
    return 0;
}

static int set_double(const key_t_ *k, void *field, double v, char *err, size_t errsize)
{
    if (!(v >= (double)k->min && v <= (double)k->max)) {
        snprintf(err, errsize, "config key '%s': expected a number from %lld to %lld, got %g",
                 k->name, (long long)k->min, (long long)k->max, v);
        return -1;
    }
    *(double *)field = v;
    return 0;
}

int set_mslist(ks_retry_t *r, const char *name, const char *value, char *err, size_t errsize)
{
    char why[200];
    if (ks_retry_parse_list(r, value, why, sizeof(why)) == 0)
        return 0;
    snprintf(err, errsize, "config key '%s': %s", name, why);
    return -1;
}

/* A list of ms from JSON: [100, 1000] (or its text form "100,1000"). */
static int json_mslist(ks_retry_t *r, const char *name, json_t *v, char *err, size_t errsize)
{
    if (json_is_string(v))
        return set_mslist(r, name, json_string_value(v), err, errsize);
    char text[KS_RETRY_LIST_MAX * 24 + 32] = "";
    size_t at = 0, i;
    json_t *it;
    if (!json_is_array(v) || json_array_size(v) > KS_RETRY_LIST_MAX + 1)
        goto bad;
    json_array_foreach(v, i, it)
    {
        if (!json_is_integer(it))
            goto bad;
        at += (size_t)snprintf(text + at, sizeof(text) - at, "%s%lld", i ? "," : "",
                               (long long)json_integer_value(it));
    }
    return set_mslist(r, name, text, err, errsize);
bad:
    snprintf(err, errsize, "config key '%s': expected an array of integers (ms), as [100, 1000]",
             name);
    return -1;
}

/* Replaces list key k's items (field) with items, n of them; takes them. */
static void set_list(const key_t_ *k, void *field, char **items, size_t n)
{
    size_t *cnt = (size_t *)((char *)field - k->off + k->cnt_off);
    free_list(*(char ***)field, *cnt);
    *(char ***)field = items;
    *cnt = n;
}

static int parse_static(ks_config_t *cfg, json_t *arr, char *err, size_t errsize);

/* Sets key k's field from text, as a flag or variable gives it. cfg: for groups.static. Returns
 * 0, or -1 with err naming the key; the field is then unchanged. */
static int set_text(ks_config_t *cfg, const key_t_ *k, void *field, const char *value, char *err,
                    size_t errsize)
{
    const char *key = k->name;
    switch (k->type) {
    case T_STR:
        free(*(char **)field);
        *(char **)field = ks_xstrdup(value);
        return 0;
    case T_INT:
    case T_I64: {
        int64_t v;
        if (parse_i64(value, &v) < 0) {
            snprintf(err, errsize, "config key '%s': expected an integer, got \"%s\"", key, value);
            return -1;
        }
        return set_int(k, field, v, err, errsize);
    }
    case T_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (end == value || *end || errno) {
            snprintf(err, errsize, "config key '%s': expected a number, got \"%s\"", key, value);
            return -1;
        }
        return set_double(k, field, v, err, errsize);
    }
    case T_MSLIST:
        return set_mslist(field, key, value, err, errsize);
    case T_BOOL:
        if (parse_bool(value, (bool *)field) < 0) {
            snprintf(err, errsize, "config key '%s': expected true or false, got \"%s\"", key,
                     value);
            return -1;
        }
        return 0;
    case T_LEVEL:
        if (ks_log_level_parse(value, (ks_log_level_t *)field) < 0) {
            snprintf(err, errsize,
                     "config key '%s': expected one of error, warn, info, debug, got \"%s\"", key,
                     value);
            return -1;
        }
        return 0;
    case T_LOGFMT:
        if (strcmp(value, "text") && strcmp(value, "json")) {
            snprintf(err, errsize, "config key '%s': expected text or json, got \"%s\"", key,
                     value);
            return -1;
        }
        *(bool *)field = strcmp(value, "json") == 0;
        return 0;
    case T_ORDER: {
        ks_ordering_t o;
        if (ks_ordering_parse(value, &o) < 0) {
            snprintf(err, errsize, "config key '%s': expected key, partition or none, got \"%s\"",
                     key, value);
            return -1;
        }
        *(int *)field = (int)o;
        return 0;
    }
    case T_STATIC: {
        json_error_t jerr;
        json_t *v = json_loads(value, JSON_DECODE_ANY, &jerr);
        if (!v) {
            snprintf(err, errsize, "config key '%s': expected a JSON array, %s", key, jerr.text);
            return -1;
        }
        int rc = parse_static(cfg, v, err, errsize);
        json_decref(v);
        return rc;
    }
    case T_LIST: {
        size_t n = 0;
        char **items = NULL;
        char *copy = ks_xstrdup(value), *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            while (isspace((unsigned char)*tok))
                tok++;
            size_t tl = strlen(tok);
            while (tl && isspace((unsigned char)tok[tl - 1]))
                tok[--tl] = '\0';
            if (!*tok)
                continue;
            char **ni = realloc(items, (n + 1) * sizeof(char *));
            if (!ni)
                abort();
            items = ni;
            items[n++] = ks_xstrdup(tok);
        }
        free(copy);
        if (n == 0) {
            snprintf(err, errsize, "config key '%s': expected at least one pattern", key);
            free(items);
            return -1;
        }
        set_list(k, field, items, n);
        return 0;
    }
    }
    return -1;
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* Sets key k's field from a JSON value of its type: the file, a static group, a push body.
 * cfg: for groups.static. Returns 0, or -1 with err naming the key; the field is then
 * unchanged. */
static int set_json(ks_config_t *cfg, const key_t_ *k, void *field, json_t *v, char *err,
                    size_t errsize)
{
    switch (k->type) {
    case T_STATIC:
        return parse_static(cfg, v, err, errsize);
    case T_STR:
    case T_LEVEL:
    case T_LOGFMT:
    case T_ORDER:
        if (!json_is_string(v))
            goto wrong_type;
        return set_text(cfg, k, field, json_string_value(v), err, errsize);
    case T_INT:
    case T_I64:
        if (!json_is_integer(v))
            goto wrong_type;
        return set_int(k, field, json_integer_value(v), err, errsize);
    case T_DOUBLE:
        if (!json_is_number(v))
            goto wrong_type;
        return set_double(k, field, json_number_value(v), err, errsize);
    case T_MSLIST:
        return json_mslist(field, k->name, v, err, errsize);
    case T_BOOL:
        if (!json_is_boolean(v))
            goto wrong_type;
        *(bool *)field = json_is_true(v);
        return 0;
    case T_LIST: {
        if (!json_is_array(v) || json_array_size(v) == 0)
            goto wrong_type;
        size_t n = json_array_size(v);
        char **items = calloc(n, sizeof(char *));
        if (!items)
            abort();
        for (size_t i = 0; i < n; i++) {
            json_t *it = json_array_get(v, i);
            if (!json_is_string(it) || !*json_string_value(it)) {
                free_list(items, i);
                goto wrong_type;
            }
            items[i] = ks_xstrdup(json_string_value(it));
        }
        set_list(k, field, items, n);
        return 0;
    }
    }
wrong_type:;
    static const char *expected[] = {"a string",
                                     "an integer",
                                     "an integer",
                                     "a number",
                                     "a boolean",
                                     "a non-empty array of strings",
                                     "a string (error, warn, info or debug)",
                                     "a string (text or json)",
                                     "a string (key, partition or none)",
                                     "an array of group objects",
                                     "an array of integers (ms)"};
    snprintf(err, errsize, "config key '%s': expected %s, got %s", k->name, expected[k->type],
             json_type_name(v));
    return -1;
}

/* True if the strings of k's field pass k's check (each item of a list). */
static bool value_ok(const key_t_ *k, const void *field)
{
    if (!k->ok)
        return true;
    if (k->type == T_STR) {
        const char *s = *(char *const *)field;
        return !s || k->ok(s);
    }
    if (k->type == T_LIST) {
        char *const *items = *(char **const *)field;
        size_t n = *(const size_t *)((const char *)field - k->off + k->cnt_off);
        for (size_t i = 0; i < n; i++)
            if (!k->ok(items[i]))
                return false;
    }
    return true;
}

int check_key_values(const ks_config_t *cfg, char *err, size_t errsize)
{
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        const void *field = (const char *)cfg + key_off(k);
        if (!(k->scope & KS_SCOPE_KEY) || value_ok(k, field))
            continue;
        const char *bad = NULL;
        if (k->type == T_STR) {
            bad = *(char *const *)field;
        } else if (k->type == T_LIST) { /* the first item the check refuses */
            char *const *items = *(char **const *)field;
            size_t n = *(const size_t *)((const char *)field - k->off + k->cnt_off);
            for (size_t j = 0; j < n && !bad; j++)
                if (!k->ok(items[j]))
                    bad = items[j];
        }
        if (bad) {
            snprintf(err, errsize, "config key '%s': \"%s\" is not %s", k->name, bad, k->hint);
            return -1;
        }
    }
    return 0;
}

/* The key named name, or NULL with err. */
static const key_t_ *known_key(const char *name, char *err, size_t errsize)
{
    const key_t_ *k = find_key(name);
    if (!k)
        snprintf(err, errsize, "unknown config key '%s' (see --help for the keys)", name);
    return k;
}

int ks_config_set(ks_config_t *cfg, const char *key, const char *value, char *err, size_t errsize)
{
    if (is_kafka_key(key)) {
        kafka_set(cfg, key + 6, value);
        return 0;
    }
    const key_t_ *k = known_key(key, err, errsize);
    if (!k)
        return -1;
    int rc = set_text(cfg, k, (char *)cfg + key_off(k), value, err, errsize);
    if (rc == 0)
        propagate_defaults(cfg);
    return rc;
}

int apply_json_value(ks_config_t *cfg, const char *name, json_t *v, char *err, size_t errsize)
{
    if (is_kafka_key(name)) {
        char buf[64];
        const char *s;
        if (json_is_string(v))
            s = json_string_value(v);
        else if (json_is_integer(v)) {
            snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
            s = buf;
        } else if (json_is_boolean(v))
            s = json_is_true(v) ? "true" : "false";
        else {
            snprintf(err, errsize, "config key '%s': expected a string, integer or boolean, got %s",
                     name, json_type_name(v));
            return -1;
        }
        kafka_set(cfg, name + 6, s);
        return 0;
    }
    const key_t_ *k = known_key(name, err, errsize);
    if (!k)
        return -1;
    return set_json(cfg, k, (char *)cfg + key_off(k), v, err, errsize);
}

/* ---- group objects: a static group's entry, a push body --------------------------------- */

/* One group object being read into g: the keys of scope, relative to the section root (""
 * for a static group, "push" for a push body); where names it in messages. */
typedef struct {
    ks_group_conf_t *g;
    unsigned scope;
    const char *root, *where, *scope_name;
} gobj_t;

/* Length of the section of a field name: up to its last '.', 0 for none. */
static size_t section_len(const char *f)
{
    const char *dot = strrchr(f, '.');
    return dot ? (size_t)(dot - f) : 0;
}

static bool in_section(const char *f, const char *sect)
{
    size_t n = strlen(sect);
    return n == 0 || (!strncmp(f, sect, n) && f[n] == '.');
}

/* Lists the fields of section sect that o may set, briefly: "url: a url (...), concurrency:
 * 1-10000, retry: object". A subsection of one key shows as that key. */
static void list_fields(const gobj_t *o, const char *sect, char *out, size_t outsize)
{
    size_t at = 0, sl = strlen(sect);
    out[0] = '\0';
    for (size_t i = 0; i < config_nkeys && at < outsize; i++) {
        const key_t_ *k = &config_keys[i];
        const char *f = key_field_name(k);
        if (!(k->scope & o->scope) || !in_section(f, sect))
            continue;
        const char *rel = f + (sl ? sl + 1 : 0), *dot = strchr(rel, '.');
        char what[96];
        if (dot) { /* a subsection: once, at its first key */
            size_t n = (size_t)(dot - rel), keys = 0;
            bool first = true;
            for (size_t j = 0; j < config_nkeys; j++) {
                const key_t_ *q = &config_keys[j];
                const char *qf = key_field_name(q);
                if ((q->scope & o->scope) && in_section(qf, sect) &&
                    !strncmp(qf + (sl ? sl + 1 : 0), rel, n + 1)) {
                    first = first && j >= i;
                    keys++;
                }
            }
            if (!first)
                continue;
            if (keys > 1) {
                at += (size_t)snprintf(out + at, outsize - at, "%s%.*s: object", at ? ", " : "",
                                       (int)n, rel);
                continue;
            }
        }
        key_expect(k, true, what, sizeof(what));
        at += (size_t)snprintf(out + at, outsize - at, "%s%s%s%s: %s", at ? ", " : "", rel,
                               k->alias ? " or " : "", k->alias ? k->alias : "", what);
    }
}

/* err := "<where>: <what> (<sect> fields: <list>)". Returns -1. */
static int gobj_err(const gobj_t *o, const char *sect, char *err, size_t errsize, const char *what)
{
    char list[400];
    list_fields(o, sect, list, sizeof(list));
    snprintf(err, errsize, "%s: %s (%s%sfields: %s)", o->where, what, sect, *sect ? " " : "", list);
    return -1;
}

/* The field name path as the object spells it, relative to o's root. */
static const char *rel_name(const gobj_t *o, const char *name)
{
    size_t n = strlen(o->root);
    return n && !strncmp(name, o->root, n) && name[n] == '.' ? name + n + 1 : name;
}

/* Fails when o sets nothing of sect's needed key: always for its root, else when it set any key
 * of sect (or gave sect as an object). */
static int gobj_needed(const gobj_t *o, const char *sect, bool given, char *err, size_t errsize)
{
    size_t sl = strlen(sect);
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        const char *f = key_field_name(k);
        if (!(k->scope & o->scope) || !(k->flags & KF_NEEDED) || section_len(f) != sl ||
            strncmp(f, sect, sl))
            continue;
        bool used = given || !strcmp(sect, o->root);
        for (size_t j = 0; !used && j < config_nkeys; j++)
            used = key_explicit(o->g, &config_keys[j]) &&
                   section_len(key_field_name(&config_keys[j])) == sl &&
                   !strncmp(key_field_name(&config_keys[j]), sect, sl);
        const void *field = (const char *)o->g + k->off;
        bool missing = k->type == T_LIST ? *(const size_t *)((const char *)o->g + k->cnt_off) == 0
                                         : !*(char *const *)field || !**(char *const *)field;
        if (used && missing) {
            snprintf(err, errsize, "%s: %s%sneeds %s, as \"%s\"", o->where, sect, *sect ? " " : "",
                     k->hint, f + (sl ? sl + 1 : 0));
            return -1;
        }
    }
    return 0;
}

/* Reads the fields of JSON object obj, the section sect ("" or "push", ...), into o->g: each
 * a key of o's scope by its field name (or alias), or an object for a subsection. Returns 0,
 * or -1 with err naming the field and what it takes. */
static int gobj_walk(gobj_t *o, const char *sect, json_t *obj, char *err, size_t errsize)
{
    const char *f;
    json_t *v;
    json_object_foreach(obj, f, v)
    {
        char name[128], what[400], expect[96];
        if ((size_t)snprintf(name, sizeof(name), "%s%s%s", sect, *sect ? "." : "", f) >=
            sizeof(name))
            snprintf(name, sizeof(name), "?"); /* longer than any field's name */
        const char *rel = rel_name(o, name);
        const key_t_ *k = find_field(name);
        if (!k && json_is_object(v)) {
            bool is_sect = false; /* a section of o's scope? */
            for (size_t i = 0; i < config_nkeys && !is_sect; i++)
                is_sect = (config_keys[i].scope & o->scope) &&
                          in_section(key_field_name(&config_keys[i]), name);
            if (is_sect) {
                if (gobj_walk(o, name, v, err, errsize) < 0 ||
                    gobj_needed(o, name, true, err, errsize) < 0)
                    return -1;
                continue;
            }
        }
        /* The section the name stands in, as written: "redrive_max" is in none, "push.url"
         * (or "url" within "push") in push. */
        size_t nsl = section_len(name);
        char nsect[64];
        snprintf(nsect, sizeof(nsect), "%.*s", (int)nsl, name);
        if (!k) {
            snprintf(what, sizeof(what), "unknown field %.60s", rel);
            return gobj_err(o, sect, err, errsize, what);
        }
        if (!(k->scope & o->scope)) {
            snprintf(what, sizeof(what), "field %.60s cannot be set %s", rel, o->scope_name);
            return gobj_err(o, nsect, err, errsize, what);
        }
        void *field = (char *)o->g + k->off;
        char inner[300];
        if (set_json(NULL, k, field, v, inner, sizeof(inner)) < 0 || !value_ok(k, field)) {
            /* The value as given, unless it is a secret. */
            char *got =
                (k->flags & KF_SECRET) ? NULL : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            key_expect(k, false, expect, sizeof(expect));
            snprintf(what, sizeof(what), "bad %s%sfield \"%.60s\": %.60s must be %s%s%.40s", nsect,
                     nsl ? " " : "", name + (nsl ? nsl + 1 : 0), rel, expect, got ? ", got " : "",
                     got ? got : "");
            free(got);
            return gobj_err(o, nsect, err, errsize, what);
        }
        key_mark_explicit(o->g, k);
    }
    return 0;
}

/* Reads group object obj into g, filled from the defaults (group_conf_init). Returns 0, or -1
 * with err. */
static int gobj_read(ks_group_conf_t *g, json_t *obj, unsigned scope, const char *where, char *err,
                     size_t errsize)
{
    gobj_t o = {.g = g,
                .scope = scope,
                .root = scope == KS_SCOPE_PUSH ? "push" : "",
                .where = where,
                .scope_name =
                    scope == KS_SCOPE_PUSH ? "in a push set by API call" : "in a static group"};
    if (!json_is_object(obj)) {
        snprintf(err, errsize, "%s: expected an object", where);
        return -1;
    }
    if (gobj_walk(&o, o.root, obj, err, errsize) < 0)
        return -1;
    /* The needed keys of the root, and of every section the object set something of. */
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        char sect[64];
        if (!(k->scope & scope) || !(k->flags & KF_NEEDED))
            continue;
        snprintf(sect, sizeof(sect), "%.*s", (int)section_len(key_field_name(k)),
                 key_field_name(k));
        if (gobj_needed(&o, sect, false, err, errsize) < 0)
            return -1;
    }
    return 0;
}

ks_group_conf_t *ks_config_push_group(const ks_config_t *cfg, const char *name,
                                      const char *const *topics, size_t topic_cnt, json_t *push,
                                      char *err, size_t errsize)
{
    ks_group_conf_t *g = calloc(1, sizeof(*g));
    if (!g)
        abort();
    group_conf_init(g, &cfg->group_defaults);
    g->name = ks_xstrdup(name);
    if (!(g->topics = calloc(topic_cnt ? topic_cnt : 1, sizeof(char *))))
        abort();
    for (size_t t = 0; t < topic_cnt; t++)
        g->topics[t] = ks_xstrdup(topics[t]);
    g->topic_cnt = topic_cnt;
    if (gobj_read(g, push, KS_SCOPE_PUSH, "body", err, errsize) < 0) {
        ks_config_push_group_free(g);
        return NULL;
    }
    return g;
}

void ks_config_push_group_free(ks_group_conf_t *g)
{
    if (g) {
        group_conf_free(g);
        free(g);
    }
}

static int static_err(char *err, size_t errsize, size_t i, const char *what)
{
    snprintf(err, errsize, "config key 'groups.static[%zu]': %s", i, what);
    return -1;
}

/* Replaces the static groups with those of arr, a JSON array of group objects. */
static int parse_static(ks_config_t *cfg, json_t *arr, char *err, size_t errsize)
{
    if (!json_is_array(arr)) {
        snprintf(err, errsize, "config key 'groups.static': expected an array of group objects");
        return -1;
    }
    size_t n = json_array_size(arr);
    ks_group_conf_t *gs = calloc(n ? n : 1, sizeof(*gs));
    if (!gs)
        abort();
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char where[64];
        snprintf(where, sizeof(where), "config key 'groups.static[%zu]'", i);
        group_conf_init(&gs[i], &cfg->group_defaults);
        rc = gobj_read(&gs[i], json_array_get(arr, i), KS_SCOPE_STATIC, where, err, errsize);
        for (size_t j = 0; rc == 0 && j < i; j++)
            if (!strcmp(gs[j].name, gs[i].name))
                rc = static_err(err, errsize, i, "names a group twice");
    }
    if (rc) {
        for (size_t i = 0; i < n; i++)
            group_conf_free(&gs[i]);
        free(gs);
        return -1;
    }
    static_groups_free(cfg);
    cfg->static_groups = gs;
    cfg->static_group_cnt = n;
    return 0;
}

const ks_group_conf_t *ks_config_group(const ks_config_t *cfg, const char *group)
{
    for (size_t i = 0; i < cfg->static_group_cnt; i++)
        if (!strcmp(cfg->static_groups[i].name, group))
            return &cfg->static_groups[i];
    return &cfg->group_defaults;
}

bool ks_valid_kafka_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > KS_NAME_MAX || !strcmp(name, ".") || !strcmp(name, ".."))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!(isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}
