/* http_tls.h: the HTTP edge's TLS through gnutls (the library libmicrohttpd serves TLS with):
 * the certificate each handshake presents, from the reading of the TLS files in force, and the
 * client certificate checked against the client CA in force. Free of any HTTP server
 * library's types: an adapter hands it the gnutls session of a connection. */
#ifndef KS_HTTP_TLS_H
#define KS_HTTP_TLS_H

#include <gnutls/gnutls.h>
#include <gnutls/abstract.h>
#include <stdbool.h>
#include <stddef.h>

#include "tls.h"

typedef struct http_tls http_tls_t;

/* The TLS of the one HTTP edge with TLS in the process (gnutls's certificate callback has no
 * user pointer): tls is borrowed until http_tls_free. Never fails. */
http_tls_t *http_tls_new(ks_tls_t *tls);

/* After the server stopped: frees t and what its handshakes were given. */
void http_tls_free(http_tls_t *t);

/* The client CA (PEM) of the reading at start when clients must present a certificate
 * (tls.client_ca_file), else NULL: a server asks for client certificates when it has one. */
const char *http_tls_client_ca(const http_tls_t *t);

/* gnutls's certificate callback (gnutls_certificate_retrieve_function2): the chain and key of
 * the reading in force. The server library's handshake thread. */
int http_tls_pick_cert(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                       const gnutls_pk_algorithm_t *algos, int nalgos, gnutls_pcert_st **pcert,
                       unsigned int *pcert_len, gnutls_privkey_t *key);

/* With mTLS, whether the client certificate chain of session (NULL: none) verifies against the
 * client CA in force; true without mTLS. */
bool http_tls_peer_ok(http_tls_t *t, gnutls_session_t session);

/* The subject DN (RFC 4514) of session's client certificate into buf, or NULL (no mTLS, no
 * session or no certificate). http_tls_peer_ok has verified it by the time this is asked. */
const char *http_tls_subject(http_tls_t *t, gnutls_session_t session, char *buf, size_t size);

#endif
