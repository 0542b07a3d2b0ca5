/* test_ack_window.c: tests the per-partition ack window and its contiguous commit point
 * (proxy/ack_window.c), incl. a randomized model check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ack_window.h"

/* Every msg handed to a window in these tests is a pointer to an int counter; the free
 * callback bumps it, so a counter must end at exactly 1. */
static long free_calls;

static void count_free(void *msg)
{
    (*(int *)msg)++;
    free_calls++;
}

/* Leases every READY record and checks they come out in offset order. Returns how many. */
static size_t lease_all(ks_ack_window_t *w)
{
    size_t n = 0;
    int64_t prev = -1;
    ks_win_entry_t *e;
    while ((e = ks_ack_window_lease_next(w)) != NULL) {
        assert_true(e->offset > prev);
        assert_int_equal(e->state, KS_REC_LEASED);
        assert_true(e->attempts >= 1);
        prev = e->offset;
        n++;
    }
    return n;
}

static void test_empty_window(void **state)
{
    ks_ack_window_t w;
    ks_ack_window_init(&w, count_free);
    assert_int_equal(ks_ack_window_commit_point(&w), -1);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(ks_ack_window_bytes(&w), 0);
    assert_int_equal(ks_ack_window_leased(&w), 0);
    assert_null(ks_ack_window_lease_next(&w));
    assert_int_equal(ks_ack_window_find(&w, 0), -1);
    assert_int_equal(ks_ack_window_ack(&w, 0), KS_ACK_UNKNOWN_OFFSET);
    assert_int_equal(ks_ack_window_ack(&w, 5), KS_ACK_UNKNOWN_OFFSET);
    assert_int_equal(ks_ack_window_commit_point(&w), -1);
    ks_ack_window_destroy(&w);
    assert_int_equal(ks_ack_window_commit_point(&w), -1);
    assert_string_equal(ks_rec_state_str(KS_REC_READY), "READY");
    assert_string_equal(ks_rec_state_str(KS_REC_LEASED), "LEASED");
    assert_string_equal(ks_rec_state_str(KS_REC_ACKED), "ACKED");
}

static void test_commit_point_out_of_order(void **state)
{
    int cnt[10] = {0};
    ks_ack_window_t w;
    ks_ack_window_init(&w, count_free);
    for (int i = 0; i < 10; i++)
        assert_int_equal(ks_ack_window_push(&w, 100 + i, 10, &cnt[i]), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), 100);
    assert_int_equal(ks_ack_window_count(&w), 10);
    assert_int_equal(lease_all(&w), 10);
    assert_int_equal(ks_ack_window_leased(&w), 10);

    assert_int_equal(ks_ack_window_ack(&w, 101), KS_ACK_OK);
    assert_int_equal(ks_ack_window_commit_point(&w), 100);
    assert_int_equal(ks_ack_window_ack(&w, 103), KS_ACK_OK);
    assert_int_equal(ks_ack_window_commit_point(&w), 100);
    assert_int_equal(ks_ack_window_count(&w), 10); /* nothing below 101 is done yet */
    assert_int_equal(cnt[1], 1);                   /* but the acked msgs are freed at once */
    assert_int_equal(cnt[3], 1);
    assert_int_equal(cnt[0], 0);

    assert_int_equal(ks_ack_window_ack(&w, 100), KS_ACK_OK);
    assert_int_equal(ks_ack_window_commit_point(&w), 102);
    assert_int_equal(ks_ack_window_count(&w), 8);
    assert_int_equal(ks_ack_window_at(&w, 0)->offset, 102);
    assert_int_equal(ks_ack_window_ack(&w, 102), KS_ACK_OK);
    assert_int_equal(ks_ack_window_commit_point(&w), 104);
    assert_int_equal(ks_ack_window_count(&w), 6);

    /* 109 first, then 105..108 backwards: the point moves only when 104 goes. */
    assert_int_equal(ks_ack_window_ack(&w, 109), KS_ACK_OK);
    for (int64_t o = 108; o >= 105; o--) {
        assert_int_equal(ks_ack_window_ack(&w, o), KS_ACK_OK);
        assert_int_equal(ks_ack_window_commit_point(&w), 104);
    }
    assert_int_equal(ks_ack_window_leased(&w), 1);
    assert_int_equal(ks_ack_window_ack(&w, 104), KS_ACK_OK);
    /* Everything acked: the commit point is end_offset, last + 1. */
    assert_int_equal(ks_ack_window_commit_point(&w), 110);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(ks_ack_window_bytes(&w), 0);
    assert_int_equal(ks_ack_window_leased(&w), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(cnt[i], 1);

    /* It keeps going from there. */
    int more = 0;
    assert_int_equal(ks_ack_window_push(&w, 110, 1, &more), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), 110);
    ks_ack_window_destroy(&w);
    assert_int_equal(more, 1);
}

