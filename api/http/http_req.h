/* http_req.h: the HTTP edge's neutral request and response: what a handler reads of a request
 * (method, path, query, headers, body, the client's certificate) and how it answers (a status,
 * headers and a body, or a body pulled as it comes), whatever server library carries them. An
 * adapter implements it: http_mhd.c, for libmicrohttpd, is the one there is; no other file
 * sees the library's types. */
#ifndef KS_HTTP_REQ_H
#define KS_HTTP_REQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A URL longer than this, or with more query parameters, is answered 414 (see http_mhd.c for
 * why the adapter needs the bound). */
#define HTTP_MAX_URL_BYTES    8192
#define HTTP_MAX_QUERY_PARAMS 128
#define HTTP_REQ_ID_MAX       128 /* longest X-Request-Id taken from a caller */

/* What a handler or a hook returns: the request was answered or parked (HTTP_RET_OK), or the
 * connection must be closed without an answer (HTTP_RET_CLOSE: the answer could not be
 * queued, or a resumed request's client left). */
typedef enum { HTTP_RET_OK = 0, HTTP_RET_CLOSE = -1 } http_ret_t;

/* One response header. Both strings are borrowed: the adapter copies them. */
typedef struct http_header {
    const char *name, *value;
} http_header_t;

struct http_srv;
struct http_srv_ops;

/* One request, from its request line until its last reference goes. The adapter allocates
 * ops->req_size bytes, zeroed, of which this is the start (the edge's request embeds it as its
 * first member). Fields are set by the adapter and read-only to handlers unless said. */
typedef struct http_req {
    /* From the request line (before the headers are in). */
    size_t url_len, param_cnt; /* the raw URL's bytes and query parameters */
    bool url_too_big;          /* over HTTP_MAX_URL_BYTES or HTTP_MAX_QUERY_PARAMS: answer 414 */
    bool path_nul;             /* the raw path holds %00 */
    char raw_path[256];        /* the start of the path as sent (escaped), for messages */
    int64_t start_ms;          /* when the request line came (CLOCK_MONOTONIC ms) */
    bool probe;                /* came in on the probe listener */
    /* Once the headers are in (started). */
    bool started;
    const char *method;               /* as sent; valid until the request completes */
    const char *url;                  /* the path, unescaped; valid until the request completes */
    char log_method[16];              /* method's first bytes, for the access log and the metrics */
    char req_id[HTTP_REQ_ID_MAX + 1]; /* the caller's X-Request-Id when sane, else a new one */
    /* The body, NUL-terminated (NULL when empty); handlers may write into it (settle reads ack
     * ids in place). body_too_big: more than the server's bound came, and was dropped. */
    char *body;
    size_t body_len, body_cap;
    bool body_too_big;
    /* What was answered, for the access log: the status, and the body's bytes (a stream's: what
     * its pull callback handed over, which the edge sets). */
    unsigned status;
    uint64_t resp_bytes;
    /* Guards the park state below; the edge also guards with it what its engine callbacks
     * store in the request. */
    pthread_mutex_t lock;
    bool parked;    /* the handler parked it (http_park): the next call is the resume */
    bool suspended; /* waiting for http_wake (under lock) */
    bool done;      /* http_wake came (under lock) */
    /* The adapter's. */
    atomic_int refs;
    const struct http_srv_ops *ops;
    void *conn;     /* the library's connection */
    void *conn_rec; /* the adapter's record of the connection (deadlines) */
    struct http_srv *srv;
} http_req_t;

/* ---- reading a request (the thread serving it, while it has not completed) ---- */

/* The value of request header name (any case), or NULL. */
const char *http_req_header(http_req_t *r, const char *name);

/* The value of query parameter name, or NULL if absent ("" for a bare ?name). */
const char *http_req_query(http_req_t *r, const char *name);

/* Calls fn for each query parameter, in order: its name and value, unescaped, with their
 * lengths (a %00 leaves a NUL inside them); value NULL for a bare ?name. fn returns false to
 * stop. */
typedef bool (*http_kv_fn)(void *ctx, const char *key, size_t key_len, const char *value,
                           size_t value_len);
void http_req_query_each(http_req_t *r, http_kv_fn fn, void *ctx);

/* With mTLS, whether the client's certificate verified against the client CA in force; true
 * without mTLS. */
bool http_req_cert_ok(http_req_t *r);

/* The subject DN (RFC 4514) of the client's certificate into buf, or NULL (no mTLS, or no
 * certificate). */
