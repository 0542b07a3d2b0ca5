/* http_server.c: the HTTP edge's libmicrohttpd daemons: connection limits and the header
 * and body deadlines, TLS and client certificates, request intake and suspend/resume. */
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_int.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

void http_req_unref(req_t *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    free(r->body);
    ks_batch_free(r->batch);
    free(r->acks);
    for (size_t i = 0; i < r->group_cnt; i++)
        ks_group_status_free(r->groups[i]);
    free(r->groups);
    free(r->produced);
    free(r->seek);
    ks_redrive_result_free(r->redrive);
    ks_auth_release(r->who);
    if (r->prod)
        free(r->prod->rec);
    free(r->prod);
    if (r->ack_ids) {
        for (size_t i = 0; i < r->ack_cnt && !r->ack_ids_in_body; i++)
            free(r->ack_ids[i]);
        free(r->ack_ids);
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void http_wake(req_t *r)
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

/* Suspends r until the engine answers, unless it already has. Returns true if the
 * answer is already here and the caller should reply now. */
bool http_park(req_t *r)
{
    pthread_mutex_lock(&r->lock);
    bool done = r->done;
    if (!done) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->lock);
    return done;
}

/* The connection's deadline record (its socket context), or NULL. */
static conn_t *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The caller's X-Request-Id if it is sane (1 to REQ_ID_MAX printable ASCII bytes, no space,
 * so a log line cannot be forged or split by it), else NULL. */
static const char *sane_req_id(struct MHD_Connection *conn)
{
    const char *v = NULL;
    size_t n = 0;
    if (MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, "X-Request-Id", strlen("X-Request-Id"),
                                      &v, &n) != MHD_YES ||
        !v || n == 0 || n > REQ_ID_MAX)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (v[i] <= ' ' || v[i] > '~')
            return NULL;
    return v;
}

/* A new request id: 32 hex digits, a random half drawn once per process and a half that
 * mixes the process's request count through a bijection (splitmix64's finalizer), so no two
 * requests of a process share one and ids do not reveal the count. */
static pthread_once_t req_id_once = PTHREAD_ONCE_INIT;
static uint64_t req_id_key[2];
static atomic_uint_fast64_t req_id_seq;

static void req_id_seed(void)
{
    if (getrandom(req_id_key, sizeof(req_id_key), 0) != sizeof(req_id_key))
        req_id_key[0] = (uint64_t)ks_now_ms() * 0x9E3779B97F4A7C15ULL ^ (uint64_t)getpid();
}

static void make_req_id(char *out, size_t size)
{
    pthread_once(&req_id_once, req_id_seed);
    uint64_t *key = req_id_key, seq = atomic_fetch_add(&req_id_seq, 1);
    uint64_t z = key[1] + seq * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    snprintf(out, size, "%016llx%016llx", (unsigned long long)key[0], (unsigned long long)z);
}

enum MHD_Result http_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *resp,
                           size_t bytes)
{
    conn_t *cn = conn_of(c);
    req_t *r = cn ? cn->cur : NULL;
    if (r) {
        MHD_add_response_header(resp, "X-Request-Id", r->req_id);
        r->status = status;
        r->resp_bytes = bytes;
    }
    if ((status == 429 || status == 503) && !MHD_get_response_header(resp, "Retry-After"))
        MHD_add_response_header(resp, "Retry-After", status == 429 ? "1" : "5");
    return MHD_queue_response(c, status, resp);
}

