/* http_tls.c: the HTTP edge's TLS through gnutls: the certificate each handshake gets, from the
 * reading of the TLS files in force, and the client certificate checked against the client CA
 * in force. */
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_tls.h"
#include "log.h"

#define LOGC      "http"
#define CHAIN_MAX 16 /* certificates of a chain served or checked */

/* What one reading of the TLS files becomes for gnutls, made when the first handshake after
 * a reload asks. Kept until the edge stops: a session begun with an older one may still
 * point at its certificate and key. */
typedef struct served {
    uint64_t gen;
    gnutls_pcert_st pcert[CHAIN_MAX];
    unsigned pcert_cnt;
    gnutls_privkey_t key;
    gnutls_x509_trust_list_t trust; /* the client CA (NULL: none) */
    struct served *older;
} served_t;

struct http_tls {
    ks_tls_t *tls;
    ks_tls_pem_t *first; /* the reading at start: its CA is the server's, while it runs */
    bool mtls;           /* clients must present a certificate (tls.client_ca_file) */
};

/* gnutls's certificate callback carries no user pointer: the one edge's state. */
static ks_tls_t *cur_tls;
static pthread_mutex_t served_lock = PTHREAD_MUTEX_INITIALIZER; /* guards served */
static served_t *served;

static void served_free(served_t *s)
{
    for (unsigned i = 0; i < s->pcert_cnt; i++)
        gnutls_pcert_deinit(&s->pcert[i]);
    if (s->key)
        gnutls_privkey_deinit(s->key);
    if (s->trust)
        gnutls_x509_trust_list_deinit(s->trust, 1);
    free(s);
}

/* p's certificate chain, key and CA for gnutls, or NULL (logged; tls.c checked them with
 * OpenSSL, so this is not expected). */
static served_t *served_make(const ks_tls_pem_t *p)
{
    served_t *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->gen = p->gen;
    gnutls_datum_t cert = {(unsigned char *)p->cert, (unsigned)strlen(p->cert)};
    gnutls_datum_t key = {(unsigned char *)p->key, (unsigned)strlen(p->key)};
    s->pcert_cnt = CHAIN_MAX;
    int rc =
        gnutls_pcert_list_import_x509_raw(s->pcert, &s->pcert_cnt, &cert, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0) {
        s->pcert_cnt = 0;
        goto fail;
    }
    if ((rc = gnutls_privkey_init(&s->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(s->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0)
        goto fail;
    if (p->ca) {
        gnutls_datum_t ca = {(unsigned char *)p->ca, (unsigned)strlen(p->ca)};
        if ((rc = gnutls_x509_trust_list_init(&s->trust, 0)) < 0 ||
            (rc = gnutls_x509_trust_list_add_trust_mem(s->trust, &ca, NULL, GNUTLS_X509_FMT_PEM, 0,
                                                       0)) < 0)
            goto fail;
    }
    return s;
fail:
    ks_err(LOGC,
           "the TLS files of reading %llu do not load into gnutls (%s); handshakes keep "
           "the previous ones",
           (unsigned long long)p->gen, gnutls_strerror(rc));
    served_free(s);
    return NULL;
}

/* The reading in force as gnutls objects (NULL before any could be made). Caller holds
 * served_lock. */
static served_t *served_now_locked(void)
{
    ks_tls_pem_t *p = ks_tls_get(cur_tls);
    if (!served || served->gen != p->gen) {
        served_t *s = served_make(p);
        if (s) {
            s->older = served;
            served = s;
            if (s->gen > 1)
                ks_info(LOGC, "new handshakes use the reloaded TLS files");
        }
    }
    ks_tls_put(cur_tls, p);
    return served;
}

int http_tls_pick_cert(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                       const gnutls_pk_algorithm_t *algos, int nalgos, gnutls_pcert_st **pcert,
                       unsigned int *pcert_len, gnutls_privkey_t *key)
{
    pthread_mutex_lock(&served_lock);
    served_t *s = served_now_locked();
    if (s) {
        *pcert = s->pcert;
        *pcert_len = s->pcert_cnt;
        *key = s->key;
    }
    pthread_mutex_unlock(&served_lock);
    return s ? 0 : -1;
}

http_tls_t *http_tls_new(ks_tls_t *tls)
{
    http_tls_t *t = calloc(1, sizeof(*t));
    if (!t)
        abort();
    t->tls = cur_tls = tls;
    t->first = ks_tls_get(tls);
    t->mtls = t->first->ca != NULL;
    return t;
}

const char *http_tls_client_ca(const http_tls_t *t)
{
    /* The CA at start makes the server ask for a client certificate; the check itself
     * (http_tls_peer_ok) is against the CA in force. */
    return t->mtls ? t->first->ca : NULL;
}

void http_tls_free(http_tls_t *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&served_lock);
    while (served) {
        served_t *older = served->older;
        served_free(served);
        served = older;
    }
    cur_tls = NULL;
    pthread_mutex_unlock(&served_lock);
    ks_tls_put(t->tls, t->first);
    free(t);
}

const char *http_tls_subject(http_tls_t *t, gnutls_session_t tls, char *buf, size_t size)
{
    if (!t || !t->mtls || !tls)
        return NULL;
    unsigned int n = 0;
    const gnutls_datum_t *certs = gnutls_certificate_get_peers(tls, &n);
    gnutls_x509_crt_t crt;
    if (!certs || n == 0 || gnutls_x509_crt_init(&crt) < 0)
        return NULL;
    const char *out = NULL;
    gnutls_datum_t dn = {NULL, 0};
    if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) == 0 &&
        gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0 && dn.size < size) {
        memcpy(buf, dn.data, dn.size);
        buf[dn.size] = '\0';
        out = buf;
    }
    gnutls_free(dn.data);
    gnutls_x509_crt_deinit(crt);
    return out;
}

bool http_tls_peer_ok(http_tls_t *t, gnutls_session_t tls)
{
    if (!t || !t->mtls)
        return true;
    if (!tls)
        return false;
    unsigned int n = 0;
    const gnutls_datum_t *peers = gnutls_certificate_get_peers(tls, &n);
    if (!peers || n == 0)
        return false;
    if (n > CHAIN_MAX)
        n = CHAIN_MAX;
    gnutls_x509_crt_t chain[CHAIN_MAX];
    unsigned got = 0;
    bool ok = true;
    while (ok && got < n) {
        if (gnutls_x509_crt_init(&chain[got]) < 0) {
            ok = false;
            break;
        }
        got++;
        ok = gnutls_x509_crt_import(chain[got - 1], &peers[got - 1], GNUTLS_X509_FMT_DER) == 0;
    }
    unsigned int status = 1;
    pthread_mutex_lock(&served_lock);
    served_t *s = served_now_locked();
    if (ok && s && s->trust &&
        gnutls_x509_trust_list_verify_crt(s->trust, chain, got, 0, &status, NULL) < 0)
        status = 1;
    pthread_mutex_unlock(&served_lock);
    for (unsigned i = 0; i < got; i++)
        gnutls_x509_crt_deinit(chain[i]);
    return ok && status == 0;
}