const char *http_req_cert_subject(http_req_t *r, char *buf, size_t size);

/* ---- answering (the thread serving r) ---- */

/* Answers r: status, hdrs[0..n) and the body body[0..len), which the adapter takes (freed with
 * free() once sent; NULL when len is 0). Adds X-Request-Id, and Retry-After to a 429 or 503
 * that has none; a HEAD request's answer goes without its body. Notes the status and size for
 * the access log. Every answer goes through here or the two below. Returns HTTP_RET_CLOSE when
 * the answer could not be queued (the body is freed either way). */
http_ret_t http_respond(http_req_t *r, unsigned status, const http_header_t *hdrs, size_t n,
                        char *body, size_t len);

/* The same with a body that outlives every answer (compiled in): borrowed, never freed. */
http_ret_t http_respond_static(http_req_t *r, unsigned status, const http_header_t *hdrs, size_t n,
                               const void *body, size_t len);

/* A body written as it comes. pull(ctx, pos, buf, max) is called on the serving thread each
 * time the adapter can send more: pos bytes were handed before; it fills buf with up to max
 * bytes and returns how many, or HTTP_PULL_END (the body is whole), HTTP_PULL_ERROR (end the
 * connection), or 0 (nothing now) after calling http_pause(r): pull is called again once
 * http_resume(r) comes. done(ctx) runs once the adapter holds the response no more, exactly
 * once whatever this returns. block: the bytes one pull may fill. */
#define HTTP_PULL_END   ((ssize_t)-1)
#define HTTP_PULL_ERROR ((ssize_t)-2)
typedef ssize_t (*http_pull_fn)(void *ctx, uint64_t pos, char *buf, size_t max);
http_ret_t http_respond_stream(http_req_t *r, unsigned status, const http_header_t *hdrs, size_t n,
                               size_t block, http_pull_fn pull, void (*done)(void *ctx), void *ctx);

/* A stream's pause: from its pull callback only, before it returns 0. */
void http_pause(http_req_t *r);

/* Ends a pause: pull is called again. Any thread, only after http_pause and before the
 * request completed; a resume that comes before the pause is lost (the caller keeps track of
 * both under its own lock). */
void http_resume(http_req_t *r);

/* Whether the client closed its end (a read sees end of file or a reset); data waiting to be
 * read counts as still there. Any thread, before the request completed. */
bool http_peer_closed(http_req_t *r);

/* Shuts the connection's socket down: a stream whose client reads nothing cannot be ended
 * by its pull callback, as none is called; the failed write ends it. Any thread, before the
 * request completed. */
void http_shutdown(http_req_t *r);

/* ---- waiting for an answer (the engine's) ---- */

/* Takes one more reference on r; each is dropped with http_req_unref (or http_wake). */
void http_req_ref(http_req_t *r);

/* Drops one reference; the last calls the edge's ops->free and frees r. Any thread. */
void http_req_unref(http_req_t *r);

/* Parks r until http_wake, unless it came already. Returns true if it did: answer now. Once
 * parked, r's next call is ops->resumed. The thread serving r. */
bool http_park(http_req_t *r);

/* r's answer is in: marks it done, resumes r if it is parked (ops->resumed then answers it on
 * the serving thread) and drops a reference. Any thread (a group loop's, in an engine
 * callback). */
void http_wake(http_req_t *r);

/* ---- for adapters: what every one of them does alike (http_req.c) ---- */

/* Notes what the raw request target says before anything is unescaped: its size and query
 * parameters count (url_too_big), whether the path holds %00, the path as sent. Returns the
 * offset of the query's first byte, or 0 if there is none. */
size_t http_req_scan_uri(http_req_t *r, const char *uri);

/* Sets r->req_id: the caller's X-Request-Id v[0..n) if it is sane (1 to HTTP_REQ_ID_MAX
 * printable ASCII bytes, no space, so a log line cannot be forged or split by it; v NULL when
 * absent), else a new one. */
void http_req_set_id(http_req_t *r, const char *v, size_t n);

/* The Retry-After an answer of status with headers hdrs[0..n) gets when it has none: "1" for a
 * 429, "5" for a 503 (Kafka or a group must come back), else NULL. */
const char *http_req_retry_after(unsigned status, const http_header_t *hdrs, size_t n);

/* Appends body bytes to r->body (NUL-terminated) up to max bytes in all; past it, sets
 * body_too_big and drops the rest. */
void http_req_add_body(http_req_t *r, const char *p, size_t n, int64_t max);

#endif
