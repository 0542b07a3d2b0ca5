/* util.h: small helpers shared by the engine and the edges. */
#ifndef KS_UTIL_H
#define KS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Copies the n strings of v into one allocation: the pointer array (NULL-terminated),
 * then the strings. Thousands of ack ids cost one malloc. The caller frees it with
 * free(). Aborts when out of memory. */
char **ks_strv_pack(const char *const *v, size_t n);

/* strdup that aborts when out of memory. Caller frees. */
char *ks_xstrdup(const char *s);
/* A malloc'd copy of n bytes at p; aborts when out of memory. */
void *ks_xmemdup(const void *p, size_t n);

/* Reads a whole file as NUL-terminated text. Returns it (caller frees), or NULL if it
 * cannot be read. */
char *ks_read_file(const char *path);

/* CLOCK_MONOTONIC in ms. Any thread. */
int64_t ks_now_ms(void);

/* Writes v in decimal at p (no NUL, at most 20 bytes); returns the end. Two digits a
 * division: an ack id and a JSON record write several numbers a record. */
static inline char *ks_put_dec(char *p, uint64_t v)
{
    static const char pairs[201] = "00010203040506070809101112131415161718192021222324"
                                   "25262728293031323334353637383940414243444546474849"
                                   "50515253545556575859606162636465666768697071727374"
                                   "75767778798081828384858687888990919293949596979899";
    char tmp[20];
    char *e = tmp + sizeof(tmp), *q = e;
    while (v >= 100) {
        q -= 2;
        memcpy(q, pairs + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) {
        q -= 2;
        memcpy(q, pairs + 2 * v, 2);
    } else {
        *--q = (char)('0' + v);
    }
    memcpy(p, q, (size_t)(e - q));
    return p + (e - q);
}

#endif
