/* tls.c: reads and checks the TLS files with OpenSSL before they replace the ones in force. */
#include "tls.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct ks_tls {
    const ks_config_t *cfg;
    pthread_mutex_t lock; /* guards cur and every reading's refs */
    ks_tls_pem_t *cur;
};

static void pem_free(ks_tls_pem_t *p)
{
    if (!p)
        return;
    free(p->cert);
    free(p->key);
    free(p->ca);
    free(p);
}

/* The file of config key `key` as text, or NULL with err. */
static char *read_key_file(const char *key, const char *path, char *err, size_t errsize)
{
    errno = 0;
    char *text = ks_read_file(path);
    if (!text)
        snprintf(err, errsize, "config key '%s': %s: %s", key, path,
                 errno ? strerror(errno) : "cannot read it");
    return text;
}

/* Checks that text holds a PEM certificate (the first of a chain); NULL: ok, else why. */
static const char *check_cert(const char *text, X509 **out)
{
    BIO *b = BIO_new_mem_buf(text, -1);
    X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    ERR_clear_error();
    if (!x)
        return "no PEM certificate in it";
    if (out)
        *out = x;
    else
        X509_free(x);
    return NULL;
}

/* Reads and checks the three files into a new reading, or NULL with err. */
static ks_tls_pem_t *read_all(const ks_config_t *cfg, char *err, size_t errsize)
{
    ks_tls_pem_t *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    X509 *x = NULL;
    EVP_PKEY *k = NULL;
    const char *why;
    if (!(p->cert = read_key_file("tls.cert_file", cfg->tls_cert_file, err, errsize)) ||
        !(p->key = read_key_file("tls.key_file", cfg->tls_key_file, err, errsize)) ||
        (*cfg->tls_client_ca_file &&
         !(p->ca = read_key_file("tls.client_ca_file", cfg->tls_client_ca_file, err, errsize))))
        goto fail;
    if ((why = check_cert(p->cert, &x))) {
        snprintf(err, errsize, "config key 'tls.cert_file': %s: %s", cfg->tls_cert_file, why);
        goto fail;
    }
    BIO *b = BIO_new_mem_buf(p->key, -1);
    k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    ERR_clear_error();
    if (!k) {
        snprintf(err, errsize, "config key 'tls.key_file': %s: no PEM private key in it",
                 cfg->tls_key_file);
        goto fail;
    }
    if (X509_check_private_key(x, k) != 1) {
        ERR_clear_error();
        snprintf(err, errsize,
                 "config key 'tls.key_file': %s is not the key of the certificate in %s",
                 cfg->tls_key_file, cfg->tls_cert_file);
        goto fail;
    }
    if (p->ca && (why = check_cert(p->ca, NULL))) {
        snprintf(err, errsize, "config key 'tls.client_ca_file': %s: %s", cfg->tls_client_ca_file,
                 why);
        goto fail;
    }
    X509_free(x);
    EVP_PKEY_free(k);
    return p;
fail:
    X509_free(x);
    EVP_PKEY_free(k);
    pem_free(p);
    return NULL;
}

ks_tls_t *ks_tls_load(const ks_config_t *cfg, char *err, size_t errsize)
{
    ks_tls_pem_t *p = read_all(cfg, err, errsize);
    if (!p)
        return NULL;
    ks_tls_t *t = calloc(1, sizeof(*t));
    if (!t)
        abort();
    t->cfg = cfg;
    pthread_mutex_init(&t->lock, NULL);
    p->gen = 1;
    p->refs = 1; /* cur's */
    t->cur = p;
    return t;
}

int ks_tls_reload(ks_tls_t *t, char *err, size_t errsize)
{
    ks_tls_pem_t *p = read_all(t->cfg, err, errsize);
    if (!p)
        return -1;
    p->refs = 1;
    pthread_mutex_lock(&t->lock);
    ks_tls_pem_t *old = t->cur;
    p->gen = old->gen + 1;
    t->cur = p;
    bool last = --old->refs == 0;
    pthread_mutex_unlock(&t->lock);
    if (last)
        pem_free(old);
    return 0;
}

ks_tls_pem_t *ks_tls_get(ks_tls_t *t)
{
    pthread_mutex_lock(&t->lock);
    ks_tls_pem_t *p = t->cur;
    p->refs++;
    pthread_mutex_unlock(&t->lock);
    return p;
}

void ks_tls_put(ks_tls_t *t, ks_tls_pem_t *p)
{
    pthread_mutex_lock(&t->lock);
    bool last = --p->refs == 0;
    pthread_mutex_unlock(&t->lock);
    if (last)
        pem_free(p);
}

void ks_tls_free(ks_tls_t *t)
{
    if (!t)
        return;
    pem_free(t->cur);
    pthread_mutex_destroy(&t->lock);
    free(t);
}
