/* test_registry.c: tests the schema registry client (codec/registry.c) against a small
 * registry the test serves itself with libmicrohttpd: the cache, its bound, URLs tried in turn,
 * basic auth and a bearer token file, a timeout and its backoff, a 404 remembered, a subject's
 * version, registering, and cancelling a wake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "registry.h"

#include "assert_contains.h"

/* ---- the test's registry ---- */

#define MAX_PATHS 32

typedef struct server {
    struct MHD_Daemon *d;
    int port;
    char url[64];
    pthread_mutex_t lock;
    /* What it answers (set by the test between requests). */
    int status;           /* 0: the normal answers; else every request gets this */
    int delay_ms;         /* before answering */
    const char *basic;    /* "user:password" required, or NULL */
    const char *bearer;   /* token required, or NULL */
    int register_id;      /* the id a POST answers */
    char last_post[1024]; /* the last POST body */
    /* What it was asked: request counts by path. */
    char paths[MAX_PATHS][96];
    int hits[MAX_PATHS];
} server_t;

typedef struct post_buf {
    char body[1024];
    size_t len;
} post_buf_t;

static int count_hit(server_t *s, const char *path)
{
    pthread_mutex_lock(&s->lock);
    int i = 0;
    while (i < MAX_PATHS && s->paths[i][0] && strcmp(s->paths[i], path))
        i++;
    assert_true(i < MAX_PATHS);
    snprintf(s->paths[i], sizeof(s->paths[i]), "%s", path);
    int n = ++s->hits[i];
    pthread_mutex_unlock(&s->lock);
    return n;
}

static int hits(server_t *s, const char *path)
{
    pthread_mutex_lock(&s->lock);
    int n = 0;
    for (int i = 0; i < MAX_PATHS && s->paths[i][0]; i++)
        if (!strcmp(s->paths[i], path))
            n = s->hits[i];
    pthread_mutex_unlock(&s->lock);
    return n;
}

