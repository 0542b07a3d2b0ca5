/* http_req.c: what every HTTP server adapter does alike with a request (http_req.h): the raw
 * URL's checks, the request id, the body's bound, the default Retry-After. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "http_req.h"
#include "util.h"

size_t http_req_scan_uri(http_req_t *r, const char *uri)
{
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
    r->url_too_big = r->url_len > HTTP_MAX_URL_BYTES || r->param_cnt > HTTP_MAX_QUERY_PARAMS;
    return q ? path_len + 1 : 0;
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

/* Whether v[0..n) is a sane request id (see http_req_set_id). */
static bool sane_req_id(const char *v, size_t n)
{
    if (!v || n == 0 || n > HTTP_REQ_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (v[i] <= ' ' || v[i] > '~')
            return false;
    return true;
}

void http_req_set_id(http_req_t *r, const char *v, size_t n)
{
    if (sane_req_id(v, n))
        snprintf(r->req_id, sizeof(r->req_id), "%.*s", (int)n, v);
    else
        make_req_id(r->req_id, sizeof(r->req_id));
}

void http_req_add_body(http_req_t *r, const char *p, size_t n, int64_t max)
{
    if (r->body_too_big || (int64_t)(r->body_len + n) > max) {
        r->body_too_big = true;
        return;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        r->body_cap = (r->body_len + n + 1) * 2;
        r->body = realloc(r->body, r->body_cap);
        if (!r->body)
            abort();
    }
    memcpy(r->body + r->body_len, p, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
}

const char *http_req_retry_after(unsigned status, const http_header_t *hdrs, size_t n)
{
    if (status != 429 && status != 503)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(hdrs[i].name, "Retry-After"))
            return NULL;
    return status == 429 ? "1" : "5";
}