static void test_commit_point_with_gaps(void **state)
{
    /* Offsets 5, 9, 12 (compaction / transaction markers in between); every ack order. */
    static const int64_t offs[3] = {5, 9, 12};
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                    {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int p = 0; p < 6; p++) {
        int cnt[3] = {0};
        bool acked[3] = {false, false, false};
        ks_ack_window_t w;
        ks_ack_window_init(&w, count_free);
        for (int i = 0; i < 3; i++)
            assert_int_equal(ks_ack_window_push(&w, offs[i], 100, &cnt[i]), 0);
        assert_int_equal(lease_all(&w), 3);
        assert_int_equal(ks_ack_window_commit_point(&w), 5);

        /* Gaps inside the window and offsets past its end are unknown. */
        static const int64_t gaps[] = {6, 7, 8, 10, 11, 13, 14, 1000};
        for (size_t g = 0; g < sizeof(gaps) / sizeof(gaps[0]); g++)
            assert_int_equal(ks_ack_window_ack(&w, gaps[g]), KS_ACK_UNKNOWN_OFFSET);

        for (int s = 0; s < 3; s++) {
            int k = perms[p][s];
            assert_int_equal(ks_ack_window_ack(&w, offs[k]), KS_ACK_OK);
            acked[k] = true;
            int64_t expect = 13;
            for (int i = 0; i < 3; i++) {
                if (!acked[i]) {
                    expect = offs[i];
                    break;
                }
            }
            assert_int_equal(ks_ack_window_commit_point(&w), expect);
            /* never past an unacked record */
            for (int i = 0; i < 3; i++)
                if (!acked[i])
                    assert_true(ks_ack_window_commit_point(&w) <= offs[i]);
            /* a gap just above the commit point is still unknown */
            if (expect < 13)
                assert_int_equal(ks_ack_window_ack(&w, expect + 1), KS_ACK_UNKNOWN_OFFSET);
        }
        assert_int_equal(ks_ack_window_commit_point(&w), 13);
        assert_int_equal(ks_ack_window_count(&w), 0);
        assert_int_equal(ks_ack_window_ack(&w, 13), KS_ACK_UNKNOWN_OFFSET);
        for (int i = 0; i < 3; i++)
            assert_int_equal(cnt[i], 1);
        ks_ack_window_destroy(&w);
        for (int i = 0; i < 3; i++)
            assert_int_equal(cnt[i], 1);
    }
}

static void test_ack_errors(void **state)
{
    int cnt[4] = {0};
    ks_ack_window_t w;
    ks_ack_window_init(&w, count_free);
    for (int i = 0; i < 4; i++)
        assert_int_equal(ks_ack_window_push(&w, 20 + i, 1, &cnt[i]), 0);

    /* Never leased: not delivered, and the record stays READY for the next lease. */
    assert_int_equal(ks_ack_window_ack(&w, 20), KS_ACK_NOT_DELIVERED);
    assert_int_equal(cnt[0], 0);
    ks_win_entry_t *e = ks_ack_window_lease_next(&w);
    assert_non_null(e);
    assert_int_equal(e->offset, 20);
    assert_int_equal(e->attempts, 1);
    assert_ptr_equal(e->msg, &cnt[0]);
    assert_int_equal(ks_ack_window_ack(&w, 21), KS_ACK_NOT_DELIVERED);
    assert_int_equal(ks_ack_window_at(&w, 1)->state, KS_REC_READY);
    e = ks_ack_window_lease_next(&w);
    assert_non_null(e);
    assert_int_equal(e->offset, 21);

    /* Beyond the end. */
    assert_int_equal(ks_ack_window_ack(&w, 24), KS_ACK_UNKNOWN_OFFSET);
    assert_int_equal(ks_ack_window_ack(&w, INT64_MAX), KS_ACK_UNKNOWN_OFFSET);

    /* Double ack while still held (above the commit point)... */
    assert_int_equal(ks_ack_window_ack(&w, 21), KS_ACK_OK);
    assert_int_equal(ks_ack_window_ack(&w, 21), KS_ACK_DUPLICATE);
    assert_int_equal(ks_ack_window_commit_point(&w), 20);
    /* ...and after it was committed past. */
    assert_int_equal(ks_ack_window_ack(&w, 20), KS_ACK_OK);
    assert_int_equal(ks_ack_window_commit_point(&w), 22);
    assert_int_equal(ks_ack_window_ack(&w, 20), KS_ACK_DUPLICATE);
    assert_int_equal(ks_ack_window_ack(&w, 21), KS_ACK_DUPLICATE);
    assert_int_equal(ks_ack_window_commit_point(&w), 22);
    /* Duplicates never free twice. */
    assert_int_equal(cnt[0], 1);
    assert_int_equal(cnt[1], 1);
    assert_int_equal(ks_ack_window_bytes(&w), 2);

    ks_ack_window_destroy(&w);
    for (int i = 0; i < 4; i++)
        assert_int_equal(cnt[i], 1);
}

