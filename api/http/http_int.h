/* http_int.h: the HTTP edge's private types and the functions its files share, above the
 * neutral request and response (http_req.h) and free of any server library's types. Its
 * files, from the bottom: http_json.c (the answers), http_read.c (what decoders read alike),
 * http_router.c (the router and the wait for the engine), a file per kind of route (its
 * decoders and engine callbacks), http_routes.c (the table naming them), http_api.c (start,
 * stop and the server's hooks). */
#ifndef KS_HTTP_INT_H
#define KS_HTTP_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ack_id.h"
#include "auth.h"
#include "config.h"
#include "engine.h"
#include "tls.h"
#include "http_req.h"
#include "push_ctl.h"
#include "codec.h"
#include "substream.h"

#define LOGC       "http"
#define MAX_TOPICS 64

/* The edge (http_api.h names it too; http_api.c, which implements that header, sits above this
 * one, so this one does not include it). */
typedef struct ks_http ks_http_t;

struct ks_http {
    struct http_srv *srv;       /* the server library's adapter (http_srv.h) */
    const struct route *routes; /* the route table (http_routes.c), route_cnt rows */
    size_t route_cnt;
    struct http_tls *tls; /* NULL: plain HTTP */
    ks_engine_t *eng;
    const ks_config_t *cfg;
    const ks_auth_t *auth;
    atomic_int long_polls; /* fetches waiting in the engine, bound: http.max_long_polls */
    ks_subhub_t *hub;      /* the streams' core (NULL: no streams) */
    ks_push_ctl_t push;    /* push set by API call (push.push NULL: refused) */

    pthread_mutex_t streams_lock; /* guards streams, stream_cnt */
    struct hstream *streams;      /* open record streams (http_stream.c) */
    int stream_cnt;               /* bound: http.max_streams */
    atomic_bool streams_stopping; /* the server stops: no stream pauses again */
    pthread_mutex_t schema_lock;  /* guards schema_waits, schema_stopping */
    struct req *schema_waits;     /* produces parked until the registry answers */
    bool schema_stopping;         /* the server stops: none parks for the registry again */
    int64_t started_wall_ms;      /* when the edge started (unix ms), the status page's uptime */
};

/* One record of a produce request's body: refused by the edge (st, msg), or sent to the
 * engine as its result sent_i. */
typedef struct http_produce_rec {
    ks_status_t st;
    char msg[512];
    size_t sent_i;
} http_produce_rec_t;

typedef struct http_produce {
    size_t n; /* records in the body */
    http_produce_rec_t *rec;
} http_produce_t;

/* One request as the edge sees it: the neutral request (io, first: the server allocates the
 * whole, http_srv.h's req_size) and what its route needs. Two references while an engine
 * command is out: the server's (dropped when the request completes) and the engine's (dropped
 * by http_wake in the command's callback). */
