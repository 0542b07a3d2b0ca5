/* test_commit_meta.c: tests the commit metadata codec (proxy/commit_meta.c): round trips, size
 * cuts, garbage. */
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
    size_t nt = rnd_below(s, 3) == 0 ? 0 : (size_t)rnd_below(s, 60);
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
    o = m.commit_offset + (int64_t)rnd_below(s, 3);
    for (size_t i = 0; i < nt; i++) {
        m.attempts[m.attempt_cnt].offset = o;
        m.attempts[m.attempt_cnt].attempts =
            rnd_below(s, 4) == 0 ? (uint32_t)rnd(s) | 2u : 2u + (uint32_t)rnd_below(s, 10);
        m.attempt_cnt++;
        o += 1 + (int64_t)rnd_below(s, rnd_below(s, 2) ? 3 : 500);
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
}

static void test_both(void **state)
{
    int64_t acked[] = {42, 43, 44, 50, 51};
    ks_meta_attempt_t at[] = {{41, 2}, {44, 3}, {45, 9}, {51, 2}};
    ks_commit_meta_t m = {
        .commit_offset = 41, .acked = acked, .acked_cnt = 5, .attempts = at, .attempt_cnt = 4};
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
    ks_meta_attempt_t tat[] = {{INT64_MAX - 3, 2}, {INT64_MAX, 5}};
    ks_commit_meta_t t = {.commit_offset = INT64_MAX - 3,
                          .acked = top,
                          .acked_cnt = 3,
                          .attempts = tat,
                          .attempt_cnt = 2};
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

    ks_meta_attempt_t one[] = {{1, 1}};
    m.attempts = one;
    m.attempt_cnt = 1;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    ks_meta_attempt_t low[] = {{0, 2}};
    m.attempts = low;
    assert_int_equal(ks_commit_meta_encode(&m, buf, sizeof(buf), &cut), -1);
    ks_meta_attempt_t uns[] = {{3, 2}, {3, 2}};
    m.attempts = uns;
    m.attempt_cnt = 2;
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
        at[i].attempts = 2 + (uint32_t)rnd_below(&s, 100000);
    }
    m.attempts = at;
    m.attempt_cnt = n / 10;
    for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++)
        assert_true(check_cut(&m, limits[l]) >= m.commit_offset);
    free(acked);
    free(at);
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
    ks_meta_attempt_t at[] = {{100, 3}, {150, 70000}};
    ks_commit_meta_t m = {
        .commit_offset = 100, .acked = acked, .acked_cnt = 6, .attempts = at, .attempt_cnt = 2};
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

    /* Attempt entries: attempts 0, 1 and above UINT32_MAX; a repeated offset. */
    const uint64_t bad_att[] = {0, 1, (uint64_t)UINT32_MAX + 1};
    for (size_t i = 0; i < 3; i++) {
        c = (craft_t){.n = 0};
        craft_varint(&c, 5);
        craft_varint(&c, 0);
        craft_varint(&c, 1);
        craft_varint(&c, 0);
        craft_varint(&c, bad_att[i]);
        assert_int_equal(craft_decode(&c, 5), -1);
    }
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    craft_varint(&c, 1);
    craft_varint(&c, 2);
    craft_varint(&c, 0);
    craft_varint(&c, 2);
    assert_int_equal(craft_decode(&c, 5), -1);
    /* An attempt offset past INT64_MAX. */
    c = (craft_t){.n = 0};
    craft_varint(&c, 5);
    craft_varint(&c, 0);
    craft_varint(&c, 1);
    craft_varint(&c, (uint64_t)INT64_MAX - 4);
    craft_varint(&c, 2);
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
    ks_commit_meta_t d;
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
        cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_encode_too_small),
        cmocka_unit_test(test_size_bound),
        cmocka_unit_test(test_fits_gives_no_cut),
        cmocka_unit_test(test_lowest_part_kept),
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