static void test_push_order(void **state)
{
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    assert_int_equal(ks_ack_window_push(&w, -1, 1, NULL), -1);
    assert_int_equal(ks_ack_window_commit_point(&w), -1);
    assert_int_equal(ks_ack_window_push(&w, 0, 1, NULL), 0);
    assert_int_equal(ks_ack_window_push(&w, 10, 1, NULL), 0);
    assert_int_equal(ks_ack_window_push(&w, 10, 1, NULL), -1); /* equal */
    assert_int_equal(ks_ack_window_push(&w, 9, 1, NULL), -1);  /* below */
    assert_int_equal(ks_ack_window_push(&w, 0, 1, NULL), -1);
    assert_int_equal(ks_ack_window_count(&w), 2);
    assert_int_equal(ks_ack_window_bytes(&w), 2);
    assert_int_equal(ks_ack_window_at(&w, 1)->offset, 10);
    assert_int_equal(ks_ack_window_push(&w, 11, 1, NULL), 0);

    /* Once everything is acked and gone, older offsets are still refused. */
    assert_int_equal(lease_all(&w), 3);
    assert_int_equal(ks_ack_window_ack(&w, 0), KS_ACK_OK);
    assert_int_equal(ks_ack_window_ack(&w, 10), KS_ACK_OK);
    assert_int_equal(ks_ack_window_ack(&w, 11), KS_ACK_OK);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), 12);
    assert_int_equal(ks_ack_window_push(&w, 11, 1, NULL), -1);
    assert_int_equal(ks_ack_window_push(&w, 5, 1, NULL), -1);
    assert_int_equal(ks_ack_window_commit_point(&w), 12);
    assert_int_equal(ks_ack_window_push(&w, 12, 1, NULL), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), 12);
    /* The first push may start anywhere (a committed position). */
    ks_ack_window_destroy(&w);
    assert_int_equal(ks_ack_window_push(&w, INT64_C(1) << 40, 1, NULL), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), INT64_C(1) << 40);
    ks_ack_window_destroy(&w);
}

static void test_bytes_accounting(void **state)
{
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    assert_int_equal(ks_ack_window_push(&w, 1, 100, NULL), 0);
    assert_int_equal(ks_ack_window_push(&w, 2, 200, NULL), 0);
    assert_int_equal(ks_ack_window_push(&w, 4, 300, NULL), 0);
    assert_int_equal(ks_ack_window_push(&w, 5, UINT32_MAX, NULL), 0);
    assert_int_equal(ks_ack_window_bytes(&w), 600 + (int64_t)UINT32_MAX);
    assert_int_equal(lease_all(&w), 4);
    assert_int_equal(ks_ack_window_bytes(&w), 600 + (int64_t)UINT32_MAX); /* leasing is free */
    /* Acked bytes are released at once, even while the entry waits below the point. */
    assert_int_equal(ks_ack_window_ack(&w, 2), KS_ACK_OK);
    assert_int_equal(ks_ack_window_bytes(&w), 400 + (int64_t)UINT32_MAX);
    assert_int_equal(ks_ack_window_count(&w), 4);
    assert_int_equal(ks_ack_window_ack(&w, 5), KS_ACK_OK);
    assert_int_equal(ks_ack_window_bytes(&w), 400);
    assert_int_equal(ks_ack_window_ack(&w, 2), KS_ACK_DUPLICATE);
    assert_int_equal(ks_ack_window_bytes(&w), 400);
    assert_int_equal(ks_ack_window_ack(&w, 3), KS_ACK_UNKNOWN_OFFSET);
    assert_int_equal(ks_ack_window_bytes(&w), 400);
    assert_int_equal(ks_ack_window_ack(&w, 1), KS_ACK_OK);
    assert_int_equal(ks_ack_window_bytes(&w), 300);
    assert_int_equal(ks_ack_window_ack(&w, 4), KS_ACK_OK);
    assert_int_equal(ks_ack_window_bytes(&w), 0);
    /* NOT_DELIVERED acks do not touch bytes. */
    assert_int_equal(ks_ack_window_push(&w, 6, 50, NULL), 0);
    assert_int_equal(ks_ack_window_ack(&w, 6), KS_ACK_NOT_DELIVERED);
    assert_int_equal(ks_ack_window_bytes(&w), 50);
    ks_ack_window_destroy(&w);
    assert_int_equal(ks_ack_window_bytes(&w), 0);
}

static void test_free_msg_exactly_once(void **state)
{
    enum { N = 200 };
    int cnt[N];
    memset(cnt, 0, sizeof(cnt));
    free_calls = 0;
    ks_ack_window_t w;
    ks_ack_window_init(&w, count_free);
    for (int i = 0; i < N; i++)
        assert_int_equal(ks_ack_window_push(&w, i * 2, 1, &cnt[i]), 0);
    /* NULL msgs are allowed and never passed to free_msg. */
    assert_int_equal(ks_ack_window_push(&w, 2 * N, 1, NULL), 0);
    for (int i = 0; i < N / 2; i++)
        assert_non_null(ks_ack_window_lease_next(&w));
    /* Ack every third leased record (some pop, most stay held). */
    int acked = 0;
    for (int i = 0; i < N / 2; i += 3) {
        assert_int_equal(ks_ack_window_ack(&w, i * 2), KS_ACK_OK);
        acked++;
    }
    assert_int_equal(free_calls, acked);
    for (int i = 0; i < N; i++)
        assert_int_equal(cnt[i], (i < N / 2 && i % 3 == 0) ? 1 : 0);
    ks_ack_window_destroy(&w);
    assert_int_equal(free_calls, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(cnt[i], 1);
    /* A destroyed window is empty and usable again; destroying it twice frees nothing more. */
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), -1);
    ks_ack_window_destroy(&w);
    assert_int_equal(free_calls, N);
    int again = 0;
    assert_int_equal(ks_ack_window_push(&w, 3, 1, &again), 0);
    ks_ack_window_destroy(&w);
    assert_int_equal(again, 1);

    /* With no free_msg nothing is called (and nothing crashes). */
    ks_ack_window_init(&w, NULL);
    assert_int_equal(ks_ack_window_push(&w, 1, 1, &again), 0);
    assert_non_null(ks_ack_window_lease_next(&w));
    assert_int_equal(ks_ack_window_ack(&w, 1), KS_ACK_OK);
    assert_int_equal(ks_ack_window_push(&w, 2, 1, &again), 0);
    ks_ack_window_destroy(&w);
    assert_int_equal(again, 1);
}

