/* config.c: setting ksidecar's config keys against the key table of config_keys.c, from text
 * or JSON: kafka.* properties, typed values, the static groups and push objects. Where the
 * values come from (file, environment, flags) and the check of the whole: config_load.c. */
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

static int set_int(ks_config_t *cfg, const key_t_ *k, int64_t v, char *err, size_t errsize)
{
    if (v < k->min || v > k->max) {
        snprintf(err, errsize, "config key '%s': expected an integer from %lld to %lld, got %lld",
                 k->name, (long long)k->min, (long long)k->max, (long long)v);
        return -1;
    }
    if (k->type == T_INT)
        *(int *)((char *)cfg + k->off) = (int)v;
    else
        *(int64_t *)((char *)cfg + k->off) = v;
    return 0;
}

static void set_list(ks_config_t *cfg, const key_t_ *k, char **items, size_t n)
{
    /* The only list key today is groups.allowed. */
    (void)k;
    free_list(cfg->group_patterns, cfg->group_pattern_cnt);
    cfg->group_patterns = items;
    cfg->group_pattern_cnt = n;
}

static int parse_static(ks_config_t *cfg, json_t *arr, char *err, size_t errsize);

#define EXPLICIT_ORDERING  0x1
#define EXPLICIT_DLT       0x2
#define EXPLICIT_ATTEMPTS  0x4
#define EXPLICIT_IN_FLIGHT 0x8
#define EXPLICIT_PUSH_CONC 0x10
#define EXPLICIT_PUSH_TIME 0x20
#define EXPLICIT_PUSH_BAT  0x40
#define EXPLICIT_RETRY     0x80
#define EXPLICIT_REDRIVE   0x100

/* Static groups inherit every group.* default they do not set themselves, whatever
 * order the keys came in. */
void propagate_defaults(ks_config_t *cfg)
{
    const ks_group_conf_t *d = &cfg->group_defaults;
    for (size_t i = 0; i < cfg->static_group_cnt; i++) {
        ks_group_conf_t *g = &cfg->static_groups[i];
        if (!(g->explicit_mask & EXPLICIT_ORDERING))
            g->ordering = d->ordering;
        if (!(g->explicit_mask & EXPLICIT_ATTEMPTS))
            g->max_attempts = d->max_attempts;
        if (!(g->explicit_mask & EXPLICIT_REDRIVE))
            g->redrive_max = d->redrive_max;
        if (!(g->explicit_mask & EXPLICIT_IN_FLIGHT))
            g->max_in_flight_per_key = d->max_in_flight_per_key;
        if (!(g->explicit_mask & EXPLICIT_PUSH_CONC))
            g->push_concurrency = d->push_concurrency;
        if (!(g->explicit_mask & EXPLICIT_PUSH_TIME))
            g->push_timeout_ms = d->push_timeout_ms;
        if (!(g->explicit_mask & EXPLICIT_PUSH_BAT))
            g->push_batch = d->push_batch;
        if (!(g->explicit_mask & EXPLICIT_RETRY))
            g->retry = d->retry;
        if (!(g->explicit_mask & EXPLICIT_DLT) &&
            strcmp(g->dead_letter_topic, d->dead_letter_topic)) {
            free(g->dead_letter_topic);
            g->dead_letter_topic = ks_xstrdup(d->dead_letter_topic);
        }
    }
}

static int set_one(ks_config_t *cfg, const char *key, const char *value, char *err, size_t errsize);

/* A push bearer token goes into the Authorization header as it is: visible ASCII only
 * (what a bearer token is made of), so no byte can end the header or need escaping. */
static bool bearer_ok(const char *s)
{
    for (; *s; s++)
        if (*s < 0x21 || *s > 0x7e)
            return false;
    return true;
}

int ks_config_set(ks_config_t *cfg, const char *key, const char *value, char *err, size_t errsize)
{
    int rc = set_one(cfg, key, value, err, errsize);
    if (rc == 0)
        propagate_defaults(cfg);
    return rc;
}

