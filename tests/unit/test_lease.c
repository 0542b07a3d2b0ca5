/* test_lease.c: tests leases, delays and their deadline heap (proxy/lease.c), injected clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ack_window.h"
#include "lease.h"

/* ---- a recording callback ------------------------------------------------------------------ */

enum { ACT_READY = 0, ACT_REGRANT, ACT_NOTHING };

typedef struct {
    void *owner;
    int64_t offset;
    ks_lease_event_t ev;
    uint8_t state_in_cb; /* the entry's state when the callback ran */
    int64_t due_in_cb;   /* the entry's due_ms when the callback ran */
    int64_t now;         /* the clock the run was called with */
} event_t;

#define MAX_EVENTS 4096

typedef struct {
    ks_leases_t *l;
    ks_ack_window_t *w; /* the window to re-grant in (ACT_REGRANT) */
    int64_t now;        /* the clock of the current ks_leases_run */
    int action;
    int regrants_left; /* ACT_REGRANT: re-grant this many times, then set READY */
    int64_t regrant_deadline;
    uint32_t regrant_sub;
    size_t n;
    event_t ev[MAX_EVENTS];
} recorder_t;

static recorder_t *rec_new(ks_leases_t *l, ks_ack_window_t *w)
{
    recorder_t *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->l = l;
    r->w = w;
    r->action = ACT_READY;
    return r;
}

static void record_cb(void *owner, ks_win_entry_t *e, ks_lease_event_t ev, void *opaque)
{
    recorder_t *r = opaque;
    assert_non_null(e);
    assert_true(r->n < MAX_EVENTS);
    r->ev[r->n++] = (event_t){.owner = owner,
                              .offset = e->offset,
                              .ev = ev,
                              .state_in_cb = e->state,
                              .due_in_cb = e->due_ms,
                              .now = r->now};
    /* The entry is still in its old state and it really is due. */
    assert_int_equal(e->state, ev == KS_LEASE_EXPIRED ? KS_REC_LEASED : KS_REC_DELAYED);
    assert_true(e->due_ms <= r->now);
    if (r->action == ACT_REGRANT && r->regrants_left > 0) {
        r->regrants_left--;
        ks_lease_grant(r->l, r->w, owner, e, r->regrant_sub, r->now, r->regrant_deadline);
        return;
    }
    if (r->action != ACT_NOTHING)
        e->state = KS_REC_READY; /* what the real caller does: ready again */
}

static size_t run_at(ks_leases_t *l, recorder_t *r, int64_t now)
{
    r->now = now;
    return ks_leases_run(l, now, record_cb, r);
}

/* Pushes offsets first, first+1, ... (n of them), 10 bytes each. */
static void push_n(ks_ack_window_t *w, int64_t first, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ks_ack_window_push(w, first + (int64_t)i, 10, NULL), 0);
}

static ks_win_entry_t *get(ks_ack_window_t *w, int64_t off)
{
    ks_win_entry_t *e = ks_ack_window_get(w, off);
    assert_non_null(e);
    return e;
}

/* splitmix64: a deterministic PRNG independent of libc. */
static uint64_t rnd_state;
static uint64_t rnd(void)
{
    uint64_t z = (rnd_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int64_t rnd_range(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_empty(void **state)
{
    ks_leases_t l;
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, NULL);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);
    assert_int_equal(run_at(&l, r, 0), 0);
    assert_int_equal(run_at(&l, r, INT64_MAX), 0);
    assert_int_equal(r->n, 0);
    ks_leases_forget(&l, NULL);
    ks_leases_forget(&l, &l);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);
    ks_leases_destroy(&l);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);
    free(r);
}

static void test_grant_sets_fields(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    push_n(&w, 100, 3);
    int owner;

    ks_win_entry_t *e = get(&w, 101);
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(e->attempts, 0);
    ks_lease_grant(&l, &w, &owner, e, 7, 1000, 250);
    assert_int_equal(e->state, KS_REC_LEASED);
    assert_int_equal(e->attempts, 1);
    assert_int_equal(e->due_ms, 1250);
    assert_int_equal(e->sub_id, 7);
    assert_int_equal(e->leased_at_ms, 1000);
    assert_int_equal(ks_leases_next_due(&l), 1250);
    /* The neighbours are untouched. */
    assert_int_equal(get(&w, 100)->state, KS_REC_READY);
    assert_int_equal(get(&w, 102)->state, KS_REC_READY);
    assert_int_equal(get(&w, 100)->attempts, 0);

    /* A second grant (redelivery) counts another attempt and restarts the lease. */
    e->state = KS_REC_READY;
    ks_lease_grant(&l, &w, &owner, e, 9, 2000, 30);
    assert_int_equal(e->state, KS_REC_LEASED);
    assert_int_equal(e->attempts, 2);
    assert_int_equal(e->due_ms, 2030);
    assert_int_equal(e->sub_id, 9);
    assert_int_equal(e->leased_at_ms, 2000);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
}

