/* config_load.c: where ksidecar's configuration comes from, in the order it layers (the JSON
 * file walked into keys, the environment, the flags), and ks_config_validate, the check of the
 * whole. Each value is set by config.c. */
#include "config.h"

#include "config_int.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool has_children(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < config_nkeys; i++)
        if ((config_keys[i].scope & KS_SCOPE_KEY) && !strncmp(config_keys[i].name, name, n) &&
            config_keys[i].name[n] == '.')
            return true;
    return false;
}

/* Walks a JSON object; nested objects extend the dotted prefix, except for keys that
 * take an object-free value themselves. */
static int apply_object(ks_config_t *cfg, const char *prefix, json_t *obj, char *err,
                        size_t errsize)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        char name[512];
        if (*prefix)
            snprintf(name, sizeof(name), "%s.%s", prefix, k);
        else
            snprintf(name, sizeof(name), "%s", k);
        int rc;
        /* An object is a section ("commit": {...}), also under a key that has keys of
         * its own ("dev": {"topic": ...}); elsewhere it is a wrong type. */
        if (json_is_object(v) && (!find_key(name) || has_children(name)))
            rc = apply_object(cfg, name, v, err, errsize);
        else if ((rc = apply_json_value(cfg, name, v, err, errsize)) == 0)
            propagate_defaults(cfg);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ks_config_load_json(ks_config_t *cfg, const char *text, const char *origin, char *err,
                        size_t errsize)
{
    json_error_t jerr;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, errsize, "%s: line %d column %d: %s", origin, jerr.line, jerr.column,
                 jerr.text);
        return -1;
    }
    if (!json_is_object(root)) {
        snprintf(err, errsize, "%s: expected a JSON object at the top level", origin);
        json_decref(root);
        return -1;
    }
    char inner[800];
    int rc = apply_object(cfg, "", root, inner, sizeof(inner));
    if (rc < 0)
        snprintf(err, errsize, "%s: %s", origin, inner);
    json_decref(root);
    return rc;
}

int ks_config_load_file(ks_config_t *cfg, const char *path, char *err, size_t errsize)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errsize, "config file %s: %s", path, strerror(errno));
        return -1;
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!root) {
        snprintf(err, errsize, "config file %s: line %d column %d: %s", path, jerr.line,
                 jerr.column, jerr.text);
        return -1;
    }
    char *text = json_dumps(root, 0);
    json_decref(root);
    char origin[300];
    snprintf(origin, sizeof(origin), "config file %s", path);
    int rc = ks_config_load_json(cfg, text, origin, err, errsize);
    free(text);
    return rc;
}

int ks_config_apply_env(ks_config_t *cfg, char **envp, char *err, size_t errsize)
{
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, "KSIDECAR_", 9) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char name[256];
        size_t nl = (size_t)(eq - *e);
        if (nl >= sizeof(name))
            nl = sizeof(name) - 1;
        memcpy(name, *e, nl);
        name[nl] = '\0';
        const char *value = eq + 1;

        if (strncmp(name, "KSIDECAR_KAFKA_", 15) == 0 && name[15]) {
            /* librdkafka properties are dotted lower-case names. */
            char prop[256];
            size_t i;
            for (i = 0; name[15 + i] && i + 1 < sizeof(prop); i++) {
                char c = name[15 + i];
                prop[i] = c == '_' ? '.' : (char)tolower((unsigned char)c);
            }
            prop[i] = '\0';
            kafka_set(cfg, prop, value);
            continue;
        }
        /* Variables of the build, test and benchmark scripts are not config (a benchmark
         * run with KSIDECAR_BENCH_NO_RESULTS=1 starts ksidecar with it in its environment). */
        if (strncmp(name, "KSIDECAR_TEST_", 14) == 0 || strncmp(name, "KSIDECAR_BUILD_", 15) == 0 ||
            strncmp(name, "KSIDECAR_BENCH_", 15) == 0 || strcmp(name, "KSIDECAR_CACHE") == 0)
            continue;
        const key_t_ *k = NULL;
        for (size_t i = 0; i < config_nkeys; i++) {
            char en[256];
            if (!(config_keys[i].scope & KS_SCOPE_KEY))
                continue;
            env_name(config_keys[i].name, en, sizeof(en));
            if (strcmp(en, name) == 0) {
                k = &config_keys[i];
                break;
            }
        }
        if (!k) {
            snprintf(err, errsize, "environment variable %s is not a ksidecar config key", name);
            return -1;
        }
        char inner[800];
        if (ks_config_set(cfg, k->name, value, inner, sizeof(inner)) < 0) {
            snprintf(err, errsize, "environment variable %s: %s", name, inner);
            return -1;
        }
    }
    return 0;
}

