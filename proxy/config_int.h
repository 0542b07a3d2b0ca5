/* config_int.h: the config key table and the helpers config_keys.c shares with the parser
 * (config.c), the sources (config_load.c) and the dump (config_dump.c); private to those files
 * and tools/config_reference.c, which renders the table into docs/configuration.md. */
#ifndef KS_CONFIG_INT_H
#define KS_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#include <jansson.h>

/* A key's value type. T_DOUBLE: a number within [min, max]; T_MSLIST: a ks_retry_t's list of ms
 * ("100,1000"); T_LIST: a char ** with its count at cnt_off; T_STATIC: the static groups. */
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

/* Where a key may be set. A PROCESS key is a field of ks_config_t; the others are fields of
 * ks_group_conf_t. A GROUP key is a group default: the flag, variable and file key `name` set
 * it in cfg->group_defaults, and static groups and push bodies start from it. In a group object
 * (a static group's entry, a push body) a key goes by its name less its first component
 * ("group.redrive.max" is "redrive.max", nested {"redrive":{"max":..}} or dotted). */
enum {
    KS_SCOPE_PROCESS = 1 << 0,
    KS_SCOPE_GROUP = 1 << 1,  /* group default: flag, environment, file */
    KS_SCOPE_STATIC = 1 << 2, /* a field of a groups.static entry */
    KS_SCOPE_PUSH = 1 << 3,   /* a field of a push body (PUT /v1/groups/{group}/push) */
};
#define KS_SCOPE_KEY (KS_SCOPE_PROCESS | KS_SCOPE_GROUP) /* has a key name */
#define KS_SCOPE_OBJECT                                                                            \
    (KS_SCOPE_GROUP | KS_SCOPE_STATIC | KS_SCOPE_PUSH) /* in ks_group_conf_t                       \
                                                        */

enum {
    KF_SECRET = 1 << 0, /* the dump shows "********" for a value */
    KF_NULL = 1 << 1,   /* a string that is NULL until set, not "" */
    KF_NEEDED = 1 << 2, /* a group object must set it: always at its top level, else when it sets
                         * anything of its section ("push" needs a url) */
};

/* One config key: everything about it but the code that reads its value. */
typedef struct {
    const char *name; /* dotted, as a flag takes it */
    ktype_t type;
    unsigned scope, flags;
    size_t off;                /* of its field: in ks_config_t (PROCESS), else in ks_group_conf_t */
    size_t cnt_off;            /* T_LIST: of its count */
    int64_t min, max;          /* T_INT, T_I64, T_DOUBLE: the range */
    int64_t def;               /* the default of an integer, boolean or enum */
    double ddef;               /* T_DOUBLE's default */
    const char *sdef;          /* T_STR's default (NULL: ""), T_LIST's (one item) */
    const char *alias;         /* an older spelling in a group object ("redrive_max") */
    bool (*ok)(const char *s); /* checks a string (each item of a list); NULL: any */
    const char *hint;          /* what ok takes, as "a valid topic name" */
    const char *help;          /* one line for --help and docs/configuration.md */
} key_t_;

/* Every key ksidecar knows, besides kafka.* (config_keys.c). */
extern const key_t_ config_keys[];
extern const size_t config_nkeys;

/* Frees the n strings of list and list itself. */
void free_list(char **list, size_t n);
/* Frees what g holds and zeroes it. */
void group_conf_free(ks_group_conf_t *g);
/* Fills g, zeroed, for a group object: each GROUP key from d, the other keys of a group object
 * with their defaults; nothing explicit. */
void group_conf_init(ks_group_conf_t *g, const ks_group_conf_t *d);
/* Frees the static groups of cfg; it has none after. */
void static_groups_free(ks_config_t *cfg);
/* The key named name that a flag, variable or the file may set, or NULL if there is none. */
const key_t_ *find_key(const char *name);
/* The offset in ks_config_t of key k's field: in cfg itself, or in its group defaults. */
size_t key_off(const key_t_ *k);
/* k's name in a group object: its name past the first '.'. */
const char *key_field_name(const key_t_ *k);
/* The key of a group object named name (or by its alias), any scope, or NULL. */
const key_t_ *find_field(const char *name);
/* True if k is set on static group g itself, not inherited; marks it. */
bool key_explicit(const ks_group_conf_t *g, const key_t_ *k);
void key_mark_explicit(ks_group_conf_t *g, const key_t_ *k);
/* Writes what a value of k must be into out: "an integer from 1 to 10", or with brief
 * "1-10". */
void key_expect(const key_t_ *k, bool brief, char *out, size_t outsize);
/* k's value at field as JSON (secrets masked). cfg: for T_STATIC. New reference
 * (config_dump.c, as the next). */
json_t *key_dump(const key_t_ *k, const ks_config_t *cfg, const void *field);
/* A group object's keys of scope as JSON, nested by name: a static group's entry. New
 * reference. */
json_t *group_conf_dump(const ks_group_conf_t *g, unsigned scope);
/* Parses a T_MSLIST value ("100,1000") into r, the key named name. Returns 0, or -1 with err. */
int set_mslist(ks_retry_t *r, const char *name, const char *value, char *err, size_t errsize);
/* Writes r's list as "100,1000,5000" ("" when it has none) into out. */
void retry_list_str(const ks_retry_t *r, char *out, size_t outsize);
/* Writes key's environment variable name (KSIDECAR_ + the key upper-cased, '.' as '_'). */
void env_name(const char *key, char *out, size_t outsize);
/* Sets librdkafka property prop (a kafka.* key less its prefix) to value (config.c). */
void kafka_set(ks_config_t *cfg, const char *prop, const char *value);
/* Static groups take every group default they do not set themselves, whatever order the keys
 * came in. */
void propagate_defaults(ks_config_t *cfg);
/* Sets the key named name (kafka.* too) from a JSON value of its type (config.c). Returns 0,
 * or -1 with err. */
int apply_json_value(ks_config_t *cfg, const char *name, json_t *v, char *err, size_t errsize);
/* Checks the strings of the keys that have a check, in cfg and its group defaults: "config key
 * 'dev.topic': "a b" is not a valid topic name". Returns 0, or -1 with err (config.c). */
int check_key_values(const ks_config_t *cfg, char *err, size_t errsize);

#endif