/* A held entry (its transport has not taken it) is LEASED with its attempt counted but
 * no deadline: nothing expires, however late; ks_lease_start then times it from then. */
static void test_hold_never_expires_until_started(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    push_n(&w, 100, 2);
    int owner;
    recorder_t *r = rec_new(&l, &w);

    ks_win_entry_t *e = get(&w, 100);
    assert_int_equal(w.meta_end, -1);
    ks_lease_hold(&w, e, 4, 1000);
    assert_int_equal(e->state, KS_REC_LEASED);
    assert_int_equal(e->attempts, 1);
    assert_int_equal(w.meta_end, 101); /* the commit metadata's walk now reaches it */
    assert_int_equal(e->sub_id, 4);
    assert_int_equal(e->leased_at_ms, 1000);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);
    assert_int_equal(run_at(&l, r, INT64_MAX - 1), 0);
    assert_int_equal(r->n, 0);
    assert_int_equal(e->state, KS_REC_LEASED);

    ks_lease_start(&l, &w, &owner, get(&w, 100), 5000, 200);
    e = get(&w, 100);
    assert_int_equal(e->due_ms, 5200);
    assert_int_equal(e->leased_at_ms, 5000);
    assert_int_equal(e->attempts, 1); /* starting counts nothing more */
    assert_int_equal(run_at(&l, r, 5199), 0);
    assert_int_equal(run_at(&l, r, 5200), 1);
    assert_int_equal(r->ev[0].offset, 100);
    assert_int_equal(r->ev[0].ev, KS_LEASE_EXPIRED);

    free(r);
    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
}

static void test_attempts_saturate(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    push_n(&w, 0, 1);
    int owner;
    ks_win_entry_t *e = get(&w, 0);
    e->attempts = UINT16_MAX - 1;
    ks_lease_grant(&l, &w, &owner, e, 1, 0, 10);
    assert_int_equal(e->attempts, UINT16_MAX);
    e->state = KS_REC_READY;
    ks_lease_grant(&l, &w, &owner, e, 1, 0, 10);
    assert_int_equal(e->attempts, UINT16_MAX); /* no wrap to 0 */
    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
}

