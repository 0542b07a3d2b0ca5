/* ack_window.h: one partition's window of uncommitted records and its contiguous commit point. */
#ifndef KS_ACK_WINDOW_H
#define KS_ACK_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A record's state in the window. */
typedef enum {
    KS_REC_READY = 0,      /* fetched, waiting to be handed out (again) */
    KS_REC_LEASED,         /* handed to a client, not acked */
    KS_REC_ACKED,          /* done; kept only until everything below it is done */
    KS_REC_DELAYED,        /* nacked with a delay: ready again at due_ms */
    KS_REC_DEAD_LETTERING, /* being produced to the dead-letter topic */
} ks_rec_state_t;

const char *ks_rec_state_str(ks_rec_state_t s);

/* The whitelist of record-state moves, one bit per target state, indexed by the current
 * state: ACKED is final (a done record is never handed out again), and a record being
 * dead-lettered is neither leased nor dead-lettered a second time. */
#define KS_REC_BIT(s) (1u << (s))
#define KS_REC_ANY                                                                                 \
    (KS_REC_BIT(KS_REC_READY) | KS_REC_BIT(KS_REC_LEASED) | KS_REC_BIT(KS_REC_ACKED) |             \
     KS_REC_BIT(KS_REC_DELAYED) | KS_REC_BIT(KS_REC_DEAD_LETTERING))
static const uint8_t ks_rec_moves[] = {
    [KS_REC_READY] = KS_REC_ANY,
    [KS_REC_LEASED] = KS_REC_ANY,
    [KS_REC_ACKED] = 0,
    [KS_REC_DELAYED] = KS_REC_ANY,
    [KS_REC_DEAD_LETTERING] =
        KS_REC_BIT(KS_REC_READY) | KS_REC_BIT(KS_REC_ACKED) | KS_REC_BIT(KS_REC_DELAYED),
};

/* True if a record may move from `from` to `to`. */
static inline bool ks_rec_move_allowed(unsigned from, unsigned to)
{
    return from < sizeof(ks_rec_moves) && (ks_rec_moves[from] & KS_REC_BIT(to));
}

typedef struct ks_win_entry {
    int64_t offset;
    int64_t due_ms;        /* LEASED: lease deadline; DELAYED: when it is ready again */
    int64_t leased_at_ms;  /* LEASED: when this lease began */
    int64_t next_same_key; /* scheduler: next offset of the same ordering key, or -1 */
    uint64_t key_hash;     /* scheduler: the ordering key's hash */
    uint32_t bytes;        /* what the record costs against the window's byte bound */
    uint32_t sub_id;       /* LEASED: the subscriber holding it */
    uint16_t attempts;     /* deliveries so far */
    uint8_t state;         /* ks_rec_state_t */
    uint8_t flags;         /* scheduler bookkeeping, and KS_WIN_F_UNSENT */
    uint16_t uncounted;    /* deliveries taken back unprocessed (ordered batches): not attempts */
    void *msg;             /* the record itself, owned by the window until acked */
    char *reason;          /* the last nack's reason (malloc'd), freed with msg */
} ks_win_entry_t;

/* Every record-state change after the entry was pushed goes through here: moves *state to
 * `to` if the whitelist allows it and returns true; else leaves it and returns false. */
static inline bool ks_rec_move(ks_win_entry_t *e, ks_rec_state_t to)
{
    if (!ks_rec_move_allowed(e->state, to))
        return false;
    e->state = (uint8_t)to;
    return true;
}

/* flags: LEASED to a transport that has not taken it yet (its attempt is counted back
 * if it never does). The scheduler's own flags use the low bits. */
#define KS_WIN_F_UNSENT 0x80
/* flags: taken back from its subscriber with an earlier record of its ordering chain, its
 * attempt not counted (uncounted): an ack id of that delivery is stale until it goes out
 * again, under a new attempt number. */
#define KS_WIN_F_TAKEN_BACK 0x40

/* flags, tracing on: its last delivery held it alone, so its lease's process span links that
 * delivery's receive span (a batch's receive span has ids of its own). */
#define KS_WIN_F_ALONE 0x20

/* The attempts that count (toward max_attempts, and in the commit metadata): deliveries
 * less those taken back unprocessed. */
static inline uint16_t ks_win_attempts_counted(const ks_win_entry_t *e)
{
    return e->attempts > e->uncounted ? (uint16_t)(e->attempts - e->uncounted) : 0;
}

typedef void(ks_win_free_fn)(void *msg);

/* Records are pushed in increasing offset order, with gaps allowed (compaction,
 * transaction markers). The commit point is the offset of the lowest record not
 * yet acked, or end_offset when every pushed record is acked: committing it never
 * skips an unacked record.
 * @locality one thread (the group loop); no locking inside. */
