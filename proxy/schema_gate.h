/* schema_gate.h: what a group loop asks before it delivers a record whose key or value is in a
 * schema format: is the schema its id names at hand? The answer comes from the schema
 * registry's cache (codec/registry.h), set up by the daemon; the group loop never waits for the
 * registry: a schema not at hand is fetched on the registry's own thread, the record waits, and
 * the loop is woken when the fetch settles. The decoding itself runs later, on the edge that
 * sends the record (codec/fmt_schema.c). */
#ifndef KS_SCHEMA_GATE_H
#define KS_SCHEMA_GATE_H

#include <stddef.h>
#include <stdint.h>

typedef enum ks_gate {
    KS_GATE_OK,      /* the schema is cached: deliver */
    KS_GATE_WAIT,    /* being fetched, or the registry is unreachable: wait for the wake */
    KS_GATE_UNKNOWN, /* the registry has no such schema: deliver (with a decode error) */
} ks_gate_t;

/* Looks up schema id; for KS_GATE_WAIT, wake(wake_ctx) is called once, from another thread,
 * when the fetch settles (wake NULL: none). err gets the reason of WAIT and UNKNOWN. */
typedef ks_gate_t (*ks_gate_fn)(void *ctx, int32_t id, void (*wake)(void *), void *wake_ctx,
                                char *err, size_t errsize);
/* Forgets every wake registered with wake_ctx; when it returns none runs or will run. */
typedef void (*ks_gate_cancel_fn)(void *ctx, void *wake_ctx);

/* Sets the gate (fn NULL: none, every schema is taken as at hand). Before groups start and
 * after they stop. */
void ks_schema_gate_set(ks_gate_fn fn, ks_gate_cancel_fn cancel, void *ctx);

/* The schema id of data[0..len) if it is in the schema wire format (a 0 byte, 4 bytes of
 * id), else -1. */
int64_t ks_schema_gate_id(const void *data, size_t len);

/* As ks_gate_fn, through the gate set; KS_GATE_OK when none is. */
ks_gate_t ks_schema_gate(int32_t id, void (*wake)(void *), void *wake_ctx, char *err,
                         size_t errsize);
/* Cancels wake_ctx's wakes; nothing when no gate is set. */
void ks_schema_gate_cancel(void *wake_ctx);

#endif
