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

/* Writes ack ids one after another, keeping per partition (KS_ACK_ID_WRITER_SLOTS slots, by
 * partition number) the head of its last id ("a1", instance, group hash, epoch and
 * partition) and its topic's length: a batch's records come from the partitions in turn,
 * and ids of one partition differ only in offset and attempt. With 16 slots, a batch of 64
 * partitions wrote every head again (240 instructions a record in callgrind). Start it with
 * ks_ack_id_writer_init (or zeroed); it keeps pointers to the topics it was given. */
#define KS_ACK_ID_WRITER_SLOTS 256
typedef struct ks_ack_id_writer {
    uint64_t used[KS_ACK_ID_WRITER_SLOTS / 64]; /* the slots written since init */
    struct {
        uint8_t head_len;
        int32_t partition;
        uint32_t instance, group_hash, epoch;
        const char *topic; /* by pointer: a batch's records of one partition share it */
        size_t tl;
        char head[2 + 16 + 3 * 11 + 1];
    } slot[KS_ACK_ID_WRITER_SLOTS];
} ks_ack_id_writer_t;

/* Readies w: only the used bits are cleared (the slots are 24 KB). */
static inline void ks_ack_id_writer_init(ks_ack_id_writer_t *w)
{
    for (size_t i = 0; i < KS_ACK_ID_WRITER_SLOTS / 64; i++)
        w->used[i] = 0;
}

/* Like ks_ack_id_write, with the parts of an ack id. */
size_t ks_ack_id_writer_put(ks_ack_id_writer_t *w, char *buf, size_t size, uint32_t instance,
                            uint32_t group_hash, uint32_t epoch, int32_t partition, int64_t offset,
                            uint32_t attempt, const char *topic);

/* An ack range: consecutive offsets of one partition whose ids would differ only in offset,
 * acked by one id whose offset field is "<first>~<last>" (first <= last, at most
 * KS_ACK_RANGE_MAX offsets, last written in at most 19 digits). Each offset is settled as if
 * its own id had been sent. A parser older than ranges reads one as malformed. A message
 * with a range names at most KS_ACK_RANGE_MAX records in all: its answer (a result for each
 * refused record, by its own id) must fit one 4 MiB gRPC message. */
#define KS_ACK_RANGE_MAX 8000

/* Parses text made by ks_ack_id_format (a single id: a range is -1). Returns 0, or -1 if s
 * is not a well-formed id (out is then undefined). */
int ks_ack_id_parse(const char *s, ks_ack_id_t *out);

/* A parsed id whose topic points into the text it was parsed from (which must outlive
 * it). Parsing costs a few hundred instructions an id, so the edges' threads parse an ack
 * batch before it reaches the group loop. */
typedef struct ks_ack_ref {
    bool ok; /* false: malformed (the other fields are then undefined) */
    uint32_t instance, group_hash, epoch;
    int32_t partition;
    int64_t offset;
    int64_t last; /* a range id's last offset ("<offset>~<last>"); offset for a single id */
    uint32_t attempt;
    const char *topic;
    bool range; /* the id had the range form (when ok is false: a malformed range) */
} ks_ack_ref_t;

/* Parses s like ks_ack_id_parse, without copying the topic. Returns 0 or -1 (out->ok
 * says the same). */
int ks_ack_id_parse_ref(const char *s, ks_ack_ref_t *out);

/* What ks_ack_id_parse_ref_cached keeps from the ids it parsed, per partition (16 slots):
 * the instance and group hash text, and the last topic it checked (by pointer: those
 * strings must outlive the cache). Start it zeroed. */
typedef struct ks_ack_parse_cache {
    struct {
        char lead[17]; /* the 16 hex digits and the '-' after them; zeroed (so no id's: they
                        * have no NUL there) until the slot's first id */
        uint32_t instance, group_hash;
        const char *topic;
    } slot[16];
} ks_ack_parse_cache_t;

/* ks_ack_id_parse_ref, skipping the hex and topic checks that an earlier id of the same
 * partition with the same bytes there already passed. Same result as ks_ack_id_parse_ref. */
int ks_ack_id_parse_ref_cached(const char *s, ks_ack_ref_t *out, ks_ack_parse_cache_t *c);

uint32_t ks_ack_id_group_hash(const char *group);

/* How many records s names: last - first + 1 for a well-formed range id, else 1 (a single
 * id, or a malformed one, which settles as one INVALID result). Any thread. */
size_t ks_ack_id_count(const char *s);

/* Writes into buf the single id of the k-th offset (from 0) of the range id s (s itself when
 * it is no range). Returns the length. Any thread. */
size_t ks_ack_id_nth(const char *s, size_t k, char *buf, size_t size);

#endif
