/* fuzz_push_answer.c: libFuzzer harness for what push delivery reads from the app
 * (api/push/push_request.c, included for its static functions): an answer's status and body, as
 * push_verdicts settles a request's records by them, and bytes written as an HTTP header
 * (add_header). No crash, every verdict one of the three, the reason a bounded string, and a header
 * line printable ASCII with no CR or LF, whatever the bytes. Input: 2 bytes of status, 1 of record
 * count, the body. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../api/push/push_request.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    long code = 100 + ((data[0] << 8) | data[1]) % 500;
    size_t n = 1 + data[2] % 64;
    const char *body = (const char *)data + 3;
    size_t len = size - 3;
    ks_push_verdict_t v[64];
    char reason[PUSH_REASON_MAX + 64];
    memset(reason, 'x', sizeof(reason));
    push_verdicts(code, body, len, n, v, reason, sizeof(reason));
    for (size_t i = 0; i < n; i++)
        if (v[i] != KS_PUSH_ACK && v[i] != KS_PUSH_RETRY && v[i] != KS_PUSH_TERMINAL)
            abort();
    if (!memchr(reason, '\0', sizeof(reason)))
        abort();
    struct curl_slist *l = NULL;
    add_header(&l, "ksidecar-key", body, len);
    for (const unsigned char *c = (const unsigned char *)l->data; *c; c++)
        if (*c < 0x20 || *c >= 0x7f)
            abort();
    curl_slist_free_all(l);
    return 0;
}
