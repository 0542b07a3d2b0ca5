/* fuzz_auth.c: libFuzzer harness for the tokens file, in both formats (api/auth.c). Input:
 * the file's text. No crash; a file that loads answers identity and scope checks for a few
 * tokens, subjects, groups, topics and ack ids, and every refusal says why. */
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
    static const char *subjects[] = {"CN=app,O=example", NULL};
    static const char *names[] = {"orders", "orders-x", "billing", "__consumer_offsets", ""};
    static const char *ids[] = {"a18bea1b5d43ce1e18-1-0-0-1-orders", "nope"};
    for (size_t h = 0; h < sizeof(headers) / sizeof(headers[0]); h++)
        for (size_t c = 0; c < sizeof(subjects) / sizeof(subjects[0]); c++) {
            const ks_principal_t *who = NULL;
            err[0] = '\0';
            if (ks_auth_identify(a, headers[h], subjects[c], &who, err, sizeof(err)) != KS_OK) {
                if (!err[0])
                    abort();
                continue;
            }
            (void)ks_auth_principal_id(who);
            for (int sc = KS_SCOPE_GROUPS; sc <= KS_SCOPE_PRODUCE; sc++) {
                for (size_t g = 0; g < sizeof(names) / sizeof(names[0]); g++)
                    (void)ks_auth_covers(a, who, (ks_scope_t)sc, names[g]);
                err[0] = '\0';
                if (ks_auth_allow(a, who, (ks_scope_t)sc, names, 5, err, sizeof(err)) != KS_OK &&
                    !err[0])
                    abort();
            }
            err[0] = '\0';
            if (ks_auth_allow_ack_ids(a, who, ids, 2, err, sizeof(err)) != KS_OK && !err[0])
                abort();
        }
    for (size_t h = 0; h < sizeof(headers) / sizeof(headers[0]); h++) {
        err[0] = '\0';
        if (ks_auth_check(a, headers[h], "orders", err, sizeof(err)) != KS_OK && !err[0])
            abort();
    }
    ks_auth_free(a);
    return 0;
}
