/* http_settle.c: the acks, nacks and deadline routes: the body's ack ids (read in place when
 * the body is only those), the acks query (wait=commit, results=errors), and the settle
 * command with its engine callback. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ack_id.h"
#include "edge.h"
#include "http_int.h"
#include "json_out.h"
#include "util.h"

/* ---- engine callback (group loop threads) ---- */

static void on_ack(ks_ack_result_t *res, size_t n, void *opaque)
{
    req_t *r = opaque;
    if (r->long_poll) /* a wait for the commit, counted as a long-poll */
        atomic_fetch_sub(&r->h->long_polls, 1);
    r->u.settle.res = res;
    r->u.settle.res_n = n;
    http_wake(&r->io);
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* The common body, {"ack_ids":["...",...]} with plain ASCII ids, read without building a
 * JSON tree: the ids are cut out of the body in place. Returns false (body untouched) for
 * anything else, which then goes through jansson and its error messages. */
static bool http_fast_ack_ids(req_t *r)
{
    char *body = r->io.body;
    const char *p = body, *end = body + r->io.body_len;
    static const char head[] = "\"ack_ids\"";
    p = skip_ws(p, end);
    if (p == end || *p++ != '{')
        return false;
    p = skip_ws(p, end);
    if ((size_t)(end - p) < sizeof(head) - 1 || memcmp(p, head, sizeof(head) - 1) != 0)
        return false;
    p = skip_ws(p + sizeof(head) - 1, end);
    if (p == end || *p++ != ':')
        return false;
    p = skip_ws(p, end);
    if (p == end || *p++ != '[')
        return false;
    const char *first = p;
    size_t n = 0;
    p = skip_ws(p, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (p == end || *p++ != '"')
                return false;
            /* An id is ASCII 0x20-0x7F but '"' and '\\': what ends it must be its closing quote. */
            p += ks_json_plain_run(p, (size_t)(end - p));
            if (p == end || *p != '"')
                return false;
            p = skip_ws(p + 1, end);
            n++;
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            if (p == end || *p++ != ']')
                return false;
            break;
        }
    }
    p = skip_ws(p, end);
    if (p == end || *p++ != '}' || skip_ws(p, end) != end)
        return false;
    char **ids = r->u.settle.ids = calloc(n + 1, sizeof(char *));
    if (!ids)
        abort();
    r->u.settle.ids_in_body = true;
    for (char *q = body + (first - body); r->u.settle.id_cnt < n; q++) {
        if (*q != '"')
            continue;
        ids[r->u.settle.id_cnt++] = q + 1;
        q = strchr(q + 1, '"'); /* the closing quote becomes the string's end */
        *q = '\0';
    }
    return true;
}

/* Hands the ids in r to the engine and parks the request for the answer. */
static http_ret_t submit_settle(ks_http_t *h, req_t *r, const char *group, ks_settle_op_t op,
                                int64_t ms, const char *reason, bool dead_letter)
{
    char err[512];
    r->u.settle.op = op;
    ks_status_t st = ks_auth_allow_ack_ids(h->auth, r->who, (const char *const *)r->u.settle.ids,
                                           r->u.settle.id_cnt, err, sizeof(err));
    if (st)
        return http_send_error(r, st, "%s", err);
    ks_cmd_req_t cmd = {.group = group,
                        .u.settle = {.op = op,
                                     .ms = ms,
                                     .reason = reason,
                                     .dead_letter = dead_letter,
                                     .ack_ids = (const char *const *)r->u.settle.ids,
                                     .n = r->u.settle.id_cnt,
                                     .wait_commit = r->u.settle.wait_commit,
                                     .commit_timeout_ms = r->u.settle.commit_timeout_ms,
                                     .cb = on_ack,
                                     .opaque = r}};
    if (r->u.settle.wait_commit && !http_long_poll_claim(h, r))
        return http_send_error(r, KS_E_BUSY,
                               "%d requests are waiting already (http.max_long_polls); retry "
                               "later or without wait=commit",
                               h->cfg->http_max_long_polls);
    return http_submit_park(h, r, &cmd);
}

