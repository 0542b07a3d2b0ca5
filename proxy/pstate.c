/* pstate.c: the per-partition state machine and its whitelist of transitions. */
#include "pstate.h"

const char *ks_pstate_str(ks_pstate_t s)
{
    static const char *names[] = {"INITIALIZING", "ACTIVE", "PAUSED", "REVOKING", "GONE"};
    return s <= KS_PS_GONE ? names[s] : "?";
}

bool ks_pstate_allowed(ks_pstate_t from, ks_pstate_t to)
{
    switch (from) {
    case KS_PS_INITIALIZING:
        return to == KS_PS_ACTIVE || to == KS_PS_REVOKING;
    case KS_PS_ACTIVE:
        return to == KS_PS_PAUSED || to == KS_PS_REVOKING;
    case KS_PS_PAUSED:
        return to == KS_PS_ACTIVE || to == KS_PS_REVOKING;
    case KS_PS_REVOKING:
        return to == KS_PS_GONE;
    case KS_PS_GONE:
        return false;
    }
    return false;
}

bool ks_pstate_move(ks_pstate_t *cur, ks_pstate_t to)
{
    if (!ks_pstate_allowed(*cur, to))
        return false;
    *cur = to;
    return true;
}
