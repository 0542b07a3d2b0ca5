/* retry.h: a group's retry policy: the redelivery delay of a record from its attempt count. */
#ifndef KS_RETRY_H
#define KS_RETRY_H

#include <stddef.h>
#include <stdint.h>

#define KS_RETRY_LIST_MAX 32 /* entries of retry.backoff_ms */

/* One group's policy (group.retry.*). With a list, entry i is the delay after attempt i + 1 and
 * the last repeats; without one, initial_ms * multiplier^(attempt - 1), at most max_ms. initial_ms
 * 0 and no list: no delay (a nack redelivers at once, as without a policy). jitter: the delay is
 * drawn from [d * (1 - jitter), d]. */
typedef struct ks_retry {
    int initial_ms;
    int max_ms;
    double multiplier;
    double jitter;
    int list[KS_RETRY_LIST_MAX];
    size_t list_cnt;
} ks_retry_t;

/* Parses retry.backoff_ms ("100,1000,5000"; "" is no list) into r's list. Returns 0, or -1 with
 * err naming the entry at fault. */
int ks_retry_parse_list(ks_retry_t *r, const char *text, char *err, size_t errsize);

/* The delay before the next delivery of a record whose attempts deliveries failed (>= 1).
 * rnd is a uniform draw in [0, 1) for the jitter. Any thread. */
int64_t ks_retry_delay_ms(const ks_retry_t *r, unsigned attempts, double rnd);

#endif
