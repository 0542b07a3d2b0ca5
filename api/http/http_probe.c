/* http_probe.c: the routes the platform asks without an engine command of their own: /healthz,
 * /readyz (every static group's status, or one group's stall) and /openapi.yaml. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"

/* Notes why r is not ready (the first reason counts). */
static void not_ready(req_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void not_ready(req_t *r, const char *fmt, ...)
{
    pthread_mutex_lock(&r->io.lock);
    if (!r->u.status.ready_msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->u.status.ready_msg, sizeof(r->u.status.ready_msg), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->io.lock);
}

/* One static group's answer is in: the last one wakes the request, the others drop
 * their reference. */
static void ready_one_done(req_t *r)
{
    if (atomic_fetch_sub(&r->u.status.pending, 1) == 1)
        http_wake(&r->io);
    else
        http_req_unref(&r->io);
}

/* A static group's status, for /readyz (a group loop thread): only stored, in the order
 * the answers come (a NULL entry: the group is not running); http_reply_ready reads them
 * on libmicrohttpd's thread. */
static void on_ready_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    req_t *r = opaque;
    pthread_mutex_lock(&r->io.lock);
    size_t add = n ? n : 1;
    ks_group_status_t **all = realloc(r->u.status.groups, (r->u.status.cnt + add) * sizeof(*all));
    if (!all)
        abort();
    r->u.status.groups = all;
    for (size_t i = 0; i < add; i++)
        all[r->u.status.cnt++] = n ? groups[i] : NULL;
    pthread_mutex_unlock(&r->io.lock);
    free(groups);
    ready_one_done(r);
}

/* /readyz: ready when Kafka answers (the engine's metadata probe) and every static group
 * of the config runs here with no partition still restoring its commit (INITIALIZING).
 * A group with no partitions (more instances than partitions) counts as ready. Each
 * static group is asked on its own, so busy dynamic groups do not slow the answer. */
static http_ret_t handle_ready(ks_http_t *h, req_t *r)
{
    if (!ks_engine_kafka_up(h->eng))
        not_ready(r, "Kafka does not answer (kafka.bootstrap.servers)");
    size_t n = h->cfg->static_group_cnt;
    if (n == 0 || r->u.status.ready_msg[0])
        return http_reply(r);
    atomic_store(&r->u.status.pending, (int)n);
    for (size_t i = 0; i < n; i++)
        http_req_ref(&r->io); /* each answer's, dropped by ready_one_done */
    for (size_t i = 0; i < n; i++) {
        char err[256];
        const char *name = h->cfg->static_groups[i].name;
        ks_cmd_req_t cmd = {
            .type = r->route->cmd, .group = name, .u.status = {.cb = on_ready_status, .opaque = r}};
        if (ks_engine_submit(h->eng, &cmd, err, sizeof(err))) {
            not_ready(r, "static group %s: %s", name, err);
            ready_one_done(r);
        }
    }
    return http_park(&r->io) ? http_reply(r) : HTTP_RET_OK;
}

/* /readyz?group=NAME: that group alone: 404 unless it runs here, 503 while Kafka is down or
 * any of its partitions is stalled (each named with its reason), else 200. */
static http_ret_t ready_group(ks_http_t *h, req_t *r, const char *name)
{
    char why[512];
    if (!*name)
        return http_send_error(r, KS_E_INVALID, "query parameter \"group\" is empty");
    int n = ks_engine_group_stalled(h->eng, name, why, sizeof(why));
    if (n < 0)
        return http_send_error(r, KS_E_NOT_FOUND, "group %s does not run here", name);
    if (n > 0)
        return http_send_error(r, KS_E_UNAVAILABLE, "not ready: group %s: %d stalled: %s", name, n,
                               why);
    if (!ks_engine_kafka_health(h->eng, why, sizeof(why)))
        return http_send_error(r, KS_E_UNAVAILABLE, "not ready: %s", why);
    return http_send_json(r, 200, json_pack("{s:s}", "status", "ready"));
}

http_ret_t http_ready_decode(ks_http_t *h, req_t *r)
{
    const char *name = http_req_query(&r->io, "group");
    if (!name)
        return handle_ready(h, r);
    /* One group's readiness names its partitions and the stall's detail (a nack reason):
     * on the main listener only for a caller the group's scope covers, as its status is;
     * the probe listener checks no caller. */
    http_ret_t ret;
    if (!r->io.probe && *name && !http_authorized(h, r, name, &ret))
        return ret;
    return ready_group(h, r, name);
}

http_ret_t http_health_decode(ks_http_t *h, req_t *r)
{
    char why[256];
    if (!ks_engine_kafka_health(h->eng, why, sizeof(why)))
        /* The same source of truth as grpc.health.v1 (ks_engine_kafka_up). */
        return http_send_json(r, 503,
                              json_pack("{s:s,s:s}", "status", "NOT_SERVING", "reason", why));
    return http_send_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* api/openapi.yaml, compiled in (cmake/embed.cmake). */
extern const unsigned char ks_openapi_yaml[];
extern const size_t ks_openapi_yaml_len;

http_ret_t http_openapi_decode(ks_http_t *h, req_t *r)
{
    static const http_header_t hdr[] = {{"Content-Type", "application/yaml"}};
    return http_respond_static(&r->io, 200, hdr, 1, ks_openapi_yaml, ks_openapi_yaml_len);
}
