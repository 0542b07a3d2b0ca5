/* http_mhd.c: the HTTP edge's libmicrohttpd adapter (http_srv.h, http_req.h): the daemons and
 * their connection limits, the header and body deadlines, request intake, suspend and resume,
 * and the neutral answers made into libmicrohttpd's responses. The only file that sees
 * libmicrohttpd's types.
 *
 * Suspend and resume (libmicrohttpd 0.9.75, checked in its source, src/microhttpd/connection.c
 * and daemon.c, and microhttpd.h): a content reader callback may return 0 ("nothing now"), but
 * with the internal polling thread that alone busy-loops; MHD_suspend_connection may be called
 * from the content reader callback (the header names it and the access handler as the only safe
 * places), and returning 0 then leaves the connection in CHUNKED_BODY_UNREADY out of the epoll
 * set until MHD_resume_connection, which any thread may call (it takes the daemon's cleanup
 * mutex and signals its ITC; MHD_ALLOW_SUSPEND_RESUME includes MHD_USE_ITC); resumed, the
 * callback is called again. Resuming a connection that is not (yet) suspended makes the next
 * suspend a no-op and the connection then waits with nothing to wake it: hence http_pause and
 * http_resume's rule that the caller pairs them under its own lock. A suspended connection sees
 * neither timeouts nor a client that left, and MHD_stop_daemon panics on one still suspended. */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_srv.h"
#include "log.h"
#include "util.h"

#define LOGC "http"
/* Both kinds of too big a URL (HTTP_MAX_URL_BYTES, HTTP_MAX_QUERY_PARAMS) fit in CONN_MEMORY
 * with the headers: libmicrohttpd 0.9.75 keeps a record of ~56 bytes per parameter in the
 * connection's pool, and when they overflow it logs a 431 that it never sends
 * (parse_initial_message_line ignores the failed parse), so the request hung. */
#define CONN_MEMORY    (64 * 1024) /* per connection; pages are touched as used */
#define IDLE_TIMEOUT_S 120         /* libmicrohttpd's silence timeout */
/* The probe listener's bounds. */
#define PROBE_MAX_CONNS        64
#define PROBE_MAX_CONNS_PER_IP 16
#define FD_RESERVE             512 /* fds left to Kafka, groups and gRPC below the limit */
#define MHD_LOG_PER_S          20 /* libmicrohttpd messages logged a second; the rest are counted */

_Static_assert(HTTP_PULL_END == MHD_CONTENT_READER_END_OF_STREAM, "pull's end is the reader's");
_Static_assert(HTTP_PULL_ERROR == MHD_CONTENT_READER_END_WITH_ERROR,
               "pull's error is the reader's");

/* One open connection, for the header and body deadlines that a slow drip cannot extend
 * (libmicrohttpd's own timeout counts only silence). It is libmicrohttpd's socket context:
 * made when the connection starts and freed when it closes, on the daemon's thread. */
typedef struct conn {
    struct conn *prev, *next; /* in http_srv.conns; @locks http_srv.conns_lock */
    int fd;
    /* ms on CLOCK_MONOTONIC at which the deadline sweep shuts the socket down; 0 while a
     * request is being answered (a long-poll has its own wait). Set by the daemon thread,
     * read by the sweep. */
    _Atomic int64_t deadline;
} conn_t;

struct http_srv {
    struct MHD_Daemon *d;
    struct MHD_Daemon *probe_d; /* or NULL */
    const http_srv_ops_t *ops;
    void *ctx;
    http_tls_t *tls;
    bool mtls;
    int port, probe_port;
    int64_t header_timeout_ms, body_timeout_ms, max_body_bytes;

    pthread_mutex_t conns_lock; /* guards conns and the sweep's stop flag */
    pthread_cond_t sweep_cond;
    conn_t *conns;
    bool sweep_stop, sweep_started;
    pthread_t sweep;
};

