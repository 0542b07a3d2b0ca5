/* commit_meta.h: the codec for the metadata string stored with a partition's committed offset. */
#ifndef KS_COMMIT_META_H
#define KS_COMMIT_META_H

#include <stddef.h>
#include <stdint.h>

/* The metadata of a commit records what the commit offset alone cannot: the acks above the commit
 * point (so that after a crash only unacked records are redelivered) and the delivery attempt
 * counts of records tried more than once (so that they survive a crash).
 *
 * Text form: "ks1:" followed by base64url without padding of a binary payload:
 *   varint commit_offset
 *   varint number of ack runs (a run is a maximal block of consecutive acked offsets), then per
 *     run: varint gap from the previous run's last offset (from commit_offset for the first run;
 *     >= 1 for the first run, >= 2 for the others) and varint run length (>= 1)
 *   varint number of attempt runs (a run is a maximal block of consecutive offsets with the
 *     same count), then per run: varint delta from the previous run's last offset (from
 *     commit_offset for the first; >= 1 after the first), varint run length (>= 1) and
 *     varint attempts (>= 1)
 *   4 bytes CRC-32 (IEEE) of all preceding payload bytes, little-endian
 * Varints are unsigned LEB128 of at most 9 bytes (values up to INT64_MAX), without redundant
 * trailing zero bytes. The encoding of a given set is unique. */

#define KS_COMMIT_META_PREFIX "ks1:"

/* The most acked offsets one metadata string may carry, however compact the runs are, so that
 * decoding a crafted string cannot allocate more than 8 bytes times this. It matches the
 * largest window.max_records the configuration accepts, so a real window never exceeds it. */
#define KS_COMMIT_META_MAX_ACKS 10000000

/* A max_bytes of at least this always fits the empty encoding (no acks, no attempts). */
#define KS_COMMIT_META_MIN_BYTES 25

typedef struct ks_meta_attempt {
    int64_t offset;
    uint32_t attempts;
} ks_meta_attempt_t;

typedef struct ks_commit_meta {
    int64_t commit_offset; /* the offset committed along with this metadata, >= 0 */
    int64_t *acked;        /* ascending, each > commit_offset */
    size_t acked_cnt;
    ks_meta_attempt_t *attempts; /* ascending by offset, each offset >= commit_offset,
                                    attempts >= 1: deliveries of records not yet acked */
    size_t attempt_cnt;
} ks_commit_meta_t;

/* Encodes m as "ks1:" + base64url (no padding) of the binary payload into buf, which has room
 * for max_bytes bytes including the terminating NUL (so the text is at most max_bytes-1 chars).
 * m is only read; buf is the caller's and is always NUL-terminated when max_bytes > 0.
 *
 * Returns the text length, or -1 (buf then holds "" if max_bytes > 0 and *cut_offset is
 * untouched) if m is invalid (negative commit_offset, arrays not strictly ascending, an ack not
 * above commit_offset, an attempt entry below commit_offset or with attempts < 1, a NULL array
 * with a nonzero count) or if even the empty encoding does not fit (see
 * KS_COMMIT_META_MIN_BYTES).
 *
 * When everything does not fit, it keeps the lowest part that fits: it drops the highest acked
 * offsets and attempt entries (by offset) until it fits and sets *cut_offset to the lowest
 * offset whose information was dropped: every ack or attempt entry with offset >= *cut_offset
 * is left out, everything below is encoded. When everything fits, *cut_offset = -1. The same
 * cut applies when m holds more than KS_COMMIT_META_MAX_ACKS acks. cut_offset may be NULL.
 * Runs in O(n log n) for n entries and allocates nothing. */
int ks_commit_meta_encode(const ks_commit_meta_t *m, char *buf, size_t max_bytes,
                          int64_t *cut_offset);

/* As ks_commit_meta_encode, but when m does not fit it first leaves out the attempt entries
 * with attempts == 1 (removing them from m->attempts, which is why m is not const) and encodes
 * again; only then does it drop the highest offsets. Acks cost about 2 bytes a run, an attempt
 * entry about 3, so out-of-order acks keep about twice as many offsets in the budget. The price:
 * after a crash, a record delivered once and not acked comes back as attempt 1 again, as it
 * does when the crash comes before the commit that would have counted it. */
int ks_commit_meta_encode_fit(ks_commit_meta_t *m, char *buf, size_t max_bytes,
                              int64_t *cut_offset);

/* Decodes text (len bytes, not necessarily NUL-terminated; may be NULL when len is 0) committed
 * with offset commit_offset into out, whose previous contents are overwritten, not freed.
 *
 * Returns 0 and fills out, whose arrays the caller then owns and frees with
 * ks_commit_meta_free. Returns -1 for anything foreign or corrupt (wrong or missing "ks1:"
 * prefix, bad base64url or padding, truncated or overlong varints, values out of range, offsets
 * not strictly increasing, non-canonical runs, a commit_offset inside the payload that differs
 * from the commit_offset argument, trailing bytes, a CRC mismatch, more than
 * KS_COMMIT_META_MAX_ACKS acks) or when out of memory; out is then empty (safe to free).
 * The payload is fully validated before anything is allocated for its entries. */
int ks_commit_meta_decode(const char *text, size_t len, int64_t commit_offset,
                          ks_commit_meta_t *out);

/* Frees m's arrays (which must come from ks_commit_meta_decode or malloc) and empties m, keeping
 * commit_offset. m may be NULL. Returns nothing and cannot fail. */
void ks_commit_meta_free(ks_commit_meta_t *m);

#endif
