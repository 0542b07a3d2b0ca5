/* commit_meta.c: encodes and decodes commit metadata ("ks1:" + base64url of varints + CRC-32). */
#include "commit_meta.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_LEN  4 /* strlen(KS_COMMIT_META_PREFIX) */
#define CRC_LEN     4
#define VARINT_MAX  9 /* 9 x 7 bits = 63 bits: every value up to INT64_MAX */
#define MIN_PAYLOAD 7 /* three one-byte varints and the CRC */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Returns crc updated with byte b (CRC-32/IEEE, reflected, polynomial 0xEDB88320, without the
 * initial and final inversion, which the callers apply). Cannot fail. */
static uint32_t crc32_byte(uint32_t crc, unsigned char b)
{
    crc ^= b;
    for (int i = 0; i < 8; i++)
        crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    return crc;
}

/* Returns the number of base64url characters (no padding) for n bytes. Cannot fail; the
 * caller keeps n small enough not to overflow. */
static size_t b64_len(size_t n)
{
    return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
}

/* Returns the length of the text for a payload of n bytes (CRC included). Cannot fail. */
static size_t text_len(size_t n)
{
    return PREFIX_LEN + b64_len(n);
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding */

/* A payload sink: counts the bytes, and when out is set also CRCs them and writes them out as
 * base64url. It never owns out. */
typedef struct writer {
    char *out;     /* where the base64url text goes; NULL to count only */
    size_t nbytes; /* payload bytes put so far */
    size_t pos;    /* characters written to out so far */
    uint32_t crc;  /* running CRC (not inverted) of the bytes that go through put_crced */
    unsigned char grp[3];
    unsigned ngrp; /* bytes waiting in grp */
} writer_t;

/* Writes the ngrp (1..3) bytes of grp as 2..4 characters. Returns nothing; cannot fail. */
static void flush_group(writer_t *w)
{
    uint32_t v = (uint32_t)w->grp[0] << 16 | (uint32_t)w->grp[1] << 8 | w->grp[2];
    for (unsigned i = 0; i <= w->ngrp; i++)
        w->out[w->pos++] = b64_alphabet[(v >> (18 - 6 * i)) & 63];
    w->ngrp = 0;
    memset(w->grp, 0, sizeof(w->grp));
}

/* Puts one raw payload byte. Returns nothing; cannot fail (the caller sized out). */
static void put_raw(writer_t *w, unsigned char b)
{
    w->nbytes++;
    if (!w->out)
        return;
    w->grp[w->ngrp++] = b;
    if (w->ngrp == 3)
        flush_group(w);
}

/* Puts one payload byte that the CRC covers. Returns nothing; cannot fail. */
static void put_crced(writer_t *w, unsigned char b)
{
    if (w->out)
        w->crc = crc32_byte(w->crc, b);
    put_raw(w, b);
}

/* Puts v (<= INT64_MAX) as an unsigned LEB128 varint. Returns nothing; cannot fail. */
static void put_varint(writer_t *w, uint64_t v)
{
    while (v >= 0x80) {
        put_crced(w, (unsigned char)(v | 0x80));
        v >>= 7;
    }
    put_crced(w, (unsigned char)v);
}

/* Puts the payload of the first na acks and nt attempt entries of m, CRC included. In counting
 * mode (w->out NULL) this only sizes it. m must be valid. Returns nothing; cannot fail. */
static void put_payload(const ks_commit_meta_t *m, size_t na, size_t nt, writer_t *w)
{
    put_varint(w, (uint64_t)m->commit_offset);

    size_t runs = 0;
    for (size_t i = 0; i < na; i++)
        if (i == 0 || m->acked[i] != m->acked[i - 1] + 1)
            runs++;
    put_varint(w, runs);
    int64_t prev = m->commit_offset;
    for (size_t i = 0; i < na;) {
        size_t j = i + 1;
        while (j < na && m->acked[j] == m->acked[j - 1] + 1)
            j++;
        put_varint(w, (uint64_t)m->acked[i] - (uint64_t)prev);
        put_varint(w, j - i);
        prev = m->acked[j - 1];
        i = j;
    }

    /* Attempts go as runs of consecutive offsets with equal counts: a block of records
     * delivered once costs a few bytes, however long. */
    runs = 0;
    for (size_t i = 0; i < nt; i++)
        if (i == 0 || m->attempts[i].offset != m->attempts[i - 1].offset + 1 ||
            m->attempts[i].attempts != m->attempts[i - 1].attempts)
            runs++;
    put_varint(w, runs);
    prev = m->commit_offset;
    for (size_t i = 0; i < nt;) {
        size_t j = i + 1;
        while (j < nt && m->attempts[j].offset == m->attempts[j - 1].offset + 1 &&
               m->attempts[j].attempts == m->attempts[i].attempts)
            j++;
        put_varint(w, (uint64_t)m->attempts[i].offset - (uint64_t)prev);
        put_varint(w, j - i);
        put_varint(w, m->attempts[i].attempts);
        prev = m->attempts[j - 1].offset;
        i = j;
    }

    uint32_t crc = ~w->crc;
    for (int i = 0; i < CRC_LEN; i++)
        put_raw(w, (unsigned char)(crc >> (8 * i)));
}

/* Returns the payload size in bytes (CRC included) of the first na acks and nt attempt entries
 * of m, which must be valid. Cannot fail. */
static size_t payload_size(const ks_commit_meta_t *m, size_t na, size_t nt)
{
    writer_t w = {0};
    put_payload(m, na, nt, &w);
    return w.nbytes;
}

/* Returns true if m satisfies every invariant ks_commit_meta_encode documents. Cannot fail. */
static bool meta_valid(const ks_commit_meta_t *m)
{
    if (m->commit_offset < 0 || (m->acked_cnt && !m->acked) || (m->attempt_cnt && !m->attempts))
        return false;
    int64_t prev = m->commit_offset;
    for (size_t i = 0; i < m->acked_cnt; i++) {
        if (m->acked[i] <= prev)
            return false;
        prev = m->acked[i];
    }
    for (size_t i = 0; i < m->attempt_cnt; i++) {
        if (m->attempts[i].attempts < 1 || m->attempts[i].offset < m->commit_offset ||
            (i > 0 && m->attempts[i].offset <= m->attempts[i - 1].offset))
            return false;
    }
    return true;
}

/* Returns the number of distinct offsets among m's acks and attempt entries (both sorted).
 * Cannot fail. */
static size_t distinct_count(const ks_commit_meta_t *m)
{
    size_t i = 0, j = 0, n = 0;
    while (i < m->acked_cnt || j < m->attempt_cnt) {
        bool has_a = i < m->acked_cnt, has_t = j < m->attempt_cnt;
        int64_t a = has_a ? m->acked[i] : INT64_MAX;
        int64_t t = has_t ? m->attempts[j].offset : INT64_MAX;
        int64_t v = !has_t || (has_a && a <= t) ? a : t;
        if (has_a && a == v)
            i++;
        if (has_t && t == v)
            j++;
        n++;
    }
    return n;
}

/* Returns the k-th (from 0) smallest distinct offset among m's acks and attempt entries and
 * sets *na and *nt to how many acks and attempt entries lie below it; k must be below
 * distinct_count(m). Cannot fail. */
static int64_t distinct_at(const ks_commit_meta_t *m, size_t k, size_t *na, size_t *nt)
{
    size_t i = 0, j = 0;
    for (;;) {
        bool has_a = i < m->acked_cnt, has_t = j < m->attempt_cnt;
        int64_t a = has_a ? m->acked[i] : INT64_MAX;
        int64_t t = has_t ? m->attempts[j].offset : INT64_MAX;
        int64_t v = !has_t || (has_a && a <= t) ? a : t;
        if (k == 0) {
            *na = i;
            *nt = j;
            return v;
        }
        if (has_a && a == v)
            i++;
        if (has_t && t == v)
            j++;
        k--;
    }
}

/* Returns true if the first na acks and nt attempt entries of m fit in limit bytes of text
 * (NUL included) and within KS_COMMIT_META_MAX_ACKS. Cannot fail. */
static bool prefix_fits(const ks_commit_meta_t *m, size_t na, size_t nt, size_t limit)
{
    return na <= KS_COMMIT_META_MAX_ACKS && nt <= KS_COMMIT_META_MAX_ACKS &&
           text_len(payload_size(m, na, nt)) < limit;
}

int ks_commit_meta_encode(const ks_commit_meta_t *m, char *buf, size_t max_bytes,
                          int64_t *cut_offset)
{
    if (!buf || max_bytes == 0)
        return -1;
    buf[0] = '\0';
    if (!m || !meta_valid(m))
        return -1;
    /* The length is returned as an int. */
    size_t limit = max_bytes > (size_t)INT_MAX ? (size_t)INT_MAX : max_bytes;

    size_t na = m->acked_cnt, nt = m->attempt_cnt;
    int64_t cut = -1;
    if (!prefix_fits(m, na, nt, limit)) {
        /* Keep the k lowest distinct offsets, the largest k that fits: the size only grows
         * with k, so a binary search finds it. k = n is known not to fit. */
        size_t n = distinct_count(m);
        size_t lo = 0, hi = n; /* prefix(lo) fits if anything does; prefix(hi) does not */
        distinct_at(m, 0, &na, &nt);
        if (!prefix_fits(m, na, nt, limit))
            return -1;
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            distinct_at(m, mid, &na, &nt);
            if (prefix_fits(m, na, nt, limit))
                lo = mid;
            else
                hi = mid;
        }
        cut = distinct_at(m, lo, &na, &nt);
    }

    memcpy(buf, KS_COMMIT_META_PREFIX, PREFIX_LEN);
    writer_t w = {.out = buf, .pos = PREFIX_LEN, .crc = 0xFFFFFFFFu};
    put_payload(m, na, nt, &w);
    if (w.ngrp)
        flush_group(&w);
    buf[w.pos] = '\0';
    if (cut_offset)
        *cut_offset = cut;
    return (int)w.pos;
}

