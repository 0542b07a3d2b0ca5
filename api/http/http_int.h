/* http_int.h: the HTTP edge's private types and the functions its files share
 * (http_server.c: libmicrohttpd and suspend/resume; http_routes.c: the route table, its
 * decoders and the engine callbacks; http_json.c: JSON writers and reply encoders). */
#ifndef KS_HTTP_INT_H
#define KS_HTTP_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ack_id.h"
#include "auth.h"
#include "config.h"
#include "engine.h"
#include "http_api.h"
#include "push_ctl.h"
#include "codec.h"
#include "substream.h"

#define LOGC       "http"
#define MAX_TOPICS 64
/* A URL longer than this, or with more query parameters, is answered 414. Both fit in
 * CONN_MEMORY with the headers: libmicrohttpd 0.9.75 keeps a record of ~56 bytes per
 * parameter in the connection's pool, and when they overflow it logs a 431 that it never
 * sends (parse_initial_message_line ignores the failed parse), so the request hung. */
#define MAX_URL_BYTES    8192
#define MAX_QUERY_PARAMS 128
#define CONN_MEMORY      (64 * 1024) /* per connection; pages are touched as used */
#define IDLE_TIMEOUT_S   120         /* libmicrohttpd's silence timeout */
/* The probe listener (http.health_listen): its own bounds, so a flood of the API listener
 * never reaches it, and one prober cannot take all of it. */
#define HEALTH_MAX_CONNS        64
#define HEALTH_MAX_CONNS_PER_IP 16
#define FD_RESERVE              512 /* fds left to Kafka, groups and gRPC below the limit */
#define REQ_ID_MAX              128 /* longest X-Request-Id taken from a caller */
#define RETRY_AFTER_429_S       1   /* Retry-After of a 429 whose status gives none */
#define RETRY_AFTER_503_S       5   /* ... and of a 503: Kafka or a group must come back */

/* One open connection, for the header and body deadlines that a slow drip cannot extend
 * (libmicrohttpd's own timeout counts only silence). It is libmicrohttpd's socket context:
 * made when the connection starts and freed when it closes, on the daemon's thread. */
typedef struct conn {
    struct conn *prev, *next; /* in ks_http.conns; @locks ks_http.conns_lock */
    int fd;
    /* ms on CLOCK_MONOTONIC at which the deadline sweep shuts the socket down; 0 while a
     * request is being answered (a long-poll has its own wait). Set by the daemon thread,
     * read by the sweep. */
    _Atomic int64_t deadline;
    struct req *cur; /* the request being answered on it (the daemon thread's) */
} conn_t;

struct ks_http {
    struct MHD_Daemon *d;
    struct MHD_Daemon *health_d; /* http.health_listen, or NULL */
    ks_engine_t *eng;
    const ks_config_t *cfg;
    const ks_auth_t *auth;
    ks_tls_t *tls;           /* NULL: plain HTTP */
    ks_tls_pem_t *tls_first; /* the reading at start: its CA is libmicrohttpd's, while it runs */
    bool mtls;               /* clients must present a certificate (tls.client_ca_file) */
    int port, health_port;
    atomic_int long_polls; /* fetches waiting in the engine, bound: http.max_long_polls */
    ks_subhub_t *hub;      /* the streams' core (NULL: no streams) */
    ks_push_ctl_t push;    /* push set by API call (push.push NULL: refused) */

    pthread_mutex_t streams_lock; /* guards streams, stream_cnt */
    struct hstream *streams;      /* open record streams (http_stream.c) */
    int stream_cnt;               /* bound: http.max_streams */
    atomic_bool streams_stopping; /* the daemon stops: no stream suspends again */

    pthread_mutex_t conns_lock; /* guards conns and the sweep's stop flag */
    pthread_cond_t sweep_cond;
    conn_t *conns;
    bool sweep_stop, sweep_started;
    pthread_t sweep;
    int64_t started_wall_ms; /* when the edge started (unix ms), the status page's uptime */
};

/* One record of a produce request's body: refused by the edge (st, msg), or sent to the
 * engine as its result sent_i. */
typedef struct http_produce_rec {
    ks_status_t st;
    char msg[256];
    size_t sent_i;
} http_produce_rec_t;

typedef struct http_produce {
    size_t n; /* records in the body */
    http_produce_rec_t *rec;
} http_produce_t;

/* One request. Two references while an engine command is out: libmicrohttpd's
 * (dropped when the request completes) and the engine's (dropped in its callback). */
