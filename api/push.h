/* push.h: push delivery, a group's records POSTed to the app's own endpoint (push.c). */
#ifndef KS_PUSH_H
#define KS_PUSH_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "engine.h"
#include "substream.h"

typedef struct ks_push ks_push_t;

/* Some static group has a push url. */
bool ks_push_wanted(const ks_config_t *cfg);

/* Starts the push thread (libcurl's multi interface) and one subscriber stream for each
 * static group with a push url, on hub. eng, cfg and hub are borrowed. Returns NULL with err. */
ks_push_t *ks_push_start(ks_engine_t *eng, const ks_config_t *cfg, ks_subhub_t *hub, char *err,
                         size_t errsize);

/* Shutdown, step 1: no more records are fetched; requests in flight go on and settle. */
void ks_push_quiesce(ks_push_t *e);

/* Shutdown, step 2: ends the requests still in flight (their records go back), stops the
 * thread and frees e. */
void ks_push_stop(ks_push_t *e);

/* What the app's answer does to one record of a request. */
typedef enum {
    KS_PUSH_ACK = 0,
    KS_PUSH_RETRY,    /* nack: redelivered after the delay */
    KS_PUSH_TERMINAL, /* dead-letter at once (a 4xx, or DROP) */
} ks_push_verdict_t;

#endif