/* Checks the held entries are exactly offsets lo..hi step 1, in logical order. */
static void check_run(ks_ack_window_t *w, int64_t lo, int64_t hi)
{
    assert_int_equal(ks_ack_window_count(w), (size_t)(hi - lo + 1));
    for (size_t i = 0; i < ks_ack_window_count(w); i++)
        assert_int_equal(ks_ack_window_at(w, i)->offset, lo + (int64_t)i);
    assert_int_equal(ks_ack_window_find(w, lo), 0);
    assert_int_equal(ks_ack_window_find(w, hi), (long)(hi - lo));
    assert_int_equal(ks_ack_window_find(w, hi + 1), -1);
    assert_int_equal(ks_ack_window_find(w, lo - 1), -1);
}

static void test_ring_growth_and_wrap(void **state)
{
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);

    /* Far past 64 entries in one go, acked backwards: the point holds until the very last. */
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ks_ack_window_push(&w, i, 1, NULL), 0);
    check_run(&w, 0, 999);
    assert_int_equal(lease_all(&w), 1000);
    for (int i = 999; i >= 1; i--) {
        assert_int_equal(ks_ack_window_ack(&w, i), KS_ACK_OK);
        assert_int_equal(ks_ack_window_commit_point(&w), 0);
    }
    assert_int_equal(ks_ack_window_count(&w), 1000);
    assert_int_equal(ks_ack_window_ack(&w, 0), KS_ACK_OK);
    assert_int_equal(ks_ack_window_commit_point(&w), 1000);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_ack_window_destroy(&w);

    /* A sliding window of 50 (fits the first ring of 64): head wraps many times. */
    ks_ack_window_init(&w, NULL);
    const int K = 50;
    int64_t next = 0;
    for (int step = 0; step < 20000; step++, next++) {
        assert_int_equal(ks_ack_window_push(&w, next, 1, NULL), 0);
        ks_win_entry_t *e = ks_ack_window_lease_next(&w);
        assert_non_null(e);
        assert_int_equal(e->offset, next);
        if (next >= K) {
            assert_int_equal(ks_ack_window_ack(&w, next - K), KS_ACK_OK);
            assert_int_equal(ks_ack_window_commit_point(&w), next - K + 1);
            assert_int_equal(ks_ack_window_count(&w), (size_t)K);
        }
        if (step % 997 == 0 && next >= K)
            check_run(&w, next - K + 1, next);
    }
    /* Now widen it to 300 while the head sits mid-ring: growth must keep the order. */
    int64_t lo = next - K;
    for (int i = 0; i < 250; i++, next++) {
        assert_int_equal(ks_ack_window_push(&w, next, 1, NULL), 0);
        assert_non_null(ks_ack_window_lease_next(&w));
    }
    check_run(&w, lo, next - 1);
    assert_int_equal(ks_ack_window_leased(&w), 300);
    /* Slide the wide window too, acking out of order inside it. */
    for (int step = 0; step < 20000; step++, next++) {
        assert_int_equal(ks_ack_window_push(&w, next, 1, NULL), 0);
        assert_non_null(ks_ack_window_lease_next(&w));
        if (step % 2 == 0) {
            /* ack the second-lowest first, then the lowest on the next step */
            assert_int_equal(ks_ack_window_ack(&w, lo + 1), KS_ACK_OK);
            assert_int_equal(ks_ack_window_commit_point(&w), lo);
        } else {
            assert_int_equal(ks_ack_window_ack(&w, lo), KS_ACK_OK);
            lo += 2;
            assert_int_equal(ks_ack_window_commit_point(&w), lo);
            check_run(&w, lo, next);
        }
    }
    ks_ack_window_destroy(&w);
}

/* A ring that held a large backlog gives its capacity back once few entries are left, keeping
 * their order, states and the next ready entry, with the head wrapped mid-ring. */
