/* test_hold_back.c: the scheduler and the window of a partition whose commit metadata
 * overflows (issue 10 part 1): records below the cut go out, lowest first; only those above wait.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ack_window.h"
#include "commit_meta.h"
#include "key_sched.h"

#define CP0   1000 /* the restored commit point */
#define END   3000 /* the fetch position */
#define NKEYS 97

/* Encodes w's metadata as the group loop's build_meta does (acks above the commit point,
 * attempt counts of delivered records not acked) into max_bytes. Returns the cut, or -1. */
static int64_t meta_cut(ks_ack_window_t *w, size_t max_bytes)
{
    int64_t cp = ks_ack_window_commit_point(w);
    size_t n = (size_t)(w->end_offset - cp) + 1;
    ks_commit_meta_t m = {.commit_offset = cp};
    m.acked = malloc(n * sizeof(*m.acked));
    m.attempts = malloc(n * sizeof(*m.attempts));
    assert_non_null(m.acked);
    assert_non_null(m.attempts);
    for (int64_t off = cp; off < w->end_offset; off++) {
        ks_win_entry_t *e = ks_ack_window_get(w, off);
        bool done = !e || e->state == KS_REC_ACKED; /* no entry: acked and dropped */
        if (done && off > cp)
            m.acked[m.acked_cnt++] = off;
        else if (!done && e->attempts >= 1)
            m.attempts[m.attempt_cnt++] = (ks_meta_attempt_t){off, e->attempts};
    }
    char *buf = malloc(max_bytes);
    assert_non_null(buf);
    int64_t cut = -1;
    assert_true(ks_commit_meta_encode(&m, buf, max_bytes, &cut) > 0);
    free(buf);
    free(m.acked);
    free(m.attempts);
    return cut;
}

/* The window right after a crash and restart, as restored from metadata: CP0 itself READY
 * and never delivered (it went out just before the crash, and the commit carrying its attempt
 * count never happened); every tenth record held by the dead client (attempt 1, never acked);
 * records ending in 5 never delivered; the rest acked before the crash. Keys: offset % 97. */
static void restore(ks_key_sched_t *s, ks_ack_window_t *w, size_t *ready)
{
    ks_ack_window_init(w, NULL);
    ks_key_sched_init(s, KS_ORDER_KEY);
    *ready = 0;
    for (int64_t off = CP0; off < END; off++) {
        if (off != CP0 && off % 10 != 0 && off % 10 != 5) {
            assert_int_equal(ks_ack_window_push_done(w, off), 0);
            continue;
        }
        assert_int_equal(ks_ack_window_push(w, off, 100, NULL), 0);
        ks_win_entry_t *e = ks_ack_window_get(w, off);
        if (off != CP0 && off % 10 == 0)
            e->attempts = 1;
        ks_key_sched_add(s, w, e, true, (uint64_t)(off % NKEYS) + 1);
        ++*ready;
    }
}

/* Exactly the stuck state of the issue: held back, the commit point never delivered by this
 * process. A client that acks whatever it gets must drain the partition; while held back,
 * nothing at or above the hold-back offset goes out, and the commit point's record goes first. */
static void test_commit_point_goes_out_while_held_back(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    size_t ready;
    restore(&s, &w, &ready);
    assert_int_equal(ks_ack_window_commit_point(&w), CP0);
    int64_t cut = meta_cut(&w, 128);
    assert_true(cut > CP0); /* over budget: held back */
    int64_t hold = ks_key_sched_hold_from(cut, CP0);
    assert_int_equal(hold, cut);

    size_t delivered = 0, held_deliveries = 0;
    int64_t first = -1;
    for (;;) {
        ks_win_entry_t *e = ks_key_sched_take(&s, &w, hold);
        if (!e)
            break;
        if (first < 0)
            first = e->offset;
        if (e->attempts == 0)
            assert_true(e->offset < hold); /* never a new record above the cut */
        if (hold != KS_HOLD_NONE)
            held_deliveries++;
        e->state = KS_REC_LEASED;
        e->attempts++;
        delivered++;
        ks_key_sched_done(&s, &w, e);
        assert_int_equal(ks_ack_window_ack_entry(&w, e), KS_ACK_OK);
        /* The commit tick: the cut follows the commit point. */
        int64_t cp = ks_ack_window_commit_point(&w);
        hold = ks_key_sched_hold_from(meta_cut(&w, 128), cp);
    }
    assert_int_equal(first, CP0);
    assert_true(held_deliveries > 0);
    assert_int_equal(delivered, ready);
    assert_int_equal(ks_ack_window_commit_point(&w), END);
    assert_int_equal(hold, KS_HOLD_NONE);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

/* While held back, the records below the cut go out lowest first and those above wait:
 * nothing acked, so each key's head only. */
static void test_below_cut_only_lowest_first(void **state)
{
    ks_key_sched_t s;
    ks_ack_window_t w;
    size_t ready;
    restore(&s, &w, &ready);
    int64_t hold = ks_key_sched_hold_from(meta_cut(&w, 128), CP0);
    assert_true(hold > CP0 && hold < END);
    int64_t last = -1;
    size_t n = 0;
    ks_win_entry_t *e;
    while ((e = ks_key_sched_take(&s, &w, hold)) != NULL) {
        assert_true(e->offset > last);
        assert_true(e->offset < hold || e->attempts > 0);
        last = e->offset;
        e->state = KS_REC_LEASED;
        e->attempts++;
        n++;
    }
    assert_true(n > 0);
    /* Some never-delivered record at or above the cut was left for later. */
    bool waiting = false;
    for (int64_t off = hold; off < END && !waiting; off++) {
        ks_win_entry_t *x = ks_ack_window_get(&w, off);
        waiting = x && x->state == KS_REC_READY && x->attempts == 0;
    }
    assert_true(waiting);
    ks_key_sched_destroy(&s);
    ks_ack_window_destroy(&w);
}

static void test_hold_from(void **state)
{
    assert_int_equal(ks_key_sched_hold_from(-1, 5), KS_HOLD_NONE);
    assert_int_equal(ks_key_sched_hold_from(10, 5), 10);
    /* Even a cut at the commit point leaves the commit point's record deliverable. */
    assert_int_equal(ks_key_sched_hold_from(5, 5), 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_point_goes_out_while_held_back),
        cmocka_unit_test(test_below_cut_only_lowest_first),
        cmocka_unit_test(test_hold_from),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
