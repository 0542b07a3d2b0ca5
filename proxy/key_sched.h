/* key_sched.h: the per-partition scheduler that decides which record may go out next,
 * keeping per-key (or per-partition) order, redeliveries included. */
#ifndef KS_KEY_SCHED_H
#define KS_KEY_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ack_window.h"

typedef enum {
    KS_ORDER_KEY = 0,   /* same key: one at a time, in offset order; null keys unordered */
    KS_ORDER_PARTITION, /* one record in flight per partition */
    KS_ORDER_NONE,      /* no constraint */
} ks_ordering_t;

const char *ks_ordering_str(ks_ordering_t o);
int ks_ordering_parse(const char *s, ks_ordering_t *out);

/* A chain of records sharing an ordering key: only its head may be out. */
typedef struct ks_key_chain {
    uint64_t hash;
    int64_t head, tail; /* offsets; head == -1 marks a free slot */
} ks_key_chain_t;

/* Records are eligible when they are READY and their chain's head (unchained records
 * always are). The lowest eligible offset goes out first.
 * @locality one thread (the group loop) */
typedef struct ks_key_sched {
    ks_ordering_t mode;
    ks_key_chain_t *chains; /* open addressing by hash */
    size_t chain_cap, chain_cnt;
    /* Eligible offsets, which may hold stale ones (checked on take): those that came in
     * ascending order (new records, the common case) queue in a ring in O(1); the rest
     * (requeued, or a key's next record) go to a min-heap. The lowest of both goes first. */
    int64_t *run; /* ring, power-of-two capacity */
    size_t run_head, run_cnt, run_cap;
    int64_t *heap;
    size_t heap_cnt, heap_cap;
} ks_key_sched_t;

void ks_key_sched_init(ks_key_sched_t *s, ks_ordering_t mode);
void ks_key_sched_destroy(ks_key_sched_t *s);

/* A new READY record e entered w. has_key is false for a null key. */
void ks_key_sched_add(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e, bool has_key,
                      uint64_t key_hash);

/* e is READY again (nacked, its delay or lease ran out): eligible if it heads its chain. */
void ks_key_sched_requeue(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e);

/* e is done (acked or dead-lettered): the next record of its chain may go. */
void ks_key_sched_done(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e);

/* No record is held back. */
#define KS_HOLD_NONE INT64_MAX

/* Takes the lowest eligible READY record, or NULL. A record never delivered before at an
 * offset >= hold_from is not taken (held back, see ks_key_sched_hold_from); neither is
 * anything above it, so records still go out lowest first. KS_HOLD_NONE holds nothing.
 * The caller leases it. */
ks_win_entry_t *ks_key_sched_take(ks_key_sched_t *s, ks_ack_window_t *w, int64_t hold_from);

/* Where new deliveries are held back when the commit metadata keeps only the offsets below
 * cut (see ks_commit_meta_encode; -1: it all fits, nothing held). The records below the cut
 * stay deliverable, and so does the commit point's own record, whatever the cut: they are
 * what moves the commit point and shrinks the metadata. Holding them would stall the
 * partition for good (docs/design.md, "Commits"). */
static inline int64_t ks_key_sched_hold_from(int64_t cut, int64_t commit_point)
{
    if (cut < 0)
        return KS_HOLD_NONE;
    return cut > commit_point ? cut : commit_point + 1;
}

/* True if some record may be eligible (a cheap hint; next may still find none). */
static inline bool ks_key_sched_maybe_ready(const ks_key_sched_t *s)
{
    return s->heap_cnt > 0 || s->run_cnt > 0;
}

#endif
