/* edges.c: the table of edges main starts and stops (edges.h). */
#include "edges.h"

#include "grpc_api.h"
#include "http_api.h"
#include "push.h"

static bool http_wanted(const ks_config_t *cfg)
{
    return *cfg->http_listen;
}

/* The push edge's run-time calls, as HTTP's /push routes reach them (push_ctl.h). */
static ks_status_t push_add(void *push, const char *group, const char *const *topics,
                            size_t topic_cnt, struct json_t *body, const ks_principal_t *who,
                            char *err, size_t errsize)
{
    return ks_push_add(push, group, topics, topic_cnt, body, who, err, errsize);
}

static struct json_t *push_describe(void *push, const char *group)
{
    return ks_push_describe(push, group);
}

static ks_status_t push_remove(void *push, const char *group, struct json_t **out, char *err,
                               size_t errsize)
{
    return ks_push_remove(push, group, out, err, errsize);
}

static void *http_start(const ks_edge_env_t *env, char *err, size_t errsize)
{
    ks_push_ctl_t ctl = {
        .push = env->push, .add = push_add, .describe = push_describe, .remove = push_remove};
    return ks_http_start(env->eng, env->cfg, env->auth, env->tls, env->hub, &ctl, err, errsize);
}

static int http_port(const void *e)
{
    return ks_http_port(e);
}

static void http_quiesce(void *e)
{
    ks_http_quiesce(e);
}

static void http_stop(void *e)
{
    ks_http_stop(e);
}

const ks_edge_kind_t ks_edge_http = {
    .name = "http",
    .wanted = http_wanted,
    .start = http_start,
    .port = http_port,
    .quiesce = http_quiesce,
    .stop = http_stop,
};

static bool grpc_wanted(const ks_config_t *cfg)
{
    return *cfg->grpc_listen;
}

static void *grpc_start(const ks_edge_env_t *env, char *err, size_t errsize)
{
    return ks_grpc_start(env->eng, env->cfg, env->auth, env->tls, env->hub, err, errsize);
}

static int grpc_port(const void *e)
{
    return ks_grpc_port(e);
}

static void grpc_stop(void *e)
{
    ks_grpc_stop(e);
}

const ks_edge_kind_t ks_edge_grpc = {
    .name = "grpc",
    .wanted = grpc_wanted,
    .start = grpc_start,
    .port = grpc_port,
    .quiesce = NULL,
    .stop = grpc_stop,
};

static void *push_start(const ks_edge_env_t *env, char *err, size_t errsize)
{
    return ks_push_start(env->eng, env->cfg, env->hub, err, errsize);
}

static int push_port(const void *e)
{
    (void)e;
    return 0; /* it listens nowhere: it sends */
}

static void push_quiesce(void *e)
{
    ks_push_quiesce(e);
}

static void push_stop(void *e)
{
    ks_push_stop(e);
}

const ks_edge_kind_t ks_edge_push = {
    .name = "push",
    .wanted = ks_push_wanted,
    .start = push_start,
    .port = push_port,
    .quiesce = push_quiesce,
    .stop = push_stop,
};

/* Push first: HTTP serves its API calls (and stops before it: edges stop in reverse). */
const ks_edge_kind_t *const ks_edges[] = {&ks_edge_push, &ks_edge_http, &ks_edge_grpc};
const size_t ks_edge_cnt = sizeof(ks_edges) / sizeof(ks_edges[0]);
_Static_assert(sizeof(ks_edges) / sizeof(ks_edges[0]) <= KS_EDGE_MAX, "raise KS_EDGE_MAX");

void *ks_edge_find(void *const *edges, const ks_edge_kind_t *k)
{
    for (size_t i = 0; i < ks_edge_cnt; i++)
        if (ks_edges[i] == k)
            return edges[i];
    return NULL;
}
