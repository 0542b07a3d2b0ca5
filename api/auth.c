/* auth.c: who may do what: tokens and certificate subjects, each with group, consume and
 * produce scopes, loaded from the tokens file; the one scope check both edges call. */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ack_id.h"
#include "log.h"
#include "util.h"

#define LOGC "auth"

typedef struct scope {
    char **patterns;
    size_t cnt;
} scope_t;

struct ks_principal {
    bool is_subject; /* keyed by a certificate subject, not a token hash */
    unsigned char hash[32];
    char *subject;       /* is_subject: the RFC 4514 subject DN */
    bool legacy;         /* from a legacy line: group scopes only */
    scope_t scopes[3];   /* indexed by ks_scope_t */
    char id[24];         /* "token#N" / "subject#N" */
    struct table *table; /* the table it came from: holding the principal holds it */
};

/* One reading of the tokens file. Its principals never change once it is in force. */
typedef struct table {
    ks_principal_t **ents;
    size_t cnt;
    size_t refs;               /* 1 while in force, plus 1 for each hold; k->lock */
    struct keeper *k;          /* whose table it is (NULL until in force) */
    struct table *prev, *next; /* in k->held, once replaced */
} table_t;

/* Which table is in force and which replaced ones are still held: a request, a call or a
 * stream holds the table of the principal it keeps (ks_auth_hold), and a replaced table is
 * freed when its last holder lets go, so a reload costs memory only while something holds
 * the old one. The lock is held for a pointer and a count, never while a table is read. */
typedef struct keeper {
    pthread_mutex_t lock;
    table_t *cur;  /* in force */
    table_t *held; /* replaced, still held by someone */
    size_t live;   /* tables not yet freed: cur and those held */
} keeper_t;

/* Readers reach the keeper through a const ks_auth_t. */
struct ks_auth {
    keeper_t *k;
};

static const char *const scope_names[] = {"groups", "consume", "produce"};

static void table_free(table_t *a)
{
    for (size_t i = 0; i < a->cnt; i++) {
        ks_principal_t *p = a->ents[i];
        for (int s = 0; s < 3; s++) {
            for (size_t j = 0; j < p->scopes[s].cnt; j++)
                free(p->scopes[s].patterns[j]);
            free(p->scopes[s].patterns);
        }
        free(p->subject);
        free(p);
    }
    free(a->ents);
    free(a);
}

void ks_auth_free(ks_auth_t *a)
{
    if (!a)
        return;
    keeper_t *k = a->k;
    table_free(k->cur);
    while (k->held) {
        table_t *t = k->held;
        k->held = t->next;
        table_free(t);
    }
    pthread_mutex_destroy(&k->lock);
    free(k);
    free(a);
}

/* The table in force, with a reference for the caller (table_put lets go). Any thread. */
static table_t *table_get(const ks_auth_t *a)
{
    keeper_t *k = a->k;
    pthread_mutex_lock(&k->lock);
    table_t *t = k->cur;
    t->refs++;
    pthread_mutex_unlock(&k->lock);
    return t;
}

/* Lets go of a reference on t: the last one of a replaced table frees it. Any thread. */
static void table_put(table_t *t)
{
    keeper_t *k = t->k;
    pthread_mutex_lock(&k->lock);
    bool last = --t->refs == 0; /* the table in force keeps its own: never the last */
    if (last) {
        if (t->prev)
            t->prev->next = t->next;
        else
            k->held = t->next;
        if (t->next)
            t->next->prev = t->prev;
        k->live--;
    }
    pthread_mutex_unlock(&k->lock);
    if (last)
        table_free(t);
}

/* Puts t in force; the table it replaces is freed, or kept while held. Any thread. */
static void table_install(keeper_t *k, table_t *t)
{
    t->k = k;
    t->refs = 1;
    pthread_mutex_lock(&k->lock);
    table_t *old = k->cur;
    k->cur = t;
    k->live++;
    bool last = old && --old->refs == 0;
    if (last) {
        k->live--;
    } else if (old) {
        old->prev = NULL;
        old->next = k->held;
        if (k->held)
            k->held->prev = old;
        k->held = old;
    }
    pthread_mutex_unlock(&k->lock);
    if (last)
        table_free(old);
}

const ks_principal_t *ks_auth_hold(const ks_principal_t *who)
{
    if (!who)
        return NULL;
    keeper_t *k = who->table->k;
    pthread_mutex_lock(&k->lock);
    who->table->refs++;
    pthread_mutex_unlock(&k->lock);
    return who;
}