static http_ret_t http_settle(ks_http_t *h, req_t *r, const char *group, ks_settle_op_t op)
{
    if (!r->io.body_too_big && r->io.body && op != KS_SETTLE_EXTEND && http_fast_ack_ids(r))
        return submit_settle(h, r, group, op, 0, NULL, false);
    http_ret_t ret = HTTP_RET_CLOSE;
    /* No NUL allowed: an ack id read as a C string must be the whole string. */
    json_t *root = http_body_json(h, r, "{\"ack_ids\":[\"...\"]}", 0, &ret);
    if (!root)
        return ret;
    json_t *ids = json_object_get(root, "ack_ids");
    if (!json_is_object(root) || !json_is_array(ids)) {
        ret = http_send_error(r, KS_E_INVALID, "body must be {\"ack_ids\":[\"...\"]%s}",
                              op == KS_SETTLE_NACK
                                  ? ",\"delay_ms\":0,\"reason\":\"...\",\"dead_letter\":false"
                              : op == KS_SETTLE_EXTEND ? ",\"deadline_ms\":30000"
                                                       : "");
        goto out;
    }
    /* Only the fields of this operation are allowed. */
    const char *k;
    json_t *v;
    json_int_t ms = 0;
    const char *reason = NULL;
    bool dead_letter = false;
    json_object_foreach(root, k, v)
    {
        if (!strcmp(k, "ack_ids"))
            continue;
        if (op == KS_SETTLE_NACK && !strcmp(k, "delay_ms") && json_is_integer(v))
            ms = json_integer_value(v);
        else if (op == KS_SETTLE_NACK && !strcmp(k, "reason") && json_is_string(v))
            reason = json_string_value(v);
        else if (op == KS_SETTLE_NACK && !strcmp(k, "dead_letter") && json_is_boolean(v))
            dead_letter = json_is_true(v);
        else if (op == KS_SETTLE_EXTEND && !strcmp(k, "deadline_ms") && json_is_integer(v))
            ms = json_integer_value(v);
        else {
            ret = http_send_error(
                r, KS_E_INVALID,
                "unexpected or mistyped field \"%s\" (ack_ids: array of strings%s)", k,
                op == KS_SETTLE_NACK ? ", delay_ms: integer, reason: string, dead_letter: boolean"
                : op == KS_SETTLE_EXTEND ? ", deadline_ms: integer"
                                         : "");
            goto out;
        }
    }
    if (op == KS_SETTLE_EXTEND && !json_object_get(root, "deadline_ms")) {
        ret = http_send_error(r, KS_E_INVALID, "deadline_ms is required");
        goto out;
    }
    size_t n = json_array_size(ids); /* how many may come is the validator's */
    r->u.settle.ids = calloc(n + 1, sizeof(char *));
    if (!r->u.settle.ids)
        abort();
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(ids, i);
        if (!json_is_string(it)) {
            ret = http_send_error(r, KS_E_INVALID, "ack_ids[%zu] is not a string", i);
            goto out;
        }
        r->u.settle.ids[i] = strdup(json_string_value(it));
        r->u.settle.id_cnt = i + 1;
    }
    ret = submit_settle(h, r, group, op, ms, reason, dead_letter);
out:
    json_decref(root);
    return ret;
}

/* The acks route's query: wait=commit and its timeout_ms, results=all|errors. */
typedef struct ack_query {
    const char *wait, *timeout_ms, *results, *unknown;
} ack_query_t;

static bool collect_ack_arg(void *cls, const char *key, size_t key_len, const char *value,
                            size_t value_len)
{
    ack_query_t *q = cls;
    if (!strcmp(key, "wait"))
        q->wait = value ? value : "";
    else if (!strcmp(key, "timeout_ms"))
        q->timeout_ms = value ? value : "";
    else if (!strcmp(key, "results"))
        q->results = value ? value : "";
    else if (!q->unknown)
        q->unknown = key;
    return true;
}

/* Reads ?wait=commit[&timeout_ms=N][&results=all|errors] into r; the range of N is the
 * validator's. False: r was answered with what is wrong. */
static bool ack_query_read(req_t *r, http_ret_t *ret)
{
    ack_query_t q = {0};
    http_req_query_each(&r->io, collect_ack_arg, &q);
    long ms = 0;
    if (q.unknown)
        *ret = http_send_error(r, KS_E_INVALID,
                               "unknown query parameter \"%s\" (known: wait, timeout_ms, results)",
                               q.unknown);
    else if (q.results && strcmp(q.results, "all") && strcmp(q.results, "errors"))
        *ret = http_send_error(r, KS_E_INVALID,
                               "results must be all (a result per ack id, the default) or errors "
                               "(only the refused ones, with their index), got \"%s\"",
                               q.results);
    else if (q.wait && strcmp(q.wait, "commit"))
        *ret = http_send_error(r, KS_E_INVALID,
                               "wait must be commit (answer once the acks are committed), got "
                               "\"%s\"",
                               q.wait);
    else if (q.timeout_ms && !q.wait)
        *ret = http_send_error(r, KS_E_INVALID, "timeout_ms applies only with wait=commit");
    else if (q.timeout_ms && http_parse_int(q.timeout_ms, 1, INT_MAX, &ms))
        *ret = http_send_error(r, KS_E_INVALID,
                               "timeout_ms must be a positive integer (milliseconds), got \"%s\"",
                               q.timeout_ms);
    else {
        r->u.settle.wait_commit = q.wait != NULL;
        r->u.settle.commit_timeout_ms = (int)ms;
        r->u.settle.errors_only = q.results && !strcmp(q.results, "errors");
        return true;
    }
    return false;
}

http_ret_t http_decode_settle(ks_http_t *h, req_t *r)
{
    http_ret_t ret;
    if (r->route->op == KS_SETTLE_ACK && !ack_query_read(r, &ret))
        return ret;
    return http_settle(h, r, r->param, r->route->op);
}