typedef struct ks_ack_window {
    ks_win_entry_t *ring;
    size_t cap, head, count; /* ring of `count` entries starting at `head` */
    size_t next_ready;       /* logical index of the first READY entry, or count */
    int64_t end_offset;      /* last pushed offset + 1; -1 before the first push */
    int64_t bytes;           /* bytes of entries not yet acked */
    ks_win_free_fn *free_msg;
    /* The highest offset given an attempt or an ack, + 1, or -1: no entry at or above it is
     * in the commit metadata (ks_ack_window_touched). */
    int64_t meta_end;
} ks_ack_window_t;

typedef enum {
    KS_ACK_OK = 0,         /* was leased, now acked */
    KS_ACK_DUPLICATE,      /* was already acked (maybe committed past) */
    KS_ACK_NOT_DELIVERED,  /* in the window, but never handed out */
    KS_ACK_UNKNOWN_OFFSET, /* no such record: a gap, or beyond what was fetched */
} ks_win_ack_t;

/* Notes that the entry at offset got an attempt or an ack: the commit metadata's walk of the
 * window (group_commit.c) stops at meta_end. Every place that sets an entry's attempts calls
 * it; an ack needs none of its own, as only an entry with an attempt can be acked
 * (ks_ack_window_ack_entry), but for ks_ack_window_push_done's. */
static inline void ks_ack_window_touched(ks_ack_window_t *w, int64_t offset)
{
    if (offset >= w->meta_end)
        w->meta_end = offset + 1;
}

/* Counts one more delivery of e (saturating) and notes it for meta_end: the one way a lease
 * or a hold adds an attempt. */
static inline void ks_ack_window_count_attempt(ks_ack_window_t *w, ks_win_entry_t *e)
{
    if (e->attempts < UINT16_MAX)
        e->attempts++;
    ks_ack_window_touched(w, e->offset);
}

/* free_msg (may be NULL) releases an entry's msg when it is acked or dropped. */
void ks_ack_window_init(ks_ack_window_t *w, ks_win_free_fn *free_msg);

/* Frees every entry's msg and the ring. w may be initialised again. */
void ks_ack_window_destroy(ks_ack_window_t *w);

/* The ring's capacity kept however few entries it holds. */
#define KS_WIN_RING_KEEP 1024

/* Gives back what the ring outgrew: once it holds under an eighth of its capacity (and the
 * capacity is above KS_WIN_RING_KEEP), it moves into one of twice its entries (a power of
 * two, at least KS_WIN_RING_KEEP). A ring only doubles as records come, so without this a
 * partition kept the capacity of its largest backlog (72 bytes an entry) for as long as it
 * was assigned: at 32 groups of 8 partitions about 200 MB with no record held. Entry
 * pointers taken before the call are stale after it; returns whether it moved. */
bool ks_ack_window_compact(ks_ack_window_t *w);

/* Appends a fetched record in READY state. Returns 0, or -1 (window unchanged)
 * when offset is not above the last pushed offset. */
int ks_ack_window_push(ks_ack_window_t *w, int64_t offset, uint32_t bytes, void *msg);

/* Appends a record that is already done (acked before a restart, as commit
 * metadata said). Same returns as ks_ack_window_push. */
int ks_ack_window_push_done(ks_ack_window_t *w, int64_t offset);

/* Returns the entry for offset, or NULL. Borrowed. */
ks_win_entry_t *ks_ack_window_get(ks_ack_window_t *w, int64_t offset);

/* Returns the next READY record, now LEASED with attempts+1, or NULL when none. Borrowed. */
ks_win_entry_t *ks_ack_window_lease_next(ks_ack_window_t *w);

/* Acks the record at offset. Its msg is freed at once; the entry leaves the window
 * when everything below it is acked too. */
ks_win_ack_t ks_ack_window_ack(ks_ack_window_t *w, int64_t offset);

/* Acks the entry e of w (from ks_ack_window_get): as ks_ack_window_ack without a
 * second lookup. */
ks_win_ack_t ks_ack_window_ack_entry(ks_ack_window_t *w, ks_win_entry_t *e);

/* The commit point, or -1 if nothing was ever pushed. */
int64_t ks_ack_window_commit_point(const ks_ack_window_t *w);

/* Records held (any state) and bytes held (not yet acked). */
static inline size_t ks_ack_window_count(const ks_ack_window_t *w)
{
    return w->count;
}
static inline int64_t ks_ack_window_bytes(const ks_ack_window_t *w)
{
    return w->bytes;
}

/* Number of records in LEASED state. O(count). */
size_t ks_ack_window_leased(const ks_ack_window_t *w);

/* Returns the entry at logical index i (0 = lowest offset). Borrowed. */
ks_win_entry_t *ks_ack_window_at(ks_ack_window_t *w, size_t i);

/* Returns the logical index of offset, or -1 if it is not held. O(log count). */
long ks_ack_window_find(const ks_ack_window_t *w, int64_t offset);

#endif
