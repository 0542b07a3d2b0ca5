/* auth.c: bearer tokens, kept as SHA-256 hashes, each allowed a set of group patterns. */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct token {
    unsigned char hash[32];
    char **patterns;
    size_t pattern_cnt;
} token_t;

struct ks_auth {
    token_t *tokens;
    size_t cnt;
};

void ks_auth_free(ks_auth_t *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->cnt; i++) {
        for (size_t j = 0; j < a->tokens[i].pattern_cnt; j++)
            free(a->tokens[i].patterns[j]);
        free(a->tokens[i].patterns);
    }
    free(a->tokens);
    free(a);
}

static int unhex(const char *s, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = (char)tolower((unsigned char)s[2 * i + k]);
            if (c >= '0' && c <= '9')
                v = v * 16 + (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                v = v * 16 + (unsigned)(c - 'a' + 10);
            else
                return -1;
        }
        out[i] = (unsigned char)v;
    }
    return 0;
}

ks_auth_t *ks_auth_load(const char *path, char *err, size_t errsize)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errsize, "config key 'auth.tokens_file': %s: %s", path, strerror(errno));
        return NULL;
    }
    ks_auth_t *a = calloc(1, sizeof(*a));
    if (!a)
        abort();
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strtok(line, " \t\r\n");
        if (!hash || hash[0] == '#')
            continue;
        char *pats = strtok(NULL, " \t\r\n");
        if (strlen(hash) != 64 || !pats) {
            snprintf(err, errsize,
                     "tokens file %s line %d: expected \"<64 hex chars of sha256(token)> "
                     "<group patterns>\"",
                     path, lineno);
            goto fail;
        }
        a->tokens = realloc(a->tokens, (a->cnt + 1) * sizeof(*a->tokens));
        if (!a->tokens)
            abort();
        token_t *t = &a->tokens[a->cnt++];
        memset(t, 0, sizeof(*t));
        if (unhex(hash, t->hash, 32) < 0) {
            snprintf(err, errsize, "tokens file %s line %d: the hash is not hex", path, lineno);
            goto fail;
        }
        char *save = NULL;
        for (char *p = strtok_r(pats, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
            t->patterns = realloc(t->patterns, (t->pattern_cnt + 1) * sizeof(char *));
            if (!t->patterns)
                abort();
            t->patterns[t->pattern_cnt++] = strdup(p);
        }
    }
    fclose(f);
    if (a->cnt == 0) {
        snprintf(err, errsize, "tokens file %s holds no token", path);
        ks_auth_free(a);
        return NULL;
    }
    return a;
fail:
    fclose(f);
    ks_auth_free(a);
    return NULL;
}

ks_status_t ks_auth_check(const ks_auth_t *a, const char *authorization, const char *group,
                          char *err, size_t errsize)
{
    if (!a)
        return KS_OK;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0 || !authorization[7]) {
        snprintf(err, errsize,
                 "missing bearer token: send the header "
                 "\"authorization: Bearer <token>\"");
        return KS_E_UNAUTH;
    }
    const char *tok = authorization + 7;
    unsigned char h[32];
    unsigned int hl = 0;
    EVP_Digest(tok, strlen(tok), h, &hl, EVP_sha256(), NULL);
    const token_t *match = NULL;
    /* Compare with every token, in constant time each, whatever matched. */
    for (size_t i = 0; i < a->cnt; i++)
        if (CRYPTO_memcmp(h, a->tokens[i].hash, 32) == 0)
            match = &a->tokens[i];
    if (!match) {
        snprintf(err, errsize, "the bearer token is not valid");
        return KS_E_UNAUTH;
    }
    if (!group)
        return KS_OK;
    for (size_t i = 0; i < match->pattern_cnt; i++)
        if (fnmatch(match->patterns[i], group, 0) == 0)
            return KS_OK;
    snprintf(err, errsize, "the token does not cover group \"%s\"", group);
    return KS_E_PERMISSION;
}
