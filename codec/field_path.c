/* field_path.c: the path to a field, for errors (field_path.h). */
#include "field_path.h"

#include <stdio.h>
#include <string.h>

size_t ks_field_path_push(ks_field_path_t *p, const char *fmt, ...)
{
    size_t old = p->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->s + old, sizeof(p->s) - old, fmt, ap);
    va_end(ap);
    p->len = n < 0 ? old : old + (size_t)n < sizeof(p->s) ? old + (size_t)n : sizeof(p->s) - 1;
    return old;
}

size_t ks_field_path_name(ks_field_path_t *p, const char *name)
{
    size_t old = p->len, room = sizeof(p->s) - 1 - old, n = strlen(name);
    char *o = p->s + old;
    if (old && room) {
        *o++ = '.';
        room--;
    }
    if (n > room)
        n = room;
    memcpy(o, name, n);
    o[n] = '\0';
    p->len = (size_t)(o + n - p->s);
    return old;
}

void ks_field_path_pop(ks_field_path_t *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

int ks_field_path_failv(const ks_field_path_t *p, const char *top, const char *fmt, va_list ap)
{
    char what[384];
    vsnprintf(what, sizeof(what), fmt, ap);
    /* Deep nesting: the innermost names say more than the outermost. */
    size_t cut = p->len > 160 ? p->len - 160 : 0;
    if (p->len)
        snprintf(p->err, p->errsize, "field \"%s%s\": %s", cut ? "..." : "", p->s + cut, what);
    else
        snprintf(p->err, p->errsize, "%s%s", top, what);
    return -1;
}

int ks_field_path_fail(const ks_field_path_t *p, const char *top, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ks_field_path_failv(p, top, fmt, ap);
    va_end(ap);
    return -1;
}
