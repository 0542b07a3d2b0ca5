/* test_key_sched.c: tests the key-order scheduler (proxy/key_sched.c), incl. model checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ack_window.h"
#include "key_sched.h"

/* ---- the caller's protocol -------------------------------------------------------------- */

/* Pushes a fetched record and hands it to the scheduler. */
static void add(ks_key_sched_t *s, ks_ack_window_t *w, int64_t off, bool has_key, uint64_t hash)
{
    assert_int_equal(ks_ack_window_push(w, off, 1, NULL), 0);
    ks_win_entry_t *e = ks_ack_window_get(w, off);
    assert_non_null(e);
    ks_key_sched_add(s, w, e, has_key, hash);
}

/* Takes the next record and leases it. Returns its offset, or -1 when none. */
static int64_t deliver(ks_key_sched_t *s, ks_ack_window_t *w, bool allow_new)
{
    ks_win_entry_t *e = ks_key_sched_take(s, w, allow_new ? KS_HOLD_NONE : 0);
    if (!e)
        return -1;
    assert_int_equal(e->state, KS_REC_READY);
    if (!allow_new)
        assert_true(e->attempts > 0);
    e->state = KS_REC_LEASED;
    e->attempts++;
    return e->offset;
}

/* Acks a leased record: the scheduler first, then the window (which may drop it). */
static void ack(ks_key_sched_t *s, ks_ack_window_t *w, int64_t off)
{
    ks_win_entry_t *e = ks_ack_window_get(w, off);
    assert_non_null(e);
    assert_int_equal(e->state, KS_REC_LEASED);
    ks_key_sched_done(s, w, e);
    assert_int_equal(ks_ack_window_ack(w, off), KS_ACK_OK);
}

/* Nacks a leased record: ready again at once. */
static void nack(ks_key_sched_t *s, ks_ack_window_t *w, int64_t off)
{
    ks_win_entry_t *e = ks_ack_window_get(w, off);
    assert_non_null(e);
    assert_int_equal(e->state, KS_REC_LEASED);
    e->state = KS_REC_READY;
    ks_key_sched_requeue(s, w, e);
}

/* Delivers everything that is eligible now; returns how many, offsets into out. */
static size_t deliver_all(ks_key_sched_t *s, ks_ack_window_t *w, int64_t *out, size_t max)
{
    size_t n = 0;
    int64_t off;
    while ((off = deliver(s, w, true)) >= 0) {
        assert_true(n < max);
        out[n++] = off;
    }
    return n;
}

