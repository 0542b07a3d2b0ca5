/* grpc_server.c: the gRPC edge's server: listening (TLS, mTLS), starting the completion-queue
 * threads (grpc_cq.c runs their loop), accepting calls and routing them by method path, and
 * shutdown. The top of the edge's chain of files (grpc_int.h). */
#include "grpc_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

/* ---- call lifecycle ---- */

static void on_recv(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    grpc_byte_buffer *bb = c->recv_buf;
    c->recv_buf = NULL;
    bool done = c->status_started || c->want_status;
    pthread_mutex_unlock(&c->lock);
    if (!ok || !bb) {
        /* Half-close, or the call ended. A unary call with no message is bad input;
         * a stream the client closed ends with OK. */
        if (ok && !done) {
            if (!c->stream_in && c->method != M_HEALTH_WATCH)
                call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
            else if (c->method != M_HEALTH_WATCH) {
                if (c->has_ss)
                    ks_substream_release(&c->ss);
                call_finish(c, GRPC_STATUS_OK, "%s", "");
            }
        }
        if (bb)
            grpc_byte_buffer_destroy(bb);
        call_unref(c);
        return;
    }
    grpc_slice sl = grpc_flatten(bb);
    grpc_byte_buffer_destroy(bb);
    if (!done)
        grpc_route_msg(c, sl);
    grpc_slice_unref(sl);
    /* Streams keep reading; unary and server-streaming calls read once (then the
     * half-close). */
    pthread_mutex_lock(&c->lock);
    done = c->status_started || c->want_status || c->closed;
    pthread_mutex_unlock(&c->lock);
    if (!done && c->stream_in)
        start_recv(c);
    call_unref(c);
}

static void list_remove(ks_grpc_t *s, call_t *c)
{
    pthread_mutex_lock(&s->lock);
    if (c->prev)
        c->prev->next = c->next;
    else if (s->calls == c)
        s->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    pthread_mutex_unlock(&s->lock);
}

static void on_close(void *ctx, bool ok)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    c->closed = true;
    /* Queued messages will never go out now. */
    for (size_t i = 0; i < c->qn; i++)
        item_drop_locked(c, &c->q[(c->qh + i) % c->qcap]);
    c->qn = 0;
    pthread_mutex_unlock(&c->lock);
    if (c->has_ss) {
        /* A cancelled or ended stream: its leases go back to the pool now. */
        if (c->ss.opened)
            ks_dbg(LOGC, "stream %s closed%s", ks_substream_sub(&c->ss),
                   c->cancelled ? " (cancelled)" : "");
        ks_substream_close(&c->ss);
        uncount_stream(c);
    }
    if (c->method == M_PRODUCE)
        grpc_produce_stop_wait(c); /* its client left: nothing waits for the registry */
    list_remove(c->s, c);
    call_unref(c); /* the list's reference */
    call_unref(c); /* this batch's */
}

static void arm_request(ks_grpc_t *s);

static void on_accept(void *ctx, bool ok)
{
    call_t *c = ctx;
    ks_grpc_t *s = c->s;
    if (!ok || atomic_load(&s->stopping)) {
        if (ok && c->call)
            grpc_call_cancel_with_status(c->call, GRPC_STATUS_UNAVAILABLE, "shutting down", NULL);
        call_unref(c);
        return;
    }
    arm_request(s);
    size_t ml = GRPC_SLICE_LENGTH(c->details.method);
    const char *mp = (const char *)GRPC_SLICE_START_PTR(c->details.method);
    c->row = method_find(mp, ml);
    c->method = c->row ? c->row->m : M_UNKNOWN;
    c->stream_in = c->row && c->row->stream_in;
    if (c->method == M_SUBSCRIBE)
        stream_init(c);
    /* Track the call; watch for its end. */
    pthread_mutex_lock(&s->lock);
    c->next = s->calls;
    if (s->calls)
        s->calls->prev = c;
    s->calls = c;
    pthread_mutex_unlock(&s->lock);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    pthread_mutex_lock(&c->lock);
    c->refs += 2; /* the list's, and the close batch's */
    if (grpc_call_start_batch(c->call, &op, 1, &c->ev_close, NULL) != GRPC_CALL_OK)
        c->refs -= 2;
    pthread_mutex_unlock(&c->lock);

    if (c->method == M_UNKNOWN) {
        call_finish(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method %.*s", (int)ml, mp);
    } else {
        /* A token must be valid before anything is read; group checks come later. */
        if (!c->row->needs_auth || grpc_authorized(c, NULL))
            start_recv(c);
    }
    call_unref(c); /* the accept's reference */
}

static void arm_request(ks_grpc_t *s)
{
    call_t *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->s = s;
    c->refs = 1; /* the accept's */
    pthread_mutex_init(&c->lock, NULL);
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->req_md);
    c->ev_accept = (ev_t){on_accept, c};
    c->ev_recv = (ev_t){on_recv, c};
    c->ev_send = (ev_t){on_send_done, c};
    c->ev_close = (ev_t){on_close, c};
    c->ev_status = (ev_t){on_status_done, c};
    c->ev_kick = (ev_t){on_kick, c};
    c->ev_reply = (ev_t){on_reply, c};
    c->ev_arrive = (ev_t){on_arrive, c};
    c->last_health = -1;
    if (grpc_server_request_call(s->server, &c->call, &c->details, &c->req_md, s->cq, s->cq,
                                 &c->ev_accept) != GRPC_CALL_OK) {
        ks_err(LOGC, "grpc_server_request_call failed");
        call_free(c);
    }
}

/* ---- setup and shutdown ---- */

