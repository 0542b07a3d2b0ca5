/* stall.c: the reason a partition is stalled, a pure function of what its loop knows. */
#include "stall.h"

ks_stall_t ks_stall_reason(const ks_stall_in_t *in)
{
    if (in->lag <= 0 || in->idle_ms < in->stall_ms)
        return KS_STALL_NONE;
    if (in->kafka_error)
        return KS_STALL_KAFKA;
    /* Delivered more than once and still unsettled: nacked or expired again and again. */
    if (in->head_attempts > 1)
        return KS_STALL_POISON;
    if (in->held_back)
        return KS_STALL_METADATA;
    if (in->schema_wait)
        return KS_STALL_SCHEMA;
    if (in->memory_paused)
        return KS_STALL_MEMORY;
    if (in->subs == 0)
        return KS_STALL_NO_SUBSCRIBER;
    if (in->subs_credited == 0)
        return KS_STALL_NO_CREDITS;
    return KS_STALL_UNKNOWN;
}

const char *ks_stall_str(ks_stall_t r)
{
    switch (r) {
    case KS_STALL_NONE:
        return "";
    case KS_STALL_KAFKA:
        return "kafka";
    case KS_STALL_POISON:
        return "poison";
    case KS_STALL_METADATA:
        return "metadata";
    case KS_STALL_SCHEMA:
        return "schema_registry";
    case KS_STALL_MEMORY:
        return "memory";
    case KS_STALL_NO_SUBSCRIBER:
        return "no_subscriber";
    case KS_STALL_NO_CREDITS:
        return "no_credits";
    case KS_STALL_UNKNOWN:
        return "unknown";
    }
    return "unknown";
}