static void assert_offsets(const int64_t *got, size_t n, const int64_t *want, size_t wn)
{
    assert_int_equal(n, wn);
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("position %zu: got offset %lld, want %lld", i, (long long)got[i],
                     (long long)want[i]);
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
static size_t rnd_below(size_t n)
{
    return (size_t)(rnd() % n);
}

static void shuffle(size_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rnd_below(i);
        size_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* Hashes whose home slot in the chain table is known: the table (as implemented) homes
 * h at (h * 0x9E3779B97F4A7C15) mod cap, so h = slot * inverse lands on `slot` for any
 * cap above it. Used to build colliding clusters that wrap round the table's end. If
 * the hashing changes these are just ordinary distinct hashes. */
static uint64_t golden_inverse(void)
{
    const uint64_t c = 0x9E3779B97F4A7C15ull;
    uint64_t x = c; /* correct to 3 bits for an odd c; Newton doubles that each step */
    for (int i = 0; i < 6; i++)
        x *= 2 - c * x;
    assert_true(x * c == 1);
    return x;
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_ordering_names(void **state)
{
    assert_string_equal(ks_ordering_str(KS_ORDER_KEY), "key");
    assert_string_equal(ks_ordering_str(KS_ORDER_PARTITION), "partition");
    assert_string_equal(ks_ordering_str(KS_ORDER_NONE), "none");
    ks_ordering_t o = KS_ORDER_NONE;
    assert_int_equal(ks_ordering_parse("key", &o), 0);
    assert_int_equal(o, KS_ORDER_KEY);
    assert_int_equal(ks_ordering_parse("partition", &o), 0);
    assert_int_equal(o, KS_ORDER_PARTITION);
    assert_int_equal(ks_ordering_parse("none", &o), 0);
    assert_int_equal(o, KS_ORDER_NONE);
    o = KS_ORDER_PARTITION;
    assert_int_equal(ks_ordering_parse("KEY", &o), -1);
    assert_int_equal(ks_ordering_parse("", &o), -1);
    assert_int_equal(ks_ordering_parse("keys", &o), -1);
    assert_int_equal(o, KS_ORDER_PARTITION); /* untouched on error */
}

static void test_empty(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    for (int m = KS_ORDER_KEY; m <= KS_ORDER_NONE; m++) {
        ks_key_sched_init(&s, (ks_ordering_t)m);
        assert_false(ks_key_sched_maybe_ready(&s));
        assert_null(ks_key_sched_take(&s, &w, KS_HOLD_NONE));
        assert_null(ks_key_sched_take(&s, &w, 0));
        ks_key_sched_destroy(&s);
    }
    ks_ack_window_destroy(&w);
}

static void test_key_mode_basic(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    const uint64_t A = 0xAAAA, B = 0xBBBB;
    /* 0:A 1:B 2:A 3:null 4:B 5:A 6:null */
    add(&s, &w, 0, true, A);
    add(&s, &w, 1, true, B);
    add(&s, &w, 2, true, A);
    add(&s, &w, 3, false, 0);
    add(&s, &w, 4, true, B);
    add(&s, &w, 5, true, A);
    add(&s, &w, 6, false, A); /* null key: its hash is ignored */
    assert_true(ks_key_sched_maybe_ready(&s));

    int64_t got[16];
    size_t n = deliver_all(&s, &w, got, 16);
    /* Heads of A and B, and both null-key records, lowest first. */
    assert_offsets(got, n, (const int64_t[]){0, 1, 3, 6}, 4);

    ack(&s, &w, 0); /* A's next (2) may go */
    n = deliver_all(&s, &w, got, 16);
    assert_offsets(got, n, (const int64_t[]){2}, 1);

    ack(&s, &w, 3); /* a null key: frees nothing */
    assert_int_equal(deliver(&s, &w, true), -1);

    ack(&s, &w, 1); /* B's next (4) */
    ack(&s, &w, 2); /* A's next (5) */
    n = deliver_all(&s, &w, got, 16);
    assert_offsets(got, n, (const int64_t[]){4, 5}, 2);

    ack(&s, &w, 4);
    ack(&s, &w, 5);
    ack(&s, &w, 6);
    assert_int_equal(deliver(&s, &w, true), -1);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), 7);
    assert_int_equal(s.chain_cnt, 0);

    /* A key whose chain emptied starts afresh. */
    add(&s, &w, 7, true, A);
    add(&s, &w, 8, true, A);
    assert_int_equal(deliver(&s, &w, true), 7);
    assert_int_equal(deliver(&s, &w, true), -1);
    ack(&s, &w, 7);
    assert_int_equal(deliver(&s, &w, true), 8);
    ack(&s, &w, 8);
    assert_int_equal(deliver(&s, &w, true), -1);

    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_key_mode_add_while_head_out(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    /* Records of a key arriving while its head is already out must wait. */
    add(&s, &w, 10, true, 1);
    assert_int_equal(deliver(&s, &w, true), 10);
    add(&s, &w, 11, true, 1);
    add(&s, &w, 12, true, 2);
    add(&s, &w, 13, true, 1);
    assert_int_equal(deliver(&s, &w, true), 12);
    assert_int_equal(deliver(&s, &w, true), -1);
    ack(&s, &w, 10);
    assert_int_equal(deliver(&s, &w, true), 11);
    assert_int_equal(deliver(&s, &w, true), -1);
    ack(&s, &w, 11);
    assert_int_equal(deliver(&s, &w, true), 13);
    ack(&s, &w, 13);
    ack(&s, &w, 12);
    assert_int_equal(deliver(&s, &w, true), -1);
    assert_int_equal(s.chain_cnt, 0);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_lowest_eligible_first(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    /* Ten distinct keys at gapped offsets, added in offset order. */
    static const int64_t offs[] = {3, 4, 9, 10, 11, 20, 21, 35, 36, 50};
    for (size_t i = 0; i < 10; i++)
        add(&s, &w, offs[i], true, 1000 + (uint64_t)(9 - i));
    int64_t got[16];
    size_t n = deliver_all(&s, &w, got, 16);
    assert_offsets(got, n, offs, 10);

    /* Nacked out of order, they come back lowest first. */
    nack(&s, &w, 36);
    nack(&s, &w, 4);
    nack(&s, &w, 50);
    nack(&s, &w, 11);
    n = deliver_all(&s, &w, got, 16);
    assert_offsets(got, n, (const int64_t[]){4, 11, 36, 50}, 4);
    assert_int_equal(ks_ack_window_get(&w, 4)->attempts, 2);

    /* A nacked record comes before a newer one of another key. */
    add(&s, &w, 60, true, 77);
    nack(&s, &w, 21);
    assert_int_equal(deliver(&s, &w, true), 21);
    assert_int_equal(deliver(&s, &w, true), 60);

    for (size_t i = 0; i < 10; i++)
        ack(&s, &w, offs[i]);
    ack(&s, &w, 60);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_nack_redelivered_before_later_same_key(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    const uint64_t A = 5, B = 6;
    add(&s, &w, 0, true, A);
    add(&s, &w, 1, true, A);
    add(&s, &w, 2, true, A);
    add(&s, &w, 3, true, B);
    assert_int_equal(deliver(&s, &w, true), 0);
    assert_int_equal(deliver(&s, &w, true), 3);
    assert_int_equal(deliver(&s, &w, true), -1);

    for (int round = 0; round < 3; round++) {
        nack(&s, &w, 0);
        assert_int_equal(deliver(&s, &w, true), 0); /* the same record again */
        assert_int_equal(ks_ack_window_get(&w, 0)->attempts, 2 + round);
        assert_int_equal(deliver(&s, &w, true), -1); /* 1 and 2 still blocked */
    }
    /* Acking another key does not unblock A. */
    ack(&s, &w, 3);
    assert_int_equal(deliver(&s, &w, true), -1);
    /* A nack of A's head while a new key's record arrives: the head goes first. */
    add(&s, &w, 4, true, B);
    nack(&s, &w, 0);
    assert_int_equal(deliver(&s, &w, true), 0);
    assert_int_equal(deliver(&s, &w, true), 4);
    assert_int_equal(deliver(&s, &w, true), -1);

    ack(&s, &w, 0);
    assert_int_equal(deliver(&s, &w, true), 1);
    assert_int_equal(deliver(&s, &w, true), -1);
    nack(&s, &w, 1);
    assert_int_equal(deliver(&s, &w, true), 1);
    assert_int_equal(deliver(&s, &w, true), -1); /* 2 waits for 1 */
    ack(&s, &w, 1);
    assert_int_equal(deliver(&s, &w, true), 2);
    ack(&s, &w, 2);
    ack(&s, &w, 4);
    assert_int_equal(deliver(&s, &w, true), -1);
    assert_int_equal(s.chain_cnt, 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_delayed_head_blocks_key(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    add(&s, &w, 0, true, 9);
    add(&s, &w, 1, true, 9);
    add(&s, &w, 2, false, 0);
    assert_int_equal(deliver(&s, &w, true), 0);
    assert_int_equal(deliver(&s, &w, true), 2);
    /* Nacked with a delay: DELAYED, not requeued yet; the key stays blocked. */
    ks_ack_window_get(&w, 0)->state = KS_REC_DELAYED;
    assert_int_equal(deliver(&s, &w, true), -1);
    /* Its delay is over: ready again and first in line. */
    ks_win_entry_t *e = ks_ack_window_get(&w, 0);
    e->state = KS_REC_READY;
    ks_key_sched_requeue(&s, &w, e);
    assert_int_equal(deliver(&s, &w, true), 0);
    assert_int_equal(deliver(&s, &w, true), -1);
    ack(&s, &w, 0);
    assert_int_equal(deliver(&s, &w, true), 1);
    ack(&s, &w, 1);
    ack(&s, &w, 2);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_requeue_not_head_is_ignored(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    add(&s, &w, 0, true, 3);
    add(&s, &w, 1, true, 3);
    assert_int_equal(deliver(&s, &w, true), 0);
    /* A spurious requeue of a READY non-head record must not let it out early. */
    ks_key_sched_requeue(&s, &w, ks_ack_window_get(&w, 1));
    assert_int_equal(deliver(&s, &w, true), -1);
    ack(&s, &w, 0);
    assert_int_equal(deliver(&s, &w, true), 1);
    assert_int_equal(deliver(&s, &w, true), -1);
    ack(&s, &w, 1);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_next_then_put_back(void **state)
{
    /* The caller may take a record and put it back unleased (it did not fit). */
    for (int m = KS_ORDER_KEY; m <= KS_ORDER_NONE; m++) {
        ks_key_sched_t s;
        ks_ack_window_t w;
        ks_ack_window_init(&w, NULL);
        ks_key_sched_init(&s, (ks_ordering_t)m);
        add(&s, &w, 0, true, 1);
        add(&s, &w, 1, true, 1);
        ks_win_entry_t *e = ks_key_sched_take(&s, &w, KS_HOLD_NONE);
        assert_non_null(e);
        assert_int_equal(e->offset, 0);
        assert_int_equal(e->state, KS_REC_READY);
        ks_key_sched_requeue(&s, &w, e);
        assert_int_equal(deliver(&s, &w, true), 0);
        assert_int_equal(ks_ack_window_get(&w, 0)->attempts, 1);
        if (m == KS_ORDER_NONE)
            assert_int_equal(deliver(&s, &w, true), 1);
        else
            assert_int_equal(deliver(&s, &w, true), -1);
        ack(&s, &w, 0);
        if (m != KS_ORDER_NONE)
            assert_int_equal(deliver(&s, &w, true), 1);
        assert_int_equal(deliver(&s, &w, true), -1);
        ack(&s, &w, 1);
        assert_int_equal(ks_ack_window_count(&w), 0);
        ks_key_sched_destroy(&s);
        ks_ack_window_destroy(&w);
    }
}

static void test_null_keys_unordered(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    /* A keyed record with hash 0 out, then null-key records (hash 0 passed too). */
    add(&s, &w, 0, true, 0);
    assert_int_equal(deliver(&s, &w, true), 0);
    for (int64_t o = 1; o <= 20; o++)
        add(&s, &w, o, false, 0);
    add(&s, &w, 21, true, 0); /* keyed: waits for 0 */
    int64_t got[32];
    size_t n = deliver_all(&s, &w, got, 32);
    int64_t want[20];
    for (int i = 0; i < 20; i++)
        want[i] = i + 1;
    assert_offsets(got, n, want, 20);

    /* Null-key records are acked and nacked in any order, independently. */
    nack(&s, &w, 15);
    nack(&s, &w, 3);
    ack(&s, &w, 20);
    ack(&s, &w, 1);
    n = deliver_all(&s, &w, got, 32);
    assert_offsets(got, n, (const int64_t[]){3, 15}, 2);
    for (int64_t o = 2; o <= 19; o++)
        ack(&s, &w, o);
    assert_int_equal(deliver(&s, &w, true), -1); /* 21 still behind 0 */
    ack(&s, &w, 0);
    assert_int_equal(deliver(&s, &w, true), 21);
    ack(&s, &w, 21);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(s.chain_cnt, 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_partition_mode(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_PARTITION);
    /* Different keys and null keys: one record at a time regardless. */
    for (int64_t o = 0; o < 10; o++)
        add(&s, &w, o * 3, o % 3 != 0, (uint64_t)o * 7919);
    for (int64_t o = 0; o < 10; o++) {
        assert_int_equal(deliver(&s, &w, true), o * 3);
        assert_int_equal(deliver(&s, &w, true), -1);
        if (o % 4 == 1) {
            nack(&s, &w, o * 3);
            assert_int_equal(deliver(&s, &w, true), o * 3);
            assert_int_equal(deliver(&s, &w, true), -1);
        }
        if (o == 5) /* records arriving meanwhile queue behind */
            add(&s, &w, 100, true, 1);
        ack(&s, &w, o * 3);
    }
    assert_int_equal(deliver(&s, &w, true), 100);
    assert_int_equal(deliver(&s, &w, true), -1);
    ack(&s, &w, 100);
    assert_int_equal(deliver(&s, &w, true), -1);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(s.chain_cnt, 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_none_mode(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_NONE);
    /* Same key everywhere: no constraint in this mode. */
    for (int64_t o = 0; o < 50; o++)
        add(&s, &w, 1000 + o, o % 2 == 0, 42);
    int64_t got[64], want[50];
    for (int i = 0; i < 50; i++)
        want[i] = 1000 + i;
    size_t n = deliver_all(&s, &w, got, 64);
    assert_offsets(got, n, want, 50);
    assert_int_equal(s.chain_cnt, 0);
    nack(&s, &w, 1040);
    nack(&s, &w, 1001);
    n = deliver_all(&s, &w, got, 64);
    assert_offsets(got, n, (const int64_t[]){1001, 1040}, 2);
    for (int i = 49; i >= 0; i--)
        ack(&s, &w, 1000 + i);
    assert_int_equal(deliver(&s, &w, true), -1);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_allow_new_false(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    /* 0:A 1:A 2:B 3:C 4:D */
    add(&s, &w, 0, true, 1);
    add(&s, &w, 1, true, 1);
    add(&s, &w, 2, true, 2);
    add(&s, &w, 3, true, 3);
    add(&s, &w, 4, true, 4);

    /* Nothing was ever delivered: everything is held back. */
    assert_int_equal(deliver(&s, &w, false), -1);
    assert_true(ks_key_sched_maybe_ready(&s));

    assert_int_equal(deliver(&s, &w, true), 0);
    assert_int_equal(deliver(&s, &w, true), 2);
    assert_int_equal(deliver(&s, &w, false), -1); /* 3 is new */

    /* A nacked record that is the lowest eligible still goes. */
    nack(&s, &w, 2);
    assert_int_equal(deliver(&s, &w, false), 2);
    assert_int_equal(ks_ack_window_get(&w, 2)->attempts, 2);
    assert_int_equal(deliver(&s, &w, false), -1);
    nack(&s, &w, 0);
    nack(&s, &w, 2);
    assert_int_equal(deliver(&s, &w, false), 0);
    assert_int_equal(deliver(&s, &w, false), 2);
    assert_int_equal(deliver(&s, &w, false), -1);

    /* A held-back call consumes nothing: the new records are still there. */
    assert_int_equal(deliver(&s, &w, true), 3);
    ack(&s, &w, 0); /* 1 (new) becomes A's head */
    nack(&s, &w, 3);
    /* The lowest eligible is now 1, never delivered: held back, and 3 with it. */
    assert_int_equal(deliver(&s, &w, false), -1);
    assert_int_equal(deliver(&s, &w, true), 1);
    assert_int_equal(deliver(&s, &w, false), 3);
    assert_int_equal(deliver(&s, &w, false), -1);
    assert_int_equal(deliver(&s, &w, true), 4);
    assert_int_equal(deliver(&s, &w, true), -1);

    for (int64_t o = 1; o <= 4; o++)
        ack(&s, &w, o);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_stale_heap_after_window_drop(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_NONE);
    /* A record taken and put back, then leased by another path and acked: its heap
     * copy is stale (the entry left the window) and is skipped. */
    add(&s, &w, 0, false, 0);
    add(&s, &w, 1, false, 0);
    ks_win_entry_t *e = ks_key_sched_take(&s, &w, KS_HOLD_NONE);
    assert_non_null(e);
    assert_int_equal(e->offset, 0);
    ks_key_sched_requeue(&s, &w, e);
    e->state = KS_REC_LEASED;
    e->attempts = 1;
    ks_key_sched_done(&s, &w, e);
    assert_int_equal(ks_ack_window_ack(&w, 0), KS_ACK_OK);
    assert_null(ks_ack_window_get(&w, 0));
    assert_int_equal(deliver(&s, &w, true), 1);
    assert_int_equal(deliver(&s, &w, true), -1);
    ack(&s, &w, 1);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_stale_heap_entries_in_window(void **state)
{
    for (int m = KS_ORDER_KEY; m <= KS_ORDER_NONE; m++) {
        if (m == KS_ORDER_PARTITION)
            continue; /* needs two records out at once */
        ks_key_sched_t s;
        ks_ack_window_t w;
        ks_ack_window_init(&w, NULL);
        ks_key_sched_init(&s, (ks_ordering_t)m);
        for (int64_t o = 0; o < 4; o++)
            add(&s, &w, o, true, 100 + (uint64_t)o);
        assert_int_equal(deliver(&s, &w, true), 0);
        assert_int_equal(deliver(&s, &w, true), 1);
        assert_int_equal(deliver(&s, &w, true), 2);

        /* 1 nacked (queued again), then acked late with its still-valid ack id: it stays
         * in the window as ACKED (0 is below it) and must not go out again. */
        nack(&s, &w, 1);
        ks_win_entry_t *e = ks_ack_window_get(&w, 1);
        ks_key_sched_done(&s, &w, e);
        assert_int_equal(ks_ack_window_ack(&w, 1), KS_ACK_OK);
        assert_int_equal(ks_ack_window_get(&w, 1)->state, KS_REC_ACKED);

        /* 2 nacked (queued), then turned into a DELAYED retry: not eligible meanwhile. */
        nack(&s, &w, 2);
        ks_ack_window_get(&w, 2)->state = KS_REC_DELAYED;

        /* 0 queued twice (nacked, then a spurious second requeue): one delivery only. */
        nack(&s, &w, 0);
        ks_key_sched_requeue(&s, &w, ks_ack_window_get(&w, 0));
        assert_int_equal(deliver(&s, &w, true), 0);
        assert_int_equal(deliver(&s, &w, true), 3);
        assert_int_equal(deliver(&s, &w, true), -1);

        e = ks_ack_window_get(&w, 2);
        e->state = KS_REC_READY;
        ks_key_sched_requeue(&s, &w, e);
        assert_int_equal(deliver(&s, &w, true), 2);
        assert_int_equal(deliver(&s, &w, true), -1);
        ack(&s, &w, 0);
        ack(&s, &w, 2);
        ack(&s, &w, 3);
        assert_int_equal(ks_ack_window_count(&w), 0);
        assert_int_equal(s.chain_cnt, 0);
        ks_key_sched_destroy(&s);
        ks_ack_window_destroy(&w);
    }
}

static void test_done_skips_acked_followers(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    /* One key: 0 1 2 3 4. While 0 is out, 1 and 2 are finished out of band (their
     * attempts restored from commit metadata, then acked): when 0 is done the chain
     * must skip them and hand over to 3. */
    for (int64_t o = 0; o < 5; o++)
        add(&s, &w, o, true, 77);
    assert_int_equal(deliver(&s, &w, true), 0);
    for (int64_t o = 1; o <= 2; o++) {
        ks_win_entry_t *e = ks_ack_window_get(&w, o);
        e->attempts = 1;
        ks_key_sched_done(&s, &w, e); /* not the head: no effect on the chain */
        assert_int_equal(ks_ack_window_ack(&w, o), KS_ACK_OK);
    }
    assert_int_equal(deliver(&s, &w, true), -1);
    assert_int_equal(s.chain_cnt, 1);
    ack(&s, &w, 0);
    assert_int_equal(deliver(&s, &w, true), 3);
    assert_int_equal(deliver(&s, &w, true), -1);

    /* The last follower finished out of band too: acking the head ends the chain. */
    ks_win_entry_t *e = ks_ack_window_get(&w, 4);
    e->attempts = 1;
    ks_key_sched_done(&s, &w, e);
    assert_int_equal(ks_ack_window_ack(&w, 4), KS_ACK_OK);
    ack(&s, &w, 3);
    assert_int_equal(s.chain_cnt, 0);
    assert_int_equal(ks_ack_window_count(&w), 0);
    add(&s, &w, 5, true, 77);
    assert_int_equal(deliver(&s, &w, true), 5);
    ack(&s, &w, 5);

    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

/* 1000 distinct keys: the chain table grows past its first 64 slots, then empties with
 * deletions interleaved with insertions. hash_kind 0: random hashes; 1: hashes equal in
 * their low 40 bits (one long probe cluster); 2: hashes homed on a few slots. */
static void run_many_keys(int hash_kind, uint64_t seed)
{
    enum { K = 1000 };
    rnd_state = seed;
    uint64_t *hash = malloc((2 * K) * sizeof(*hash));
    size_t *perm = malloc(K * sizeof(*perm));
    int64_t *third = malloc(K * sizeof(*third)); /* a key's queued third record, or -1 */
    bool *live = calloc(K, sizeof(*live));       /* second record out, not acked */
    assert_non_null(hash);
    assert_non_null(perm);
    assert_non_null(third);
    assert_non_null(live);
    const uint64_t inv = golden_inverse();
    for (size_t k = 0; k < 2 * K; k++) {
        if (hash_kind == 0)
            hash[k] = rnd();
        else if (hash_kind == 1)
            hash[k] = (uint64_t)(k + 1) << 40;
        else
            hash[k] = (uint64_t)(k % 7 + 64 * (k / 7) + 60) * inv;
    }

    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    int64_t off = 0;

    /* Phase 1: one record per key: all eligible at once, in offset order. */
    for (size_t k = 0; k < K; k++)
        add(&s, &w, off++, true, hash[k]);
    assert_int_equal(s.chain_cnt, K);
    assert_true(s.chain_cap >= 2 * K);
    for (int64_t o = 0; o < K; o++)
        assert_int_equal(deliver(&s, &w, true), o);
    assert_int_equal(deliver(&s, &w, true), -1);

    /* Phase 2: a second record per key: each must find its chain and wait. */
    for (size_t k = 0; k < K; k++)
        add(&s, &w, off++, true, hash[k]);
    assert_int_equal(s.chain_cnt, K);
    assert_int_equal(deliver(&s, &w, true), -1);

    /* Phase 3: acking a key's first record lets exactly its second one go. */
    for (size_t k = 0; k < K; k++)
        perm[k] = k;
    shuffle(perm, K);
    for (size_t j = 0; j < K; j++) {
        size_t k = perm[j];
        ack(&s, &w, (int64_t)k);
        assert_int_equal(deliver(&s, &w, true), (int64_t)(K + k));
        assert_int_equal(deliver(&s, &w, true), -1);
        live[k] = true;
        third[k] = -1;
    }
    assert_int_equal(s.chain_cnt, K);

    /* Phase 4: ack second records in random order. Keys without a queued record lose
     * their chain (deleted); meanwhile records for live keys must still find theirs,
     * and records of brand-new keys must go at once. */
    shuffle(perm, K);
    size_t chains = K, fresh = K;
    for (size_t j = 0; j < K; j++) {
        size_t k = perm[j];
        ack(&s, &w, (int64_t)(K + k));
        live[k] = false;
        if (third[k] >= 0) {
            assert_int_equal(deliver(&s, &w, true), third[k]);
            ack(&s, &w, third[k]);
            third[k] = -1;
        }
        chains--;
        assert_int_equal(deliver(&s, &w, true), -1);
        assert_int_equal(s.chain_cnt, chains);

        /* A record for a random key still out: blocked. */
        size_t k2 = j + 1 < K ? perm[j + 1 + rnd_below(K - j - 1)] : k;
        if (live[k2] && third[k2] < 0) {
            third[k2] = off;
            add(&s, &w, off++, true, hash[k2]);
            assert_int_equal(deliver(&s, &w, true), -1);
            assert_int_equal(s.chain_cnt, chains);
        }
        /* A record for a new key (or one just deleted): goes at once. */
        if (j % 3 == 0) {
            int64_t o = off++;
            uint64_t h = j % 2 ? hash[k] : hash[fresh++];
            add(&s, &w, o, true, h);
            assert_int_equal(s.chain_cnt, chains + 1);
            assert_int_equal(deliver(&s, &w, true), o);
            ack(&s, &w, o);
            assert_int_equal(s.chain_cnt, chains);
        }
    }
    assert_int_equal(s.chain_cnt, 0);
    assert_int_equal(deliver(&s, &w, true), -1);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), off);

    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
    free(hash);
    free(perm);
    free(third);
    free(live);
}

static void test_many_keys(void **state)
{
    run_many_keys(0, 11);
    run_many_keys(1, 12);
    run_many_keys(2, 13);
}

/* ---- randomized model check --------------------------------------------------------------- */

enum { M_UNPUSHED = 0, M_READY, M_OUT, M_DELAYED, M_ACKED };

typedef struct {
    int64_t off;
    int key; /* the ordering key under the mode: -1 for none */
    int raw_key;
    int st;
    int attempts;
    size_t pos; /* index within its key's list */
} mrec_t;

typedef struct {
    ks_ordering_t mode;
    size_t nrec, nkeys;
    mrec_t *r;
    size_t **klist; /* per ordering key: its record indices in offset order */
    size_t *klen, *khead, *kpushed;
    int64_t *klast_acked;
    size_t pushed, lo; /* records pushed; lowest not acked */
    size_t *out, nout;
    size_t *delayed, ndelayed;
    uint64_t *hash;
} model_t;

static bool model_eligible(const model_t *m, size_t i)
{
    const mrec_t *x = &m->r[i];
    if (x->st != M_READY)
        return false;
    return x->key < 0 || m->khead[x->key] == x->pos;
}

/* The lowest eligible record, or -1. */
static long model_lowest(const model_t *m)
{
    for (size_t i = m->lo; i < m->pushed; i++)
        if (model_eligible(m, i))
            return (long)i;
    return -1;
}

static size_t model_chains(const model_t *m)
{
    size_t n = 0;
    for (size_t k = 0; k < m->nkeys; k++)
        n += m->khead[k] < m->kpushed[k];
    return n;
}

static void model_advance_lo(model_t *m)
{
    while (m->lo < m->pushed && m->r[m->lo].st == M_ACKED)
        m->lo++;
}

static void sim_push(model_t *m, ks_key_sched_t *s, ks_ack_window_t *w)
{
    mrec_t *x = &m->r[m->pushed];
    add(s, w, x->off, x->raw_key >= 0, x->raw_key >= 0 ? m->hash[x->raw_key] : rnd());
    x->st = M_READY;
    m->pushed++;
    if (x->key >= 0)
        m->kpushed[x->key]++;
}

/* One call of next, checked against the model; leases the record unless put_back. */
static bool sim_deliver(model_t *m, ks_key_sched_t *s, ks_ack_window_t *w, bool allow_new,
                        bool put_back)
{
    long want = model_lowest(m);
    if (want >= 0 && !allow_new && m->r[want].attempts == 0)
        want = -1;
    ks_win_entry_t *e = ks_key_sched_take(s, w, allow_new ? KS_HOLD_NONE : 0);
    if (want < 0) {
        if (e)
            fail_msg("next gave offset %lld, model has nothing eligible%s", (long long)e->offset,
                     allow_new ? "" : " (allow_new false)");
        return false;
    }
    if (!e)
        fail_msg("next gave nothing, model's lowest eligible is offset %lld",
                 (long long)m->r[want].off);
    if (e->offset != m->r[want].off)
        fail_msg("next gave offset %lld, model's lowest eligible is %lld", (long long)e->offset,
                 (long long)m->r[want].off);
    mrec_t *x = &m->r[want];
    assert_int_equal(e->state, KS_REC_READY);
    assert_int_equal(e->attempts, x->attempts);
    if (put_back) {
        ks_key_sched_requeue(s, w, e);
        return true;
    }
    /* Never twice out at once; at most one out per ordering key. */
    assert_int_equal(x->st, M_READY);
    if (x->key >= 0)
        for (size_t j = 0; j < m->nout; j++)
            assert_int_not_equal(m->r[m->out[j]].key, x->key);
    e->state = KS_REC_LEASED;
    e->attempts++;
    x->st = M_OUT;
    x->attempts++;
    m->out[m->nout++] = (size_t)want;
    return true;
}

static void sim_ack(model_t *m, ks_key_sched_t *s, ks_ack_window_t *w, size_t j)
{
    size_t i = m->out[j];
    m->out[j] = m->out[--m->nout];
    mrec_t *x = &m->r[i];
    ack(s, w, x->off);
    x->st = M_ACKED;
    if (x->key >= 0) {
        /* Offset order per key. */
        assert_true(x->off > m->klast_acked[x->key]);
        m->klast_acked[x->key] = x->off;
        assert_int_equal(m->khead[x->key], x->pos);
        m->khead[x->key]++;
    }
    model_advance_lo(m);
}

static void sim_nack(model_t *m, ks_key_sched_t *s, ks_ack_window_t *w, size_t j, bool delay)
{
    size_t i = m->out[j];
    m->out[j] = m->out[--m->nout];
    mrec_t *x = &m->r[i];
    if (delay) {
        ks_win_entry_t *e = ks_ack_window_get(w, x->off);
        assert_non_null(e);
        assert_int_equal(e->state, KS_REC_LEASED);
        e->state = KS_REC_DELAYED;
        x->st = M_DELAYED;
        m->delayed[m->ndelayed++] = i;
    } else {
        nack(s, w, x->off);
        x->st = M_READY;
    }
}

static void sim_undelay(model_t *m, ks_key_sched_t *s, ks_ack_window_t *w, size_t j)
{
    size_t i = m->delayed[j];
    m->delayed[j] = m->delayed[--m->ndelayed];
    ks_win_entry_t *e = ks_ack_window_get(w, m->r[i].off);
    assert_non_null(e);
    assert_int_equal(e->state, KS_REC_DELAYED);
    e->state = KS_REC_READY;
    ks_key_sched_requeue(s, w, e);
    m->r[i].st = M_READY;
}

static void sim_check(model_t *m, ks_key_sched_t *s, ks_ack_window_t *w)
{
    if (model_lowest(m) >= 0)
        assert_true(ks_key_sched_maybe_ready(s));
    assert_int_equal(s->chain_cnt, model_chains(m));
    if (m->pushed > 0)
        assert_int_equal(ks_ack_window_commit_point(w),
                         m->lo < m->pushed ? m->r[m->lo].off : m->r[m->pushed - 1].off + 1);
}

/* hash_kind 0: random key hashes; 1: hashes homed on the table's last and first slots,
 * so probe clusters wrap round. */
static void run_sim(ks_ordering_t mode, uint64_t seed, size_t nkeys, size_t per_key, int null_pct,
                    size_t max_out, int hash_kind)
{
    rnd_state = seed;
    const size_t win_max = 300;
    model_t m;
    memset(&m, 0, sizeof(m));
    m.mode = mode;
    m.nrec = nkeys * per_key;
    m.nkeys = mode == KS_ORDER_PARTITION ? 1 : nkeys;
    m.r = calloc(m.nrec, sizeof(*m.r));
    m.klist = calloc(m.nkeys, sizeof(*m.klist));
    m.klen = calloc(m.nkeys, sizeof(*m.klen));
    m.khead = calloc(m.nkeys, sizeof(*m.khead));
    m.kpushed = calloc(m.nkeys, sizeof(*m.kpushed));
    m.klast_acked = malloc(m.nkeys * sizeof(*m.klast_acked));
    m.out = malloc(m.nrec * sizeof(*m.out));
    m.delayed = malloc(m.nrec * sizeof(*m.delayed));
    m.hash = malloc(nkeys * sizeof(*m.hash));
    assert_true(m.r && m.klist && m.klen && m.khead && m.kpushed && m.klast_acked && m.out &&
                m.delayed && m.hash);
    const uint64_t inv = golden_inverse();
    for (size_t k = 0; k < nkeys; k++)
        m.hash[k] = hash_kind == 0 ? rnd() : (uint64_t)(61 + k % 5 + 64 * (k / 5)) * inv;
    for (size_t k = 0; k < m.nkeys; k++) {
        m.klist[k] = malloc(m.nrec * sizeof(**m.klist));
        assert_non_null(m.klist[k]);
        m.klast_acked[k] = -1;
    }

    /* The records: gapped offsets, random keys, some null. */
    int64_t off = (int64_t)rnd_below(5);
    for (size_t i = 0; i < m.nrec; i++) {
        mrec_t *x = &m.r[i];
        x->off = off;
        off += 1 + (rnd_below(4) == 0 ? (int64_t)rnd_below(3) : 0);
        x->raw_key = (int)rnd_below(100) < null_pct ? -1 : (int)rnd_below(nkeys);
        if (mode == KS_ORDER_KEY)
            x->key = x->raw_key;
        else if (mode == KS_ORDER_PARTITION)
            x->key = 0;
        else
            x->key = -1;
        if (x->key >= 0) {
            x->pos = m.klen[x->key];
            m.klist[x->key][m.klen[x->key]++] = i;
        }
    }

    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, mode);

    size_t steps = 0;
    while (m.pushed < m.nrec) {
        steps++;
        unsigned op = (unsigned)rnd_below(100);
        if (op < 30) {
            for (size_t b = 1 + rnd_below(3); b > 0; b--)
                if (m.pushed < m.nrec && m.pushed - m.lo < win_max)
                    sim_push(&m, &s, &w);
        } else if (op < 58) {
            if (m.nout < max_out)
                sim_deliver(&m, &s, &w, rnd_below(5) != 0, false);
        } else if (op < 78) {
            if (m.nout > 0)
                sim_ack(&m, &s, &w, rnd_below(m.nout));
        } else if (op < 90) {
            if (m.nout > 0)
                sim_nack(&m, &s, &w, rnd_below(m.nout), rnd_below(2) == 0);
        } else if (op < 96) {
            if (m.ndelayed > 0)
                sim_undelay(&m, &s, &w, rnd_below(m.ndelayed));
        } else {
            sim_deliver(&m, &s, &w, true, true);
        }
        sim_check(&m, &s, &w);
    }

    /* Drain: everything is eventually delivered and acked. */
    for (size_t rounds = 0; m.lo < m.nrec; rounds++) {
        assert_true(rounds < 10 * m.nrec);
        while (m.ndelayed > 0)
            sim_undelay(&m, &s, &w, rnd_below(m.ndelayed));
        while (sim_deliver(&m, &s, &w, true, false))
            ;
        assert_true(m.nout > 0); /* progress */
        while (m.nout > 0) {
            if (rnd_below(8) == 0)
                sim_nack(&m, &s, &w, rnd_below(m.nout), rnd_below(2) == 0);
            else
                sim_ack(&m, &s, &w, rnd_below(m.nout));
            sim_check(&m, &s, &w);
        }
    }
    for (size_t i = 0; i < m.nrec; i++)
        assert_int_equal(m.r[i].st, M_ACKED);
    for (size_t k = 0; k < m.nkeys; k++)
        assert_int_equal(m.khead[k], m.klen[k]);
    assert_null(ks_key_sched_take(&s, &w, KS_HOLD_NONE));
    assert_int_equal(s.chain_cnt, 0);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), m.r[m.nrec - 1].off + 1);
    assert_true(steps > m.nrec);

    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
    for (size_t k = 0; k < m.nkeys; k++)
        free(m.klist[k]);
    free(m.klist);
    free(m.klen);
    free(m.khead);
    free(m.kpushed);
    free(m.klast_acked);
    free(m.out);
    free(m.delayed);
    free(m.hash);
    free(m.r);
}

static void test_random_key_mode(void **state)
{
    run_sim(KS_ORDER_KEY, 1, 20, 500, 10, 16, 0);
    run_sim(KS_ORDER_KEY, 2, 20, 500, 0, 4, 0);
    run_sim(KS_ORDER_KEY, 3, 20, 500, 25, 64, 1);
    run_sim(KS_ORDER_KEY, 4, 30, 200, 5, 1000, 1);
    run_sim(KS_ORDER_KEY, 5, 3, 1000, 10, 8, 0);
}

static void test_random_partition_mode(void **state)
{
    run_sim(KS_ORDER_PARTITION, 6, 20, 200, 10, 16, 0);
    run_sim(KS_ORDER_PARTITION, 7, 5, 400, 30, 1, 1);
}

static void test_random_none_mode(void **state)
{
    run_sim(KS_ORDER_NONE, 8, 20, 200, 10, 16, 0);
    run_sim(KS_ORDER_NONE, 9, 20, 200, 0, 200, 1);
}

/* ---- ordered batches: a chain's records out to one subscriber, several at a time -------- */

/* Takes the next record for sub (which may hold limit of a chain) and leases it to sub.
 * Returns its offset, or -1. */
static int64_t take_as(ks_key_sched_t *s, ks_ack_window_t *w, uint32_t sub, uint32_t limit)
{
    ks_win_entry_t *e = ks_key_sched_take_for(s, w, KS_HOLD_NONE, sub, limit);
    if (!e)
        return -1;
    assert_int_equal(e->state, KS_REC_READY);
    e->state = KS_REC_LEASED;
    e->sub_id = sub;
    e->attempts++;
    return e->offset;
}

/* What the group does with a later record that goes back: READY, its delivery not counted. */
static int64_t backed[64];
static size_t backed_n;

static void later_back(void *opaque, ks_win_entry_t *e)
{
    (void)opaque;
    assert_int_equal(e->state, KS_REC_LEASED);
    assert_true(backed_n < 64);
    backed[backed_n++] = e->offset;
    e->state = KS_REC_READY;
    e->uncounted++;
}

/* A leased record comes back undone (nack, expiry, release): later ones with it. It ends
 * READY (then requeued) or, with delayed, DELAYED. */
static void come_back(ks_key_sched_t *s, ks_ack_window_t *w, int64_t off, bool delayed)
{
    ks_win_entry_t *e = ks_ack_window_get(w, off);
    assert_non_null(e);
    assert_int_equal(e->state, KS_REC_LEASED);
    backed_n = 0;
    ks_key_sched_back(s, w, e, later_back, NULL);
    e->state = delayed ? KS_REC_DELAYED : KS_REC_READY;
    if (!delayed)
        ks_key_sched_requeue(s, w, e);
}

/* Records [from, to) of one key. */
static void add_key(ks_key_sched_t *s, ks_ack_window_t *w, int64_t from, int64_t to, uint64_t h)
{
    for (int64_t o = from; o < to; o++)
        add(s, w, o, true, h);
}

static void test_ordered_bound(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    add_key(&s, &w, 0, 10, 0xA);  /* A: 0..9 */
    add_key(&s, &w, 10, 12, 0xB); /* B: 10, 11 */
    int64_t got[16];
    size_t n = 0;
    for (int64_t off; (off = take_as(&s, &w, 1, 4)) >= 0;)
        got[n++] = off;
    /* Four of A in order (the bound), then B's two, lowest first throughout. */
    assert_offsets(got, n, (const int64_t[]){0, 1, 2, 3, 10, 11}, 6);
    ack(&s, &w, 0);
    assert_int_equal(take_as(&s, &w, 1, 4), 4); /* room for one more of A */
    assert_int_equal(take_as(&s, &w, 1, 4), -1);
    ack(&s, &w, 2); /* out of order: room all the same, and 1 still out */
    ack(&s, &w, 3);
    assert_int_equal(take_as(&s, &w, 1, 4), 5);
    assert_int_equal(take_as(&s, &w, 1, 4), 6);
    assert_int_equal(take_as(&s, &w, 1, 4), -1);
    for (int64_t o = 1; o <= 11; o++)
        if (o != 2 && o != 3 && o < 7)
            ack(&s, &w, o);
    ack(&s, &w, 10);
    ack(&s, &w, 11);
    n = 0;
    for (int64_t off; (off = take_as(&s, &w, 1, 4)) >= 0;)
        got[n++] = off;
    assert_offsets(got, n, (const int64_t[]){7, 8, 9}, 3);
    for (int64_t o = 7; o <= 9; o++)
        ack(&s, &w, o);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(s.chain_cnt, 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_ordered_affinity(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    add_key(&s, &w, 0, 8, 0xA);
    add(&s, &w, 8, true, 0xB);
    add(&s, &w, 9, false, 0);
    assert_int_equal(take_as(&s, &w, 1, 4), 0);
    /* A is sub 1's while it holds any of it: neither an ordered nor a plain subscriber gets
     * A's next record, though it is READY and lower than B's. */
    assert_int_equal(take_as(&s, &w, 2, 4), 8);
    assert_int_equal(take_as(&s, &w, 3, 1), 9);
    assert_int_equal(take_as(&s, &w, 2, 4), -1);
    assert_int_equal(take_as(&s, &w, 3, 1), -1);
    assert_int_equal(take_as(&s, &w, 1, 4), 1);
    ack(&s, &w, 0);
    assert_int_equal(take_as(&s, &w, 2, 4), -1); /* 1 still out to sub 1 */
    ack(&s, &w, 1);
    /* All settled: A goes to whoever asks first, from its lowest record on. */
    assert_int_equal(take_as(&s, &w, 2, 4), 2);
    assert_int_equal(take_as(&s, &w, 1, 4), -1);
    assert_int_equal(take_as(&s, &w, 2, 4), 3);
    for (int64_t o = 2; o <= 9; o++) {
        if (o >= 4 && o <= 7) {
            assert_int_equal(take_as(&s, &w, 2, 4), o);
        }
        ack(&s, &w, o);
    }
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(s.chain_cnt, 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_plain_subscriber_one_in_flight(void **state)
{
    for (int m = KS_ORDER_KEY; m <= KS_ORDER_PARTITION; m++) {
        ks_key_sched_t s;
        ks_ack_window_t w;
        ks_ack_window_init(&w, NULL);
        ks_key_sched_init(&s, (ks_ordering_t)m);
        add_key(&s, &w, 0, 3, 0xA);
        add_key(&s, &w, 3, 5, 0xB);
        /* Limit 1 (no ordered batches): one per key, or one per partition. */
        assert_int_equal(take_as(&s, &w, 7, 1), 0);
        if (m == KS_ORDER_KEY)
            assert_int_equal(take_as(&s, &w, 7, 1), 3);
        assert_int_equal(take_as(&s, &w, 7, 1), -1);
        assert_int_equal(take_as(&s, &w, 8, 5), -1); /* nor anyone else's */
        ack(&s, &w, 0);
        assert_int_equal(take_as(&s, &w, 7, 1), 1);
        assert_int_equal(take_as(&s, &w, 7, 1), -1);
        ack(&s, &w, 1);
        assert_int_equal(take_as(&s, &w, 7, 1), 2);
        ack(&s, &w, 2);
        if (m == KS_ORDER_PARTITION)
            assert_int_equal(take_as(&s, &w, 7, 1), 3);
        ack(&s, &w, 3);
        assert_int_equal(take_as(&s, &w, 7, 1), 4);
        ack(&s, &w, 4);
        assert_int_equal(ks_ack_window_count(&w), 0);
        ks_key_sched_destroy(&s);
        ks_ack_window_destroy(&w);
    }
}

static void test_ordered_nack_sends_later_back(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    add_key(&s, &w, 0, 6, 0xA);
    for (int64_t o = 0; o < 5; o++)
        assert_int_equal(take_as(&s, &w, 1, 10), o);
    /* 2 is nacked while 0 and 1 are still out: 3 and 4 come back with it, uncounted. */
    come_back(&s, &w, 2, false);
    assert_offsets(backed, backed_n, (const int64_t[]){3, 4}, 2);
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&w, 3)), 0);
    /* Still sub 1's (0 and 1 are out): nobody else gets any of A. */
    assert_int_equal(take_as(&s, &w, 2, 10), -1);
    int64_t got[8];
    size_t n = 0;
    for (int64_t off; (off = take_as(&s, &w, 1, 10)) >= 0;)
        got[n++] = off;
    assert_offsets(got, n, (const int64_t[]){2, 3, 4, 5}, 4);
    assert_int_equal(ks_ack_window_get(&w, 2)->attempts, 2);
    assert_int_equal(ks_ack_window_get(&w, 3)->attempts, 2); /* a new delivery, one counted */
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&w, 3)), 1);
    /* Nacked with a delay: the chain waits for it, later records out or not. */
    come_back(&s, &w, 3, true);
    assert_offsets(backed, backed_n, (const int64_t[]){4, 5}, 2);
    assert_int_equal(take_as(&s, &w, 1, 10), -1);
    ks_win_entry_t *e = ks_ack_window_get(&w, 3);
    e->state = KS_REC_READY; /* its delay is over */
    ks_key_sched_requeue(&s, &w, e);
    n = 0;
    for (int64_t off; (off = take_as(&s, &w, 1, 10)) >= 0;)
        got[n++] = off;
    assert_offsets(got, n, (const int64_t[]){3, 4, 5}, 3);
    for (int64_t o = 0; o < 6; o++)
        ack(&s, &w, o);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(s.chain_cnt, 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_ordered_expiry_hands_over(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_PARTITION);
    add(&s, &w, 0, false, 0);
    add(&s, &w, 1, true, 5);
    add(&s, &w, 2, false, 0);
    add(&s, &w, 3, true, 6);
    for (int64_t o = 0; o < 4; o++)
        assert_int_equal(take_as(&s, &w, 1, 500), o);
    /* The first lease expires (or its subscriber left): everything after it comes back, and
     * with nothing of the partition out any more the next subscriber takes it over, from
     * the first record on. */
    come_back(&s, &w, 0, false);
    assert_offsets(backed, backed_n, (const int64_t[]){1, 2, 3}, 3);
    ks_key_sched_forget_sub(&s, 1);
    int64_t got[8];
    size_t n = 0;
    for (int64_t off; (off = take_as(&s, &w, 2, 500)) >= 0;)
        got[n++] = off;
    assert_offsets(got, n, (const int64_t[]){0, 1, 2, 3}, 4);
    assert_int_equal(take_as(&s, &w, 1, 500), -1);
    /* A record added while the whole partition is out goes to its holder. */
    add(&s, &w, 4, true, 7);
    assert_int_equal(take_as(&s, &w, 1, 500), -1);
    assert_int_equal(take_as(&s, &w, 2, 500), 4);
    for (int64_t o = 0; o < 5; o++)
        ack(&s, &w, o);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

/* After a nack the chain goes out KS_CHAIN_RESTART at a time again, the window growing by one
 * for each record done until it reaches the subscriber's limit, and then no cap at all. */
static void test_ordered_window_after_nack(void **state)
{
    enum { LIMIT = 40, RESTART = KS_CHAIN_RESTART, N = 200 };
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, KS_ORDER_KEY);
    add_key(&s, &w, 0, N, 0xA);
    for (int64_t o = 0; o < LIMIT; o++)
        assert_int_equal(take_as(&s, &w, 1, LIMIT), o);
    assert_int_equal(take_as(&s, &w, 1, LIMIT), -1);
    ks_win_entry_t *e0 = ks_ack_window_get(&w, 0);
    backed_n = 0;
    ks_key_sched_back(&s, &w, e0, later_back, NULL); /* 1..39 with it */
    ks_key_sched_narrow(&s, e0);
    e0->state = KS_REC_READY;
    ks_key_sched_requeue(&s, &w, e0);
    assert_int_equal(backed_n, 39);
    /* RESTART out, then two more for each one done (one out less, the window one more)
     * until LIMIT are out, then one for each one done. */
    int64_t next = 0, acked = 0, out = 0;
    for (int round = 0; round < 40; round++) {
        int64_t k = 0;
        for (int64_t off; (off = take_as(&s, &w, 1, LIMIT)) >= 0; k++)
            assert_int_equal(off, next++);
        out += k;
        int64_t want = round == 0 ? RESTART : out - k < LIMIT - 1 ? 2 : 1;
        if (k != want)
            fail_msg("round %d: %lld taken, want %lld (%lld out)", round, (long long)k,
                     (long long)want, (long long)out);
        ack(&s, &w, acked++);
        out--;
    }
    assert_int_equal(out, LIMIT - 1);
    for (size_t i = 0; i < s.chain_cap; i++)
        if (s.chains[i].head >= 0)
            assert_int_equal(s.chains[i].win, 0); /* back at the limit: no cap */
    /* Narrowed while two earlier ones are out: those two and RESTART more. */
    while (out > 3) {
        ack(&s, &w, acked++);
        out--;
    }
    assert_int_equal(acked + 2, next - 1); /* out: acked, acked + 1 and the last taken */
    ks_win_entry_t *e = ks_ack_window_get(&w, next - 1);
    ks_key_sched_back(&s, &w, e, later_back, NULL);
    ks_key_sched_narrow(&s, e);
    e->state = KS_REC_READY;
    ks_key_sched_requeue(&s, &w, e);
    next--;
    for (int i = 0; i < RESTART; i++)
        assert_int_equal(take_as(&s, &w, 1, LIMIT), next++);
    assert_int_equal(take_as(&s, &w, 1, LIMIT), -1);
    while (acked < next)
        ack(&s, &w, acked++);
    for (int64_t off; (off = take_as(&s, &w, 1, LIMIT)) >= 0;)
        ack(&s, &w, off);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_chain_ids(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    for (int m = KS_ORDER_KEY; m <= KS_ORDER_NONE; m++) {
        ks_ack_window_init(&w, NULL);
        ks_key_sched_init(&s, (ks_ordering_t)m);
        add(&s, &w, 0, true, 0x1234);
        add(&s, &w, 1, true, 0);
        add(&s, &w, 2, false, 0);
        uint64_t c0 = ks_key_sched_chain_id(ks_ack_window_get(&w, 0));
        uint64_t c1 = ks_key_sched_chain_id(ks_ack_window_get(&w, 1));
        uint64_t c2 = ks_key_sched_chain_id(ks_ack_window_get(&w, 2));
        if (m == KS_ORDER_KEY) {
            assert_int_equal(c0, 0x1234);
            assert_int_not_equal(c1, 0); /* a key that hashes to 0 still has a chain */
            assert_int_equal(c2, 0);     /* a null key has none */
        } else if (m == KS_ORDER_PARTITION) {
            assert_int_not_equal(c0, 0);
            assert_int_equal(c0, c1);
            assert_int_equal(c0, c2);
        } else {
            assert_int_equal(c0 | c1 | c2, 0);
        }
        ks_key_sched_destroy(&s);
        ks_ack_window_destroy(&w);
    }
}

/* A model check: subscribers with and without ordered batches take, ack, nack (some with a
 * delay) and lose records at random while records keep coming. Each take must be the
 * lowest record of its chain not out or done, with nothing of the chain out to anyone else
 * and no more than the taker's limit out; in the end everything is acked. */
#define OSIM_SUBS 3
static void run_ordered_sim(ks_ordering_t mode, uint64_t seed, size_t nkeys, int64_t nrecs,
                            uint32_t limit)
{
    rnd_state = seed;
    ks_key_sched_t s;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    ks_key_sched_init(&s, mode);
    const uint32_t lim[OSIM_SUBS + 1] = {0, limit, 1, limit};
    int64_t *outs = malloc((size_t)nrecs * sizeof(*outs)); /* offsets out, any order */
    uint64_t *hash = calloc((size_t)nrecs, sizeof(*hash));
    bool *keyed = calloc((size_t)nrecs, sizeof(*keyed));
    assert_non_null(outs);
    assert_non_null(hash);
    assert_non_null(keyed);
    size_t nout = 0, ndelayed = 0;
    int64_t delayed[64], added = 0, acked = 0;
    for (long step = 0; acked < nrecs; step++) {
        assert_true(step < 50 * nrecs);
        size_t op = rnd_below(10);
        if (added < nrecs && (op < 3 || nout == 0)) {
            keyed[added] = rnd_below(8) != 0;
            hash[added] = 100 + rnd_below(nkeys);
            add(&s, &w, added, keyed[added], hash[added]);
            added++;
        } else if (op < 6) {
            uint32_t sub = 1 + (uint32_t)rnd_below(OSIM_SUBS);
            int64_t off = take_as(&s, &w, sub, lim[sub]);
            if (off < 0)
                continue;
            bool chained = mode == KS_ORDER_PARTITION || (mode == KS_ORDER_KEY && keyed[off]);
            uint64_t h = mode == KS_ORDER_PARTITION ? 0 : hash[off];
            uint32_t mine = 1;
            for (int64_t o = 0; chained && o < added; o++) {
                bool same = mode == KS_ORDER_PARTITION || (keyed[o] && hash[o] == h);
                ks_win_entry_t *e = ks_ack_window_get(&w, o);
                if (!same || o == off || !e || e->state == KS_REC_ACKED)
                    continue;
                if (o < off && e->state != KS_REC_LEASED)
                    fail_msg("seed %llu: %lld out before %lld of its chain, which is %s",
                             (unsigned long long)seed, (long long)off, (long long)o,
                             ks_rec_state_str(e->state));
                if (e->state == KS_REC_LEASED && (o > off || e->sub_id != sub))
                    fail_msg("seed %llu: %lld out to %u while %lld is out to %u",
                             (unsigned long long)seed, (long long)off, sub, (long long)o,
                             e->sub_id);
                mine += e->state == KS_REC_LEASED;
            }
            assert_true(mine <= lim[sub]);
            outs[nout++] = off;
        } else if (op < 8 && nout > 0) {
            size_t i = rnd_below(nout);
            ack(&s, &w, outs[i]);
            outs[i] = outs[--nout];
            acked++;
        } else if (op < 10 && nout > 0) {
            size_t i = rnd_below(nout);
            bool delay = op == 9 && ndelayed < 64;
            come_back(&s, &w, outs[i], delay);
            if (delay)
                delayed[ndelayed++] = outs[i];
            /* it and the later records of its chain that came back are no longer out */
            for (size_t k = 0; k < nout;) {
                ks_win_entry_t *e = ks_ack_window_get(&w, outs[k]);
                if (e->state != KS_REC_LEASED)
                    outs[k] = outs[--nout];
                else
                    k++;
            }
        }
        if (ndelayed > 0 && rnd_below(4) == 0) { /* a delay runs out */
            size_t i = rnd_below(ndelayed);
            ks_win_entry_t *e = ks_ack_window_get(&w, delayed[i]);
            e->state = KS_REC_READY;
            ks_key_sched_requeue(&s, &w, e);
            delayed[i] = delayed[--ndelayed];
        }
    }
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(s.chain_cnt, 0);
    free(outs);
    free(hash);
    free(keyed);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_random_ordered(void **state)
{
    run_ordered_sim(KS_ORDER_KEY, 11, 3, 3000, 8);
    run_ordered_sim(KS_ORDER_KEY, 12, 40, 3000, 500);
    run_ordered_sim(KS_ORDER_KEY, 13, 1, 2000, 2);
    run_ordered_sim(KS_ORDER_PARTITION, 14, 5, 2000, 16);
    run_ordered_sim(KS_ORDER_NONE, 15, 5, 1000, 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ordering_names),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_key_mode_basic),
        cmocka_unit_test(test_key_mode_add_while_head_out),
        cmocka_unit_test(test_lowest_eligible_first),
        cmocka_unit_test(test_nack_redelivered_before_later_same_key),
        cmocka_unit_test(test_delayed_head_blocks_key),
        cmocka_unit_test(test_requeue_not_head_is_ignored),
        cmocka_unit_test(test_next_then_put_back),
        cmocka_unit_test(test_null_keys_unordered),
        cmocka_unit_test(test_partition_mode),
        cmocka_unit_test(test_none_mode),
        cmocka_unit_test(test_allow_new_false),
        cmocka_unit_test(test_stale_heap_after_window_drop),
        cmocka_unit_test(test_stale_heap_entries_in_window),
        cmocka_unit_test(test_done_skips_acked_followers),
        cmocka_unit_test(test_many_keys),
        cmocka_unit_test(test_random_key_mode),
        cmocka_unit_test(test_random_partition_mode),
        cmocka_unit_test(test_random_none_mode),
        cmocka_unit_test(test_ordered_bound),
        cmocka_unit_test(test_ordered_affinity),
        cmocka_unit_test(test_plain_subscriber_one_in_flight),
        cmocka_unit_test(test_ordered_nack_sends_later_back),
        cmocka_unit_test(test_ordered_expiry_hands_over),
        cmocka_unit_test(test_ordered_window_after_nack),
        cmocka_unit_test(test_chain_ids),
        cmocka_unit_test(test_random_ordered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
