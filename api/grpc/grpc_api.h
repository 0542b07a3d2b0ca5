/* grpc_api.h: the gRPC edge on grpc core's C API: Consumer, Producer, health, reflection. */
#ifndef KS_GRPC_API_H
#define KS_GRPC_API_H

#include <stddef.h>

#include "auth.h"
#include "config.h"
#include "engine.h"
#include "substream.h"
#include "tls.h"

typedef struct ks_grpc ks_grpc_t;

/* Listens on cfg->grpc_listen (TLS with tls's files, each new handshake with the reading in
 * force) and serves from cfg->grpc_threads completion-queue threads. eng, cfg, auth (NULL: no
 * auth), tls (NULL: plaintext) and hub (where Subscribe streams are cut off when they stall)
 * are borrowed. Returns NULL with err. */
ks_grpc_t *ks_grpc_start(ks_engine_t *eng, const ks_config_t *cfg, const ks_auth_t *auth,
                         ks_tls_t *tls, ks_subhub_t *hub, char *err, size_t errsize);

int ks_grpc_port(const ks_grpc_t *g);

/* Ends every stream (their leases go back), stops the server and frees g. */
void ks_grpc_stop(ks_grpc_t *g);

#endif
