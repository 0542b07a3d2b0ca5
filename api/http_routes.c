/* http_routes.c: the HTTP edge's routes: each request decoded into an engine command,
 * the engine callbacks that store its answer, and the authorization of each route. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ack_id.h"
#include "edge.h"
#include "http_int.h"
#include "log.h"
#include "util.h"

/* ---- engine callbacks (group loop threads) ---- */

static void on_fetch(ks_batch_t *b, void *opaque)
{
    req_t *r = opaque;
    pthread_mutex_lock(&r->lock);
    r->batch = b;
    if (r->long_poll)
        atomic_fetch_sub(&r->h->long_polls, 1);
    uint64_t late = r->completed ? b->deliver_token : 0; /* it ended first (at shutdown) */
    if (late)
        b->deliver_token = 0;
    pthread_mutex_unlock(&r->lock);
    ks_engine_delivered(r->h->eng, r->group, late, false);
    http_wake(r);
}

static void on_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    req_t *r = opaque;
    r->groups = groups;
    r->group_cnt = n;
    http_wake(r);
}

static void on_seek(ks_seek_result_t *res, void *opaque)
{
    req_t *r = opaque;
    r->seek = res;
    http_wake(r);
}

enum MHD_Result http_reply(req_t *r)
{
    return r->route->encode(r);
}

/* Sends cmd (of r's route: its type is the row's command) to the engine through its one
 * door, with the engine's reference on r for the command's callback. Returns KS_OK (the
 * callback will run and drop it), or the error with err and the reference dropped. */
static ks_status_t http_submit(ks_http_t *h, req_t *r, ks_cmd_req_t *cmd, char *err, size_t errsize)
{
    cmd->type = r->route->cmd;
    atomic_fetch_add(&r->refs, 1);
    r->submitted = true;
    ks_status_t st = ks_engine_submit(h->eng, cmd, err, errsize);
    if (st) {
        r->submitted = false;
        atomic_fetch_sub(&r->refs, 1);
    }
    return st;
}

enum MHD_Result http_submit_park(ks_http_t *h, req_t *r, ks_cmd_req_t *cmd)
{
    char err[512];
    ks_status_t st = http_submit(h, r, cmd, err, sizeof(err));
    if (st) {
        if (r->long_poll)
            atomic_fetch_sub(&h->long_polls, 1);
        r->long_poll = false;
        return http_send_error(r->conn, st, "%s", err);
    }
    return http_park(r) ? http_reply(r) : MHD_YES;
}

bool http_long_poll_claim(ks_http_t *h, req_t *r)
{
    if (atomic_fetch_add(&h->long_polls, 1) >= h->cfg->http_max_long_polls) {
        atomic_fetch_sub(&h->long_polls, 1);
        return false;
    }
    r->long_poll = true;
    return true;
}

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_len, const char *value, size_t value_len)
{
    http_query_t *a = cls;
    const char *v = value ? value : "";
    if (!a->nul_key && (strlen(key) != key_len || (value && strlen(value) != value_len))) {
        a->nul_key = key;
        a->nul_key_len = key_len;
        a->nul_value = v;
        a->nul_value_len = value ? value_len : 0;
    }
    if (!strcmp(key, "topic")) {
        if (a->topic_cnt == MAX_TOPICS)
            a->too_many = true;
        else
            a->topics[a->topic_cnt++] = v;
    } else if (!a->stream && !strcmp(key, "max"))
        a->max = v;
    else if (!a->stream && !strcmp(key, "wait_ms"))
        a->wait_ms = v;
    else if (a->stream && !strcmp(key, "max_in_flight"))
        a->max_in_flight = v;
    else if (a->stream && !strcmp(key, "max_in_flight_bytes"))
        a->max_in_flight_bytes = v;
    else if (!strcmp(key, "format"))
        a->format = v;
    else if (!strcmp(key, "deadline_ms"))
        a->deadline_ms = v;
    else if (!strcmp(key, "subscriber"))
        a->subscriber = v;
    else if (!strcmp(key, "ordered_batches"))
        a->ordered_batches = v;
    else if (!a->unknown)
        a->unknown = key;
    return MHD_YES;
}

void http_query_free(http_query_t *q)
{
    for (size_t i = 0; i < q->split_cnt; i++)
        free(q->split_buf[i]);
    q->split_cnt = 0;
}

