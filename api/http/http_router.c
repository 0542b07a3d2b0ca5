/* http_router.c: the HTTP edge's router: a request's row found in the route table by its path
 * and method (405 with Allow, 404), its caller checked in the row's order, its body's type,
 * then the row's decoder; and what the decoders share to wait for the engine: the submit, the
 * park, the long-poll bound, the reply by the row's encoder. The table itself (http_routes.c)
 * sits above the decoders it names; this file calls them only through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "edge.h"
#include "http_int.h"

http_ret_t http_reply(req_t *r)
{
    return r->route->encode(r);
}

/* Sends cmd (of r's route: its type is the row's command) to the engine through its one
 * door, with the engine's reference on r for the command's callback. Returns KS_OK (the
 * callback will run and drop it), or the error with err and the reference dropped. */
static ks_status_t http_submit(ks_http_t *h, req_t *r, ks_cmd_req_t *cmd, char *err, size_t errsize)
{
    cmd->type = r->route->cmd;
    http_req_ref(&r->io);
    ks_status_t st = ks_engine_submit(h->eng, cmd, err, errsize);
    if (st)
        http_req_unref(&r->io); /* not the last: the server holds one */
    return st;
}

http_ret_t http_submit_park(ks_http_t *h, req_t *r, ks_cmd_req_t *cmd)
{
    char err[512];
    ks_status_t st = http_submit(h, r, cmd, err, sizeof(err));
    if (st) {
        if (r->long_poll)
            atomic_fetch_sub(&h->long_polls, 1);
        r->long_poll = false;
        return http_send_error(r, st, "%s", err);
    }
    return http_park(&r->io) ? http_reply(r) : HTTP_RET_OK;
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

bool http_authorized(ks_http_t *h, req_t *r, const char *group, http_ret_t *ret)
{
    if (!h->auth)
        return true;
    char err[512], subj[1024];
    const char *a = http_req_header(&r->io, "Authorization");
    const ks_principal_t *prev = r->who; /* a second check's hold replaces the first's */
    ks_status_t st =
        ks_edge_authorize(h->auth, a, http_req_cert_subject(&r->io, subj, sizeof(subj)), group,
                          &r->who, err, sizeof(err));
    ks_auth_release(prev);
    if (st == KS_OK)
        return true;
    *ret = http_send_error(r, st, "%s", err);
    return false;
}

/* GET, or HEAD: the server sends a HEAD answer's headers without its body. */
static bool is_get(const char *method)
{
    return !strcmp(method, "GET") || !strcmp(method, "HEAD");
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

const route_t *http_route_find(const route_t *rows, size_t n, const char *url, char *buf,
                               size_t gsize, const char **group)
{
    for (size_t i = 0; i < n; i++)
        if (path_match(rows[i].path, url, buf, gsize, group))
            return &rows[i];
    return NULL;
}

/* Whether row rt serves method (a GET row serves HEAD too). */
static bool method_served(const route_t *rt, const char *method)
{
    return !strcmp(rt->method, "GET") ? is_get(method) : !strcmp(method, rt->method);
}

const route_t *http_route_method(const route_t *first, const route_t *end, const char *method,
                                 char *allow, size_t size)
{
    const route_t *hit = NULL;
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
    const char *ct = http_req_header(&r->io, "Content-Type");
    if (!ct)
        return true;
    ct += strspn(ct, " \t");
    size_t n = strlen("application/json");
    return !strncasecmp(ct, "application/json", n) && strchr(" \t;", ct[n]);
}

/* Serves r by the rows of rt's path: the caller and the method in the row's order, the
 * body's type, then the decoder of the row that serves the method. */
static http_ret_t route_run(ks_http_t *h, req_t *r, const route_t *rt)
{
    http_ret_t ret = HTTP_RET_CLOSE;
    const char *method = r->io.method;
    /* The probe listener checks no caller: plain HTTP for the platform's probes and scraper,
     * reached only where http.health_listen is bound. */
    bool check = !r->io.probe;
    if (check && rt->auth == AUTH_FIRST && !http_authorized(h, r, r->param, &ret))
        return ret;
    char allow[64];
    const route_t *hit =
        http_route_method(rt, h->routes + h->route_cnt, method, allow, sizeof(allow));
    if (!hit)
        return http_send_error_as(r, 405, "UNIMPLEMENTED", allow,
                                  "method %s is not allowed for %s; use %s", method, r->io.url,
                                  allow);
    rt = hit;
    /* Only a {group} segment is checked against the groups scope ({topic}: identity here,
     * the topic scopes in the decoder). */
    if (check && rt->auth == AUTH_METHOD &&
        !http_authorized(h, r, strstr(rt->path, "{group}") ? r->param : NULL, &ret))
        return ret;
    if ((!strcmp(rt->method, "POST") || !strcmp(rt->method, "PUT")) && !content_type_json(r))
        return http_send_error_as(
            r, 415, "INVALID_ARGUMENT", NULL,
            "Content-Type %s is not supported; send a JSON body with Content-Type: "
            "application/json",
            http_req_header(&r->io, "Content-Type"));
    r->route = rt;
    return rt->decode(h, r);
}

/* What the server found too big or malformed in the raw URL, answered before routing.
 * Returns false if there is nothing. */
static bool route_bad_url(req_t *r, http_ret_t *ret)
{
    if (r->io.url_too_big) {
        *ret = http_send_error(r, KS_E_URI_TOO_LONG,
                               "the URL has %zu bytes and %zu query parameters; at most %d bytes "
                               "and %d query parameters are allowed",
                               r->io.url_len, r->io.param_cnt, HTTP_MAX_URL_BYTES,
                               HTTP_MAX_QUERY_PARAMS);
        return true;
    }
    if (r->io.path_nul) {
        *ret = http_send_error(r, KS_E_INVALID,
                               "the URL path %s holds a NUL byte (%%00); names cannot contain NUL",
                               r->io.raw_path);
        return true;
    }
    return false;
}

http_ret_t http_route(ks_http_t *h, req_t *r)
{
    http_ret_t aret = HTTP_RET_CLOSE;
    const char *method = r->io.method, *url = r->io.url;
    if (route_bad_url(r, &aret))
        return aret;
    const route_t *rt = http_route_find(h->routes, h->route_cnt, url, r->param_buf,
                                        sizeof(r->param_buf), &r->param);
    if (r->io.probe) {
        r->param = NULL; /* the probe rows name no group */
        if (rt && rt->probe)
            return route_run(h, r, rt);
        return http_send_error(r, KS_E_NOT_FOUND,
                               "no endpoint %s %s on the probe listener (http.health_listen serves "
                               "/healthz, /readyz and /metrics)",
                               method, url);
    }
    if (!http_req_cert_ok(&r->io))
        return http_send_error(
            r, KS_E_UNAUTH, "a client certificate signed by the configured client CA is required");
    if (rt)
        return route_run(h, r, rt);
    /* Under a group but no route: the group's scope first, as on its routes. */
    const char *rest;
    if (!strncmp(url, "/v1/groups/", 11) &&
        split_group_url(url, r->param_buf, sizeof(r->param_buf), &rest) &&
        !http_authorized(h, r, r->param_buf, &aret))
        return aret;
    return http_send_error(r, KS_E_NOT_FOUND, "no endpoint %s %s", method, url);
}
