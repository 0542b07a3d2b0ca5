/* auth.h: bearer tokens, kept as SHA-256 hashes, each allowed a set of group patterns. */
#ifndef KS_AUTH_H
#define KS_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"

typedef struct ks_auth ks_auth_t;

/* Loads a tokens file: one token per line, "<sha256 hex of the token> <patterns>",
 * patterns comma-separated fnmatch(3) globs of the groups it may use; '#' starts a
 * comment. Returns NULL with err (naming the line) on failure. */
ks_auth_t *ks_auth_load(const char *path, char *err, size_t errsize);

void ks_auth_free(ks_auth_t *a);

/* Checks an "Authorization" header value ("Bearer <token>"; NULL if absent) and, when
 * group is not NULL, that the token covers it. Hashes are compared in constant time.
 * Returns KS_OK, KS_E_UNAUTH or KS_E_PERMISSION with a message in err.
 * a == NULL (auth off) always passes. Any thread. */
ks_status_t ks_auth_check(const ks_auth_t *a, const char *authorization, const char *group,
                          char *err, size_t errsize);

#endif
