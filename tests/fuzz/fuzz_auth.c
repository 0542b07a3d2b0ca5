/* fuzz_auth.c: libFuzzer harness for the tokens file (api/auth.c). Input: the file's text.
 * No crash; a file that loads answers checks for a few tokens and groups. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "fuzz_file.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ks_log_setup(KS_LOG_ERROR, false);
    char err[512];
    ks_auth_t *a = ks_auth_load(fuzz_file(data, size), err, sizeof(err));
    if (!a) {
        if (!memchr(err, '\0', sizeof(err)) || !err[0])
            abort(); /* a refusal always says why */
        return 0;
    }
    /* "s3cret" is the README's example token. */
    static const char *headers[] = {"Bearer s3cret", "Bearer tok-orders", "bearer x", NULL};
    static const char *groups[] = {"orders", "orders-x", "billing", "", NULL};
    for (size_t h = 0; h < sizeof(headers) / sizeof(headers[0]); h++)
        for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
            err[0] = '\0';
            ks_status_t st = ks_auth_check(a, headers[h], groups[g], err, sizeof(err));
            if (st != KS_OK && !err[0])
                abort();
        }
    ks_auth_free(a);
    return 0;
}