int ks_commit_meta_encode_fit(ks_commit_meta_t *m, char *buf, size_t max_bytes, int64_t *cut_offset)
{
    int64_t cut = -1;
    int len = ks_commit_meta_encode(m, buf, max_bytes, &cut);
    if (len >= 0 && cut >= 0) {
        size_t k = 0;
        for (size_t i = 0; i < m->attempt_cnt; i++)
            if (m->attempts[i].attempts > 1)
                m->attempts[k++] = m->attempts[i];
        if (k < m->attempt_cnt) {
            m->attempt_cnt = k;
            len = ks_commit_meta_encode(m, buf, max_bytes, &cut);
        }
    }
    if (len >= 0 && cut_offset)
        *cut_offset = cut;
    return len;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding */

/* Returns the 6-bit value of base64url character c, or -1 if c is not one. Cannot fail. */
static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

/* Decodes n base64url characters (no padding) at s into out, which the caller sizes for
 * n / 4 * 3 + 2 bytes and owns. Returns the number of bytes, or -1 if s holds a character
 * outside the alphabet, n % 4 == 1, or the unused low bits of the last character are not zero
 * (so every byte string has exactly one accepted text). */
static long b64_decode(const char *s, size_t n, unsigned char *out)
{
    if (n % 4 == 1)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        size_t k = n - i < 4 ? n - i : 4;
        uint32_t v = 0;
        for (size_t j = 0; j < 4; j++) {
            int d = j < k ? b64_value((unsigned char)s[i + j]) : 0;
            if (d < 0)
                return -1;
            v = v << 6 | (uint32_t)d;
        }
        if ((k == 2 && (v & 0xFFFF)) || (k == 3 && (v & 0xFF)))
            return -1;
        for (size_t j = 0; j + 1 < k; j++)
            out[o++] = (unsigned char)(v >> (16 - 8 * j));
    }
    return (long)o;
}