static enum MHD_Result reply(struct MHD_Connection *c, int status, const char *body)
{
    char *copy = strdup(body); /* MHD takes it, and frees it with free() */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(copy), copy, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/vnd.schemaregistry.v1+json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

/* The schema the test registry has for id: ids 1-50, a record named after its id. */
static void schema_text(int id, char *out, size_t size)
{
    snprintf(out, size, "{\"type\":\"record\",\"name\":\"R%d\",\"fields\":[]}", id);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    server_t *s = cls;
    if (!strcmp(method, "POST")) { /* gather the body first */
        post_buf_t *pb = *con_cls;
        if (!pb) {
            *con_cls = pb = calloc(1, sizeof(*pb));
            return MHD_YES;
        }
        if (*upload_size) {
            size_t n = *upload_size;
            if (pb->len + n >= sizeof(pb->body))
                n = sizeof(pb->body) - 1 - pb->len;
            memcpy(pb->body + pb->len, upload, n);
            pb->len += n;
            *upload_size = 0;
            return MHD_YES;
        }
    }
    count_hit(s, url);
    pthread_mutex_lock(&s->lock);
    int status = s->status, delay = s->delay_ms, reg_id = s->register_id;
    const char *basic = s->basic, *bearer = s->bearer;
    if (*con_cls)
        snprintf(s->last_post, sizeof(s->last_post), "%s", ((post_buf_t *)*con_cls)->body);
    pthread_mutex_unlock(&s->lock);
    free(*con_cls);
    *con_cls = NULL;
    if (delay)
        usleep((useconds_t)delay * 1000);
    if (basic) {
        char *pass = NULL, *user = MHD_basic_auth_get_username_password(c, &pass);
        char got[128] = "";
        if (user)
            snprintf(got, sizeof(got), "%s:%s", user, pass ? pass : "");
        free(user);
        free(pass);
        if (strcmp(got, basic))
            return reply(c, 401, "{\"error_code\":401,\"message\":\"Unauthorized\"}");
    }
    if (bearer) {
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        char want[128];
        snprintf(want, sizeof(want), "Bearer %s", bearer);
        if (!h || strcmp(h, want))
            return reply(c, 401, "{\"error_code\":401,\"message\":\"bad token\"}");
    }
    if (status)
        return reply(c, status, "{\"error_code\":50001,\"message\":\"down for the test\"}");
    int id = 0;
    char text[256], body[1024];
    if (sscanf(url, "/schemas/ids/%d", &id) == 1) {
        if (id < 1 || id > 50) {
            snprintf(body, sizeof(body),
                     "{\"error_code\":40403,\"message\":\"Schema %d not found.\"}", id);
            return reply(c, 404, body);
        }
        schema_text(id, text, sizeof(text));
        json_t *j = json_pack("{s:s}", "schema", text);
        if (id == 7)
            json_object_set_new(j, "schemaType", json_string("JSON"));
        if (id == 8)
            json_object_set_new(j, "schemaType", json_string("XML"));
        char *d = json_dumps(j, JSON_COMPACT);
        enum MHD_Result ret = reply(c, 200, d);
        free(d);
        json_decref(j);
        return ret;
    }
    char subject[64], ver[16];
    if (sscanf(url, "/subjects/%63[^/]/versions/%15s", subject, ver) == 2) {
        if (strcmp(subject, "orders-value"))
            return reply(c, 404, "{\"error_code\":40401,\"message\":\"Subject not found.\"}");
        int v = !strcmp(ver, "latest") ? 3 : atoi(ver);
        schema_text(20 + v, text, sizeof(text));
        json_t *j = json_pack("{s:s,s:i,s:i,s:s}", "subject", subject, "version", v, "id", 20 + v,
                              "schema", text);
        char *d = json_dumps(j, JSON_COMPACT);
        enum MHD_Result ret = reply(c, 200, d);
        free(d);
        json_decref(j);
        return ret;
    }
    if (sscanf(url, "/subjects/%63[^/]/versions", subject) == 1 && !strcmp(method, "POST")) {
        snprintf(body, sizeof(body), "{\"id\":%d}", reg_id);
        return reply(c, 200, body);
    }
    return reply(c, 404, "{\"error_code\":404,\"message\":\"HTTP 404 Not Found\"}");
}

/* Paths as sent, so that the test sees how the client escaped a subject. */
static size_t keep_escapes(void *cls, struct MHD_Connection *c, char *s)
{
    return strlen(s);
}

static void server_start(server_t *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    s->register_id = 77;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0,
                            NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, NULL, MHD_OPTION_END);
    assert_non_null(s->d);
    s->port = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT)->port;
    snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", s->port);
}

static void server_stop(server_t *s)
{
    MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->lock);
}

/* A loopback port nothing listens on. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* ---- waiting for a wake ---- */

typedef struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int woken;
} waiter_t;

static void on_wake(void *ctx)
{
    waiter_t *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->woken++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void waiter_init(waiter_t *w)
{
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->woken = 0;
}

/* Waits up to ms for the wake count to reach n. Returns whether it did. */
static bool wait_woken(waiter_t *w, int n, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&w->lock);
    while (w->woken < n && pthread_cond_timedwait(&w->cond, &w->lock, &until) == 0)
        ;
    bool ok = w->woken >= n;
    pthread_mutex_unlock(&w->lock);
    return ok;
}

static int woken(waiter_t *w)
{
    pthread_mutex_lock(&w->lock);
    int n = w->woken;
    pthread_mutex_unlock(&w->lock);
    return n;
}

