/* http_api.c: the HTTP edge's start and stop (http_api.h), and its hooks into the server
 * (http_srv.h): each request routed, answered when its engine command comes back, logged,
 * counted and freed with what its route hung on it. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_api.h"
#include "http_int.h"
#include "http_srv.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

/* ---- the server's hooks ---- */

static void on_init(void *ctx, http_req_t *io)
{
    req_of(io)->h = ctx;
}

static http_ret_t on_handle(void *ctx, http_req_t *io)
{
    return http_route(ctx, req_of(io));
}

static http_ret_t on_resumed(void *ctx, http_req_t *io)
{
    return http_reply(req_of(io));
}

/* The access log line of r (http.access_log), and always for a 5xx answer. */
static void access_log(ks_http_t *h, req_t *r, bool ok)
{
    const http_req_t *io = &r->io;
    if (!h->cfg->http_access_log && io->status < 500)
        return;
    char st[16];
    if (io->status)
        snprintf(st, sizeof(st), "%u", io->status);
    else
        snprintf(st, sizeof(st), "-"); /* never answered: the client left, or the server stops */
    ks_log(io->status >= 500 ? KS_LOG_WARN : KS_LOG_INFO, LOGC,
           "%s %s %s %llu bytes %lld ms%s request_id=%s", io->log_method[0] ? io->log_method : "-",
           io->raw_path, st, (unsigned long long)io->resp_bytes,
           (long long)(ks_now_ms() - io->start_ms), ok ? "" : " (ended early)", io->req_id);
}

/* Whether r is a record stream's (its row sends no command and its decoder opened one). */
static bool is_stream(const req_t *r)
{
    return r->route && r->route->cmd == KS_CMD_NONE && r->u.stream;
}

static void on_completed(void *ctx, http_req_t *io, bool ok)
{
    ks_http_t *h = ctx;
    req_t *r = req_of(io);
    if (is_stream(r))
        http_stream_completed(r);
    if (r->route && r->route->cmd == KS_CMD_PRODUCE)
        http_produce_completed(r);
    if (io->started)
        access_log(h, r, ok);
    if (io->started && io->status)
        ks_metrics_http_request(io->log_method, io->status);
    /* A fetch's batch is confirmed (opts.confirm): the engine hears whether the reply went out
     * in full (its leases start) or not (the client left, or the server stops: its records go
     * back now, not at their deadline, and count no attempt). */
    bool fetch = r->route && r->route->cmd == KS_CMD_FETCH;
    pthread_mutex_lock(&io->lock);
    r->completed = true;
    ks_batch_t *b = fetch ? r->u.fetch.batch : NULL;
    uint64_t token = b ? b->deliver_token : 0;
    if (b)
        b->deliver_token = 0;
    pthread_mutex_unlock(&io->lock);
    if (token)
        ks_engine_delivered(h->eng, r->u.fetch.group, token, ok);
}

/* What r's route hung on it: the member of u its command fills; and its caller. */
static void on_free(http_req_t *io)
{
    req_t *r = req_of(io);
    ks_auth_release(r->who); /* the caller's hold on its tokens table (NULL: none) */
    r->who = NULL;
    if (!r->route)
        return;
    switch (r->route->cmd) {
    case KS_CMD_FETCH:
        ks_batch_free(r->u.fetch.batch);
        break;
    case KS_CMD_SETTLE:
        free(r->u.settle.res);
        if (r->u.settle.ids) {
            for (size_t i = 0; i < r->u.settle.id_cnt && !r->u.settle.ids_in_body; i++)
                free(r->u.settle.ids[i]);
            free(r->u.settle.ids);
        }
        break;
    case KS_CMD_STATUS:
        for (size_t i = 0; i < r->u.status.cnt; i++)
            ks_group_status_free(r->u.status.groups[i]);
        free(r->u.status.groups);
        break;
    case KS_CMD_PRODUCE:
        if (r->u.produce.prod)
            free(r->u.produce.prod->rec);
        free(r->u.produce.prod);
        free(r->u.produce.res);
        break;
    case KS_CMD_SEEK:
        free(r->u.seek.res);
        break;
    case KS_CMD_REDRIVE:
        ks_redrive_result_free(r->u.redrive.res);
        break;
    default: /* the rows without a command hang nothing (a stream is gone with its request) */
        break;
    }
}

static void on_tick(void *ctx, int64_t now_ms)
{
    http_stream_tick(ctx, now_ms);
}

static const http_srv_ops_t edge_ops = {
    .req_size = sizeof(req_t),
    .init = on_init,
    .handle = on_handle,
    .resumed = on_resumed,
    .completed = on_completed,
    .free = on_free,
    .tick = on_tick,
};

/* ---- start and stop ---- */

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
    pthread_mutex_destroy(&h->streams_lock);
    pthread_mutex_destroy(&h->schema_lock);
    http_tls_free(h->tls);
    free(h);
}

ks_http_t *ks_http_start(ks_engine_t *eng, const ks_config_t *cfg, const ks_auth_t *auth,
                         ks_tls_t *tls, ks_subhub_t *hub, const ks_push_ctl_t *push, char *err,
                         size_t errsize)
{
    http_srv_opts_t o = {.name = cfg->http_listen,
                         .max_conns = (unsigned)cfg->http_max_connections,
                         .max_conns_per_client = (unsigned)cfg->http_max_conns_per_client,
                         .header_timeout_ms = cfg->http_header_timeout_ms,
                         .body_timeout_ms = cfg->http_body_timeout_ms,
                         .max_body_bytes = cfg->max_request_bytes};
    if (parse_listen("http.listen", cfg->http_listen, &o.addr, err, errsize) < 0)
        return NULL;
    if (*cfg->http_health_listen) {
        if (parse_listen("http.health_listen", cfg->http_health_listen, &o.probe_addr, err,
                         errsize) < 0)
            return NULL;
        o.probe_name = cfg->http_health_listen;
    }
    ks_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        abort();
    h->eng = eng;
    h->cfg = cfg;
    h->auth = auth;
    h->hub = hub;
    if (push)
        h->push = *push; /* else every push call is refused (http_push.c) */
    h->routes = http_route_table(&h->route_cnt);
    h->started_wall_ms = http_page_wall_ms();
    pthread_mutex_init(&h->streams_lock, NULL);
    pthread_mutex_init(&h->schema_lock, NULL);
    atomic_init(&h->streams_stopping, false);
    if (tls)
        h->tls = o.tls = http_tls_new(tls);
    h->srv = http_srv_start(&o, &edge_ops, h, err, errsize);
    if (!h->srv) {
        http_free(h);
        return NULL;
    }
    if (o.probe_name)
        ks_info(LOGC, "probes (/healthz, /readyz) on http://%s:%d",
                inet_ntoa(o.probe_addr.sin_addr), http_srv_probe_port(h->srv));
    ks_info(LOGC, "listening on %s://%s:%d%s", h->tls ? "https" : "http",
            inet_ntoa(o.addr.sin_addr), http_srv_port(h->srv),
            h->tls && http_tls_client_ca(h->tls) ? " (client certificates required)" : "");
    return h;
}

int ks_http_port(const ks_http_t *h)
{
    return http_srv_port(h->srv);
}

void ks_http_quiesce(ks_http_t *h)
{
    http_srv_quiesce(h->srv);
    http_produce_stop_waits(h); /* answered while the other edges stop */
}

void ks_http_stop(ks_http_t *h)
{
    if (!h)
        return;
    http_stream_stop_all(h); /* the server must find no stream paused */
    http_produce_stop_waits(h);
    http_srv_stop(h->srv);
    http_free(h);
}
