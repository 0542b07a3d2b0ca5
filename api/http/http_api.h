/* http_api.h: the HTTP/JSON edge (libmicrohttpd + jansson) over the engine's commands. */
#ifndef KS_HTTP_API_H
#define KS_HTTP_API_H

#include <stddef.h>

#include "auth.h"
#include "config.h"
#include "engine.h"
#include "substream.h"
#include "tls.h"

#include "push_ctl.h"

typedef struct ks_http ks_http_t;

/* Listens on cfg->http_listen ("host:port", port 0 picks one) and serves requests
 * from libmicrohttpd's threads, over TLS when tls is not NULL (each new handshake with the
 * reading of the TLS files in force), checking bearer tokens when auth is not NULL; with
 * cfg->http_health_listen, also serves /healthz, /readyz and /metrics there (plain HTTP, no
 * caller check, its own thread and bounds). Connection bounds, deadlines and the long-poll
 * bound come from cfg's http.* keys. Record streams (GET .../stream) run on hub, the
 * subscriber-stream core's (NULL: none served). A push set by API call (/v1/groups/{g}/push)
 * goes to push (NULL: refused). eng, cfg, auth, tls, hub and push are borrowed. Returns NULL
 * with err. */
ks_http_t *ks_http_start(ks_engine_t *eng, const ks_config_t *cfg, const ks_auth_t *auth,
                         ks_tls_t *tls, ks_subhub_t *hub, const ks_push_ctl_t *push, char *err,
                         size_t errsize);

/* The bound port. */
int ks_http_port(const ks_http_t *h);

/* Stops accepting API connections; requests already in progress go on, and the probe
 * listener keeps answering until ks_http_stop. */
void ks_http_quiesce(ks_http_t *h);

/* Closes every connection and frees h. Call after the engine has answered every
 * fetch it accepted (ks_engine_stop_delivering) so no long-poll is left waiting. */
void ks_http_stop(ks_http_t *h);

#endif
