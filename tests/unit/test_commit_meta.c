/* test_commit_meta.c: tests the commit metadata codec (proxy/commit_meta.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commit_meta.h"

#define BIG 1000000 /* a max_bytes that fits everything these tests build */

/* ---- helpers ---------------------------------------------------------------------------- */

/* Returns the next value of a xorshift64* generator whose state is *s (never 0). */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Returns a value in [0, n) (n > 0). */
static uint64_t rnd_below(uint64_t *s, uint64_t n)
{
    return rnd(s) % n;
}

/* Asserts that a and b hold the same commit offset and entries. */
static void assert_meta_equal(const ks_commit_meta_t *a, const ks_commit_meta_t *b)
{
    assert_int_equal(a->commit_offset, b->commit_offset);
    assert_int_equal(a->acked_cnt, b->acked_cnt);
    assert_int_equal(a->attempt_cnt, b->attempt_cnt);
    for (size_t i = 0; i < a->acked_cnt; i++)
        assert_int_equal(a->acked[i], b->acked[i]);
    for (size_t i = 0; i < a->attempt_cnt; i++) {
        assert_int_equal(a->attempts[i].offset, b->attempts[i].offset);
        assert_int_equal(a->attempts[i].attempts, b->attempts[i].attempts);
    }
}

/* Asserts text is "ks1:" followed only by base64url characters. */
static void assert_well_formed(const char *text, size_t len)
{
    assert_true(len >= 4);
    assert_memory_equal(text, "ks1:", 4);
    for (size_t i = 4; i < len; i++) {
        char c = text[i];
        assert_true((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_');
    }
}

/* Encodes m with room for everything, checks the text, decodes it and compares. Returns the
 * text length. */
static int round_trip(const ks_commit_meta_t *m)
{
    char *buf = malloc(BIG);
    assert_non_null(buf);
    int64_t cut = 12345;
    int n = ks_commit_meta_encode(m, buf, BIG, &cut);
    assert_true(n > 0);
    assert_int_equal(cut, -1);
    assert_int_equal(strlen(buf), (size_t)n);
    assert_well_formed(buf, (size_t)n);

    ks_commit_meta_t d;
    assert_int_equal(ks_commit_meta_decode(buf, (size_t)n, m->commit_offset, &d), 0);
    assert_meta_equal(m, &d);
    ks_commit_meta_free(&d);
    free(buf);
    return n;
}

/* Returns the encoded length of m with unlimited room. */
static int full_len(const ks_commit_meta_t *m)
{
    char *buf = malloc(BIG);
    assert_non_null(buf);
    int64_t cut;
    int n = ks_commit_meta_encode(m, buf, BIG, &cut);
    assert_true(n > 0);
    assert_int_equal(cut, -1);
    free(buf);
    return n;
}

/* Returns a malloc'd copy of m's entries with offset < lim (all of them when lim < 0), owned
 * by the caller (free with ks_commit_meta_free). */
static ks_commit_meta_t meta_below(const ks_commit_meta_t *m, int64_t lim)
{
    ks_commit_meta_t r = {.commit_offset = m->commit_offset};
    r.acked = malloc((m->acked_cnt + 1) * sizeof(*r.acked));
    r.attempts = malloc((m->attempt_cnt + 1) * sizeof(*r.attempts));
    assert_non_null(r.acked);
    assert_non_null(r.attempts);
    for (size_t i = 0; i < m->acked_cnt; i++)
        if (lim < 0 || m->acked[i] < lim)
            r.acked[r.acked_cnt++] = m->acked[i];
    for (size_t i = 0; i < m->attempt_cnt; i++)
        if (lim < 0 || m->attempts[i].offset < lim)
            r.attempts[r.attempt_cnt++] = m->attempts[i];
    return r;
}

/* Encodes m into max_bytes and checks the cut contract: the text fits, decoding gives exactly
 * the entries below the cut, and the entries up to and including the cut offset would not have
 * fit (the kept part is maximal). Returns the cut offset. */
static int64_t check_cut(const ks_commit_meta_t *m, size_t max_bytes)
{
    char *buf = malloc(max_bytes);
    assert_non_null(buf);
    int64_t cut = 12345;
    int n = ks_commit_meta_encode(m, buf, max_bytes, &cut);
    assert_true(n > 0);
    assert_true((size_t)n < max_bytes);
    assert_int_equal(strlen(buf), (size_t)n);
    assert_well_formed(buf, (size_t)n);

    ks_commit_meta_t d;
    assert_int_equal(ks_commit_meta_decode(buf, (size_t)n, m->commit_offset, &d), 0);
    ks_commit_meta_t want = meta_below(m, cut);
    assert_meta_equal(&want, &d);
    ks_commit_meta_free(&want);
    ks_commit_meta_free(&d);

    if (cut >= 0) {
        /* The cut offset holds an entry, and keeping it too would not fit. */
        bool found = false;
        for (size_t i = 0; i < m->acked_cnt; i++)
            found |= m->acked[i] == cut;
        for (size_t i = 0; i < m->attempt_cnt; i++)
            found |= m->attempts[i].offset == cut;
        assert_true(found);
        ks_commit_meta_t more = meta_below(m, cut == INT64_MAX ? -1 : cut + 1);
        assert_true((size_t)full_len(&more) >= max_bytes);
        ks_commit_meta_free(&more);
    }
    free(buf);
    return cut;
}

/* Builds a random valid meta, owned by the caller (free with ks_commit_meta_free). */
static ks_commit_meta_t random_meta(uint64_t *s)
{
    ks_commit_meta_t m = {0};
    switch (rnd_below(s, 4)) {
    case 0:
        m.commit_offset = (int64_t)rnd_below(s, 100);
        break;
    case 1:
        m.commit_offset = (int64_t)rnd_below(s, 1ull << 40);
        break;
    case 2:
        m.commit_offset = INT64_MAX / 2 + (int64_t)rnd_below(s, 1000);
        break;
    default:
        m.commit_offset = INT64_MAX - 100000 - (int64_t)rnd_below(s, 1000);
        break;
    }
    size_t na = rnd_below(s, 5) == 0 ? 0 : (size_t)rnd_below(s, 300);
    size_t nt = rnd_below(s, 3) == 0 ? 0 : (size_t)rnd_below(s, 150);
    m.acked = malloc((na + 1) * sizeof(*m.acked));
    m.attempts = malloc((nt + 1) * sizeof(*m.attempts));
    assert_non_null(m.acked);
    assert_non_null(m.attempts);
    int64_t o = m.commit_offset;
    for (size_t i = 0; i < na; i++) {
        uint64_t k = rnd_below(s, 10);
        o += k < 6 ? 1 : k < 8 ? 2 : k < 9 ? (int64_t)rnd_below(s, 200) + 1 : 1;
        m.acked[m.acked_cnt++] = o;
    }
    /* Attempt counts from 1 up, often repeated over consecutive offsets so that runs form,
     * sometimes repeated across a gap (which must not merge). */
    o = m.commit_offset + (int64_t)rnd_below(s, 3);
    uint32_t att = 1;
    for (size_t i = 0; i < nt; i++) {
        if (i == 0 || rnd_below(s, 3) == 0) {
            switch (rnd_below(s, 4)) {
            case 0:
                att = 1;
                break;
            case 1:
                att = (uint32_t)rnd(s);
                att = att ? att : UINT32_MAX;
                break;
            default:
                att = 1 + (uint32_t)rnd_below(s, 10);
                break;
            }
        }
        m.attempts[m.attempt_cnt].offset = o;
        m.attempts[m.attempt_cnt].attempts = att;
        m.attempt_cnt++;
        o += rnd_below(s, 2) ? 1 : 1 + (int64_t)rnd_below(s, rnd_below(s, 2) ? 3 : 500);
    }
    return m;
}

/* ---- the independent payload builder used to craft inputs --------------------------------- */

typedef struct craft {
    unsigned char b[256];
    size_t n;
} craft_t;

static void craft_varint(craft_t *c, uint64_t v)
{
    while (v >= 0x80) {
        c->b[c->n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    c->b[c->n++] = (unsigned char)v;
}

static void craft_bytes(craft_t *c, const void *p, size_t n)
{
    memcpy(c->b + c->n, p, n);
    c->n += n;
}

/* Returns the CRC-32/IEEE of n bytes at p (table-free, independent of the module's). */
static uint32_t ref_crc32(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

/* Appends the CRC of c's bytes and writes "ks1:" + base64url of them into out (room for 512).
 * Returns the text length. */
static size_t craft_finish(craft_t *c, char *out)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint32_t crc = ref_crc32(c->b, c->n);
    for (int i = 0; i < 4; i++)
        c->b[c->n++] = (unsigned char)(crc >> (8 * i));
    size_t o = 0;
    memcpy(out, "ks1:", 4);
    o = 4;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < c->n; i++) {
        acc = acc << 8 | c->b[i];
        bits += 8;
        while (bits >= 6) {
            out[o++] = al[(acc >> (bits - 6)) & 63];
            bits -= 6;
        }
    }
    if (bits)
        out[o++] = al[(acc << (6 - bits)) & 63];
    out[o] = '\0';
    return o;
}

/* Returns the decode result of the crafted payload c against commit_offset. */
static int craft_decode(craft_t *c, int64_t commit_offset)
{
    char text[512];
    size_t n = craft_finish(c, text);
    ks_commit_meta_t d;
    int r = ks_commit_meta_decode(text, n, commit_offset, &d);
    if (r < 0) {
        assert_null(d.acked);
        assert_null(d.attempts);
        assert_int_equal(d.acked_cnt, 0);
        assert_int_equal(d.attempt_cnt, 0);
    }
    ks_commit_meta_free(&d);
    return r;
}

/* Decodes the crafted payload c against commit_offset into *d (which the caller frees),
 * asserting that it is accepted and that encoding the result gives back exactly the same
 * text (a valid payload is the canonical one). */
static void craft_decode_meta(craft_t *c, int64_t commit_offset, ks_commit_meta_t *d)
{
    char text[512];
    size_t n = craft_finish(c, text);
    assert_int_equal(ks_commit_meta_decode(text, n, commit_offset, d), 0);
    char again[512];
    int m = ks_commit_meta_encode(d, again, sizeof(again), NULL);
    assert_int_equal(m, (int)n);
    assert_string_equal(again, text);
}

/* ---- round trips -------------------------------------------------------------------------- */

static void test_empty(void **state)
{
    ks_commit_meta_t m = {.commit_offset = 0};
    round_trip(&m);
    m.commit_offset = 123456789;
    round_trip(&m);
    m.commit_offset = INT64_MAX;
    assert_true(round_trip(&m) < KS_COMMIT_META_MIN_BYTES);
}

static void test_single_ack(void **state)
{
    int64_t acked[] = {101};
    ks_commit_meta_t m = {.commit_offset = 100, .acked = acked, .acked_cnt = 1};
    round_trip(&m);
    acked[0] = 5000;
    round_trip(&m);
}

static void test_runs(void **state)
{
    int64_t acked[] = {11, 12, 13, 20, 21, 23, 30, 31, 32, 33, 34, 100};
    ks_commit_meta_t m = {.commit_offset = 10, .acked = acked, .acked_cnt = 12};
    round_trip(&m);
}

static void test_scattered(void **state)
{
    int64_t acked[] = {3, 17, 1000, 1002, 99999, 1000000007};
    ks_commit_meta_t m = {.commit_offset = 0, .acked = acked, .acked_cnt = 6};
    round_trip(&m);
}

static void test_attempts_only(void **state)
{
    ks_meta_attempt_t at[] = {{50, 2}, {51, 7}, {60, UINT32_MAX}, {1000, 3}};
    ks_commit_meta_t m = {.commit_offset = 50, .attempts = at, .attempt_cnt = 4};
    round_trip(&m);

    /* Attempts 1 is valid; runs of equal counts, equal counts across a gap, a count change
     * inside a block of consecutive offsets. */
    ks_meta_attempt_t once[] = {{50, 1}};
    m.attempts = once;
    m.attempt_cnt = 1;
    round_trip(&m);
    ks_meta_attempt_t runs[] = {{50, 1}, {51, 1}, {52, 1}, {53, 2}, {54, 2}, {56, 2},
                                {57, 1}, {58, 1}, {59, 3}, {60, 1}, {61, 1}, {99, 1}};
    m.attempts = runs;
    m.attempt_cnt = sizeof(runs) / sizeof(runs[0]);
    round_trip(&m);
}

static void test_both(void **state)
{
    int64_t acked[] = {42, 43, 44, 50, 51};
    ks_meta_attempt_t at[] = {{41, 2}, {44, 3}, {45, 9}, {51, 2}};
    ks_commit_meta_t m = {
        .commit_offset = 41, .acked = acked, .acked_cnt = 5, .attempts = at, .attempt_cnt = 4};
    round_trip(&m);
    ks_meta_attempt_t at1[] = {{41, 1}, {42, 1}, {43, 1}, {44, 1}, {45, 1}, {46, 4}, {51, 1}};
    m.attempts = at1;
    m.attempt_cnt = 7;
    round_trip(&m);
}

static void test_large_offsets(void **state)
{
    int64_t c = INT64_MAX / 2;
    int64_t acked[] = {c + 1, c + 2, c + 3, c + 1000, c + 1000000};
    ks_meta_attempt_t at[] = {{c, 2}, {c + 5, 4}};
    ks_commit_meta_t m = {
        .commit_offset = c, .acked = acked, .acked_cnt = 5, .attempts = at, .attempt_cnt = 2};
    round_trip(&m);

    /* The very top of the range. */
    int64_t top[] = {INT64_MAX - 2, INT64_MAX - 1, INT64_MAX};
    ks_meta_attempt_t tat[] = {{INT64_MAX - 3, 2}, {INT64_MAX - 1, 1}, {INT64_MAX, 1}};
    ks_commit_meta_t t = {.commit_offset = INT64_MAX - 3,
                          .acked = top,
                          .acked_cnt = 3,
                          .attempts = tat,
                          .attempt_cnt = 3};
    round_trip(&t);
    /* A gap spanning almost all of it. */
    int64_t far[] = {INT64_MAX};
    ks_commit_meta_t f = {.commit_offset = 0, .acked = far, .acked_cnt = 1};
    round_trip(&f);
}

static void test_format(void **state)
{
    int64_t acked[] = {8, 9, 10};
    ks_commit_meta_t m = {.commit_offset = 7, .acked = acked, .acked_cnt = 3};
    char buf[64];
    int64_t cut;
    int n = ks_commit_meta_encode(&m, buf, sizeof(buf), &cut);
    assert_true(n > 4);
    assert_well_formed(buf, (size_t)n);
    assert_null(strchr(buf, '='));

    /* The text is exactly what the independent builder makes of the documented layout. */
    craft_t c = {.n = 0};
    craft_varint(&c, 7);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 3);
    craft_varint(&c, 0);
    char want[512];
    craft_finish(&c, want);
    assert_string_equal(buf, want);

    /* cut_offset may be NULL. */
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), NULL), n);

    /* Attempts as runs: {7, 8, 9} x1, {11, 12} x3, {20} x3 (same count after a gap: a new
     * run), {21} x2 (adjacent, another count: a new run with delta 1). */
    ks_meta_attempt_t at[] = {{7, 1}, {8, 1}, {9, 1}, {11, 3}, {12, 3}, {20, 3}, {21, 2}};
    m.attempts = at;
    m.attempt_cnt = 7;
    n = ks_commit_meta_encode(&m, buf, sizeof(buf), &cut);
    assert_true(n > 4);
    assert_int_equal(cut, -1);
    c = (craft_t){.n = 0};
    craft_varint(&c, 7);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 3);
    craft_varint(&c, 4); /* attempt runs */
    craft_varint(&c, 0);
    craft_varint(&c, 3);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    craft_varint(&c, 2);
    craft_varint(&c, 3);
    craft_varint(&c, 8);
    craft_varint(&c, 1);
    craft_varint(&c, 3);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    craft_finish(&c, want);
    assert_string_equal(buf, want);
}

