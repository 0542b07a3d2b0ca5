/* main.c: the ksidecar daemon: config, listeners, signals, and an orderly shutdown. */
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "config.h"
#include "dev_cluster.h"
#include "engine.h"
#include "otel.h"
#include "auth.h"
#include "edges.h"
#include "codec.h"
#include "registry.h"
#include "schema_gate.h"
#include "file_watch.h"
#include "healthcheck.h"
#include "log.h"
#include "sd_notify.h"
#include "substream.h"

extern char **environ;

static void print_dev_banner(const ks_config_t *cfg, int http_port, int grpc_port)
{
    const char *host = "127.0.0.1";
    printf("\nksidecar dev mode is up: a mock Kafka cluster with topic '%s' "
           "(%d sample records/s).\n\n"
           "Fetch records (the first fetch joins the group; expect ~3 s for the first "
           "assignment):\n"
           "  curl -s 'http://%s:%d/v1/groups/demo-group/records?topic=%s&max=5&wait_ms=10000'\n\n"
           "Or stream them, one JSON line each as they are leased (an ack frees a credit):\n"
           "  curl -N 'http://%s:%d/v1/groups/demo-group/stream?topic=%s'\n\n"
           "Ack them (paste ack_id values from the fetch or the stream):\n"
           "  curl -s -X POST http://%s:%d/v1/groups/demo-group/acks "
           "-H 'Content-Type: application/json' -d '{\"ack_ids\":[\"ACK_ID\"]}'\n\n"
           "gRPC (ksidecar.v1.Consumer, health, reflection) on %s:%d:\n"
           "  grpcurl -plaintext %s:%d list\n\n"
           "Press Ctrl-C to stop.\n\n",
           cfg->dev_topic, cfg->dev_rate, host, http_port, cfg->dev_topic, host, http_port,
           cfg->dev_topic, host, http_port, host, grpc_port, host, grpc_port);
    fflush(stdout);
}

/* Raises the soft RLIMIT_NOFILE to the hard limit: every group costs sockets and
 * pipes, and every HTTP and gRPC connection one fd, and the soft default (often 1024)
 * ran out long before memory did. Logs the outcome; never fails the start. */
static void raise_nofile_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        ks_warn("main", "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        return;
    }
    rlim_t want = rl.rlim_max;
    if (want == RLIM_INFINITY) {
        /* The kernel refuses an infinite fd limit; fs.nr_open is the real ceiling. */
        want = 1048576;
        FILE *f = fopen("/proc/sys/fs/nr_open", "r");
        unsigned long long n;
        if (f && fscanf(f, "%llu", &n) == 1)
            want = (rlim_t)n;
        if (f)
            fclose(f);
    }
    if (rl.rlim_cur >= want)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        ks_warn("main", "cannot raise the open-files limit from %llu to %llu: %s",
                (unsigned long long)was, (unsigned long long)want, strerror(errno));
        return;
    }
    ks_info("main", "open-files limit raised from %llu to %llu", (unsigned long long)was,
            (unsigned long long)want);
}

/* Logs a failed notification of systemd (rc from ks_sd_notify*). */
static void notify_logged(int rc)
{
    if (rc < 0)
        ks_warn("main", "sd_notify to NOTIFY_SOCKET=%s: %s", getenv("NOTIFY_SOCKET"),
                strerror(errno));
}

/* Tells systemd (Type=notify) of a state change; outside systemd it does nothing. */
static void notify(const char *state)
{
    notify_logged(ks_sd_notify(state));
}

/* How often the credential files are looked at for a change (besides SIGHUP). */
#define CRED_CHECK_MS 2000

/* The files read again without a restart. */
typedef enum { CRED_TOKENS, CRED_CERT, CRED_KEY, CRED_CA, CRED_CNT } cred_file_t;

/* Reads the tokens file (auth) and the TLS files (tls) again, NULL for what is not to be
 * read; a bad one is refused with a log line naming the problem, and the one in force
 * stays. why says what asked for it. */
