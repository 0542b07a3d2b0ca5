/* grpc_submit.c: what a gRPC call sends the engine, shared by the method table
 * (grpc_methods.c) and Subscribe's stream (grpc_stream.c): the one door (grpc_submit), a
 * fetch's unset fields, and the settle commands with their callback. */
#include "grpc_int.h"

#include <stdlib.h>

#include "util.h"

ks_status_t grpc_submit(call_t *c, const ks_cmd_req_t *cmd)
{
    char err[512];
    call_ref(c);
    ks_status_t st = ks_engine_submit(c->s->eng, cmd, err, sizeof(err));
    if (st) {
        call_finish(c, grpc_code_of(st), "%s", err);
        call_unref(c);
    }
    return st;
}

unsigned grpc_fetch_unset(int32_t max, int32_t deadline_ms)
{
    return (max == 0 ? KS_FETCH_UNSET_MAX : 0) | (deadline_ms == 0 ? KS_FETCH_UNSET_DEADLINE : 0);
}

/* ---- settling ---- */

/* A stream's ack results, queued in their turn after the batches the engine delivered before
 * them (encoded when their send starts); drops the settle's reference on the call. */
static void send_ack_results(void *t, void *arg)
{
    settle_ctx_t *x = arg;
    call_send_item(t, (send_item_t){.acks = x, .results = x->results});
    call_unref(t);
}

static void on_settled(ks_ack_result_t *res, size_t n, void *opaque)
{
    settle_ctx_t *x = opaque;
    call_t *c = x->c;
    x->nres = n;
    if (x->stream) {
        x->results = res;
        ks_substream_defer(&c->ss, send_ack_results, x);
        return;
    }
    call_reply(c, res, n, x);
}

/* A settle's context: the call (its reference is the caller's), its ids (taken). */
static settle_ctx_t *settle_ctx_new(call_t *c, char **ids, size_t n, bool stream)
{
    settle_ctx_t *x = calloc(1, sizeof(*x));
    if (!x)
        abort();
    x->c = c;
    x->stream = stream;
    x->n = n;
    x->ids = ids;
    return x;
}

/* Sends ids (one block, as ks_strv_pack makes; grpc_settle_owned takes it) to the engine.
 * Returns false (call finished) on a synchronous error. */
bool grpc_settle_owned(call_t *c, const char *group, ks_settle_op_t op, int64_t ms,
                       const char *reason, bool dead_letter, char **ids, size_t n, bool stream,
                       bool wait_commit, int32_t commit_timeout_ms, bool by_position)
{
    settle_ctx_t *x = settle_ctx_new(c, ids, n, stream), *later = NULL;
    x->by_position = by_position;
    char err[512];
    ks_status_t st =
        ks_auth_allow_ack_ids(c->s->auth, c->who, (const char *const *)x->ids, n, err, sizeof(err));
    if (st) {
        settle_ctx_free(x);
        call_finish(c, grpc_code_of(st), "%s", err);
        return false;
    }
    ks_cmd_req_t cmd = {.type = KS_CMD_SETTLE, /* a unary row's command, or a stream's acks */
                        .group = group,
                        .u.settle = {.op = op,
                                     .ms = ms,
                                     .reason = reason,
                                     .dead_letter = dead_letter,
                                     .ack_ids = (const char *const *)x->ids,
                                     .n = n,
                                     .wait_commit = wait_commit,
                                     .commit_timeout_ms = commit_timeout_ms,
                                     .cb = on_settled,
                                     .opaque = x}};
    if (stream && wait_commit) {
        /* The stream's second answer, where each accepted ack's commit stands, is sent as
         * another AckResults with the same ids; it holds its own reference on c. */
        later = settle_ctx_new(c, ks_strv_pack((const char *const *)ids, n), n, true);
        later->by_position = by_position;
        cmd.u.settle.confirm_cb = on_settled;
        cmd.u.settle.confirm_opaque = later;
        call_ref(c);
    }
    if (grpc_submit(c, &cmd)) {
        settle_ctx_free(x);
        if (later) {
            settle_ctx_free(later);
            call_unref(c);
        }
        return false;
    }
    return true;
}

/* grpc_settle_owned for ids the caller keeps. */
bool grpc_settle(call_t *c, const char *group, ks_settle_op_t op, int64_t ms, const char *reason,
                 bool dead_letter, char **ids, size_t n, bool stream)
{
    return grpc_settle_owned(c, group, op, ms, reason, dead_letter,
                             ks_strv_pack((const char *const *)ids, n), n, stream, false, 0, false);
}