/* Looks id up as an edge would: while pending, waits for the wake and asks again. */
static ks_registry_status_t get_wait(ks_registry_t *r, int32_t id, ks_schema_t **s, char *err,
                                     size_t errsize)
{
    waiter_t w;
    waiter_init(&w);
    ks_registry_wake_t wake = {on_wake, &w};
    ks_registry_status_t st;
    for (int i = 0; i < 10; i++) {
        int n = woken(&w);
        st = ks_registry_get(r, id, &wake, s, err, errsize);
        if (st != KS_REG_PENDING)
            break;
        assert_true(wait_woken(&w, n + 1, 5000));
    }
    ks_registry_cancel(r, &w);
    return st;
}

static ks_registry_t *client(const char *const *urls, size_t n, ks_registry_conf_t *c)
{
    c->urls = urls;
    c->url_cnt = n;
    ks_registry_t *r = NULL;
    char err[512];
    if (ks_registry_new(c, &r, err, sizeof(err)))
        fail_msg("ks_registry_new: %s", err);
    return r;
}

/* ---- the tests ---- */

static void test_fetch_and_cache_hit(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    const char *urls[] = {s.url};
    ks_registry_conf_t c = {0};
    ks_registry_t *r = client(urls, 1, &c);
    ks_schema_t *sc = NULL;
    char err[512];
    /* Without a wake the first lookup only starts the fetch. */
    assert_int_equal(ks_registry_get(r, 3, NULL, &sc, err, sizeof(err)), KS_REG_PENDING);
    assert_null(sc);
    assert_int_equal(get_wait(r, 3, &sc, err, sizeof(err)), KS_REG_OK);
    char want[256];
    schema_text(3, want, sizeof(want));
    assert_string_equal(ks_schema_text(sc, NULL), want);
    assert_int_equal(ks_schema_id(sc), 3);
    assert_int_equal(ks_schema_type(sc), KS_SCHEMA_AVRO);
    assert_null(ks_schema_references(sc));
    /* Hits: no request more, and the same object. */
    for (int i = 0; i < 5; i++) {
        ks_schema_t *again = NULL;
        assert_int_equal(ks_registry_get(r, 3, NULL, &again, err, sizeof(err)), KS_REG_OK);
        assert_ptr_equal(again, sc);
        ks_schema_unref(again);
    }
    assert_int_equal(hits(&s, "/schemas/ids/3"), 1);
    ks_registry_stats_t st;
    ks_registry_stats(r, &st);
    assert_int_equal(st.requests, 1);
    assert_true(st.hits >= 6);
    /* schemaType: JSON read; a type ksidecar does not read is unknown. */
    ks_schema_t *js = NULL;
    assert_int_equal(get_wait(r, 7, &js, err, sizeof(err)), KS_REG_OK);
    assert_int_equal(ks_schema_type(js), KS_SCHEMA_JSON);
    ks_schema_unref(js);
    assert_int_equal(get_wait(r, 8, &js, err, sizeof(err)), KS_REG_UNKNOWN);
    assert_contains(err, "XML");
    ks_registry_free(r);
    /* A schema outlives its registry. */
    assert_string_equal(ks_schema_text(sc, NULL), want);
    ks_schema_unref(sc);
    server_stop(&s);
}

