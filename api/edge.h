/* edge.h: the policy both API edges (HTTP, gRPC) share, written once: who the caller is and
 * which groups and topics it may use, the ack summary rule, and the walk over a status
 * answer. Nothing here encodes: each edge writes its own wire format on its own threads. */
#ifndef KS_EDGE_H
#define KS_EDGE_H

#include <stdbool.h>
#include <stddef.h>

#include "ack_id.h"
#include "auth.h"
#include "engine.h"

/* Identifies the caller (its bearer token, from the "Authorization" value, else its
 * verified certificate's subject; either may be NULL) into *who, and checks that its
 * groups scope covers group (NULL: identity only). auth == NULL (auth off): *who = NULL,
 * KS_OK. Returns KS_OK, or KS_E_UNAUTH / KS_E_PERMISSION with err. *who, when set (even
 * with KS_E_PERMISSION), is held: ks_auth_release it. Any thread. */
ks_status_t ks_edge_authorize(const ks_auth_t *auth, const char *authorization, const char *subject,
                              const char *group, const ks_principal_t **who, char *err,
                              size_t errsize);

/* Checks topic names a caller sends: each valid and not internal (ks_engine_check_topics,
 * which names what a client may not `verb`), then covered by who's `scope`. Bad names get
 * their own answer before the scope check. Returns KS_OK, or the first failure with err.
 * Any thread. */
ks_status_t ks_edge_check_topics(const ks_engine_t *eng, const ks_auth_t *auth,
                                 const ks_principal_t *who, ks_scope_t scope, const char *verb,
                                 const char *const *topics, size_t n, char *err, size_t errsize);

/* Whether who may still take the records of batch b, the answer to a fetch of group it sent
 * before the tokens file was reloaded: its entry must still be there (else KS_E_UNAUTH) and
 * its scopes must still cover group and the topic of each record (else KS_E_PERMISSION); err
 * then says so and that the records go back to the group. KS_OK with auth or who NULL, or
 * when no reload replaced who. Any thread; the edges call it before a fetch's reply goes
 * out. */
ks_status_t ks_edge_fetch_still_allowed(const ks_auth_t *auth, const ks_principal_t *who,
                                        const char *group, const ks_batch_t *b, char *err,
                                        size_t errsize);

/* What a settle (ack, nack, deadline) answered, as a whole. */
typedef struct ks_edge_ack_summary {
    size_t accepted, rejected;
    /* KS_OK unless every id was rejected: then the request as a whole fails, with the
     * first rejection's status and reason (message; NULL when status is KS_OK). */
    ks_status_t status;
    const char *message;
} ks_edge_ack_summary_t;

/* Sums up the engine's n results of one settle (borrowed; message points into them).
 * Cannot fail. Any thread. */
void ks_edge_ack_summarize(const ks_ack_result_t *res, size_t n, ks_edge_ack_summary_t *out);

/* Whether a result says only what was asked: accepted (or, for a waited ack, committed). An
 * answer by position (results=errors on HTTP, results_by_position on gRPC) leaves it out. */
bool ks_edge_ack_quiet(const ks_ack_result_t *a);

/* Walks a settle's results beside the ids that asked for them: the engine answers one result
 * per record, so a range id ("<first>~<last>") has one per offset. Start with
 * ks_edge_ack_walk_init; each ks_edge_ack_walk_next moves to the next result (false past the
 * last), with pos the request entry it answers and j its index in the results. */
typedef struct ks_edge_ack_walk {
    const char *const *ids;
    size_t n_ids;
    size_t pos, j; /* the request entry, the result */
    size_t k, cnt; /* the offset within the entry, and how many it names */
    bool plain;    /* one result per id, and no id a range */
    bool range;    /* the current entry is a range (even of one offset) */
    char buf[KS_ACK_ID_MAX + 24];
} ks_edge_ack_walk_t;

/* nres: the results' count; equal to n_ids with no range among the ids, the walk reads no
 * id. */
void ks_edge_ack_walk_init(ks_edge_ack_walk_t *w, const char *const *ids, size_t n_ids,
                           size_t nres);
bool ks_edge_ack_walk_next(ks_edge_ack_walk_t *w);
/* The current result's id: its entry's, or, in a range, the single id of its offset (valid
 * until the next call). */
const char *ks_edge_ack_walk_id(ks_edge_ack_walk_t *w);

/* Whether who may see group in a listing (its groups scope covers the name). Always true
 * with auth == NULL. Any thread. */
bool ks_edge_group_visible(const ks_auth_t *auth, const ks_principal_t *who, const char *group);

/* Called for each group of a status answer an edge writes out, in order; ctx is the
 * walker's. */
typedef void(ks_edge_group_fn)(const ks_group_status_t *g, void *ctx);

/* Walks a status answer (groups[0..n), borrowed) for a reply: for one group (GetGroup, GET
 * /v1/groups/{g}) calls fn with it; for a listing calls fn with each group who may see
 * (ks_edge_group_visible), in order. Returns KS_OK, or KS_E_NOT_FOUND with *message when
 * one group was asked for and it closed before its status was taken (fn never runs). Any
 * thread; the edges call it on their own. */
ks_status_t ks_edge_status_walk(ks_group_status_t *const *groups, size_t n, bool one,
                                const ks_auth_t *auth, const ks_principal_t *who,
                                ks_edge_group_fn *fn, void *ctx, const char **message);

#endif
