/* schema_gate.c: the group loops' schema check (schema_gate.h). */
#include "schema_gate.h"

#include <stdatomic.h>

static ks_gate_fn gate_fn;
static ks_gate_cancel_fn gate_cancel;
static void *gate_ctx;

void ks_schema_gate_set(ks_gate_fn fn, ks_gate_cancel_fn cancel, void *ctx)
{
    gate_fn = fn;
    gate_cancel = cancel;
    gate_ctx = ctx;
    atomic_thread_fence(memory_order_release);
}

int64_t ks_schema_gate_id(const void *data, size_t len)
{
    const unsigned char *p = data;
    if (!p || len < 5 || p[0] != 0)
        return -1;
    return (int32_t)((uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4]);
}

ks_gate_t ks_schema_gate(int32_t id, void (*wake)(void *), void *wake_ctx, char *err,
                         size_t errsize)
{
    if (!gate_fn)
        return KS_GATE_OK;
    return gate_fn(gate_ctx, id, wake, wake_ctx, err, errsize);
}

void ks_schema_gate_cancel(void *wake_ctx)
{
    if (gate_cancel)
        gate_cancel(gate_ctx, wake_ctx);
}
