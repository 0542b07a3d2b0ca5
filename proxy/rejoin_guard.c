/* rejoin_guard.c: holds commits back during librdkafka 2.0.2's cooperative rejoin (see the header).
 */
#include "rejoin_guard.h"

void ks_rejoin_guard_revoke(ks_rejoin_guard_t *g, bool lost, int64_t now_ms)
{
    if (!g->rejoining) {
        g->since_ms = now_ms;
        g->rebalances++;
    }
    g->rejoining = true;
    /* A lost assignment rejoins right after the unassign: no ASSIGN in between. */
    g->assign_rejoins = !lost;
}

void ks_rejoin_guard_rebalancing(ks_rejoin_guard_t *g, int64_t now_ms)
{
    if (g->rejoining)
        return; /* a revoke's sequence already holds commits: keep its state */
    g->since_ms = now_ms;
    g->rebalances++;
    g->rejoining = true;
    g->assign_rejoins = false; /* the ASSIGN of this rebalance ends it */
}

bool ks_rejoin_guard_assign(ks_rejoin_guard_t *g)
{
    if (g->assign_rejoins) {
        g->assign_rejoins = false; /* the rejoin starts after this callback */
        return false;
    }
    bool was = g->rejoining;
    g->rejoining = false;
    return was;
}

bool ks_rejoin_guard_may_commit(ks_rejoin_guard_t *g, bool in_callback, bool joining,
                                int64_t now_ms, int64_t bound_ms)
{
    if (in_callback)
        return true;
    if (!joining) {
        g->joining_since_ms = 0;
    } else {
        if (!g->joining_since_ms)
            g->joining_since_ms = now_ms;
        if (bound_ms <= 0 || now_ms - g->joining_since_ms <= bound_ms)
            return false;
    }
    if (!g->rejoining)
        return true;
    if (bound_ms > 0 && now_ms - g->since_ms > bound_ms) {
        g->rejoining = g->assign_rejoins = false;
        return true;
    }
    return false;
}