static int set_one(ks_config_t *cfg, const char *key, const char *value, char *err, size_t errsize)
{
    if (is_kafka_key(key)) {
        kafka_set(cfg, key + 6, value);
        return 0;
    }
    const key_t_ *k = find_key(key);
    if (!k) {
        snprintf(err, errsize, "unknown config key '%s' (see --help for the keys)", key);
        return -1;
    }
    void *field = (char *)cfg + k->off;
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
        return set_int(cfg, k, v, err, errsize);
    }
    case T_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (end == value || *end || errno) {
            snprintf(err, errsize, "config key '%s': expected a number, got \"%s\"", key, value);
            return -1;
        }
        return set_double(field, k, v, err, errsize);
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
        set_list(cfg, k, items, n);
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
    const key_t_ *k = find_key(name);
    if (!k) {
        snprintf(err, errsize, "unknown config key '%s' (see --help for the keys)", name);
        return -1;
    }
    switch (k->type) {
    case T_STATIC:
        return parse_static(cfg, v, err, errsize);
    case T_STR:
    case T_LEVEL:
    case T_LOGFMT:
    case T_ORDER:
        if (!json_is_string(v))
            goto wrong_type;
        return ks_config_set(cfg, name, json_string_value(v), err, errsize);
    case T_INT:
    case T_I64:
        if (!json_is_integer(v))
            goto wrong_type;
        return set_int(cfg, k, json_integer_value(v), err, errsize);
    case T_DOUBLE:
        if (!json_is_number(v))
            goto wrong_type;
        return set_double((char *)cfg + k->off, k, json_number_value(v), err, errsize);
    case T_MSLIST:
        return json_mslist((ks_retry_t *)((char *)cfg + k->off), name, v, err, errsize);
    case T_BOOL:
        if (!json_is_boolean(v))
            goto wrong_type;
        *(bool *)((char *)cfg + k->off) = json_is_true(v);
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
        set_list(cfg, k, items, n);
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
    snprintf(err, errsize, "config key '%s': expected %s, got %s", name, expected[k->type],
             json_type_name(v));
    return -1;
}

static int static_err(char *err, size_t errsize, size_t i, const char *what)
{
    snprintf(err, errsize, "config key 'groups.static[%zu]': %s", i, what);
    return -1;
}

/* An integer field of a push object within [lo, hi], or -1 when it is not one. */
static int push_int(json_t *v, int lo, int hi)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return -1;
    return (int)json_integer_value(v);
}

/* Reads static group i's "push" object into g. Returns 0, or -1 with err naming the field. */
/* err := "<where>: <what>". Returns -1. */
static int where_err(char *err, size_t errsize, const char *where, const char *what)
{
    snprintf(err, errsize, "%s: %s", where, what);
    return -1;
}

/* Reads a "push" object into g; where names it in err ("config key 'groups.static[2]'").
 * api: set by an API call, where ca_file (a path on this host) is refused. Returns 0, or -1
 * with err naming the field. */