typedef struct req {
    http_req_t io;
    ks_http_t *h;
    const struct route *route; /* the row serving it, set before its decoder runs */
    /* The path's {group} or {topic} segment (NULL: none): in the URL or in param_buf, valid
     * until the request completes. */
    const char *param;
    char param_buf[512];
    const ks_principal_t *who; /* who called; NULL without auth */
    bool long_poll;            /* counted in h->long_polls until the engine answers */
    /* The server is done with the request (under io.lock): a fetch answered after it gives its
     * records back at once. */
    bool completed;
    ks_codec_opts_t fmt; /* ?format=, ?value_format=, ?key_format=: how keys, values and
                          * header values are shown */
    /* What the route's command answered and what its decoder keeps for the answer: the member
     * of the row's command (route->cmd), zeroed until then; freed when the request goes. */
    union {
        struct {               /* KS_CMD_FETCH */
            ks_batch_t *batch; /* confirmed (opts.confirm): see http_api.c's completed */
            char group[512];
        } fetch;
        struct { /* KS_CMD_SETTLE: acks, nacks, deadline */
            ks_settle_op_t op;
            bool wait_commit;      /* acks?wait=commit: answered once their commit is confirmed */
            int commit_timeout_ms; /* its timeout_ms, 0 for the engine's default */
            bool errors_only;      /* acks?results=errors: only the results that are not OK */
            char **ids;            /* the ack ids, in order */
            size_t id_cnt;
            bool ids_in_body;     /* the strings point into the body (not allocated one by one) */
            ks_ack_result_t *res; /* one per record (a range id has one per offset) */
            size_t res_n;
        } settle;
        struct {                        /* KS_CMD_STATUS: a listing, one group, /metrics, /readyz */
            ks_group_status_t **groups; /* /readyz: every static group's, as they come */
            size_t cnt;
            bool one;            /* a status answer for one group (else a list) */
            atomic_int pending;  /* /readyz: static-group answers still to come */
            char ready_msg[384]; /* /readyz: why not ready (the first reason); "" when ready */
        } status;
        struct {                      /* KS_CMD_PRODUCE */
            http_produce_t *prod;     /* the body's records */
            ks_produce_result_t *res; /* the engine's answer: one per record sent */
            bool schema_wait;         /* parked until the registry answers (http_produce.c) */
            bool schema_armed;        /* a registry answer wakes the request (under io.lock) */
            bool listed;              /* in h->schema_waits (under h->schema_lock) */
            struct req *wait_prev, *wait_next;
        } produce;
        struct { /* KS_CMD_SEEK */
            ks_seek_result_t *res;
            char topic[256]; /* for the answer */
        } seek;
        struct { /* KS_CMD_REDRIVE */
            ks_redrive_result_t *res;
        } redrive;
        struct hstream *stream; /* the stream row's (KS_CMD_NONE; http_stream.c) */
    } u;
} req_t;

/* r's edge request, from its neutral one. */
static inline req_t *req_of(http_req_t *io)
{
    return (req_t *)io;
}

/* How a route checks its caller (bearer token or client certificate, then the groups
 * scope of the path's {group}, if it has one). */
typedef enum {
    AUTH_NONE,   /* the probes and the spec: anyone may ask */
    AUTH_METHOD, /* the method first, then the caller */
    AUTH_FIRST,  /* the caller first, as for every URL under /v1/groups/{group}/ (an unknown
                  * one too): a caller the group refuses learns nothing about it */
} route_auth_t;

/* A route: one row of http_routes.c's table. */
typedef struct route {
    const char *method; /* "GET" (HEAD too), "POST", "PUT" or "DELETE"; another: 405, Allow */
    const char *path;   /* literal, with at most one {group} or {topic} segment */
    ks_cmd_t cmd;       /* the engine command it sends; KS_CMD_NONE: the edge answers */
    int op;             /* the settle routes' ks_settle_op_t */
    bool probe;         /* served on the probe listener (http.health_listen) too */
    int auth;           /* route_auth_t: when the caller is checked */
    /* Decodes the request into the command and sends it, parking r (or answers at once:
     * a bad request, or a row with no command). r->param: the path's {group} (or {topic}). */
    http_ret_t (*decode)(ks_http_t *h, req_t *r);
    /* Answers r from the engine's result stored in it (the thread serving r). */
    http_ret_t (*encode)(req_t *r);
} route_t;

/* The files below form a chain: each calls only into those listed before it (and the adapter
 * through http_req.h); the route table calls the decoders only through its rows. */

/* ---- http_json.c: the answers' JSON writers and the reply encoders ---- */

/* Sends root (stolen) as the response body (a 500 with a fixed body if it cannot be
 * written). */
http_ret_t http_send_json(req_t *r, int status, json_t *root);

/* The error body {"error":{"code":...,"message":...}} for st with the printf-style
 * message, at st's own HTTP status. */
http_ret_t http_send_error(req_t *r, ks_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same error body at an HTTP status of the edge's own, one no ks_status_t names (405,
 * 415), with code as error.code and an Allow header when allow is not NULL. */
