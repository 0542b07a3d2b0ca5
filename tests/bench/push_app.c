/* push_app.c: the app of the push benchmark: a keep-alive HTTP server (libmicrohttpd) that
 * answers every POST 200 at once and counts the records it got; GET /stats tells the count
 * and the times of the first and last one, for bench.py's rate.
 *
 * usage: push_app PORT   (prints "listening PORT" once it does; SIGTERM or SIGINT stops it) */
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_llong records, requests, first_us, last_us;

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static enum MHD_Result reply(struct MHD_Connection *c, const char *text)
{
    char *copy = strdup(text); /* libmicrohttpd takes it and frees it */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(copy), copy, MHD_RESPMEM_MUST_FREE);
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* A POST's body is read and dropped; its records are 1, or ksidecar-batch of a batch. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **state)
{
    (void)cls, (void)url, (void)version, (void)data;
    if (!strcmp(method, "GET")) {
        char out[160];
        snprintf(out, sizeof(out),
                 "{\"records\":%lld,\"requests\":%lld,\"first_us\":%lld,\"last_us\":%lld}\n",
                 atomic_load(&records), atomic_load(&requests), atomic_load(&first_us),
                 atomic_load(&last_us));
        return reply(c, out);
    }
    if (!*state) { /* the headers: the body follows */
        *state = c;
        return MHD_YES;
    }
    if (*size) {
        *size = 0;
        return MHD_YES;
    }
    const char *b = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "ksidecar-batch");
    long long n = b ? atoll(b) : 1, t = now_us(), zero = 0;
    atomic_compare_exchange_strong(&first_us, &zero, t);
    atomic_fetch_add(&records, n);
    atomic_fetch_add(&requests, 1);
    atomic_store(&last_us, t);
    return reply(c, "");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: push_app PORT\n");
        return 2;
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    /* One epoll thread: the app's own work is nothing, as the benchmark wants. */
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)atoi(argv[1]),
                         NULL, NULL, handle, NULL, MHD_OPTION_CONNECTION_LIMIT, 4096u,
                         MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "push_app: cannot listen on %s\n", argv[1]);
        return 1;
    }
    printf("listening %s\n", argv[1]);
    fflush(stdout);
    int sig;
    sigwait(&sigs, &sig);
    MHD_stop_daemon(d);
    return 0;
}
