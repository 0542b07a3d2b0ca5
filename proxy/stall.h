/* stall.h: why a partition's commit point stopped moving, from what its group loop knows. */
#ifndef KS_STALL_H
#define KS_STALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KS_STALL_NONE = 0,
    KS_STALL_KAFKA,         /* Kafka unreachable, or the partition's commits fail */
    KS_STALL_POISON,        /* the record at the commit point keeps coming back */
    KS_STALL_METADATA,      /* deliveries held back: the commit metadata would not fit */
    KS_STALL_SCHEMA,        /* deliveries wait for a schema from the schema registry */
    KS_STALL_MEMORY,        /* paused in librdkafka by the memory budget */
    KS_STALL_NO_SUBSCRIBER, /* nobody subscribes to the group */
    KS_STALL_NO_CREDITS,    /* every subscriber holds all its credits allow */
    KS_STALL_UNKNOWN,       /* none of the above: the record at the commit point is out */
} ks_stall_t;

/* One partition as of one check. */
typedef struct {
    int64_t lag;          /* records past the commit point, fetched or not; -1 unknown */
    int64_t idle_ms;      /* since the commit point last moved */
    int64_t stall_ms;     /* health.stall_ms */
    bool kafka_error;     /* Kafka is down, or the partition's last commit failed */
    int head_attempts;    /* deliveries of the record at the commit point (0: not held) */
    bool held_back;       /* part_t.held_back */
    bool schema_wait;     /* part_t.schema_wait */
    bool memory_paused;   /* part_t.kpaused */
    size_t subs;          /* the group's subscribers */
    size_t subs_credited; /* those with credits left */
} ks_stall_in_t;

/* KS_STALL_NONE unless the partition has lag and its commit point sat for stall_ms; then
 * the first cause that holds, in the order of the enum. */
ks_stall_t ks_stall_reason(const ks_stall_in_t *in);

/* "", "kafka", "poison", "metadata", "schema_registry", "memory", "no_subscriber", "no_credits",
 * "unknown". */
const char *ks_stall_str(ks_stall_t r);

#endif
