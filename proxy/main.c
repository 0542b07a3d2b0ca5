/* main.c: the ksidecar daemon: config, listeners, signals, and an orderly shutdown. */
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "dev_cluster.h"
#include "engine.h"
#include "group_loop.h"
#include "http_api.h"
#include "log.h"

extern char **environ;

static void print_dev_banner(const ks_config_t *cfg, int http_port)
{
    const char *host = "127.0.0.1";
    printf("\nksidecar dev mode is up: a mock Kafka cluster with topic '%s' "
           "(%d sample records/s).\n\n"
           "Fetch records (the first fetch joins the group; expect ~3 s for the first "
           "assignment):\n"
           "  curl -s 'http://%s:%d/v1/groups/demo-group/records?topic=%s&max=5&wait_ms=10000'\n\n"
           "Ack them (paste ack_id values from the fetch):\n"
           "  curl -s -X POST http://%s:%d/v1/groups/demo-group/acks "
           "-H 'Content-Type: application/json' -d '{\"ack_ids\":[\"ACK_ID\"]}'\n\n"
           "Press Ctrl-C to stop.\n\n",
           cfg->dev_topic, cfg->dev_rate, host, http_port, cfg->dev_topic, host, http_port);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    ks_config_t cfg;
    ks_config_action_t action;
    char err[1024];
    if (ks_config_from_args(&cfg, argc, argv, environ, &action, err, sizeof(err)) < 0) {
        fprintf(stderr, "ksidecar: %s\n", err);
        ks_config_free(&cfg);
        return 2;
    }
    switch (action) {
    case KS_CONFIG_HELP:
        ks_config_usage(stdout);
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
        break;
    }
    if (ks_group_check_kafka_conf(&cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "ksidecar: %s\n", err);
        ks_config_free(&cfg);
        return 2;
    }
    ks_log_setup(cfg.log_level, cfg.log_json);

    /* Signals go to a sigwait here, never to a worker thread. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    ks_dev_t *dev = NULL;
    ks_engine_t *eng = NULL;
    ks_http_t *http = NULL;
    if (cfg.dev) {
        char boot[256];
        dev = ks_dev_start(cfg.dev_topic, cfg.dev_partitions, cfg.dev_rate, boot, sizeof(boot), err,
                           sizeof(err));
        if (!dev)
            goto out_fail;
        if (ks_config_set(&cfg, "kafka.bootstrap.servers", boot, err, sizeof(err)) < 0)
            goto out_fail;
    }
    eng = ks_engine_new(&cfg, err, sizeof(err));
    if (!eng)
        goto out_fail;
    if (ks_engine_start_static(eng, err, sizeof(err)) < 0)
        goto out_fail;
    if (*cfg.http_listen) {
        http = ks_http_start(eng, &cfg, err, sizeof(err));
        if (!http)
            goto out_fail;
    }
    ks_info("main", "ksidecar %s started (pid %d)", KSIDECAR_VERSION, (int)getpid());
    if (cfg.dev && http)
        print_dev_banner(&cfg, ks_http_port(http));

    int sig = 0;
    sigwait(&sigs, &sig);
    ks_info("main", "%s: stopping (grace %d ms)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            cfg.shutdown_grace_ms);

    /* 1. stop delivering (long-polls end, fetches are refused); 2. wait for outstanding
     * acks, which HTTP still takes; 3. commit and leave; 4. close the listeners. */
    ks_engine_stop_delivering(eng);
    rc = ks_engine_shutdown(eng, cfg.shutdown_grace_ms) == 0 ? 0 : 1;
    if (http)
        ks_http_quiesce(http);
    ks_http_stop(http);
    if (rc == 0)
        ks_engine_destroy(eng);
    ks_dev_stop(dev);
    ks_info("main", "stopped");
    ks_config_free(&cfg);
    return rc;

out_fail:
    ks_err("main", "%s", err);
    ks_http_stop(http);
    if (eng) {
        ks_engine_shutdown(eng, 1000);
        ks_engine_destroy(eng);
    }
    ks_dev_stop(dev);
    ks_config_free(&cfg);
    return 1;
}