bool http_query_read(ks_http_t *h, req_t *r, http_query_t *a, enum MHD_Result *ret)
{
    MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND, collect_arg, a);
    if (a->nul_key) {
        char k[128], v[256];
        *ret =
            http_send_error(r->conn, KS_E_INVALID,
                            "query parameter \"%s\" (value \"%s\") holds a NUL byte (%%00); names "
                            "and values cannot contain NUL",
                            http_show_nul(a->nul_key, a->nul_key_len, k, sizeof(k)),
                            http_show_nul(a->nul_value, a->nul_value_len, v, sizeof(v)));
        return false;
    }
    if (a->unknown) {
        *ret = http_send_error(r->conn, KS_E_INVALID, "unknown query parameter \"%s\" (known: %s)",
                               a->unknown,
                               a->stream ? "topic, max_in_flight, max_in_flight_bytes, "
                                           "deadline_ms, subscriber, ordered_batches, format"
                                         : "topic, max, wait_ms, deadline_ms, subscriber, "
                                           "ordered_batches, format");
        return false;
    }
    /* topic=a,b is the same as topic=a&topic=b. Every name counts against MAX_TOPICS, split
     * or not, an empty one too. */
    bool too_many = a->too_many;
    for (size_t i = 0; i < a->topic_cnt && !too_many; i++) {
        char *copy = ks_xstrdup(a->topics[i]), *save = NULL;
        a->split_buf[a->split_cnt++] = copy;
        char *tok = strtok_r(copy, ",", &save);
        for (const char *t = tok ? tok : ""; t; t = tok ? strtok_r(NULL, ",", &save) : NULL) {
            if (a->name_cnt == MAX_TOPICS) {
                too_many = true;
                break;
            }
            a->names[a->name_cnt++] = t; /* an empty name: let validation name it */
        }
    }
    char err[512];
    ks_status_t st;
    if (too_many) {
        *ret = http_send_error(r->conn, KS_E_INVALID, "at most %d topics per %s", MAX_TOPICS,
                               a->stream ? "stream" : "fetch");
        return false;
    }
    if (a->name_cnt == 0) {
        *ret = http_send_error(r->conn, KS_E_INVALID,
                               "missing query parameter topic (e.g. ?topic=demo)");
        return false;
    }
    /* Bad or internal names get their own answer before the scope check. */
    if ((st = ks_edge_check_topics(h->eng, h->auth, r->who, KS_SCOPE_CONSUME, "consume", a->names,
                                   a->name_cnt, err, sizeof(err)))) {
        *ret = http_send_error(r->conn, st, "%s", err);
        return false;
    }
    if (a->ordered_batches) { /* a bare ?ordered_batches asks for it too */
        a->ordered = !*a->ordered_batches || !strcmp(a->ordered_batches, "true") ||
                     !strcmp(a->ordered_batches, "1");
        if (!a->ordered && strcmp(a->ordered_batches, "false") && strcmp(a->ordered_batches, "0")) {
            *ret = http_send_error(r->conn, KS_E_INVALID,
                                   "ordered_batches must be true or false, got \"%s\"",
                                   a->ordered_batches);
            return false;
        }
    }
    r->fmt = FMT_AUTO;
    if (a->format) {
        if (!strcmp(a->format, "base64"))
            r->fmt = FMT_BASE64;
        else if (strcmp(a->format, "auto") && strcmp(a->format, "text")) {
            *ret = http_send_error(r->conn, KS_E_INVALID,
                                   "format must be auto, text or base64, got \"%s\"", a->format);
            return false;
        }
    }
    return true;
}

int http_parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

bool http_opt_int(req_t *r, const char *name, const char *v, int *out, unsigned bit,
                  unsigned *unset, enum MHD_Result *ret)
{
    long n;
    if (!v) {
        *unset |= bit;
        return true;
    }
    if (http_parse_int(v, INT_MIN, INT_MAX, &n) == 0) {
        *out = (int)n;
        return true;
    }
    *ret = http_send_error(r->conn, KS_E_INVALID, "%s must be an integer, got \"%s\"", name, v);
    return false;
}