/* The sizes the final report quotes: a contiguous block, and every other offset. */
static void test_compactness(void **state)
{
    int64_t *acked = malloc(1000 * sizeof(*acked));
    assert_non_null(acked);
    ks_commit_meta_t m = {.commit_offset = 1000000, .acked = acked, .acked_cnt = 1000};
    for (int i = 0; i < 1000; i++)
        acked[i] = 1000000 + 1 + i;
    int contiguous = round_trip(&m);
    for (int i = 0; i < 1000; i++)
        acked[i] = 1000000 + 1 + 2 * i;
    int alternate = round_trip(&m);
    print_message("encoded size: 1000 consecutive acks %d chars, 1000 alternate acks %d chars\n",
                  contiguous, alternate);
    assert_true(contiguous < 24);
    assert_true(alternate < 4096);
    free(acked);
}

/* Attempt entries go as runs: a block delivered once costs a few bytes however long, and
 * counts that change at every offset still round-trip. */
static void test_attempt_compactness(void **state)
{
    ks_meta_attempt_t *at = malloc(1000 * sizeof(*at));
    assert_non_null(at);
    ks_commit_meta_t m = {.commit_offset = 1000000, .attempts = at, .attempt_cnt = 1000};
    for (int i = 0; i < 1000; i++)
        at[i] = (ks_meta_attempt_t){1000000 + i, 1};
    int ones = round_trip(&m);
    /* commit 3 + ack runs 1 + attempt runs 1 + delta 1 + length 2 + count 1 + CRC 4 = 13
     * bytes: "ks1:" and 18 characters. */
    assert_int_equal(ones, 22);

    /* The same block above a gap, with acks interleaved below it. */
    int64_t acked[] = {1000001, 1000002, 1000005};
    m.acked = acked;
    m.acked_cnt = 3;
    for (int i = 0; i < 1000; i++)
        at[i] = (ks_meta_attempt_t){1000010 + i, 1};
    assert_true(round_trip(&m) < 40);
    m.acked = NULL;
    m.acked_cnt = 0;

    /* Alternating counts: every offset its own run. */
    for (int i = 0; i < 1000; i++)
        at[i] = (ks_meta_attempt_t){1000000 + i, i % 2 ? 2u : 1u};
    int alt = round_trip(&m);
    /* Alternating in pairs, and three counts cycling with a large one. */
    for (int i = 0; i < 1000; i++)
        at[i] = (ks_meta_attempt_t){1000000 + i, (i / 2) % 2 ? 1u : 5u};
    round_trip(&m);
    for (int i = 0; i < 1000; i++)
        at[i] = (ks_meta_attempt_t){1000000 + i, i % 3 == 0 ? 1u : i % 3 == 1 ? UINT32_MAX : 7u};
    round_trip(&m);
    /* The same count at every other offset: runs of length 1, never merged across gaps. */
    for (int i = 0; i < 1000; i++)
        at[i] = (ks_meta_attempt_t){1000000 + 2 * i, 1};
    int gaps = round_trip(&m);
    print_message("encoded size: 1000 consecutive attempts x1 %d chars, 1000 alternating 1/2 "
                  "%d chars, 1000 every-other x1 %d chars\n",
                  ones, alt, gaps);
    assert_true(alt < 4096);
    assert_true(gaps < 4096);
    free(at);
}

