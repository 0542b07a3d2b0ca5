/* push.h: push delivery, a group's records POSTed to the app's own endpoint (push.c). */
#ifndef KS_PUSH_H
#define KS_PUSH_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "engine.h"
#include "substream.h"

struct json_t; /* jansson's */

typedef struct ks_push ks_push_t;

/* Some static group has a push url, or push.allowed_urls lets an API call set one. */
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

/* Push set by API call, for a group that is not static (PUT, GET and DELETE
 * /v1/groups/{group}/push). Any thread; none blocks. */

/* Starts pushing group's topics as push (a JSON object: url, concurrency, timeout_ms, batch,
 * bearer_token, insecure, cloudevents) says. who: the caller, whose scopes the stream keeps
 * (a reload that removes them ends it); it must already be allowed the group and topics.
 * Refused (err names why): e NULL or push.allowed_urls empty or not a prefix of the url
 * (KS_E_PERMISSION), a static group or one that pushes already (KS_E_STALE), a bad field
 * (KS_E_INVALID). Not kept across a restart. */
ks_status_t ks_push_add(ks_push_t *e, const char *group, const char *const *topics,
                        size_t topic_cnt, struct json_t *push, const ks_principal_t *who, char *err,
                        size_t errsize);
/* group's push (set by API call or config) as JSON, or NULL when it has none. */
struct json_t *ks_push_describe(ks_push_t *e, const char *group);
/* Stops group's push set by API call: no new request; those in flight are answered and
 * settle, then it goes (GET answers 404). *out: what it was. KS_E_NOT_FOUND, or KS_E_STALE
 * for a static group's. */
ks_status_t ks_push_remove(ks_push_t *e, const char *group, struct json_t **out, char *err,
                           size_t errsize);

/* What the app's answer does to one record of a request. */
typedef enum {
    KS_PUSH_ACK = 0,
    KS_PUSH_RETRY,    /* nack: redelivered after the delay */
    KS_PUSH_TERMINAL, /* dead-letter at once (a 4xx, or DROP) */
} ks_push_verdict_t;

#endif