/* grpc core asks before each new handshake: a config from a newer reading of the TLS files,
 * or "unchanged". Connections already open keep the certificate they began with.
 * @locality grpc core's threads */
static grpc_ssl_certificate_config_reload_status tls_fetch(void *arg,
                                                           grpc_ssl_server_certificate_config **cfg)
{
    ks_grpc_t *s = arg;
    ks_tls_pem_t *p = ks_tls_get(s->tls);
    grpc_ssl_certificate_config_reload_status st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    pthread_mutex_lock(&s->tls_lock);
    if (p->gen != s->tls_gen) {
        grpc_ssl_pem_key_cert_pair pair = {p->key, p->cert};
        /* grpc core asserts a root set in a fetched config even when no client certificate
         * is asked for; then its own certificate stands in, and is never used. */
        *cfg = grpc_ssl_server_certificate_config_create(p->ca ? p->ca : p->cert, &pair,
                                                         1); /* copies them */
        if (*cfg) {
            s->tls_gen = p->gen;
            st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
            if (p->gen > 1)
                ks_info(LOGC, "new handshakes use the reloaded TLS files");
        } else {
            st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
        }
    }
    pthread_mutex_unlock(&s->tls_lock);
    ks_tls_put(s->tls, p);
    return st;
}

ks_grpc_t *ks_grpc_start(ks_engine_t *eng, const ks_config_t *cfg, const ks_auth_t *auth,
                         ks_tls_t *tls, ks_subhub_t *hub, char *err, size_t errsize)
{
    grpc_init();
    ks_grpc_t *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->eng = eng;
    s->cfg = cfg;
    s->auth = auth;
    s->tls = tls;
    pthread_mutex_init(&s->tls_lock, NULL);
    atomic_init(&s->stopping, false);
    s->hub = hub;
    pthread_mutex_init(&s->lock, NULL);
    reflection_load(s);

    grpc_arg args[2];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)(uintptr_t)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)cfg->grpc_max_message_bytes;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)(uintptr_t)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = (int)cfg->grpc_max_message_bytes;
    grpc_channel_args cargs = {2, args};
    s->cq = grpc_completion_queue_create_for_next(NULL);
    s->server = grpc_server_create(&cargs, NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);

    grpc_server_credentials *creds;
    if (tls) {
        grpc_ssl_server_credentials_options *o =
            grpc_ssl_server_credentials_create_options_using_config_fetcher(
                *cfg->tls_client_ca_file
                    ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                    : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
                tls_fetch, s);
        creds = grpc_ssl_server_credentials_create_with_options(o); /* takes o */
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    s->port = grpc_server_add_http2_port(s->server, cfg->grpc_listen, creds);
    grpc_server_credentials_release(creds);
    if (s->port == 0) {
        snprintf(err, errsize, "cannot listen for gRPC on %s (config key 'grpc.listen')",
                 cfg->grpc_listen);
        goto fail;
    }
    grpc_server_start(s->server);
    for (int i = 0; i < ARMED_REQUESTS; i++)
        arm_request(s);
    s->nthreads = cfg->grpc_threads;
    s->threads = calloc((size_t)s->nthreads, sizeof(pthread_t));
    if (!s->threads)
        abort();
    for (int i = 0; i < s->nthreads; i++) {
        if (pthread_create(&s->threads[i], NULL, cq_main, s) != 0)
            abort(); /* out of threads at start: nothing would serve gRPC */
        pthread_setname_np(s->threads[i], "ks:grpc-cq");
    }
    if (pthread_create(&s->health_thread, NULL, health_main, s) != 0)
        abort();
    pthread_setname_np(s->health_thread, "ks:grpc-health");
    ks_info(LOGC, "listening on %s (port %d%s)", cfg->grpc_listen, s->port,
            tls ? (*cfg->tls_client_ca_file ? ", mTLS" : ", TLS") : "");
    return s;

fail:
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(s->cq);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->tls_lock);
    free(s);
    grpc_shutdown();
    return NULL;
}

int ks_grpc_port(const ks_grpc_t *g)
{
    return g->port;
}

static bool pick_produce_wait(call_t *c, const void *arg)
{
    return grpc_produce_waits_locked(c) || (arg && c->prod);
}

/* Produces waiting for the registry are answered UNAVAILABLE, before every call is cancelled;
 * up to a second for their answers to go. */
static void stop_produce_waits(ks_grpc_t *s)
{
    call_t *todo[64];
    size_t n;
    do {
        n = pick_calls(s, pick_produce_wait, NULL, todo, 64);
        for (size_t i = 0; i < n; i++) {
            grpc_produce_stop_wait(todo[i]);
            call_unref(todo[i]);
        }
    } while (n == 64);
    for (int i = 0; i < 100; i++) {
        n = pick_calls(s, pick_produce_wait, s, todo, 64);
        for (size_t k = 0; k < n; k++)
            call_unref(todo[k]);
        if (!n)
            break;
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
}

static void on_shutdown_done(void *ctx, bool ok)
{
    atomic_store((atomic_bool *)ctx, true);
}

void ks_grpc_stop(ks_grpc_t *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, true);
    pthread_join(s->health_thread, NULL);
    stop_produce_waits(s);
    atomic_bool done;
    atomic_init(&done, false);
    ev_t ev = {on_shutdown_done, &done};
    grpc_server_shutdown_and_notify(s->server, s->cq, &ev);
    grpc_server_cancel_all_calls(s->server);
    for (int i = 0; i < 500 && !atomic_load(&done); i++) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    grpc_completion_queue_destroy(s->cq);
    free(s->threads);
    free(s->peers);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->tls_lock);
    free(s);
    grpc_shutdown();
}
