/* redrive.h: dead-letter redrive: a group's dead letters produced back to the topics they came
 * from, each redrive on a thread of its own, and the pure header rules it follows. */
#ifndef KS_REDRIVE_H
#define KS_REDRIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmd.h"
#include "config.h"
#include "types.h"

/* The headers a dead letter carries (dead_letter.c) and the count a redrive adds. */
#define KS_REDRIVE_PREFIX    "ksidecar." /* every header of ours: a redriven record drops them */
#define KS_HDR_ORIG_TOPIC    "ksidecar.original.topic"
#define KS_HDR_ORIG_PART     "ksidecar.original.partition"
#define KS_HDR_GROUP         "ksidecar.group"
#define KS_HDR_REDRIVEN      "ksidecar.redriven"
#define KS_REDRIVE_COUNT_BUF 12 /* an int32's decimal and its NUL */

/* What a dead letter's headers say about where it goes back to. */
typedef struct ks_redrive_meta {
    bool has_topic;    /* it has a ksidecar.original.topic header */
    bool topic_ok;     /* ... whose value is a valid topic name (copied into topic) */
    char topic[256];   /* the value, "" unless topic_ok */
    int32_t partition; /* ksidecar.original.partition, -1 when absent or not a partition */
    int32_t redriven;  /* ksidecar.redriven: 0 when absent, -1 when not a count */
    bool has_group;    /* it has a ksidecar.group header (the group that dead-lettered it) */
    char group[256];   /* its value, cut to fit */
} ks_redrive_meta_t;

/* The count in a ksidecar.redriven value (len bytes, not NUL-terminated): a decimal from 0 to
 * INT32_MAX, without sign or spaces. Returns it, or -1 when it is not one. Any thread. */
int32_t ks_redrive_parse_count(const void *v, size_t len);

/* Reads the n headers hs (a NULL value is an empty one) into *out; the last of a repeated
 * header counts. Cannot fail. Any thread. */
void ks_redrive_meta_read(const ks_header_t *hs, size_t n, ks_redrive_meta_t *out);

/* Writes into out (room for n + 1) the headers a redriven record carries: those of in whose
 * names do not start with "ksidecar.", in order, then ksidecar.redriven = redriven as a
 * decimal, written into buf (KS_REDRIVE_COUNT_BUF bytes). out borrows from in and buf.
 * Returns how many it wrote. Any thread. */
size_t ks_redrive_headers(const ks_header_t *in, size_t n, int32_t redriven, char *buf,
                          ks_header_t *out);

/* The redrives running in one engine: at most one per group. */
typedef struct ks_redriver ks_redriver_t;

/* cfg is borrowed and must outlive it. Cannot fail (aborts when out of memory). */
ks_redriver_t *ks_redriver_new(const ks_config_t *cfg);

/* Starts a validated KS_CMD_REDRIVE (req is borrowed for the call) on a thread of its own.
 * Returns KS_OK (its callback runs exactly once, from that thread), or KS_E_ABORTED when a
 * redrive of the group is running, KS_E_UNAVAILABLE when stopping or no thread starts, with
 * err (the callback never runs). Any thread. */
ks_status_t ks_redriver_start(ks_redriver_t *rd, const ks_cmd_req_t *req, char *err,
                              size_t errsize);

/* Asks every running redrive to stop (it commits what it moved and answers) and waits for
 * their threads; no redrive starts after. Any thread but a redrive's. */
void ks_redriver_stop(ks_redriver_t *rd);

/* Stops (ks_redriver_stop) and frees rd; NULL is fine. */
void ks_redriver_free(ks_redriver_t *rd);

#endif