http_ret_t http_send_error_as(req_t *r, unsigned status, const char *code, const char *allow,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Copies v[0..n) into out (NUL-terminated, cut to fit) with each NUL byte shown as \x00.
 * Returns out. */
const char *http_show_nul(const char *v, size_t n, char *out, size_t size);

/* The reply encoders: each answers r from the engine's answer stored in it. */
http_ret_t http_reply_fetch(req_t *r);   /* u.fetch: {"records":[...]} */
http_ret_t http_reply_ack(req_t *r);     /* u.settle: {"results":[...],...} */
http_ret_t http_reply_status(req_t *r);  /* u.status: one group, or {"groups":[...]} */
http_ret_t http_reply_metrics(req_t *r); /* u.status: the Prometheus exposition */
http_ret_t http_reply_ready(req_t *r);   /* u.status, with ready_msg: ready, or 503 */
http_ret_t http_reply_produce(req_t *r); /* u.produce: {"results":[...]} */
http_ret_t http_reply_seek(req_t *r);    /* u.seek: {"partitions":[...],...} */
http_ret_t http_reply_redrive(req_t *r); /* u.redrive: {"moved":N,"held":[...],...} */

/* ---- http_read.c: what the decoders read alike ---- */

/* Parses s as a decimal integer in min..max into *out. Returns 0, or -1 (out untouched). */
int http_parse_int(const char *s, long min, long max, long *out);

/* Reads the query parameter name (value v, NULL if absent) as an int into *out, or sets bit in
 * *unset when absent. Returns false after queueing the error when it is not an integer. Its
 * range is the validator's. */
bool http_opt_int(req_t *r, const char *name, const char *v, int *out, unsigned bit,
                  unsigned *unset, http_ret_t *ret);

/* A fetch's or a stream's query parameters (NULL: absent) and what they say. */
typedef struct http_query {
    bool stream; /* set by the caller: the stream's parameters, not the fetch's */
    const char *topics[MAX_TOPICS];
    size_t topic_cnt;
    bool too_many;
    const char *max, *wait_ms, *format, *deadline_ms, *subscriber, *ordered_batches;
    const char *value_format, *key_format;
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
bool http_query_read(ks_http_t *h, req_t *r, http_query_t *q, http_ret_t *ret);
void http_query_free(http_query_t *q);

/* The JSON readers a POST body's decoder shares. Each returns NULL (or false) after queueing
 * the 400 (or 429 for a body over http.max_request_bytes) in *ret. */
/* r's body as a new JSON tree, loaded with jansson's flags (JSON_ALLOW_NUL: strings may hold
 * \u0000); shape: what to send, for the error. */
json_t *http_body_json(ks_http_t *h, req_t *r, const char *shape, size_t flags, http_ret_t *ret);
/* Whether every key of o is one of known (NULL-terminated; list: the same for the message). */
bool http_only_fields(req_t *r, json_t *o, const char *what, const char *const *known,
                      const char *list, http_ret_t *ret);
/* v as a string with no NUL byte (which a C string would cut short); what names it. */
const char *http_json_name(req_t *r, json_t *v, const char *what, http_ret_t *ret);

/* ---- http_router.c: the router, and waiting for the engine ---- */

/* Answers a whole request (headers and body in): finds its row in h->routes and runs its
 * decoder, which answers at once or submits an engine command and parks the request. */
http_ret_t http_route(ks_http_t *h, req_t *r);

/* The first of rows[0..n) whose path matches url, or NULL; its {group} (or {topic}) segment
 * in *group: in place when it ends the URL, else copied into buf (a segment of gsize bytes or
 * more does not match). */
const route_t *http_route_find(const route_t *rows, size_t n, const char *url, char *buf,
                               size_t gsize, const char **group);

/* The row of first's path (first: http_route_find's answer; end: the table's end) that serves
 * method (a GET row serves HEAD too), or NULL; the methods that path serves, for Allow, into
 * allow ("GET, HEAD, POST"). */
const route_t *http_route_method(const route_t *first, const route_t *end, const char *method,
                                 char *allow, size_t size);

/* Identifies the caller (its bearer token, else its certificate's subject) into r->who and
 * checks the groups scope for group (NULL: identity only). Returns true, or false after
 * queueing the error. */
bool http_authorized(ks_http_t *h, req_t *r, const char *group, http_ret_t *ret);

/* Answers r from the engine's answer stored in it, by its row's encoder (a resumed request's
 * answer, or one that came before the park). */
http_ret_t http_reply(req_t *r);

/* Sends cmd (its type: r's route's command) to the engine with the engine's reference on r
 * for the command's callback, and parks r for the answer (or answers now: the engine's
 * refusal, or an answer already in). */
http_ret_t http_submit_park(ks_http_t *h, req_t *r, ks_cmd_req_t *cmd);

/* A request that parks until something happens (a long-poll fetch, a wait for the commit)
 * takes one of http.max_long_polls, given back by the engine's callback; false when none
 * is free. */
bool http_long_poll_claim(ks_http_t *h, req_t *r);

/* ---- the routes' decoders, one file per kind of route ---- */

/* http_groups.c: GET /v1/groups/{group}/records (and HEAD), the status rows (one group, the
 * listing), /metrics (every group's status, shown as a listing is), POST .../seek. */
http_ret_t http_fetch_decode(ks_http_t *h, req_t *r);
http_ret_t http_status_decode(ks_http_t *h, req_t *r);
http_ret_t http_metrics_decode(ks_http_t *h, req_t *r);
http_ret_t http_seek_decode(ks_http_t *h, req_t *r);

/* http_probe.c: /healthz (the engine's Kafka probe, at once), /readyz (every static group
 * running and restored, or ?group=NAME: that group not stalled), /openapi.yaml (the spec this
 * binary was built with). No caller check but /readyz?group= on the API listener. */
http_ret_t http_health_decode(ks_http_t *h, req_t *r);
http_ret_t http_ready_decode(ks_http_t *h, req_t *r);
http_ret_t http_openapi_decode(ks_http_t *h, req_t *r);

/* http_settle.c: the acks, nacks and deadline rows. */
http_ret_t http_decode_settle(ks_http_t *h, req_t *r);

/* http_redrive.c: POST /v1/groups/{group}/redrive. */
http_ret_t http_decode_redrive(ks_http_t *h, req_t *r);

/* http_produce.c: POST /v1/topics/{topic}/records ({topic}: the records' default topic). */
http_ret_t http_produce_decode(ks_http_t *h, req_t *r);
/* The row's encoder: the produce's answer, or, after a wait for the registry, its decode
 * again. */
http_ret_t http_produce_reply(req_t *r);
/* The request completed: forgets a wait for the registry. */
void http_produce_completed(req_t *r);
/* The server stops: every produce parked for the registry is woken and answered 503, and none
 * parks for it again (the server must find no request suspended). */
void http_produce_stop_waits(ks_http_t *h);

/* http_push.c: /v1/groups/{group}/push (a push set by API call). */
http_ret_t http_push_get(ks_http_t *h, req_t *r);
http_ret_t http_push_put(ks_http_t *h, req_t *r);
http_ret_t http_push_delete(ks_http_t *h, req_t *r);

/* http_page.c: GET /, the status page: answers at once, no engine command, no caller check
 * (the page asks the status API with whatever token it is given). */
http_ret_t http_page_decode(ks_http_t *h, req_t *r);
/* Now, in ms since the epoch (CLOCK_REALTIME). */
int64_t http_page_wall_ms(void);

/* http_stream.c: GET /v1/groups/{group}/stream. The decoder checks the request as a fetch is
 * checked, then answers with a response that stays open and writes records as the
 * subscriber-stream core leases them. */
http_ret_t http_stream_decode(ks_http_t *h, req_t *r);
/* r's stream ended (the request's completed hook): what is queued goes back, the leases go
 * back uncounted, the stream leaves the core. */
void http_stream_completed(req_t *r);
/* Every 250 ms (the server's deadline thread): resumes the idle streams whose heartbeat is due
 * or whose client closed its end, so the server writes or ends them. */
void http_stream_tick(ks_http_t *h, int64_t now_ms);
/* Before the server stops: every stream ends, none stays paused. */
void http_stream_stop_all(ks_http_t *h);

/* ---- http_routes.c: the route table ---- */

/* The table, read-only (its rows, *n of them): the router's, and the test's that holds it to
 * api/openapi.yaml. */
const route_t *http_route_table(size_t *n);

#endif