static void test_random_round_trip(void **state)
{
    static const uint64_t seeds[] = {1, 0x9E3779B97F4A7C15ull, 424242};
    for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++) {
        uint64_t st = seeds[s];
        for (int it = 0; it < 1500; it++) {
            ks_commit_meta_t m = random_meta(&st);
            round_trip(&m);
            ks_commit_meta_free(&m);
        }
    }
}

/* ---- invalid input to the encoder ---------------------------------------------------------- */

static void test_encode_rejects(void **state)
{
    char buf[256];
    int64_t cut = 777;
    int64_t unsorted[] = {5, 4};
    ks_commit_meta_t m = {.commit_offset = 1, .acked = unsorted, .acked_cnt = 2};
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    assert_string_equal(buf, "");
    assert_int_equal(cut, 777);

    int64_t dup[] = {5, 5};
    m.acked = dup;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);

    int64_t at_commit[] = {1};
    m.acked = at_commit;
    m.acked_cnt = 1;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    int64_t below[] = {0};
    m.acked = below;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    m.acked = NULL;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    m.acked_cnt = 0;
    assert_true(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut) > 0);

    /* Attempts 1 is valid (and round-trips); attempts 0 is not, alone or inside a run. */
    ks_meta_attempt_t one[] = {{1, 1}};
    m.attempts = one;
    m.attempt_cnt = 1;
    assert_true(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut) > 0);
    assert_int_equal(cut, -1);
    round_trip(&m);
    cut = 777;
    ks_meta_attempt_t zero[] = {{1, 0}};
    m.attempts = zero;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    assert_string_equal(buf, "");
    assert_int_equal(cut, 777);
    ks_meta_attempt_t zero_in_run[] = {{1, 1}, {2, 1}, {3, 0}, {4, 1}};
    m.attempts = zero_in_run;
    m.attempt_cnt = 4;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    m.attempt_cnt = 1;
    ks_meta_attempt_t low[] = {{0, 2}};
    m.attempts = low;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    ks_meta_attempt_t uns[] = {{3, 2}, {3, 2}};
    m.attempts = uns;
    m.attempt_cnt = 2;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    ks_meta_attempt_t back[] = {{3, 1}, {4, 1}, {2, 1}};
    m.attempts = back;
    m.attempt_cnt = 3;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    m.attempts = NULL;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);

    ks_commit_meta_t neg = {.commit_offset = -1};
    assert_int_equal(ks_commit_meta_encode(&neg, buf, sizeof(buf), &cut), -1);
    assert_int_equal(ks_commit_meta_encode(NULL, buf, sizeof(buf), &cut), -1);
}

