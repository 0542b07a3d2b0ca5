/* ksregistry.c: test helper: the schema registry client and the Avro decoder from a shell, for
 * the tests against a real registry (tests/registry/).
 *
 *   ksregistry URL get ID            prints {"id":ID,"type":"AVRO","schema":"..."}
 *   ksregistry URL decode [plain]    reads one value in the wire format on stdin, fetches its
 *                                    schema by id, prints the value as JSON (Avro's encoding,
 *                                    or plain)
 *
 * Asks as an edge would: a lookup that is pending waits for the registry's wake, at most 10 s.
 * Exits 0, or 1 with the reason on stderr (unknown id, registry unavailable, bytes that do not
 * decode). */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "avro_json.h"
#include "registry.h"

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
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* The schema with id, waiting for the registry while it is pending. */
static ks_schema_t *fetch(ks_registry_t *r, int32_t id)
{
    waiter_t w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    ks_registry_wake_t wake = {on_wake, &w};
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    char err[512] = "";
    ks_schema_t *s = NULL;
    for (;;) {
        pthread_mutex_lock(&w.lock);
        int seen = w.woken;
        pthread_mutex_unlock(&w.lock);
        ks_registry_status_t st = ks_registry_get(r, id, &wake, &s, err, sizeof(err));
        if (st == KS_REG_OK)
            break;
        if (st != KS_REG_PENDING) {
            fprintf(stderr, "ksregistry: schema %d: %s: %s\n", (int)id, ks_registry_status_str(st),
                    err);
            break;
        }
        pthread_mutex_lock(&w.lock);
        int rc = 0;
        while (w.woken == seen && rc == 0)
            rc = pthread_cond_timedwait(&w.cond, &w.lock, &until);
        pthread_mutex_unlock(&w.lock);
        if (rc) {
            fprintf(stderr, "ksregistry: schema %d: no answer in 10 s\n", (int)id);
            break;
        }
    }
    ks_registry_cancel(r, &w);
    return s;
}

static char *read_stdin(size_t *len)
{
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    if (!buf)
        abort();
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap && !(buf = realloc(buf, cap *= 2)))
            abort();
    }
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[2], "get") && strcmp(argv[2], "decode")) ||
        (!strcmp(argv[2], "get") && argc != 4)) {
        fprintf(stderr, "usage: ksregistry URL get ID | ksregistry URL decode [plain] < value\n");
        return 2;
    }
    const char *urls[] = {argv[1]};
    ks_registry_conf_t c = {.urls = urls, .url_cnt = 1, .timeout_ms = 5000};
    ks_registry_t *r = NULL;
    char err[512];
    if (ks_registry_new(&c, &r, err, sizeof(err))) {
        fprintf(stderr, "ksregistry: %s\n", err);
        return 1;
    }
    int rc = 1;
    if (!strcmp(argv[2], "get")) {
        ks_schema_t *s = fetch(r, (int32_t)atoi(argv[3]));
        if (s) {
            json_t *j =
                json_pack("{s:i,s:s,s:s}", "id", (int)ks_schema_id(s), "type",
                          ks_schema_type_str(ks_schema_type(s)), "schema", ks_schema_text(s, NULL));
            char *out = json_dumps(j, JSON_COMPACT);
            puts(out);
            free(out);
            json_decref(j);
            ks_schema_unref(s);
            rc = 0;
        }
    } else {
        size_t len;
        char *in = read_stdin(&len);
        int32_t id;
        const void *body;
        size_t body_len;
        ks_schema_t *s = NULL;
        if (ks_wire_split(in, len, &id, &body, &body_len, err, sizeof(err)))
            fprintf(stderr, "ksregistry: %s\n", err);
        else
            s = fetch(r, id);
        if (s) {
            ks_jbuf_t b;
            ks_jbuf_init(&b, 256);
            ks_avro_form_t form =
                argc > 3 && !strcmp(argv[3], "plain") ? KS_AVRO_JSON_PLAIN : KS_AVRO_JSON_AVRO;
            if (ks_avro_wire_json(s, in, len, form, &b, err, sizeof(err))) {
                fprintf(stderr, "ksregistry: %s\n", err);
            } else {
                puts(b.p);
                rc = 0;
            }
            ks_jbuf_free(&b);
            ks_schema_unref(s);
        }
        free(in);
    }
    ks_registry_free(r);
    return rc;
}
