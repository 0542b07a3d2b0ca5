/* edge.c: the policy both API edges share (see edge.h): caller checks, the ack summary
 * rule, and the walk over a status answer. */
#include "edge.h"

#include <stdio.h>
#include <string.h>

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

ks_status_t ks_edge_fetch_still_allowed(const ks_auth_t *auth, const ks_principal_t *who,
                                        const char *group, const ks_batch_t *b, char *err,
                                        size_t errsize)
{
    if (!auth || !who)
        return KS_OK;
    const ks_principal_t *cur = ks_auth_current(auth, who);
    if (cur == who) {
        ks_auth_release(cur);
        return KS_OK; /* the entry the fetch was checked against */
    }
    if (!cur) {
        snprintf(err, errsize,
                 "%s was removed from the tokens file (auth.tokens_file) while the fetch waited; "
                 "its records go back to the group",
                 ks_auth_principal_id(who));
        return KS_E_UNAUTH;
    }
    char why[400];
    ks_status_t st = ks_auth_allow(auth, cur, KS_SCOPE_GROUPS, &group, 1, why, sizeof(why));
    const char *prev = NULL;
    for (size_t i = 0; st == KS_OK && i < b->cnt; i++) {
        const char *t = b->recs[i].topic;
        if (prev && !strcmp(prev, t))
            continue; /* a batch's records come partition by partition */
        st = ks_auth_allow(auth, cur, KS_SCOPE_CONSUME, &t, 1, why, sizeof(why));
        prev = t;
    }
    ks_auth_release(cur);
    if (st != KS_OK)
        snprintf(err, errsize,
                 "the reloaded tokens file (auth.tokens_file) narrowed the scopes while the "
                 "fetch waited: %.300s; its records go back to the group",
                 why);
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

bool ks_edge_ack_quiet(const ks_ack_result_t *a)
{
    return a->status == KS_OK && (a->commit == KS_COMMIT_NONE || a->commit == KS_COMMIT_COMMITTED);
}

void ks_edge_ack_walk_init(ks_edge_ack_walk_t *w, const char *const *ids, size_t n_ids, size_t nres)
{
    w->ids = ids;
    w->n_ids = n_ids;
    w->pos = 0;
    w->j = (size_t)-1;
    w->k = 0;
    /* Each id names at least one record: as many results as ids means one each, unless a
     * range of one offset is among them (its result carries that offset's own id). */
    w->plain = nres == n_ids;
    for (size_t i = 0; w->plain && i < n_ids; i++)
        w->plain = !strchr(ids[i], '~');
    w->range = !w->plain && n_ids && strchr(ids[0], '~');
    w->cnt = !n_ids ? 0 : w->range ? ks_ack_id_count(ids[0]) : 1;
}

bool ks_edge_ack_walk_next(ks_edge_ack_walk_t *w)
{
    if (w->plain) {
        w->pos = ++w->j;
        return w->pos < w->n_ids;
    }
    if (w->j != (size_t)-1 && ++w->k >= w->cnt) {
        if (++w->pos >= w->n_ids)
            return false;
        w->k = 0;
        w->range = strchr(w->ids[w->pos], '~') != NULL;
        w->cnt = w->range ? ks_ack_id_count(w->ids[w->pos]) : 1;
    }
    w->j++;
    return w->pos < w->n_ids;
}

const char *ks_edge_ack_walk_id(ks_edge_ack_walk_t *w)
{
    if (!w->range)
        return w->ids[w->pos];
    ks_ack_id_nth(w->ids[w->pos], w->k, w->buf, sizeof(w->buf));
    return w->buf;
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
