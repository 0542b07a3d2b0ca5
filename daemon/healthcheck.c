/* healthcheck.c: `ksidecar --healthcheck`: the image's HEALTHCHECK without a shell or curl in it.
 */
#include "healthcheck.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

bool ks_healthcheck_wanted(int *argc, char **argv)
{
    for (int i = 1; i < *argc; i++)
        if (!strcmp(argv[i], "--healthcheck")) {
            memmove(&argv[i], &argv[i + 1], (size_t)(*argc - i) * sizeof(*argv));
            (*argc)--;
            return true;
        }
    return false;
}

int ks_healthcheck(const ks_config_t *cfg, long timeout_ms)
{
    const char *listen = cfg->http_health_listen;
    if (!*listen) {
        /* The API listener takes a client certificate under TLS; the probe listener never. */
        if (!*cfg->http_listen || *cfg->tls_cert_file) {
            fprintf(stderr, "ksidecar --healthcheck: no plain HTTP listener to ask: set "
                            "http.health_listen\n");
            return 1;
        }
        listen = cfg->http_listen;
    }
    const char *colon = strrchr(listen, ':');
    if (!colon) {
        fprintf(stderr, "ksidecar --healthcheck: no port in \"%s\"\n", listen);
        return 1;
    }
    int hostlen = (int)(colon - listen);
    bool any = hostlen == 0 || !strncmp(listen, "*", (size_t)hostlen) ||
               !strncmp(listen, "0.0.0.0", (size_t)hostlen);
    char url[320];
    snprintf(url, sizeof(url), "http://%.*s:%s/healthz", any ? 9 : hostlen,
             any ? "127.0.0.1" : listen, colon + 1);

    int rc = 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "ksidecar --healthcheck: libcurl does not start\n");
        return 1;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        fprintf(stderr, "ksidecar --healthcheck: libcurl does not start\n");
        goto out;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never an http_proxy from the environment */
    CURLcode res = curl_easy_perform(c);    /* the body goes to stdout */
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (res != CURLE_OK)
        fprintf(stderr, "ksidecar --healthcheck: %s: %s\n", url, curl_easy_strerror(res));
    else if (status != 200)
        fprintf(stderr, "ksidecar --healthcheck: %s answered %ld\n", url, status);
    else
        rc = 0;
    curl_easy_cleanup(c);
out:
    curl_global_cleanup();
    return rc;
}
