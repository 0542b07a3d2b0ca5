/* lease.c: leases and redelivery delays on window entries, with a deadline heap. */
#include "lease.h"

#include <stdbool.h>
#include <stdlib.h>

void ks_leases_init(ks_leases_t *l)
{
    l->heap = NULL;
    l->cnt = l->cap = 0;
}

void ks_leases_destroy(ks_leases_t *l)
{
    free(l->heap);
    ks_leases_init(l);
}

static void swap(ks_lease_item_t *a, ks_lease_item_t *b)
{
    ks_lease_item_t t = *a;
    *a = *b;
    *b = t;
}

static void sift_up(ks_leases_t *l, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (l->heap[p].due_ms <= l->heap[i].due_ms)
            break;
        swap(&l->heap[p], &l->heap[i]);
        i = p;
    }
}

static void sift_down(ks_leases_t *l, size_t i)
{
    for (;;) {
        size_t a = 2 * i + 1, b = a + 1, m = i;
        if (a < l->cnt && l->heap[a].due_ms < l->heap[m].due_ms)
            m = a;
        if (b < l->cnt && l->heap[b].due_ms < l->heap[m].due_ms)
            m = b;
        if (m == i)
            return;
        swap(&l->heap[m], &l->heap[i]);
        i = m;
    }
}

/* The entry the item still times, or NULL if it is stale (the entry was acked, is gone,
 * or was re-timed or released since). */
static ks_win_entry_t *item_entry(const ks_lease_item_t *it)
{
    ks_win_entry_t *e = ks_ack_window_get(it->win, it->offset);
    return e && e->due_ms == it->due_ms && (e->state == KS_REC_LEASED || e->state == KS_REC_DELAYED)
               ? e
               : NULL;
}

/* Keeps the items for which keep(item, arg) holds, and rebuilds the heap. */
static void keep_if(ks_leases_t *l, bool (*keep)(const ks_lease_item_t *, const void *),
                    const void *arg)
{
    size_t j = 0;
    for (size_t i = 0; i < l->cnt; i++)
        if (keep(&l->heap[i], arg))
            l->heap[j++] = l->heap[i];
    l->cnt = j;
    for (size_t i = l->cnt / 2 + 1; i-- > 0;)
        sift_down(l, i);
}

static bool is_live(const ks_lease_item_t *it, const void *arg)
{
    (void)arg;
    return item_entry(it) != NULL;
}

static bool other_owner(const ks_lease_item_t *it, const void *owner)
{
    return it->owner != owner;
}

static void push(ks_leases_t *l, ks_ack_window_t *w, void *owner, int64_t offset, int64_t due)
{
    /* Acked and extended leases leave stale items behind until their due time. With
     * long deadlines and fast acks that is millions of items (it was 160 MB draining a
     * 5M-record backlog), so a full heap is first swept of them, and grows unless the
     * sweep freed three quarters of it: the heap stays within about four times the live
     * leases, and a sweep's cost spreads over at least as many pushes as it scanned. */
    if (l->cnt == l->cap && l->cap > 0) {
        keep_if(l, is_live, NULL);
        if (l->cnt * 4 <= l->cap)
            goto room;
    }
    if (l->cnt == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->heap = realloc(l->heap, l->cap * sizeof(*l->heap));
        if (!l->heap)
            abort();
    }
room:
    l->heap[l->cnt] = (ks_lease_item_t){.due_ms = due, .offset = offset, .win = w, .owner = owner};
    sift_up(l, l->cnt++);
}

void ks_lease_grant(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                    uint32_t sub_id, int64_t now_ms, int64_t deadline_ms)
{
    (void)ks_rec_move(e, KS_REC_LEASED);
    e->sub_id = sub_id;
    e->leased_at_ms = now_ms;
    e->due_ms = now_ms + deadline_ms;
    ks_ack_window_count_attempt(w, e);
    push(l, w, owner, e->offset, e->due_ms);
}

void ks_lease_hold(ks_ack_window_t *w, ks_win_entry_t *e, uint32_t sub_id, int64_t now_ms)
{
    (void)ks_rec_move(e, KS_REC_LEASED);
    e->sub_id = sub_id;
    e->leased_at_ms = now_ms;
    e->due_ms = INT64_MAX;
    ks_ack_window_count_attempt(w, e);
}

void ks_lease_start(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                    int64_t now_ms, int64_t deadline_ms)
{
    e->leased_at_ms = now_ms;
    e->due_ms = now_ms + deadline_ms;
    push(l, w, owner, e->offset, e->due_ms);
}

int ks_lease_extend(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                    int64_t now_ms, int64_t deadline_ms)
{
    if (e->state != KS_REC_LEASED)
        return -1;
    e->due_ms = now_ms + deadline_ms;
    push(l, w, owner, e->offset, e->due_ms);
    return 0;
}

int ks_lease_release(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                     int64_t now_ms, int64_t delay_ms)
{
    if (e->state != KS_REC_LEASED)
        return -1;
    if (delay_ms <= 0) {
        (void)ks_rec_move(e, KS_REC_READY);
        e->due_ms = 0;
        return 1;
    }
    (void)ks_rec_move(e, KS_REC_DELAYED);
    e->due_ms = now_ms + delay_ms;
    push(l, w, owner, e->offset, e->due_ms);
    return 0;
}

void ks_lease_delay(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                    int64_t now_ms, int64_t delay_ms)
{
    (void)ks_rec_move(e, KS_REC_DELAYED);
    e->due_ms = now_ms + delay_ms;
    push(l, w, owner, e->offset, e->due_ms);
}

size_t ks_leases_run(ks_leases_t *l, int64_t now_ms, ks_lease_cb *cb, void *opaque)
{
    size_t n = 0;
    while (l->cnt > 0 && l->heap[0].due_ms <= now_ms) {
        ks_lease_item_t it = l->heap[0];
        l->heap[0] = l->heap[--l->cnt];
        sift_down(l, 0);
        ks_win_entry_t *e = item_entry(&it);
        if (!e)
            continue;
        n++;
        cb(it.owner, e, e->state == KS_REC_LEASED ? KS_LEASE_EXPIRED : KS_LEASE_DELAY_DONE, opaque);
    }
    return n;
}

int64_t ks_leases_next_due(const ks_leases_t *l)
{
    return l->cnt ? l->heap[0].due_ms : INT64_MAX;
}

void ks_leases_forget(ks_leases_t *l, const void *owner)
{
    keep_if(l, other_owner, owner);
}