static int parse_push(ks_group_conf_t *g, json_t *o, const char *where, bool api, char *err,
                      size_t errsize)
{
    if (!json_is_object(o))
        return where_err(err, errsize, where, "push must be an object with a url");
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        const char *s = json_string_value(v);
        int n = 0;
        if (!strcmp(k, "url") && s && (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8)) &&
            strlen(s) > 8 && !strpbrk(s, " \r\n\t")) {
            free(g->push_url);
            g->push_url = ks_xstrdup(s);
        } else if (!strcmp(k, "concurrency") && (n = push_int(v, 1, 10000)) > 0) {
            g->push_concurrency = n;
            g->explicit_mask |= EXPLICIT_PUSH_CONC;
        } else if (!strcmp(k, "timeout_ms") && (n = push_int(v, 100, 3600000)) > 0) {
            g->push_timeout_ms = n;
            g->explicit_mask |= EXPLICIT_PUSH_TIME;
        } else if (!strcmp(k, "batch") && (n = push_int(v, 1, 10000)) > 0) {
            g->push_batch = n;
            g->explicit_mask |= EXPLICIT_PUSH_BAT;
        } else if (!strcmp(k, "bearer_token") && s && bearer_ok(s)) {
            free(g->push_bearer_token);
            g->push_bearer_token = ks_xstrdup(s);
        } else if (!strcmp(k, "ca_file") && s && !api) {
            free(g->push_ca_file);
            g->push_ca_file = ks_xstrdup(s);
        } else if (!strcmp(k, "insecure") && json_is_boolean(v)) {
            g->push_insecure = json_is_true(v);
        } else if (!strcmp(k, "cloudevents") && json_is_boolean(v)) {
            g->push_cloudevents = json_is_true(v);
        } else {
            char what[400];
            snprintf(what, sizeof(what),
                     "bad or unknown push field \"%.60s\" (url: http:// or https:// URL, "
                     "concurrency: 1-10000, timeout_ms: 100-3600000, batch: 1-10000, "
                     "bearer_token: visible ASCII, %sinsecure: boolean, cloudevents: boolean)",
                     k, api ? "" : "ca_file: path, ");
            return where_err(err, errsize, where, what);
        }
    }
    if (!*g->push_url)
        return where_err(err, errsize, where, "push needs a url (http:// or https://)");
    return 0;
}

