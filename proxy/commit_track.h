/* commit_track.h: one partition's commits sent and confirmed, and the acks they cover. */
#ifndef KS_COMMIT_TRACK_H
#define KS_COMMIT_TRACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the broker confirmed, as opposed to what was sent: a commit is confirmed by a
 * successful synchronous rd_kafka_commit or by offset_commit_cb without an error for the
 * partition. Offsets only grow within one assignment (a seek starts a new track).
 * @locality group loop; no locking inside. */
typedef struct ks_commit_track {
    int64_t confirmed;      /* the last offset the broker confirmed, -1 if none */
    int64_t sent;           /* the last offset sent, -1 if none or it failed */
    uint64_t sent_meta;     /* hash of the last sent commit's metadata */
    int64_t acks;           /* acks accepted on this assignment */
    int64_t acks_sent;      /* acks covered by the last sent commit */
    int64_t acks_confirmed; /* acks covered by the last confirmed commit (at least) */
} ks_commit_track_t;

void ks_commit_track_init(ks_commit_track_t *t, int64_t confirmed);

/* A commit of offset with metadata meta (len bytes, may be NULL) was sent; it covers
 * every ack accepted so far. */
void ks_commit_track_sent(ks_commit_track_t *t, int64_t offset, const void *meta, size_t len);

/* The broker confirmed a commit of offset with metadata meta. When it is the last one
 * sent (same offset and metadata), every ack that commit covered is confirmed; an older
 * one only moves the confirmed offset. Returns true when offset is below the offset
 * confirmed before it: the broker wrote this older commit last, so the group now holds
 * it, and the caller must commit its commit point again. */
bool ks_commit_track_confirmed(ks_commit_track_t *t, int64_t offset, const void *meta, size_t len);

/* The last commit sent failed: nothing is in flight. */
void ks_commit_track_failed(ks_commit_track_t *t);

/* The offset of the commit in flight (sent, not confirmed yet), or -1. */
int64_t ks_commit_track_in_flight(const ks_commit_track_t *t);

/* Acks accepted that no confirmed commit covers yet: at most this many acked records
 * are delivered again if the partition moves now. */
int64_t ks_commit_track_unconfirmed(const ks_commit_track_t *t);

#endif
