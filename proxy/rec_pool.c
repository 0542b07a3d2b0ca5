/* rec_pool.c: see rec_pool.h. */
#include "rec_pool.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define CLASSES (KS_REC_POOL_MAX_BLOCK / KS_REC_POOL_GRAIN)

/* A cached block's first bytes link it to the next of its class. */
typedef struct free_block {
    struct free_block *next;
} free_block_t;

static _Thread_local struct {
    bool on;
    size_t held;
    free_block_t *head[CLASSES + 1]; /* by class: blocks of class x KS_REC_POOL_GRAIN bytes */
} pool;

/* What every thread's cache holds, and the bound on it (the last start's). */
static _Atomic int64_t all_held;
static _Atomic int64_t all_max;

void ks_rec_pool_start(size_t max_bytes)
{
    pool.on = true;
    atomic_store(&all_max, (int64_t)max_bytes);
}

void ks_rec_pool_stop(void)
{
    for (size_t c = 1; c <= CLASSES; c++) {
        while (pool.head[c]) {
            free_block_t *b = pool.head[c];
            pool.head[c] = b->next;
            free(b);
        }
    }
    atomic_fetch_sub(&all_held, (int64_t)pool.held);
    pool.held = 0;
    pool.on = false;
}

void *ks_rec_pool_alloc(size_t n, uint16_t *cls)
{
    /* A class's blocks are malloc's chunks of class x 16 bytes exactly: 8 of them are
     * malloc's own header, so its rounding wastes nothing more than it did. */
    size_t c = (n + 8 + KS_REC_POOL_GRAIN - 1) / KS_REC_POOL_GRAIN;
    if (c > CLASSES) {
        *cls = 0;
        void *p = malloc(n);
        if (!p)
            abort();
        return p;
    }
    *cls = (uint16_t)c;
    free_block_t *b = pool.head[c];
    if (b) {
        pool.head[c] = b->next;
        pool.held -= c * KS_REC_POOL_GRAIN;
        atomic_fetch_sub_explicit(&all_held, (int64_t)(c * KS_REC_POOL_GRAIN),
                                  memory_order_relaxed);
        return b;
    }
    void *p = malloc(c * KS_REC_POOL_GRAIN - 8);
    if (!p)
        abort();
    return p;
}

void ks_rec_pool_free(void *p, uint16_t cls)
{
    if (!p)
        return;
    size_t sz = (size_t)cls * KS_REC_POOL_GRAIN;
    /* The bound is the process's, over every group's cache: at 64 groups, 64 full caches
     * of their own bound would have kept the budget under pressure with no record held. */
    if (!pool.on || cls == 0 || cls > CLASSES ||
        atomic_load_explicit(&all_held, memory_order_relaxed) + (int64_t)sz >
            atomic_load_explicit(&all_max, memory_order_relaxed)) {
        free(p);
        return;
    }
    free_block_t *b = p;
    b->next = pool.head[cls];
    pool.head[cls] = b;
    pool.held += sz;
    atomic_fetch_add_explicit(&all_held, (int64_t)sz, memory_order_relaxed);
}

int64_t ks_rec_pool_held(void)
{
    return (int64_t)pool.held;
}
