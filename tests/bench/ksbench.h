/* ksbench.h: what ksbench.c shares with its other clients (ksbench_stream.c): the options,
 * the measurements, and the HTTP wire helpers. */
#ifndef KSBENCH_H
#define KSBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern const char *topic, *group, *addr;
extern long want;
extern int credits, ack_batch;
extern bool ack_ranges;   /* --ack-ranges: acks coalesced into ranges (gRPC: results by position) */
extern bool latency_mode; /* --latency: a timed producer, produce-to-receipt percentiles */

double now_s(void);
void die(const char *a, const char *b);

/* Counts one delivery: distinct records, duplicates, per-key order (keys "k<n>"). */
void track(int32_t partition, int64_t offset, const void *key, size_t key_len);
/* Latency mode: one timed record's value ("t=<wall clock us>;..."), as received. */
void lat_add(const void *payload, size_t len);
/* Latency mode: start the timed producer's thread (it waits for latency_go(), which a
 * client calls once it has its assignment), and join it at the end. No-ops otherwise. */
void latency_producer_start(void);
void latency_go(void);
void latency_producer_join(void);
/* Prints the result line ("mode=... records=... rate=... distinct=..."). */
void report(const char *mode, long n, double secs);

/* A TCP connection to addr (host:port) with TCP_NODELAY; dies on failure. */
int http_connect(void);
/* Writes one request; the body is sent as application/json. */
void http_send(int fd, const char *method, const char *path, const char *body, size_t blen);
/* Reads one Content-Length response; returns its body (caller frees). Dies unless 200. */
char *http_recv(int fd);

/* The fields the benchmark uses of one JSON record; strings point into the scanned text. */
typedef struct {
    int32_t partition;
    int64_t offset;
    const char *key, *ack_id;
    size_t key_len, ack_id_len;
} jrec_t;

/* Scans one record object at p (at its '{', NUL-terminated text) into r; returns the text
 * after its '}', or NULL if malformed or it has no ack id. */
const char *scan_record(const char *p, jrec_t *r);

/* An ack body, {"ack_ids":[...]}, built id by id. */
typedef struct {
    char *b;
    size_t len, cap, n; /* n: ids in it */
    size_t recs;        /* records acked by it (more than n once ids are ranges) */
} ackbuf_t;

void ackbuf_add(ackbuf_t *a, const char *id, size_t n);
/* One record's id, or with --ack-ranges, the record added to its partition's run of
 * consecutive offsets (sent as one range by ackbuf_post). */
void ackbuf_add_record(ackbuf_t *a, int32_t partition, int64_t offset, const char *id, size_t n);
/* POSTs the ids added so far to path on fd (the answer is left to read) and empties a. */
void ackbuf_post(ackbuf_t *a, int fd, const char *path);

/* The HTTP NDJSON stream client (ksbench_stream.c). */
void run_stream(void);

#endif