static http_ret_t ret_of(enum MHD_Result m)
{
    return m == MHD_YES ? HTTP_RET_OK : HTTP_RET_CLOSE;
}

static enum MHD_Result mhd_of(http_ret_t r)
{
    return r == HTTP_RET_OK ? MHD_YES : MHD_NO;
}

/* ---- the neutral request (http_req.h) ---- */

void http_req_ref(http_req_t *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void http_req_unref(http_req_t *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    r->ops->free(r);
    free(r->body);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void http_wake(http_req_t *r)
{
    pthread_mutex_lock(&r->lock);
    r->done = true;
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
    pthread_mutex_unlock(&r->lock);
    http_req_unref(r);
}

bool http_park(http_req_t *r)
{
    pthread_mutex_lock(&r->lock);
    r->parked = true;
    bool done = r->done;
    if (!done) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->lock);
    return done;
}

void http_pause(http_req_t *r)
{
    MHD_suspend_connection(r->conn);
}

void http_resume(http_req_t *r)
{
    MHD_resume_connection(r->conn);
}

const char *http_req_header(http_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *http_req_query(http_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

typedef struct {
    http_kv_fn fn;
    void *ctx;
} each_t;

static enum MHD_Result each_arg(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_len,
                                const char *value, size_t value_len)
{
    each_t *e = cls;
    return e->fn(e->ctx, key, key_len, value, value_len) ? MHD_YES : MHD_NO;
}

void http_req_query_each(http_req_t *r, http_kv_fn fn, void *ctx)
{
    each_t e = {fn, ctx};
    MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND, each_arg, &e);
}

/* The connection's TLS session when mTLS is on, else NULL. */
static gnutls_session_t mtls_session(http_req_t *r)
{
    if (!r->srv->mtls)
        return NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    return ci ? (gnutls_session_t)ci->tls_session : NULL;
}

bool http_req_cert_ok(http_req_t *r)
{
    return !r->srv->mtls || http_tls_peer_ok(r->srv->tls, mtls_session(r));
}

const char *http_req_cert_subject(http_req_t *r, char *buf, size_t size)
{
    return http_tls_subject(r->srv->tls, mtls_session(r), buf, size);
}

static int conn_fd(http_req_t *r)
{
    const conn_t *c = r->conn_rec;
    return c ? c->fd : -1;
}

bool http_peer_closed(http_req_t *r)
{
    int fd = conn_fd(r);
    char byte;
    if (fd < 0)
        return false;
    ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void http_shutdown(http_req_t *r)
{
    int fd = conn_fd(r);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

/* ---- answers ---- */

/* Queues resp (made from r's answer, destroyed here) with hdrs, r's X-Request-Id and the
 * default Retry-After; notes status and bytes for the access log. */
static http_ret_t queue(http_req_t *r, unsigned status, struct MHD_Response *resp,
                        const http_header_t *hdrs, size_t n, size_t bytes)
{
    if (!resp)
        abort(); /* out of memory, as every allocation here */
    for (size_t i = 0; i < n; i++)
        MHD_add_response_header(resp, hdrs[i].name, hdrs[i].value);
    MHD_add_response_header(resp, "X-Request-Id", r->req_id);
    const char *ra = http_req_retry_after(status, hdrs, n);
    if (ra)
        MHD_add_response_header(resp, "Retry-After", ra);
    r->status = status;
    r->resp_bytes = bytes;
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return ret_of(ret);
}

http_ret_t http_respond(http_req_t *r, unsigned status, const http_header_t *hdrs, size_t n,
                        char *body, size_t len)
{
    return queue(r, status, MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE), hdrs,
                 n, len);
}

http_ret_t http_respond_static(http_req_t *r, unsigned status, const http_header_t *hdrs, size_t n,
                               const void *body, size_t len)
{
    return queue(
        r, status,
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_PERSISTENT), hdrs,
        n, len);
}

http_ret_t http_respond_stream(http_req_t *r, unsigned status, const http_header_t *hdrs, size_t n,
                               size_t block, http_pull_fn pull, void (*done)(void *ctx), void *ctx)
{
    /* pull and done are libmicrohttpd's content reader and its free callback as they are. */
    return queue(r, status,
                 MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, block, pull, ctx, done), hdrs,
                 n, 0);
}

/* ---- the daemons' callbacks ---- */

/* The connection's deadline record (its socket context), or NULL. */
static conn_t *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* libmicrohttpd's URI callback: runs once the request line is in, before it splits the query
 * into parameters or unescapes anything. Makes the request (its return value is the
 * request's con_cls) and notes what the raw URL says (http_req_scan_uri). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    http_srv_t *s = cls;
    http_req_t *r = calloc(1, s->ops->req_size);
    if (!r)
        abort();
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->lock, NULL);
    r->ops = s->ops;
    r->srv = s;
    r->conn = conn;
    r->conn_rec = conn_of(conn);
    r->start_ms = ks_now_ms();
    size_t q = http_req_scan_uri(r, uri);
    /* libmicrohttpd has already found the '?' and parses the parameters from the byte after it
     * once this returns: an empty string there leaves none to overflow the pool (see
     * CONN_MEMORY), and the request is answered 414 (the buffer is the connection's own). */
    if (r->url_too_big && q)
        *(char *)(uintptr_t)(uri + q) = '\0';
    s->ops->init(s->ctx, r);
    return r;
}

