/* grpc_produce.c: Producer/Produce: a request's records to the engine's produce command, and
 * the answer. A record may carry its key or value as JSON with a schema from the registry
 * (codec/schema_enc.h): it is written in the wire format, or refused on its own (its result's
 * error and code) while the others are written. A schema the registry is fetching holds the
 * call: the request is kept packed, the registry's wake posts a reply (call_reply) and the
 * request is decoded again on a completion-queue thread. Nothing here waits. */
#include "edge.h"
#include "grpc_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_enc.h"
#include "util.h"

/* One record's fate: refused here (st, msg) or sent as the engine's result sent_i. */
typedef struct grec {
    ks_status_t st;
    char msg[512];
    size_t sent_i;
} grec_t;

/* A Produce that names schemas, from its first decode until its answer (c->prod). */
struct gprod {
    size_t n; /* records in the request */
    grec_t *rec;
    ProtobufCBinaryData held; /* the request, packed, while the registry fetches */
    bool armed;               /* a registry answer posts a reply (under c->lock) */
    bool waiting;             /* its last pass ended waiting for the registry (under c->lock) */
    bool again; /* an answer came while a pass ran: that pass, if it must wait, goes again */
};

/* What the registry's wake posts: not an engine result. */
static char schema_ready;

static void gprod_free(gprod_t *g)
{
    if (!g)
        return;
    free(g->held.data);
    free(g->rec);
    free(g);
}

/* The engine's answer (the producer's thread): only stored. */
static void on_produced(ks_produce_result_t *res, size_t n, void *opaque)
{
    call_reply(opaque, res, n, NULL);
}

/* The registry's answer for one of c's schemas (the registry's thread): posts a reply once
 * per armed pass that ended waiting, with the pass's reference on c. While a pass runs it only
 * marks it (again): two passes never run at once, and an answer that came after the pass
 * looked at its schema is not lost. */
static void on_schema(void *ctx)
{
    call_t *c = ctx;
    pthread_mutex_lock(&c->lock);
    bool post = c->prod && c->prod->armed && c->prod->waiting;
    if (post)
        c->prod->armed = c->prod->waiting = false;
    else if (c->prod && c->prod->armed)
        c->prod->again = true;
    pthread_mutex_unlock(&c->lock);
    if (post)
        call_reply(c, NULL, 0, &schema_ready);
}

/* Ends a pass that does not wait: forgets c's wakes in the registry and drops the pass's
 * reference unless a wake took it. Returns whether it dropped it. */
static bool disarm(call_t *c)
{
    ks_registry_t *reg = ks_codec_registry();
    if (reg)
        ks_registry_cancel(reg, c);
    pthread_mutex_lock(&c->lock);
    bool armed = c->prod->armed;
    c->prod->armed = false;
    pthread_mutex_unlock(&c->lock);
    if (armed)
        call_unref(c); /* not the last: the decode runs under another */
    return armed;
}

/* Whether c, closed or its server stopping, is answered without another pass. Locked by
 * caller. */
static bool gone_locked(const call_t *c)
{
    return c->closed || atomic_load(&c->s->stopping);
}

/* The answer of a produce that waited for the registry when its client left or the server
 * stopped; g is no longer c->prod. */
static void abandon(call_t *c, gprod_t *g)
{
    ks_registry_t *reg = ks_codec_registry();
    if (reg)
        ks_registry_cancel(reg, c);
    call_finish(c, GRPC_STATUS_UNAVAILABLE,
                "ksidecar is shutting down: a schema this produce names was still being fetched "
                "from the schema registry; no record was sent");
    gprod_free(g);
}

bool grpc_produce_waits_locked(const call_t *c)
{
    return c->prod && c->prod->armed && c->prod->waiting;
}

void grpc_produce_stop_wait(call_t *c)
{
    pthread_mutex_lock(&c->lock);
    bool post = grpc_produce_waits_locked(c);
    if (post)
        c->prod->armed = c->prod->waiting = false;
    pthread_mutex_unlock(&c->lock);
    if (post) /* with the pass's reference, as a wake; the encoder answers */
        call_reply(c, NULL, 0, &schema_ready);
}

