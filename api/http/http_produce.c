/* http_produce.c: POST /v1/topics/{topic}/records: a JSON body decoded into the engine's
 * produce command, each record's topic checked on its own, and the engine's callback. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge.h"
#include "http_int.h"
#include "schema_enc.h"
#include "util.h"

/* What one decode holds until the command is submitted: the records, their headers and the
 * base64 buffers their bytes point into. */
typedef struct {
    ks_produce_rec_t *recs;
    ks_header_t *hdrs;
    void **bufs;
    size_t buf_cnt;
    char where[64]; /* "records[3]": the record an error names */
    size_t pending; /* keys and values waiting for a schema from the registry */
    size_t picks;   /* keys and values given with a schema */
} decode_t;

static void decode_free(decode_t *d)
{
    for (size_t i = 0; i < d->buf_cnt; i++)
        free(d->bufs[i]);
    free(d->bufs);
    free(d->recs);
    free(d->hdrs);
}

/* The engine's answer (the producer's thread): only stored. */
static void on_produced(ks_produce_result_t *res, size_t n, void *opaque)
{
    req_t *r = opaque;
    r->u.produce.res = res;
    http_wake(&r->io);
}

/* Reads o[field], a string or null (absent: null), in the encoding o[enc_field] names ("text",
 * the default, or "base64") into *data and *len (NULL: null). Returns false after queueing a 400
 * naming what is wrong. */
static bool read_bytes(req_t *r, decode_t *d, json_t *o, const char *what, const char *field,
                       const char *enc_field, const void **data, size_t *len, http_ret_t *ret)
{
    json_t *v = json_object_get(o, field), *e = json_object_get(o, enc_field);
    const char *enc = e ? json_string_value(e) : "text";
    if (!enc || (strcmp(enc, "text") && strcmp(enc, "base64"))) {
        *ret = http_send_error(r, KS_E_INVALID, "%s.%s must be \"text\" or \"base64\"", what,
                               enc_field);
        return false;
    }
    *data = NULL;
    *len = 0;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_string(v)) {
        *ret = http_send_error(r, KS_E_INVALID, "%s.%s must be a string or null", what, field);
        return false;
    }
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (!strcmp(enc, "text")) {
        *data = s;
        *len = n;
        return true;
    }
    unsigned char *b = ks_b64_decode(s, n, len);
    if (!b) {
        *ret = http_send_error(
            r, KS_E_INVALID, "%s.%s is not valid base64 (standard alphabet, padded)", what, field);
        return false;
    }
    d->bufs[d->buf_cnt++] = b;
    *data = b;
    return true;
}

static const char *const rec_fields[] = {"key_schema",
                                         "key_schema_type",
                                         "value_schema",
                                         "value_schema_type",
                                         "key",
                                         "key_encoding",
                                         "key_schema_id",
                                         "key_subject",
                                         "key_schema_version",
                                         "value",
                                         "value_encoding",
                                         "value_schema_id",
                                         "value_subject",
                                         "value_schema_version",
                                         "headers",
                                         "partition",
                                         "topic",
                                         NULL};
#define REC_FIELDS                                                                                 \
    "key, key_encoding, key_schema_id, key_subject, key_schema_version, value, value_encoding, "   \
    "value_schema_id, value_subject, value_schema_version, key_schema, key_schema_type, "          \
    "value_schema, value_schema_type, headers, partition, topic"

/* The registry's answer for a record of r is in (the registry's thread): wakes r once if its
 * decode waits for it; a later one, or one for a pass that did not wait, is dropped. */
static void on_schema(void *ctx)
{
    req_t *r = ctx;
    pthread_mutex_lock(&r->io.lock);
    bool armed = r->u.produce.schema_armed;
    r->u.produce.schema_armed = false;
    pthread_mutex_unlock(&r->io.lock);
    if (armed)
        http_wake(&r->io); /* drops the reference the pass took */
}

/* Reads o's <field>_schema_id, <field>_subject and <field>_schema_version into pick. Returns
 * 1 when there is none, 0 with pick, or -1 after queueing a 400. */
