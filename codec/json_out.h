/* json_out.h: a small JSON text writer for the HTTP edge's hot replies (record batches
 * and ack results), which jansson built one allocated node per value. */
#ifndef KS_JSON_OUT_H
#define KS_JSON_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct ks_jbuf {
    char *p; /* NUL-terminated while len < cap */
    size_t len, cap;
} ks_jbuf_t;

void ks_jbuf_init(ks_jbuf_t *b, size_t cap);
/* Hands the text over (the caller frees it) and leaves b empty. */
char *ks_jbuf_take(ks_jbuf_t *b, size_t *len);
void ks_jbuf_free(ks_jbuf_t *b);

/* Makes room for n more bytes and a NUL (the slow path of ks_jbuf_reserve). */
char *ks_jbuf_grow(ks_jbuf_t *b, size_t n);

/* Where n more bytes (and a NUL) go. Inline, with ks_jbuf_raw and ks_jbuf_lit: they run
 * several times per record, and a literal's strlen folds away here. */
static inline char *ks_jbuf_reserve(ks_jbuf_t *b, size_t n)
{
    return b->len + n + 1 > b->cap ? ks_jbuf_grow(b, n) : b->p + b->len;
}

static inline void ks_jbuf_raw(ks_jbuf_t *b, const char *s, size_t n)
{
    memcpy(ks_jbuf_reserve(b, n), s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* s written as is (no quoting). */
static inline void ks_jbuf_lit(ks_jbuf_t *b, const char *s)
{
    ks_jbuf_raw(b, s, strlen(s));
}

void ks_jbuf_int(ks_jbuf_t *b, int64_t v);

/* A double as the shortest decimal that reads back to it (always with a '.' or exponent), or
 * NaN and the infinities, which JSON lacks, as the strings "NaN", "Infinity", "-Infinity". */
void ks_jbuf_double(ks_jbuf_t *b, double v);
/* A float the same way, as the shortest decimal that reads back to the same float. */
void ks_jbuf_float(ks_jbuf_t *b, float v);

/* True if s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points above
 * U+10FFFF), the same rule jansson applies to strings. */
bool ks_utf8_valid(const char *s, size_t n);

/* How many bytes from s (of n) a JSON string holds as they are (0x20-0x7F but '"' and
 * '\\'): up to the first control byte, byte at or above 0x80, '"' or '\\'. */
size_t ks_json_plain_run(const char *s, size_t n);

/* Writes s[0..n) as a quoted, escaped JSON string. Returns false, writing nothing, if s
 * is not valid UTF-8. */
bool ks_jbuf_str(ks_jbuf_t *b, const char *s, size_t n);

/* Writes the bytes as a quoted base64 string (standard alphabet, padded). */
void ks_jbuf_b64(ks_jbuf_t *b, const void *data, size_t n);

/* Decodes s[0..n), standard padded base64 as ks_jbuf_b64 writes it, into a new buffer of
 * *len bytes (the caller frees it; never NULL on success, even for ""). Returns NULL if s
 * is not that: a length not a multiple of 4, a byte outside the alphabet, padding not at
 * the end, or whitespace. */
unsigned char *ks_b64_decode(const char *s, size_t n, size_t *len);

#endif