/* Reads what JSON and pick give for record i's key or value (field) into *data, *len (a buffer
 * added to bufs), or refuses the record in g, or counts it pending. Returns false after
 * finishing c for a request that is not well formed. */
static bool encode_field(call_t *c, gprod_t *g, size_t i, const char *field, const char *json,
                         const char *type, ks_schema_pick_t *pick, const void **data, size_t *len,
                         void **bufs, size_t *nb, size_t *pending)
{
    char what[64], err[512];
    snprintf(what, sizeof(what), "records[%zu].%s", i, field);
    if (!pick->version || !*pick->version)
        pick->version = "latest";
    if (!*pick->subject)
        pick->subject = NULL;
    if (!*pick->schema)
        pick->schema = NULL;
    int t = *type ? ks_schema_type_from_str(type) : KS_SCHEMA_AVRO;
    if (t < 0 || (*type && !pick->schema)) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT,
                    "%s_schema_type must be \"AVRO\", \"JSON\" or \"PROTOBUF\", with %s_schema",
                    what, what);
        return false;
    }
    pick->type = (ks_schema_type_t)t;
    if (ks_schema_pick_check(pick, what, err, sizeof(err))) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
        return false;
    }
    json_error_t je;
    json_t *v = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) {
        call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "%s_json is not JSON: %s (at byte %d)", what,
                    je.text, je.position);
        return false;
    }
    ks_registry_wake_t wake = {.fn = on_schema, .ctx = c};
    grec_t *gr = &g->rec[i];
    char *out;
    if (ks_schema_encode_rec(field, pick, v, &wake, &out, len, &gr->st, gr->msg, sizeof(gr->msg)) ==
        KS_SENC_PENDING)
        (*pending)++;
    else if (out)
        *data = bufs[(*nb)++] = out;
    json_decref(v);
    return true;
}

/* Whether record p gives its key (key: true) or value as JSON with a schema. */
static bool has_pick(const Ksidecar__V1__ProduceRecord *p, bool key)
{
    return key ? p->key_schema_id || *p->key_subject || *p->key_json || *p->key_schema
               : p->value_schema_id || *p->value_subject || *p->value_json || *p->value_schema;
}

static void answer(call_t *c, gprod_t *g, ks_produce_result_t *res, size_t n);

/* r's records to the engine: those g refused stay out (g NULL: none named a schema). */
static void submit(call_t *c, Ksidecar__V1__ProduceRequest *r, gprod_t *g, ks_produce_rec_t *recs)
{
    size_t sent = 0;
    for (size_t i = 0; i < r->n_records; i++)
        if (!g || g->rec[i].st == KS_OK) {
            if (g)
                g->rec[i].sent_i = sent;
            recs[sent++] = recs[i];
        }
    if (sent == 0) { /* every record refused: the answer is whole */
        pthread_mutex_lock(&c->lock);
        c->prod = NULL;
        pthread_mutex_unlock(&c->lock);
        call_ref(c);
        answer(c, g, NULL, 0);
        return;
    }
    ks_cmd_req_t cmd = {
        .type = c->row->cmd,
        .u.produce = {
            .recs = recs, .n = sent, .cb = on_produced, .opaque = c, .timeout_ms = r->timeout_ms}};
    if (grpc_submit(c, &cmd) && g) {
        pthread_mutex_lock(&c->lock);
        c->prod = NULL;
        pthread_mutex_unlock(&c->lock);
        gprod_free(g);
    }
}

/* One pass over r: the records to the engine, or, while a schema is being fetched, r kept
 * for the next pass. */
