/* config_int.h: the config key table and the helpers config_keys.c shares with the parser in
 * config.c and config_load.c; private to those three files. */
#ifndef KS_CONFIG_INT_H
#define KS_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#include <jansson.h>

/* T_DOUBLE: a number within [min, max]; T_MSLIST: a ks_retry_t's list of ms ("100,1000"). */
typedef enum {
    T_STR,
    T_INT,
    T_I64,
    T_DOUBLE,
    T_BOOL,
    T_LIST,
    T_LEVEL,
    T_LOGFMT,
    T_ORDER,
    T_STATIC,
    T_MSLIST
} ktype_t;

typedef struct {
    const char *name;
    ktype_t type;
    size_t off;
    int64_t min, max;
    const char *help;
} key_t_;

/* Every key ksidecar knows, besides kafka.* (config_keys.c). */
extern const key_t_ config_keys[];
extern const size_t config_nkeys;

/* Frees the n strings of list and list itself. */
void free_list(char **list, size_t n);
/* Frees what g holds and zeroes it. */
void group_conf_free(ks_group_conf_t *g);
/* Frees the static groups of cfg; it has none after. */
void static_groups_free(ks_config_t *cfg);
/* The key named name, or NULL if there is none. */
const key_t_ *find_key(const char *name);
/* Sets a T_DOUBLE field to v within k's range. Returns 0, or -1 with err. */
int set_double(void *field, const key_t_ *k, double v, char *err, size_t errsize);
/* Parses a T_MSLIST value ("100,1000") into r, the key named name. Returns 0, or -1 with err. */
int set_mslist(ks_retry_t *r, const char *name, const char *value, char *err, size_t errsize);
/* The same from the JSON file: an array of integers, or the text form. */
int json_mslist(ks_retry_t *r, const char *name, json_t *v, char *err, size_t errsize);
/* Reads a static group's "retry" object into g. Returns 0, or -1 with err. */
int static_retry(ks_group_conf_t *g, json_t *o, char *err, size_t errsize);
/* Writes r's list as "100,1000,5000" ("" when it has none) into out. */
void retry_list_str(const ks_retry_t *r, char *out, size_t outsize);
/* Writes key's environment variable name (KSIDECAR_ + the key upper-cased, '.' as '_'). */
void env_name(const char *key, char *out, size_t outsize);
/* Sets librdkafka property prop (a kafka.* key less its prefix) to value (config.c). */
void kafka_set(ks_config_t *cfg, const char *prop, const char *value);
/* Static groups take every group.* default they do not set themselves (config.c). */
void propagate_defaults(ks_config_t *cfg);
/* Sets the key named name (kafka.* too) from a JSON value of its type (config.c). Returns 0,
 * or -1 with err. */
int apply_json_value(ks_config_t *cfg, const char *name, json_t *v, char *err, size_t errsize);

#endif