static void reload_credentials(const ks_config_t *cfg, ks_auth_t *auth, ks_tls_t *tls,
                               const char *why)
{
    char err[1024];
    if (tls) {
        if (ks_tls_reload(tls, err, sizeof(err)) < 0)
            ks_err("main", "%s: the new TLS files are refused, the previous ones stay: %s", why,
                   err);
        else
            ks_info("main", "%s: TLS files reloaded (tls.cert_file %s)", why, cfg->tls_cert_file);
    }
    if (auth) {
        if (ks_auth_reload(auth, cfg->auth_tokens_file, err, sizeof(err)) < 0)
            ks_err("main", "%s: the new tokens file is refused, the previous one stays: %s", why,
                   err);
        else
            ks_info("main",
                    "%s: tokens file %s reloaded (%zu tables: the one in force and those "
                    "requests and streams still hold)",
                    why, cfg->auth_tokens_file, ks_auth_tables(auth));
    }
}

/* Waits for SIGTERM or SIGINT and returns it; meanwhile reloads the credentials on SIGHUP
 * and when one of their files changes. */
static int serve_until_stopped(const ks_config_t *cfg, ks_auth_t *auth, ks_tls_t *tls,
                               const sigset_t *sigs)
{
    ks_file_watch_t w[CRED_CNT];
    ks_file_watch_init(&w[CRED_TOKENS], auth ? cfg->auth_tokens_file : NULL);
    ks_file_watch_init(&w[CRED_CERT], cfg->tls_cert_file);
    ks_file_watch_init(&w[CRED_KEY], cfg->tls_key_file);
    ks_file_watch_init(&w[CRED_CA], cfg->tls_client_ca_file);
    for (;;) {
        struct timespec tick = {CRED_CHECK_MS / 1000, (CRED_CHECK_MS % 1000) * 1000000L};
        int sig = sigtimedwait(sigs, NULL, &tick);
        if (sig == SIGHUP) {
            for (int i = 0; i < CRED_CNT; i++)
                ks_file_watch_changed(&w[i]); /* what SIGHUP reloads is not reloaded again */
            notify_logged(ks_sd_notify_reloading());
            reload_credentials(cfg, auth, tls, "SIGHUP");
            notify("READY=1");
        } else if (sig > 0) {
            return sig;
        } else {
            bool tokens = ks_file_watch_changed(&w[CRED_TOKENS]), certs = false;
            for (int i = CRED_CERT; i < CRED_CNT; i++)
                certs |= ks_file_watch_changed(&w[i]);
            if (tokens || certs)
                reload_credentials(cfg, tokens ? auth : NULL, certs ? tls : NULL,
                                   "a credential file changed");
        }
    }
}

/* The group loops' schema check (proxy/schema_gate.h) on the registry's cache: a lookup that
 * never waits; a fetch it starts calls wake on the registry's thread when it settles. */
static ks_gate_t registry_gate(void *ctx, int32_t id, void (*wake)(void *), void *wake_ctx,
                               char *err, size_t errsize)
{
    ks_schema_t *s = NULL;
    ks_registry_wake_t w = {.fn = wake, .ctx = wake_ctx};
    switch (ks_registry_get(ctx, id, wake ? &w : NULL, &s, err, errsize)) {
    case KS_REG_OK:
        ks_schema_unref(s);
        return KS_GATE_OK;
    case KS_REG_UNKNOWN:
        return KS_GATE_UNKNOWN;
    default:
        return KS_GATE_WAIT;
    }
}

static void registry_gate_cancel(void *ctx, void *wake_ctx)
{
    ks_registry_cancel(ctx, wake_ctx);
}

/* The registry closes after every edge and group: nothing looks up in it any more. With
 * destroyed false the engine is left running (a failed shutdown), so it stays. */
static void stop_registry(ks_registry_t *reg, bool destroyed)
{
    if (!reg || !destroyed)
        return;
    ks_schema_gate_set(NULL, NULL, NULL);
    ks_codec_set_registry(NULL);
    ks_registry_free(reg);
}

