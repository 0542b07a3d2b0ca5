/* auth.h: who may do what: bearer tokens (kept as SHA-256) and client-certificate subjects,
 * each with three scopes: groups, topics to consume, topics to produce to. */
#ifndef KS_AUTH_H
#define KS_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"

typedef struct ks_auth ks_auth_t;

/* One entry of the tokens file: a token (by hash) or a certificate subject. A principal
 * handed out (ks_auth_identify, ks_auth_current) is held: it stays valid, reloads or not,
 * until its holder lets go with ks_auth_release. */
typedef struct ks_principal ks_principal_t;

/* The scopes a command may need. No pattern in a scope means no access. */
typedef enum {
    KS_SCOPE_GROUPS = 0, /* the consumer groups it may use */
    KS_SCOPE_CONSUME,    /* the topics it may fetch or subscribe to, or seek */
    KS_SCOPE_PRODUCE,    /* the topics it may produce to */
} ks_scope_t;

/* Loads a tokens file, in either format (README, "TLS and tokens"):
 * - JSON: {"tokens":[{"sha256":"<hex>" | "subject":"<RFC 4514 DN>", "groups":[...],
 *   "consume":[...], "produce":[...]}, ...]}, patterns being fnmatch(3) globs;
 * - legacy lines "<sha256 hex> <group patterns, comma-separated>" ('#' comments): such a
 *   token has group scopes only, and the loader logs that it may consume and produce
 *   nothing.
 * Returns NULL with err (naming the entry or line) on failure. */
ks_auth_t *ks_auth_load(const char *path, char *err, size_t errsize);

/* Same, from text (origin names it in messages). */
ks_auth_t *ks_auth_parse(const char *text, const char *origin, char *err, size_t errsize);

/* Frees a and every table it still has, held or not. After every edge and stream has gone. */
void ks_auth_free(ks_auth_t *a);

/* Reads the tokens file at path again and, when it is good, makes it the one in force for
 * every request from now on. A bad file changes nothing: returns -1 with err naming the
 * file and the problem. The table it replaces is freed once no principal of it is held
 * (at once when none is). Any thread. */
int ks_auth_reload(ks_auth_t *a, const char *path, char *err, size_t errsize);

/* Holds who (NULL: nothing) for a new holder, which lets go with ks_auth_release; returns
 * who. Any thread. */
const ks_principal_t *ks_auth_hold(const ks_principal_t *who);

/* Lets go of a principal held (NULL: nothing); who must not be used after. Any thread. */
void ks_auth_release(const ks_principal_t *who);

/* How many tokens-file tables a still has: the one in force, and the replaced ones a
 * principal is still held of. Any thread. */
size_t ks_auth_tables(const ks_auth_t *a);

/* who as the tokens file in force now knows it: who itself, the entry of the same token or
 * subject in a reloaded file (with that file's scopes), or NULL when the reload removed it.
 * who (and a == NULL) as it is when there is no auth. What it returns is held: release it.
 * Any thread. */
const ks_principal_t *ks_auth_current(const ks_auth_t *a, const ks_principal_t *who);

/* Finds who is calling: the bearer token of an "Authorization" value ("Bearer <token>";
 * NULL if absent) when one is sent, else the entry for the verified client certificate's
 * subject (NULL if none). Hashes are compared in constant time. Sets *who, held (release
 * it), and returns KS_OK, or KS_E_UNAUTH with err and *who NULL. a == NULL (auth off):
 * *who = NULL, KS_OK. Any thread. */
ks_status_t ks_auth_identify(const ks_auth_t *a, const char *authorization, const char *subject,
                             const ks_principal_t **who, char *err, size_t errsize);

/* Whether who's scope covers name. Always true with a == NULL. Any thread. */
bool ks_auth_covers(const ks_auth_t *a, const ks_principal_t *who, ks_scope_t scope,
                    const char *name);

/* Checks that who's scope covers each of names. Returns KS_OK, or KS_E_PERMISSION with a
 * message naming the first name refused and the missing scope, e.g.
 * token may not consume topic "x" (consume scope). Any thread. */
ks_status_t ks_auth_allow(const ks_auth_t *a, const ks_principal_t *who, ks_scope_t scope,
                          const char *const *names, size_t n, char *err, size_t errsize);

/* Checks that who's consume scope covers the topic of each well-formed ack id (a settle
 * acts on those records; a malformed id is left for the engine to answer). Returns KS_OK
 * or KS_E_PERMISSION with err naming the first id refused. Any thread. */
ks_status_t ks_auth_allow_ack_ids(const ks_auth_t *a, const ks_principal_t *who,
                                  const char *const *ids, size_t n, char *err, size_t errsize);

/* A short stable name for who, for counting per identity and for logs: "token#3" or
 * "subject#1" (the entry's place in the file). NULL for who == NULL. */
const char *ks_auth_principal_id(const ks_principal_t *who);

/* Identifies and checks the groups scope (group may be NULL: identity only). Kept for
 * callers that need nothing else. Returns KS_OK, KS_E_UNAUTH or KS_E_PERMISSION. */
ks_status_t ks_auth_check(const ks_auth_t *a, const char *authorization, const char *group,
                          char *err, size_t errsize);

#endif