_Static_assert(KS_MAX_ACK_IDS *(int64_t)(321 + 4) + 64 <= KS_DEFAULT_REQUEST_BYTES,
               "the default body limit must hold the largest ack request");

/* Each prefix of push.allowed_urls names a whole origin: http:// or https://, a host, and a
 * '/' that ends it, so no url can add to its host or port ("...:9000" would let
 * "...:90001/" and "...:9000@elsewhere/" through). Returns 0, or -1 with err. */
static int check_allowed_urls(const char *list, char *err, size_t errsize)
{
    for (const char *a = list; *a;) {
        a += strspn(a, " ,");
        size_t n = strcspn(a, ",");
        while (n && a[n - 1] == ' ')
            n--;
        if (!n)
            break;
        size_t scheme = !strncmp(a, "http://", 7) ? 7 : !strncmp(a, "https://", 8) ? 8 : 0;
        const char *slash = scheme ? memchr(a + scheme, '/', n - scheme) : NULL;
        if (!scheme || !slash || slash == a + scheme || memchr(a, '@', (size_t)(slash - a)) ||
            memchr(a, ' ', n)) {
            snprintf(err, errsize,
                     "config key 'push.allowed_urls': \"%.*s\" is not a url prefix of the form "
                     "http://host[:port]/[path] (https:// too), ending its host with a '/'",
                     (int)(n > 200 ? 200 : n), a);
            return -1;
        }
        a += strcspn(a, ",");
    }
    return 0;
}

int ks_config_validate(const ks_config_t *cfg, char *err, size_t errsize)
{
    if (check_allowed_urls(cfg->push_allowed_urls, err, errsize) < 0)
        return -1;
    if (cfg->static_group_cnt > (size_t)cfg->groups_max) {
        snprintf(err, errsize,
                 "config key 'groups.static' names %zu groups, more than 'groups.max' (%d)",
                 cfg->static_group_cnt, cfg->groups_max);
        return -1;
    }
    if (cfg->fetch_default_wait_ms > cfg->fetch_max_wait_ms) {
        snprintf(err, errsize,
                 "config key 'fetch.default_wait_ms' (%d) must not exceed 'fetch.max_wait_ms' "
                 "(%d)",
                 cfg->fetch_default_wait_ms, cfg->fetch_max_wait_ms);
        return -1;
    }
    if (*cfg->http_listen && !strrchr(cfg->http_listen, ':')) {
        snprintf(err, errsize, "config key 'http.listen': expected host:port, got \"%s\"",
                 cfg->http_listen);
        return -1;
    }
    if (*cfg->http_health_listen && (!strrchr(cfg->http_health_listen, ':') || !*cfg->http_listen ||
                                     !strcmp(cfg->http_health_listen, cfg->http_listen))) {
        snprintf(err, errsize,
                 "config key 'http.health_listen': expected host:port other than http.listen "
                 "(and http.listen set), got \"%s\"",
                 cfg->http_health_listen);
        return -1;
    }
    /* Each key's own check (group.dead_letter_topic, dev.topic: topic names). */
    if (check_key_values(cfg, err, errsize) < 0)
        return -1;
    if (!*cfg->tls_cert_file != !*cfg->tls_key_file) {
        snprintf(err, errsize, "config keys 'tls.cert_file' and 'tls.key_file' go together");
        return -1;
    }
    if (*cfg->tls_client_ca_file && !*cfg->tls_cert_file) {
        snprintf(err, errsize,
                 "config key 'tls.client_ca_file' needs tls.cert_file and "
                 "tls.key_file");
        return -1;
    }
    if (!*cfg->schema_registry_cert_file != !*cfg->schema_registry_key_file) {
        snprintf(err, errsize,
                 "config keys 'schema_registry.cert_file' and 'schema_registry.key_file' go "
                 "together");
        return -1;
    }
    if (*cfg->schema_registry_basic_auth && *cfg->schema_registry_bearer_token_file) {
        snprintf(err, errsize,
                 "config keys 'schema_registry.basic_auth' and "
                 "'schema_registry.bearer_token_file' exclude each other");
        return -1;
    }
    if (cfg->lease_deadline_ms > cfg->lease_max_deadline_ms) {
        snprintf(err, errsize,
                 "config key 'lease.deadline_ms' (%d) must not exceed 'lease.max_deadline_ms' (%d)",
                 cfg->lease_deadline_ms, cfg->lease_max_deadline_ms);
        return -1;
    }
    if (!cfg->dev && !ks_config_kafka_get(cfg, "bootstrap.servers")) {
        snprintf(err, errsize,
                 "config key 'kafka.bootstrap.servers' is required (or run with --dev)");
        return -1;
    }
    return 0;
}

