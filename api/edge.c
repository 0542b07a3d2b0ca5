/* edge.c: the policy both API edges share (see edge.h): caller checks, the ack summary
 * rule, and the walk over a status answer. */
#include "edge.h"

ks_status_t ks_edge_authorize(const ks_auth_t *auth, const char *authorization, const char *subject,
                              const char *group, const ks_principal_t **who, char *err,
                              size_t errsize)
{
    ks_status_t st = ks_auth_identify(auth, authorization, subject, who, err, errsize);
    if (st == KS_OK && group)
        st = ks_auth_allow(auth, *who, KS_SCOPE_GROUPS, &group, 1, err, errsize);
    return st;
}

ks_status_t ks_edge_check_topics(const ks_engine_t *eng, const ks_auth_t *auth,
                                 const ks_principal_t *who, ks_scope_t scope, const char *verb,
                                 const char *const *topics, size_t n, char *err, size_t errsize)
{
    ks_status_t st = ks_engine_check_topics(eng, topics, n, verb, err, errsize);
    if (st == KS_OK)
        st = ks_auth_allow(auth, who, scope, topics, n, err, errsize);
    return st;
}

void ks_edge_ack_summarize(const ks_ack_result_t *res, size_t n, ks_edge_ack_summary_t *out)
{
    size_t ok = 0;
    const ks_ack_result_t *first_bad = NULL;
    for (size_t i = 0; i < n; i++) {
        if (res[i].status == KS_OK)
            ok++;
        else if (!first_bad)
            first_bad = &res[i];
    }
    out->accepted = ok;
    out->rejected = n - ok;
    /* All rejected: the request as a whole failed, with the first reason's status. */
    bool failed = ok == 0 && first_bad;
    out->status = failed ? first_bad->status : KS_OK;
    out->message = failed ? first_bad->reason : NULL;
}

bool ks_edge_group_visible(const ks_auth_t *auth, const ks_principal_t *who, const char *group)
{
    return ks_auth_covers(auth, who, KS_SCOPE_GROUPS, group);
}

ks_status_t ks_edge_status_walk(ks_group_status_t *const *groups, size_t n, bool one,
                                const ks_auth_t *auth, const ks_principal_t *who,
                                ks_edge_group_fn *fn, void *ctx, const char **message)
{
    if (one) {
        if (n == 0) {
            *message = "the group closed meanwhile";
            return KS_E_NOT_FOUND;
        }
        fn(groups[0], ctx);
        return KS_OK;
    }
    for (size_t i = 0; i < n; i++)
        if (ks_edge_group_visible(auth, who, groups[i]->name))
            fn(groups[i], ctx);
    return KS_OK;
}
