/* util.h: small helpers shared by the engine and the edges. */
#ifndef KS_UTIL_H
#define KS_UTIL_H

#include <stddef.h>
#include <stdint.h>

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

#endif
