/* fmt_bytes.c: the formats that show a record's bytes as they are: auto and text (UTF-8 as
 * JSON text, anything else as base64) and base64 (always). Binary transports carry the
 * bytes unchanged in each. */
#include "codec.h"

/* Text when the bytes are well-formed UTF-8, else base64. */
static void json_auto(ks_jbuf_t *b, const char *enc_field, const void *data, size_t len)
{
    if (ks_jbuf_str(b, data, len)) {
        ks_jbuf_lit(b, enc_field);
        ks_jbuf_lit(b, "\"text\"");
        return;
    }
    ks_jbuf_b64(b, data, len);
    ks_jbuf_lit(b, enc_field);
    ks_jbuf_lit(b, "\"base64\"");
}

static void json_base64(ks_jbuf_t *b, const char *enc_field, const void *data, size_t len)
{
    ks_jbuf_b64(b, data, len);
    ks_jbuf_lit(b, enc_field);
    ks_jbuf_lit(b, "\"base64\"");
}

const ks_codec_fmt_t ks_codec_fmt_auto = {.name = "auto", .json = json_auto};
/* text is auto by another name: bytes that are not UTF-8 cannot be JSON text. */
const ks_codec_fmt_t ks_codec_fmt_text = {.name = "text", .json = json_auto};
const ks_codec_fmt_t ks_codec_fmt_base64 = {.name = "base64", .json = json_base64};
