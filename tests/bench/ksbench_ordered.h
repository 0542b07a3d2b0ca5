/* ksbench_ordered.h: ksbench's handling log for the ordered-delivery benchmark
 * (tests/bench/ordered.py), which counts order violations from it. */
#ifndef KSBENCH_ORDERED_H
#define KSBENCH_ORDERED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Starts logging every handled record, to be written to path by ksb_order_log_write().
 * path is borrowed and must outlive the log. Returns 0, or -ENOMEM. */
int ksb_order_log_open(const char *path);

/* Logs one handled record, in handling order; key is NULL for a Kafka null key, chain the
 * record's ordering_chain (0 when it has none or the subscriber did not ask). A no-op when
 * no log was opened. Single-threaded, as ksbench's handlers are. */
void ksb_order_log_add(int32_t partition, int64_t offset, const void *key, size_t key_len,
                       uint64_t chain);

/* Writes the log (one line a record: partition, offset, key or \N, chain; tab-separated),
 * prints "order_log=PATH records=N chained=M" on stdout and frees it. Returns 0, or -errno
 * when the file cannot be written. A no-op returning 0 when no log was opened. */
int ksb_order_log_write(void);

#endif