/* True when the client closed its end of the connection (a read sees end of file).
 * Data waiting to be read (a pipelined request, TLS records) counts as still there. */
static bool peer_eof(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    char byte;
    return recv(ci->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_srv_t *s = cls;
    http_req_t *r = *con_cls;
    conn_t *cn = r ? r->conn_rec : NULL;
    if (!r)
        return MHD_NO; /* on_uri makes every request */
    if (!r->started) {
        /* The headers are in; now the body has its own deadline. */
        r->started = true;
        r->method = method;
        r->url = url;
        snprintf(r->log_method, sizeof(r->log_method), "%s", method);
        const char *v = NULL;
        size_t n = 0;
        if (MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, "X-Request-Id",
                                          strlen("X-Request-Id"), &v, &n) != MHD_YES)
            v = NULL;
        http_req_set_id(r, v, n);
        if (cn)
            atomic_store(&cn->deadline, ks_now_ms() + s->body_timeout_ms);
        return MHD_YES;
    }
    if (*upload_data_size) {
        http_req_add_body(r, upload_data, *upload_data_size, s->max_body_bytes);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->parked) {
        /* Resumed: the answer is in. A client that left while the request was suspended gets
         * no reply: the request ends with an error (on_completed). */
        if (http_park(r))
            return peer_eof(conn) ? MHD_NO : mhd_of(s->ops->resumed(s->ctx, r));
        return MHD_YES;
    }
    if (cn)
        atomic_store(&cn->deadline, 0); /* the request is whole: being answered now */
    return mhd_of(s->ops->handle(s->ctx, r));
}

