/* test_pstate.c: tests the partition state machine and its whitelist (proxy/pstate.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "pstate.h"

#define NSTATES 5

static const ks_pstate_t all_states[NSTATES] = {KS_PS_INITIALIZING, KS_PS_ACTIVE, KS_PS_PAUSED,
                                                KS_PS_REVOKING, KS_PS_GONE};

/* The expected whitelist, written out independently of the code under test:
 * expected[from][to]. */
static const bool expected[NSTATES][NSTATES] = {
    /*                 INIT   ACTIVE PAUSED REVOKING GONE */
    /* INITIALIZING */ {false, true, false, true, false},
    /* ACTIVE       */ {false, false, true, true, false},
    /* PAUSED       */ {false, true, false, true, false},
    /* REVOKING     */ {false, false, false, false, true},
    /* GONE         */ {false, false, false, false, false},
};

static void test_enum_values(void **state)
{
    /* The table below is indexed by the enum; pin the values it assumes. */
    assert_int_equal(KS_PS_INITIALIZING, 0);
    assert_int_equal(KS_PS_ACTIVE, 1);
    assert_int_equal(KS_PS_PAUSED, 2);
    assert_int_equal(KS_PS_REVOKING, 3);
    assert_int_equal(KS_PS_GONE, 4);
}

static void test_allowed_full_table(void **state)
{
    int n_allowed = 0;
    for (int f = 0; f < NSTATES; f++) {
        for (int t = 0; t < NSTATES; t++) {
            bool got = ks_pstate_allowed(all_states[f], all_states[t]);
            if (got != expected[f][t])
                fail_msg("ks_pstate_allowed(%s, %s) = %d, expected %d",
                         ks_pstate_str(all_states[f]), ks_pstate_str(all_states[t]), got,
                         expected[f][t]);
            n_allowed += got;
        }
    }
    assert_int_equal(n_allowed, 7);
}

static void test_allowed_named_edges(void **state)
{
    /* The whitelist, edge by edge. */
    assert_true(ks_pstate_allowed(KS_PS_INITIALIZING, KS_PS_ACTIVE));
    assert_true(ks_pstate_allowed(KS_PS_INITIALIZING, KS_PS_REVOKING));
    assert_true(ks_pstate_allowed(KS_PS_ACTIVE, KS_PS_PAUSED));
    assert_true(ks_pstate_allowed(KS_PS_ACTIVE, KS_PS_REVOKING));
    assert_true(ks_pstate_allowed(KS_PS_PAUSED, KS_PS_ACTIVE));
    assert_true(ks_pstate_allowed(KS_PS_PAUSED, KS_PS_REVOKING));
    assert_true(ks_pstate_allowed(KS_PS_REVOKING, KS_PS_GONE));

    /* A few notable refusals. */
    assert_false(ks_pstate_allowed(KS_PS_INITIALIZING, KS_PS_PAUSED));
    assert_false(ks_pstate_allowed(KS_PS_INITIALIZING, KS_PS_GONE));
    assert_false(ks_pstate_allowed(KS_PS_ACTIVE, KS_PS_GONE));
    assert_false(ks_pstate_allowed(KS_PS_ACTIVE, KS_PS_INITIALIZING));
    assert_false(ks_pstate_allowed(KS_PS_PAUSED, KS_PS_GONE));
    assert_false(ks_pstate_allowed(KS_PS_REVOKING, KS_PS_ACTIVE));
    assert_false(ks_pstate_allowed(KS_PS_REVOKING, KS_PS_PAUSED));
}

static void test_no_self_transitions(void **state)
{
    for (int i = 0; i < NSTATES; i++)
        assert_false(ks_pstate_allowed(all_states[i], all_states[i]));
}

static void test_gone_is_terminal(void **state)
{
    for (int i = 0; i < NSTATES; i++) {
        assert_false(ks_pstate_allowed(KS_PS_GONE, all_states[i]));
        ks_pstate_t cur = KS_PS_GONE;
        assert_false(ks_pstate_move(&cur, all_states[i]));
        assert_int_equal(cur, KS_PS_GONE);
    }
}

static void test_move_full_table(void **state)
{
    for (int f = 0; f < NSTATES; f++) {
        for (int t = 0; t < NSTATES; t++) {
            ks_pstate_t cur = all_states[f];
            bool moved = ks_pstate_move(&cur, all_states[t]);
            if (moved != expected[f][t])
                fail_msg("ks_pstate_move(%s -> %s) returned %d, expected %d",
                         ks_pstate_str(all_states[f]), ks_pstate_str(all_states[t]), moved,
                         expected[f][t]);
            /* Moves only when allowed; otherwise unchanged. */
            assert_int_equal(cur, moved ? all_states[t] : all_states[f]);
        }
    }
}