static void produce_pass(call_t *c, Ksidecar__V1__ProduceRequest *r)
{
    size_t nh = 0, picks = 0;
    for (size_t i = 0; i < r->n_records; i++) {
        nh += r->records[i]->n_headers;
        picks += has_pick(r->records[i], true) + has_pick(r->records[i], false);
    }
    ks_produce_rec_t *recs = calloc(r->n_records + 1, sizeof(*recs));
    ks_header_t *hs = calloc(nh + 1, sizeof(*hs));
    void **bufs = calloc(2 * r->n_records + 1, sizeof(*bufs));
    if (!recs || !hs || !bufs)
        abort();
    size_t h = 0, nb = 0, pending = 0;
    gprod_t *g = c->prod;
    if (picks && !g) {
        if (!(g = calloc(1, sizeof(*g))) || !(g->rec = calloc(r->n_records + 1, sizeof(*g->rec))))
            abort();
        g->n = r->n_records;
        pthread_mutex_lock(&c->lock);
        c->prod = g;
        pthread_mutex_unlock(&c->lock);
    } else if (g)
        memset(g->rec, 0, g->n * sizeof(*g->rec));
    if (g) {
        call_ref(c); /* the pass's: a wake takes it to its reply */
        pthread_mutex_lock(&c->lock);
        g->armed = true;
        g->waiting = g->again = false;
        pthread_mutex_unlock(&c->lock);
    }
    bool ok = true;
    for (size_t i = 0; ok && i < r->n_records; i++) {
        Ksidecar__V1__ProduceRecord *p = r->records[i];
        recs[i].topic = p->topic;
        recs[i].partition = p->has_partition ? p->partition : -1;
        recs[i].key = p->key_null ? NULL : p->key.data ? p->key.data : (const void *)"";
        recs[i].key_len = p->key.len;
        recs[i].value = p->value_null ? NULL : p->value.data ? p->value.data : (const void *)"";
        recs[i].value_len = p->value.len;
        recs[i].headers = &hs[h];
        recs[i].header_cnt = p->n_headers;
        for (size_t k = 0; k < p->n_headers; k++, h++) {
            hs[h].name = p->headers[k]->key;
            hs[h].value = p->headers[k]->value.data ? p->headers[k]->value.data : (const void *)"";
            hs[h].value_len = p->headers[k]->value.len;
        }
        ks_schema_pick_t kp = {p->key_schema_id, p->key_subject, p->key_schema_version,
                               p->key_schema, KS_SCHEMA_AVRO};
        ks_schema_pick_t vp = {p->value_schema_id, p->value_subject, p->value_schema_version,
                               p->value_schema, KS_SCHEMA_AVRO};
        if (has_pick(p, true))
            ok = encode_field(c, g, i, "key", p->key_json, p->key_schema_type, &kp, &recs[i].key,
                              &recs[i].key_len, bufs, &nb, &pending);
        if (ok && has_pick(p, false))
            ok = encode_field(c, g, i, "value", p->value_json, p->value_schema_type, &vp,
                              &recs[i].value, &recs[i].value_len, bufs, &nb, &pending);
    }
    if (g && (!ok || !pending))
        disarm(c);
    if (!ok) { /* the call is finished */
        pthread_mutex_lock(&c->lock);
        c->prod = NULL;
        pthread_mutex_unlock(&c->lock);
        gprod_free(g);
    } else if (pending) { /* on_schema posts the next pass */
        if (!g->held.data) {
            g->held.len = protobuf_c_message_get_packed_size(&r->base);
            if (!(g->held.data = malloc(g->held.len + 1)))
                abort();
            protobuf_c_message_pack(&r->base, g->held.data);
        }
        pthread_mutex_lock(&c->lock);
        bool gone = gone_locked(c), again = !gone && g->again && g->armed;
        if (again) /* a schema came during the pass: another, with the pass's reference */
            g->armed = g->again = false;
        else
            g->waiting = !gone;
        pthread_mutex_unlock(&c->lock);
        if (again)
            call_reply(c, NULL, 0, &schema_ready);
        else if (gone && disarm(c)) { /* else a wake's reply is on its way: its encoder answers */
            pthread_mutex_lock(&c->lock);
            c->prod = NULL;
            pthread_mutex_unlock(&c->lock);
            abandon(c, g);
        }
    } else
        submit(c, r, g, recs);
    for (size_t i = 0; i < nb; i++)
        free(bufs[i]);
    free(bufs);
    free(recs);
    free(hs);
}