static void test_compact_gives_back(void **state)
{
    (void)state;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    /* Not worth moving: a small ring, or one still an eighth full. */
    for (int i = 0; i < 100; i++)
        assert_int_equal(ks_ack_window_push(&w, i, 1, NULL), 0);
    assert_false(ks_ack_window_compact(&w));
    int64_t next = 100;
    for (; next < 20000; next++)
        assert_int_equal(ks_ack_window_push(&w, next, 1, NULL), 0);
    assert_int_equal(w.cap, 32768);
    assert_int_equal(lease_all(&w), 20000);
    /* Ack all but the last 3,000: an eighth of 32,768 is 4,096, so it moves. */
    for (int64_t o = 0; o < 17000; o++)
        assert_int_equal(ks_ack_window_ack(&w, o), KS_ACK_OK);
    assert_false(w.head == 0); /* the head sits mid-ring */
    /* Three more records arrive unleased; one of the leased is acked out of order. */
    for (int i = 0; i < 3; i++, next++)
        assert_int_equal(ks_ack_window_push(&w, next, 1, NULL), 0);
    assert_int_equal(ks_ack_window_ack(&w, 18000), KS_ACK_OK);
    size_t held = ks_ack_window_count(&w);
    assert_int_equal(held, 3003);
    assert_true(ks_ack_window_compact(&w));
    assert_int_equal(w.cap, 8192); /* the power of two at or above twice 3,003 */
    assert_int_equal(w.head, 0);
    assert_int_equal(ks_ack_window_count(&w), held);
    for (size_t i = 0; i < held; i++) {
        ks_win_entry_t *e = ks_ack_window_at(&w, i);
        assert_int_equal(e->offset, 17000 + (int64_t)i);
        assert_int_equal(e->state, e->offset == 18000   ? KS_REC_ACKED
                                   : e->offset >= 20000 ? KS_REC_READY
                                                        : KS_REC_LEASED);
    }
    assert_int_equal(ks_ack_window_find(&w, 18500), 1500);
    assert_int_equal(ks_ack_window_commit_point(&w), 17000);
    ks_win_entry_t *e = ks_ack_window_lease_next(&w);
    assert_non_null(e);
    assert_int_equal(e->offset, 20000);
    /* Empty: down to the kept capacity, and it grows again as records come. */
    for (int64_t o = 17000; o < 20001; o++)
        if (o != 18000)
            assert_int_equal(ks_ack_window_ack(&w, o), KS_ACK_OK);
    assert_int_equal(ks_ack_window_count(&w), 2);
    assert_true(ks_ack_window_compact(&w));
    assert_int_equal(w.cap, KS_WIN_RING_KEEP);
    assert_false(ks_ack_window_compact(&w));
    for (int i = 0; i < 5000; i++, next++)
        assert_int_equal(ks_ack_window_push(&w, next, 1, NULL), 0);
    check_run(&w, 20001, next - 1);
    ks_ack_window_destroy(&w);
}

static void test_leased_count(void **state)
{
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    for (int i = 0; i < 10; i++)
        assert_int_equal(ks_ack_window_push(&w, i, 1, NULL), 0);
    assert_int_equal(ks_ack_window_leased(&w), 0);
    for (int i = 0; i < 4; i++)
        assert_non_null(ks_ack_window_lease_next(&w));
    assert_int_equal(ks_ack_window_leased(&w), 4);
    assert_int_equal(ks_ack_window_ack(&w, 2), KS_ACK_OK);
    assert_int_equal(ks_ack_window_leased(&w), 3);
    assert_int_equal(ks_ack_window_ack(&w, 0), KS_ACK_OK); /* pops 0, not 1 */
    assert_int_equal(ks_ack_window_leased(&w), 2);
    assert_int_equal(ks_ack_window_count(&w), 9);
    /* Leasing resumes at the first READY record even after pops shifted the indexes. */
    ks_win_entry_t *e = ks_ack_window_lease_next(&w);
    assert_non_null(e);
    assert_int_equal(e->offset, 4);
    assert_int_equal(ks_ack_window_ack(&w, 1), KS_ACK_OK); /* pops 1, 2 */
    e = ks_ack_window_lease_next(&w);
    assert_non_null(e);
    assert_int_equal(e->offset, 5);
    assert_int_equal(ks_ack_window_leased(&w), 3);
    for (int i = 0; i < 4; i++)
        assert_non_null(ks_ack_window_lease_next(&w));
    assert_null(ks_ack_window_lease_next(&w));
    assert_int_equal(ks_ack_window_leased(&w), 7);
    assert_int_equal(ks_ack_window_leased(&w), ks_ack_window_count(&w));
    ks_ack_window_destroy(&w);
}

/* meta_end: one past the highest offset given an attempt (leased) or an ack (done), the
 * end of what the commit metadata holds; pushing alone moves it not, a reset clears it. */
static void test_meta_end_follows_attempts(void **state)
{
    (void)state;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    assert_int_equal(w.meta_end, -1);
    for (int64_t o = 100; o < 110; o++)
        assert_int_equal(ks_ack_window_push(&w, o, 1, NULL), 0);
    assert_int_equal(w.meta_end, -1);
    assert_non_null(ks_ack_window_lease_next(&w));
    assert_int_equal(w.meta_end, 101);
    assert_non_null(ks_ack_window_lease_next(&w));
    assert_int_equal(w.meta_end, 102);
    assert_int_equal(ks_ack_window_push_done(&w, 115), 0);
    assert_int_equal(w.meta_end, 116);
    /* A lower one leaves it. */
    ks_ack_window_touched(&w, 105);
    assert_int_equal(w.meta_end, 116);
    ks_ack_window_destroy(&w);
    assert_int_equal(w.meta_end, -1);
}

