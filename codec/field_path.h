/* field_path.h: the path to the field a decoder or encoder is at ("lines[3].sku"), for errors
 * that name the field. */
#ifndef KS_FIELD_PATH_H
#define KS_FIELD_PATH_H

#include <stdarg.h>
#include <stddef.h>

typedef struct ks_field_path {
    char s[512]; /* NUL-terminated; a path longer is cut */
    size_t len;
    char *err; /* where an error goes */
    size_t errsize;
} ks_field_path_t;

/* Appends a segment (fmt) to p; returns the length to go back to with ks_field_path_pop. */
size_t ks_field_path_push(ks_field_path_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends a field's name (after a '.' unless p is empty): ks_field_path_push's "%s%s" without
 * printf, for the decoders' and encoders' every field. */
size_t ks_field_path_name(ks_field_path_t *p, const char *name);
void ks_field_path_pop(ks_field_path_t *p, size_t old);

/* Fills p->err with `field "<path>": <what>` (a long path keeps its innermost part), or
 * `<top><what>` when p is empty. Returns -1. */
int ks_field_path_failv(const ks_field_path_t *p, const char *top, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
int ks_field_path_fail(const ks_field_path_t *p, const char *top, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