/* Splits "--key=value" / "--key value" / "--flag". Returns the number of argv
 * entries used, or -1 with err. */
static int take_flag(int argc, char **argv, int i, char *key, size_t keysize, const char **value,
                     char *err, size_t errsize)
{
    const char *a = argv[i] + 2;
    const char *eq = strchr(a, '=');
    if (eq) {
        snprintf(key, keysize, "%.*s", (int)(eq - a), a);
        *value = eq + 1;
        return 1;
    }
    snprintf(key, keysize, "%s", a);
    const key_t_ *k = find_key(key);
    if (k && k->type == T_BOOL) {
        if (i + 1 < argc &&
            (strcmp(argv[i + 1], "true") == 0 || strcmp(argv[i + 1], "false") == 0)) {
            *value = argv[i + 1];
            return 2;
        }
        *value = "true";
        return 1;
    }
    if (i + 1 >= argc) {
        snprintf(err, errsize, "flag --%s needs a value", key);
        return -1;
    }
    *value = argv[i + 1];
    return 2;
}

int ks_config_from_args(ks_config_t *cfg, int argc, char **argv, char **envp,
                        ks_config_action_t *action, char *err, size_t errsize)
{
    char key[256];
    const char *value;
    *action = KS_CONFIG_RUN;
    ks_config_defaults(cfg);

    /* Pass 1: actions, and the config file (from a flag, else the environment). */
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            *action = KS_CONFIG_HELP;
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            *action = KS_CONFIG_VERSION;
            return 0;
        }
        if (!strcmp(argv[i], "--print-config")) {
            *action = KS_CONFIG_PRINT;
            continue;
        }
        if (strncmp(argv[i], "--", 2) != 0) {
            snprintf(err, errsize, "unexpected argument \"%s\" (flags look like --key=value)",
                     argv[i]);
            return -1;
        }
        int used = take_flag(argc, argv, i, key, sizeof(key), &value, err, errsize);
        if (used < 0)
            return -1;
        if (!strcmp(key, "config"))
            file = value;
        i += used - 1;
    }
    for (char **e = envp; !file && e && *e; e++)
        if (!strncmp(*e, "KSIDECAR_CONFIG=", 16))
            file = *e + 16;
    if (file) {
        if (ks_config_load_file(cfg, file, err, errsize) < 0)
            return -1;
        free(cfg->config_file);
        cfg->config_file = ks_xstrdup(file);
    }
    if (ks_config_apply_env(cfg, envp, err, errsize) < 0)
        return -1;

    /* Pass 2: flags win. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--print-config"))
            continue;
        int used = take_flag(argc, argv, i, key, sizeof(key), &value, err, errsize);
        if (used < 0)
            return -1;
        char inner[800];
        if (ks_config_set(cfg, key, value, inner, sizeof(inner)) < 0) {
            snprintf(err, errsize, "flag --%s: %s", key, inner);
            return -1;
        }
        i += used - 1;
    }
    return ks_config_validate(cfg, err, errsize);
}
