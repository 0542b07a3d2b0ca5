/* edges.h: every edge (transport) as main sees it: started, quiesced and stopped through the
 * same calls, from one table. A new edge is one row in ks_edges (edges.c). */
#ifndef KS_EDGES_H
#define KS_EDGES_H

#include <stdbool.h>
#include <stddef.h>

#include "auth.h"
#include "config.h"
#include "engine.h"
#include "substream.h"
#include "tls.h"

/* What every edge is started with, all borrowed for its life. */
typedef struct ks_edge_env {
    ks_engine_t *eng;
    const ks_config_t *cfg;
    const ks_auth_t *auth; /* NULL: no bearer tokens */
    ks_tls_t *tls;         /* NULL: plaintext; reloaded by main */
    ks_subhub_t *hub;      /* every subscriber stream, and the stall sweep */
    struct ks_push *push;  /* the push edge once started (it starts first), else NULL */
} ks_edge_env_t;

typedef struct ks_edge_kind {
    const char *name; /* "http", "grpc", for logs */
    /* The config asks for this edge (its listen key is set). */
    bool (*wanted)(const ks_config_t *cfg);
    /* Starts serving; NULL with err on failure. */
    void *(*start)(const ks_edge_env_t *env, char *err, size_t errsize);
    /* The bound port (0 when it has none). */
    int (*port)(const void *edge);
    /* Shutdown, step 1: takes no new work; what is in progress goes on (NULL: nothing to do). */
    void (*quiesce)(void *edge);
    /* Shutdown, step 2: ends every connection (streams give their leases back) and frees the
     * edge. Called after the engine stopped delivering. */
    void (*stop)(void *edge);
} ks_edge_kind_t;

/* The most edges there may be (main keeps one slot each). */
#define KS_EDGE_MAX 8

/* The edges, in the order they start; they stop in the reverse order. */
extern const ks_edge_kind_t *const ks_edges[];
extern const size_t ks_edge_cnt;

/* The running edge of kind k in edges[] (ks_edges' order), or NULL. */
void *ks_edge_find(void *const *edges, const ks_edge_kind_t *k);

extern const ks_edge_kind_t ks_edge_http, ks_edge_grpc, ks_edge_push;

#endif