static enum MHD_Result handle_fetch(ks_http_t *h, req_t *r, const char *group, bool head)
{
    http_query_t a = {0};
    enum MHD_Result ret = MHD_YES;
    char err[512];
    ks_status_t st;
    if (!http_query_read(h, r, &a, &ret))
        goto out;
    /* Only the syntax here: the ranges and the defaults of what is left out are the
     * validator's (ks_cmd_validate). */
    ks_cmd_req_t cmd = {
        .group = group,
        .u.fetch = {
            .topics = a.names,
            .topic_cnt = a.name_cnt,
            .opts = {.subscriber = a.subscriber, .confirm = 1, .ordered_batches = a.ordered},
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
        ret = http_send_error(r->conn, st, "%s", err);
        goto out;
    }
    if (head) {
        /* HEAD is safe: the group and parameters are checked as for GET, nothing is
         * leased, and the answer is an empty batch's headers. */
        ret = http_send_json(r->conn, 200, json_pack("{s:[]}", "records"));
        goto out;
    }
    if (cmd.u.fetch.opts.wait_ms > 0 && !http_long_poll_claim(h, r)) {
        ret = http_send_error(r->conn, KS_E_BUSY,
                              "%d fetches are waiting already (http.max_long_polls); retry "
                              "later or with wait_ms=0",
                              h->cfg->http_max_long_polls);
        goto out;
    }
    snprintf(r->group, sizeof(r->group), "%s", group);
    ret = http_submit_park(h, r, &cmd);
out:
    http_query_free(&a);
    return ret;
}

static enum MHD_Result handle_status(ks_http_t *h, req_t *r, const char *group)
{
    r->status_one = group != NULL;
    ks_cmd_req_t cmd = {.group = group, .u.status = {.cb = on_status, .opaque = r}};
    return http_submit_park(h, r, &cmd);
}

/* POST /v1/groups/{group}/seek: {"topic":...,"partition":N (absent: every partition of the
 * topic assigned here), and one of "offset", "timestamp_ms", "position"}. The topic must be
 * in the caller's consume scope, as a fetch's. */
static enum MHD_Result decode_seek(ks_http_t *h, req_t *r, const char *group, const char *method)
{
    static const char *const known[] = {"topic",    "offset",    "timestamp_ms",
                                        "position", "partition", NULL};
    enum MHD_Result ret = MHD_YES;
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
        ret = http_send_error(r->conn, KS_E_INVALID, "body must be a JSON object");
        goto out;
    }
    if (!http_only_fields(r, root, "body", known,
                          "topic, partition, offset, timestamp_ms, position", &ret) ||
        !(topic = http_json_name(r, json_object_get(root, "topic"), "topic", &ret)))
        goto out;
    if ((!!off + !!ts + !!pos) != 1) {
        ret = http_send_error(r->conn, KS_E_INVALID,
                              "give exactly one of offset, timestamp_ms or position");
        goto out;
    }
    if ((off && !json_is_integer(off)) || (ts && !json_is_integer(ts))) {
        ret = http_send_error(r->conn, KS_E_INVALID, "%s must be an integer",
                              off ? "offset" : "timestamp_ms");
        goto out;
    }
    const char *where = pos ? json_string_value(pos) : NULL;
    if (pos && (!where || (strcmp(where, "earliest") && strcmp(where, "latest")))) {
        ret = http_send_error(r->conn, KS_E_INVALID, "position must be \"earliest\" or \"latest\"");
        goto out;
    }
    json_int_t pv = json_is_integer(part) ? json_integer_value(part) : -1;
    if (part && (pv < 0 || pv > INT32_MAX)) {
        ret = http_send_error(r->conn, KS_E_INVALID, "partition must be an integer from 0 to %d",
                              INT32_MAX);
        goto out;
    }
    if ((st = ks_edge_check_topics(h->eng, h->auth, r->who, KS_SCOPE_CONSUME, "seek", &topic, 1,
                                   err, sizeof(err)))) {
        ret = http_send_error(r->conn, st, "%s", err);
        goto out;
    }
    snprintf(r->topic, sizeof(r->topic), "%s", topic);
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

/* Notes why r is not ready (the first reason counts). */
static void not_ready(req_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void not_ready(req_t *r, const char *fmt, ...)
{
    pthread_mutex_lock(&r->lock);
    if (!r->ready_msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->ready_msg, sizeof(r->ready_msg), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->lock);
}

/* One static group's answer is in: the last one wakes the request, the others drop
 * their reference. */
static void ready_one_done(req_t *r)
{
    if (atomic_fetch_sub(&r->ready_pending, 1) == 1)
        http_wake(r);
    else
        http_req_unref(r);
}

/* A static group's status, for /readyz (a group loop thread): only stored, in the order
 * the answers come (a NULL entry: the group is not running); http_reply_ready reads them
 * on libmicrohttpd's thread. */
static void on_ready_status(ks_group_status_t **groups, size_t n, void *opaque)
{
    req_t *r = opaque;
    pthread_mutex_lock(&r->lock);
    size_t add = n ? n : 1;
    ks_group_status_t **all = realloc(r->groups, (r->group_cnt + add) * sizeof(*all));
    if (!all)
        abort();
    r->groups = all;
    for (size_t i = 0; i < add; i++)
        all[r->group_cnt++] = n ? groups[i] : NULL;
    pthread_mutex_unlock(&r->lock);
    free(groups);
    ready_one_done(r);
}

/* /readyz: ready when Kafka answers (the engine's metadata probe) and every static group
 * of the config runs here with no partition still restoring its commit (INITIALIZING).
 * A group with no partitions (more instances than partitions) counts as ready. Each
 * static group is asked on its own, so busy dynamic groups do not slow the answer. */
static enum MHD_Result handle_ready(ks_http_t *h, req_t *r)
{
    if (!ks_engine_kafka_up(h->eng))
        not_ready(r, "Kafka does not answer (kafka.bootstrap.servers)");
    size_t n = h->cfg->static_group_cnt;
    if (n == 0 || r->ready_msg[0])
        return http_reply(r);
    atomic_store(&r->ready_pending, (int)n);
    atomic_fetch_add(&r->refs, (int)n);
    r->submitted = true;
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
    return http_park(r) ? http_reply(r) : MHD_YES;
}

/* Splits "/v1/groups/{g}/{rest}". Returns false if url is not of that shape. */
static bool split_group_url(const char *url, char *group, size_t gsize, const char **rest)
{
    const char *p = url + strlen("/v1/groups/");
    const char *slash = strchr(p, '/');
    if (!slash || slash == p || (size_t)(slash - p) >= gsize)
        return false;
    memcpy(group, p, (size_t)(slash - p));
    group[slash - p] = '\0';
    *rest = slash + 1;
    return true;
}

/* Identifies the caller (its bearer token, else its certificate's subject) into r->who
 * and checks the groups scope for group (NULL: identity only). Returns true, or false
 * after queueing the error. */
static bool http_authorized(ks_http_t *h, req_t *r, const char *group, enum MHD_Result *ret)
{
    if (!h->auth)
        return true;
    char err[512], subj[1024];
    const char *a = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    const ks_principal_t *prev = r->who; /* a second check's hold replaces the first's */
    ks_status_t st =
        ks_edge_authorize(h->auth, a, http_cert_subject(h, r->conn, subj, sizeof(subj)), group,
                          &r->who, err, sizeof(err));
    ks_auth_release(prev);
    if (st == KS_OK)
        return true;
    *ret = http_send_error(r->conn, st, "%s", err);
    return false;
}

/* GET, or HEAD: libmicrohttpd sends a HEAD answer's headers without its body. */
static bool is_get(const char *method)
{
    return !strcmp(method, "GET") || !strcmp(method, "HEAD");
}

/* ---- the decoders: one per command, each answers at once or parks the request ---- */

static enum MHD_Result decode_fetch(ks_http_t *h, req_t *r, const char *group, const char *method)
{
    return handle_fetch(h, r, group, !strcmp(method, "HEAD"));
}

static enum MHD_Result decode_status(ks_http_t *h, req_t *r, const char *group, const char *method)
{
    return handle_status(h, r, group);
}

/* /metrics: every group's status (each loop answers within a pass), shown as a listing is. */
static enum MHD_Result decode_metrics(ks_http_t *h, req_t *r, const char *group, const char *method)
{
    return handle_status(h, r, NULL);
}

/* /readyz?group=NAME: that group alone: 404 unless it runs here, 503 while Kafka is down or
 * any of its partitions is stalled (each named with its reason), else 200. */
static enum MHD_Result ready_group(ks_http_t *h, req_t *r, const char *name)
{
    char why[512];
    if (!*name)
        return http_send_error(r->conn, KS_E_INVALID, "query parameter \"group\" is empty");
    int n = ks_engine_group_stalled(h->eng, name, why, sizeof(why));
    if (n < 0)
        return http_send_error(r->conn, KS_E_NOT_FOUND, "group %s does not run here", name);
    if (n > 0)
        return http_send_error(r->conn, KS_E_UNAVAILABLE, "not ready: group %s: %d stalled: %s",
                               name, n, why);
    if (!ks_engine_kafka_health(h->eng, why, sizeof(why)))
        return http_send_error(r->conn, KS_E_UNAVAILABLE, "not ready: %s", why);
    return http_send_json(r->conn, 200, json_pack("{s:s}", "status", "ready"));
}

static enum MHD_Result decode_ready(ks_http_t *h, req_t *r, const char *group, const char *method)
{
    const char *name = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "group");
    if (!name)
        return handle_ready(h, r);
    /* One group's readiness names its partitions and the stall's detail (a nack reason):
     * on the main listener only for a caller the group's scope covers, as its status is;
     * the probe listener checks no caller. */
    enum MHD_Result ret;
    if (!r->health && *name && !http_authorized(h, r, name, &ret))
        return ret;
    return ready_group(h, r, name);
}

/* /healthz: no engine command; answered from the engine's Kafka probe at once. */
static enum MHD_Result decode_health(ks_http_t *h, req_t *r, const char *group, const char *method)
{
    char why[256];
    if (!ks_engine_kafka_health(h->eng, why, sizeof(why)))
        /* The same source of truth as grpc.health.v1 (ks_engine_kafka_up). */
        return http_send_json(r->conn, 503,
                              json_pack("{s:s,s:s}", "status", "NOT_SERVING", "reason", why));
    return http_send_json(r->conn, 200, json_pack("{s:s}", "status", "ok"));
}

/* api/openapi.yaml, compiled in (cmake/embed.cmake). */
extern const unsigned char ks_openapi_yaml[];
extern const size_t ks_openapi_yaml_len;

/* /openapi.yaml: the spec this binary was built with; no engine command, no caller check. */
static enum MHD_Result decode_openapi(ks_http_t *h, req_t *r, const char *group, const char *method)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        ks_openapi_yaml_len, (void *)(uintptr_t)ks_openapi_yaml, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", "application/yaml");
    enum MHD_Result ret = http_queue(r->conn, 200, resp, ks_openapi_yaml_len);
    MHD_destroy_response(resp);
    return ret;
}

