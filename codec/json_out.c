/* json_out.c: see json_out.h. */
#include "json_out.h"

#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "util.h"

void ks_jbuf_init(ks_jbuf_t *b, size_t cap)
{
    b->cap = cap < 64 ? 64 : cap;
    b->len = 0;
    b->p = malloc(b->cap);
    if (!b->p)
        abort();
    b->p[0] = '\0';
}

char *ks_jbuf_take(ks_jbuf_t *b, size_t *len)
{
    char *p = b->p;
    if (len)
        *len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

void ks_jbuf_free(ks_jbuf_t *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

char *ks_jbuf_grow(ks_jbuf_t *b, size_t n)
{
    size_t ncap = b->cap ? b->cap : 64;
    while (b->len + n + 1 > ncap)
        ncap *= 2;
    char *np = realloc(b->p, ncap);
    if (!np)
        abort();
    b->p = np;
    b->cap = ncap;
    return b->p + b->len;
}

void ks_jbuf_int(ks_jbuf_t *b, int64_t v)
{
    char *d = ks_jbuf_reserve(b, 21), *e = d;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0)
        *e++ = '-';
    e = ks_put_dec(e, u);
    b->len += (size_t)(e - d);
    b->p[b->len] = '\0';
}

bool ks_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        unsigned c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false; /* continuation byte first, overlong lead (C0, C1), or above F4 */
        }
        if ((size_t)(end - p) < len)
            return false;
        for (size_t i = 1; i < len; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        p += len;
    }
    return true;
}

/* A byte a JSON string holds as it is: printable ASCII but '"' and '\\'. */
static inline bool plain(unsigned char c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* The length of the run of plain bytes at s[0..n), eight at a time: a word is plain when no
 * byte is below 0x20, at or above 0x80, '"' or '\\' (each test exact for the word as a
 * whole: (v - 0x01..) & ~v & 0x80.. is non-zero iff some byte of v is zero). */
static size_t plain_run8(const char *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        uint64_t x, q, e;
        memcpy(&x, s + j, 8);
        q = x ^ (ones * '"');
        e = x ^ (ones * '\\');
        if ((((x - ones * 0x20) & ~x) | ((q - ones) & ~q) | ((e - ones) & ~e) | x) & high)
            break;
    }
    while (j < n && plain((unsigned char)s[j]))
        j++;
    return j;
}

#if defined(__SSE2__)
/* Bit i set where byte i of the 16 at s is not plain: below 0x20 or at or above 0x80 (both
 * below 0x20 as signed bytes), '"' or '\\'. */
static inline unsigned not_plain16(const char *s)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)s);
    __m128i bad = _mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                               _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                            _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));
    return (unsigned)_mm_movemask_epi8(bad);
}

/* plain_run8, sixteen at a time (writing a 100-byte value took 199 instructions instead of
 * 422, callgrind). The last bytes of a string of 16 or more are tested as the 16 that end
 * it: those before them passed already, so a bit there is the first byte not plain. */
static size_t plain_run(const char *s, size_t n)
{
    if (n < 16)
        return plain_run8(s, n);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        unsigned m = not_plain16(s + j);
        if (m)
            return j + (size_t)__builtin_ctz(m);
    }
    if (j == n)
        return n;
    unsigned m = not_plain16(s + n - 16);
    return m ? n - 16 + (size_t)__builtin_ctz(m) : n;
}
#else
#define plain_run plain_run8
#endif

size_t ks_json_plain_run(const char *s, size_t n)
{
    return plain_run(s, n);
}

bool ks_jbuf_str(ks_jbuf_t *b, const char *s, size_t n)
{
    /* ASCII without quotes, backslashes or controls is copied as is; it is the common case,
     * so the UTF-8 check only runs when a byte above 0x7F shows up. */
    bool checked = false;
    size_t start = b->len;
    char *d = ks_jbuf_reserve(b, n + 2);
    size_t at = b->len;
    d[0] = '"';
    at++;
    for (size_t i = 0; i < n; i++) {
        /* The run of plain bytes from i is copied in one go. */
        size_t j = i + plain_run(s + i, n - i);
        if (j > i) {
            memcpy(b->p + at, s + i, j - i);
            at += j - i;
            i = j;
            if (i == n)
                break;
        }
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            if (!checked) {
                if (!ks_utf8_valid(s + i, n - i)) {
                    b->len = start;
                    b->p[start] = '\0';
                    return false;
                }
                checked = true;
            }
            b->p[at++] = (char)c;
            continue;
        }
        /* An escape takes up to 6 bytes for 1: make room for the worst case of the rest. */
        b->len = at;
        ks_jbuf_reserve(b, 6 + (n - i) + 1);
        at = b->len;
        /* c is a control character, '"' or '\\': a two-character escape where JSON has
         * one, else \u00XX. */
        static const char second[0x80] = {['"'] = '"',  ['\\'] = '\\', ['\n'] = 'n', ['\r'] = 'r',
                                          ['\t'] = 't', ['\b'] = 'b',  ['\f'] = 'f'};
        static const char hex[] = "0123456789abcdef";
        char esc[6] = {'\\', second[c] ? second[c] : 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        size_t el = second[c] ? 2 : 6;
        memcpy(b->p + at, esc, el);
        at += el;
    }
    b->p[at++] = '"';
    b->len = at;
    b->p[at] = '\0';
    return true;
}

