/* key_sched.h: the per-partition scheduler that decides which record may go out next,
 * keeping per-key (or per-partition) order, redeliveries included. */
#ifndef KS_KEY_SCHED_H
#define KS_KEY_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ack_window.h"

typedef enum {
    KS_ORDER_KEY = 0,   /* same key (of a partition): in offset order; null keys unordered */
    KS_ORDER_PARTITION, /* a partition's records in offset order */
    KS_ORDER_NONE,      /* no constraint */
} ks_ordering_t;

const char *ks_ordering_str(ks_ordering_t o);
int ks_ordering_parse(const char *s, ks_ordering_t *out);

/* A chain of records sharing an ordering key (or, with KS_ORDER_PARTITION, the partition).
 * Its records go out in offset order: a record is handed out (leased) only once every
 * earlier record of the chain is out or done, and while any is out the chain belongs to
 * the subscriber holding them (affinity), which may hold up to `limit` of them at once
 * (1 unless it asked for ordered batches). Laid out in offset order the chain is: records
 * done or out, then the cursor, then records never handed out since the cursor was set.
 * A record that comes back (nack, expiry, release) sends every later one that is out back
 * too (ks_key_sched_back) and becomes the cursor. When it failed (nacked, or its lease
 * ran out) the chain then goes out a few at a time again (win), growing by one for each
 * record done. */
typedef struct ks_key_chain {
    uint64_t hash;
    int64_t head, tail; /* offsets; head == -1 marks a free slot */
    int64_t cursor;     /* the next record to hand out: the first neither out nor done; -1 none */
    uint32_t out;       /* records of the chain handed out (leased) now */
    uint32_t owner;     /* while out > 0: the subscriber holding them */
    uint32_t limit;     /* while out > 0: how many the owner may hold at once */
    /* Since a record of the chain failed (ks_key_sched_narrow): how many may be out at
     * once, whatever the limit; it starts at the records still out (all earlier) plus
     * KS_CHAIN_RESTART and grows by one for each record done (doubling in a round trip, as
     * TCP's slow start) until it reaches the limit (then 0: no cap). A nack then sends back
     * tens of later records, not a whole limit's worth. */
    uint32_t win;
} ks_key_chain_t;

/* A min-heap of offsets. */
typedef struct ks_off_heap {
    int64_t *v;
    size_t cnt, cap;
} ks_off_heap_t;

/* One subscriber's own eligible offsets: the cursors of the chains it holds, with room. */
typedef struct ks_key_aff {
    uint32_t sub;
    ks_off_heap_t heap;
} ks_key_aff_t;

/* A record is eligible for anyone when it is READY and unchained, or READY and the cursor
 * of a chain nobody holds; it is eligible for the owner alone when it is READY and the
 * cursor of a chain the owner holds with fewer than its limit out. The lowest eligible
 * offset goes out first.
 * @locality one thread (the group loop) */
typedef struct ks_key_sched {
    ks_ordering_t mode;
    ks_key_chain_t *chains; /* open addressing by hash */
    size_t chain_cap, chain_cnt;
    /* Offsets eligible for anyone, which may hold stale ones (checked on take): those that
     * came in ascending order (new records, the common case) queue in a ring in O(1); the
     * rest (requeued, or a key's next record) go to a min-heap. The lowest of both goes
     * first. */
    int64_t *run; /* ring, power-of-two capacity */
    size_t run_head, run_cnt, run_cap;
    ks_off_heap_t heap;
    /* Offsets eligible for one subscriber only (stale ones too, checked on take). */
    ks_key_aff_t *aff;
    size_t aff_cnt;
    size_t aff_total; /* offsets in all of them */
} ks_key_sched_t;

void ks_key_sched_init(ks_key_sched_t *s, ks_ordering_t mode);
void ks_key_sched_destroy(ks_key_sched_t *s);

/* A new READY record e entered w. has_key is false for a null key. */
void ks_key_sched_add(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e, bool has_key,
                      uint64_t key_hash);

/* e is READY again (nacked, its delay or lease ran out, put back untaken): eligible if it
 * is its chain's cursor. An e still counted out goes back first (ks_key_sched_back with no
 * callback: right only when no later record of its chain is out, as with one in flight). */
void ks_key_sched_requeue(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e);

/* Called for each later record of a chain that goes back with an earlier one; it is still
 * LEASED: the callee puts it READY (counting no attempt: it was not processed) and must not
 * requeue it (it goes out again after the record that went back first). */
typedef void(ks_key_sched_back_fn)(void *opaque, ks_win_entry_t *e);

/* e, handed out, comes back undone (nacked, its lease expired, its subscriber left or its
 * batch was never sent), before its state changes: every later record of its chain that is
 * out goes back too, through back (NULL: there must be none), and e becomes the cursor, so
 * they all go out again after it, in offset order. Requeue e once it is READY. Nothing for
 * an unchained e or one not out. */
void ks_key_sched_back(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e,
                       ks_key_sched_back_fn *back, void *opaque);

/* Records of a chain that may go out after one failed, beside those still out. */
#define KS_CHAIN_RESTART 10

/* After ks_key_sched_back for an e that failed (nacked, its lease ran out; not when its
 * subscriber left or its batch was never sent): its chain goes out a few at a time again,
 * the records still out plus KS_CHAIN_RESTART, one more for each record done, up to the
 * limit. A chain whose records fail often then has few records out to send back. */
void ks_key_sched_narrow(ks_key_sched_t *s, const ks_win_entry_t *e);

/* e is done (acked or dead-lettered), before its state moves to ACKED: the next record of
 * its chain may go. */
void ks_key_sched_done(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e);

/* No record is held back. */
#define KS_HOLD_NONE INT64_MAX

/* Takes the lowest READY record eligible for subscriber sub (ids start at 1), which may hold
 * up to limit records of one chain at once (1: one in flight per chain; more: it asked for
 * ordered batches and processes a chain's records in the order received), or NULL. A record
 * never delivered before at an offset >= hold_from is not taken (held back, see
 * ks_key_sched_hold_from); neither is anything above it, so records still go out lowest
 * first. KS_HOLD_NONE holds nothing. The caller leases it, or puts it back at once with
 * ks_key_sched_requeue. */
ks_win_entry_t *ks_key_sched_take_for(ks_key_sched_t *s, ks_ack_window_t *w, int64_t hold_from,
                                      uint32_t sub, uint32_t limit);

/* ks_key_sched_take_for one record at a time per chain, for an anonymous taker. */
static inline ks_win_entry_t *ks_key_sched_take(ks_key_sched_t *s, ks_ack_window_t *w,
                                                int64_t hold_from)
{
    return ks_key_sched_take_for(s, w, hold_from, 0, 1);
}

/* Subscriber sub is gone (its leases went back first): forgets what was eligible for it. */
void ks_key_sched_forget_sub(ks_key_sched_t *s, uint32_t sub);

/* The chain e belongs to as clients see it (Record.ordering_chain): nonzero, equal for the
 * records of one chain of the partition; 0 for a record in no chain (a null key with
 * KS_ORDER_KEY, or KS_ORDER_NONE). */
uint64_t ks_key_sched_chain_id(const ks_win_entry_t *e);

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
    return s->heap.cnt > 0 || s->run_cnt > 0 || s->aff_total > 0;
}

#endif
