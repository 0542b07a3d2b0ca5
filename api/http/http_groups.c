/* http_groups.c: the routes that read a group through the engine: records (the long-poll
 * fetch), status (one group, the listing, and /metrics's), and seek; their decoders and the
 * engine callbacks that store the answers. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge.h"
#include "http_int.h"

/* ---- engine callbacks (group loop threads) ---- */

static void on_fetch(ks_batch_t *b, void *opaque)
{
    req_t *r = opaque;
    pthread_mutex_lock(&r->io.lock);
    r->u.fetch.batch = b;
    if (r->long_poll)
        atomic_fetch_sub(&r->h->long_polls, 1);
    uint64_t late = r->completed ? b->deliver_token : 0; /* it ended first (at shutdown) */
    if (late)
        b->deliver_token = 0;
    pthread_mutex_unlock(&r->io.lock);
    ks_engine_delivered(r->h->eng, r->u.fetch.group, late, false);
    http_wake(&r->io);
}

static void on_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    req_t *r = opaque;
    r->u.status.groups = groups;
    r->u.status.cnt = n;
    http_wake(&r->io);
}

static void on_seek(ks_seek_result_t *res, void *opaque)
{
    req_t *r = opaque;
    r->u.seek.res = res;
    http_wake(&r->io);
}

static http_ret_t handle_fetch(ks_http_t *h, req_t *r, const char *group, bool head)
{
    http_query_t a = {0};
    http_ret_t ret = HTTP_RET_OK;
    char err[512];
    ks_status_t st;
    if (!http_query_read(h, r, &a, &ret))
        goto out;
    /* Only the syntax here: the ranges and the defaults of what is left out are the
     * validator's (ks_cmd_validate). */
    ks_cmd_req_t cmd = {.group = group,
                        .u.fetch = {.topics = a.names,
                                    .topic_cnt = a.name_cnt,
                                    .opts = {.subscriber = a.subscriber,
                                             .confirm = 1,
                                             .transport = "http",
                                             .ordered_batches = a.ordered,
                                             .key_format = r->fmt.key_schema,
                                             .value_format = r->fmt.value_schema},
                                    .cb = on_fetch,
                                    .opaque = r}};
    unsigned *unset = &cmd.u.fetch.unset;
    if (!http_opt_int(r, "max", a.max, &cmd.u.fetch.opts.max, KS_FETCH_UNSET_MAX, unset, &ret) ||
        !http_opt_int(r, "wait_ms", a.wait_ms, &cmd.u.fetch.opts.wait_ms, KS_FETCH_UNSET_WAIT,
                      unset, &ret) ||
        !http_opt_int(r, "deadline_ms", a.deadline_ms, &cmd.u.fetch.opts.deadline_ms,
                      KS_FETCH_UNSET_DEADLINE, unset, &ret))
        goto out;
    /* Validated here too (ks_engine_submit checks again), for the wait it settles on. */
    cmd.type = r->route->cmd;
    if ((st = ks_cmd_validate(h->cfg, &cmd, err, sizeof(err)))) {
        ret = http_send_error(r, st, "%s", err);
        goto out;
    }
    if (head) {
        /* HEAD is safe: the group and parameters are checked as for GET, nothing is
         * leased, and the answer is an empty batch's headers. */
        ret = http_send_json(r, 200, json_pack("{s:[]}", "records"));
        goto out;
    }
    if (cmd.u.fetch.opts.wait_ms > 0 && !http_long_poll_claim(h, r)) {
        ret = http_send_error(r, KS_E_BUSY,
                              "%d fetches are waiting already (http.max_long_polls); retry "
                              "later or with wait_ms=0",
                              h->cfg->http_max_long_polls);
        goto out;
    }
    snprintf(r->u.fetch.group, sizeof(r->u.fetch.group), "%s", group);
    ret = http_submit_park(h, r, &cmd);
out:
    http_query_free(&a);
    return ret;
}

static http_ret_t handle_status(ks_http_t *h, req_t *r, const char *group)
{
    r->u.status.one = group != NULL;
    ks_cmd_req_t cmd = {.group = group, .u.status = {.cb = on_status, .opaque = r}};
    return http_submit_park(h, r, &cmd);
}