static void test_encode_too_small(void **state)
{
    char buf[KS_COMMIT_META_MIN_BYTES];
    int64_t cut = 777;
    ks_commit_meta_t m = {.commit_offset = INT64_MAX};
    assert_int_equal(ks_commit_meta_encode(&m, buf, 0, &cut), -1);
    assert_int_equal(ks_commit_meta_encode(&m, buf, 10, &cut), -1);
    assert_int_equal(cut, 777);
    assert_string_equal(buf, "");
    /* The documented minimum fits the worst-case empty encoding. */
    int n = ks_commit_meta_encode(&m, buf, sizeof(buf), &cut);
    assert_true(n > 0 && (size_t)n < sizeof(buf));
    assert_int_equal(ks_commit_meta_encode(&m, buf, (size_t)n, &cut), -1);
    assert_int_equal(ks_commit_meta_encode(&m, buf, (size_t)n + 1, &cut), n);

    /* With acks that do not fit at all but the empty encoding does: everything is cut. */
    int64_t acked[] = {INT64_MAX / 3, INT64_MAX / 2};
    ks_commit_meta_t a = {.commit_offset = 0, .acked = acked, .acked_cnt = 2};
    char small[16];
    n = ks_commit_meta_encode(&a, small, sizeof(small), &cut);
    assert_true(n > 0 && (size_t)n < sizeof(small));
    assert_int_equal(cut, INT64_MAX / 3);
    ks_commit_meta_t d;
    assert_int_equal(ks_commit_meta_decode(small, (size_t)n, 0, &d), 0);
    assert_int_equal(d.acked_cnt, 0);
    assert_int_equal(d.attempt_cnt, 0);
    ks_commit_meta_free(&d);
}

/* ---- size bound and cut ------------------------------------------------------------------- */

static void test_size_bound(void **state)
{
    uint64_t s = 7;
    size_t n = 5000;
    int64_t *acked = malloc(n * sizeof(*acked));
    ks_meta_attempt_t *at = malloc(n / 10 * sizeof(*at));
    assert_non_null(acked);
    assert_non_null(at);
    int64_t o = 1000;
    for (size_t i = 0; i < n; i++) {
        o += 1 + (int64_t)rnd_below(&s, 1000);
        acked[i] = o;
    }
    ks_commit_meta_t m = {.commit_offset = 1000, .acked = acked, .acked_cnt = n};
    const size_t limits[] = {4096, 256, 64, 30, KS_COMMIT_META_MIN_BYTES};
    for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
        int64_t cut = check_cut(&m, limits[l]);
        assert_true(cut > m.commit_offset);
    }

    /* Mixed with attempt entries, every other one at an acked offset, the others just below
     * one (acked offsets are at least 1 apart, so these stay ascending and >= commit). */
    for (size_t i = 0; i < n / 10; i++) {
        at[i].offset = acked[i * 7] - (int64_t)(i % 2);
        at[i].attempts = 1 + (uint32_t)rnd_below(&s, 100000);
    }
    m.attempts = at;
    m.attempt_cnt = n / 10;
    for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++)
        assert_true(check_cut(&m, limits[l]) >= m.commit_offset);
    free(acked);
    free(at);
}

/* Cuts through attempt runs: a long block of consecutive offsets whose counts come in runs
 * of random lengths, with acks among them. The cut may fall inside a run, which then keeps
 * only its part below the cut. */
