/* fuzz_commit_meta.c: libFuzzer harness for commit-metadata decoding (proxy/commit_meta.c).
 * Input: "<commit offset> <metadata text>". No crash; what decodes satisfies the header's
 * invariants and encodes back to exactly the same text (the encoding is unique). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "commit_meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t v = 0;
    size_t i = 0;
    while (i < size && i < 19 && data[i] >= '0' && data[i] <= '9')
        v = v * 10 + (uint64_t)(data[i++] - '0');
    int64_t commit = v > INT64_MAX ? INT64_MAX : (int64_t)v;
    if (i < size && data[i] == ' ')
        i++;
    const char *text = (const char *)data + i;
    size_t len = size - i;
    /* The text is not NUL-terminated: an exact-size copy lets ASan catch any over-read. */
    char *copy = malloc(len ? len : 1);
    if (!copy)
        abort();
    memcpy(copy, text, len);
    ks_commit_meta_t m;
    int rc = ks_commit_meta_decode(len ? copy : NULL, len, commit, &m);
    if (rc == 0) {
        if (m.commit_offset != commit)
            abort();
        for (size_t k = 0; k < m.acked_cnt; k++)
            if (m.acked[k] <= commit || (k && m.acked[k] <= m.acked[k - 1]))
                abort();
        for (size_t k = 0; k < m.attempt_cnt; k++)
            if (m.attempts[k].offset < commit || m.attempts[k].attempts < 1 ||
                (k && m.attempts[k].offset <= m.attempts[k - 1].offset))
                abort();
        char *buf = malloc(len + 1);
        if (!buf)
            abort();
        int64_t cut = 0;
        int n = ks_commit_meta_encode(&m, buf, len + 1, &cut);
        if (n != (int)len || cut != -1 || memcmp(buf, copy, len) != 0)
            abort();
        free(buf);
    } else if (m.acked_cnt || m.attempt_cnt) {
        abort(); /* a failed decode leaves out empty */
    }
    ks_commit_meta_free(&m);
    free(copy);
    return 0;
}
