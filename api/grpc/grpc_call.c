/* grpc_call.c: the gRPC edge's calls: their references, the send queue behind the one
 * SEND_MESSAGE in flight, the final status, who the caller is, and the walk over the live ones
 * (pick_calls). */
#include "edge.h"
#include "grpc_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "util.h"

static void send_item_drop(send_item_t *it)
{
    if (it->bb)
        grpc_byte_buffer_destroy(it->bb);
    ks_batch_free(it->batch);
    if (it->acks)
        settle_ctx_free(it->acks);
    free(it->results);
}

/* ---- helpers ---- */

void settle_ctx_free(settle_ctx_t *x)
{
    free(x->ids); /* one block, strings included */
    free(x);
}

void bad_message(call_t *c, const char *what)
{
    call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "the request is not a valid %s protobuf message",
                what);
}

grpc_status_code grpc_code_of(ks_status_t st)
{
    return (grpc_status_code)ks_status_grpc_code(st); /* the one table, proxy/types.c */
}

void call_ref(call_t *c)
{
    pthread_mutex_lock(&c->lock);
    c->refs++;
    pthread_mutex_unlock(&c->lock);
}

void call_free(call_t *c)
{
    for (size_t i = 0; i < c->qn; i++)
        send_item_drop(&c->q[(c->qh + i) % c->qcap]);
    free(c->q);
    if (c->recv_buf)
        grpc_byte_buffer_destroy(c->recv_buf);
    if (c->call)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->req_md);
    if (c->has_ss)
        ks_substream_destroy(&c->ss);
    free(c->group);
    ks_auth_release(c->who);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void call_unref(call_t *c)
{
    pthread_mutex_lock(&c->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (last)
        call_free(c);
}

/* The value of request metadata key, as a NUL-terminated copy in buf, or NULL. */
static const char *md_get(const call_t *c, const char *key, char *buf, size_t size)
{
    for (size_t i = 0; i < c->req_md.count; i++) {
        const grpc_metadata *m = &c->req_md.metadata[i];
        size_t kl = GRPC_SLICE_LENGTH(m->key);
        if (kl == strlen(key) && !memcmp(GRPC_SLICE_START_PTR(m->key), key, kl)) {
            size_t vl = GRPC_SLICE_LENGTH(m->value);
            if (vl >= size)
                vl = size - 1;
            memcpy(buf, GRPC_SLICE_START_PTR(m->value), vl);
            buf[vl] = '\0';
            return buf;
        }
    }
    return NULL;
}

/* ---- sending: one SEND_MESSAGE in flight, the rest queued ---- */

/* A record message is no longer queued (sent, failed or dropped): the stream's core, or for
 * a unary Fetch the engine, hears whether the client's side took it (its leases start, or its
 * records go back counting no attempt). Locked by caller. Returns true when the core wants a
 * refill (ks_substream_refill, once c->lock is released). */
static bool batch_gone_locked(call_t *c, uint64_t token, int64_t bytes, bool taken)
{
    if (c->has_ss)
        return ks_substream_msg_done(&c->ss, token, bytes, taken);
    if (token && c->group) /* only posts a command: fine under the lock */
        ks_engine_delivered(c->s->eng, c->group, token, taken);
    return false;
}

/* The send in flight ended (taken: it completed). Locked by caller; returns as
 * batch_gone_locked. */
static bool sent_done_locked(call_t *c, bool taken)
{
    bool refill = false;
    if (c->in_flight_batch)
        refill = batch_gone_locked(c, c->in_flight_token, c->in_flight_bytes, taken);
    c->in_flight_batch = false;
    c->in_flight_token = 0;
    c->in_flight_bytes = 0;
    c->reply_since_ms = 0;
    if (c->has_ss)
        ks_substream_send_end(&c->ss);
    return refill;
}

/* Drops a queued message that will never go out. Locked by caller. */
void item_drop_locked(call_t *c, send_item_t *it)
{
    if (it->batch)
        (void)batch_gone_locked(c, it->batch->deliver_token, it->batch->bytes, false);
    send_item_drop(it);
}

/* Drops every queued message of a stream a tokens-file reload ended: none goes out to the
 * removed caller, and their records go back counting no attempt (the send in flight, if any,
 * cannot be recalled). Locked by caller. */
static void drop_revoked_locked(call_t *c)
{
    if (!c->qn || !c->has_ss || !ks_substream_revoked(&c->ss))
        return;
    for (size_t i = 0; i < c->qn; i++)
        item_drop_locked(c, &c->q[(c->qh + i) % c->qcap]);
    c->qh = c->qn = 0;
}

/* Starts the next send or the final status. Locked by caller. */
static void kick_locked(call_t *c)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    drop_revoked_locked(c);
    bool will_send = (c->qn > 0 && !c->closed) || (c->want_status && !c->status_started);
    if (!will_send)
        return;
    if (!c->meta_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->meta_sent = true;
    }
    if (c->qn > 0 && !c->closed) {
        send_item_t it = c->q[c->qh];
        c->qh = (c->qh + 1) % c->qcap;
        c->qn--;
        grpc_byte_buffer *bb = it.bb;
        c->in_flight_batch = it.batch != NULL;
        c->in_flight_token = it.batch ? it.batch->deliver_token : 0;
        c->in_flight_bytes = it.batch ? it.batch->bytes : 0;
        if (c->has_ss)
            ks_substream_send_begin(&c->ss, ks_now_ms());
        else if (it.batch && it.batch->deliver_token)
            c->reply_since_ms = ks_now_ms(); /* a Fetch's held records: the stall clock */
        if (it.batch)
            bb = encode_records_as(it.batch, c->has_ss, &c->fmt); /* a stream's, or a Fetch's */
        else if (it.acks)
            bb = encode_ack_results(it.acks, it.results);
        it.bb = NULL;
        send_item_drop(&it);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = bb;
        n++;
        c->sending = true;
        c->in_flight = bb;
        c->refs++;
        if (grpc_call_start_batch(c->call, ops, n, &c->ev_send, NULL) != GRPC_CALL_OK) {
            ks_err(LOGC, "start_batch(send) failed");
            c->refs--;
            c->sending = false;
            c->in_flight = NULL;
            grpc_byte_buffer_destroy(bb);
            (void)sent_done_locked(c, false);
        }
        return;
    }
    if (c->want_status && !c->status_started) {
        c->status_started = true;
        ks_metrics_grpc_request((unsigned)c->method, c->row ? c->row->path : NULL, (int)c->st);
        grpc_slice details = grpc_slice_from_copied_string(c->msg);
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = c->st;
        ops[n].data.send_status_from_server.status_details = &details;
        n++;
        c->refs++;
        if (grpc_call_start_batch(c->call, ops, n, &c->ev_status, NULL) != GRPC_CALL_OK) {
            ks_err(LOGC, "start_batch(status) failed");
            c->refs--;
        }
        grpc_slice_unref(details);
    }
}

