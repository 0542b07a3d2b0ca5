/* ack_id.h: the opaque ack id that names one lease: group, partition, epoch and offset. */
#ifndef KS_ACK_ID_H
#define KS_ACK_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KS_ACK_ID_MAX 336 /* longest id (321 characters) with its NUL, rounded up */

typedef struct ks_ack_id {
    uint32_t instance;   /* this process's random incarnation: ids die with it */
    uint32_t group_hash; /* FNV-1a of the group name: an id works only in its group */
    uint32_t epoch;      /* the partition assignment's epoch */
    int32_t partition;
    int64_t offset;
    uint32_t attempt; /* the delivery this id was issued for: a later one makes it stale */
    char topic[250];
} ks_ack_id_t;

/* Writes id as text into buf (KS_ACK_ID_MAX bytes suffice). Returns the length. */
size_t ks_ack_id_format(const ks_ack_id_t *id, char *buf, size_t size);

/* The same from its parts, with the topic (tl characters) given by pointer. */
size_t ks_ack_id_write(char *buf, size_t size, uint32_t instance, uint32_t group_hash,
                       uint32_t epoch, int32_t partition, int64_t offset, uint32_t attempt,
                       const char *topic, size_t tl);

/* Parses text made by ks_ack_id_format. Returns 0, or -1 if s is not a well-formed id
 * (out is then undefined). */
int ks_ack_id_parse(const char *s, ks_ack_id_t *out);

/* A parsed id whose topic points into the text it was parsed from (which must outlive
 * it). Parsing costs a few hundred instructions an id, so the edges' threads parse an ack
 * batch before it reaches the group loop. */
typedef struct ks_ack_ref {
    bool ok; /* false: malformed (the other fields are then undefined) */
    uint32_t instance, group_hash, epoch;
    int32_t partition;
    int64_t offset;
    uint32_t attempt;
    const char *topic;
} ks_ack_ref_t;

/* Parses s like ks_ack_id_parse, without copying the topic. Returns 0 or -1 (out->ok
 * says the same). */
int ks_ack_id_parse_ref(const char *s, ks_ack_ref_t *out);

uint32_t ks_ack_id_group_hash(const char *group);

#endif
