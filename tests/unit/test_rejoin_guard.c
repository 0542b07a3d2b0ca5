/* test_rejoin_guard.c: tests when commits may go out during a cooperative rejoin
 * (proxy/rejoin_guard.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>

#include "rejoin_guard.h"

/* REVOKE, "assign after revoke", rejoin, final ASSIGN: commits held from the revoke to the
 * final assign, allowed inside the callbacks. */
static void test_revoke_then_two_assigns(void **state)
{
    (void)state;
    ks_rejoin_guard_t g = {0};
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 0, 1000));
    ks_rejoin_guard_revoke(&g, false, 10);
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 11, 1000));
    assert_true(ks_rejoin_guard_may_commit(&g, true, false, 11, 1000));
    assert_false(ks_rejoin_guard_assign(&g)); /* the assign after revoke: a rejoin follows */
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 20, 1000));
    assert_true(ks_rejoin_guard_assign(&g)); /* the SyncGroup of the rejoin */
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 30, 1000));
    assert_int_equal(g.rebalances, 1);
}

/* A commit answered REBALANCE_IN_PROGRESS holds commits until the next ASSIGN ends the
 * rebalance; inside a revoke's sequence it changes nothing. */
static void test_rebalance_in_progress_answer(void **state)
{
    (void)state;
    ks_rejoin_guard_t g = {0};
    ks_rejoin_guard_rebalancing(&g, 100);
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 101, 1000));
    assert_true(ks_rejoin_guard_may_commit(&g, true, false, 101, 1000));
    assert_true(ks_rejoin_guard_assign(&g)); /* this rebalance's ASSIGN: no rejoin follows */
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 102, 1000));
    assert_int_equal(g.rebalances, 1);

    ks_rejoin_guard_revoke(&g, false, 200);
    ks_rejoin_guard_rebalancing(&g, 201); /* the revoke's "assign after revoke" still comes */
    assert_false(ks_rejoin_guard_assign(&g));
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 202, 1000));
    assert_true(ks_rejoin_guard_assign(&g));
    assert_int_equal(g.rebalances, 2);

    ks_rejoin_guard_rebalancing(&g, 300); /* and the bound still applies */
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 1300, 1000));
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 1301, 1000));
}

/* A rejoin that revokes again keeps commits held until its own final assign. */
static void test_second_revoke_in_the_rejoin(void **state)
{
    (void)state;
    ks_rejoin_guard_t g = {0};
    ks_rejoin_guard_revoke(&g, false, 0);
    assert_false(ks_rejoin_guard_assign(&g));
    ks_rejoin_guard_revoke(&g, false, 5);
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 6, 1000));
    assert_false(ks_rejoin_guard_assign(&g));
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 7, 1000));
    assert_true(ks_rejoin_guard_assign(&g));
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 8, 1000));
    assert_int_equal(g.rebalances, 1);
}

/* A lost assignment rejoins without an assign in between: the next assign ends it. */
static void test_lost_assignment(void **state)
{
    (void)state;
    ks_rejoin_guard_t g = {0};
    ks_rejoin_guard_revoke(&g, true, 0);
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 1, 1000));
    assert_true(ks_rejoin_guard_assign(&g));
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 2, 1000));
}

/* A plain assign (nothing revoked) changes nothing. */
static void test_plain_assign(void **state)
{
    (void)state;
    ks_rejoin_guard_t g = {0};
    assert_false(ks_rejoin_guard_assign(&g));
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 0, 1000));
}

/* Past the bound, commits resume even without the final assign. */
static void test_bound(void **state)
{
    (void)state;
    ks_rejoin_guard_t g = {0};
    ks_rejoin_guard_revoke(&g, false, 100);
    assert_false(ks_rejoin_guard_may_commit(&g, false, false, 1100, 1000));
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 1101, 1000));
    assert_false(g.rejoining);
    assert_true(ks_rejoin_guard_may_commit(&g, false, false, 1102, 1000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_revoke_then_two_assigns),
        cmocka_unit_test(test_second_revoke_in_the_rejoin),
        cmocka_unit_test(test_rebalance_in_progress_answer),
        cmocka_unit_test(test_lost_assignment),
        cmocka_unit_test(test_plain_assign),
        cmocka_unit_test(test_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