/* Queues a message (the call takes it.bb and it.batch). */
void call_send_item(call_t *c, send_item_t it)
{
    pthread_mutex_lock(&c->lock);
    if (c->closed || c->status_started || c->want_status) {
        item_drop_locked(c, &it);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (c->qn == c->qcap) {
        size_t ncap = c->qcap ? c->qcap * 2 : 8;
        send_item_t *nq = malloc(ncap * sizeof(*nq));
        if (!nq)
            abort();
        for (size_t i = 0; i < c->qn; i++)
            nq[i] = c->q[(c->qh + i) % c->qcap];
        free(c->q);
        c->q = nq;
        c->qcap = ncap;
        c->qh = 0;
    }
    c->q[(c->qh + c->qn) % c->qcap] = it;
    c->qn++;
    if (!c->sending) {
        if ((it.batch || it.acks) && !on_cq_thread()) {
            /* Encoding is per record: leave it to a completion-queue thread, not the
             * caller's (the group loop's; a completion-queue thread encodes at once). An
             * empty batch posts on_kick there at once; `sending` holds the slot until then. */
            c->sending = true;
            c->refs++;
            if (grpc_call_start_batch(c->call, NULL, 0, &c->ev_kick, NULL) != GRPC_CALL_OK) {
                c->refs--;
                c->sending = false;
                kick_locked(c);
            }
        } else {
            kick_locked(c);
        }
    }
    pthread_mutex_unlock(&c->lock);
}

/* Queues an encoded message (the call takes bb). */
void call_send_bb(call_t *c, grpc_byte_buffer *bb)
{
    call_send_item(c, (send_item_t){.bb = bb});
}

/* Queues a message (m is packed now; the caller keeps m). */
void call_send(call_t *c, const ProtobufCMessage *m)
{
    call_send_bb(c, grpc_pack(m));
}

/* Ends the call with a status once the queued messages are out. */
void call_finish(call_t *c, grpc_status_code st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void call_finish(call_t *c, grpc_status_code st, const char *fmt, ...)
{
    pthread_mutex_lock(&c->lock);
    if (!c->want_status && !c->status_started) {
        c->want_status = true;
        c->st = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
        va_end(ap);
        if (!c->sending)
            kick_locked(c);
    }
    pthread_mutex_unlock(&c->lock);
    if (c->has_ss)
        ks_substream_stop(&c->ss); /* an ending stream takes no more records */
}

void on_kick(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    c->sending = false;
    if (c->qn > 0 || c->want_status)
        kick_locked(c);
    pthread_mutex_unlock(&c->lock);
    call_unref(c);
}

/* The reply's wake-up: the method's encoder runs here, on a completion-queue thread. */
void on_reply(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    reply_t r = c->reply;
    c->reply = (reply_t){0};
    pthread_mutex_unlock(&c->lock);
    c->row->encode(c, &r);
}

void call_reply(call_t *c, void *res, size_t n, void *ctx)
{
    pthread_mutex_lock(&c->lock);
    c->reply = (reply_t){res, n, ctx};
    /* An empty batch posts ev_reply at once (a unary call has one command out, so one
     * reply). The command's reference on c stays with the reply until the encoder. */
    bool posted = grpc_call_start_batch(c->call, NULL, 0, &c->ev_reply, NULL) == GRPC_CALL_OK;
    pthread_mutex_unlock(&c->lock);
    if (!posted)
        on_reply(c, false); /* cannot happen on a live call; answer here rather than never */
}

/* A send completed (ok: the transport took the message). A record message's leases
 * start now, in the group loop; below the queue bound again, a held-back fetch goes out. */
void on_send_done(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    grpc_byte_buffer_destroy(c->in_flight);
    c->in_flight = NULL;
    c->sending = false;
    if (!ok) {
        c->closed = true;
        if (c->has_ss)
            ks_substream_stop(&c->ss);
    }
    bool refill = sent_done_locked(c, ok);
    if (c->qn > 0 || c->want_status)
        kick_locked(c);
    pthread_mutex_unlock(&c->lock);
    if (refill)
        ks_substream_refill(&c->ss);
    call_unref(c);
}

void on_status_done(void *ctx, bool ok)
{
    call_unref(ctx);
}

/* ---- receiving ---- */

void start_recv(call_t *c)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_buf;
    pthread_mutex_lock(&c->lock);
    c->refs++;
    if (grpc_call_start_batch(c->call, &op, 1, &c->ev_recv, NULL) != GRPC_CALL_OK)
        c->refs--;
    pthread_mutex_unlock(&c->lock);
}

/* ---- auth ---- */

/* The verified client certificate's subject (RFC 2253) into buf, or NULL without mTLS. */
const char *cert_subject(const call_t *c, char *buf, size_t size)
{
    grpc_auth_context *ctx = grpc_call_auth_context(c->call);
    if (!ctx)
        return NULL;
    const char *out = NULL;
    grpc_auth_property_iterator it =
        grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_SUBJECT_PROPERTY_NAME);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    if (p && p->value && p->value_length < size) {
        memcpy(buf, p->value, p->value_length);
        buf[p->value_length] = '\0';
        out = buf;
    }
    grpc_auth_context_release(ctx);
    return out;
}