static void test_attempt_runs_cut(void **state)
{
    uint64_t s = 4711;
    size_t n = 20000, na = 3000;
    ks_meta_attempt_t *at = malloc(n * sizeof(*at));
    int64_t *acked = malloc(na * sizeof(*acked));
    assert_non_null(at);
    assert_non_null(acked);
    int64_t o = 100;
    uint32_t att = 1;
    for (size_t i = 0; i < n;) {
        size_t len = 1 + (size_t)rnd_below(&s, 60);
        uint32_t next;
        do
            next = rnd_below(&s, 3) ? 1 + (uint32_t)rnd_below(&s, 4) : (uint32_t)rnd(&s) | 1u;
        while (next == att);
        att = next;
        for (size_t k = 0; k < len && i < n; k++, i++)
            at[i] = (ks_meta_attempt_t){o++, att};
        if (rnd_below(&s, 4) == 0)
            o += 1 + (int64_t)rnd_below(&s, 5);
    }
    ks_commit_meta_t m = {.commit_offset = 100, .attempts = at, .attempt_cnt = n};
    size_t full = (size_t)round_trip(&m);
    assert_true(full > 1000);
    assert_int_equal(check_cut(&m, full + 1), -1);
    const size_t limits[] = {full, full / 2, 1000, 256, 64, 40, 30, KS_COMMIT_META_MIN_BYTES};
    for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++)
        assert_true(check_cut(&m, limits[l]) >= m.commit_offset);
    for (size_t lim = KS_COMMIT_META_MIN_BYTES; lim < 400; lim += 7)
        check_cut(&m, lim);

    /* One long run of ones: cutting it keeps its lower part, in a few bytes. */
    for (size_t i = 0; i < n; i++)
        at[i] = (ks_meta_attempt_t){100 + (int64_t)i, 1};
    for (size_t i = 0; i < na; i++)
        acked[i] = 101 + 3 * (int64_t)i;
    m.acked = acked;
    m.acked_cnt = na;
    for (size_t lim = KS_COMMIT_META_MIN_BYTES; lim < 1200; lim += 13)
        check_cut(&m, lim);
    free(at);
    free(acked);
}

static void test_fits_gives_no_cut(void **state)
{
    int64_t acked[] = {11, 12, 13, 50};
    ks_meta_attempt_t at[] = {{10, 3}};
    ks_commit_meta_t m = {
        .commit_offset = 10, .acked = acked, .acked_cnt = 4, .attempts = at, .attempt_cnt = 1};
    assert_int_equal(check_cut(&m, 4096), -1);
    int n = full_len(&m);
    /* Exactly enough room (text plus NUL) still fits everything; one byte less cuts. */
    assert_int_equal(check_cut(&m, (size_t)n + 1), -1);
    assert_true(check_cut(&m, (size_t)n) >= 0);
}

/* Out-of-order acks: every tenth record out once (attempt 1), one out three times, the rest
 * acked. Over budget, encode_fit leaves out the attempt-1 entries first: its cut lies at least
 * ~2x as far as the plain encoder's, what it keeps decodes back, and attempts > 1 stay. */
static void test_encode_fit_drops_single_attempts_first(void **state)
{
    enum { N = 3000, LIM = 512 };
    int64_t acked[N];
    ks_meta_attempt_t at[N / 10 + 1];
    size_t na = 0, nt = 0;
    for (int64_t o = 1; o < N; o++) {
        if (o % 10 == 0)
            at[nt++] = (ks_meta_attempt_t){o, o == 20 ? 3 : 1};
        else
            acked[na++] = o;
    }
    ks_commit_meta_t m = {
        .commit_offset = 0, .acked = acked, .acked_cnt = na, .attempts = at, .attempt_cnt = nt};
    char buf[LIM];
    int64_t plain = -1, fit = -1;
    assert_true(ks_commit_meta_encode(&m, buf, LIM, &plain) > 0);
    assert_true(plain > 0);
    int len = ks_commit_meta_encode_fit(&m, buf, LIM, &fit);
    assert_true(len > 0 && len < LIM);
    assert_true(fit >= 2 * plain);
    assert_int_equal(m.attempt_cnt, 1); /* only the one with attempts > 1 */
    ks_commit_meta_t back;
    assert_int_equal(ks_commit_meta_decode(buf, (size_t)len, 0, &back), 0);
    assert_int_equal(back.attempt_cnt, 1);
    assert_int_equal(back.attempts[0].offset, 20);
    assert_int_equal(back.attempts[0].attempts, 3);
    for (size_t i = 0; i < back.acked_cnt; i++)
        assert_true(back.acked[i] < fit);
    ks_commit_meta_free(&back);

    /* What fits is left alone. */
    at[0].attempts = 1;
    m.attempt_cnt = 1;
    m.acked_cnt = 5;
    assert_true(ks_commit_meta_encode_fit(&m, buf, LIM, &fit) > 0);
    assert_int_equal(fit, -1);
    assert_int_equal(m.attempt_cnt, 1);
}

static void test_lowest_part_kept(void **state)
{
    uint64_t s = 99;
    size_t n = 3000;
    int64_t *acked = malloc(n * sizeof(*acked));
    assert_non_null(acked);
    int64_t o = 500;
    for (size_t i = 0; i < n; i++) {
        o += 1 + (int64_t)rnd_below(&s, 5);
        acked[i] = o;
    }
    ks_commit_meta_t m = {.commit_offset = 500, .acked = acked, .acked_cnt = n};
    for (size_t lim = KS_COMMIT_META_MIN_BYTES; lim < 2000; lim += 37) {
        char *buf = malloc(lim);
        assert_non_null(buf);
        int64_t cut;
        int len = ks_commit_meta_encode(&m, buf, lim, &cut);
        assert_true(len > 0);
        ks_commit_meta_t d;
        assert_int_equal(ks_commit_meta_decode(buf, (size_t)len, m.commit_offset, &d), 0);
        if (d.acked_cnt > 0) {
            assert_int_equal(d.acked[0], acked[0]);
            assert_int_equal(d.acked[d.acked_cnt - 1], acked[d.acked_cnt - 1]);
            assert_int_equal(cut, acked[d.acked_cnt]);
        } else {
            assert_int_equal(cut, acked[0]);
        }
        ks_commit_meta_free(&d);
        free(buf);
    }
    free(acked);
}

static void test_random_cuts(void **state)
{
    uint64_t st = 0xC0FFEEull;
    for (int it = 0; it < 1500; it++) {
        ks_commit_meta_t m = random_meta(&st);
        size_t lim = KS_COMMIT_META_MIN_BYTES + (size_t)rnd_below(&st, 600);
        check_cut(&m, lim);
        ks_commit_meta_free(&m);
    }
}

/* A window bigger than the decoder accepts is cut at the cap, so that what is encoded decodes. */
static void test_ack_cap(void **state)
{
    size_t n = KS_COMMIT_META_MAX_ACKS + 5;
    int64_t *acked = malloc(n * sizeof(*acked));
    assert_non_null(acked);
    for (size_t i = 0; i < n; i++)
        acked[i] = (int64_t)i + 1;
    ks_commit_meta_t m = {.commit_offset = 0, .acked = acked, .acked_cnt = n};
    char buf[64];
    int64_t cut;
    int len = ks_commit_meta_encode(&m, buf, sizeof(buf), &cut);
    assert_true(len > 0);
    assert_int_equal(cut, KS_COMMIT_META_MAX_ACKS + 1);
    free(acked);
}