typedef struct req {
    atomic_int refs;
    struct MHD_Connection *conn;
    ks_http_t *h;
    conn_t *cn;       /* its connection's deadline record, NULL if none */
    bool started;     /* the headers are in: the access handler ran once */
    bool long_poll;   /* counted in h->long_polls until the engine answers */
    bool health;      /* came in on the probe listener */
    bool url_too_big; /* longer than MAX_URL_BYTES, or more than MAX_QUERY_PARAMS */
    size_t url_len, param_cnt;
    bool path_nul;      /* the raw path holds %00 */
    char raw_path[256]; /* the start of the path as sent (escaped), for messages */
    /* For X-Request-Id and the access log line: the caller's id when sane (printable
     * ASCII, at most REQ_ID_MAX bytes), else one made here; what was answered. */
    char req_id[REQ_ID_MAX + 1];
    char method[16];
    int64_t start_ms;
    unsigned status;
    uint64_t resp_bytes; /* a stream's: what its body callback handed over */
    char *body;
    size_t body_len, body_cap;
    bool too_big;
    bool submitted;

    pthread_mutex_t lock; /* guards suspended, done, batch, acks, and groups for /readyz */
    bool suspended, done;
    ks_batch_t *batch;
    ks_ack_result_t *acks;
    size_t acks_n; /* results in acks: one per record (a range id has one per offset) */
    size_t ack_cnt;
    char **ack_ids;             /* what the ack results answer, in order */
    bool ack_ids_in_body;       /* the strings point into body (not separately allocated) */
    ks_group_status_t **groups; /* a status answer; /readyz: every static group's, as they come */
    size_t group_cnt;
    const struct route *route; /* the route serving it, set before its command is sent */
    bool status_one;           /* a status answer for one group (else a list) */
    atomic_int ready_pending;  /* static-group status answers still to come */
    char ready_msg[384];       /* why not ready (the first reason); "" when ready */
    const ks_principal_t *who; /* who called; NULL without auth */
    ks_settle_op_t op;
    bool wait_commit;      /* acks?wait=commit: answered once their commit is confirmed */
    int commit_timeout_ms; /* its timeout_ms, 0 for the engine's default */
    bool errors_only;      /* acks?results=errors: only the results that are not OK */
    ks_codec_opts_t fmt;   /* ?format=: how keys, values and header values are shown */
    /* A long-poll's batch is confirmed (opts.confirm): when the request completes, the
     * engine hears whether the reply went out (its leases start) or not (its records go
     * back, no attempt counted). completed: libmicrohttpd is done with the request. */
    char group[512];
    bool completed;
    struct hstream *stream;        /* a record stream's (http_stream.c), NULL for other routes */
    http_produce_t *prod;          /* a produce request's records (http_produce.c), else NULL */
    ks_produce_result_t *produced; /* the engine's answer: one per record sent */
    ks_seek_result_t *seek;        /* a seek's answer */
    ks_redrive_result_t *redrive;  /* a redrive's answer */
    char topic[256];               /* a seek's topic, for its answer */
} req_t;

/* A route: one row of http_routes.c's table. */
typedef struct route {
    const char *method; /* "GET" (HEAD too), "POST", "PUT" or "DELETE"; another: 405, Allow */
    const char *path;   /* literal, with at most one {group} or {topic} segment */
    ks_cmd_t cmd;       /* the engine command it sends; KS_CMD_NONE: the edge answers */
    int op;             /* the settle routes' ks_settle_op_t */
    bool probe;         /* served on the probe listener (http.health_listen) too */
    int auth;           /* route_auth_t: when the caller is checked */
    /* Decodes the request into the command and sends it, parking r (or answers at once:
     * a bad request, or a row with no command). group: the path's {group} (or {topic}), or
     * NULL. */
    enum MHD_Result (*decode)(ks_http_t *h, req_t *r, const char *group, const char *method);
    /* Answers r from the engine's result stored in it (libmicrohttpd's thread). */
    enum MHD_Result (*encode)(req_t *r);
} route_t;

/* ---- http_server.c (any libmicrohttpd thread unless said) ---- */

/* Drops one reference to r; the last frees it and what it holds. Any thread. */
void http_req_unref(req_t *r);

/* Suspends r until the engine answers, unless it already has. Returns true if the
 * answer is already here and the caller should reply now. */
bool http_park(req_t *r);

/* The engine's answer is stored in r: marks it done, resumes r's connection if it is
 * suspended (its reply is then encoded on libmicrohttpd's thread) and drops the engine's
 * reference. Any thread (a group loop's, in an engine callback). */
void http_wake(req_t *r);

/* With mTLS, true if the client's certificate verified against the client CA (always
 * true without mTLS). */
