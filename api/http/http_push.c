/* http_push.c: /v1/groups/{group}/push: a push set, read and removed by API call (PUT, GET,
 * DELETE). The push itself is the push edge's, reached through its
 * calls in h->push (push_ctl.h); these only decode and answer. */
#include <stdio.h>
#include <string.h>

#include "edge.h"
#include "http_int.h"

#define PUSH_TOPICS_MAX 64

/* Without the push edge's calls (an HTTP edge started alone) every push call is refused. */
static http_ret_t no_push(req_t *r)
{
    return http_send_error(r, KS_E_PERMISSION, "push cannot be set by API call here");
}

/* GET: the group's push (set by API call or by config), or 404. */
http_ret_t http_push_get(ks_http_t *h, req_t *r)
{
    const char *group = r->param;
    if (!h->push.describe)
        return no_push(r);
    json_t *o = h->push.describe(h->push.push, group);
    if (!o)
        return http_send_error(r, KS_E_NOT_FOUND, "group %s has no push", group);
    return http_send_json(r, 200, o);
}

/* PUT {"topics":[...],"url":...,"concurrency":..,"timeout_ms":..,"batch":..,
 * "bearer_token":..,"insecure":..,"cloudevents":..}: starts pushing. The caller must be
 * allowed the group (checked before) and to consume every topic. */
http_ret_t http_push_put(ks_http_t *h, req_t *r)
{
    const char *group = r->param;
    if (!h->push.add)
        return no_push(r);
    http_ret_t ret = HTTP_RET_OK;
    json_t *root = http_body_json(h, r, "{\"topics\":[\"...\"],\"url\":\"http://...\"}", 0, &ret);
    if (!root)
        return ret;
    char err[512];
    ks_status_t st;
    const char *topics[PUSH_TOPICS_MAX];
    size_t n = 0;
    json_t *tv = json_object_get(root, "topics"), *push = NULL;
    if (!json_is_object(root)) {
        ret = http_send_error(r, KS_E_INVALID, "body must be a JSON object");
        goto out;
    }
    if (!json_is_array(tv) || json_array_size(tv) == 0 || json_array_size(tv) > PUSH_TOPICS_MAX) {
        ret = http_send_error(r, KS_E_INVALID, "topics must be an array of 1 to %d topic names",
                              PUSH_TOPICS_MAX);
        goto out;
    }
    for (; n < json_array_size(tv); n++)
        if (!(topics[n] = http_json_name(r, json_array_get(tv, n), "topics[]", &ret)))
            goto out;
    if ((st = ks_engine_check_group(h->eng, group, err, sizeof(err))) ||
        (st = ks_edge_check_topics(h->eng, h->auth, r->who, KS_SCOPE_CONSUME, "push", topics, n,
                                   err, sizeof(err)))) {
        ret = http_send_error(r, st, "%s", err);
        goto out;
    }
    /* The push fields: everything but topics, read as a static group's "push" object. */
    push = json_deep_copy(root);
    json_object_del(push, "topics");
    if ((st = h->push.add(h->push.push, group, topics, n, push, r->who, err, sizeof(err)))) {
        ret = http_send_error(r, st, "%s", err);
        goto out;
    }
    json_t *o = h->push.describe(h->push.push, group);
    ret = o ? http_send_json(r, 201, o)
            : http_send_error(r, KS_E_UNAVAILABLE, "the push of group %s ended at once", group);
out:
    json_decref(push);
    json_decref(root);
    return ret;
}

/* DELETE: stops a push set by API call; the requests in flight are answered and settle
 * first, so GET answers 404 a little later. */
http_ret_t http_push_delete(ks_http_t *h, req_t *r)
{
    const char *group = r->param;
    if (!h->push.remove)
        return no_push(r);
    char err[512];
    json_t *o = NULL;
    ks_status_t st = h->push.remove(h->push.push, group, &o, err, sizeof(err));
    if (st)
        return http_send_error(r, st, "%s", err);
    return http_send_json(r, 200, o);
}
