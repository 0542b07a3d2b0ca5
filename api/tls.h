/* tls.h: the TLS certificate, key and client CA both edges serve, read again without a restart. */
#ifndef KS_TLS_H
#define KS_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef struct ks_tls ks_tls_t;

/* One reading of the files, as PEM text. Refcounted: ks_tls_get hands out a reference. */
typedef struct ks_tls_pem {
    char *cert, *key;
    char *ca;     /* NULL: no tls.client_ca_file */
    uint64_t gen; /* 1 for the first reading, one more for each reload */
    int refs;     /* guarded by the ks_tls_t's lock */
} ks_tls_pem_t;

/* Reads and checks tls.cert_file, tls.key_file and tls.client_ca_file (cfg, borrowed for the
 * object's life). Returns NULL with err naming the key and the problem. */
ks_tls_t *ks_tls_load(const ks_config_t *cfg, char *err, size_t errsize);

/* Reads the files again; when the certificate, its key and the CA parse and the key matches
 * the certificate, they serve every handshake from now on. Otherwise returns -1 with err and
 * the files in force stay. Any thread. */
int ks_tls_reload(ks_tls_t *t, char *err, size_t errsize);

/* The reading in force, with a reference the caller drops with ks_tls_put. Any thread. */
ks_tls_pem_t *ks_tls_get(ks_tls_t *t);
void ks_tls_put(ks_tls_t *t, ks_tls_pem_t *p);

/* After every edge has stopped. */
void ks_tls_free(ks_tls_t *t);

#endif