static void test_bound_evicts(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    const char *urls[] = {s.url};
    ks_registry_conf_t c = {.cache_max = 2};
    ks_registry_t *r = client(urls, 1, &c);
    ks_schema_t *sc;
    char err[512];
    for (int id = 1; id <= 3; id++) {
        assert_int_equal(get_wait(r, id, &sc, err, sizeof(err)), KS_REG_OK);
        ks_schema_unref(sc);
    }
    ks_registry_stats_t st;
    ks_registry_stats(r, &st);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.evictions, 1);
    /* 3 and 2 are kept; 1, the least recently used, went and is fetched again. */
    assert_int_equal(ks_registry_get(r, 3, NULL, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    assert_int_equal(ks_registry_get(r, 2, NULL, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    assert_int_equal(get_wait(r, 1, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    assert_int_equal(hits(&s, "/schemas/ids/1"), 2);
    assert_int_equal(hits(&s, "/schemas/ids/2"), 1);
    /* 2 was asked after 3, so 3 was the least recent when 1 came back: 3 went. */
    assert_int_equal(ks_registry_get(r, 2, NULL, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    assert_int_equal(ks_registry_get(r, 3, NULL, &sc, err, sizeof(err)), KS_REG_PENDING);
    ks_registry_free(r);
    server_stop(&s);
}

static void test_urls_in_turn(void **state)
{
    (void)state;
    server_t bad, good;
    server_start(&bad);
    server_start(&good);
    bad.status = 503;
    char closed[64], closed_slash[64];
    int cp = closed_port();
    snprintf(closed, sizeof(closed), "http://127.0.0.1:%d", cp);
    snprintf(closed_slash, sizeof(closed_slash), "http://127.0.0.1:%d/", cp); /* '/' dropped */
    const char *urls[] = {closed_slash, bad.url, good.url};
    ks_registry_conf_t c = {0};
    ks_registry_t *r = client(urls, 3, &c);
    ks_schema_t *sc;
    char err[512];
    assert_int_equal(get_wait(r, 4, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    ks_registry_stats_t st;
    ks_registry_stats(r, &st);
    assert_int_equal(st.requests, 3); /* refused, 503, then the answer */
    assert_int_equal(hits(&bad, "/schemas/ids/4"), 1);
    assert_int_equal(hits(&good, "/schemas/ids/4"), 1);
    /* The URL that answered is asked first from then on. */
    assert_int_equal(get_wait(r, 5, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    ks_registry_stats(r, &st);
    assert_int_equal(st.requests, 4);
    assert_int_equal(hits(&bad, "/schemas/ids/5"), 0);
    /* Every URL failing: unavailable, each one's failure named. */
    pthread_mutex_lock(&good.lock);
    good.status = 500;
    pthread_mutex_unlock(&good.lock);
    assert_int_equal(get_wait(r, 6, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_null(sc);
    assert_contains(err, closed);
    assert_contains(err, "HTTP 503: down for the test");
    assert_contains(err, "HTTP 500");
    ks_registry_free(r);
    server_stop(&bad);
    server_stop(&good);
}

static void test_basic_auth(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    s.basic = "alice:pw";
    const char *urls[] = {s.url};
    ks_schema_t *sc;
    char err[512];
    ks_registry_conf_t c = {0};
    ks_registry_t *r = client(urls, 1, &c);
    assert_int_equal(get_wait(r, 1, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_contains(err, "HTTP 401");
    ks_registry_free(r);
    ks_registry_conf_t ca = {.basic_auth = "alice:pw"};
    r = client(urls, 1, &ca);
    assert_int_equal(get_wait(r, 1, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    ks_registry_free(r);
    ks_registry_conf_t cw = {.basic_auth = "alice:wrong"};
    r = client(urls, 1, &cw);
    assert_int_equal(get_wait(r, 1, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    ks_registry_free(r);
    server_stop(&s);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_bearer_token_file_reread(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    s.bearer = "token-one";
    char path[] = "/tmp/ks_test_registry_token_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "token-one\n");
    const char *urls[] = {s.url};
    ks_registry_conf_t c = {.bearer_token_file = path, .backoff_ms = 50};
    ks_registry_t *r = client(urls, 1, &c);
    ks_schema_t *sc;
    char err[512];
    assert_int_equal(get_wait(r, 1, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    /* The registry now wants another token: refused until the file has it. */
    pthread_mutex_lock(&s.lock);
    s.bearer = "token-number-two";
    pthread_mutex_unlock(&s.lock);
    assert_int_equal(get_wait(r, 2, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_contains(err, "bad token");
    /* Replaced as Kubernetes replaces a mounted secret: a new file renamed over it. */
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    write_file(tmp, "token-number-two");
    assert_int_equal(rename(tmp, path), 0);
    usleep(100 * 1000); /* past the backoff */
    assert_int_equal(get_wait(r, 2, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    /* A file that is gone fails the fetch without a request. */
    unlink(path);
    int before = hits(&s, "/schemas/ids/3");
    assert_int_equal(get_wait(r, 3, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_contains(err, "bearer_token_file");
    assert_int_equal(hits(&s, "/schemas/ids/3"), before);
    ks_registry_free(r);
    server_stop(&s);
}

static void test_timeout_backoff(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    s.delay_ms = 1500;
    const char *urls[] = {s.url};
    ks_registry_conf_t c = {.timeout_ms = 200, .backoff_ms = 1000};
    ks_registry_t *r = client(urls, 1, &c);
    ks_schema_t *sc;
    char err[512];
    assert_int_equal(get_wait(r, 9, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_contains(err, "imed out"); /* libcurl: "Operation timed out after ..." */
    assert_int_equal(hits(&s, "/schemas/ids/9"), 1);
    /* Inside the backoff: answered from what was remembered, nothing asked. */
    assert_int_equal(ks_registry_get(r, 9, NULL, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_contains(err, "imed out");
    usleep(300 * 1000);
    assert_int_equal(ks_registry_get(r, 9, NULL, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_int_equal(hits(&s, "/schemas/ids/9"), 1);
    ks_registry_stats_t st;
    ks_registry_stats(r, &st);
    assert_int_equal(st.failures, 1);
    /* With a wake, the registry retries by itself when the backoff is over, and the caller is
     * woken when that retry settles: the registry is fast again by then. */
    pthread_mutex_lock(&s.lock);
    s.delay_ms = 0;
    pthread_mutex_unlock(&s.lock);
    waiter_t w;
    waiter_init(&w);
    ks_registry_wake_t wake = {on_wake, &w};
    assert_int_equal(ks_registry_get(r, 9, &wake, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_int_equal(ks_registry_get(r, 9, &wake, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    assert_true(wait_woken(&w, 1, 5000));
    assert_int_equal(ks_registry_get(r, 9, NULL, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    assert_int_equal(hits(&s, "/schemas/ids/9"), 2);
    usleep(50 * 1000);
    assert_int_equal(woken(&w), 1); /* registered twice, woken once */
    ks_registry_cancel(r, &w);
    ks_registry_free(r);
    server_stop(&s);
}

static void test_backoff_doubles(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    s.status = 500;
    const char *urls[] = {s.url};
    ks_registry_conf_t c = {.backoff_ms = 100, .backoff_max_ms = 250};
    ks_registry_t *r = client(urls, 1, &c);
    ks_schema_t *sc;
    char err[512];
    waiter_t w;
    waiter_init(&w);
    ks_registry_wake_t wake = {on_wake, &w};
    /* Kept waiting: first fetch, then retries after 100, 200, 250, 250 ms. */
    assert_int_equal(ks_registry_get(r, 10, &wake, &sc, err, sizeof(err)), KS_REG_PENDING);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; i <= 5; i++) {
        assert_true(wait_woken(&w, i, 5000));
        assert_int_equal(ks_registry_get(r, 10, &wake, &sc, err, sizeof(err)), KS_REG_UNAVAILABLE);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_true(ms >= 800); /* 100 + 200 + 250 + 250 at the least */
    assert_int_equal(hits(&s, "/schemas/ids/10"), 5);
    ks_registry_cancel(r, &w);
    ks_registry_free(r);
    server_stop(&s);
}

static void test_404_remembered(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    const char *urls[] = {s.url};
    ks_registry_conf_t c = {.unknown_ms = 300};
    ks_registry_t *r = client(urls, 1, &c);
    ks_schema_t *sc;
    char err[512];
    assert_int_equal(get_wait(r, 99, &sc, err, sizeof(err)), KS_REG_UNKNOWN);
    assert_contains(err, "Schema 99 not found.");
    waiter_t w;
    waiter_init(&w);
    ks_registry_wake_t wake = {on_wake, &w};
    assert_int_equal(ks_registry_get(r, 99, &wake, &sc, err, sizeof(err)), KS_REG_UNKNOWN);
    assert_int_equal(hits(&s, "/schemas/ids/99"), 1);
    ks_registry_stats_t st;
    ks_registry_stats(r, &st);
    assert_int_equal(st.failures, 0); /* an answer, not a failure */
    /* Believed for unknown_ms, then asked again. */
    usleep(400 * 1000);
    assert_int_equal(get_wait(r, 99, &sc, err, sizeof(err)), KS_REG_UNKNOWN);
    assert_int_equal(hits(&s, "/schemas/ids/99"), 2);
    assert_int_equal(woken(&w), 0);
    ks_registry_free(r);
    server_stop(&s);
}

static void test_subject_version_and_register(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    const char *urls[] = {s.url};
    ks_registry_conf_t c = {.latest_ms = 200};
    ks_registry_t *r = client(urls, 1, &c);
    ks_schema_t *sc;
    char err[512];
    waiter_t w;
    waiter_init(&w);
    ks_registry_wake_t wake = {on_wake, &w};
    assert_int_equal(
        ks_registry_get_version(r, "orders-value", "latest", &wake, &sc, err, sizeof(err)),
        KS_REG_PENDING);
    assert_true(wait_woken(&w, 1, 5000));
    assert_int_equal(
        ks_registry_get_version(r, "orders-value", "latest", &wake, &sc, err, sizeof(err)),
        KS_REG_OK);
    assert_int_equal(ks_schema_id(sc), 23);
    ks_schema_unref(sc);
    /* Cached under its id too. */
    assert_int_equal(ks_registry_get(r, 23, NULL, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    assert_int_equal(hits(&s, "/schemas/ids/23"), 0);
    /* "latest" past latest_ms: the one kept serves while it is fetched again. */
    usleep(300 * 1000);
    assert_int_equal(
        ks_registry_get_version(r, "orders-value", "latest", &wake, &sc, err, sizeof(err)),
        KS_REG_OK);
    ks_schema_unref(sc);
    for (int i = 0; i < 100 && hits(&s, "/subjects/orders-value/versions/latest") < 2; i++)
        usleep(20 * 1000);
    assert_int_equal(hits(&s, "/subjects/orders-value/versions/latest"), 2);
    /* A numbered version; a subject the registry lacks; a malformed version. */
    assert_int_equal(ks_registry_get_version(r, "orders-value", "1", &wake, &sc, err, sizeof(err)),
                     KS_REG_PENDING);
    assert_true(wait_woken(&w, 2, 5000));
    assert_int_equal(ks_registry_get_version(r, "orders-value", "1", NULL, &sc, err, sizeof(err)),
                     KS_REG_OK);
    assert_int_equal(ks_schema_id(sc), 21);
    ks_schema_unref(sc);
    assert_int_equal(ks_registry_get_version(r, "nope", "1", &wake, &sc, err, sizeof(err)),
                     KS_REG_PENDING);
    assert_true(wait_woken(&w, 3, 5000));
    assert_int_equal(ks_registry_get_version(r, "nope", "1", NULL, &sc, err, sizeof(err)),
                     KS_REG_UNKNOWN);
    assert_contains(err, "Subject not found.");
    assert_int_equal(ks_registry_get_version(r, "orders-value", "0", NULL, &sc, err, sizeof(err)),
                     KS_REG_UNKNOWN);
    /* Registering: the id the registry gives, the text and type sent. */
    const char *text = "{\"type\":\"object\"}";
    assert_int_equal(ks_registry_register(r, "orders value/x", KS_SCHEMA_JSON, text, &wake, &sc,
                                          err, sizeof(err)),
                     KS_REG_PENDING);
    assert_true(wait_woken(&w, 4, 5000));
    assert_int_equal(ks_registry_register(r, "orders value/x", KS_SCHEMA_JSON, text, NULL, &sc, err,
                                          sizeof(err)),
                     KS_REG_OK);
    assert_int_equal(ks_schema_id(sc), 77);
    assert_int_equal(ks_schema_type(sc), KS_SCHEMA_JSON);
    assert_string_equal(ks_schema_text(sc, NULL), text);
    ks_schema_unref(sc);
    assert_int_equal(hits(&s, "/subjects/orders%20value%2Fx/versions"), 1);
    json_t *sent = json_loads(s.last_post, 0, NULL);
    assert_non_null(sent);
    assert_string_equal(json_string_value(json_object_get(sent, "schema")), text);
    assert_string_equal(json_string_value(json_object_get(sent, "schemaType")), "JSON");
    json_decref(sent);
    assert_int_equal(ks_registry_get(r, 77, NULL, &sc, err, sizeof(err)), KS_REG_OK);
    ks_schema_unref(sc);
    ks_registry_cancel(r, &w);
    ks_registry_free(r);
    server_stop(&s);
}

static void test_cancel(void **state)
{
    (void)state;
    server_t s;
    server_start(&s);
    s.delay_ms = 300;
    const char *urls[] = {s.url};
    ks_registry_conf_t c = {0};
    ks_registry_t *r = client(urls, 1, &c);
    ks_schema_t *sc;
    char err[512];
    waiter_t w1, w2;
    waiter_init(&w1);
    waiter_init(&w2);
    ks_registry_wake_t k1 = {on_wake, &w1}, k2 = {on_wake, &w2};
    assert_int_equal(ks_registry_get(r, 11, &k1, &sc, err, sizeof(err)), KS_REG_PENDING);
    assert_int_equal(ks_registry_get(r, 11, &k2, &sc, err, sizeof(err)), KS_REG_PENDING);
    ks_registry_cancel(r, &w1);
    assert_true(wait_woken(&w2, 1, 5000));
    usleep(50 * 1000);
    assert_int_equal(woken(&w1), 0);
    ks_registry_free(r);
    server_stop(&s);
}

static void test_new_refuses(void **state)
{
    (void)state;
    ks_registry_t *r = NULL;
    char err[512];
    const char *ftp[] = {"ftp://x"}, *ok[] = {"http://x"};
    ks_registry_conf_t c = {.urls = ftp, .url_cnt = 1};
    assert_int_equal(ks_registry_new(&c, &r, err, sizeof(err)), -1);
    assert_contains(err, "ftp://x");
    c = (ks_registry_conf_t){.urls = ok, .url_cnt = 0};
    assert_int_equal(ks_registry_new(&c, &r, err, sizeof(err)), -1);
    c = (ks_registry_conf_t){.urls = ok, .url_cnt = 1, .basic_auth = "nocolon"};
    assert_int_equal(ks_registry_new(&c, &r, err, sizeof(err)), -1);
    c = (ks_registry_conf_t){
        .urls = ok, .url_cnt = 1, .basic_auth = "a:b", .bearer_token_file = "/t"};
    assert_int_equal(ks_registry_new(&c, &r, err, sizeof(err)), -1);
    c = (ks_registry_conf_t){.urls = ok, .url_cnt = 1, .cert_file = "/c"};
    assert_int_equal(ks_registry_new(&c, &r, err, sizeof(err)), -1);
    assert_null(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fetch_and_cache_hit),
        cmocka_unit_test(test_bound_evicts),
        cmocka_unit_test(test_urls_in_turn),
        cmocka_unit_test(test_basic_auth),
        cmocka_unit_test(test_bearer_token_file_reread),
        cmocka_unit_test(test_timeout_backoff),
        cmocka_unit_test(test_backoff_doubles),
        cmocka_unit_test(test_404_remembered),
        cmocka_unit_test(test_subject_version_and_register),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_new_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