/* ---- decoding garbage ----------------------------------------------------------------------- */

/* Asserts that decoding n bytes at text fails and leaves out empty. */
static void assert_rejects(const char *text, size_t n, int64_t commit_offset)
{
    ks_commit_meta_t d = {.acked = (int64_t *)&d, .acked_cnt = 99}; /* stale junk, overwritten */
    assert_int_equal(ks_commit_meta_decode(text, n, commit_offset, &d), -1);
    assert_null(d.acked);
    assert_null(d.attempts);
    assert_int_equal(d.acked_cnt, 0);
    assert_int_equal(d.attempt_cnt, 0);
    ks_commit_meta_free(&d);
}

static void test_garbage(void **state)
{
    assert_rejects(NULL, 0, 0);
    assert_rejects("", 0, 0);
    assert_rejects("ks1:", 4, 0);
    assert_rejects("ks1", 3, 0);
    assert_rejects("hello world", 11, 0);
    assert_rejects("ks1:====", 8, 0);

    /* A valid encoding under another prefix, or with padding, or with an extra character. */
    int64_t acked[] = {11, 12, 40};
    ks_commit_meta_t m = {.commit_offset = 10, .acked = acked, .acked_cnt = 3};
    char buf[128];
    int n = ks_commit_meta_encode(&m, buf, sizeof(buf) - 4, NULL);
    assert_true(n > 0);
    char other[128];
    memcpy(other, buf, (size_t)n + 1);
    other[2] = '2';
    assert_rejects(other, (size_t)n, 10);
    memcpy(other, buf, (size_t)n);
    memcpy(other + n, "==", 3);
    assert_rejects(other, (size_t)n + 2, 10);
    memcpy(other + n, "A", 2);
    assert_rejects(other, (size_t)n + 1, 10);
    memcpy(other + n, "AAAA", 5);
    assert_rejects(other, (size_t)n + 4, 10);

    /* Random bytes, and random base64url after the prefix. */
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint64_t s = 31337;
    char r[300];
    for (int it = 0; it < 3000; it++) {
        size_t len = (size_t)rnd_below(&s, sizeof(r));
        for (size_t i = 0; i < len; i++)
            r[i] = (char)rnd(&s);
        assert_rejects(r, len, 0);
        memcpy(r, "ks1:", 4);
        len = 4 + (size_t)rnd_below(&s, sizeof(r) - 4);
        for (size_t i = 4; i < len; i++)
            r[i] = al[rnd_below(&s, 64)];
        /* Random text passes the CRC with odds of 2^-32; the seed is fixed. */
        assert_rejects(r, len, (int64_t)rnd_below(&s, 3));
    }
}

static void test_mutations_and_truncations(void **state)
{
    int64_t acked[] = {101, 102, 103, 110, 200, 201};
    ks_meta_attempt_t at[] = {{100, 3}, {104, 1}, {105, 1}, {106, 1}, {107, 2}, {150, 70000}};
    ks_commit_meta_t m = {
        .commit_offset = 100, .acked = acked, .acked_cnt = 6, .attempts = at, .attempt_cnt = 6};
    char buf[256];
    int n = ks_commit_meta_encode(&m, buf, sizeof(buf), NULL);
    assert_true(n > 0);

    char t[256];
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < 256; c++) {
            if ((char)c == buf[i])
                continue;
            memcpy(t, buf, (size_t)n);
            t[i] = (char)c;
            assert_rejects(t, (size_t)n, 100);
        }
    }
    for (int len = 0; len < n; len++) {
        memcpy(t, buf, (size_t)len);
        assert_rejects(t, (size_t)len, 100);
    }
    /* Mutations of random encodings too. */
    uint64_t s = 2024;
    for (int it = 0; it < 200; it++) {
        ks_commit_meta_t rm = random_meta(&s);
        char *big = malloc(BIG);
        assert_non_null(big);
        int len = ks_commit_meta_encode(&rm, big, BIG, NULL);
        assert_true(len > 0);
        for (int k = 0; k < 20; k++) {
            size_t i = (size_t)rnd_below(&s, (uint64_t)len);
            char old = big[i];
            char c = (char)(rnd_below(&s, 255) + 1);
            big[i] = c == old ? (char)(c ^ 0x40) : c;
            assert_rejects(big, (size_t)len, rm.commit_offset);
            big[i] = old;
            assert_rejects(big, rnd_below(&s, (uint64_t)len), rm.commit_offset);
        }
        ks_commit_meta_free(&rm);
        free(big);
    }
}

static void test_wrong_commit_offset(void **state)
{
    int64_t acked[] = {11, 12};
    ks_commit_meta_t m = {.commit_offset = 10, .acked = acked, .acked_cnt = 2};
    char buf[64];
    int n = ks_commit_meta_encode(&m, buf, sizeof(buf), NULL);
    assert_true(n > 0);
    assert_rejects(buf, (size_t)n, 11);
    assert_rejects(buf, (size_t)n, 9);
    assert_rejects(buf, (size_t)n, -10);
    assert_rejects(buf, (size_t)n, 10 + (1ll << 32));
    ks_commit_meta_t d;
    assert_int_equal(ks_commit_meta_decode(buf, (size_t)n, 10, &d), 0);
    ks_commit_meta_free(&d);
}