/* How a route checks its caller (bearer token or client certificate, then the groups
 * scope of the path's {group}, if it has one). */
typedef enum {
    AUTH_NONE,   /* the probes and the spec: anyone may ask */
    AUTH_METHOD, /* the method first, then the caller */
    AUTH_FIRST,  /* the caller first, as for every URL under /v1/groups/{group}/ (an unknown
                  * one too): a caller the group refuses learns nothing about it */
} route_auth_t;

/* The route table: each endpoint one row. The row whose path and method match serves the
 * request; a path served with other methods only is answered 405 with Allow naming them. A
 * new endpoint for an existing command is a row here, a decoder above and an encoder in
 * http_json.c. */
static const route_t routes[] = {
    /* The status page: it asks the status API itself, with the caller's token. */
    {"GET", "/", KS_CMD_NONE, 0, false, AUTH_NONE, http_page_decode, NULL},
    {"GET", "/healthz", KS_CMD_NONE, 0, true, AUTH_NONE, decode_health, NULL},
    {"GET", "/readyz", KS_CMD_STATUS, 0, true, AUTH_NONE, decode_ready, http_reply_ready},
    {"GET", "/openapi.yaml", KS_CMD_NONE, 0, false, AUTH_NONE, decode_openapi, NULL},
    /* Group and topic names show: with tokens, a caller sees only its groups, as a listing. */
    {"GET", "/metrics", KS_CMD_STATUS, 0, true, AUTH_METHOD, decode_metrics, http_reply_metrics},
    {"GET", "/v1/groups", KS_CMD_STATUS, 0, false, AUTH_METHOD, decode_status, http_reply_status},
    {"GET", "/v1/groups/", KS_CMD_STATUS, 0, false, AUTH_METHOD, decode_status, http_reply_status},
    {"GET", "/v1/groups/{group}", KS_CMD_STATUS, 0, false, AUTH_METHOD, decode_status,
     http_reply_status},
    {"GET", "/v1/groups/{group}/records", KS_CMD_FETCH, 0, false, AUTH_FIRST, decode_fetch,
     http_reply_fetch},
    /* A stream's fetches are the subscriber-stream core's (http_stream.c), its answer the
     * open response: the row itself sends no command. */
    {"GET", "/v1/groups/{group}/stream", KS_CMD_NONE, 0, false, AUTH_FIRST, http_stream_decode,
     NULL},
    {"POST", "/v1/groups/{group}/acks", KS_CMD_SETTLE, KS_SETTLE_ACK, false, AUTH_FIRST,
     http_decode_settle, http_reply_ack},
    {"POST", "/v1/groups/{group}/nacks", KS_CMD_SETTLE, KS_SETTLE_NACK, false, AUTH_FIRST,
     http_decode_settle, http_reply_ack},
    {"POST", "/v1/groups/{group}/deadline", KS_CMD_SETTLE, KS_SETTLE_EXTEND, false, AUTH_FIRST,
     http_decode_settle, http_reply_ack},
    {"POST", "/v1/groups/{group}/seek", KS_CMD_SEEK, 0, false, AUTH_FIRST, decode_seek,
     http_reply_seek},
    /* Each dead letter's original topic is checked against the produce scope as it is read. */
    {"POST", "/v1/groups/{group}/redrive", KS_CMD_REDRIVE, 0, false, AUTH_FIRST,
     http_decode_redrive, http_reply_redrive},
    /* Each record's topic is checked against the produce scope on its own (http_produce.c). */
    {"GET", "/v1/groups/{group}/push", KS_CMD_NONE, 0, false, AUTH_FIRST, http_push_get, NULL},
    {"PUT", "/v1/groups/{group}/push", KS_CMD_NONE, 0, false, AUTH_FIRST, http_push_put, NULL},
    {"DELETE", "/v1/groups/{group}/push", KS_CMD_NONE, 0, false, AUTH_FIRST, http_push_delete,
     NULL},
    {"POST", "/v1/topics/{topic}/records", KS_CMD_PRODUCE, 0, false, AUTH_METHOD,
     http_produce_decode, http_reply_produce},
};

