/* rec_pool.c: see rec_pool.h. */
#include "rec_pool.h"

#include <stdbool.h>
#include <stdlib.h>

#define CLASSES (KS_REC_POOL_MAX_BLOCK / KS_REC_POOL_GRAIN)

/* A cached block's first bytes link it to the next of its class. */
typedef struct free_block {
    struct free_block *next;
} free_block_t;

static _Thread_local struct {
    bool on;
    size_t held, max;
    free_block_t *head[CLASSES + 1]; /* by class: blocks of class x KS_REC_POOL_GRAIN bytes */
} pool;

void ks_rec_pool_start(size_t max_bytes)
{
    pool.on = true;
    pool.max = max_bytes;
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
    pool.held = 0;
    pool.on = false;
}

void *ks_rec_pool_alloc(size_t n, uint16_t *cls)
{
    size_t c = (n + KS_REC_POOL_GRAIN - 1) / KS_REC_POOL_GRAIN;
    if (c == 0)
        c = 1;
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
        return b;
    }
    void *p = malloc(c * KS_REC_POOL_GRAIN);
    if (!p)
        abort();
    return p;
}

void ks_rec_pool_free(void *p, uint16_t cls)
{
    if (!p)
        return;
    size_t sz = (size_t)cls * KS_REC_POOL_GRAIN;
    if (!pool.on || cls == 0 || cls > CLASSES || pool.held + sz > pool.max) {
        free(p);
        return;
    }
    free_block_t *b = p;
    b->next = pool.head[cls];
    pool.head[cls] = b;
    pool.held += sz;
}

int64_t ks_rec_pool_held(void)
{
    return (int64_t)pool.held;
}