void ks_jbuf_b64(ks_jbuf_t *b, const void *data, size_t n)
{
    size_t out = 4 * ((n + 2) / 3);
    char *d = ks_jbuf_reserve(b, out + 2);
    d[0] = '"';
    int w = EVP_EncodeBlock((unsigned char *)d + 1, data, (int)n);
    d[1 + w] = '"';
    b->len += (size_t)w + 2;
    b->p[b->len] = '\0';
}

unsigned char *ks_b64_decode(const char *s, size_t n, size_t *len)
{
    /* EVP_DecodeBlock skips whitespace and accepts padding anywhere, so the shape is checked
     * here and only well-formed input reaches it. */
    if (n % 4 || n > INT32_MAX)
        return NULL;
    size_t pad = n && s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    for (size_t i = 0; i < n - pad; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '/'))
            return NULL;
    }
    unsigned char *out = malloc(n / 4 * 3 + 1);
    if (!out)
        abort();
    int w = n ? EVP_DecodeBlock(out, (const unsigned char *)s, (int)n) : 0;
    if (w < 0) {
        free(out);
        return NULL;
    }
    *len = (size_t)w - pad;
    return out;
}

/* v written into s as a decimal of at most 4 fraction digits, when one reads back as v (a
 * price, a quantity, a whole number: most reals in records), without snprintf and strtod; the
 * same text as ks_jbuf_double's %.15g path gives. Returns its length, or 0 when v is not one
 * (then the caller prints it). A decimal r / 10^k whose nearest double is v prints as v: r and
 * 10^k are exact doubles and their quotient is rounded to the nearest, as strtod rounds; at
 * most 15 significant digits (|v| < 1e11), %.15g gives those digits. */
static int short_decimal(char s[40], double v)
{
    static const double p10[] = {1, 10, 100, 1000, 10000};
    double a = fabs(v);
    if (signbit(v) && a == 0) /* -0.0 */
        return 0;
    if (!(a < 1e11) || (a != 0 && a < 1e-4)) /* %.15g's exponent form below 1e-4 */
        return 0;
    for (int k = 0; k <= 4; k++) {
        double r = (double)(int64_t)(a * p10[k] + 0.5); /* no libm: the check below decides */
        if (r / p10[k] != a)
            continue;
        char d[24];
        int nd = 0;
        for (uint64_t u = (uint64_t)r; u || nd <= k; u /= 10)
            d[nd++] = (char)('0' + u % 10);
        int n = 0;
        if (v < 0)
            s[n++] = '-';
        for (int i = nd - 1; i >= k; i--)
            s[n++] = d[i];
        s[n++] = '.';
        if (k == 0)
            s[n++] = '0';
        for (int i = k - 1; i >= 0; i--)
            s[n++] = d[i];
        return n;
    }
    return 0;
}

void ks_jbuf_double(ks_jbuf_t *b, double v)
{
    if (isnan(v)) {
        ks_jbuf_lit(b, "\"NaN\"");
        return;
    }
    if (isinf(v)) {
        ks_jbuf_lit(b, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
        return;
    }
    char s[40];
    int n = short_decimal(s, v);
    if (n > 0) {
        ks_jbuf_raw(b, s, (size_t)n);
        return;
    }
    n = snprintf(s, sizeof(s), "%.15g", v);
    if (strtod(s, NULL) != v)
        n = snprintf(s, sizeof(s), "%.17g", v);
    if (!strpbrk(s, ".eE")) { /* stays a JSON real: "3.0", not "3" */
        s[n++] = '.';
        s[n++] = '0';
    }
    ks_jbuf_raw(b, s, (size_t)n);
}

void ks_jbuf_float(ks_jbuf_t *b, float v)
{
    if (isnan(v) || isinf(v)) {
        ks_jbuf_double(b, v);
        return;
    }
    char s[40];
    int n = 0;
    for (int prec = 6; prec <= 9; prec++) {
        n = snprintf(s, sizeof(s), "%.*g", prec, (double)v);
        if (strtof(s, NULL) == v)
            break;
    }
    if (!strpbrk(s, ".eE")) {
        s[n++] = '.';
        s[n++] = '0';
    }
    ks_jbuf_raw(b, s, (size_t)n);
}