/* The access log line of r (http.access_log), and always for a 5xx answer. */
static void access_log(ks_http_t *h, req_t *r, enum MHD_RequestTerminationCode toe)
{
    if (!h->cfg->http_access_log && r->status < 500)
        return;
    char st[16];
    if (r->status)
        snprintf(st, sizeof(st), "%u", r->status);
    else
        snprintf(st, sizeof(st), "-"); /* never answered: the client left, or the daemon stops */
    ks_log(r->status >= 500 ? KS_LOG_WARN : KS_LOG_INFO, LOGC,
           "%s %s %s %llu bytes %lld ms%s request_id=%s", r->method[0] ? r->method : "-",
           r->raw_path, st, (unsigned long long)r->resp_bytes,
           (long long)(ks_now_ms() - r->start_ms),
           toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (ended early)", r->req_id);
}

/* libmicrohttpd's URI callback: runs once the request line is in, before it splits the
 * query into parameters or unescapes anything. Makes the request (its return value is
 * the request's con_cls) and notes what the raw URL says: its size and parameter count
 * (too many would overflow the connection's memory, see MAX_QUERY_PARAMS) and whether
 * the path holds %00, which unescaping would turn into a NUL that cuts names short. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    req_t *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->lock, NULL);
    r->conn = conn;
    r->h = cls;
    r->cn = conn_of(conn);
    r->start_ms = ks_now_ms();
    r->url_len = strlen(uri);
    size_t path_len = strcspn(uri, "?");
    const char *q = uri[path_len] ? uri + path_len + 1 : NULL;
    if (q && *q) {
        r->param_cnt = 1;
        for (const char *p = q; *p; p++)
            r->param_cnt += *p == '&';
    }
    for (size_t i = 0; i + 2 < path_len; i++)
        if (uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0')
            r->path_nul = true;
    snprintf(r->raw_path, sizeof(r->raw_path), "%.*s", (int)path_len, uri);
    if (r->url_len > MAX_URL_BYTES || r->param_cnt > MAX_QUERY_PARAMS) {
        r->url_too_big = true;
        /* libmicrohttpd has already found the '?' and parses the parameters from the byte
         * after it once this returns: an empty string there leaves none to overflow the
         * pool, and the request is answered 414 (the buffer is the connection's own). */
        if (q)
            *(char *)(uintptr_t)q = '\0';
    }
    return r;
}

/* True when the client closed its end of the connection (a read sees end of file).
 * Data waiting to be read (a pipelined request, TLS records) counts as still there. */
static bool peer_closed(struct MHD_Connection *conn)
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
    ks_http_t *h = cls;
    req_t *r = *con_cls;
    if (!r)
        return MHD_NO; /* on_uri makes every request */
    if (!r->started) {
        /* The headers are in; now the body has its own deadline. */
        r->started = true;
        snprintf(r->method, sizeof(r->method), "%s", method);
        const char *id = sane_req_id(conn);
        if (id)
            snprintf(r->req_id, sizeof(r->req_id), "%s", id);
        else
            make_req_id(r->req_id, sizeof(r->req_id));
        if (r->cn) {
            r->cn->cur = r; /* every answer on the connection is r's until it completes */
            atomic_store(&r->cn->deadline, ks_now_ms() + h->cfg->http_body_timeout_ms);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_big || (int64_t)(r->body_len + n) > h->cfg->max_request_bytes) {
            r->too_big = true;
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            r->body_cap = (r->body_len + n + 1) * 2;
            r->body = realloc(r->body, r->body_cap);
            if (!r->body)
                abort();
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }
    if (r->submitted) {
        /* Resumed: the engine has answered. A client that left while the request was
         * suspended gets no reply: the request ends with an error (on_completed). */
        if (http_park(r))
            return peer_closed(conn) ? MHD_NO : http_reply(r);
        return MHD_YES;
    }
    if (r->cn)
        atomic_store(&r->cn->deadline, 0); /* the request is whole: being answered now */
    return http_route(h, r, method, url);
}

