/* fuzz_http_url.c: libFuzzer harness for the HTTP edge's URL, query and body handling
 * (api/http/*.c behind a real libmicrohttpd listener, through ks_http_start). Input:
 * "<method> <request target>\n<body>". No crash and no sanitizer report; every request that
 * reaches ksidecar's handler is answered within 10 s, and every JSON answer parses.
 * KSIDECAR_FUZZ_HTTP_STRICT=0 keeps only the first check (and waits 2 s for an answer). No
 * group is allowed, so the engine refuses every group command after the edge has parsed it,
 * and no consumer starts. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "config.h"
#include "engine.h"
#include "http_api.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ks_config_t cfg;
static ks_http_t *http;
static int port;
static bool strict;

static void start(void)
{
    char err[512];
    ks_log_setup(KS_LOG_ERROR, false);
    ks_config_defaults(&cfg);
    if (ks_config_set(&cfg, "http.listen", "127.0.0.1:0", err, sizeof(err)) < 0 ||
        ks_config_set(&cfg, "kafka.bootstrap.servers", "127.0.0.1:1", err, sizeof(err)) < 0 ||
        ks_config_set(&cfg, "kafka.log_level", "0", err, sizeof(err)) < 0 ||
        /* A produce fails once this passes with no broker: within the 10 s an answer
         * is required in, not librdkafka's 300 s. */
        ks_config_set(&cfg, "kafka.message.timeout.ms", "1000", err, sizeof(err)) < 0) {
        fprintf(stderr, "fuzz_http_url: %s\n", err);
        abort();
    }
    for (size_t i = 0; i < cfg.group_pattern_cnt; i++)
        free(cfg.group_patterns[i]);
    cfg.group_pattern_cnt = 0;
    ks_engine_t *eng = ks_engine_new(&cfg, err, sizeof(err));
    if (!eng || !(http = ks_http_start(eng, &cfg, NULL, NULL, NULL, NULL, err, sizeof(err)))) {
        fprintf(stderr, "fuzz_http_url: %s\n", err);
        abort();
    }
    port = ks_http_port(http);
    const char *e = getenv("KSIDECAR_FUZZ_HTTP_STRICT");
    strict = !e || strcmp(e, "0") != 0;
}

/* connect(2), finished when libFuzzer's SIGALRM interrupts it. Returns 0 or -1. */
static int connect_retry(int fd, const struct sockaddr_in *sa)
{
    if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
        return 0;
    if (errno != EINTR)
        return -1;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int soerr = 0;
    socklen_t l = sizeof(soerr);
    while (poll(&p, 1, 10000) < 0 && errno == EINTR)
        ;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &l) < 0 || soerr) {
        errno = soerr ? soerr : errno;
        return -1;
    }
    return 0;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the server may close early on a bad request */
        p += w;
        n -= (size_t)w;
    }
}

/* True if the line is "<upper-case method> /<printable ASCII without spaces>". */
static bool request_line_ok(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n && p[i] >= 'A' && p[i] <= 'Z')
        i++;
    if (i == 0 || i + 1 >= n || p[i] != ' ' || p[i + 1] != '/')
        return false;
    for (i += 2; i < n; i++)
        if (p[i] <= 0x20 || p[i] >= 0x7f)
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!http)
        start();
    const uint8_t *nl = memchr(data, '\n', size);
    size_t line_len = nl ? (size_t)(nl - data) : size;
    const char *body = nl ? (const char *)nl + 1 : "";
    size_t body_len = nl ? size - line_len - 1 : 0;

    size_t cap = line_len + 200;
    char *head = malloc(cap);
    if (!head)
        abort();
    int hl = snprintf(head, cap,
                      "%.*s HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      (int)line_len, (const char *)data, body_len);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = strict ? 10 : 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    /* Closing with a reset leaves no TIME_WAIT behind: thousands of requests a second would
     * otherwise use up the loopback's ports. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    if (fd < 0 || connect_retry(fd, &sa) < 0) {
        fprintf(stderr, "fuzz_http_url: connect: %s\n", strerror(errno));
        abort();
    }
    send_all(fd, head, (size_t)hl);
    send_all(fd, body, body_len);
    free(head);

    size_t got = 0, rcap = 4096;
    char *resp = malloc(rcap);
    for (;;) {
        if (got + 1 >= rcap && !(resp = realloc(resp, rcap *= 2)))
            abort();
        ssize_t r = recv(fd, resp + got, rcap - got - 1, 0);
        if (r < 0 && errno == EINTR)
            continue; /* libFuzzer's SIGALRM; the timeout (SO_RCVTIMEO) starts again */
        if (r < 0 && strict) {
            fprintf(stderr, "fuzz_http_url: no answer within 10 s\n");
            abort();
        }
        if (r < 0)
            break;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    resp[got] = '\0';
    close(fd);
    /* libmicrohttpd itself drops or answers (in HTML) requests whose first line is
     * malformed; those that reach ksidecar's handler always get an answer, in JSON. */
    if (strict && got == 0 && request_line_ok(data, line_len)) {
        fprintf(stderr, "fuzz_http_url: the connection closed without an answer\n");
        abort();
    }
    const char *sep = strstr(resp, "\r\n\r\n");
    if (strict && sep && strstr(resp, "Content-Type: application/json") && sep + 4 < resp + got) {
        json_error_t jerr;
        json_t *j = json_loadb(sep + 4, got - (size_t)(sep + 4 - resp), 0, &jerr);
        if (!j) {
            fprintf(stderr, "fuzz_http_url: the body is not JSON (%s): %s\n", jerr.text, sep + 4);
            abort();
        }
        json_decref(j);
    }
    free(resp);
    return 0;
}