/* The probe listener's access handler: on_request, marking the request a probe's. */
static enum MHD_Result on_probe_request(void *cls, struct MHD_Connection *conn, const char *url,
                                        const char *method, const char *version,
                                        const char *upload_data, size_t *upload_data_size,
                                        void **con_cls)
{
    http_req_t *r = *con_cls;
    if (r)
        r->probe = true;
    return on_request(cls, conn, url, method, version, upload_data, upload_data_size, con_cls);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_srv_t *s = cls;
    http_req_t *r = *con_cls;
    if (r) {
        s->ops->completed(s->ctx, r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        /* A kept-alive connection waits for its next request: silence ends it after
         * IDLE_TIMEOUT_S, and a drip after that plus the header timeout. */
        conn_t *cn = r->conn_rec;
        if (cn)
            atomic_store(&cn->deadline, ks_now_ms() + IDLE_TIMEOUT_S * 1000 + s->header_timeout_ms);
        http_req_unref(r);
    }
    *con_cls = NULL;
}

/* libmicrohttpd's connection notifications (daemon thread): a new connection gets its
 * header deadline and joins the sweep's list; a closed one leaves it before its socket
 * is closed, so the sweep never shuts down a reused fd. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_srv_t *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_t *c = calloc(1, sizeof(*c));
        if (!c)
            abort();
        c->fd = ci ? ci->connect_fd : -1;
        atomic_init(&c->deadline, ks_now_ms() + s->header_timeout_ms);
        pthread_mutex_lock(&s->conns_lock);
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        pthread_mutex_unlock(&s->conns_lock);
        *socket_context = c;
        return;
    }
    conn_t *c = *socket_context;
    if (!c)
        return;
    pthread_mutex_lock(&s->conns_lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&s->conns_lock);
    free(c);
    *socket_context = NULL;
}

/* The deadline sweep (its own thread): four times a second, shuts down the socket of
 * every connection past its header or body deadline; libmicrohttpd then reads the end
 * of the stream and closes it on its own thread. O(connections) a pass, a few
 * microseconds for thousands. Then the edge's tick. */
static void *sweep_main(void *arg)
{
    http_srv_t *s = arg;
    pthread_mutex_lock(&s->conns_lock);
    while (!s->sweep_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->sweep_cond, &s->conns_lock, &ts);
        int64_t now = ks_now_ms();
        int closed = 0;
        for (conn_t *c = s->conns; c; c = c->next) {
            int64_t d = atomic_load(&c->deadline);
            if (d && now >= d && c->fd >= 0) {
                shutdown(c->fd, SHUT_RDWR);
                atomic_store(&c->deadline, 0);
                closed++;
            }
        }
        if (closed)
            ks_info(LOGC,
                    "closed %d connection%s past the header or body deadline "
                    "(http.header_timeout_ms, http.body_timeout_ms)",
                    closed, closed == 1 ? "" : "s");
        /* The tick outside conns_lock: resuming takes libmicrohttpd's lock, under which its
         * thread may be about to take conns_lock (on_connection). */
        pthread_mutex_unlock(&s->conns_lock);
        s->ops->tick(s->ctx, now);
        pthread_mutex_lock(&s->conns_lock);
    }
    pthread_mutex_unlock(&s->conns_lock);
    return NULL;
}

/* libmicrohttpd's messages, at most MHD_LOG_PER_S a second: a flood of connections makes
 * one per connection ("Server reached connection limit"), and the log must not become
 * the flood's next victim. Any daemon thread. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int64_t second;
    static int logged, dropped;
    int64_t now = ks_now_ms() / 1000;
    pthread_mutex_lock(&lock);
    int was_dropped = 0;
    if (now != second) {
        was_dropped = dropped;
        second = now;
        logged = dropped = 0;
    }
    bool log = logged < MHD_LOG_PER_S;
    if (log)
        logged++;
    else
        dropped++;
    pthread_mutex_unlock(&lock);
    if (was_dropped)
        ks_warn(LOGC, "%d libmicrohttpd messages were not logged (more than %d a second)",
                was_dropped, MHD_LOG_PER_S);
    if (!log)
        return;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    ks_warn(LOGC, "%s", msg);
}

/* ---- the server (http_srv.h) ---- */

static void srv_free(http_srv_t *s)
{
    if (s->sweep_started) {
        pthread_mutex_lock(&s->conns_lock);
        s->sweep_stop = true;
        pthread_cond_signal(&s->sweep_cond);
        pthread_mutex_unlock(&s->conns_lock);
        pthread_join(s->sweep, NULL);
    }
    pthread_cond_destroy(&s->sweep_cond);
    pthread_mutex_destroy(&s->conns_lock);
    free(s);
}

/* Connections past the open-files limit would fail in accept (EMFILE) and starve Kafka's
 * sockets: max, less FD_RESERVE fds kept for the rest of the process. */
