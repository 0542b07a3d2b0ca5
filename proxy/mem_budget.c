/* mem_budget.c: the process's one memory budget for records held, and each partition's share. */
#include "mem_budget.h"

#include <pthread.h>
#include <stdatomic.h>

#include "ack_window.h"

static atomic_long g_parts;
static atomic_llong g_used, g_queued;
/* The groups running and the fetch part they took: one take reads both and adds. */
static pthread_mutex_t g_fetch_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_groups, g_fetch_taken; /* under g_fetch_lock */

int64_t ks_mem_kafka_part(int64_t max_bytes)
{
    return max_bytes / 4;
}

int64_t ks_mem_window_part(int64_t max_bytes)
{
    return max_bytes - ks_mem_kafka_part(max_bytes);
}

int64_t ks_mem_window_share(int64_t max_bytes, size_t parts)
{
    int64_t w = ks_mem_window_part(max_bytes);
    int64_t share = w / (int64_t)(parts ? parts : 1);
    if (share < KS_MEM_WINDOW_FLOOR)
        share = KS_MEM_WINDOW_FLOOR;
    return share;
}

/* librdkafka's limit counts key and value bytes only, but each record it holds costs
 * KS_MEM_KAFKA_RECORD_OVERHEAD more: for 100-byte records (the costly case) the limit
 * gets 100 / (100 + overhead) of the per-partition part. */
static int64_t kafka_per_part(int64_t max_bytes)
{
    int64_t part = ks_mem_kafka_part(max_bytes) / KS_MEM_KAFKA_PARTS;
    return part * 100 / (100 + KS_MEM_KAFKA_RECORD_OVERHEAD);
}

int64_t ks_mem_kafka_queue_kbytes(int64_t max_bytes)
{
    /* librdkafka counts queued.max.messages.kbytes in units of 1000 bytes. */
    int64_t kb = kafka_per_part(max_bytes) / 1000;
    if (kb < 1)
        kb = 1;
    return kb > 2048 ? 2048 : kb;
}

int64_t ks_mem_record_overhead(void)
{
    /* entry + the copy's header + malloc's chunk header and rounding + sched ring slot */
    return (int64_t)sizeof(ks_win_entry_t) + KS_MEM_REC_HEADER + 16 + (int64_t)sizeof(int64_t);
}

bool ks_mem_pressed(int64_t max_bytes)
{
    return (ks_mem_used() + ks_mem_queued()) * 4 >= max_bytes;
}

bool ks_mem_over(int64_t max_bytes)
{
    return (ks_mem_used() + ks_mem_queued()) * 16 > max_bytes * 5;
}

bool ks_mem_fetch_fits(int64_t max_bytes, int64_t cost)
{
    return (ks_mem_used() + ks_mem_queued() + cost) * 4 <= max_bytes;
}

void ks_mem_parts_add(long delta)
{
    atomic_fetch_add(&g_parts, delta);
}

size_t ks_mem_parts(void)
{
    long n = atomic_load(&g_parts);
    return n > 0 ? (size_t)n : 0;
}

void ks_mem_used_add(int64_t delta)
{
    atomic_fetch_add(&g_used, (long long)delta);
}

int64_t ks_mem_used(void)
{
    return (int64_t)atomic_load(&g_used);
}

void ks_mem_queued_add(int64_t delta)
{
    atomic_fetch_add(&g_queued, (long long)delta);
}

int64_t ks_mem_queued(void)
{
    return (int64_t)atomic_load(&g_queued);
}

int64_t ks_mem_fetch_part(int64_t max_bytes)
{
    return ks_mem_kafka_part(max_bytes) / 2;
}

int64_t ks_mem_fetch_take(int64_t max_bytes, size_t static_groups)
{
    pthread_mutex_lock(&g_fetch_lock);
    int64_t running = ++g_groups;
    int64_t part = ks_mem_fetch_part(max_bytes);
    int64_t n = running > (int64_t)static_groups ? running : (int64_t)static_groups;
    int64_t size = part / n, left = part - g_fetch_taken;
    if (size > left)
        size = left;
    if (size > KS_MEM_FETCH_CAP)
        size = KS_MEM_FETCH_CAP;
    if (size < KS_MEM_FETCH_FLOOR)
        size = KS_MEM_FETCH_FLOOR;
    g_fetch_taken += size;
    pthread_mutex_unlock(&g_fetch_lock);
    return size;
}

void ks_mem_fetch_give(int64_t bytes)
{
    pthread_mutex_lock(&g_fetch_lock);
    g_fetch_taken -= bytes;
    g_groups--;
    pthread_mutex_unlock(&g_fetch_lock);
}

int64_t ks_mem_fetch_part_bytes(int64_t fetch_max_bytes)
{
    int64_t b = fetch_max_bytes / 2;
    return b > (INT64_C(1) << 20) ? INT64_C(1) << 20 : b;
}
