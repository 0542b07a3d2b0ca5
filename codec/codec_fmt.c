/* codec_fmt.c: the format table. A format is its file (fmt_*.c) and one row here. */
#include <stdio.h>
#include <string.h>

#include "codec.h"

extern const ks_codec_fmt_t ks_codec_fmt_text, ks_codec_fmt_base64;

static const ks_codec_fmt_t *const fmts[] = {
    &ks_codec_fmt_auto,
    &ks_codec_fmt_text,
    &ks_codec_fmt_base64,
};

const ks_codec_fmt_t *ks_codec_fmt_find(const char *name)
{
    for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++)
        if (!strcmp(fmts[i]->name, name))
            return fmts[i];
    return NULL;
}

const char *ks_codec_fmt_names(char *buf, size_t size)
{
    size_t n = sizeof(fmts) / sizeof(fmts[0]), o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%s",
                              i == 0       ? ""
                              : i + 1 == n ? " or "
                                           : ", ",
                              fmts[i]->name);
    return buf;
}
