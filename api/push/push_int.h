/* push_int.h: what push delivery's files share (push.c: the streams, the edge, the push thread's
 * loop and push set by API call; push_request.c: the requests and the app's answers;
 * push_metrics.c: what /metrics shows of them): the stream and edge state, and the functions
 * one calls in another. Private to api/push/. */
#ifndef KS_PUSH_INT_H
#define KS_PUSH_INT_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "metrics.h"
#include "push.h"

#define PLOG "push"

typedef struct pusher pusher_t;

/* A batch from the core, waiting for requests (a few at a time: the credits bound them). */
typedef struct qbatch {
    ks_batch_t *b;
    struct qbatch *next;
} qbatch_t;

/* One request in flight: its records' ack ids, its body and the app's answer. */
typedef struct preq {
    pusher_t *p;
    CURL *easy;
    struct curl_slist *hdrs;
    char *body;
    size_t body_len;
    char **ids;
    size_t n;
    char *resp;
    size_t resp_len;
    char cerr[CURL_ERROR_SIZE];
    size_t slot;   /* its place in its pusher's slots */
    int64_t t0_ms; /* when it was made (ks_now_ms) */
} preq_t;

/* A stream's counts for /metrics (push_metrics.c): written by the push thread (ks_push_stop's,
 * once it ended), read by a scrape, so each is a relaxed atomic. */
#define PUSH_CODES 500 /* HTTP statuses 100..599 */
typedef struct {
    atomic_uint_fast64_t codes[PUSH_CODES + 1]; /* requests by status; [PUSH_CODES]: no answer */
    atomic_uint_fast64_t verdicts[3];           /* records, by ks_push_verdict_t */
    atomic_int_fast64_t in_flight;              /* requests in the multi handle now */
    atomic_uint_fast64_t hist[KS_HIST_BUCKETS + 1]; /* request durations, as ks_hist_t's */
    atomic_int_fast64_t hist_sum_ms;
} push_stats_t;

/* One push group's stream. */
struct pusher {
    ks_substream_t ss; /* the core; its fields are its own */
    atomic_int refs;   /* the edge's, the core's (ops->ref) */
    const ks_group_conf_t *gc;
    ks_engine_t *eng;
    const ks_config_t *cfg;
    pthread_mutex_t lock; /* guards edge, wake_due */
    ks_push_t *edge;      /* NULL once the push thread ended: wakes are declined */
    bool wake_due;        /* the core asked for a drain */
    /* @locality the push thread (ks_push_stop's, once it ended) */
    qbatch_t *q, *q_tail; /* batches from the core, oldest first; their leases run */
    size_t q_next;        /* records of the head batch already in requests */
    int inflight;
    preq_t **slots;          /* the requests in flight, push_concurrency places */
    CURL **easies;           /* each place's easy handle, reused by its requests */
    ks_group_conf_t *own_gc; /* a push set by API call: its settings (gc), freed with it */
    atomic_bool removing;    /* no new request starts; once none is in flight, it goes */
    push_stats_t stats;
};

struct ks_push {
    ks_engine_t *eng;
    const ks_config_t *cfg;
    ks_subhub_t *hub;
    CURLM *multi;
    pthread_t th;
    bool th_started;
    atomic_bool stopping;  /* the thread ends */
    atomic_bool quiescing; /* no new request starts */
    atomic_bool closing;   /* shutdown began: an API call starts no push */
    /* Guards ps and n: an API call adds a stream and marks one removing; the push thread
     * reads them, and takes out the removed ones. */
    pthread_mutex_t ps_lock;
    pusher_t **ps;
    size_t n, cap;
    long conns; /* the connections the multi handle keeps now (the push thread's) */
};

/* ---- push_request.c ---- */

/* Starts requests from p's queued batches until concurrency are in flight. @locality the push
 * thread */
void push_start_requests(ks_push_t *e, pusher_t *p);
/* Settles every request that ended. @locality the push thread */
void push_reap(ks_push_t *e);
/* r's request ended: it leaves the multi handle and its pusher's list. */
void push_req_end(ks_push_t *e, preq_t *r);
/* Frees r; its easy handle stays its place's. */
void push_req_free(preq_t *r);
/* Frees p's easy handles (none is in the multi handle). @locality the push thread, or
 * ks_push_stop's once it ended */
void push_slot_easies_free(pusher_t *p);

/* ---- push_metrics.c ---- */

/* One of p's requests joined the multi handle, or left it. @locality the push thread
 * (ks_push_stop's, once it ended) */
void push_stats_started(pusher_t *p);
void push_stats_ended(pusher_t *p);
/* r's request ended: code its HTTP status (0: no answer), v[0..r->n) the verdicts of its
 * records. @locality the push thread */
void push_stats_answered(pusher_t *p, const preq_t *r, long code, const ks_push_verdict_t *v);
/* The collector of push's families (metric_list.h), e the ks_push_t. Takes e's ps_lock. */
void push_metrics_collect(void *e, ks_metric_id_t id, ks_metrics_out_t *o);

#endif
