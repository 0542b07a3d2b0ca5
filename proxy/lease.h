/* lease.h: leases and redelivery delays on window entries, with a deadline heap.
 * Time is always passed in (now_ms), so tests drive it with their own clock. */
#ifndef KS_LEASE_H
#define KS_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "ack_window.h"

/* One timer: the entry at `offset` in the window `win` is due at due_ms. Items are
 * never updated in place; a stale item (the entry moved on or its due time changed)
 * is skipped when it comes up, or swept out when the heap is full. */
typedef struct ks_lease_item {
    int64_t due_ms;
    int64_t offset;
    ks_ack_window_t *win;
    void *owner; /* the caller's per-partition handle, handed back on expiry */
} ks_lease_item_t;

typedef struct ks_leases {
    ks_lease_item_t *heap;
    size_t cnt, cap;
} ks_leases_t;

typedef enum {
    KS_LEASE_EXPIRED = 0, /* a LEASED entry's deadline passed */
    KS_LEASE_DELAY_DONE,  /* a DELAYED entry may be delivered again */
} ks_lease_event_t;

/* Called for each due entry; the entry is still in its old state (LEASED or DELAYED). */
typedef void(ks_lease_cb)(void *owner, ks_win_entry_t *e, ks_lease_event_t ev, void *opaque);

void ks_leases_init(ks_leases_t *l);
void ks_leases_destroy(ks_leases_t *l);

/* Hands e out: LEASED until now_ms + deadline_ms, attempts + 1. */
void ks_lease_grant(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                    uint32_t sub_id, int64_t now_ms, int64_t deadline_ms);

/* Hands e out to a transport that has not taken it yet: LEASED (credits held,
 * attempts + 1) with no deadline, so it cannot expire; ks_lease_start starts its lease
 * when the transport took it. Nothing is pushed on the heap. */
void ks_lease_hold(ks_ack_window_t *w, ks_win_entry_t *e, uint32_t sub_id, int64_t now_ms);

/* Starts the lease of a held entry: due at now_ms + deadline_ms. */
void ks_lease_start(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                    int64_t now_ms, int64_t deadline_ms);

/* Moves a LEASED entry's deadline to now_ms + deadline_ms. Returns 0, or -1 if e is
 * not LEASED. */
int ks_lease_extend(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                    int64_t now_ms, int64_t deadline_ms);

/* Puts a LEASED entry back: READY now (delay_ms <= 0; returns 1) or DELAYED until
 * now_ms + delay_ms (returns 0). Returns -1 if e is not LEASED. */
int ks_lease_release(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                     int64_t now_ms, int64_t delay_ms);

/* Makes any not-done entry DELAYED until now_ms + delay_ms (a retry timer). */
void ks_lease_delay(ks_leases_t *l, ks_ack_window_t *w, void *owner, ks_win_entry_t *e,
                    int64_t now_ms, int64_t delay_ms);

/* Runs cb for every entry due at or before now_ms, earliest first. cb may grant,
 * extend or release leases. Returns how many were due. */
size_t ks_leases_run(ks_leases_t *l, int64_t now_ms, ks_lease_cb *cb, void *opaque);

/* The earliest due time in the heap (maybe stale), or INT64_MAX when empty. */
int64_t ks_leases_next_due(const ks_leases_t *l);

/* Forgets every item of owner (its partition is gone). O(n). */
void ks_leases_forget(ks_leases_t *l, const void *owner);

#endif