void ks_auth_release(const ks_principal_t *who)
{
    if (who)
        table_put(who->table);
}

size_t ks_auth_tables(const ks_auth_t *a)
{
    if (!a)
        return 0;
    pthread_mutex_lock(&a->k->lock);
    size_t n = a->k->live;
    pthread_mutex_unlock(&a->k->lock);
    return n;
}

static int unhex(const char *s, unsigned char *out, size_t n)
{
    if (strlen(s) != 2 * n)
        return -1;
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

static void scope_add(scope_t *s, const char *pattern)
{
    s->patterns = realloc(s->patterns, (s->cnt + 1) * sizeof(char *));
    if (!s->patterns)
        abort();
    s->patterns[s->cnt++] = ks_xstrdup(pattern);
}

static ks_principal_t *add_entry(table_t *a, bool is_subject)
{
    ks_principal_t *p = calloc(1, sizeof(*p));
    ks_principal_t **n = realloc(a->ents, (a->cnt + 1) * sizeof(*n));
    if (!p || !n)
        abort();
    a->ents = n;
    a->ents[a->cnt++] = p;
    p->is_subject = is_subject;
    p->table = a;
    snprintf(p->id, sizeof(p->id), "%s#%zu", is_subject ? "subject" : "token", a->cnt);
    return p;
}

/* The legacy form: "<sha256 hex> <group patterns>" lines. */
static int parse_lines(table_t *a, char *text, const char *origin, char *err, size_t errsize)
{
    int lineno = 0;
    char *save_line = NULL;
    for (char *line = strtok_r(text, "\n", &save_line); line;
         line = strtok_r(NULL, "\n", &save_line)) {
        lineno++;
        char *save = NULL;
        char *hash = strtok_r(line, " \t\r", &save);
        if (!hash || hash[0] == '#')
            continue;
        char *pats = strtok_r(NULL, " \t\r", &save);
        if (strlen(hash) != 64 || !pats || strtok_r(NULL, " \t\r", &save)) {
            snprintf(err, errsize,
                     "tokens file %s line %d: expected \"<64 hex chars of sha256(token)> "
                     "<group patterns>\", or use the JSON format",
                     origin, lineno);
            return -1;
        }
        ks_principal_t *p = add_entry(a, false);
        p->legacy = true;
        if (unhex(hash, p->hash, 32) < 0) {
            snprintf(err, errsize, "tokens file %s line %d: the hash is not hex", origin, lineno);
            return -1;
        }
        char *ps = NULL;
        for (char *t = strtok_r(pats, ",", &ps); t; t = strtok_r(NULL, ",", &ps))
            scope_add(&p->scopes[KS_SCOPE_GROUPS], t);
    }
    return 0;
}

/* One entry of the JSON form. Returns 0 or -1 with err. */
static int parse_entry(table_t *a, json_t *e, size_t i, const char *origin, char *err,
                       size_t errsize)
{
    if (!json_is_object(e)) {
        snprintf(err, errsize, "tokens file %s: tokens[%zu] is not an object", origin, i);
        return -1;
    }
    json_t *hash = json_object_get(e, "sha256"), *subj = json_object_get(e, "subject");
    if (!hash == !subj || (hash && !json_is_string(hash)) || (subj && !json_is_string(subj)) ||
        (subj && !*json_string_value(subj))) {
        snprintf(err, errsize,
                 "tokens file %s: tokens[%zu] needs exactly one of \"sha256\" (hex of the "
                 "token's SHA-256) or \"subject\" (a client certificate's subject DN)",
                 origin, i);
        return -1;
    }
    ks_principal_t *p = add_entry(a, subj != NULL);
    if (subj)
        p->subject = ks_xstrdup(json_string_value(subj));
    else if (unhex(json_string_value(hash), p->hash, 32) < 0) {
        snprintf(err, errsize, "tokens file %s: tokens[%zu].sha256 is not 64 hex characters",
                 origin, i);
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v)
    {
        if (!strcmp(k, "sha256") || !strcmp(k, "subject"))
            continue;
        int s = 0;
        while (s < 3 && strcmp(k, scope_names[s]))
            s++;
        if (s == 3 || !json_is_array(v)) {
            snprintf(err, errsize,
                     "tokens file %s: tokens[%zu]: unexpected or mistyped field \"%s\" (known: "
                     "sha256 or subject, and the pattern arrays groups, consume, produce)",
                     origin, i, k);
            return -1;
        }
        size_t j;
        json_t *pv;
        json_array_foreach(v, j, pv)
        {
            if (!json_is_string(pv) || !*json_string_value(pv)) {
                snprintf(err, errsize, "tokens file %s: tokens[%zu].%s[%zu] is not a pattern",
                         origin, i, k, j);
                return -1;
            }
            scope_add(&p->scopes[s], json_string_value(pv));
        }
    }
    return 0;
}

static int parse_json(table_t *a, const char *text, const char *origin, char *err, size_t errsize)
{
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    if (!root) {
        snprintf(err, errsize, "tokens file %s: line %d: %s", origin, jerr.line, jerr.text);
        return -1;
    }
    int rc = -1;
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_object(root) || json_object_size(root) != 1 || !json_is_array(toks)) {
        snprintf(err, errsize, "tokens file %s: expected {\"tokens\":[...]}", origin);
        goto out;
    }
    size_t i;
    json_t *e;
    json_array_foreach(toks, i, e)
    {
        if (parse_entry(a, e, i, origin, err, errsize) < 0)
            goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* Reads a tokens file's text into a new table, or NULL with err. */
static table_t *table_parse(const char *text, const char *origin, char *err, size_t errsize)
{
    table_t *a = calloc(1, sizeof(*a));
    char *copy = ks_xstrdup(text);
    if (!a)
        abort();
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    bool json = *p == '{';
    int rc = json ? parse_json(a, text, origin, err, errsize)
                  : parse_lines(a, copy, origin, err, errsize);
    free(copy);
    if (rc < 0)
        goto fail;
    if (a->cnt == 0) {
        snprintf(err, errsize, "tokens file %s holds no token", origin);
        goto fail;
    }
    if (!json)
        ks_warn(LOGC,
                "tokens file %s is in the legacy format (\"<sha256> <group patterns>\"): its %zu "
                "token(s) have group scopes only, so they may consume from and produce to no "
                "topic until the file gives them consume and produce scopes (the JSON format)",
                origin, a->cnt);
    return a;
fail:
    table_free(a);
    return NULL;
}

/* The holder of table t, in force (NULL: NULL). */
static ks_auth_t *auth_new(table_t *t)
{
    if (!t)
        return NULL;
    ks_auth_t *a = calloc(1, sizeof(*a));
    if (!a || !(a->k = calloc(1, sizeof(*a->k))))
        abort();
    pthread_mutex_init(&a->k->lock, NULL);
    table_install(a->k, t);
    return a;
}

ks_auth_t *ks_auth_parse(const char *text, const char *origin, char *err, size_t errsize)
{
    return auth_new(table_parse(text, origin, err, errsize));
}

/* The tokens file at path as a table, or NULL with err naming the file and the problem. */
static table_t *table_load(const char *path, char *err, size_t errsize)
{
    errno = 0;
    char *text = ks_read_file(path);
    if (!text) {
        snprintf(err, errsize, "config key 'auth.tokens_file': %s: %s", path,
                 errno ? strerror(errno) : "cannot read it");
        return NULL;
    }
    table_t *t = table_parse(text, path, err, errsize);
    free(text);
    return t;
}

ks_auth_t *ks_auth_load(const char *path, char *err, size_t errsize)
{
    return auth_new(table_load(path, err, errsize));
}

int ks_auth_reload(ks_auth_t *a, const char *path, char *err, size_t errsize)
{
    table_t *t = table_load(path, err, errsize);
    if (!t)
        return -1;
    table_install(a->k, t);
    return 0;
}

const ks_principal_t *ks_auth_current(const ks_auth_t *a, const ks_principal_t *who)
{
    if (!a || !who)
        return ks_auth_hold(who);
    table_t *t = table_get(a);
    if (who->table == t)
        return who;
    for (size_t i = 0; i < t->cnt; i++) {
        const ks_principal_t *p = t->ents[i];
        if (p->is_subject == who->is_subject &&
            (p->is_subject ? !strcmp(p->subject, who->subject) : !memcmp(p->hash, who->hash, 32)))
            return p; /* the reference on t is the caller's hold on p */
    }
    table_put(t);
    return NULL;
}

/* ks_auth_identify in table t: sets *who only when it returns KS_OK. */
static ks_status_t identify_in(const table_t *t, const char *authorization, const char *subject,
                               const ks_principal_t **who, char *err, size_t errsize)
{
    if (!authorization && subject && *subject) {
        for (size_t i = 0; i < t->cnt; i++)
            if (t->ents[i]->is_subject && !strcmp(t->ents[i]->subject, subject)) {
                *who = t->ents[i];
                return KS_OK;
            }
    }
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0 || !authorization[7]) {
        if (subject && *subject)
            snprintf(err, errsize,
                     "missing bearer token: send the header \"authorization: Bearer <token>\" "
                     "(the client certificate's subject \"%.200s\" is not in the tokens file)",
                     subject);
        else
            snprintf(err, errsize,
                     "missing bearer token: send the header \"authorization: Bearer <token>\"");
        return KS_E_UNAUTH;
    }
    const char *tok = authorization + 7;
    unsigned char h[32];
    unsigned int hl = 0;
    EVP_Digest(tok, strlen(tok), h, &hl, EVP_sha256(), NULL);
    /* Compare with every token, in constant time each, whatever matched. */
    for (size_t i = 0; i < t->cnt; i++)
        if (!t->ents[i]->is_subject && CRYPTO_memcmp(h, t->ents[i]->hash, 32) == 0)
            *who = t->ents[i];
    if (!*who) {
        snprintf(err, errsize, "the bearer token is not valid");
        return KS_E_UNAUTH;
    }
    return KS_OK;
}

ks_status_t ks_auth_identify(const ks_auth_t *a, const char *authorization, const char *subject,
                             const ks_principal_t **who, char *err, size_t errsize)
{
    *who = NULL;
    if (!a)
        return KS_OK;
    table_t *t = table_get(a);
    ks_status_t st = identify_in(t, authorization, subject, who, err, errsize);
    if (!*who)
        table_put(t); /* else the reference on t is the caller's hold on *who */
    return st;
}

bool ks_auth_covers(const ks_auth_t *a, const ks_principal_t *who, ks_scope_t scope,
                    const char *name)
{
    if (!a)
        return true;
    if (!who)
        return false;
    const scope_t *s = &who->scopes[scope];
    for (size_t i = 0; i < s->cnt; i++)
        if (fnmatch(s->patterns[i], name, 0) == 0)
            return true;
    return false;
}

ks_status_t ks_auth_allow(const ks_auth_t *a, const ks_principal_t *who, ks_scope_t scope,
                          const char *const *names, size_t n, char *err, size_t errsize)
{
    static const char *const verbs[] = {"use group", "consume topic", "produce to topic"};
    for (size_t i = 0; i < n; i++) {
        if (ks_auth_covers(a, who, scope, names[i]))
            continue;
        snprintf(err, errsize, "%s may not %s \"%.100s\" (%s scope%s)",
                 who && who->is_subject ? "the client certificate" : "token", verbs[scope],
                 names[i], scope_names[scope],
                 who && who->legacy && scope != KS_SCOPE_GROUPS
                     ? "; the token is in the legacy tokens-file format, which has no topic "
                       "scopes"
                     : "");
        return KS_E_PERMISSION;
    }
    return KS_OK;
}

ks_status_t ks_auth_allow_ack_ids(const ks_auth_t *a, const ks_principal_t *who,
                                  const char *const *ids, size_t n, char *err, size_t errsize)
{
    if (!a)
        return KS_OK;
    char allowed[sizeof(((ks_ack_id_t *)0)->topic)] = ""; /* ids mostly share a topic */
    for (size_t i = 0; i < n; i++) {
        ks_ack_ref_t id; /* a range too: its topic is checked as an id's */
        if (ks_ack_id_parse_ref(ids[i], &id) < 0 || !strcmp(id.topic, allowed))
            continue;
        const char *t = id.topic;
        char why[400];
        if (ks_auth_allow(a, who, KS_SCOPE_CONSUME, &t, 1, why, sizeof(why)) != KS_OK) {
            snprintf(err, errsize, "ack_ids[%zu]: %s", i, why);
            return KS_E_PERMISSION;
        }
        memcpy(allowed, id.topic, strlen(id.topic) + 1); /* parsed: under 250 */
    }
    return KS_OK;
}

const char *ks_auth_principal_id(const ks_principal_t *who)
{
    return who ? who->id : NULL;
}

ks_status_t ks_auth_check(const ks_auth_t *a, const char *authorization, const char *group,
                          char *err, size_t errsize)
{
    const ks_principal_t *who;
    ks_status_t st = ks_auth_identify(a, authorization, NULL, &who, err, errsize);
    if (st == KS_OK && group)
        st = ks_auth_allow(a, who, KS_SCOPE_GROUPS, &group, 1, err, errsize);
    ks_auth_release(who);
    return st;
}