/* POST /v1/groups/{group}/seek: {"topic":...,"partition":N (absent: every partition of the
 * topic assigned here), and one of "offset", "timestamp_ms", "position"}. The topic must be
 * in the caller's consume scope, as a fetch's. */
http_ret_t http_seek_decode(ks_http_t *h, req_t *r)
{
    const char *group = r->param;
    static const char *const known[] = {"topic",    "offset",    "timestamp_ms",
                                        "position", "partition", NULL};
    http_ret_t ret = HTTP_RET_OK;
    json_t *root =
        http_body_json(h, r, "{\"topic\":\"...\",\"position\":\"earliest\"}", JSON_ALLOW_NUL, &ret);
    if (!root)
        return ret;
    const char *topic;
    json_t *part = json_object_get(root, "partition"), *off = json_object_get(root, "offset"),
           *ts = json_object_get(root, "timestamp_ms"), *pos = json_object_get(root, "position");
    ks_cmd_req_t cmd = {.group = group, .u.seek = {.cb = on_seek, .opaque = r}};
    char err[512];
    ks_status_t st;
    if (!json_is_object(root)) {
        ret = http_send_error(r, KS_E_INVALID, "body must be a JSON object");
        goto out;
    }
    if (!http_only_fields(r, root, "body", known,
                          "topic, partition, offset, timestamp_ms, position", &ret) ||
        !(topic = http_json_name(r, json_object_get(root, "topic"), "topic", &ret)))
        goto out;
    if ((!!off + !!ts + !!pos) != 1) {
        ret = http_send_error(r, KS_E_INVALID,
                              "give exactly one of offset, timestamp_ms or position");
        goto out;
    }
    if ((off && !json_is_integer(off)) || (ts && !json_is_integer(ts))) {
        ret = http_send_error(r, KS_E_INVALID, "%s must be an integer",
                              off ? "offset" : "timestamp_ms");
        goto out;
    }
    const char *where = pos ? json_string_value(pos) : NULL;
    if (pos && (!where || (strcmp(where, "earliest") && strcmp(where, "latest")))) {
        ret = http_send_error(r, KS_E_INVALID, "position must be \"earliest\" or \"latest\"");
        goto out;
    }
    json_int_t pv = json_is_integer(part) ? json_integer_value(part) : -1;
    if (part && (pv < 0 || pv > INT32_MAX)) {
        ret = http_send_error(r, KS_E_INVALID, "partition must be an integer from 0 to %d",
                              INT32_MAX);
        goto out;
    }
    if ((st = ks_edge_check_topics(h->eng, h->auth, r->who, KS_SCOPE_CONSUME, "seek", &topic, 1,
                                   err, sizeof(err)))) {
        ret = http_send_error(r, st, "%s", err);
        goto out;
    }
    snprintf(r->u.seek.topic, sizeof(r->u.seek.topic), "%s", topic);
    cmd.u.seek.topic = topic;
    cmd.u.seek.partition = (int32_t)pv;
    cmd.u.seek.all_partitions = !part;
    cmd.u.seek.kind = off  ? KS_SEEK_OFFSET
                      : ts ? KS_SEEK_TIMESTAMP
                           : (!strcmp(where, "earliest") ? KS_SEEK_EARLIEST : KS_SEEK_LATEST);
    cmd.u.seek.value = off ? json_integer_value(off) : ts ? json_integer_value(ts) : 0;
    ret = http_submit_park(h, r, &cmd); /* the validator holds the ranges */
out:
    json_decref(root);
    return ret;
}

http_ret_t http_fetch_decode(ks_http_t *h, req_t *r)
{
    return handle_fetch(h, r, r->param, !strcmp(r->io.method, "HEAD"));
}

http_ret_t http_status_decode(ks_http_t *h, req_t *r)
{
    return handle_status(h, r, r->param);
}

/* /metrics: every group's status (each loop answers within a pass), shown as a listing is. */
http_ret_t http_metrics_decode(ks_http_t *h, req_t *r)
{
    return handle_status(h, r, NULL);
}