static void test_move_lifecycle(void **state)
{
    ks_pstate_t s = KS_PS_INITIALIZING;

    assert_false(ks_pstate_move(&s, KS_PS_PAUSED)); /* must become ACTIVE first */
    assert_int_equal(s, KS_PS_INITIALIZING);
    assert_true(ks_pstate_move(&s, KS_PS_ACTIVE));
    assert_int_equal(s, KS_PS_ACTIVE);
    assert_false(ks_pstate_move(&s, KS_PS_ACTIVE)); /* self-transition refused */
    assert_int_equal(s, KS_PS_ACTIVE);

    /* Backpressure can toggle many times. */
    for (int i = 0; i < 3; i++) {
        assert_true(ks_pstate_move(&s, KS_PS_PAUSED));
        assert_int_equal(s, KS_PS_PAUSED);
        assert_false(ks_pstate_move(&s, KS_PS_PAUSED));
        assert_int_equal(s, KS_PS_PAUSED);
        assert_true(ks_pstate_move(&s, KS_PS_ACTIVE));
        assert_int_equal(s, KS_PS_ACTIVE);
    }

    assert_false(ks_pstate_move(&s, KS_PS_GONE)); /* must drain (REVOKING) first */
    assert_int_equal(s, KS_PS_ACTIVE);
    assert_true(ks_pstate_move(&s, KS_PS_PAUSED));
    assert_true(ks_pstate_move(&s, KS_PS_REVOKING));
    assert_int_equal(s, KS_PS_REVOKING);
    assert_false(ks_pstate_move(&s, KS_PS_ACTIVE)); /* no way back */
    assert_false(ks_pstate_move(&s, KS_PS_INITIALIZING));
    assert_int_equal(s, KS_PS_REVOKING);
    assert_true(ks_pstate_move(&s, KS_PS_GONE));
    assert_int_equal(s, KS_PS_GONE);
    assert_false(ks_pstate_move(&s, KS_PS_INITIALIZING));
    assert_int_equal(s, KS_PS_GONE);

    /* Revoked before it ever became active. */
    s = KS_PS_INITIALIZING;
    assert_true(ks_pstate_move(&s, KS_PS_REVOKING));
    assert_true(ks_pstate_move(&s, KS_PS_GONE));
    assert_int_equal(s, KS_PS_GONE);
}

static void test_str_names(void **state)
{
    assert_string_equal(ks_pstate_str(KS_PS_INITIALIZING), "INITIALIZING");
    assert_string_equal(ks_pstate_str(KS_PS_ACTIVE), "ACTIVE");
    assert_string_equal(ks_pstate_str(KS_PS_PAUSED), "PAUSED");
    assert_string_equal(ks_pstate_str(KS_PS_REVOKING), "REVOKING");
    assert_string_equal(ks_pstate_str(KS_PS_GONE), "GONE");
    /* Out of range: a placeholder, never NULL or out-of-bounds. */
    const char *bad = ks_pstate_str((ks_pstate_t)(KS_PS_GONE + 1));
    assert_non_null(bad);
    assert_string_equal(bad, "?");
    bad = ks_pstate_str((ks_pstate_t)1000);
    assert_non_null(bad);
    assert_string_equal(bad, "?");
}

static void test_deliverable(void **state)
{
    assert_false(ks_pstate_deliverable(KS_PS_INITIALIZING));
    assert_true(ks_pstate_deliverable(KS_PS_ACTIVE));
    assert_true(ks_pstate_deliverable(KS_PS_PAUSED));
    assert_false(ks_pstate_deliverable(KS_PS_REVOKING));
    assert_false(ks_pstate_deliverable(KS_PS_GONE));
    int n = 0;
    for (int i = 0; i < NSTATES; i++)
        n += ks_pstate_deliverable(all_states[i]);
    assert_int_equal(n, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enum_values),         cmocka_unit_test(test_allowed_full_table),
        cmocka_unit_test(test_allowed_named_edges), cmocka_unit_test(test_no_self_transitions),
        cmocka_unit_test(test_gone_is_terminal),    cmocka_unit_test(test_move_full_table),
        cmocka_unit_test(test_move_lifecycle),      cmocka_unit_test(test_str_names),
        cmocka_unit_test(test_deliverable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