static void test_push_done_and_get(void **state)
{
    int cnt[3] = {0};
    ks_ack_window_t w;
    ks_ack_window_init(&w, count_free);

    /* A done record on an empty window moves the point straight past it. */
    assert_int_equal(ks_ack_window_push_done(&w, 5), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), 6);
    assert_int_equal(ks_ack_window_count(&w), 0);
    assert_int_equal(ks_ack_window_push_done(&w, 5), -1);
    assert_int_equal(ks_ack_window_push(&w, 5, 1, NULL), -1);
    assert_int_equal(ks_ack_window_ack(&w, 5), KS_ACK_DUPLICATE);

    /* Done records between pending ones: never leased, never block the point. */
    assert_int_equal(ks_ack_window_push(&w, 10, 100, &cnt[0]), 0);
    assert_int_equal(ks_ack_window_push_done(&w, 11), 0);
    assert_int_equal(ks_ack_window_push_done(&w, 13), 0);
    assert_int_equal(ks_ack_window_push(&w, 14, 100, &cnt[1]), 0);
    assert_int_equal(ks_ack_window_push(&w, 15, 100, &cnt[2]), 0);
    assert_int_equal(ks_ack_window_push_done(&w, 15), -1);
    assert_int_equal(ks_ack_window_count(&w), 5);
    assert_int_equal(ks_ack_window_bytes(&w), 300);
    assert_int_equal(ks_ack_window_commit_point(&w), 10);

    ks_win_entry_t *e = ks_ack_window_get(&w, 11);
    assert_non_null(e);
    assert_int_equal(e->offset, 11);
    assert_int_equal(e->state, KS_REC_ACKED);
    assert_null(e->msg);
    assert_null(ks_ack_window_get(&w, 12)); /* gap */
    assert_null(ks_ack_window_get(&w, 16)); /* beyond */
    assert_null(ks_ack_window_get(&w, 5));  /* gone */
    e = ks_ack_window_get(&w, 14);
    assert_non_null(e);
    assert_int_equal(e->state, KS_REC_READY);
    assert_ptr_equal(e->msg, &cnt[1]);
    assert_int_equal(e->bytes, 100);
    assert_int_equal(ks_ack_window_ack(&w, 11), KS_ACK_DUPLICATE);
    assert_int_equal(ks_ack_window_ack(&w, 12), KS_ACK_UNKNOWN_OFFSET);

    e = ks_ack_window_lease_next(&w);
    assert_non_null(e);
    assert_int_equal(e->offset, 10);
    e = ks_ack_window_lease_next(&w);
    assert_non_null(e);
    assert_int_equal(e->offset, 14); /* 11 and 13 are skipped */
    assert_int_equal(ks_ack_window_ack(&w, 14), KS_ACK_OK);
    assert_int_equal(ks_ack_window_commit_point(&w), 10);
    assert_int_equal(ks_ack_window_ack(&w, 10), KS_ACK_OK);
    /* 10, 11, 13, 14 done: the point stops at 15 */
    assert_int_equal(ks_ack_window_commit_point(&w), 15);
    assert_int_equal(ks_ack_window_count(&w), 1);
    assert_int_equal(ks_ack_window_bytes(&w), 100);
    e = ks_ack_window_lease_next(&w);
    assert_non_null(e);
    assert_int_equal(e->offset, 15);
    assert_null(ks_ack_window_lease_next(&w));
    assert_int_equal(ks_ack_window_push_done(&w, 16), 0);
    assert_int_equal(ks_ack_window_commit_point(&w), 15);
    assert_int_equal(ks_ack_window_ack(&w, 15), KS_ACK_OK);
    assert_int_equal(ks_ack_window_commit_point(&w), 17);
    assert_int_equal(ks_ack_window_count(&w), 0);
    ks_ack_window_destroy(&w);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cnt[i], 1);
}

/* ---- randomized model check ------------------------------------------------------------ */

enum { M_NONE = 0, M_READY, M_LEASED, M_ACKED, M_DONE /* pushed with push_done */ };

#define M_IS_DONE(st) ((st) == M_ACKED || (st) == M_DONE)

typedef struct {
    unsigned char *st; /* model state by offset */
    uint32_t *bytes;   /* bytes by offset */
    int *freed;        /* free_msg calls by offset (the msgs point here) */
    int64_t *pushed;   /* pushed offsets in order */
    size_t npushed;
    size_t lo;       /* index in pushed of the lowest not-acked record */
    size_t ready;    /* index in pushed of the lowest READY record */
    int64_t *leased; /* offsets in LEASED state, unordered */
    size_t nleased;
    int64_t held_bytes;
    int64_t maxoff;
} model_t;

static int64_t model_commit(const model_t *m)
{
    if (m->npushed == 0)
        return -1;
    if (m->lo < m->npushed)
        return m->pushed[m->lo];
    return m->pushed[m->npushed - 1] + 1;
}

static void model_ack(model_t *m, int64_t off)
{
    if (m->st[off] != M_DONE) {
        m->st[off] = M_ACKED;
        m->held_bytes -= m->bytes[off];
    }
    while (m->lo < m->npushed && M_IS_DONE(m->st[m->pushed[m->lo]]))
        m->lo++;
}