const route_t *http_route_table(size_t *n)
{
    *n = sizeof(routes) / sizeof(routes[0]);
    return routes;
}

/* Whether url matches pat, a literal path with at most one {name} segment (one or more
 * bytes, no '/'). Sets *group to the segment: in place when it ends the URL, else copied
 * into buf (a segment of gsize bytes or more does not match). */
static bool path_match(const char *pat, const char *url, char *buf, size_t gsize,
                       const char **group)
{
    const char *hole = strchr(pat, '{');
    *group = NULL;
    if (!hole)
        return !strcmp(pat, url);
    size_t pre = (size_t)(hole - pat);
    if (strncmp(url, pat, pre))
        return false;
    const char *seg = url + pre, *end = seg + strcspn(seg, "/");
    if (end == seg || strcmp(end, strchr(hole, '}') + 1))
        return false;
    if (!*end) {
        *group = seg;
        return true;
    }
    if ((size_t)(end - seg) >= gsize)
        return false;
    memcpy(buf, seg, (size_t)(end - seg));
    buf[end - seg] = '\0';
    *group = buf;
    return true;
}

/* The first row of routes whose path matches url (its {group} in *group), or NULL. */
static const route_t *route_find(const char *url, char *buf, size_t gsize, const char **group)
{
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (path_match(routes[i].path, url, buf, gsize, group))
            return &routes[i];
    return NULL;
}

