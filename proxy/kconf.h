/* kconf.h: every librdkafka client's configuration, built in one place: the process's kafka.*
 * pass-through plus what the client's role needs. */
#ifndef KS_KCONF_H
#define KS_KCONF_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Who the configuration is for. Each role is one row of kconf.c's table: the properties
 * ksidecar sets before the pass-through (defaults that kafka.* may change), whether the
 * pass-through applies, and those set after it (what the role rests on: kafka.* cannot
 * change them). */
typedef enum {
    KS_KCONF_CHECK,            /* the pass-through alone: startup's check of kafka.* */
    KS_KCONF_CONSUMER,         /* a group's consumer */
    KS_KCONF_PRODUCER,         /* the engine's producer, for Produce calls */
    KS_KCONF_DEAD_LETTER,      /* a group's dead-letter producer */
    KS_KCONF_REDRIVE_CONSUMER, /* a redrive's reader of the dead-letter topic */
    KS_KCONF_REDRIVE_PRODUCER, /* a redrive's writer back to the origin topics */
    KS_KCONF_DEV,              /* dev mode's mock cluster and sample producer: no kafka.* */
    KS_KCONF_ROLE_CNT
} ks_kconf_role_t;

/* The role's name, for messages ("consumer", "dead-letter producer", ...). */
const char *ks_kconf_role_name(ks_kconf_role_t role);

/* Makes a configuration for role from cfg's pass-through (borrowed; may be NULL for
 * KS_KCONF_DEV). group_id is the consumer roles' group.id (borrowed; NULL for the others).
 * Returns a new conf the caller owns (rd_kafka_new takes it, else rd_kafka_conf_destroy),
 * or NULL with err naming the property that librdkafka refused and its message: a
 * pass-through one as its config key "kafka.NAME". Any thread. */
rd_kafka_conf_t *ks_kconf_new(const ks_config_t *cfg, ks_kconf_role_t role, const char *group_id,
                              char *err, size_t errsize);

/* As ks_kconf_new for a group's consumer (KS_KCONF_CONSUMER) whose fetch.max.bytes is
 * fetch_bytes (its share of the memory budget: ks_mem_fetch_take) and fetch.message.max.bytes
 * derived from it; kafka.* may still set either. Any thread. */
rd_kafka_conf_t *ks_kconf_new_consumer(const ks_config_t *cfg, const char *group_id,
                                       int64_t fetch_bytes, char *err, size_t errsize);

/* Checks that librdkafka takes every kafka.* property of cfg. Returns 0, or -1 with err as
 * ks_kconf_new's. Any thread. */
int ks_kconf_check(const ks_config_t *cfg, char *err, size_t errsize);

#endif