/* Reads an unsigned LEB128 varint from p[*pos..n) into *v and advances *pos. Returns 0, or -1
 * if it is truncated, longer than 9 bytes (beyond INT64_MAX) or overlong (a redundant final
 * zero byte). */
static int get_varint(const unsigned char *p, size_t n, size_t *pos, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned i = 0; i < VARINT_MAX; i++) {
        if (*pos >= n)
            return -1;
        unsigned char b = p[(*pos)++];
        x |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            if (b == 0 && i > 0)
                return -1;
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Validates the n payload bytes at p (CRC excluded) against commit_offset and sets *nacks and
 * *natt to the entry counts. If out is set, it also stores the entries into out->acked and
 * out->attempts, which the caller allocated for the counts a previous call returned. Returns 0,
 * or -1 if the payload is malformed or out of range. */
static int parse_payload(const unsigned char *p, size_t n, int64_t commit_offset,
                         ks_commit_meta_t *out, size_t *nacks, size_t *natt)
{
    size_t pos = 0;
    uint64_t v, cnt;
    if (get_varint(p, n, &pos, &v) < 0 || commit_offset < 0 || v != (uint64_t)commit_offset)
        return -1;

    /* Every run takes at least two bytes: this bounds the loop by the input. */
    if (get_varint(p, n, &pos, &cnt) < 0 || cnt > (n - pos) / 2)
        return -1;
    uint64_t prev = (uint64_t)commit_offset, total = 0;
    for (uint64_t r = 0; r < cnt; r++) {
        uint64_t gap, len;
        if (get_varint(p, n, &pos, &gap) < 0 || get_varint(p, n, &pos, &len) < 0)
            return -1;
        /* Runs are maximal: a gap of 1 after a run would have extended it. */
        if (gap < (r == 0 ? 1u : 2u) || gap > (uint64_t)INT64_MAX - prev)
            return -1;
        uint64_t start = prev + gap;
        if (len < 1 || len - 1 > (uint64_t)INT64_MAX - start ||
            len > KS_COMMIT_META_MAX_ACKS - total)
            return -1;
        if (out)
            for (uint64_t k = 0; k < len; k++)
                out->acked[total + k] = (int64_t)(start + k);
        total += len;
        prev = start + len - 1;
    }

    /* Every attempt run takes at least three bytes. */
    if (get_varint(p, n, &pos, &cnt) < 0 || cnt > (n - pos) / 3)
        return -1;
    prev = (uint64_t)commit_offset;
    uint64_t tot_att = 0, prev_att = 0;
    for (uint64_t r = 0; r < cnt; r++) {
        uint64_t delta, len, att;
        if (get_varint(p, n, &pos, &delta) < 0 || get_varint(p, n, &pos, &len) < 0 ||
            get_varint(p, n, &pos, &att) < 0)
            return -1;
        if ((r > 0 && delta < 1) || delta > (uint64_t)INT64_MAX - prev || att < 1 ||
            att > UINT32_MAX)
            return -1;
        /* Runs are maximal: an adjacent run with the same count would have extended it. */
        if (r > 0 && delta == 1 && att == prev_att)
            return -1;
        uint64_t start = prev + delta;
        if (len < 1 || len - 1 > (uint64_t)INT64_MAX - start ||
            len > KS_COMMIT_META_MAX_ACKS - tot_att)
            return -1;
        if (out)
            for (uint64_t k = 0; k < len; k++) {
                out->attempts[tot_att + k].offset = (int64_t)(start + k);
                out->attempts[tot_att + k].attempts = (uint32_t)att;
            }
        tot_att += len;
        prev = start + len - 1;
        prev_att = att;
    }

    if (pos != n)
        return -1;
    *nacks = (size_t)total;
    *natt = (size_t)tot_att;
    return 0;
}

int ks_commit_meta_decode(const char *text, size_t len, int64_t commit_offset,
                          ks_commit_meta_t *out)
{
    if (!out)
        return -1;
    memset(out, 0, sizeof(*out));
    if (!text || len < PREFIX_LEN || memcmp(text, KS_COMMIT_META_PREFIX, PREFIX_LEN) != 0)
        return -1;
    size_t nchars = len - PREFIX_LEN;
    if (nchars < b64_len(MIN_PAYLOAD))
        return -1;

    unsigned char *bin = malloc(nchars / 4 * 3 + 2);
    if (!bin)
        return -1;
    long got = b64_decode(text + PREFIX_LEN, nchars, bin);
    if (got < MIN_PAYLOAD)
        goto fail;
    size_t n = (size_t)got - CRC_LEN;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        crc = crc32_byte(crc, bin[i]);
    crc = ~crc;
    uint32_t stored = (uint32_t)bin[n] | (uint32_t)bin[n + 1] << 8 | (uint32_t)bin[n + 2] << 16 |
                      (uint32_t)bin[n + 3] << 24;
    if (crc != stored)
        goto fail;

    /* First validate and count, then allocate exactly, then fill. */
    size_t nacks, natt;
    if (parse_payload(bin, n, commit_offset, NULL, &nacks, &natt) < 0)
        goto fail;
    if (nacks && !(out->acked = malloc(nacks * sizeof(*out->acked))))
        goto fail;
    if (natt && !(out->attempts = malloc(natt * sizeof(*out->attempts))))
        goto fail;
    if (parse_payload(bin, n, commit_offset, out, &nacks, &natt) < 0)
        goto fail;
    out->commit_offset = commit_offset;
    out->acked_cnt = nacks;
    out->attempt_cnt = natt;
    free(bin);
    return 0;

fail:
    free(bin);
    ks_commit_meta_free(out);
    memset(out, 0, sizeof(*out));
    return -1;
}

void ks_commit_meta_free(ks_commit_meta_t *m)
{
    if (!m)
        return;
    free(m->acked);
    free(m->attempts);
    m->acked = NULL;
    m->attempts = NULL;
    m->acked_cnt = 0;
    m->attempt_cnt = 0;
}
