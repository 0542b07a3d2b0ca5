/* fuzz_json.h: what the decoder harnesses (fuzz_avro.c, fuzz_protobuf.c) check of a decode
 * to JSON, and the exact-size copy of an input they decode. */
#ifndef KS_FUZZ_JSON_H
#define KS_FUZZ_JSON_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "json_out.h"

/* A decode that returned rc, having appended to b after before: one that failed left b as it
 * was and said why in err; one that succeeded wrote valid JSON (jansson parses it whole, or
 * declines only a U+0000 in a map key, valid JSON it declines in a key). Aborts otherwise. */
static void fuzz_check_json(int rc, const ks_jbuf_t *b, size_t before, const char *err)
{
    if (rc) {
        if (b->len != before || !*err)
            abort();
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(b->p + before, b->len - before, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j && json_error_code(&je) != json_error_null_byte_in_key)
        abort();
    json_decref(j);
}

/* data[0..n) in an allocation of exactly n bytes (ASan catches any read past it); the caller
 * frees it. */
static uint8_t *fuzz_copy(const uint8_t *data, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy)
        abort();
    memcpy(copy, data, n);
    return copy;
}

#endif
