/* config_dump.c: what renders the config key table with values: the dump (--print-config,
 * secrets masked) and the usage text (--help). */
#include "config_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "key_sched.h"

static bool is_secret(const char *prop)
{
    static const char *words[] = {"password",    "secret",  "token",  "sasl.oauthbearer.config",
                                  "ssl.key.pem", "ssl_key", "private"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(prop, words[i]))
            return true;
    return false;
}

/* s as a JSON string. Text that is not UTF-8 (a flag or variable may hold any bytes) would
 * make json_string fail and the key vanish from the dump; it is shown instead with every
 * byte above 0x7f written as \xHH. Never NULL. */
static json_t *dump_str(const char *s)
{
    json_t *v = json_string(s);
    if (v)
        return v;
    size_t n = strlen(s);
    char *esc = malloc(4 * n + 1), *p = esc;
    if (!esc)
        abort();
    for (const unsigned char *q = (const unsigned char *)s; *q; q++)
        p += *q < 0x80 ? sprintf(p, "%c", *q) : sprintf(p, "\\x%02x", *q);
    v = json_string(esc);
    free(esc);
    return v;
}

json_t *key_dump(const key_t_ *k, const ks_config_t *cfg, const void *field)
{
    switch (k->type) {
    case T_STR: {
        const char *s = *(char *const *)field;
        if (s && *s && (k->flags & KF_SECRET))
            return json_string("********");
        return s ? dump_str(s) : json_null();
    }
    case T_INT:
        return json_integer(*(const int *)field);
    case T_I64:
        return json_integer(*(const int64_t *)field);
    case T_DOUBLE:
        return json_real(*(const double *)field);
    case T_MSLIST: {
        char s[KS_RETRY_LIST_MAX * 12];
        retry_list_str(field, s, sizeof(s));
        return json_string(s);
    }
    case T_BOOL:
        return json_boolean(*(const bool *)field);
    case T_LEVEL:
        return json_string(ks_log_level_str(*(const ks_log_level_t *)field));
    case T_LOGFMT:
        return json_string(*(const bool *)field ? "json" : "text");
    case T_LIST: {
        json_t *v = json_array();
        char *const *items = *(char **const *)field;
        size_t n = *(const size_t *)((const char *)field - k->off + k->cnt_off);
        for (size_t j = 0; j < n; j++)
            json_array_append_new(v, dump_str(items[j]));
        return v;
    }
    case T_ORDER:
        return json_string(ks_ordering_str((ks_ordering_t) * (const int *)field));
    case T_STATIC: {
        json_t *v = json_array();
        for (size_t j = 0; j < cfg->static_group_cnt; j++)
            json_array_append_new(v, group_conf_dump(&cfg->static_groups[j], KS_SCOPE_STATIC));
        return v;
    }
    }
    return json_null();
}

/* The needed key of the section of k's field name (its name up to the last '.'), in scope, or
 * NULL: a section whose needed key is empty is not shown. */
static const key_t_ *section_needs(const key_t_ *k, unsigned scope)
{
    const char *f = key_field_name(k), *dot = strrchr(f, '.');
    size_t n = dot ? (size_t)(dot - f) : 0;
    for (size_t i = 0; dot && i < config_nkeys; i++) {
        const key_t_ *o = &config_keys[i];
        const char *of = key_field_name(o), *odot = strrchr(of, '.');
        if ((o->flags & KF_NEEDED) && (o->scope & scope & KS_SCOPE_OBJECT) && odot &&
            (size_t)(odot - of) == n && !strncmp(of, f, n))
            return o;
    }
    return NULL;
}

json_t *group_conf_dump(const ks_group_conf_t *g, unsigned scope)
{
    json_t *root = json_object();
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        if (!(k->scope & scope))
            continue;
        const key_t_ *need = section_needs(k, scope);
        if (need && need->type == T_STR) {
            const char *s = *(char *const *)((const char *)g + need->off);
            if (!s || !*s)
                continue;
        }
        /* "push.url" goes into the object "push", made on its first key. */
        json_t *at = root;
        const char *f = key_field_name(k), *dot;
        while ((dot = strchr(f, '.'))) {
            char part[64];
            snprintf(part, sizeof(part), "%.*s", (int)(dot - f), f);
            json_t *sub = json_object_get(at, part);
            if (!sub) {
                sub = json_object();
                json_object_set_new(at, part, sub);
            }
            at = sub;
            f = dot + 1;
        }
        json_object_set_new(at, f, key_dump(k, NULL, (const char *)g + k->off));
    }
    return root;
}

char *ks_config_dump(const ks_config_t *cfg)
{
    json_t *root = json_object();
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        if (k->scope & KS_SCOPE_KEY)
            json_object_set_new(root, k->name, key_dump(k, cfg, (const char *)cfg + key_off(k)));
    }
    for (size_t i = 0; i < cfg->kafka_cnt; i++) {
        json_t *name = dump_str(cfg->kafka[i].key);
        char *key = malloc(strlen(json_string_value(name)) + sizeof("kafka."));
        if (!key)
            abort();
        sprintf(key, "kafka.%s", json_string_value(name));
        json_decref(name);
        json_object_set_new(
            root, key, dump_str(is_secret(cfg->kafka[i].key) ? "********" : cfg->kafka[i].value));
        free(key);
    }
    char *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return out;
}

void ks_config_usage(void *file)
{
    FILE *f = file;
    fprintf(f, "usage: ksidecar [--config FILE] [--dev] [--KEY=VALUE ...]\n"
               "       ksidecar --help | --version | --print-config\n\n"
               "ksidecar serves a Kafka consumer group to clients over HTTP/JSON and\n"
               "commits their acks as contiguous offsets.\n\n"
               "Every key can be set in the JSON config file, as --KEY=VALUE, or as the\n"
               "environment variable KSIDECAR_<KEY> (upper case, '.' as '_'). Flags win over\n"
               "the environment, which wins over the file.\n\nKeys:\n");
    for (size_t i = 0; i < config_nkeys; i++) {
        char en[128];
        if (!(config_keys[i].scope & KS_SCOPE_KEY))
            continue;
        env_name(config_keys[i].name, en, sizeof(en));
        fprintf(f, "  --%-24s %s\n  %-26s (env %s)\n", config_keys[i].name, config_keys[i].help, "",
                en);
    }
    fprintf(f, "  --kafka.<property>         any librdkafka property, passed through\n"
               "                             (env KSIDECAR_KAFKA_<PROPERTY>, '.' as '_')\n\n"
               "Group fields: a groups.static entry sets these (nested objects or dotted names);\n"
               "a push set by API call (PUT /v1/groups/{group}/push) those marked 'push', less\n"
               "their \"push.\" prefix. A field with a group.* key takes that key's value unless\n"
               "the group sets it.\n");
    for (size_t i = 0; i < config_nkeys; i++) {
        const key_t_ *k = &config_keys[i];
        char what[128];
        if (!(k->scope & (KS_SCOPE_STATIC | KS_SCOPE_PUSH)))
            continue;
        key_expect(k, true, what, sizeof(what));
        fprintf(f, "  %-26s %s%s%s%s%s\n", key_field_name(k), what,
                k->flags & KF_NEEDED ? ", needed" : "", k->scope & KS_SCOPE_PUSH ? ", push" : "",
                k->alias ? ", also spelled " : "", k->alias ? k->alias : "");
    }
}