static int read_pick(req_t *r, decode_t *d, json_t *o, const char *what, const char *field,
                     ks_schema_pick_t *pick, char *ver, size_t versize, http_ret_t *ret)
{
    char k[32], name[96], err[256];
    snprintf(k, sizeof(k), "%s_schema_id", field);
    json_t *id = json_object_get(o, k);
    snprintf(k, sizeof(k), "%s_subject", field);
    json_t *subj = json_object_get(o, k);
    snprintf(k, sizeof(k), "%s_schema_version", field);
    json_t *v = json_object_get(o, k);
    snprintf(k, sizeof(k), "%s_schema", field);
    json_t *sch = json_object_get(o, k);
    snprintf(k, sizeof(k), "%s_schema_type", field);
    json_t *sty = json_object_get(o, k);
    if (!id && !subj && !v && !sch && !sty)
        return 1;
    *pick = (ks_schema_pick_t){.version = "latest"};
    const char *tname = sty ? json_string_value(sty) : "AVRO";
    int type = tname ? ks_schema_type_from_str(tname) : -1;
    pick->type = type < 0 ? KS_SCHEMA_AVRO : (ks_schema_type_t)type;
    if (json_is_string(sch))
        pick->schema = json_string_value(sch);
    else if (json_is_object(sch) || json_is_array(sch))
        pick->schema = d->bufs[d->buf_cnt++] = json_dumps(sch, JSON_COMPACT);
    if (id)
        pick->id =
            json_is_integer(id) && json_integer_value(id) > 0 && json_integer_value(id) <= INT32_MAX
                ? (int32_t)json_integer_value(id)
                : -1;
    if (subj)
        pick->subject = json_is_string(subj) ? json_string_value(subj) : "";
    if (json_is_integer(v))
        snprintf(ver, versize, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else
        snprintf(ver, versize, "%s", v ? json_is_string(v) ? json_string_value(v) : "" : "latest");
    pick->version = ver;
    snprintf(name, sizeof(name), "%s.%s", what, field);
    if (v && !subj)
        snprintf(err, sizeof(err), "%s_schema_version goes with %s_subject only", name, name);
    else if (sch && !pick->schema)
        snprintf(err, sizeof(err), "%s_schema must be the schema: a string, or its JSON", name);
    else if (sty && (type < 0 || !sch))
        snprintf(err, sizeof(err),
                 "%s_schema_type must be \"AVRO\", \"JSON\" or \"PROTOBUF\", with %s_schema", name,
                 name);
    else if (json_object_get(o, (snprintf(k, sizeof(k), "%s_encoding", field), k)))
        snprintf(err, sizeof(err),
                 "%s_encoding goes without a schema: the %s is JSON, written with the schema", name,
                 field);
    else if (ks_schema_pick_check(pick, name, err, sizeof(err)) == 0)
        return 0;
    *ret = http_send_error(r, KS_E_INVALID, "%s", err);
    return -1;
}

/* A key or value given as JSON with a schema: written in the wire format into a buffer of d's
 * (*data, *len), or the record refused (pr) with why, or counted in d->pending. Returns false
 * after queueing a 400 for a pick that is not well formed; true when there is no pick, with
 * *has false. */
static bool read_schema_value(req_t *r, decode_t *d, json_t *o, const char *what, const char *field,
                              http_produce_rec_t *pr, const void **data, size_t *len, bool *has,
                              http_ret_t *ret)
{
    ks_schema_pick_t pick;
    char ver[32];
    int rc = read_pick(r, d, o, what, field, &pick, ver, sizeof(ver), ret);
    *has = rc == 0;
    if (rc)
        return rc > 0;
    d->picks++;
    json_t *v = json_object_get(o, field);
    ks_registry_wake_t wake = {.fn = on_schema, .ctx = r};
    char *out;
    if (ks_schema_encode_rec(field, &pick, v ? v : json_null(), &wake, &out, len, &pr->st, pr->msg,
                             sizeof(pr->msg)) == KS_SENC_PENDING)
        d->pending++;
    else if (out)
        *data = d->bufs[d->buf_cnt++] = out;
    return true;
}

static const char *const hdr_fields[] = {"key", "value", "value_encoding", NULL};

/* Decodes record i of the body (o) into d->recs[i], its headers from d->hdrs[*h]. */
static bool read_record(req_t *r, decode_t *d, json_t *o, size_t i, const char *topic, size_t *h,
                        http_ret_t *ret)
{
    char *what = d->where;
    snprintf(what, sizeof(d->where), "records[%zu]", i);
    if (!json_is_object(o)) {
        *ret = http_send_error(r, KS_E_INVALID, "%s must be an object", what);
        return false;
    }
    if (!http_only_fields(r, o, what, rec_fields, REC_FIELDS, ret))
        return false;
    ks_produce_rec_t *p = &d->recs[i];
    p->topic = topic;
    p->partition = -1;
    json_t *t = json_object_get(o, "topic"), *part = json_object_get(o, "partition");
    char name[160];
    snprintf(name, sizeof(name), "%s.topic", what);
    if (t && !(p->topic = http_json_name(r, t, name, ret)))
        return false;
    if (part) {
        json_int_t pv = json_is_integer(part) ? json_integer_value(part) : -1;
        if (pv < 0 || pv > INT32_MAX) {
            *ret = http_send_error(r, KS_E_INVALID, "%s.partition must be an integer from 0 to %d",
                                   what, INT32_MAX);
            return false;
        }
        p->partition = (int32_t)pv;
    }
    http_produce_rec_t *pr = &r->u.produce.prod->rec[i];
    bool key_schema, value_schema;
    if (!read_schema_value(r, d, o, what, "key", pr, &p->key, &p->key_len, &key_schema, ret) ||
        !read_schema_value(r, d, o, what, "value", pr, &p->value, &p->value_len, &value_schema,
                           ret) ||
        (!key_schema &&
         !read_bytes(r, d, o, what, "key", "key_encoding", &p->key, &p->key_len, ret)) ||
        (!value_schema &&
         !read_bytes(r, d, o, what, "value", "value_encoding", &p->value, &p->value_len, ret)))
        return false;
    json_t *hs = json_object_get(o, "headers");
    if (hs && !json_is_array(hs)) {
        *ret = http_send_error(r, KS_E_INVALID, "%s.headers must be an array", what);
        return false;
    }
    p->headers = &d->hdrs[*h];
    p->header_cnt = json_array_size(hs);
    for (size_t k = 0; k < p->header_cnt; k++, (*h)++) {
        json_t *ho = json_array_get(hs, k);
        char hw[96];
        snprintf(hw, sizeof(hw), "%s.headers[%zu]", what, k);
        if (!json_is_object(ho)) {
            *ret = http_send_error(r, KS_E_INVALID, "%s must be an object", hw);
            return false;
        }
        if (!http_only_fields(r, ho, hw, hdr_fields, "key, value, value_encoding", ret))
            return false;
        ks_header_t *hd = &d->hdrs[*h];
        snprintf(name, sizeof(name), "%s.key", hw);
        if (!(hd->name = http_json_name(r, json_object_get(ho, "key"), name, ret)) ||
            !read_bytes(r, d, ho, hw, "value", "value_encoding", &hd->value, &hd->value_len, ret))
            return false;
    }
    return true;
}

/* Checks each record's topic (valid, not internal, in the caller's produce scope) as gRPC
 * Produce does, but as that record's own answer: refused ones stay out of the command. Moves
 * the records to send to the front of d->recs. Returns how many are left. */
static size_t refuse_records(ks_http_t *h, req_t *r, decode_t *d, size_t n)
{
    size_t sent = 0;
    for (size_t i = 0; i < n; i++) {
        http_produce_rec_t *pr = &r->u.produce.prod->rec[i];
        if (pr->st != KS_OK)
            continue; /* its key or value did not fit its schema */
        pr->st = ks_edge_check_topics(h->eng, h->auth, r->who, KS_SCOPE_PRODUCE, "produce to",
                                      &d->recs[i].topic, 1, pr->msg, sizeof(pr->msg));
        if (pr->st == KS_OK) {
            pr->sent_i = sent;
            d->recs[sent++] = d->recs[i];
        }
    }
    return sent;
}

/* Arms on_schema for a decode pass: a registry answer that comes during the pass or after
 * it wakes r, with the reference taken here. */
static void schema_arm(req_t *r)
{
    pthread_mutex_lock(&r->io.lock);
    r->io.done = false;
    r->u.produce.schema_armed = true;
    pthread_mutex_unlock(&r->io.lock);
    http_req_ref(&r->io);
}

/* Ends a pass that does not wait for the registry: forgets r's wakes in the registry (cancel:
 * some were registered) and drops the pass's reference unless a wake took it. */
static void schema_disarm(req_t *r, bool cancel)
{
    ks_registry_t *reg = ks_codec_registry();
    if (cancel && reg)
        ks_registry_cancel(reg, r);
    pthread_mutex_lock(&r->io.lock);
    bool armed = r->u.produce.schema_armed;
    r->u.produce.schema_armed = false;
    r->io.done = false; /* a wake's: the engine's answer is waited for next */
    pthread_mutex_unlock(&r->io.lock);
    if (armed)
        http_req_unref(&r->io); /* not the last: the server holds one */
}

/* Lists r among the produces parked for the registry, unless the server stops. */
static bool wait_list(ks_http_t *h, req_t *r)
{
    pthread_mutex_lock(&h->schema_lock);
    bool ok = !h->schema_stopping;
    if (ok && !r->u.produce.listed) {
        r->u.produce.listed = true;
        r->u.produce.wait_prev = NULL;
        r->u.produce.wait_next = h->schema_waits;
        if (h->schema_waits)
            h->schema_waits->u.produce.wait_prev = r;
        h->schema_waits = r;
    }
    pthread_mutex_unlock(&h->schema_lock);
    return ok;
}

static void wait_unlist(ks_http_t *h, req_t *r)
{
    pthread_mutex_lock(&h->schema_lock);
    if (r->u.produce.listed) {
        req_t *p = r->u.produce.wait_prev, *n = r->u.produce.wait_next;
        if (p)
            p->u.produce.wait_next = n;
        else
            h->schema_waits = n;
        if (n)
            n->u.produce.wait_prev = p;
        r->u.produce.listed = false;
    }
    pthread_mutex_unlock(&h->schema_lock);
}

void http_produce_completed(req_t *r)
{
    wait_unlist(r->h, r);
    if (r->u.produce.schema_wait)
        schema_disarm(r, true);
}

void http_produce_stop_waits(ks_http_t *h)
{
    /* Disarmed under the list's lock, woken outside it (resuming takes libmicrohttpd's lock):
     * the reference each pass took keeps its request until its wake drops it. */
    req_t **todo = NULL;
    size_t n = 0;
    pthread_mutex_lock(&h->schema_lock);
    h->schema_stopping = true;
    for (req_t *r = h->schema_waits; r; r = r->u.produce.wait_next) {
        pthread_mutex_lock(&r->io.lock);
        bool armed = r->u.produce.schema_armed;
        r->u.produce.schema_armed = false;
        pthread_mutex_unlock(&r->io.lock);
        if (!armed)
            continue;
        if (!(todo = realloc(todo, (n + 1) * sizeof(*todo))))
            abort();
        todo[n++] = r;
    }
    pthread_mutex_unlock(&h->schema_lock);
    for (size_t i = 0; i < n; i++)
        http_wake(&todo[i]->io);
    free(todo);
}

/* A produce that waited for the registry while the server stops: 503, its wakes forgotten. */
static http_ret_t stop_answer(req_t *r)
{
    schema_disarm(r, true);
    r->u.produce.schema_wait = false;
    return http_send_error(r, KS_E_UNAVAILABLE,
                           "ksidecar is shutting down: a schema this produce names was still being "
                           "fetched from the schema registry; no record was sent");
}

/* One pass over the body: answered (a 400, every record refused), submitted and parked, or,
 * with *wait, waiting for the registry (armed; the caller parks). */
static http_ret_t decode_pass(ks_http_t *h, req_t *r, bool *wait)
{
    const char *topic = r->param;
    http_ret_t ret = HTTP_RET_OK;
    *wait = false;
    if (r->u.produce.prod) { /* a pass before waited for the registry: start again */
        free(r->u.produce.prod->rec);
        free(r->u.produce.prod);
        r->u.produce.prod = NULL;
    }
    json_t *root =
        /* A text value may hold \u0000, as a fetch writes it; names are checked
         * (http_json_name). */
        http_body_json(h, r, "{\"records\":[{\"key\":\"...\",\"value\":\"...\"}]}", JSON_ALLOW_NUL,
                       &ret);
    if (!root)
        return ret;
    decode_t d = {0};
    schema_arm(r);
    bool armed = true;
    json_t *recs = json_object_get(root, "records");
    static const char *const top[] = {"records", "timeout_ms", NULL};
    if (!json_is_object(root) || !json_is_array(recs)) {
        ret = http_send_error(r, KS_E_INVALID,
                              "body must be {\"records\":[...]}, an array of records");
        goto out;
    }
    if (!http_only_fields(r, root, "body", top, "records, timeout_ms", &ret))
        goto out;
    json_t *to = json_object_get(root, "timeout_ms");
    json_int_t timeout_ms = to && json_is_integer(to) ? json_integer_value(to) : 0;
    if (to && (!json_is_integer(to) || timeout_ms < 1 || timeout_ms > KS_PRODUCE_TIMEOUT_MAX_MS)) {
        ret = http_send_error(r, KS_E_INVALID,
                              "timeout_ms must be an integer from 1 to %d (milliseconds; absent: "
                              "produce.timeout_ms, %d)",
                              KS_PRODUCE_TIMEOUT_MAX_MS, h->cfg->produce_timeout_ms);
        goto out;
    }
    size_t n = json_array_size(recs), nh = 0, nb = 0;
    if (n == 0 || n > (size_t)h->cfg->http_max_produce_records) {
        ret = http_send_error(r, KS_E_INVALID,
                              "records holds %zu records; give 1 to %d "
                              "(http.max_produce_records)",
                              n, h->cfg->http_max_produce_records);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *hs = json_object_get(json_array_get(recs, i), "headers");
        nh += json_array_size(hs);
    }
    nb = 4 * n + nh; /* at most a key, a value and their schemas per record, a value per header */
    d.recs = calloc(n, sizeof(*d.recs));
    d.hdrs = calloc(nh + 1, sizeof(*d.hdrs));
    d.bufs = calloc(nb, sizeof(*d.bufs));
    http_produce_t *prod = r->u.produce.prod = calloc(1, sizeof(*prod));
    if (!d.recs || !d.hdrs || !d.bufs || !prod ||
        !(prod->rec = calloc(n, sizeof(http_produce_rec_t))))
        abort();
    prod->n = n;
    size_t hi = 0;
    for (size_t i = 0; i < n; i++)
        if (!read_record(r, &d, json_array_get(recs, i), i, topic, &hi, &ret))
            goto out;
    if (d.pending) { /* the registry's answer wakes r (on_schema) */
        r->u.produce.schema_wait = *wait = true;
        armed = false;
        goto out;
    }
    r->u.produce.schema_wait = false;
    schema_disarm(r, d.picks > 0);
    armed = false;
    size_t sent = refuse_records(h, r, &d, n);
    if (sent == 0) { /* every record refused: the answer is already whole */
        ret = http_reply_produce(r);
        goto out;
    }
    ks_cmd_req_t cmd = {.u.produce = {.recs = d.recs,
                                      .n = sent,
                                      .cb = on_produced,
                                      .opaque = r,
                                      .timeout_ms = (int)timeout_ms}};
    ret = http_submit_park(h, r, &cmd); /* the producer copies the records */
out:
    if (armed)
        schema_disarm(r, d.picks > 0);
    decode_free(&d);
    json_decref(root);
    return ret;
}

http_ret_t http_produce_decode(ks_http_t *h, req_t *r)
{
    bool wait;
    http_ret_t ret;
    /* A pass waits only while a schema is being fetched; each wake is a fetch settled. */
    while ((ret = decode_pass(h, r, &wait)) == HTTP_RET_OK && wait) {
        if (!wait_list(h, r))
            return stop_answer(r);
        if (!http_park(&r->io))
            return HTTP_RET_OK; /* resumed by on_schema: http_produce_reply */
        wait_unlist(h, r);
    }
    return ret;
}

http_ret_t http_produce_reply(req_t *r)
{
    wait_unlist(r->h, r);
    if (r->u.produce.schema_wait) {
        pthread_mutex_lock(&r->h->schema_lock);
        bool stopping = r->h->schema_stopping;
        pthread_mutex_unlock(&r->h->schema_lock);
        return stopping ? stop_answer(r) : http_produce_decode(r->h, r);
    }
    return http_reply_produce(r);
}
