/* rec_pool.h: a thread's cache of freed record copies, by size. A group loop makes and frees
 * a copy per record, thousands at a time (a window's burst in, an ack batch out), and glibc's
 * per-thread cache keeps 7 blocks a size: past them each malloc took ~420 instructions and
 * each free ~200 on that path (callgrind, 100-byte records). Blocks are plain malloc blocks of
 * a whole number of grains, so any thread may free one with ks_rec_pool_free; a thread that
 * has not started a cache, or a block above KS_REC_POOL_MAX_BLOCK, goes to malloc and free.
 * The caches of all threads together are bounded in bytes, and each group tells what its
 * loop's cache holds to the memory budget. */
#ifndef KS_REC_POOL_H
#define KS_REC_POOL_H

#include <stddef.h>
#include <stdint.h>

#define KS_REC_POOL_GRAIN     16
#define KS_REC_POOL_MAX_BLOCK 4096

/* This thread keeps freed blocks from now on, while all threads' caches together hold at
 * most max_bytes (the bound of the latest start). */
void ks_rec_pool_start(size_t max_bytes);
/* Frees what this thread keeps; it keeps nothing from now on. */
void ks_rec_pool_stop(void);

/* A block of at least n bytes (never NULL: aborts when out of memory); *cls is what
 * ks_rec_pool_free needs back (0: a block of no class, freed with free). A block of class
 * c is a malloc chunk of c x KS_REC_POOL_GRAIN bytes, header included. */
void *ks_rec_pool_alloc(size_t n, uint16_t *cls);
/* Keeps p in this thread's cache if it has room, else frees it. */
void ks_rec_pool_free(void *p, uint16_t cls);

/* Bytes this thread's cache holds now. */
int64_t ks_rec_pool_held(void);

#endif