void grpc_produce_decode(call_t *c, ProtobufCMessage *m)
{
    Ksidecar__V1__ProduceRequest *r = (Ksidecar__V1__ProduceRequest *)m;
    bool ok = true;
    for (size_t i = 0; ok && i < r->n_records; i++)
        ok = grpc_scoped(c, KS_SCOPE_PRODUCE, "produce to",
                         (const char *const *)&r->records[i]->topic, 1);
    if (ok)
        produce_pass(c, r);
}

/* The ProduceResponse: g's refusals and the engine's results res[0..n) in the request's
 * order. Frees res and g; drops the reference the answer came with. */
static void answer(call_t *c, gprod_t *g, ks_produce_result_t *res, size_t n)
{
    size_t late = ks_produce_timed_out(res, n), total = g ? g->n : n;
    if (late) {
        call_finish(c, GRPC_STATUS_DEADLINE_EXCEEDED,
                    "%zu of %zu records had no delivery report within the produce's timeout_ms; "
                    "they may still be written to Kafka (it retries them up to "
                    "kafka.message.timeout.ms): produce them again only if duplicates are "
                    "acceptable",
                    late, n);
        goto out;
    }
    Ksidecar__V1__ProduceResult *rs = calloc(total + 1, sizeof(*rs));
    Ksidecar__V1__ProduceResult **rp = calloc(total + 1, sizeof(*rp));
    char(*codes)[48] = calloc(total + 1, sizeof(*codes));
    if (!rs || !rp || !codes)
        abort();
    for (size_t i = 0; i < total; i++) {
        ksidecar__v1__produce_result__init(&rs[i]);
        rp[i] = &rs[i];
        if (g && g->rec[i].st) {
            rs[i].error = g->rec[i].msg;
            snprintf(codes[i], sizeof(codes[i]), "%s", ks_status_name(g->rec[i].st));
            rs[i].code = codes[i];
            continue;
        }
        ks_produce_result_t *x = &res[g ? g->rec[i].sent_i : i];
        rs[i].partition = x->partition;
        rs[i].offset = x->offset;
        rs[i].error = x->error;
        if (x->error[0])
            snprintf(codes[i], sizeof(codes[i]), "%s", x->code[0] ? x->code : "UNKNOWN");
        rs[i].code = codes[i];
    }
    Ksidecar__V1__ProduceResponse pr = KSIDECAR__V1__PRODUCE_RESPONSE__INIT;
    pr.n_results = total;
    pr.results = rp;
    call_send(c, &pr.base);
    call_finish(c, GRPC_STATUS_OK, "%s", "");
    free(rs);
    free(rp);
    free(codes);
out:
    free(res);
    gprod_free(g);
    call_unref(c);
}

void grpc_produce_encode(call_t *c, const reply_t *r)
{
    pthread_mutex_lock(&c->lock);
    gprod_t *g = c->prod;
    bool gone = r->ctx == &schema_ready && gone_locked(c);
    if (r->ctx != &schema_ready || gone)
        c->prod = NULL; /* the engine's answer, or no more passes: the last use */
    pthread_mutex_unlock(&c->lock);
    if (gone) {
        abandon(c, g);
        call_unref(c); /* the wake's */
        return;
    }
    if (r->ctx != &schema_ready) {
        answer(c, g, r->res, r->n);
        return;
    }
    /* A schema is in: the request again. */
    Ksidecar__V1__ProduceRequest *req =
        ksidecar__v1__produce_request__unpack(NULL, g->held.len, g->held.data);
    produce_pass(c, req); /* g->held stays valid: only the last pass frees it */
    ksidecar__v1__produce_request__free_unpacked(req, NULL);
    call_unref(c); /* the wake's */
}