static void check_against_model(ks_ack_window_t *w, const model_t *m, bool full)
{
    int64_t cp = model_commit(m);
    assert_int_equal(ks_ack_window_commit_point(w), cp);
    assert_int_equal(ks_ack_window_count(w), m->npushed - m->lo);
    assert_int_equal(ks_ack_window_bytes(w), m->held_bytes);
    if (!full)
        return;
    assert_int_equal(ks_ack_window_leased(w), m->nleased);
    /* The invariant itself: the commit point never passes an unacked record. */
    for (size_t i = 0; i < m->npushed; i++) {
        int64_t o = m->pushed[i];
        if (!M_IS_DONE(m->st[o]) && ks_ack_window_commit_point(w) > o)
            fail_msg("commit point %lld skips unacked offset %lld",
                     (long long)ks_ack_window_commit_point(w), (long long)o);
        assert_int_equal(m->freed[o], m->st[o] == M_ACKED ? 1 : 0);
    }
    /* Held entries mirror the model's states. */
    for (size_t i = 0; i < ks_ack_window_count(w); i++) {
        ks_win_entry_t *e = ks_ack_window_at(w, i);
        assert_int_equal(e->offset, m->pushed[m->lo + i]);
        int ms = m->st[e->offset] == M_DONE ? M_ACKED : m->st[e->offset];
        int ws = e->state == KS_REC_READY    ? M_READY
                 : e->state == KS_REC_LEASED ? M_LEASED
                 : e->state == KS_REC_ACKED  ? M_ACKED
                                             : -1;
        assert_int_equal(ws, ms);
        assert_ptr_equal(ks_ack_window_get(w, e->offset), e);
    }
}

static void run_random(unsigned seed, int steps)
{
    srand(seed);
    model_t m;
    memset(&m, 0, sizeof(m));
    m.maxoff = (int64_t)steps * 3 + 16;
    m.st = calloc((size_t)m.maxoff, 1);
    m.bytes = calloc((size_t)m.maxoff, sizeof(uint32_t));
    m.freed = calloc((size_t)m.maxoff, sizeof(int));
    m.pushed = calloc((size_t)steps + 1, sizeof(int64_t));
    m.leased = calloc((size_t)steps + 1, sizeof(int64_t));
    assert_true(m.st && m.bytes && m.freed && m.pushed && m.leased);

    ks_ack_window_t w;
    ks_ack_window_init(&w, count_free);
    int64_t last = -1;
    for (int step = 0; step < steps; step++) {
        int r = rand() % 100;
        /* Every so often, drain completely so the all-acked state (point = end) is exercised. */
        if (step % 1500 == 1499) {
            ks_win_entry_t *le;
            while ((le = ks_ack_window_lease_next(&w)) != NULL) {
                while (m.st[m.pushed[m.ready]] == M_DONE)
                    m.ready++;
                int64_t o = m.pushed[m.ready++];
                assert_int_equal(le->offset, o);
                m.st[o] = M_LEASED;
                m.leased[m.nleased++] = o;
            }
            while (m.nleased > 0) {
                size_t k = (size_t)rand() % m.nleased;
                int64_t o = m.leased[k];
                m.leased[k] = m.leased[--m.nleased];
                assert_int_equal(ks_ack_window_ack(&w, o), KS_ACK_OK);
                model_ack(&m, o);
                check_against_model(&w, &m, false);
            }
            assert_int_equal(ks_ack_window_count(&w), 0);
            assert_int_equal(ks_ack_window_commit_point(&w), last + 1);
        } else if (r < 4) {
            /* a record already done before a restart (commit metadata said so) */
            int64_t off = last < 0 ? rand() % 4 : last + 1 + rand() % 3;
            assert_int_equal(ks_ack_window_push_done(&w, off), 0);
            m.st[off] = M_DONE;
            m.pushed[m.npushed++] = off;
            last = off;
            model_ack(&m, off);
        } else if (r < 40) {
            if (m.npushed - m.lo >= 700)
                continue; /* keep the window bounded, like the real loop does */
            int64_t off = last < 0 ? rand() % 4 : last + 1 + rand() % 3;
            /* now and then, a push that must be refused */
            if (last >= 0 && rand() % 10 == 0) {
                int64_t badoff = last - rand() % 3;
                assert_int_equal(ks_ack_window_push(&w, badoff, 1, &m.freed[0]), -1);
            }
            uint32_t b = (uint32_t)(1 + rand() % 1000);
            assert_int_equal(ks_ack_window_push(&w, off, b, &m.freed[off]), 0);
            m.st[off] = M_READY;
            m.bytes[off] = b;
            m.pushed[m.npushed++] = off;
            m.held_bytes += b;
            last = off;
        } else if (r < 65) {
            ks_win_entry_t *e = ks_ack_window_lease_next(&w);
            while (m.ready < m.npushed && m.st[m.pushed[m.ready]] == M_DONE)
                m.ready++;
            if (m.ready >= m.npushed) {
                assert_null(e);
            } else {
                int64_t o = m.pushed[m.ready++];
                assert_non_null(e);
                assert_int_equal(e->offset, o);
                assert_int_equal(e->attempts, 1);
                assert_ptr_equal(e->msg, &m.freed[o]);
                m.st[o] = M_LEASED;
                m.leased[m.nleased++] = o;
            }
        } else if (r < 92) {
            if (m.nleased == 0)
                continue;
            size_t k = (size_t)rand() % m.nleased;
            int64_t o = m.leased[k];
            m.leased[k] = m.leased[--m.nleased];
            assert_int_equal(ks_ack_window_ack(&w, o), KS_ACK_OK);
            model_ack(&m, o);
            assert_int_equal(m.freed[o], 1);
        } else {
            /* An ack of an arbitrary offset near the window: the answer must fit the model. */
            if (last < 0)
                continue;
            int64_t cp = model_commit(&m);
            int64_t o = cp - 5 + rand() % (int)(last - cp + 12);
            if (o < 0 || o >= m.maxoff)
                continue;
            ks_win_ack_t got = ks_ack_window_ack(&w, o);
            switch (m.st[o]) {
            case M_DONE:
            case M_ACKED:
                assert_int_equal(got, KS_ACK_DUPLICATE);
                break;
            case M_READY:
                assert_int_equal(got, KS_ACK_NOT_DELIVERED);
                break;
            case M_LEASED:
                assert_int_equal(got, KS_ACK_OK);
                for (size_t k = 0; k < m.nleased; k++) {
                    if (m.leased[k] == o) {
                        m.leased[k] = m.leased[--m.nleased];
                        break;
                    }
                }
                model_ack(&m, o);
                break;
            default:
                /* Never pushed. Above the commit point it is a gap or beyond the end; below
                 * it the window cannot tell a gap from a committed record. */
                if (o > cp || o > last)
                    assert_int_equal(got, KS_ACK_UNKNOWN_OFFSET);
                else
                    assert_true(got == KS_ACK_UNKNOWN_OFFSET || got == KS_ACK_DUPLICATE);
                break;
            }
        }
        check_against_model(&w, &m, step % 101 == 0);
    }
    check_against_model(&w, &m, true);
    ks_ack_window_destroy(&w);
    /* Every pushed msg freed exactly once; nothing else touched. */
    for (int64_t o = 0; o < m.maxoff; o++)
        assert_int_equal(m.freed[o], (m.st[o] == M_NONE || m.st[o] == M_DONE) ? 0 : 1);
    free(m.st);
    free(m.bytes);
    free(m.freed);
    free(m.pushed);
    free(m.leased);
}