/* Payloads crafted with a valid CRC but values the decoder must refuse. */
static void test_crafted(void **state)
{
    craft_t c;

    /* Sanity: the builder makes payloads that decode. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 2);
    craft_varint(&c, 1);
    craft_varint(&c, 2); /* 6, 7 */
    craft_varint(&c, 3);
    craft_varint(&c, 1); /* 10 */
    craft_varint(&c, 1);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, 4); /* 5 x4 */
    assert_int_equal(craft_decode(&c, 5), 0);

    /* Huge counts with few bytes behind them: refused before any allocation. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, (uint64_t)INT64_MAX);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);

    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 1ull << 40);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* One run of a huge length, and one just over the cap. */
    const uint64_t lens[] = {(uint64_t)INT64_MAX, 1ull << 40, KS_COMMIT_META_MAX_ACKS + 1ull};
    for (size_t i = 0; i < 3; i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 1);
        craft_varint(&c, 1);
        craft_varint(&c, lens[i]);
        craft_varint(&c, 0);
        assert_int_equal(craft_decode(&c, 5), -1);
    }
    /* Runs that add up past the cap. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 2);
    craft_varint(&c, 1);
    craft_varint(&c, KS_COMMIT_META_MAX_ACKS / 2 + 1);
    craft_varint(&c, 2);
    craft_varint(&c, KS_COMMIT_META_MAX_ACKS / 2 + 1);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* A run that runs off the end of the offset range; one that ends exactly on it is fine. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 1);
    craft_varint(&c, (uint64_t)INT64_MAX - 5 - 1);
    craft_varint(&c, 3);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 1);
    craft_varint(&c, (uint64_t)INT64_MAX - 5 - 1);
    craft_varint(&c, 2);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), 0);

    /* Gaps: 0 for the first run, 1 (non-maximal runs) or 0 after a run; a gap past INT64_MAX. */
    const uint64_t bad_gaps[][2] = {{0, 5}, {1, 1}, {1, 0}, {(uint64_t)INT64_MAX, 1}};
    for (size_t i = 0; i < 4; i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 2);
        craft_varint(&c, bad_gaps[i][0]);
        craft_varint(&c, 1);
        craft_varint(&c, bad_gaps[i][1]);
        craft_varint(&c, 1);
        craft_varint(&c, 0);
        assert_int_equal(craft_decode(&c, 5), -1);
    }
    /* A run of length 0. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* Attempt runs decode to the expanded entries: {5, 6, 7} x1, {8, 9} x4 (adjacent, another
     * count), {14} x1 and {16, 17} x1 (the same count across gaps), {18} xUINT32_MAX. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 3);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    craft_varint(&c, 4);
    craft_varint(&c, 5);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    craft_varint(&c, 2);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, UINT32_MAX);
    ks_commit_meta_t d;
    craft_decode_meta(&c, 5, &d);
    const ks_meta_attempt_t want[] = {{5, 1},  {6, 1},  {7, 1},  {8, 4},          {9, 4},
                                      {14, 1}, {16, 1}, {17, 1}, {18, UINT32_MAX}};
    assert_int_equal(d.commit_offset, 5);
    assert_int_equal(d.acked_cnt, 0);
    assert_int_equal(d.attempt_cnt, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < d.attempt_cnt; i++) {
        assert_int_equal(d.attempts[i].offset, want[i].offset);
        assert_int_equal(d.attempts[i].attempts, want[i].attempts);
    }
    ks_commit_meta_free(&d);

    /* With acks, and a first run above commit_offset. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 3); /* 6, 7, 8 */
    craft_varint(&c, 1);
    craft_varint(&c, 3);
    craft_varint(&c, 1000);
    craft_varint(&c, 1); /* 8 .. 1007 x1 */
    craft_decode_meta(&c, 5, &d);
    assert_int_equal(d.acked_cnt, 3);
    assert_int_equal(d.attempt_cnt, 1000);
    for (size_t i = 0; i < 1000; i++) {
        assert_int_equal(d.attempts[i].offset, 8 + (int64_t)i);
        assert_int_equal(d.attempts[i].attempts, 1);
    }
    ks_commit_meta_free(&d);

    /* Attempts 0 and above UINT32_MAX are refused; 1 and UINT32_MAX are fine. */
    const uint64_t atts[][2] = {
        {0, -1}, {(uint64_t)UINT32_MAX + 1, -1}, {1ull << 62, -1}, {1, 0}, {UINT32_MAX, 0}};
    for (size_t i = 0; i < sizeof(atts) / sizeof(atts[0]); i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 0);
        craft_varint(&c, 1);
        craft_varint(&c, 0);
        craft_varint(&c, 2);
        craft_varint(&c, atts[i][0]);
        assert_int_equal(craft_decode(&c, 5), (int)(int64_t)atts[i][1]);
    }
    /* An attempts 0 in a later run. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    craft_varint(&c, 1);
    craft_varint(&c, 3);
    craft_varint(&c, 1);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* Non-canonical: an adjacent run with the same count (it should have been one run). The
     * same count after a gap, or an adjacent run with another count, is fine. */
    const uint64_t second[][3] = {/* delta, count, expected */
                                  {1, 3, -1},
                                  {2, 3, 0},
                                  {1, 4, 0},
                                  {1, 1, 0}};
    for (size_t i = 0; i < sizeof(second) / sizeof(second[0]); i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 0);
        craft_varint(&c, 2);
        craft_varint(&c, 1);
        craft_varint(&c, 2);
        craft_varint(&c, 3); /* 6, 7 x3 */
        craft_varint(&c, second[i][0]);
        craft_varint(&c, 2);
        craft_varint(&c, second[i][1]);
        if ((int64_t)second[i][2] == 0) {
            craft_decode_meta(&c, 5, &d);
            ks_commit_meta_free(&d);
        } else {
            assert_int_equal(craft_decode(&c, 5), -1);
        }
    }
    /* Non-canonical with counts of 1 too, after runs of length 1. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* Offsets must go strictly up: a delta of 0 after a run (a repeated offset). A delta of 0
     * for the first run (at commit_offset) is fine. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    craft_varint(&c, 2);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, 3);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* A run of length 0, first or later. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    assert_int_equal(craft_decode(&c, 5), -1);
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    craft_varint(&c, 3);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* Huge run counts with few bytes behind them: refused before any allocation. So is a count
     * one more than the runs that follow. */
    const uint64_t run_cnts[] = {(uint64_t)INT64_MAX, 1ull << 40, KS_COMMIT_META_MAX_ACKS + 1ull,
                                 2};
    for (size_t i = 0; i < sizeof(run_cnts) / sizeof(run_cnts[0]); i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 0);
        craft_varint(&c, run_cnts[i]);
        craft_varint(&c, 1);
        craft_varint(&c, 1);
        craft_varint(&c, 2);
        assert_int_equal(craft_decode(&c, 5), -1);
    }

    /* One run of a huge length, and one just over the cap: refused before any allocation. */
    const uint64_t att_lens[] = {(uint64_t)INT64_MAX, 1ull << 40, KS_COMMIT_META_MAX_ACKS + 1ull};
    for (size_t i = 0; i < sizeof(att_lens) / sizeof(att_lens[0]); i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 0);
        craft_varint(&c, 1);
        craft_varint(&c, 1);
        craft_varint(&c, att_lens[i]);
        craft_varint(&c, 1);
        assert_int_equal(craft_decode(&c, 5), -1);
    }
    /* Runs that add up past the cap; runs that add up to exactly the cap are fine. */
    for (int over = 1; over >= 0; over--) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 0);
        craft_varint(&c, 2);
        craft_varint(&c, 0);
        craft_varint(&c, KS_COMMIT_META_MAX_ACKS / 2);
        craft_varint(&c, 1);
        craft_varint(&c, 1);
        craft_varint(&c, KS_COMMIT_META_MAX_ACKS / 2 + (uint64_t)over);
        craft_varint(&c, 2);
        if (over) {
            assert_int_equal(craft_decode(&c, 5), -1);
        } else {
            craft_decode_meta(&c, 5, &d);
            assert_int_equal(d.attempt_cnt, KS_COMMIT_META_MAX_ACKS);
            assert_int_equal(d.attempts[KS_COMMIT_META_MAX_ACKS - 1].offset,
                             5 + KS_COMMIT_META_MAX_ACKS - 1);
            assert_int_equal(d.attempts[KS_COMMIT_META_MAX_ACKS - 1].attempts, 2);
            ks_commit_meta_free(&d);
        }
    }
    /* The attempts cap is its own: a full ack section does not reduce it. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, KS_COMMIT_META_MAX_ACKS);
    craft_varint(&c, 1);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    assert_int_equal(craft_decode(&c, 5), 0);

    /* Offsets past INT64_MAX: by the delta of a first or later run, or by a run's length. Runs
     * that end exactly on INT64_MAX are fine. */
    const uint64_t over_first[][3] = {
        /* delta, length, expected */
        {(uint64_t)INT64_MAX - 4, 1, -1}, {(uint64_t)INT64_MAX, 1, -1},
        {(uint64_t)INT64_MAX - 5, 1, 0},  {(uint64_t)INT64_MAX - 5, 2, -1},
        {(uint64_t)INT64_MAX - 6, 2, 0},  {(uint64_t)INT64_MAX - 6, 3, -1},
        {0, (uint64_t)INT64_MAX, -1}};
    for (size_t i = 0; i < sizeof(over_first) / sizeof(over_first[0]); i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 0);
        craft_varint(&c, 1);
        craft_varint(&c, over_first[i][0]);
        craft_varint(&c, over_first[i][1]);
        craft_varint(&c, 2);
        if ((int64_t)over_first[i][2] == 0) {
            craft_decode_meta(&c, 5, &d);
            assert_int_equal(d.attempts[d.attempt_cnt - 1].offset, INT64_MAX);
            ks_commit_meta_free(&d);
        } else {
            assert_int_equal(craft_decode(&c, 5), -1);
        }
    }
    const uint64_t over_later[][3] = {
        /* delta, length, expected */
        {3, 1, -1}, {(uint64_t)INT64_MAX, 1, -1}, {2, 1, 0}, {2, 2, -1}, {1, 2, 0}, {1, 3, -1}};
    for (size_t i = 0; i < sizeof(over_later) / sizeof(over_later[0]); i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, (uint64_t)INT64_MAX - 2);
        craft_varint(&c, 0);
        craft_varint(&c, 2);
        craft_varint(&c, 0);
        craft_varint(&c, 1);
        craft_varint(&c, 2); /* INT64_MAX - 2 */
        craft_varint(&c, over_later[i][0]);
        craft_varint(&c, over_later[i][1]);
        craft_varint(&c, 3);
        if ((int64_t)over_later[i][2] == 0) {
            craft_decode_meta(&c, INT64_MAX - 2, &d);
            assert_int_equal(d.attempts[d.attempt_cnt - 1].offset, INT64_MAX);
            ks_commit_meta_free(&d);
        } else {
            assert_int_equal(craft_decode(&c, INT64_MAX - 2), -1);
        }
    }

    /* A run cut short: the count's varint, or the whole last triple, missing. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, 0);
    craft_varint(&c, 4);
    assert_int_equal(craft_decode(&c, 5), -1);
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 3);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    craft_varint(&c, 1);
    craft_varint(&c, 1);
    craft_varint(&c, 3);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* The payload's own commit offset disagrees. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 6);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* Trailing bytes. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* Overlong varints: a redundant zero byte, and a 10-byte one. */
    c = (craft_t){.n = 0};
    craft_bytes(&c, "\x85\x00", 2);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);
    c = (craft_t){.n = 0};
    craft_bytes(&c, "\x85\x80\x80\x80\x80\x80\x80\x80\x80\x00", 10);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, 5), -1);
    /* A varint beyond INT64_MAX (9 bytes all with the continuation bit). */
    c = (craft_t){.n = 0};
    craft_bytes(&c, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    assert_int_equal(craft_decode(&c, INT64_MAX), -1);
    /* A truncated varint at the end. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_bytes(&c, "\x80", 1);
    assert_int_equal(craft_decode(&c, 5), -1);

    /* A bad CRC on an otherwise valid payload. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 0);
    char text[512];
    size_t n = craft_finish(&c, text);
    assert_int_equal(ks_commit_meta_decode(text, n, 5, &d), 0);
    ks_commit_meta_free(&d);
    text[n - 2] = text[n - 2] == 'A' ? 'B' : 'A';
    assert_rejects(text, n, 5);
}

/* Bits the last character carries beyond the payload must be zero. */
static void test_noncanonical_tail(void **state)
{
    ks_commit_meta_t m = {.commit_offset = 5};
    char buf[64];
    int n = ks_commit_meta_encode(&m, buf, sizeof(buf), NULL);
    assert_true(n > 0);
    /* Payload 7 bytes: 7 % 3 == 1, so the last character carries 4 unused bits. */
    int v = buf[n - 1];
    assert_true(v == 'A' || v == 'Q' || v == 'g' || v == 'w');
    buf[n - 1] = (char)(v + 1);
    assert_rejects(buf, (size_t)n, 5);
}

static void test_free_empty(void **state)
{
    ks_commit_meta_free(NULL);
    ks_commit_meta_t d = {0};
    ks_commit_meta_free(&d);
    assert_int_equal(ks_commit_meta_decode("x", 1, 0, &d), -1);
    ks_commit_meta_free(&d);
    assert_int_equal(ks_commit_meta_decode("ks1:AAAA", 8, 0, NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_single_ack),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_scattered),
        cmocka_unit_test(test_attempts_only),
        cmocka_unit_test(test_both),
        cmocka_unit_test(test_large_offsets),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_compactness),
        cmocka_unit_test(test_attempt_compactness),
        cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_encode_too_small),
        cmocka_unit_test(test_size_bound),
        cmocka_unit_test(test_attempt_runs_cut),
        cmocka_unit_test(test_fits_gives_no_cut),
        cmocka_unit_test(test_lowest_part_kept),
        cmocka_unit_test(test_encode_fit_drops_single_attempts_first),
        cmocka_unit_test(test_random_cuts),
        cmocka_unit_test(test_ack_cap),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_mutations_and_truncations),
        cmocka_unit_test(test_wrong_commit_offset),
        cmocka_unit_test(test_crafted),
        cmocka_unit_test(test_noncanonical_tail),
        cmocka_unit_test(test_free_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
