/* http_redrive.c: the redrive route: its body, the command, the caller's produce scope the
 * redrive checks each record's original topic against, and the engine callback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"

static void on_redrive(ks_redrive_result_t *res, void *opaque)
{
    req_t *r = opaque;
    r->u.redrive.res = res;
    http_wake(&r->io);
}

/* Whether r's caller may produce to topic: a redrive's check of each record's original topic
 * (the redrive's thread, while r is held for the command's callback). */
static bool redrive_allow(const char *topic, void *opaque)
{
    req_t *r = opaque;
    const ks_principal_t *cur = ks_auth_current(r->h->auth, r->who);
    bool ok = ks_auth_covers(r->h->auth, cur, KS_SCOPE_PRODUCE, topic);
    ks_auth_release(cur);
    return ok;
}

/* POST /v1/groups/{group}/redrive: {"max":N,"dry_run":bool}, both optional, the body too. */
http_ret_t http_decode_redrive(ks_http_t *h, req_t *r)
{
    const char *group = r->param;
    static const char *const known[] = {"max", "dry_run", NULL};
    http_ret_t ret = HTTP_RET_OK;
    json_t *root = r->io.body_len || r->io.body_too_big
                       ? http_body_json(h, r, "{\"max\":100,\"dry_run\":true}", 0, &ret)
                       : json_object();
    if (!root)
        return ret;
    ks_cmd_req_t cmd = {
        .group = group,
        .u.redrive = {.allow = redrive_allow, .allow_opaque = r, .cb = on_redrive, .opaque = r}};
    json_t *max = json_object_get(root, "max"), *dry = json_object_get(root, "dry_run");
    if (!json_is_object(root)) {
        ret = http_send_error(r, KS_E_INVALID, "body must be a JSON object");
        goto out;
    }
    if (!http_only_fields(r, root, "body", known, "max, dry_run", &ret))
        goto out;
    if (max && (!json_is_integer(max) || json_integer_value(max) < 1 ||
                json_integer_value(max) > KS_CMD_REDRIVE_MAX)) {
        ret = http_send_error(r, KS_E_INVALID, "max must be an integer from 1 to %d",
                              KS_CMD_REDRIVE_MAX);
        goto out;
    }
    if (dry && !json_is_boolean(dry)) {
        ret = http_send_error(r, KS_E_INVALID, "dry_run must be true or false");
        goto out;
    }
    cmd.u.redrive.max = max ? (int32_t)json_integer_value(max) : 0;
    cmd.u.redrive.dry_run = dry && json_is_true(dry);
    ret = http_submit_park(h, r, &cmd); /* the validator holds the default and the DLT check */
out:
    json_decref(root);
    return ret;
}
