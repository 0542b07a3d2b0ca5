/* http_srv.h: the HTTP server an adapter runs for the edge: its listeners and their bounds, and
 * the hooks through which it hands the edge each request (http_req.h). http_mhd.c implements it
 * on libmicrohttpd. */
#ifndef KS_HTTP_SRV_H
#define KS_HTTP_SRV_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_req.h"
#include "http_tls.h"

typedef struct http_srv http_srv_t;

/* The listeners and their bounds. */
typedef struct http_srv_opts {
    struct sockaddr_in addr; /* the API listener */
    const char *name;        /* its address as configured, for messages */
    unsigned max_conns, max_conns_per_client;
    /* The probe listener (probe_name NULL: none): plain HTTP, bounds of its own, so a flood of
     * the API listener never reaches it and one prober cannot take all of it. */
    struct sockaddr_in probe_addr;
    const char *probe_name;
    /* ms a new connection has for its request's headers, and a request for its body, that a
     * slow drip cannot extend (silence alone ends a connection after the library's own idle
     * timeout); the most body bytes taken. */
    int64_t header_timeout_ms, body_timeout_ms, max_body_bytes;
    http_tls_t *tls; /* NULL: plain HTTP; borrowed until http_srv_stop */
} http_srv_opts_t;

/* The edge's hooks; ctx is http_srv_start's. Each runs on a thread of the server's unless
 * said. */
typedef struct http_srv_ops {
    /* The bytes of a request: the edge's request struct, whose first member is http_req_t. */
    size_t req_size;
    /* A new request (its request line is in): r is zeroed but for what the adapter set. */
    void (*init)(void *ctx, http_req_t *r);
    /* The request is whole (headers and body): answer it, or park it. */
    http_ret_t (*handle)(void *ctx, http_req_t *r);
    /* A parked request's answer came (http_wake): answer it now. */
    http_ret_t (*resumed)(void *ctx, http_req_t *r);
    /* The request ended: ok when its answer went out in full (false: the client left, or the
     * server stops). Called once for every request init saw; the adapter's reference goes
     * after it. */
    void (*completed)(void *ctx, http_req_t *r, bool ok);
    /* The request's last reference went (any thread): free what the edge hangs on it. */
    void (*free)(http_req_t *r);
    /* Every 250 ms, on the server's deadline thread. */
    void (*tick)(void *ctx, int64_t now_ms);
} http_srv_ops_t;

/* Starts listening and serving: ops (kept, as ctx) gets every request. Returns NULL with err. */
http_srv_t *http_srv_start(const http_srv_opts_t *o, const http_srv_ops_t *ops, void *ctx,
                           char *err, size_t errsize);

/* The bound ports of the API and the probe listener (0: none). */
int http_srv_port(const http_srv_t *s);
int http_srv_probe_port(const http_srv_t *s);

/* Stops accepting on the API listener; requests in progress go on, the probe listener too. */
void http_srv_quiesce(http_srv_t *s);

/* Closes every connection (each request's completed runs), stops the threads and frees s. No
 * request may be paused by then (a stream must have been resumed to end). */
void http_srv_stop(http_srv_t *s);

#endif
