/* mem_budget.h: the process's one memory budget for records held (windows and librdkafka's
 * queues), shared by every group, and each partition's share of it. */
#ifndef KS_MEM_BUDGET_H
#define KS_MEM_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The smallest window share a partition gets, however many are assigned: enough for a
 * few hundred 100-byte records, so every partition still makes progress. Past
 * (window part of the budget) / KS_MEM_WINDOW_FLOOR partitions (3,072 at 256 MiB) the
 * windows together may hold more than the budget: partitions x this floor. */
#define KS_MEM_WINDOW_FLOOR (INT64_C(64) << 10)

/* librdkafka's queue limits are fixed when a group's consumer is made (librdkafka 2.0.2
 * copies its config into the handle and derives queued_max_msg_bytes once, in rd_kafka_new;
 * no call changes them later), so its part is split as if this many partitions were
 * assigned: a conservative count, whatever the real one. */
#define KS_MEM_KAFKA_PARTS 1024

/* What a record waiting in librdkafka's queue costs besides its key and value: its
 * rd_kafka_op_t, message and share of the fetch buffer. Measured with librdkafka 2.0.2
 * (malloc_stats of the broker thread's arena over the records its queues held): ~420 B. */
#define KS_MEM_KAFKA_RECORD_OVERHEAD 420

/* What a partition's first fetch is expected to cost a window before any fetch was seen:
 * librdkafka's fetch.message.max.bytes (1 MiB) of 100-byte records, each costing a window
 * about twice its wire size (ks_mem_record_overhead). A new assignment's partitions start
 * fetching as these fit the budget (group_intake.c's part_admit). */
#define KS_MEM_FIRST_FETCH (INT64_C(2) << 20)

/* The librdkafka part of the budget is a quarter of it; the windows share the rest. */
int64_t ks_mem_kafka_part(int64_t max_bytes);
int64_t ks_mem_window_part(int64_t max_bytes);

/* One partition's window share when `parts` partitions are assigned in the process:
 * the window part split evenly, never below KS_MEM_WINDOW_FLOOR (nor above the whole
 * window part). parts 0 counts as 1. Pure. */
int64_t ks_mem_window_share(int64_t max_bytes, size_t parts);

/* librdkafka's per-partition queued.max.messages.kbytes from the budget: the per-partition
 * librdkafka part as key and value bytes of 100-byte records (librdkafka's own cost of a
 * record comes on top), within librdkafka's range and never above its default (2048).
 * A paused partition still holds up to one more fetch: fetch.message.max.bytes (1 MiB),
 * or one whole producer batch if larger. That one is left at librdkafka's default: at
 * 6,301 bytes, 8 partitions of 16 KB producer batches drained at 254k rec/s over gRPC
 * instead of 987k (librdkafka 2.0.2 sends one Fetch at a time to a broker). Pure. */
int64_t ks_mem_kafka_queue_kbytes(int64_t max_bytes);

/* librdkafka's fetch buffers: each group's consumer has up to one Fetch response in flight
 * per broker, up to its fetch.max.bytes, outside the tallies above. Half the librdkafka part
 * of the budget (32 MiB at the default 256 MiB) is split among the groups for it: each group's
 * fetch.max.bytes is that half over the groups expected (the groups running with this one,
 * or the static ones if more), never more than what the running groups left of it, within
 * KS_MEM_FETCH_FLOOR and KS_MEM_FETCH_CAP. librdkafka fixes the size at rd_kafka_new, so a
 * running group keeps its size when others start or stop; what a stopped group gave back
 * goes to the groups started after it. Past the half, each further group gets the floor. */
#define KS_MEM_FETCH_CAP (INT64_C(2) << 20) /* the size one group alone had (kconf.c) */
/* librdkafka refuses a consumer whose fetch.max.bytes is below message.max.bytes (1,000,000
 * by default): "fetch.max.bytes must be >= message.max.bytes". */
#define KS_MEM_FETCH_FLOOR (INT64_C(1) << 20)

int64_t ks_mem_fetch_part(int64_t max_bytes);

/* Takes a new group's fetch.max.bytes from the fetch part, as above; static_groups: the
 * groups the config starts. Give it back with ks_mem_fetch_give when the group's consumer is
 * destroyed. Thread-safe. */
int64_t ks_mem_fetch_take(int64_t max_bytes, size_t static_groups);
void ks_mem_fetch_give(int64_t bytes);

/* fetch.message.max.bytes (a partition's share of one response) for a group's fetch.max.bytes:
 * half of it, at most librdkafka's default (1 MiB). Pure. */
int64_t ks_mem_fetch_part_bytes(int64_t fetch_max_bytes);

/* The header of a record's copy (group_loop.c's rec_t; it asserts the size). */
#define KS_MEM_REC_HEADER 24

/* What a record costs a window besides its key and value: its window entry, its copy's
 * header, malloc's chunk overhead and its scheduler slot. Charged per held record. */
int64_t ks_mem_record_overhead(void);

/* Whether the windows and librdkafka's queues together (the two tallies below) hold at
 * least a quarter of the budget: then a partition at its share whose queue holds records
 * is paused in librdkafka, which gives them back (group_loop.c's part_check_bound). Below
 * that (a few partitions, a fast client) nothing is paused.
 * Thread-safe. */
bool ks_mem_pressed(int64_t max_bytes);

/* Whether windows and queues hold more than five sixteenths of the budget: windows take
 * records from librdkafka only up to their floor then, and its queues are emptied
 * (group_intake.c). */
bool ks_mem_over(int64_t max_bytes);

/* Whether another fetch costing cost bytes keeps windows and queues within a quarter of
 * the budget (ks_mem_pressed's line): a partition paused for the budget waits for it
 * before it fetches again, so that the fetches of partitions resumed together fit. */
bool ks_mem_fetch_fits(int64_t max_bytes, int64_t cost);

/* The process-wide tally. Thread-safe (atomics); any thread may call these.
 * parts: partitions assigned across every group; used: bytes held by every window. */
void ks_mem_parts_add(long delta);
size_t ks_mem_parts(void);
void ks_mem_used_add(int64_t delta);
int64_t ks_mem_used(void);
/* queued: what librdkafka's partition queues hold, as group_loop.c estimates it. */
void ks_mem_queued_add(int64_t delta);
int64_t ks_mem_queued(void);

#endif
