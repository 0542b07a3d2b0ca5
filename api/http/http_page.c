/* http_page.c: GET /, the status page (api/status_page.html, compiled in): served with the
 * process's version and start time filled in, and a Content-Security-Policy that lets only
 * its own inline script and style run and only this origin be fetched. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_int.h"

/* api/status_page.html, compiled in (cmake/embed.cmake). */
extern const unsigned char ks_status_page[];
extern const size_t ks_status_page_len;

/* The page's placeholder for what it cannot learn from the status API. */
#define PROCESS_MARK "KS_PROCESS_INFO"

int64_t http_page_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Appends " 'sha256-BASE64'" for the text between open and close in the page to buf (a CSP
 * source that allows exactly that inline element). Returns false when the page has no such
 * element (a build without its script or style), leaving buf as it was. */
static bool csp_hash(const char *page, size_t len, const char *open, const char *close, char *buf,
                     size_t size)
{
    const char *end = page + len;
    const char *a = memmem(page, len, open, strlen(open));
    if (!a)
        return false;
    a += strlen(open);
    const char *b = memmem(a, (size_t)(end - a), close, strlen(close));
    if (!b)
        return false;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(a, (size_t)(b - a), md, &mdlen, EVP_sha256(), NULL))
        return false;
    unsigned char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
    EVP_EncodeBlock(b64, md, (int)mdlen);
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, " 'sha256-%s'", (const char *)b64);
    return true;
}

http_ret_t http_page_decode(ks_http_t *h, req_t *r)
{
    const char *page = (const char *)ks_status_page;
    size_t len = ks_status_page_len;

    /* The page with its placeholder replaced: "version;started_ms". */
    char info[128];
    int n =
        snprintf(info, sizeof(info), "%s;%lld", KSIDECAR_VERSION, (long long)h->started_wall_ms);
    const char *mark = memmem(page, len, PROCESS_MARK, strlen(PROCESS_MARK));
    size_t pre = mark ? (size_t)(mark - page) : len;
    size_t post = mark ? len - pre - strlen(PROCESS_MARK) : 0;
    size_t out_len = pre + (mark ? (size_t)n : 0) + post;
    char *out = malloc(out_len ? out_len : 1);
    if (!out)
        abort();
    memcpy(out, page, pre);
    if (mark) {
        memcpy(out + pre, info, (size_t)n);
        memcpy(out + pre + (size_t)n, mark + strlen(PROCESS_MARK), post);
    }

    /* The hashes are of the page's inline script and style, which the placeholder is not in. */
    char script[128] = "", style[128] = "", csp[512];
    if (!csp_hash(page, len, "<script>", "</script>", script, sizeof(script)))
        snprintf(script, sizeof(script), " 'none'");
    if (!csp_hash(page, len, "<style>", "</style>", style, sizeof(style)))
        snprintf(style, sizeof(style), " 'none'");
    snprintf(csp, sizeof(csp),
             "default-src 'none'; script-src%s; style-src%s; connect-src 'self'; img-src 'self'; "
             "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
             script, style);

    const http_header_t hdr[] = {{"Content-Type", "text/html; charset=utf-8"},
                                 {"Content-Security-Policy", csp},
                                 {"X-Content-Type-Options", "nosniff"},
                                 {"Referrer-Policy", "no-referrer"},
                                 {"Cache-Control", "no-store"}};
    return http_respond(&r->io, 200, hdr, sizeof(hdr) / sizeof(hdr[0]), out, out_len);
}