static void test_randomized_model(void **state)
{
    static const unsigned seeds[] = {42, 1, 7, 1234, 99991};
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        run_random(seeds[i], 30000);
}

/* The record-state whitelist: an acked record never moves again (a duplicate ack of it is
 * answered, and it is never leased or requeued), a record being dead-lettered is not
 * leased or dead-lettered twice, and the moves the engine makes are all allowed. */
static void test_rec_state_whitelist(void **state)
{
    (void)state;
    ks_ack_window_t w;
    ks_ack_window_init(&w, NULL);
    assert_int_equal(ks_ack_window_push(&w, 10, 1, NULL), 0);
    ks_win_entry_t *e = ks_ack_window_get(&w, 10);
    /* ready -> leased -> delayed -> ready -> leased -> dead-lettering -> delayed (retry) */
    assert_true(ks_rec_move(e, KS_REC_LEASED));
    assert_true(ks_rec_move(e, KS_REC_DELAYED));
    assert_true(ks_rec_move(e, KS_REC_READY));
    assert_true(ks_rec_move(e, KS_REC_LEASED));
    assert_true(ks_rec_move(e, KS_REC_LEASED)); /* a held lease granted */
    assert_true(ks_rec_move(e, KS_REC_DEAD_LETTERING));
    assert_false(ks_rec_move(e, KS_REC_LEASED));
    assert_false(ks_rec_move(e, KS_REC_DEAD_LETTERING));
    assert_int_equal(e->state, KS_REC_DEAD_LETTERING);
    assert_true(ks_rec_move(e, KS_REC_DELAYED));
    assert_true(ks_rec_move(e, KS_REC_DEAD_LETTERING));
    assert_true(ks_rec_move(e, KS_REC_ACKED)); /* the dead-letter produce landed */
    for (unsigned to = KS_REC_READY; to <= KS_REC_DEAD_LETTERING; to++) {
        assert_false(ks_rec_move(e, (ks_rec_state_t)to));
        assert_int_equal(e->state, KS_REC_ACKED);
    }
    assert_false(ks_rec_move_allowed(KS_REC_DEAD_LETTERING + 1, KS_REC_READY));
    ks_ack_window_destroy(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_window),
        cmocka_unit_test(test_commit_point_out_of_order),
        cmocka_unit_test(test_commit_point_with_gaps),
        cmocka_unit_test(test_ack_errors),
        cmocka_unit_test(test_push_order),
        cmocka_unit_test(test_bytes_accounting),
        cmocka_unit_test(test_free_msg_exactly_once),
        cmocka_unit_test(test_ring_growth_and_wrap),
        cmocka_unit_test(test_compact_gives_back),
        cmocka_unit_test(test_leased_count),
        cmocka_unit_test(test_push_done_and_get),
        cmocka_unit_test(test_meta_end_follows_attempts),
        cmocka_unit_test(test_randomized_model),
        cmocka_unit_test(test_rec_state_whitelist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
