/* retry.c: a group's retry policy: the redelivery delay of a record from its attempt count. */
#include "retry.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define RETRY_ENTRY_MAX 86400000 /* a day, as nack.max_delay_ms's bound */

int ks_retry_parse_list(ks_retry_t *r, const char *text, char *err, size_t errsize)
{
    r->list_cnt = 0;
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (!*p)
        return 0;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > RETRY_ENTRY_MAX) {
            snprintf(err, errsize,
                     "entry %zu must be an integer from 0 to %d (ms), as in \"100,1000,5000\"",
                     r->list_cnt + 1, RETRY_ENTRY_MAX);
            return -1;
        }
        if (r->list_cnt == KS_RETRY_LIST_MAX) {
            snprintf(err, errsize, "at most %d entries", KS_RETRY_LIST_MAX);
            return -1;
        }
        r->list[r->list_cnt++] = (int)v;
        while (isspace((unsigned char)*end))
            end++;
        if (!*end)
            return 0;
        if (*end != ',') {
            snprintf(err, errsize, "entry %zu is followed by '%c', not a comma", r->list_cnt, *end);
            return -1;
        }
        p = end + 1;
    }
}

int64_t ks_retry_delay_ms(const ks_retry_t *r, unsigned attempts, double rnd)
{
    double d;
    if (attempts < 1)
        attempts = 1;
    if (r->list_cnt) {
        d = r->list[attempts - 1 < r->list_cnt ? attempts - 1 : r->list_cnt - 1];
    } else {
        d = r->initial_ms;
        for (unsigned i = 1; i < attempts && i < 64 && d < r->max_ms; i++) /* to the cap */
            d *= r->multiplier;
        if (d > r->max_ms)
            d = r->max_ms;
    }
    if (r->jitter > 0)
        d -= d * r->jitter * rnd;
    return (int64_t)d;
}