static unsigned conns_within_fds(unsigned max)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        rlim_t room = rl.rlim_cur > 2 * FD_RESERVE ? rl.rlim_cur - FD_RESERVE : rl.rlim_cur / 2;
        if (max > room) {
            ks_warn(LOGC,
                    "http.max_connections %u exceeds what the open-files limit (%llu) leaves; "
                    "using %llu",
                    max, (unsigned long long)rl.rlim_cur, (unsigned long long)room);
            max = (unsigned)room;
        }
    }
    return max;
}

http_srv_t *http_srv_start(const http_srv_opts_t *o, const http_srv_ops_t *ops, void *ctx,
                           char *err, size_t errsize)
{
    http_srv_t *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->ops = ops;
    s->ctx = ctx;
    s->tls = o->tls;
    s->header_timeout_ms = o->header_timeout_ms;
    s->body_timeout_ms = o->body_timeout_ms;
    s->max_body_bytes = o->max_body_bytes;
    pthread_mutex_init(&s->conns_lock, NULL);
    pthread_cond_init(&s->sweep_cond, NULL);
    unsigned max_conns = conns_within_fds(o->max_conns);
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY |
                         MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem tls_opts[3];
    memset(tls_opts, 0, sizeof(tls_opts));
    size_t nt = 0;
    if (o->tls) {
        flags |= MHD_USE_TLS;
        tls_opts[nt++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
                                                 (void *)(uintptr_t)http_tls_pick_cert};
        /* A client CA makes libmicrohttpd ask for a client certificate. */
        const char *ca = http_tls_client_ca(o->tls);
        s->mtls = ca != NULL;
        if (ca)
            tls_opts[nt++] =
                (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, (void *)(uintptr_t)ca};
    }
    tls_opts[nt] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    /* One epoll thread serves every connection (measured against a thread per connection
     * in tests/bench/http_conns.py); each gets CONN_MEMORY and the deadlines above. */
    s->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_SOCK_ADDR, &o->addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
        max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_conns_per_client,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        (unsigned)1, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, errsize, "cannot listen for HTTP on %s: %s", o->name, strerror(errno));
        srv_free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : ntohs(o->addr.sin_port);
    if (o->probe_name) {
        s->probe_d = MHD_start_daemon(
            MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_ALLOW_SUSPEND_RESUME |
                MHD_USE_ERROR_LOG,
            0, NULL, NULL, on_probe_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
            MHD_OPTION_SOCK_ADDR, &o->probe_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)PROBE_MAX_CONNS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned)PROBE_MAX_CONNS_PER_IP, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)CONN_MEMORY, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
        if (!s->probe_d) {
            snprintf(err, errsize, "cannot listen for HTTP probes on %s: %s", o->probe_name,
                     strerror(errno));
            MHD_stop_daemon(s->d);
            srv_free(s);
            return NULL;
        }
        info = MHD_get_daemon_info(s->probe_d, MHD_DAEMON_INFO_BIND_PORT);
        s->probe_port = info ? info->port : ntohs(o->probe_addr.sin_port);
    }
    if (pthread_create(&s->sweep, NULL, sweep_main, s) != 0) {
        snprintf(err, errsize, "cannot start the HTTP deadline thread");
        MHD_stop_daemon(s->d);
        if (s->probe_d)
            MHD_stop_daemon(s->probe_d);
        srv_free(s);
        return NULL;
    }
    pthread_setname_np(s->sweep, "ks:http-sweep");
    s->sweep_started = true;
    return s;
}

int http_srv_port(const http_srv_t *s)
{
    return s->port;
}

int http_srv_probe_port(const http_srv_t *s)
{
    return s->probe_port;
}

void http_srv_quiesce(http_srv_t *s)
{
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void http_srv_stop(http_srv_t *s)
{
    MHD_stop_daemon(s->d);
    if (s->probe_d)
        MHD_stop_daemon(s->probe_d);
    srv_free(s);
}
