/* grpc_wire.c: the gRPC edge's wire format by hand where protobuf-c costs too much: the
 * record and ack-result encoders, and the fast decoder of the stream's acks. */
#include "edge.h"
#include "grpc_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

grpc_byte_buffer *grpc_pack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice sl = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(sl));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

/* Copies a received message into one contiguous slice. Caller unrefs. */
grpc_slice grpc_flatten(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return grpc_empty_slice();
    grpc_slice sl = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return sl;
}

/* ---- a direct encoder for record batches ----
 * The hot path: a batch of thousands of records would cost two protobuf-c passes
 * (size, then pack) over a tree of views. This writes the same wire format
 * (SubscribeResponse.batch / FetchResponse.records) in one sizing pass and one
 * writing pass, straight from the engine's records. */

static size_t vlen(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *vput(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Size of a length-delimited field with tag < 16 and payload n. */
static size_t ld_size(size_t n)
{
    return 1 + vlen(n) + n;
}

static uint8_t *ld_put(uint8_t *p, unsigned field, const void *data, size_t n)
{
    *p++ = (uint8_t)(field << 3 | 2);
    p = vput(p, n);
    memcpy(p, data, n);
    return p + n;
}

static size_t header_size(const ks_header_t *h)
{
    size_t n = 0, kl = strlen(h->name);
    if (kl)
        n += ld_size(kl);
    if (h->value_len)
        n += ld_size(h->value_len);
    if (!h->value)
        n += 2;
    return n;
}

/* r's size on the wire, its key and value as the codec shows them (v). */
static size_t record_size(const ks_record_t *r, const ks_codec_view_t *v, size_t ack_id_len)
{
    size_t n = ld_size(strlen(r->topic));
    if (r->partition)
        n += 1 + vlen((uint64_t)(int64_t)r->partition);
    if (r->offset)
        n += 1 + vlen((uint64_t)r->offset);
    if (r->timestamp)
        n += 1 + vlen((uint64_t)r->timestamp);
    if (v->key_len)
        n += ld_size(v->key_len);
    if (!v->key)
        n += 2;
    if (v->value_len)
        n += ld_size(v->value_len);
    if (!v->value)
        n += 2;
    for (size_t h = 0; h < r->header_cnt; h++)
        n += ld_size(header_size(&r->headers[h]));
    n += ld_size(ack_id_len);
    if (r->attempt)
        n += 1 + vlen((uint64_t)(int64_t)r->attempt);
    if (r->ordering_chain)
        n += 1 + vlen(r->ordering_chain);
    return n;
}

static uint8_t *record_put(uint8_t *p, const ks_record_t *r, const ks_codec_view_t *v, size_t size,
                           const char *ack_id, size_t ack_id_len)
{
    *p++ = 1 << 3 | 2; /* RecordBatch.records / FetchResponse.records: field 1 */
    p = vput(p, size);
    p = ld_put(p, 1, r->topic, strlen(r->topic));
    if (r->partition) {
        *p++ = 2 << 3;
        p = vput(p, (uint64_t)(int64_t)r->partition);
    }
    if (r->offset) {
        *p++ = 3 << 3;
        p = vput(p, (uint64_t)r->offset);
    }
    if (r->timestamp) {
        *p++ = 4 << 3;
        p = vput(p, (uint64_t)r->timestamp);
    }
    if (v->key_len)
        p = ld_put(p, 5, v->key, v->key_len);
    if (!v->key) {
        *p++ = 6 << 3;
        *p++ = 1;
    }
    if (v->value_len)
        p = ld_put(p, 7, v->value, v->value_len);
    if (!v->value) {
        *p++ = 8 << 3;
        *p++ = 1;
    }
    for (size_t h = 0; h < r->header_cnt; h++) {
        const ks_header_t *hd = &r->headers[h];
        *p++ = 9 << 3 | 2;
        p = vput(p, header_size(hd));
        size_t kl = strlen(hd->name);
        if (kl)
            p = ld_put(p, 1, hd->name, kl);
        if (hd->value_len)
            p = ld_put(p, 2, hd->value, hd->value_len);
        if (!hd->value) {
            *p++ = 3 << 3;
            *p++ = 1;
        }
    }
    p = ld_put(p, 10, ack_id, ack_id_len);
    if (r->attempt) {
        *p++ = 11 << 3;
        p = vput(p, (uint64_t)(int64_t)r->attempt);
    }
    if (r->ordering_chain) {
        *p++ = 12 << 3;
        p = vput(p, r->ordering_chain);
    }
    return p;
}

/* A key or value decoded in a schema format (Record.key_decoded, value_decoded): offsets into
 * the batch's scratch buffer. */
typedef struct decoded {
    bool set;
    int32_t id;
    const char *fmt;
    size_t json_off, json_len, err_off, err_len;
} decoded_t;

/* Decodes data[0..len) as format f (1 + ks_rec_format_t; binary: nothing) into d, its text
 * into sb. */
static void decode_into(decoded_t *d, ks_jbuf_t *sb, uint8_t f, const void *data, size_t len)
{
    *d = (decoded_t){0};
    if (!f || f - 1 == KS_FMT_BINARY || !data)
        return;
    char err[512];
    ks_schema_type_t type = KS_SCHEMA_AVRO;
    size_t off = sb->len;
    if (!ks_codec_schema_decode(sb, data, len, (ks_rec_format_t)(f - 1), &d->id, &type, err,
                                sizeof(err))) {
        d->json_off = off;
        d->json_len = sb->len - off;
        d->fmt = ks_schema_format_str(type);
    } else if (f - 1 == KS_FMT_AUTO && d->id < 0) {
        return; /* not in the wire format: auto shows bytes alone */
    } else {
        d->err_off = sb->len;
        d->err_len = strlen(err);
        ks_jbuf_raw(sb, err, d->err_len);
    }
    if (d->id < 0)
        d->id = 0;
    d->set = true;
}

static size_t decoded_inner(const decoded_t *d)
{
    return (d->json_len ? ld_size(d->json_len) : 0) + (d->fmt ? ld_size(strlen(d->fmt)) : 0) +
           (d->id ? 1 + vlen((uint64_t)(int64_t)d->id) : 0) +
           (d->err_len ? ld_size(d->err_len) : 0);
}

static size_t decoded_size(const decoded_t *d)
{
    return d->set ? ld_size(decoded_inner(d)) : 0;
}

static uint8_t *decoded_put(uint8_t *p, unsigned field, const decoded_t *d, const char *sb)
{
    if (!d->set)
        return p;
    *p++ = (uint8_t)(field << 3 | 2);
    p = vput(p, decoded_inner(d));
    if (d->json_len)
        p = ld_put(p, 1, sb + d->json_off, d->json_len);
    if (d->fmt)
        p = ld_put(p, 2, d->fmt, strlen(d->fmt));
    if (d->id) {
        *p++ = 3 << 3;
        p = vput(p, (uint64_t)(int64_t)d->id);
    }
    if (d->err_len)
        p = ld_put(p, 4, sb + d->err_off, d->err_len);
    return p;
}

/* Encodes b's records as a FetchResponse, or (wrap) as SubscribeResponse{batch}, their keys
 * and values as the codec shows them in o's formats (NULL: the defaults); keys and values in a
 * schema format also decoded, into key_decoded and value_decoded. */
grpc_byte_buffer *encode_records_as(const ks_batch_t *b, bool wrap, const ks_codec_opts_t *o)
{
    ks_codec_opts_t oo = {0};
    if (o)
        ks_codec_opts_for(&oo, o, b);
    bool schema = o && (oo.key_schema - 1 != KS_FMT_BINARY || oo.value_schema - 1 != KS_FMT_BINARY);
    decoded_t *dec = NULL;
    ks_jbuf_t sb = {0};
    if (schema) {
        dec = malloc(2 * b->cnt * sizeof(*dec) + 1);
        if (!dec)
            abort();
        ks_jbuf_init(&sb, 256);
        for (size_t i = 0; i < b->cnt; i++) {
            const ks_record_t *r = &b->recs[i];
            decode_into(&dec[2 * i], &sb, oo.key_schema, r->key, r->key_len);
            decode_into(&dec[2 * i + 1], &sb, oo.value_schema, r->value, r->value_len);
        }
    }
    /* Per record: its size and its ack id, written out here (not on the group loop). */
    size_t *sizes = malloc((2 * b->cnt + 1) * sizeof(size_t));
    size_t idcap = 1024, idlen = 0;
    char *ids = malloc(idcap);
    if (!sizes || !ids)
        abort();
    size_t body = 0;
    ks_ack_id_writer_t w;
    ks_ack_id_writer_init(&w);
    for (size_t i = 0; i < b->cnt; i++) {
        if (idlen + KS_ACK_ID_MAX > idcap) {
            idcap = 2 * idcap + KS_ACK_ID_MAX;
            ids = realloc(ids, idcap);
            if (!ids)
                abort();
        }
        size_t al = ks_record_ack_id_put(&w, &b->recs[i], ids + idlen, KS_ACK_ID_MAX);
        idlen += al;
        sizes[2 * i + 1] = al;
        ks_codec_view_t v;
        ks_codec_view(&b->recs[i], o, &v);
        sizes[2 * i] = record_size(&b->recs[i], &v, al);
        if (dec)
            sizes[2 * i] += decoded_size(&dec[2 * i]) + decoded_size(&dec[2 * i + 1]);
        body += 1 + vlen(sizes[2 * i]) + sizes[2 * i];
    }
    size_t total = wrap ? 1 + vlen(body) + body : body;
    grpc_slice sl = grpc_slice_malloc(total);
    uint8_t *p = GRPC_SLICE_START_PTR(sl);
    if (wrap) {
        *p++ = 1 << 3 | 2; /* SubscribeResponse.batch */
        p = vput(p, body);
    }
    const char *id = ids;
    for (size_t i = 0; i < b->cnt; i++) {
        ks_codec_view_t v;
        ks_codec_view(&b->recs[i], o, &v);
        p = record_put(p, &b->recs[i], &v, sizes[2 * i], id, sizes[2 * i + 1]);
        if (dec) {
            p = decoded_put(p, 13, &dec[2 * i], sb.p);
            p = decoded_put(p, 14, &dec[2 * i + 1], sb.p);
        }
        id += sizes[2 * i + 1];
    }
    free(dec);
    if (schema)
        ks_jbuf_free(&sb);
    free(sizes);
    free(ids);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

bool grpc_schema_formats(const char *value_format, const char *key_format, ks_codec_opts_t *o,
                         char *err, size_t errsize)
{
    const char *names[2] = {value_format, key_format}, *fields[2] = {"value_format", "key_format"};
    uint8_t *outs[2] = {&o->value_schema, &o->key_schema};
    for (int i = 0; i < 2; i++) {
        *outs[i] = 0;
        if (!names[i] || !*names[i])
            continue;
        int f = ks_rec_format_from_str(names[i]);
        if (f < 0) {
            snprintf(err, errsize, "%s must be " KS_REC_FORMAT_NAMES ", got \"%s\"", fields[i],
                     names[i]);
            return false;
        }
        *outs[i] = (uint8_t)(1 + f);
    }
    return true;
}

grpc_byte_buffer *encode_records(const ks_batch_t *b, bool wrap)
{
    return encode_records_as(b, wrap, NULL);
}

/* ---- ack results ---- */

Ksidecar__V1__AckStatus ack_status_of(ks_status_t st)
{
    switch (st) {
    case KS_OK:
        return KSIDECAR__V1__ACK_STATUS__ACCEPTED;
    case KS_E_INVALID:
        return KSIDECAR__V1__ACK_STATUS__INVALID;
    case KS_E_NOT_FOUND:
        return KSIDECAR__V1__ACK_STATUS__NOT_FOUND;
    default:
        return KSIDECAR__V1__ACK_STATUS__STALE;
    }
}

Ksidecar__V1__AckStatus ack_result_status(const ks_ack_result_t *r)
{
    switch (r->commit) {
    case KS_COMMIT_COMMITTED:
        return KSIDECAR__V1__ACK_STATUS__COMMITTED;
    case KS_COMMIT_LOST:
        return KSIDECAR__V1__ACK_STATUS__LOST_TO_REBALANCE;
    case KS_COMMIT_FAILED:
        return KSIDECAR__V1__ACK_STATUS__COMMIT_FAILED;
    case KS_COMMIT_ACCEPTED:
    case KS_COMMIT_NONE:
        break;
    }
    return ack_status_of(r->status);
}

/* Encodes SubscribeResponse{ack_results} straight to the wire format, like
 * encode_records: a stream acking every record gets one result per record, and
 * protobuf-c's generic pack of the nested messages cost ~700 instructions each. On a
 * stream an accepted ack needs no words: its status says it. */
static const char *ack_result_msg(const ks_ack_result_t *r)
{
    bool says = r->status != KS_OK || r->commit == KS_COMMIT_LOST || r->commit == KS_COMMIT_FAILED;
    return says && r->reason ? r->reason : "";
}

/* A waited ack's second result carries the commit point (AckResult.committed_offset; a 0
 * left out, as proto3 does). */
static size_t ack_result_size(size_t al, const ks_ack_result_t *r, size_t ml)
{
    int st = ack_result_status(r);
    return ld_size(al) + (st ? 1 + vlen((uint64_t)st) : 0) + (ml ? ld_size(ml) : 0) +
           (r->commit && r->committed_offset ? 1 + vlen((uint64_t)r->committed_offset) : 0);
}

/* One AckResult (its id al bytes, its position pos, written when by position) at p, or only
 * its size when p is NULL. Returns the end, or the size. */
static size_t ack_result_put(uint8_t **pp, const char *id, const ks_ack_result_t *r, size_t pos,
                             bool by_position)
{
    const char *msg = ack_result_msg(r);
    size_t al = strlen(id), ml = strlen(msg);
    int st = ack_result_status(r);
    size_t inner = ack_result_size(al, r, ml) + (by_position && pos ? 1 + vlen(pos) : 0);
    if (!pp)
        return ld_size(inner);
    uint8_t *p = *pp;
    *p++ = 1 << 3 | 2; /* AckResults.results */
    p = vput(p, inner);
    p = ld_put(p, 1, id, al);
    if (st) {
        *p++ = 2 << 3;
        p = vput(p, (uint64_t)st);
    }
    if (ml)
        p = ld_put(p, 3, msg, ml);
    if (r->commit && r->committed_offset) {
        *p++ = 4 << 3;
        p = vput(p, (uint64_t)r->committed_offset);
    }
    if (by_position && pos) {
        *p++ = 5 << 3;
        p = vput(p, pos);
    }
    *pp = p;
    return 0;
}

/* The results, all (each with its id), or by position: the quiet ones only counted. Writes
 * at *pp, or sizes them when pp is NULL; *accepted gets the count left out. */
static size_t ack_results_put(uint8_t **pp, const settle_ctx_t *x, const ks_ack_result_t *res,
                              size_t *accepted)
{
    size_t body = 0, quiet = 0;
    ks_edge_ack_walk_t w;
    ks_edge_ack_walk_init(&w, (const char *const *)x->ids, x->n, x->nres);
    while (ks_edge_ack_walk_next(&w) && w.j < x->nres) {
        if (x->by_position && ks_edge_ack_quiet(&res[w.j])) {
            quiet++;
            continue;
        }
        body += ack_result_put(pp, ks_edge_ack_walk_id(&w), &res[w.j], w.pos, x->by_position);
    }
    *accepted = quiet;
    return body;
}

grpc_byte_buffer *encode_ack_results(const settle_ctx_t *x, const ks_ack_result_t *res)
{
    size_t accepted;
    size_t body = ack_results_put(NULL, x, res, &accepted);
    if (x->by_position && accepted)
        body += 1 + vlen(accepted);
    size_t total = ld_size(body);
    grpc_slice sl = grpc_slice_malloc(total);
    uint8_t *p = GRPC_SLICE_START_PTR(sl);
    *p++ = 4 << 3 | 2; /* SubscribeResponse.ack_results */
    p = vput(p, body);
    ack_results_put(&p, x, res, &accepted);
    if (x->by_position && accepted) {
        *p++ = 2 << 3; /* AckResults.accepted */
        p = vput(p, accepted);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

/* Reads a varint at *p. False when it runs past end or past 64 bits. */
bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Reads a length prefix as protobuf-c does: a varint of at most 5 bytes (protobuf-c refuses
 * a longer one, however small its value, and the fast path must refuse what it refuses). */
static bool read_len(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    const uint8_t *start = *p;
    return read_varint(p, end, v) && *p - start <= 5;
}

/* The stream's usual message, SubscribeRequest{ack: AckIds{ack_ids}}, read in place into
 * one block of ids, as ks_strv_pack makes it: protobuf-c allocated every id, then the
 * ids were copied again. Any other shape, or an id with a byte outside printable ASCII
 * (no ack id has one), returns NULL, and protobuf-c reads the message as before. */
char **grpc_fast_ack_ids(grpc_slice sl, size_t *n_out, bool *by_position)
{
    const uint8_t *p = GRPC_SLICE_START_PTR(sl), *end = p + GRPC_SLICE_LENGTH(sl);
    uint64_t len;
    if (p == end || *p++ != (2 << 3 | 2) || !read_len(&p, end, &len) || len != (uint64_t)(end - p))
        return NULL;
    size_t n = 0, bytes = 0;
    *by_position = false;
    for (const uint8_t *q = p; q < end;) {
        uint64_t l;
        if (*q == (4 << 3)) { /* AckIds.results_by_position */
            /* One byte, 0 or 1, as every encoder writes a bool; anything longer goes to
             * protobuf-c, which reads a bool as any nonzero bit (a 10-byte varint whose
             * bits fall past 64 read 0 here and true there). */
            if (++q >= end || *q > 1)
                return NULL;
            *by_position = *q++;
            continue;
        }
        if (*q++ != (1 << 3 | 2) || !read_len(&q, end, &l) || l > (uint64_t)(end - q))
            return NULL;
        for (uint64_t i = 0; i < l; i++)
            if (q[i] < 0x20 || q[i] > 0x7e)
                return NULL;
        q += l;
        n++;
        bytes += l + 1;
    }
    if (n == 0)
        return NULL;
    char **v = malloc(n * sizeof(char *) + bytes);
    if (!v)
        abort();
    char *s = (char *)(v + n);
    for (size_t i = 0; p < end;) {
        uint64_t l = 0;
        if (*p++ == (4 << 3)) {
            read_varint(&p, end, &l);
            continue;
        }
        read_varint(&p, end, &l);
        memcpy(s, p, l);
        s[l] = '\0';
        v[i++] = s;
        s += l + 1;
        p += l;
    }
    *n_out = n;
    return v;
}