bool http_client_cert_ok(ks_http_t *h, struct MHD_Connection *conn);

/* http_tls.c: fills opts (room for 3) with the TLS options of the daemon (the certificate
 * callback, the client CA) and returns how many. Each handshake takes the reading of tls in
 * force. One HTTP edge with TLS per process (the callback has no user pointer). */
size_t http_tls_options(ks_http_t *h, ks_tls_t *tls, struct MHD_OptionItem *opts);
/* Frees what http_tls_options made; after the daemon stopped. */
void http_tls_release(ks_http_t *h);

/* The subject DN (RFC 4514) of the client's certificate into buf, or NULL (no mTLS, or no
 * certificate). */
const char *http_cert_subject(ks_http_t *h, struct MHD_Connection *conn, char *buf, size_t size);

/* Queues resp (not destroyed) as r's answer: with r's X-Request-Id, a Retry-After on a 429 or
 * 503 that has none, and its status and size noted for the access log. Every answer goes
 * through here. The daemon thread that serves c. */
enum MHD_Result http_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *resp,
                           size_t bytes);

/* ---- http_routes.c ---- */

/* The route table, read-only (its rows, *n of them), for the test that holds it to
 * api/openapi.yaml. */
const route_t *http_route_table(size_t *n);

/* Parses s as a decimal integer in min..max into *out. Returns 0, or -1 (out untouched). */
int http_parse_int(const char *s, long min, long max, long *out);

/* Answers a whole request (headers and body in): finds its route and runs its decoder,
 * which answers at once or submits an engine command and parks the request. */
enum MHD_Result http_route(ks_http_t *h, req_t *r, const char *method, const char *url);

/* Answers a resumed request from the engine's answer stored in r. */
enum MHD_Result http_reply(req_t *r);

/* Sends cmd (its type: r's route's command) to the engine with the engine's reference on r
 * for the command's callback, and parks r for the answer (or answers now: the engine's
 * refusal, or an answer already in). */
enum MHD_Result http_submit_park(ks_http_t *h, req_t *r, ks_cmd_req_t *cmd);
/* A request that parks until something happens (a long-poll fetch, a wait for the commit)
 * takes one of http.max_long_polls, given back by the engine's callback; false when none
 * is free. */
bool http_long_poll_claim(ks_http_t *h, req_t *r);
/* http_redrive.c: the redrive row's decoder (POST /v1/groups/{group}/redrive). */
enum MHD_Result http_decode_redrive(ks_http_t *h, req_t *r, const char *group, const char *method);

/* http_settle.c: the acks, nacks and deadline rows' decoder. */
enum MHD_Result http_decode_settle(ks_http_t *h, req_t *r, const char *group, const char *method);

/* A fetch's or a stream's query parameters (NULL: absent) and what they say. */
typedef struct http_query {
    bool stream; /* set by the caller: the stream's parameters, not the fetch's */
    const char *topics[MAX_TOPICS];
    size_t topic_cnt;
    bool too_many;
    const char *max, *wait_ms, *format, *deadline_ms, *subscriber, *ordered_batches;
    const char *max_in_flight, *max_in_flight_bytes;
    const char *unknown;
    /* The first parameter whose name or value holds a NUL byte (%00), which the C strings
     * above would silently cut short. */
    const char *nul_key, *nul_value;
    size_t nul_key_len, nul_value_len;
    /* What they say: the topic names (topic=a,b and topic=a&topic=b alike), split in
     * split_buf; ordered_batches. */
    const char *names[MAX_TOPICS];
    size_t name_cnt;
    char *split_buf[MAX_TOPICS];
    size_t split_cnt;
    bool ordered;
} http_query_t;

/* Reads r's query into q (q->stream says which parameters are known) and checks what every
 * fetch and stream shares: no NUL, no unknown parameter, one to MAX_TOPICS topics the caller
 * may consume (ks_edge_check_topics), ordered_batches, format (into r->fmt). Returns false
 * after queueing the error (*ret). Call http_query_free after, either way. */
bool http_query_read(ks_http_t *h, req_t *r, http_query_t *q, enum MHD_Result *ret);
void http_query_free(http_query_t *q);

/* Reads the query parameter name (value v, NULL if absent) as an int into *out, or sets bit in
 * *unset when absent. Returns false after queueing the error when it is not an integer. Its
 * range is the validator's. */
bool http_opt_int(req_t *r, const char *name, const char *v, int *out, unsigned bit,
                  unsigned *unset, enum MHD_Result *ret);

/* ---- http_page.c: GET /, the status page ---- */