static void test_expires_exactly_at_due(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 5, 2);
    int owner;

    ks_win_entry_t *e = get(&w, 6);
    ks_lease_grant(&l, &w, &owner, e, 3, 10000, 500);
    assert_int_equal(run_at(&l, r, 10000), 0);
    assert_int_equal(run_at(&l, r, 10499), 0); /* due - 1 */
    assert_int_equal(r->n, 0);
    assert_int_equal(e->state, KS_REC_LEASED);

    assert_int_equal(run_at(&l, r, 10500), 1); /* exactly at due */
    assert_int_equal(r->n, 1);
    assert_ptr_equal(r->ev[0].owner, &owner);
    assert_int_equal(r->ev[0].offset, 6);
    assert_int_equal(r->ev[0].ev, KS_LEASE_EXPIRED);
    assert_int_equal(r->ev[0].state_in_cb, KS_REC_LEASED);
    assert_int_equal(r->ev[0].due_in_cb, 10500);
    assert_int_equal(e->state, KS_REC_READY); /* the callback's doing */
    assert_int_equal(get(&w, 5)->state, KS_REC_READY);

    /* Fires once only. */
    assert_int_equal(run_at(&l, r, 10500), 0);
    assert_int_equal(run_at(&l, r, 1000000), 0);
    assert_int_equal(r->n, 1);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_late_run_fires_overdue(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 4);
    int owner;

    ks_lease_grant(&l, &w, &owner, get(&w, 0), 1, 0, 300);
    ks_lease_grant(&l, &w, &owner, get(&w, 1), 1, 0, 100);
    ks_lease_grant(&l, &w, &owner, get(&w, 2), 1, 0, 200);
    ks_lease_grant(&l, &w, &owner, get(&w, 3), 1, 0, 1000);
    /* The loop was late: everything due by 250 goes at once, earliest first. */
    assert_int_equal(run_at(&l, r, 250), 2);
    assert_int_equal(r->n, 2);
    assert_int_equal(r->ev[0].offset, 1);
    assert_int_equal(r->ev[1].offset, 2);
    assert_int_equal(ks_leases_next_due(&l), 300);
    assert_int_equal(run_at(&l, r, 999), 1);
    assert_int_equal(r->ev[2].offset, 0);
    assert_int_equal(get(&w, 3)->state, KS_REC_LEASED);
    assert_int_equal(ks_leases_next_due(&l), 1000);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_extend_moves_deadline(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 2);
    int owner;

    /* Later deadline: the old one is stale. */
    ks_win_entry_t *e = get(&w, 0);
    ks_lease_grant(&l, &w, &owner, e, 4, 0, 100);
    assert_int_equal(ks_lease_extend(&l, &w, &owner, e, 60, 100), 0);
    assert_int_equal(e->due_ms, 160);
    assert_int_equal(e->state, KS_REC_LEASED);
    assert_int_equal(e->attempts, 1);     /* an extension is not a delivery */
    assert_int_equal(e->leased_at_ms, 0); /* nor a new lease */
    assert_int_equal(e->sub_id, 4);
    assert_int_equal(run_at(&l, r, 100), 0); /* the old deadline is skipped */
    assert_int_equal(e->state, KS_REC_LEASED);
    assert_int_equal(run_at(&l, r, 159), 0);
    assert_int_equal(run_at(&l, r, 160), 1);
    assert_int_equal(r->n, 1);
    assert_int_equal(r->ev[0].offset, 0);
    assert_int_equal(r->ev[0].due_in_cb, 160);

    /* Extended twice, then an earlier deadline: only the last one counts. */
    ks_win_entry_t *f = get(&w, 1);
    ks_lease_grant(&l, &w, &owner, f, 4, 1000, 100);                    /* 1100 */
    assert_int_equal(ks_lease_extend(&l, &w, &owner, f, 1050, 500), 0); /* 1550 */
    assert_int_equal(ks_lease_extend(&l, &w, &owner, f, 1060, 20), 0);  /* 1080 */
    assert_int_equal(f->due_ms, 1080);
    assert_int_equal(run_at(&l, r, 1079), 0);
    assert_int_equal(run_at(&l, r, 1080), 1);
    assert_int_equal(r->ev[1].offset, 1);
    assert_int_equal(r->ev[1].due_in_cb, 1080);
    /* Re-lease it so that the stale 1100 and 1550 items find a LEASED entry. */
    ks_lease_grant(&l, &w, &owner, f, 5, 1080, 1000); /* 2080 */
    assert_int_equal(run_at(&l, r, 1100), 0);
    assert_int_equal(run_at(&l, r, 1550), 0);
    assert_int_equal(run_at(&l, r, 2079), 0);
    assert_int_equal(f->state, KS_REC_LEASED);
    assert_int_equal(run_at(&l, r, 2080), 1);
    assert_int_equal(r->n, 3);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_same_due_twice_fires_once(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 3);
    int owner;

    /* Extended to the very same deadline: two heap items, one entry, one expiry. The
     * callback makes it READY without touching due_ms (as the real caller does). */
    ks_win_entry_t *e = get(&w, 0);
    ks_lease_grant(&l, &w, &owner, e, 1, 0, 100);
    assert_int_equal(ks_lease_extend(&l, &w, &owner, e, 50, 50), 0);
    assert_int_equal(e->due_ms, 100);
    assert_int_equal(run_at(&l, r, 100), 1);
    assert_int_equal(r->n, 1);
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(run_at(&l, r, 1000), 0);

    /* An entry moved on by hand (dead-lettering) keeps its due_ms but must not fire. */
    ks_win_entry_t *f = get(&w, 1);
    ks_lease_grant(&l, &w, &owner, f, 1, 1000, 100);
    f->state = KS_REC_DEAD_LETTERING;
    /* ... nor a READY one (a lease expiry handled elsewhere). */
    ks_win_entry_t *g = get(&w, 2);
    ks_lease_grant(&l, &w, &owner, g, 1, 1000, 100);
    g->state = KS_REC_READY;
    assert_int_equal(run_at(&l, r, 1100), 0);
    assert_int_equal(r->n, 1);
    assert_int_equal(f->state, KS_REC_DEAD_LETTERING);
    assert_int_equal(g->state, KS_REC_READY);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_extend_release_need_leased(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 3);
    int owner;

    /* READY (never delivered). */
    ks_win_entry_t *e = get(&w, 0);
    assert_int_equal(ks_lease_extend(&l, &w, &owner, e, 0, 100), -1);
    assert_int_equal(ks_lease_release(&l, &w, &owner, e, 0, 0), -1);
    assert_int_equal(ks_lease_release(&l, &w, &owner, e, 0, 100), -1);
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(e->due_ms, 0);
    assert_int_equal(e->attempts, 0);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX); /* nothing was queued */

    /* DELAYED. */
    ks_win_entry_t *d = get(&w, 1);
    ks_lease_delay(&l, &w, &owner, d, 0, 50);
    assert_int_equal(ks_lease_extend(&l, &w, &owner, d, 10, 1000), -1);
    assert_int_equal(ks_lease_release(&l, &w, &owner, d, 10, 0), -1);
    assert_int_equal(ks_lease_release(&l, &w, &owner, d, 10, 500), -1);
    assert_int_equal(d->state, KS_REC_DELAYED);
    assert_int_equal(d->due_ms, 50);
    assert_int_equal(ks_leases_next_due(&l), 50);

    /* ACKED (kept in the window because 0 below it is not acked). */
    ks_win_entry_t *a = get(&w, 2);
    ks_lease_grant(&l, &w, &owner, a, 1, 0, 100);
    assert_int_equal(ks_ack_window_ack(&w, 2), KS_ACK_OK);
    a = get(&w, 2);
    assert_int_equal(a->state, KS_REC_ACKED);
    assert_int_equal(ks_lease_extend(&l, &w, &owner, a, 10, 1000), -1);
    assert_int_equal(ks_lease_release(&l, &w, &owner, a, 10, 0), -1);
    assert_int_equal(a->state, KS_REC_ACKED);

    /* Only the delay fires; the acked lease does not. */
    assert_int_equal(run_at(&l, r, 10000), 1);
    assert_int_equal(r->n, 1);
    assert_int_equal(r->ev[0].offset, 1);
    assert_int_equal(r->ev[0].ev, KS_LEASE_DELAY_DONE);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_release_now(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 2);
    int owner;

    ks_win_entry_t *e = get(&w, 0);
    ks_lease_grant(&l, &w, &owner, e, 1, 0, 100);
    assert_int_equal(ks_lease_release(&l, &w, &owner, e, 10, 0), 1);
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(e->attempts, 1); /* the delivery still counted */

    /* A negative delay means "now" too. */
    ks_win_entry_t *f = get(&w, 1);
    ks_lease_grant(&l, &w, &owner, f, 1, 0, 200);
    assert_int_equal(ks_lease_release(&l, &w, &owner, f, 10, -5), 1);
    assert_int_equal(f->state, KS_REC_READY);

    /* No callback later: the lease items are stale. */
    assert_int_equal(run_at(&l, r, 100), 0);
    assert_int_equal(run_at(&l, r, 200), 0);
    assert_int_equal(run_at(&l, r, 1000000), 0);
    assert_int_equal(r->n, 0);
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(f->state, KS_REC_READY);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_release_with_delay(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 2);
    int owner;

    /* Delay ends before the old lease deadline would have. */
    ks_win_entry_t *e = get(&w, 0);
    ks_lease_grant(&l, &w, &owner, e, 1, 0, 100);
    assert_int_equal(ks_lease_release(&l, &w, &owner, e, 10, 50), 0);
    assert_int_equal(e->state, KS_REC_DELAYED);
    assert_int_equal(e->due_ms, 60);
    assert_int_equal(run_at(&l, r, 59), 0);
    assert_int_equal(run_at(&l, r, 60), 1);
    assert_int_equal(r->n, 1);
    assert_ptr_equal(r->ev[0].owner, &owner);
    assert_int_equal(r->ev[0].offset, 0);
    assert_int_equal(r->ev[0].ev, KS_LEASE_DELAY_DONE);
    assert_int_equal(r->ev[0].state_in_cb, KS_REC_DELAYED);
    assert_int_equal(r->ev[0].due_in_cb, 60);
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(run_at(&l, r, 100), 0); /* the old lease item is stale */
    assert_int_equal(r->n, 1);

    /* Delay ends after the old lease deadline: the old deadline finds a DELAYED entry
     * and must not fire for it. */
    ks_win_entry_t *f = get(&w, 1);
    ks_lease_grant(&l, &w, &owner, f, 1, 1000, 100); /* lease due 1100 */
    assert_int_equal(ks_lease_release(&l, &w, &owner, f, 1010, 500), 0);
    assert_int_equal(f->due_ms, 1510);
    assert_int_equal(run_at(&l, r, 1100), 0);
    assert_int_equal(f->state, KS_REC_DELAYED);
    assert_int_equal(run_at(&l, r, 1509), 0);
    assert_int_equal(run_at(&l, r, 1510), 1);
    assert_int_equal(r->n, 2);
    assert_int_equal(r->ev[1].offset, 1);
    assert_int_equal(r->ev[1].ev, KS_LEASE_DELAY_DONE);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_ack_before_deadline(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 3);
    int owner;

    ks_lease_grant(&l, &w, &owner, get(&w, 0), 1, 0, 100);
    ks_lease_grant(&l, &w, &owner, get(&w, 1), 1, 0, 100);
    ks_lease_grant(&l, &w, &owner, get(&w, 2), 1, 0, 100);
    /* 1 acked but kept (0 is below it); 2 acked too. Then 0: all three leave. */
    assert_int_equal(ks_ack_window_ack(&w, 1), KS_ACK_OK);
    assert_int_equal(run_at(&l, r, 100), 2); /* 0 and 2 */
    assert_int_equal(r->n, 2);
    /* Equal due times: either order, but exactly 0 and 2, never the acked 1. */
    assert_int_equal(r->ev[0].offset + r->ev[1].offset, 2);
    assert_int_not_equal(r->ev[0].offset, 1);
    assert_int_not_equal(r->ev[1].offset, 1);

    ks_lease_grant(&l, &w, &owner, get(&w, 0), 1, 200, 100);
    ks_lease_grant(&l, &w, &owner, get(&w, 2), 1, 200, 100);
    assert_int_equal(ks_ack_window_ack(&w, 2), KS_ACK_OK);
    assert_int_equal(ks_ack_window_ack(&w, 0), KS_ACK_OK);
    assert_int_equal(ks_ack_window_count(&w), 0); /* the entries left the window */
    assert_int_equal(run_at(&l, r, 300), 0);
    assert_int_equal(run_at(&l, r, 1000000), 0);
    assert_int_equal(r->n, 2);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