ks_group_conf_t *ks_config_push_group(const ks_config_t *cfg, const char *name,
                                      const char *const *topics, size_t topic_cnt, json_t *push,
                                      char *err, size_t errsize)
{
    const ks_group_conf_t *d = &cfg->group_defaults;
    ks_group_conf_t *g = calloc(1, sizeof(*g));
    if (!g || !(g->topics = calloc(topic_cnt ? topic_cnt : 1, sizeof(char *))))
        abort();
    g->name = ks_xstrdup(name);
    for (size_t t = 0; t < topic_cnt; t++)
        g->topics[t] = ks_xstrdup(topics[t]);
    g->topic_cnt = topic_cnt;
    g->ordering = d->ordering;
    g->max_attempts = d->max_attempts;
    g->max_in_flight_per_key = d->max_in_flight_per_key;
    g->retry = d->retry;
    g->dead_letter_topic = ks_xstrdup(d->dead_letter_topic);
    g->push_url = ks_xstrdup("");
    g->push_concurrency = d->push_concurrency;
    g->push_timeout_ms = d->push_timeout_ms;
    g->push_batch = d->push_batch;
    g->push_bearer_token = ks_xstrdup("");
    g->push_ca_file = ks_xstrdup(d->push_ca_file);
    g->push_insecure = d->push_insecure;
    g->push_cloudevents = d->push_cloudevents;
    if (parse_push(g, push, "body", true, err, errsize) < 0) {
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

/* Replaces the static groups with those of arr, a JSON array of objects. */
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
        json_t *o = json_array_get(arr, i);
        ks_group_conf_t *g = &gs[i];
        g->ordering = cfg->group_defaults.ordering;
        g->max_attempts = cfg->group_defaults.max_attempts;
        g->redrive_max = cfg->group_defaults.redrive_max;
        g->max_in_flight_per_key = cfg->group_defaults.max_in_flight_per_key;
        g->retry = cfg->group_defaults.retry;
        g->dead_letter_topic = ks_xstrdup(cfg->group_defaults.dead_letter_topic);
        g->push_url = ks_xstrdup("");
        g->push_concurrency = cfg->group_defaults.push_concurrency;
        g->push_timeout_ms = cfg->group_defaults.push_timeout_ms;
        g->push_batch = cfg->group_defaults.push_batch;
        g->push_bearer_token = ks_xstrdup("");
        g->push_ca_file = ks_xstrdup("");
        if (!json_is_object(o)) {
            rc = static_err(err, errsize, i, "expected an object");
            break;
        }
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
            if (!strcmp(k, "name") && json_is_string(v) &&
                ks_valid_kafka_name(json_string_value(v)))
                g->name = ks_xstrdup(json_string_value(v));
            else if (!strcmp(k, "topics") && json_is_array(v) && json_array_size(v) > 0) {
                g->topic_cnt = json_array_size(v);
                g->topics = calloc(g->topic_cnt, sizeof(char *));
                if (!g->topics)
                    abort();
                for (size_t t = 0; t < g->topic_cnt; t++) {
                    json_t *tv = json_array_get(v, t);
                    if (!json_is_string(tv) || !ks_valid_kafka_name(json_string_value(tv))) {
                        g->topic_cnt = t;
                        rc = static_err(err, errsize, i, "topics must be valid topic names");
                        break;
                    }
                    g->topics[t] = ks_xstrdup(json_string_value(tv));
                }
            } else if (!strcmp(k, "ordering") && json_is_string(v)) {
                ks_ordering_t ord = KS_ORDER_KEY;
                if (ks_ordering_parse(json_string_value(v), &ord) < 0)
                    rc = static_err(err, errsize, i, "ordering must be key, partition or none");
                g->ordering = (int)ord;
                g->explicit_mask |= EXPLICIT_ORDERING;
            } else if (!strcmp(k, "dead_letter_topic") && json_is_string(v) &&
                       (!*json_string_value(v) || ks_valid_kafka_name(json_string_value(v)))) {
                free(g->dead_letter_topic);
                g->dead_letter_topic = ks_xstrdup(json_string_value(v));
                g->explicit_mask |= EXPLICIT_DLT;
            } else if (!strcmp(k, "max_attempts") && json_is_integer(v) &&
                       json_integer_value(v) >= 1 && json_integer_value(v) <= 1000000) {
                g->max_attempts = (int)json_integer_value(v);
                g->explicit_mask |= EXPLICIT_ATTEMPTS;
            } else if (!strcmp(k, "redrive_max") && json_is_integer(v) &&
                       json_integer_value(v) >= 1 && json_integer_value(v) <= 1000000) {
                g->redrive_max = (int)json_integer_value(v);
                g->explicit_mask |= EXPLICIT_REDRIVE;
            } else if (!strcmp(k, "max_in_flight_per_key") && json_is_integer(v) &&
                       json_integer_value(v) >= 1 && json_integer_value(v) <= 100000) {
                g->max_in_flight_per_key = (int)json_integer_value(v);
                g->explicit_mask |= EXPLICIT_IN_FLIGHT;
            } else if (!strcmp(k, "push")) {
                char where[64];
                snprintf(where, sizeof(where), "config key 'groups.static[%zu]'", i);
                rc = parse_push(g, v, where, false, err, errsize);
            } else if (!strcmp(k, "retry")) {
                char what[300];
                if (static_retry(g, v, what, sizeof(what)))
                    rc = static_err(err, errsize, i, what);
                g->explicit_mask |= EXPLICIT_RETRY;
            } else {
                char what[480];
                snprintf(what, sizeof(what),
                         "bad or unknown field \"%s\" (name: group name, topics: non-empty array "
                         "of topic names, ordering: key|partition|none, dead_letter_topic: topic "
                         "name, max_attempts: 1-1000000, redrive_max: 1-1000000, "
                         "max_in_flight_per_key: 1-100000, push: "
                         "object, retry: object of group.retry.* fields)",
                         k);
                rc = static_err(err, errsize, i, what);
            }
            if (rc)
                break;
        }
        if (rc == 0 && (!g->name || !g->topics))
            rc = static_err(err, errsize, i, "needs a name and a non-empty topics array");
        for (size_t j = 0; rc == 0 && j < i; j++)
            if (!strcmp(gs[j].name, g->name))
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