/* The page's decoder: answers at once with the page, no engine command, no caller check (the
 * page asks the status API with whatever token it is given). */
enum MHD_Result http_page_decode(ks_http_t *h, req_t *r, const char *group, const char *method);
/* Now, in ms since the epoch (CLOCK_REALTIME). */
int64_t http_page_wall_ms(void);

/* ---- http_stream.c: GET /v1/groups/{group}/stream ---- */

/* The stream route's decoder: checks the request as a fetch is checked, then answers with a
 * response that stays open and writes records as the subscriber-stream core leases them. */
enum MHD_Result http_stream_decode(ks_http_t *h, req_t *r, const char *group, const char *method);
/* r's stream ended (libmicrohttpd's request-completed callback): what is queued goes back,
 * the leases go back uncounted, the stream leaves the core. */
void http_stream_completed(req_t *r);
/* Every 250 ms (the deadline sweep's thread): resumes the idle streams whose heartbeat is due
 * or whose client closed its end, so libmicrohttpd writes or ends them. */
void http_stream_tick(ks_http_t *h, int64_t now_ms);
/* Before the daemon stops: every stream ends, none stays suspended. */
void http_stream_stop_all(ks_http_t *h);

/* ---- http_produce.c: POST /v1/topics/{topic}/records ---- */

/* The produce route's decoder ({topic}: the records' default topic). */
enum MHD_Result http_produce_decode(ks_http_t *h, req_t *r, const char *topic, const char *method);

/* The JSON readers a POST body's decoder shares. Each returns NULL (or false) after queueing
 * the 400 (or 429 for a body over http.max_request_bytes) in *ret. */
/* r's body as a new JSON tree, loaded with jansson's flags (JSON_ALLOW_NUL: strings may hold
 * \u0000); shape: what to send, for the error. */
json_t *http_body_json(ks_http_t *h, req_t *r, const char *shape, size_t flags,
                       enum MHD_Result *ret);
/* Whether every key of o is one of known (NULL-terminated; list: the same for the message). */
bool http_only_fields(req_t *r, json_t *o, const char *what, const char *const *known,
                      const char *list, enum MHD_Result *ret);
/* v as a string with no NUL byte (which a C string would cut short); what names it. */
const char *http_json_name(req_t *r, json_t *v, const char *what, enum MHD_Result *ret);

/* ---- http_json.c ---- */

/* Sends root (stolen) as the response body (a 500 with a fixed body if it cannot be
 * written). */
enum MHD_Result http_send_json(struct MHD_Connection *c, int status, json_t *root);

/* The error body {"error":{"code":...,"message":...}} for st with the printf-style
 * message, at st's own HTTP status. */
enum MHD_Result http_send_error(struct MHD_Connection *c, ks_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same error body at an HTTP status of the edge's own, one no ks_status_t names (405,
 * 415), with code as error.code and an Allow header when allow is not NULL. */
enum MHD_Result http_send_error_as(struct MHD_Connection *c, unsigned status, const char *code,
                                   const char *allow, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Copies v[0..n) into out (NUL-terminated, cut to fit) with each NUL byte shown as \x00.
 * Returns out. */
const char *http_show_nul(const char *v, size_t n, char *out, size_t size);

/* The reply encoders: each answers r from the engine's answer stored in it. */
enum MHD_Result http_reply_fetch(req_t *r);   /* r->batch: {"records":[...]} */
enum MHD_Result http_reply_ack(req_t *r);     /* r->acks: {"results":[...],...} */
enum MHD_Result http_reply_status(req_t *r);  /* r->groups: one group, or {"groups":[...]} */
enum MHD_Result http_reply_metrics(req_t *r); /* r->groups: the Prometheus exposition */
enum MHD_Result http_reply_ready(req_t *r);   /* r->groups, r->ready_msg: ready, or 503 */
enum MHD_Result http_reply_produce(req_t *r); /* r->prod, r->produced: {"results":[...]} */
enum MHD_Result http_reply_seek(req_t *r);    /* r->seek: {"partitions":[...],...} */
enum MHD_Result http_reply_redrive(req_t *r); /* r->redrive: {"moved":N,"held":[...],...} */

/* ---- http_push.c: /v1/groups/{group}/push (a push set by API call) ---- */

enum MHD_Result http_push_get(ks_http_t *h, req_t *r, const char *group, const char *method);
enum MHD_Result http_push_put(ks_http_t *h, req_t *r, const char *group, const char *method);
enum MHD_Result http_push_delete(ks_http_t *h, req_t *r, const char *group, const char *method);

#endif