/* The probe listener's access handler: on_request, for /healthz, /readyz and /metrics only. */
static enum MHD_Result on_probe_request(void *cls, struct MHD_Connection *conn, const char *url,
                                        const char *method, const char *version,
                                        const char *upload_data, size_t *upload_data_size,
                                        void **con_cls)
{
    req_t *r = *con_cls;
    if (r)
        r->health = true;
    return on_request(cls, conn, url, method, version, upload_data, upload_data_size, con_cls);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    ks_http_t *h = cls;
    req_t *r = *con_cls;
    if (r) {
        if (r->stream)
            http_stream_completed(r);
        if (r->started)
            access_log(h, r, toe);
        if (r->started && r->status)
            ks_metrics_http_request(r->method, r->status);
        if (r->cn && r->cn->cur == r)
            r->cn->cur = NULL;
        /* A kept-alive connection waits for its next request: silence ends it after
         * IDLE_TIMEOUT_S, and a drip after that plus http.header_timeout_ms. */
        if (r->cn)
            atomic_store(&r->cn->deadline,
                         ks_now_ms() + IDLE_TIMEOUT_S * 1000 + h->cfg->http_header_timeout_ms);
        pthread_mutex_lock(&r->lock);
        r->completed = true;
        uint64_t token = r->batch ? r->batch->deliver_token : 0;
        if (r->batch)
            r->batch->deliver_token = 0;
        pthread_mutex_unlock(&r->lock);
        /* The reply went out in full, or the client left (or the daemon stops): then its
         * records go back now, not at their deadline, and count no attempt. */
        if (token)
            ks_engine_delivered(h->eng, r->group, token,
                                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
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
    ks_http_t *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_t *c = calloc(1, sizeof(*c));
        if (!c)
            abort();
        c->fd = ci ? ci->connect_fd : -1;
        atomic_init(&c->deadline, ks_now_ms() + h->cfg->http_header_timeout_ms);
        pthread_mutex_lock(&h->conns_lock);
        c->next = h->conns;
        if (h->conns)
            h->conns->prev = c;
        h->conns = c;
        pthread_mutex_unlock(&h->conns_lock);
        *socket_context = c;
        return;
    }
    conn_t *c = *socket_context;
    if (!c)
        return;
    pthread_mutex_lock(&h->conns_lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&h->conns_lock);
    free(c);
    *socket_context = NULL;
}

/* The deadline sweep (its own thread): four times a second, shuts down the socket of
 * every connection past its header or body deadline; libmicrohttpd then reads the end
 * of the stream and closes it on its own thread. O(connections) a pass, a few
 * microseconds for thousands. */
static void *sweep_main(void *arg)
{
    ks_http_t *h = arg;
    pthread_mutex_lock(&h->conns_lock);
    while (!h->sweep_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->sweep_cond, &h->conns_lock, &ts);
        int64_t now = ks_now_ms();
        int closed = 0;
        for (conn_t *c = h->conns; c; c = c->next) {
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
        /* The streams' heartbeats, outside conns_lock: resuming takes libmicrohttpd's lock,
         * under which its thread may be about to take conns_lock (on_connection). */
        pthread_mutex_unlock(&h->conns_lock);
        http_stream_tick(h, now);
        pthread_mutex_lock(&h->conns_lock);
    }
    pthread_mutex_unlock(&h->conns_lock);
    return NULL;
}

#define MHD_LOG_PER_S 20 /* libmicrohttpd messages logged a second; the rest are counted */

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

static int parse_listen(const char *key, const char *s, struct sockaddr_in *sa, char *err,
                        size_t errsize)
{
    const char *colon = strrchr(s, ':');
    char host[256];
    if (!colon || (size_t)(colon - s) >= sizeof(host))
        goto bad;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    long port;
    if (http_parse_int(colon + 1, 0, 65535, &port) < 0)
        goto bad;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof(host), "127.0.0.1");
    if (!*host || !strcmp(host, "*"))
        sa->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        goto bad;
    return 0;
bad:
    snprintf(err, errsize, "config key '%s': expected IPv4-host:port, got \"%s\"", key, s);
    return -1;
}

static void http_free(ks_http_t *h)
{
    if (h->sweep_started) {
        pthread_mutex_lock(&h->conns_lock);
        h->sweep_stop = true;
        pthread_cond_signal(&h->sweep_cond);
        pthread_mutex_unlock(&h->conns_lock);
        pthread_join(h->sweep, NULL);
    }
    pthread_cond_destroy(&h->sweep_cond);
    pthread_mutex_destroy(&h->conns_lock);
    pthread_mutex_destroy(&h->streams_lock);
    http_tls_release(h);
    free(h);
}