/* Identifies the caller (its token, else its certificate's subject) into c->who and
 * checks the group scope for group (NULL: identity only). Finishes the call and returns
 * false when refused. */
bool grpc_authorized(call_t *c, const char *group)
{
    if (!c->s->auth)
        return true;
    char hdr[1024], subj[1024], err[512];
    const char *a = md_get(c, "authorization", hdr, sizeof(hdr));
    const ks_principal_t *prev = c->who; /* the first message's check replaces the accept's */
    ks_status_t st = ks_edge_authorize(c->s->auth, a, cert_subject(c, subj, sizeof(subj)), group,
                                       &c->who, err, sizeof(err));
    ks_auth_release(prev);
    if (st == KS_OK)
        return true;
    call_finish(c, grpc_code_of(st), "%s", err);
    return false;
}

/* Checks the topic names (valid, not internal: ks_engine_check_topics, what a client
 * may not "verb") and that the caller's scope covers each. Finishes the call and returns
 * false when refused. Call after grpc_authorized(). */
bool grpc_scoped(call_t *c, ks_scope_t scope, const char *verb, const char *const *names, size_t n)
{
    char err[512];
    ks_status_t st = ks_edge_check_topics(c->s->eng, c->s->auth, c->who, scope, verb, names, n, err,
                                          sizeof(err));
    if (st == KS_OK)
        return true;
    call_finish(c, grpc_code_of(st), "%s", err);
    return false;
}

/* Takes a reference on each live call for which pick(c, arg) holds (run with c->lock
 * held), at most max of them, into out. Returns how many. */
size_t pick_calls(ks_grpc_t *s, bool (*pick)(call_t *c, const void *arg), const void *arg,
                  call_t **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (call_t *c = s->calls; c && n < max; c = c->next) {
        pthread_mutex_lock(&c->lock);
        if (pick(c, arg)) {
            c->refs++;
            out[n++] = c;
        }
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* A unary reply of held records in flight for the stall time (pick_calls' predicate): marked
 * so it is cut once. */
static bool pick_stalled_reply(call_t *c, const void *arg)
{
    int64_t cutoff = *(const int64_t *)arg;
    if (!c->reply_since_ms || c->reply_since_ms > cutoff || c->closed)
        return false;
    c->reply_since_ms = 0;
    return true;
}

void call_cut_stalled_replies(ks_grpc_t *s)
{
    int stall = s->cfg->grpc_stream_stall_ms;
    int64_t cutoff = ks_now_ms() - stall;
    call_t *todo[64];
    size_t n = pick_calls(s, pick_stalled_reply, &cutoff, todo, 64);
    for (size_t i = 0; i < n; i++) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "the client took no reply for %d ms (grpc.stream_stall_ms): its records go to "
                 "other callers",
                 stall);
        ks_warn(LOGC, "Fetch of group %s: %s", todo[i]->group ? todo[i]->group : "?", msg);
        grpc_call_cancel_with_status(todo[i]->call, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL);
        call_unref(todo[i]);
    }
}