/* Shutdown of the edges: each stops taking new work, then each closes, last started first. */
static void stop_edges(void **edges)
{
    for (size_t i = 0; i < ks_edge_cnt; i++)
        if (edges[i] && ks_edges[i]->quiesce)
            ks_edges[i]->quiesce(edges[i]);
    for (size_t i = ks_edge_cnt; i-- > 0;)
        if (edges[i]) {
            ks_edges[i]->stop(edges[i]);
            edges[i] = NULL;
        }
}

/* glibc gives each thread that meets a locked arena a new one, up to 8 per core, and each
 * arena keeps what its threads freed (up to M_TRIM_THRESHOLD at its top, and whatever is
 * fragmented): at 10 groups of 8 partitions (70 threads) that was ~110 MB outside the
 * memory budget, at 32 groups ~300 MB. A fixed few arenas keep it small whatever the thread
 * count (tests/bench's many-groups rows, docs/operations.md). MALLOC_ARENA_MAX or
 * GLIBC_TUNABLES's glibc.malloc.arena_max in the environment win: glibc reads them itself. */
#define KS_MALLOC_ARENAS 4

static void set_arena_max(void)
{
    const char *t = getenv("GLIBC_TUNABLES");
    if (getenv("MALLOC_ARENA_MAX") || (t && strstr(t, "glibc.malloc.arena_max")))
        return;
    mallopt(M_ARENA_MAX, KS_MALLOC_ARENAS);
}

