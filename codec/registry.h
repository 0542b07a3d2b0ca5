/* registry.h: the schema registry client (the Confluent Schema Registry API, which Apicurio's
 * ccompat API also speaks) and the schemas it serves, for the schema formats of the record
 * codec.
 *
 * Threads. A registry has a thread of its own that makes every request (libcurl's multi
 * interface). Callers, an edge's threads, never wait for the network: ks_registry_get() and its
 * siblings answer from the cache at once, or say the answer is pending and call a wake function
 * when it is in. A group loop only asks ks_registry_get whether a schema is cached (through
 * proxy/schema_gate.h: a lookup under the cache's lock, never the network); the decoding runs on
 * the edges. Each function below may be called from any thread unless it says otherwise.
 *
 * Ownership. A schema is reference-counted and immutable once made (but for the parsed form a
 * decoder keeps in it, made once); a caller holds its references with ks_schema_ref/unref. */
#ifndef KS_REGISTRY_H
#define KS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schema.h"

struct ks_config;

/* ---- the registry client ---- */

typedef struct ks_registry ks_registry_t;

/* A registry's settings; strings are copied by ks_registry_new. */
typedef struct ks_registry_conf {
    const char *const *urls; /* base URLs (…/apis/ccompat/v7), tried in turn */
    size_t url_cnt;
    const char *basic_auth;        /* "user:password", or NULL/"" */
    const char *bearer_token_file; /* a bearer token, re-read when it changes; or NULL/"" */
    const char *ca_file;           /* PEM CA for https; NULL/"": the system's */
    const char *cert_file;         /* PEM client certificate (mTLS), with key_file */
    const char *key_file;
    int timeout_ms;     /* one request to one URL, connecting included */
    int cache_max;      /* entries kept: schemas and remembered failures */
    bool auto_register; /* produce may register schemas (ks_registry_register's callers' rule) */
    /* Not config keys; 0 takes the default. Tests shorten them. */
    int backoff_ms;     /* after a failed fetch, the next waits this long, doubling (1000) */
    int backoff_max_ms; /* up to this (60000) */
    int unknown_ms;     /* a schema the registry said it lacks is believed missing this long
                         * (300000) */
    int latest_ms;      /* a subject's "latest" version is kept this long (30000) */
} ks_registry_conf_t;

/* conf from the process config's schema_registry.* keys (borrowing its strings). */
void ks_registry_conf_from(ks_registry_conf_t *conf, const struct ks_config *cfg);

/* Starts a registry client and its thread. Returns 0 and *out, or -1 with err (no URL, a
 * URL that is not http(s), basic auth without ':', both basic auth and a bearer token file,
 * a certificate without its key, libcurl or the thread not starting). */
int ks_registry_new(const ks_registry_conf_t *conf, ks_registry_t **out, char *err, size_t errsize);

/* Stops the thread (requests in flight are dropped) and frees r and its cache; schemas
 * callers still hold stay valid. Wakes still registered are not called: stop every caller
 * first. Not from a wake function. */
void ks_registry_free(ks_registry_t *r);

/* Called once when what a lookup waits for is settled (fetched, or failed): the caller then
 * looks up again. It runs on the registry's thread and must only wake the caller's own
 * thread (store, signal): never call back into the registry or block. */
typedef struct ks_registry_wake {
    void (*fn)(void *ctx);
    void *ctx;
} ks_registry_wake_t;

/* What a lookup found. */
typedef enum ks_registry_status {
    KS_REG_OK = 0,      /* *out holds a new reference */
    KS_REG_PENDING,     /* being fetched: the wake, if given, is called when it settles */
    KS_REG_UNAVAILABLE, /* the last fetch failed (err says why; the registry is down, slow or
                         * refusing us). With a wake, a retry is made after its backoff and
                         * the wake called when it settles; without one, nothing is fetched
                         * until the backoff is over */
    KS_REG_UNKNOWN,     /* the registry has no such schema, subject or version, or refused to
                         * register one (err says which); believed for conf.unknown_ms */
} ks_registry_status_t;

/* "ok", "pending", "unavailable", "unknown". */
const char *ks_registry_status_str(ks_registry_status_t st);

/* The schema with id (GET /schemas/ids/{id}). Never blocks: a cached schema is returned at
 * once; anything else starts (or joins) a fetch on the registry's thread. A wake (NULL: none)
 * is registered for PENDING and UNAVAILABLE, once per (id, wake->ctx): a caller that asks
 * again for the same id while it waits is not registered twice. err gets the reason of
 * UNAVAILABLE and UNKNOWN. */
ks_registry_status_t ks_registry_get(ks_registry_t *r, int32_t id, const ks_registry_wake_t *wake,
                                     ks_schema_t **out, char *err, size_t errsize);

/* The schema of subject's version (GET /subjects/{subject}/versions/{version}): version is a
 * number or "latest". A numbered version is kept like an id; "latest" for conf.latest_ms, then
 * refetched while the one kept is still returned. As ks_registry_get otherwise; the schema
 * found is also cached under its id. */
ks_registry_status_t ks_registry_get_version(ks_registry_t *r, const char *subject,
                                             const char *version, const ks_registry_wake_t *wake,
                                             ks_schema_t **out, char *err, size_t errsize);

/* Registers text as a schema of type under subject (POST /subjects/{subject}/versions), or
 * finds the id it already has there; the schema returned carries that id. Only when
 * auto-registering is on (the caller's rule). As ks_registry_get otherwise; a schema the
 * registry refuses (invalid, incompatible) is UNKNOWN with its reason. */
ks_registry_status_t ks_registry_register(ks_registry_t *r, const char *subject,
                                          ks_schema_type_t type, const char *text,
                                          const ks_registry_wake_t *wake, ks_schema_t **out,
                                          char *err, size_t errsize);

/* conf.auto_register: whether produce may register schemas. */
bool ks_registry_auto_register(const ks_registry_t *r);

/* Forgets every wake registered with ctx. When it returns, fn(ctx) is not running and will
 * not run for them. Not from a wake function. */
void ks_registry_cancel(ks_registry_t *r, void *ctx);

/* Counters, for tests and metrics. */
typedef struct ks_registry_stats {
    uint64_t hits;      /* lookups answered from the cache */
    uint64_t requests;  /* HTTP requests made (each URL tried counts) */
    uint64_t failures;  /* fetches that failed on every URL */
    uint64_t evictions; /* entries dropped for cache_max */
    size_t entries;     /* entries cached now */
} ks_registry_stats_t;

void ks_registry_stats(ks_registry_t *r, ks_registry_stats_t *st);

#endif