/* Whether row rt serves method (a GET row serves HEAD too). */
static bool method_served(const route_t *rt, const char *method)
{
    return !strcmp(rt->method, "GET") ? is_get(method) : !strcmp(method, rt->method);
}

/* The row of first's path (first: route_find's answer) that serves method, or NULL; the
 * methods that path serves, for Allow, into allow ("GET, HEAD, POST"). */
static const route_t *route_method(const route_t *first, const char *method, char *allow,
                                   size_t size)
{
    const route_t *hit = NULL, *end = routes + sizeof(routes) / sizeof(routes[0]);
    size_t n = 0;
    allow[0] = '\0';
    for (const route_t *rt = first; rt < end; rt++) {
        if (strcmp(rt->path, first->path))
            continue;
        if (!hit && method_served(rt, method))
            hit = rt;
        const char *m = !strcmp(rt->method, "GET") ? "GET, HEAD" : rt->method;
        if (!strstr(allow, m) && n < size)
            n += (size_t)snprintf(allow + n, size - n, "%s%s", n ? ", " : "", m);
    }
    return hit;
}

/* Whether r's body is JSON as far as its Content-Type says: application/json, with or
 * without parameters (charset), in any case; a request without one counts as JSON, since
 * plain clients often send none. */
static bool content_type_json(req_t *r)
{
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    if (!ct)
        return true;
    ct += strspn(ct, " \t");
    size_t n = strlen("application/json");
    return !strncasecmp(ct, "application/json", n) && strchr(" \t;", ct[n]);
}

