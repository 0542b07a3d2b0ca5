/* ack_window.c: one partition's window of uncommitted records and its contiguous commit point. */
#include "ack_window.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

const char *ks_rec_state_str(ks_rec_state_t s)
{
    static const char *names[] = {"READY", "LEASED", "ACKED", "DELAYED", "DEAD_LETTERING"};
    return s <= KS_REC_DEAD_LETTERING ? names[s] : "?";
}

void ks_ack_window_init(ks_ack_window_t *w, ks_win_free_fn *free_msg)
{
    memset(w, 0, sizeof(*w));
    w->end_offset = -1;
    w->meta_end = -1;
    w->free_msg = free_msg;
}

static inline ks_win_entry_t *at(const ks_ack_window_t *w, size_t i)
{
    return &w->ring[(w->head + i) & (w->cap - 1)];
}

ks_win_entry_t *ks_ack_window_at(ks_ack_window_t *w, size_t i)
{
    assert(i < w->count);
    return at(w, i);
}

static void release(ks_ack_window_t *w, ks_win_entry_t *e)
{
    if (e->msg && w->free_msg)
        w->free_msg(e->msg);
    e->msg = NULL;
    free(e->reason);
    e->reason = NULL;
}

void ks_ack_window_destroy(ks_ack_window_t *w)
{
    for (size_t i = 0; i < w->count; i++)
        release(w, at(w, i));
    free(w->ring);
    ks_win_free_fn *fn = w->free_msg;
    ks_ack_window_init(w, fn);
}

/* Moves the entries into a ring of ncap (a power of two so indexing is a mask), head first;
 * false when there is no memory for it (the ring stays as it was). */
static bool move_to(ks_ack_window_t *w, size_t ncap)
{
    ks_win_entry_t *n = malloc(ncap * sizeof(*n));
    if (!n)
        return false;
    for (size_t i = 0; i < w->count; i++)
        n[i] = *at(w, i);
    free(w->ring);
    w->ring = n;
    w->cap = ncap;
    w->head = 0;
    return true;
}

/* Doubles the ring. */
static void grow(ks_ack_window_t *w)
{
    if (!move_to(w, w->cap ? w->cap * 2 : 64))
        abort();
}

bool ks_ack_window_compact(ks_ack_window_t *w)
{
    if (w->cap <= KS_WIN_RING_KEEP || w->count >= w->cap / 8)
        return false;
    size_t ncap = KS_WIN_RING_KEEP;
    while (ncap < 2 * w->count)
        ncap *= 2;
    return move_to(w, ncap);
}

int ks_ack_window_push(ks_ack_window_t *w, int64_t offset, uint32_t bytes, void *msg)
{
    if (offset < 0 || (w->end_offset >= 0 && offset < w->end_offset))
        return -1;
    if (w->count == w->cap)
        grow(w);
    ks_win_entry_t *e = at(w, w->count);
    memset(e, 0, sizeof(*e));
    e->offset = offset;
    e->next_same_key = -1;
    e->bytes = bytes;
    e->state = KS_REC_READY;
    e->msg = msg;
    w->count++;
    w->end_offset = offset + 1;
    w->bytes += bytes;
    return 0;
}

/* Drops acked entries from the bottom so the commit point can move. */
static void pop_acked(ks_ack_window_t *w);

int ks_ack_window_push_done(ks_ack_window_t *w, int64_t offset)
{
    if (ks_ack_window_push(w, offset, 0, NULL) < 0)
        return -1;
    ks_win_entry_t *e = at(w, w->count - 1);
    e->state = KS_REC_ACKED;
    e->attempts = 1;
    ks_ack_window_touched(w, offset);
    pop_acked(w);
    return 0;
}

ks_win_entry_t *ks_ack_window_get(ks_ack_window_t *w, int64_t offset)
{
    long i = ks_ack_window_find(w, offset);
    return i < 0 ? NULL : at(w, (size_t)i);
}

ks_win_entry_t *ks_ack_window_lease_next(ks_ack_window_t *w)
{
    while (w->next_ready < w->count && at(w, w->next_ready)->state != KS_REC_READY)
        w->next_ready++;
    if (w->next_ready >= w->count)
        return NULL;
    ks_win_entry_t *e = at(w, w->next_ready++);
    (void)ks_rec_move(e, KS_REC_LEASED);
    ks_ack_window_count_attempt(w, e);
    return e;
}

long ks_ack_window_find(const ks_ack_window_t *w, int64_t offset)
{
    if (w->count == 0)
        return -1;
    /* Without gaps the offset is its own index: the common case, in O(1). */
    int64_t guess = offset - at(w, 0)->offset;
    if (guess >= 0 && guess < (int64_t)w->count && at(w, (size_t)guess)->offset == offset)
        return (long)guess;
    if (guess < 0 || offset >= w->end_offset)
        return -1; /* below the window (acked and gone) or not fetched yet */
    size_t lo = 0, hi = w->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int64_t o = at(w, mid)->offset;
        if (o == offset)
            return (long)mid;
        if (o < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static void pop_acked(ks_ack_window_t *w)
{
    while (w->count > 0 && at(w, 0)->state == KS_REC_ACKED) {
        w->head = (w->head + 1) & (w->cap - 1);
        w->count--;
        if (w->next_ready > 0)
            w->next_ready--;
    }
}

ks_win_ack_t ks_ack_window_ack(ks_ack_window_t *w, int64_t offset)
{
    long i = ks_ack_window_find(w, offset);
    if (i < 0) {
        /* Below everything held: acked and committed past already. */
        if (w->end_offset >= 0 && offset < w->end_offset &&
            (w->count == 0 || offset < at(w, 0)->offset))
            return KS_ACK_DUPLICATE;
        return KS_ACK_UNKNOWN_OFFSET;
    }
    return ks_ack_window_ack_entry(w, at(w, (size_t)i));
}

ks_win_ack_t ks_ack_window_ack_entry(ks_ack_window_t *w, ks_win_entry_t *e)
{
    if (e->state == KS_REC_ACKED)
        return KS_ACK_DUPLICATE;
    if (e->attempts == 0)
        return KS_ACK_NOT_DELIVERED;
    (void)ks_rec_move(e, KS_REC_ACKED);
    w->bytes -= e->bytes;
    release(w, e);
    pop_acked(w);
    return KS_ACK_OK;
}

int64_t ks_ack_window_commit_point(const ks_ack_window_t *w)
{
    if (w->count > 0)
        return at(w, 0)->offset;
    return w->end_offset;
}

size_t ks_ack_window_leased(const ks_ack_window_t *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->count; i++)
        n += at(w, i)->state == KS_REC_LEASED;
    return n;
}