ks_http_t *ks_http_start(ks_engine_t *eng, const ks_config_t *cfg, const ks_auth_t *auth,
                         ks_tls_t *tls, ks_subhub_t *hub, ks_push_t *push, char *err,
                         size_t errsize)
{
    struct sockaddr_in sa, hsa;
    if (parse_listen("http.listen", cfg->http_listen, &sa, err, errsize) < 0)
        return NULL;
    if (*cfg->http_health_listen &&
        parse_listen("http.health_listen", cfg->http_health_listen, &hsa, err, errsize) < 0)
        return NULL;
    ks_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        abort();
    h->eng = eng;
    h->cfg = cfg;
    h->auth = auth;
    h->hub = hub;
    h->push = push;
    h->started_wall_ms = http_page_wall_ms();
    pthread_mutex_init(&h->conns_lock, NULL);
    pthread_mutex_init(&h->streams_lock, NULL);
    atomic_init(&h->streams_stopping, false);
    pthread_cond_init(&h->sweep_cond, NULL);
    /* Connections past the open-files limit would fail in accept (EMFILE) and starve
     * Kafka's sockets; keep FD_RESERVE fds for the rest of the process. */
    unsigned max_conns = (unsigned)cfg->http_max_connections;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        rlim_t room = rl.rlim_cur > 2 * FD_RESERVE ? rl.rlim_cur - FD_RESERVE : rl.rlim_cur / 2;
        if (max_conns > room) {
            ks_warn(LOGC,
                    "http.max_connections %u exceeds what the open-files limit (%llu) leaves; "
                    "using %llu",
                    max_conns, (unsigned long long)rl.rlim_cur, (unsigned long long)room);
            max_conns = (unsigned)room;
        }
    }
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY |
                         MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem tls_opts[4];
    memset(tls_opts, 0, sizeof(tls_opts));
    size_t nt = 0;
    if (tls) {
        flags |= MHD_USE_TLS;
        nt = http_tls_options(h, tls, tls_opts);
    }
    tls_opts[nt] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    /* One epoll thread serves every connection (measured against a thread per connection
     * in tests/bench/http_conns.py); each gets CONN_MEMORY and the deadlines above. */
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
        max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->http_max_conns_per_client,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        (unsigned)1, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errsize, "cannot listen for HTTP on %s: %s", cfg->http_listen,
                 strerror(errno));
        http_free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : ntohs(sa.sin_port);
    if (*cfg->http_health_listen) {
        /* Plain HTTP, /healthz and /readyz only, with its own thread and bounds. */
        h->health_d = MHD_start_daemon(
            MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_ALLOW_SUSPEND_RESUME |
                MHD_USE_ERROR_LOG,
            0, NULL, NULL, on_probe_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
            MHD_OPTION_SOCK_ADDR, &hsa, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)HEALTH_MAX_CONNS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned)HEALTH_MAX_CONNS_PER_IP, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)CONN_MEMORY, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
        if (!h->health_d) {
            snprintf(err, errsize, "cannot listen for HTTP probes on %s: %s",
                     cfg->http_health_listen, strerror(errno));
            MHD_stop_daemon(h->d);
            http_free(h);
            return NULL;
        }
        info = MHD_get_daemon_info(h->health_d, MHD_DAEMON_INFO_BIND_PORT);
        h->health_port = info ? info->port : ntohs(hsa.sin_port);
        ks_info(LOGC, "probes (/healthz, /readyz) on http://%s:%d", inet_ntoa(hsa.sin_addr),
                h->health_port);
    }
    if (pthread_create(&h->sweep, NULL, sweep_main, h) != 0) {
        snprintf(err, errsize, "cannot start the HTTP deadline thread");
        MHD_stop_daemon(h->d);
        if (h->health_d)
            MHD_stop_daemon(h->health_d);
        http_free(h);
        return NULL;
    }
    pthread_setname_np(h->sweep, "ks:http-sweep");
    h->sweep_started = true;
    ks_info(LOGC, "listening on %s://%s:%d%s", h->tls ? "https" : "http", inet_ntoa(sa.sin_addr),
            h->port, h->mtls ? " (client certificates required)" : "");
    return h;
}

int ks_http_port(const ks_http_t *h)
{
    return h->port;
}

void ks_http_quiesce(ks_http_t *h)
{
    MHD_socket s = MHD_quiesce_daemon(h->d);
    if (s != MHD_INVALID_SOCKET)
        close(s);
}

void ks_http_stop(ks_http_t *h)
{
    if (!h)
        return;
    http_stream_stop_all(h); /* libmicrohttpd panics on a connection still suspended */
    MHD_stop_daemon(h->d);
    if (h->health_d)
        MHD_stop_daemon(h->health_d);
    http_free(h);
}
