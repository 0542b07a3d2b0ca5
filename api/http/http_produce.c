/* http_produce.c: POST /v1/topics/{topic}/records: a JSON body decoded into the engine's
 * produce command, each record's topic checked on its own, and the engine's callback. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge.h"
#include "http_int.h"
#include "util.h"

/* What one decode holds until the command is submitted: the records, their headers and the
 * base64 buffers their bytes point into. */
typedef struct {
    ks_produce_rec_t *recs;
    ks_header_t *hdrs;
    void **bufs;
    size_t buf_cnt;
    char where[64]; /* "records[3]": the record an error names */
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

static const char *const rec_fields[] = {"key",     "key_encoding", "value", "value_encoding",
                                         "headers", "partition",    "topic", NULL};
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
    if (!http_only_fields(r, o, what, rec_fields,
                          "key, key_encoding, value, value_encoding, headers, partition, topic",
                          ret))
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
    if (!read_bytes(r, d, o, what, "key", "key_encoding", &p->key, &p->key_len, ret) ||
        !read_bytes(r, d, o, what, "value", "value_encoding", &p->value, &p->value_len, ret))
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
        pr->st = ks_edge_check_topics(h->eng, h->auth, r->who, KS_SCOPE_PRODUCE, "produce to",
                                      &d->recs[i].topic, 1, pr->msg, sizeof(pr->msg));
        if (pr->st == KS_OK) {
            pr->sent_i = sent;
            d->recs[sent++] = d->recs[i];
        }
    }
    return sent;
}

http_ret_t http_produce_decode(ks_http_t *h, req_t *r)
{
    const char *topic = r->param;
    http_ret_t ret = HTTP_RET_OK;
    json_t *root =
        /* A text value may hold \u0000, as a fetch writes it; names are checked
         * (http_json_name). */
        http_body_json(h, r, "{\"records\":[{\"key\":\"...\",\"value\":\"...\"}]}", JSON_ALLOW_NUL,
                       &ret);
    if (!root)
        return ret;
    decode_t d = {0};
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
    nb = 2 * n + nh; /* at most a key and a value per record, a value per header */
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
    decode_free(&d);
    json_decref(root);
    return ret;
}
