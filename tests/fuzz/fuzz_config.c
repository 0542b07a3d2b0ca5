/* fuzz_config.c: libFuzzer harness for the config file, flags and environment
 * (proxy/config_load.c, proxy/config.c). Input: the JSON file's text, then NUL-separated
 * arguments; those that start with KSIDECAR_ are environment entries, the rest flags. No
 * crash, and whatever loads dumps as valid JSON that leaves nothing out. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "json_out.h"
#include "fuzz_file.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The number of keys other than kafka.* that a dump holds. */
static size_t base_keys(void)
{
    static size_t n;
    if (!n) {
        ks_config_t d;
        ks_config_defaults(&d);
        char *dump = ks_config_dump(&d);
        json_t *j = json_loads(dump, 0, NULL);
        n = json_object_size(j) - d.kafka_cnt;
        json_decref(j);
        free(dump);
        ks_config_free(&d);
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ks_log_setup(KS_LOG_ERROR, false);
    char *buf = malloc(size + 1);
    if (!buf)
        abort();
    memcpy(buf, data, size);
    buf[size] = '\0';
    size_t json_len = strnlen(buf, size);
    char path[80];
    snprintf(path, sizeof(path), "--config=%s", fuzz_file(buf, json_len));
    char *argv[MAX_ARGS + 3], *envp[MAX_ARGS + 1];
    int argc = 0, envc = 0;
    argv[argc++] = "ksidecar";
    argv[argc++] = path;
    for (size_t i = json_len + 1; i < size + 1 && argc < MAX_ARGS && envc < MAX_ARGS;) {
        char *a = buf + i;
        i += strlen(a) + 1;
        if (!strncmp(a, "KSIDECAR_", 9)) {
            if (strncmp(a, "KSIDECAR_CONFIG", 15) != 0) /* no other files */
                envp[envc++] = a;
        } else if (strncmp(a, "--config", 8) != 0) {
            argv[argc++] = a;
        }
    }
    argv[argc] = NULL;
    envp[envc] = NULL;

    ks_config_t cfg;
    ks_config_action_t action;
    char err[1024];
    if (ks_config_from_args(&cfg, argc, argv, envp, &action, err, sizeof(err)) == 0) {
        char *dump = ks_config_dump(&cfg);
        json_error_t jerr;
        json_t *back = dump ? json_loads(dump, 0, &jerr) : NULL;
        if (!back) {
            fprintf(stderr, "config dump is not JSON: %s\n", dump ? dump : "(null)");
            abort();
        }
        /* Nothing set may vanish from the dump: every key, every pattern, every group. */
        bool distinct = true; /* kafka names shown escaped could meet; only check if not */
        for (size_t i = 0; i < cfg.kafka_cnt; i++)
            distinct = distinct && ks_utf8_valid(cfg.kafka[i].key, strlen(cfg.kafka[i].key));
        if ((distinct && json_object_size(back) != base_keys() + cfg.kafka_cnt) ||
            json_array_size(json_object_get(back, "groups.allowed")) != cfg.group_pattern_cnt ||
            json_array_size(json_object_get(back, "groups.static")) != cfg.static_group_cnt) {
            fprintf(stderr, "config dump lost something: %s\n", dump);
            abort();
        }
        json_decref(back);
        free(dump);
        (void)ks_config_group(&cfg, "orders");
    } else if (!memchr(err, '\0', sizeof(err))) {
        abort();
    }
    ks_config_free(&cfg);

    /* The same JSON text through the in-memory loader, on fresh defaults. */
    ks_config_defaults(&cfg);
    if (ks_config_load_json(&cfg, buf, "fuzz", err, sizeof(err)) == 0)
        (void)ks_config_validate(&cfg, err, sizeof(err));
    ks_config_free(&cfg);
    free(buf);
    return 0;
}