int main(int argc, char **argv)
{
    ks_config_t cfg;
    ks_config_action_t action;
    char err[1024];
    bool healthcheck = ks_healthcheck_wanted(&argc, argv);
    if (ks_config_from_args(&cfg, argc, argv, environ, &action, err, sizeof(err)) < 0) {
        fprintf(stderr, "ksidecar: %s\n", err);
        ks_config_free(&cfg);
        return healthcheck ? 1 : 2; /* a HEALTHCHECK's 2 is reserved */
    }
    switch (action) {
    case KS_CONFIG_HELP:
        ks_config_usage(stdout);
        printf("\n  --healthcheck              GET /healthz of the ksidecar this config describes "
               "(on http.health_listen,\n                             else http.listen) and exit "
               "0 on 200: a container's HEALTHCHECK\n");
        ks_config_free(&cfg);
        return 0;
    case KS_CONFIG_VERSION:
        printf("ksidecar %s (librdkafka %s)\n", KSIDECAR_VERSION, rd_kafka_version_str());
        ks_config_free(&cfg);
        return 0;
    case KS_CONFIG_PRINT: {
        char *s = ks_config_dump(&cfg);
        printf("%s\n", s);
        free(s);
        ks_config_free(&cfg);
        return 0;
    }
    case KS_CONFIG_RUN:
        if (healthcheck) {
            int hrc = ks_healthcheck(&cfg, 4000); /* within the Dockerfile's --timeout=5s */
            ks_config_free(&cfg);
            return hrc;
        }
        break;
    }
    if (ks_engine_check_kafka_conf(&cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "ksidecar: %s\n", err);
        ks_config_free(&cfg);
        return 2;
    }
    ks_log_setup(cfg.log_level, cfg.log_json);
    raise_nofile_limit();

    /* librdkafka frees each fetch response (up to ~1 MB a partition) once its records are
     * copied into the window; glibc's default trimming then handed those pages back and
     * faulted them in again for the next response (twice the page faults, 2M records). */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    set_arena_max();

    /* Signals go to a sigwait here, never to a worker thread. A shell starts background
     * jobs with SIGINT ignored, and sigwait never sees an ignored signal: take the
     * default disposition back first, so `kill -INT` stops a backgrounded ksidecar. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    ks_dev_t *dev = NULL;
    ks_engine_t *eng = NULL;
    ks_auth_t *auth = NULL;
    ks_tls_t *tls = NULL;
    ks_subhub_t *hub = NULL;
    ks_registry_t *reg = NULL;
    void *edges[KS_EDGE_MAX] = {0};
    if (cfg.dev) {
        char boot[256];
        dev = ks_dev_start(cfg.dev_topic, cfg.dev_partitions, cfg.dev_rate, boot, sizeof(boot), err,
                           sizeof(err));
        if (!dev)
            goto out_fail;
        if (ks_config_set(&cfg, "kafka.bootstrap.servers", boot, err, sizeof(err)) < 0)
            goto out_fail;
    }
    if (*cfg.auth_tokens_file && !(auth = ks_auth_load(cfg.auth_tokens_file, err, sizeof(err))))
        goto out_fail;
    if (*cfg.tls_cert_file && !(tls = ks_tls_load(&cfg, err, sizeof(err))))
        goto out_fail;
    if (cfg.schema_registry_url_cnt) {
        ks_registry_conf_t rc_conf;
        ks_registry_conf_from(&rc_conf, &cfg);
        if (ks_registry_new(&rc_conf, &reg, err, sizeof(err)) < 0)
            goto out_fail;
        ks_codec_set_registry(reg);
        ks_schema_gate_set(registry_gate, registry_gate_cancel, reg);
    }
    if (ks_otel_start(&cfg, environ, err, sizeof(err)) < 0)
        goto out_fail;
    eng = ks_engine_new(&cfg, err, sizeof(err));
    if (!eng)
        goto out_fail;
    if (ks_engine_start_static(eng, err, sizeof(err)) < 0)
        goto out_fail;
    if (!(hub = ks_subhub_new(eng, &cfg))) {
        snprintf(err, sizeof(err), "cannot start the stream sweep thread");
        goto out_fail;
    }
    if (auth)
        ks_subhub_watch_auth(hub, auth);
    ks_edge_env_t env = {.eng = eng, .cfg = &cfg, .auth = auth, .tls = tls, .hub = hub};
    for (size_t i = 0; i < ks_edge_cnt; i++)
        if (ks_edges[i]->wanted(&cfg)) {
            if (!(edges[i] = ks_edges[i]->start(&env, err, sizeof(err))))
                goto out_fail;
            if (ks_edges[i] == &ks_edge_push)
                env.push = edges[i];
        }
    ks_info("main", "ksidecar %s started (pid %d)", KSIDECAR_VERSION, (int)getpid());
    void *http = ks_edge_find(edges, &ks_edge_http), *grpc = ks_edge_find(edges, &ks_edge_grpc);
    if (cfg.dev && http)
        print_dev_banner(&cfg, ks_edge_http.port(http), grpc ? ks_edge_grpc.port(grpc) : 0);

    /* Ready for systemd once the edges listen: /healthz and /readyz then answer, and say
     * whether Kafka does. Waiting for Kafka here would make systemd fail the start (and
     * restart it in a loop) through a Kafka outage. */
    notify("READY=1\nSTATUS=listening");

    int sig = serve_until_stopped(&cfg, auth, tls, &sigs);
    notify("STOPPING=1");
    ks_info("main", "%s: stopping (grace %d ms)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            cfg.shutdown_grace_ms);

    /* 1. stop delivering (long-polls end, fetches are refused); 2. wait for outstanding
     * acks, which the edges still take; 3. commit and leave; 4. close the edges. */
    ks_engine_stop_delivering(eng);
    rc = ks_engine_shutdown(eng, cfg.shutdown_grace_ms) == 0 ? 0 : 1;
    ks_otel_stop(cfg.shutdown_grace_ms); /* the spans of the last acks are sent */
    stop_edges(edges);
    ks_subhub_free(hub);
    if (rc == 0)
        ks_engine_destroy(eng);
    stop_registry(reg, rc == 0);
    ks_dev_stop(dev);
    ks_auth_free(auth);
    ks_tls_free(tls);
    ks_info("main", "stopped");
    ks_config_free(&cfg);
    return rc;

out_fail:
    ks_err("main", "%s", err);
    stop_edges(edges);
    ks_subhub_free(hub);
    if (eng) {
        ks_engine_shutdown(eng, 1000);
        ks_engine_destroy(eng);
    }
    stop_registry(reg, true);
    ks_dev_stop(dev);
    ks_auth_free(auth);
    ks_tls_free(tls);
    ks_config_free(&cfg);
    return 1;
}