/* Leases acked long before their deadline must not pile up in the heap: 1,000,000
 * leases granted and acked 100 at a time keep it near the live count. */
static void test_acked_leases_do_not_accumulate(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    int owner;
    int64_t off = 0;
    for (int round = 0; round < 10000; round++) {
        push_n(&w, off, 100);
        for (int64_t o = off; o < off + 100; o++)
            ks_lease_grant(&l, &w, &owner, get(&w, o), 1, round, 3600000);
        if (round % 7 == 0) /* some extensions too: each leaves a stale item */
            assert_int_equal(ks_lease_extend(&l, &w, &owner, get(&w, off), round, 7200000), 0);
        for (int64_t o = off; o < off + 100; o++)
            assert_int_equal(ks_ack_window_ack(&w, o), KS_ACK_OK);
        off += 100;
        assert_true(l.cap <= 1024);
    }
    /* The last 100 are live; none of the acked ones ever fires. */
    push_n(&w, off, 100);
    for (int64_t o = off; o < off + 100; o++)
        ks_lease_grant(&l, &w, &owner, get(&w, o), 1, 0, 10);
    assert_int_equal(run_at(&l, r, INT64_MAX / 2), 100);
    assert_int_equal(r->n, 100);
    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_ack_in_window_no_callback(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 2);
    int owner;

    /* 1 is acked but stays in the window as ACKED (0 below it is still out). */
    ks_lease_grant(&l, &w, &owner, get(&w, 0), 1, 0, 500);
    ks_lease_grant(&l, &w, &owner, get(&w, 1), 1, 0, 100);
    assert_int_equal(ks_ack_window_ack(&w, 1), KS_ACK_OK);
    assert_non_null(ks_ack_window_get(&w, 1));
    assert_int_equal(run_at(&l, r, 100), 0);
    assert_int_equal(r->n, 0);
    assert_int_equal(get(&w, 1)->state, KS_REC_ACKED);
    assert_int_equal(run_at(&l, r, 500), 1);
    assert_int_equal(r->ev[0].offset, 0);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_delay_any_entry(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 3);
    int owner;

    /* A READY entry (e.g. a dead-letter retry timer). */
    ks_win_entry_t *e = get(&w, 0);
    ks_lease_delay(&l, &w, &owner, e, 100, 40);
    assert_int_equal(e->state, KS_REC_DELAYED);
    assert_int_equal(e->due_ms, 140);
    assert_int_equal(e->attempts, 0); /* a delay is not a delivery */

    /* A LEASED entry: its lease deadline no longer fires as an expiry. */
    ks_win_entry_t *f = get(&w, 1);
    ks_lease_grant(&l, &w, &owner, f, 1, 100, 20); /* lease due 120 */
    ks_lease_delay(&l, &w, &owner, f, 110, 90);    /* delayed to 200 */
    assert_int_equal(f->state, KS_REC_DELAYED);
    assert_int_equal(f->due_ms, 200);

    /* A DEAD_LETTERING entry (produce failed: retry later). */
    ks_win_entry_t *g = get(&w, 2);
    g->state = KS_REC_DEAD_LETTERING;
    ks_lease_delay(&l, &w, &owner, g, 100, 150);
    assert_int_equal(g->state, KS_REC_DELAYED);
    assert_int_equal(g->due_ms, 250);

    assert_int_equal(ks_leases_next_due(&l), 120); /* the (stale) lease item */
    assert_int_equal(run_at(&l, r, 120), 0);
    assert_int_equal(run_at(&l, r, 139), 0);
    assert_int_equal(run_at(&l, r, 140), 1);
    assert_int_equal(r->ev[0].offset, 0);
    assert_int_equal(r->ev[0].ev, KS_LEASE_DELAY_DONE);
    assert_int_equal(run_at(&l, r, 199), 0);
    assert_int_equal(run_at(&l, r, 1000), 2);
    assert_int_equal(r->n, 3);
    assert_int_equal(r->ev[1].offset, 1);
    assert_int_equal(r->ev[1].ev, KS_LEASE_DELAY_DONE);
    assert_int_equal(r->ev[1].due_in_cb, 200);
    assert_int_equal(r->ev[2].offset, 2);
    assert_int_equal(r->ev[2].ev, KS_LEASE_DELAY_DONE);
    assert_int_equal(r->ev[2].due_in_cb, 250);
    for (int64_t o = 0; o < 3; o++)
        assert_int_equal(get(&w, o)->state, KS_REC_READY);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_callback_regrants(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 2);
    int owner;

    /* Each expiry hands the record out again (redelivery), twice; the third expiry
     * makes it READY. */
    r->action = ACT_REGRANT;
    r->regrants_left = 2;
    r->regrant_deadline = 100;
    r->regrant_sub = 42;
    ks_win_entry_t *e = get(&w, 1);
    ks_lease_grant(&l, &w, &owner, e, 1, 0, 50);

    assert_int_equal(run_at(&l, r, 50), 1);
    assert_int_equal(e->state, KS_REC_LEASED);
    assert_int_equal(e->attempts, 2);
    assert_int_equal(e->due_ms, 150);
    assert_int_equal(e->sub_id, 42);
    assert_int_equal(e->leased_at_ms, 50);
    assert_int_equal(ks_leases_next_due(&l), 150);

    assert_int_equal(run_at(&l, r, 149), 0);
    assert_int_equal(run_at(&l, r, 170), 1); /* a late run: re-granted from 170 */
    assert_int_equal(e->attempts, 3);
    assert_int_equal(e->due_ms, 270);
    assert_int_equal(e->leased_at_ms, 170);

    assert_int_equal(run_at(&l, r, 269), 0);
    assert_int_equal(run_at(&l, r, 270), 1);
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(e->attempts, 3);
    assert_int_equal(run_at(&l, r, 100000), 0);

    assert_int_equal(r->n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(r->ev[i].offset, 1);
        assert_int_equal(r->ev[i].ev, KS_LEASE_EXPIRED);
        assert_ptr_equal(r->ev[i].owner, &owner);
    }
    assert_int_equal(r->ev[0].due_in_cb, 50);
    assert_int_equal(r->ev[1].due_in_cb, 150);
    assert_int_equal(r->ev[2].due_in_cb, 270);
    assert_int_equal(get(&w, 0)->state, KS_REC_READY);
    assert_int_equal(get(&w, 0)->attempts, 0);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

static void test_callback_regrants_in_same_run(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 1);
    int owner;

    /* The loop ran very late: a re-grant whose new deadline is still not after `now` is
     * picked up by the same run (the callback may grant while the run goes on). */
    r->action = ACT_REGRANT;
    r->regrants_left = 1;
    r->regrant_deadline = 0;
    ks_win_entry_t *e = get(&w, 0);
    ks_lease_grant(&l, &w, &owner, e, 1, 0, 10);
    assert_int_equal(run_at(&l, r, 500), 2);
    assert_int_equal(r->n, 2);
    assert_int_equal(r->ev[0].due_in_cb, 10);
    assert_int_equal(r->ev[1].due_in_cb, 500);
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(e->attempts, 2);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

/* Many leases with random deadlines, some extended, some released, some acked: every
 * remaining one fires exactly once, at its final due time, in nondecreasing due order. */
static void run_random(uint64_t seed, size_t n)
{
    rnd_state = seed;
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    int owner;
    push_n(&w, 0, n);

    /* expect[i]: the due time offset i must fire at, or -1 for never. */
    int64_t *expect = calloc(n, sizeof(*expect));
    int *fired = calloc(n, sizeof(*fired));
    assert_non_null(expect);
    assert_non_null(fired);
    for (size_t i = 0; i < n; i++) {
        ks_win_entry_t *e = get(&w, (int64_t)i);
        int64_t now = rnd_range(0, 100);
        ks_lease_grant(&l, &w, &owner, e, 1, now, rnd_range(1, 10000));
        expect[i] = e->due_ms;
        switch (rnd() % 8) {
        case 0: /* extended, later or earlier */
            assert_int_equal(ks_lease_extend(&l, &w, &owner, e, now + 1, rnd_range(1, 10000)), 0);
            expect[i] = e->due_ms;
            break;
        case 1: /* nacked with a delay */
            assert_int_equal(ks_lease_release(&l, &w, &owner, e, now + 1, rnd_range(1, 10000)), 0);
            expect[i] = e->due_ms;
            break;
        case 2: /* nacked, ready now */
            assert_int_equal(ks_lease_release(&l, &w, &owner, e, now + 1, 0), 1);
            expect[i] = -1;
            break;
        case 3: /* acked */
            assert_int_equal(ks_ack_window_ack(&w, (int64_t)i), KS_ACK_OK);
            expect[i] = -1;
            break;
        default:
            break;
        }
    }

    int64_t now = 0, last_due = INT64_MIN;
    size_t total = 0;
    while (now < 30000) {
        size_t before = r->n;
        now += rnd_range(0, 250);
        size_t got = run_at(&l, r, now);
        assert_int_equal(got, r->n - before);
        total += got;
        for (size_t k = before; k < r->n; k++) {
            const event_t *ev = &r->ev[k];
            assert_true(ev->offset >= 0 && ev->offset < (int64_t)n);
            size_t i = (size_t)ev->offset;
            assert_int_equal(fired[i], 0); /* exactly once */
            fired[i] = 1;
            assert_true(expect[i] >= 0); /* never for acked or released-now ones */
            assert_int_equal(ev->due_in_cb, expect[i]);
            assert_true(ev->due_in_cb <= now);
            assert_true(ev->due_in_cb >= last_due); /* nondecreasing */
            last_due = ev->due_in_cb;
            assert_ptr_equal(ev->owner, &owner);
        }
        /* Nothing due by now is left unfired. */
        for (size_t i = 0; i < n; i++)
            if (expect[i] >= 0 && expect[i] <= now)
                assert_int_equal(fired[i], 1);
    }
    size_t want = 0;
    for (size_t i = 0; i < n; i++)
        if (expect[i] >= 0) {
            want++;
            assert_int_equal(fired[i], 1);
        }
    assert_int_equal(total, want);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    free(expect);
    free(fired);
    free(r);
    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
}

static void test_random_deadlines(void **state)
{
    run_random(1, 1000);
    run_random(0xC0FFEE, 1000);
    run_random(20240601, 3000);
}

static void test_forget_owner(void **state)
{
    ks_ack_window_t wa, wb;
    ks_leases_t l;
    ks_ack_window_init(&wa, NULL);
    ks_ack_window_init(&wb, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, NULL);
    int owner_a, owner_b;
    const size_t n = 600;
    rnd_state = 77;
    /* The same offsets in both windows, random interleaved deadlines. */
    push_n(&wa, 0, n);
    push_n(&wb, 0, n);
    for (size_t i = 0; i < n; i++) {
        ks_lease_grant(&l, &wa, &owner_a, get(&wa, (int64_t)i), 1, 0, rnd_range(1, 5000));
        ks_lease_grant(&l, &wb, &owner_b, get(&wb, (int64_t)i), 2, 0, rnd_range(1, 5000));
    }
    /* A's DELAYED entries go too. */
    ks_lease_delay(&l, &wa, &owner_a, get(&wa, 0), 0, 1);

    int64_t min_b = INT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (get(&wb, (int64_t)i)->due_ms < min_b)
            min_b = get(&wb, (int64_t)i)->due_ms;

    ks_leases_forget(&l, &owner_a);
    assert_int_equal(l.cnt, n); /* only B's items are left */
    assert_int_equal(ks_leases_next_due(&l), min_b);

    int *fired = calloc(n, sizeof(*fired));
    assert_non_null(fired);
    int64_t last = INT64_MIN;
    for (int64_t now = 0; now <= 5000; now += 37) {
        size_t before = r->n;
        run_at(&l, r, now);
        for (size_t k = before; k < r->n; k++) {
            assert_ptr_equal(r->ev[k].owner, &owner_b);
            size_t i = (size_t)r->ev[k].offset;
            assert_true(i < n);
            assert_int_equal(fired[i], 0);
            fired[i] = 1;
            assert_true(r->ev[k].due_in_cb >= last); /* still a valid heap */
            last = r->ev[k].due_in_cb;
            assert_int_equal(get(&wb, (int64_t)i)->state, KS_REC_READY);
        }
    }
    assert_int_equal(run_at(&l, r, 100000), 0);
    assert_int_equal(r->n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(fired[i], 1);
        /* A's entries never fired: still LEASED (or DELAYED). */
        assert_int_not_equal(get(&wa, (int64_t)i)->state, KS_REC_READY);
    }
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    /* Forgetting an owner with nothing queued, or twice, is harmless. */
    ks_leases_forget(&l, &owner_a);
    ks_leases_forget(&l, &owner_b);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    free(fired);
    free(r);
    ks_leases_destroy(&l);
    ks_ack_window_destroy(&wa);
    ks_ack_window_destroy(&wb);
}

static void test_forget_keeps_heap_order_small(void **state)
{
    /* Small, hand-made heaps: forget must re-establish the heap so that next_due is the
     * true minimum of what is left. */
    ks_ack_window_t wa, wb;
    ks_leases_t l;
    int owner_a, owner_b;
    static const int64_t da[] = {1, 2, 3, 4, 5, 6, 7};
    static const int64_t db[] = {90, 80, 70, 60, 50, 40, 30, 20, 10};
    for (int forget_a = 0; forget_a < 2; forget_a++) {
        ks_ack_window_init(&wa, NULL);
        ks_ack_window_init(&wb, NULL);
        ks_leases_init(&l);
        push_n(&wa, 0, 7);
        push_n(&wb, 0, 9);
        for (size_t i = 0; i < 9; i++) {
            if (i < 7)
                ks_lease_grant(&l, &wa, &owner_a, get(&wa, (int64_t)i), 1, 0, da[i]);
            ks_lease_grant(&l, &wb, &owner_b, get(&wb, (int64_t)i), 1, 0, db[i]);
        }
        assert_int_equal(ks_leases_next_due(&l), 1);
        ks_leases_forget(&l, forget_a ? (void *)&owner_a : (void *)&owner_b);
        assert_int_equal(ks_leases_next_due(&l), forget_a ? 10 : 1);
        recorder_t *r = rec_new(&l, NULL);
        assert_int_equal(run_at(&l, r, 1000), forget_a ? 9 : 7);
        for (size_t k = 1; k < r->n; k++)
            assert_true(r->ev[k - 1].due_in_cb <= r->ev[k].due_in_cb);
        free(r);
        ks_leases_destroy(&l);
        ks_ack_window_destroy(&wa);
        ks_ack_window_destroy(&wb);
    }
}

static void test_next_due(void **state)
{
    ks_ack_window_t w;
    ks_leases_t l;
    ks_ack_window_init(&w, NULL);
    ks_leases_init(&l);
    recorder_t *r = rec_new(&l, &w);
    push_n(&w, 0, 4);
    int owner;

    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);
    ks_lease_grant(&l, &w, &owner, get(&w, 0), 1, 0, 500);
    assert_int_equal(ks_leases_next_due(&l), 500);
    ks_lease_grant(&l, &w, &owner, get(&w, 1), 1, 0, 300);
    assert_int_equal(ks_leases_next_due(&l), 300);
    ks_lease_grant(&l, &w, &owner, get(&w, 2), 1, 0, 400);
    assert_int_equal(ks_leases_next_due(&l), 300);
    ks_lease_delay(&l, &w, &owner, get(&w, 3), 0, 350);
    assert_int_equal(ks_leases_next_due(&l), 300);

    assert_int_equal(run_at(&l, r, 300), 1);
    assert_int_equal(ks_leases_next_due(&l), 350);
    assert_int_equal(run_at(&l, r, 350), 1);
    assert_int_equal(ks_leases_next_due(&l), 400);
    assert_int_equal(run_at(&l, r, 450), 1);
    assert_int_equal(ks_leases_next_due(&l), 500);
    assert_int_equal(run_at(&l, r, 500), 1);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);

    /* Forgetting the only owner empties it. */
    ks_lease_grant(&l, &w, &owner, get(&w, 0), 1, 600, 10);
    assert_int_equal(ks_leases_next_due(&l), 610);
    ks_leases_forget(&l, &owner);
    assert_int_equal(ks_leases_next_due(&l), INT64_MAX);
    assert_int_equal(run_at(&l, r, 100000), 0);
    assert_int_equal(r->n, 4);

    ks_leases_destroy(&l);
    ks_ack_window_destroy(&w);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_grant_sets_fields),
        cmocka_unit_test(test_hold_never_expires_until_started),
        cmocka_unit_test(test_attempts_saturate),
        cmocka_unit_test(test_expires_exactly_at_due),
        cmocka_unit_test(test_late_run_fires_overdue),
        cmocka_unit_test(test_extend_moves_deadline),
        cmocka_unit_test(test_same_due_twice_fires_once),
        cmocka_unit_test(test_extend_release_need_leased),
        cmocka_unit_test(test_release_now),
        cmocka_unit_test(test_release_with_delay),
        cmocka_unit_test(test_ack_before_deadline),
        cmocka_unit_test(test_acked_leases_do_not_accumulate),
        cmocka_unit_test(test_ack_in_window_no_callback),
        cmocka_unit_test(test_delay_any_entry),
        cmocka_unit_test(test_callback_regrants),
        cmocka_unit_test(test_callback_regrants_in_same_run),
        cmocka_unit_test(test_random_deadlines),
        cmocka_unit_test(test_forget_owner),
        cmocka_unit_test(test_forget_keeps_heap_order_small),
        cmocka_unit_test(test_next_due),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