/* Serves r by the rows of rt's path: the caller and the method in the row's order, the
 * body's type, then the decoder of the row that serves the method. */
static enum MHD_Result route_run(ks_http_t *h, req_t *r, const route_t *rt, const char *group,
                                 const char *method, const char *url)
{
    enum MHD_Result ret = MHD_NO;
    /* The probe listener checks no caller: plain HTTP for the platform's probes and scraper,
     * reached only where http.health_listen is bound. */
    bool check = !r->health;
    if (check && rt->auth == AUTH_FIRST && !http_authorized(h, r, group, &ret))
        return ret;
    char allow[64];
    const route_t *hit = route_method(rt, method, allow, sizeof(allow));
    if (!hit)
        return http_send_error_as(r->conn, 405, "UNIMPLEMENTED", allow,
                                  "method %s is not allowed for %s; use %s", method, url, allow);
    rt = hit;
    /* Only a {group} segment is checked against the groups scope ({topic}: identity here,
     * the topic scopes in the decoder). */
    if (check && rt->auth == AUTH_METHOD &&
        !http_authorized(h, r, strstr(rt->path, "{group}") ? group : NULL, &ret))
        return ret;
    if ((!strcmp(rt->method, "POST") || !strcmp(rt->method, "PUT")) && !content_type_json(r))
        return http_send_error_as(
            r->conn, 415, "INVALID_ARGUMENT", NULL,
            "Content-Type %s is not supported; send a JSON body with Content-Type: "
            "application/json",
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type"));
    r->route = rt;
    return rt->decode(h, r, group, method);
}

/* What the URI callback found too big or malformed, answered before routing. Returns
 * false if there is nothing. */
static bool route_bad_url(req_t *r, enum MHD_Result *ret)
{
    if (r->url_too_big) {
        *ret = http_send_error(r->conn, KS_E_URI_TOO_LONG,
                               "the URL has %zu bytes and %zu query parameters; at most %d bytes "
                               "and %d query parameters are allowed",
                               r->url_len, r->param_cnt, MAX_URL_BYTES, MAX_QUERY_PARAMS);
        return true;
    }
    if (r->path_nul) {
        *ret = http_send_error(r->conn, KS_E_INVALID,
                               "the URL path %s holds a NUL byte (%%00); names cannot contain NUL",
                               r->raw_path);
        return true;
    }
    return false;
}

enum MHD_Result http_route(ks_http_t *h, req_t *r, const char *method, const char *url)
{
    enum MHD_Result aret = MHD_NO;
    if (route_bad_url(r, &aret))
        return aret;
    char buf[512];
    const char *group;
    const route_t *rt = route_find(url, buf, sizeof(buf), &group);
    if (r->health) {
        if (rt && rt->probe)
            return route_run(h, r, rt, NULL, method, url);
        return http_send_error(r->conn, KS_E_NOT_FOUND,
                               "no endpoint %s %s on the probe listener (http.health_listen serves "
                               "/healthz, /readyz and /metrics)",
                               method, url);
    }
    if (!http_client_cert_ok(h, r->conn))
        return http_send_error(
            r->conn, KS_E_UNAUTH,
            "a client certificate signed by the configured client CA is required");
    if (rt)
        return route_run(h, r, rt, group, method, url);
    /* Under a group but no route: the group's scope first, as on its routes. */
    const char *rest;
    if (!strncmp(url, "/v1/groups/", 11) && split_group_url(url, buf, sizeof(buf), &rest) &&
        !http_authorized(h, r, buf, &aret))
        return aret;
    return http_send_error(r->conn, KS_E_NOT_FOUND, "no endpoint %s %s", method, url);
}
