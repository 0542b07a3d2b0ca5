/* pstate.h: the per-partition state machine and its whitelist of transitions. */
#ifndef KS_PSTATE_H
#define KS_PSTATE_H

#include <stdbool.h>

/* INITIALIZING (restoring the commit and its metadata) -> ACTIVE <-> PAUSED
 * (backpressure) -> REVOKING (draining leases) -> GONE. */
typedef enum {
    KS_PS_INITIALIZING = 0,
    KS_PS_ACTIVE,
    KS_PS_PAUSED,
    KS_PS_REVOKING,
    KS_PS_GONE,
} ks_pstate_t;

const char *ks_pstate_str(ks_pstate_t s);

/* True if from -> to is on the whitelist. */
bool ks_pstate_allowed(ks_pstate_t from, ks_pstate_t to);

/* Moves *cur to `to` if allowed. Returns true if it moved; an illegal request is
 * ignored (false), as the Kafka consumer's fetch state machine does. */
bool ks_pstate_move(ks_pstate_t *cur, ks_pstate_t to);

/* True if records of a partition in this state may be handed out. */
static inline bool ks_pstate_deliverable(ks_pstate_t s)
{
    return s == KS_PS_ACTIVE || s == KS_PS_PAUSED;
}

#endif
