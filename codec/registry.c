/* registry.c: the schema registry client (registry.h): a cache of what the registry answered,
 * keyed by schema id, subject and version, or schema registered; a thread of its own that
 * fetches what is missing with libcurl's multi interface, trying each URL in turn; waiters
 * woken when their entry settles; failures remembered with a backoff.
 *
 * @locks r->lock guards the entries (table, LRU list, fetch queue, retry list, waiters), the
 * firing list and the counters. An entry that is busy (queued or in flight) is never freed,
 * so the registry thread reads its immutable key fields without the lock. Everything else of
 * a transfer (curl handles, the bearer token) is the registry thread's alone. */
#include "registry.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "log.h"
#include "util.h"

#define RLOG            "schema_registry"
#define MAX_ACTIVE      4          /* requests in flight at once */
#define MAX_BODY        (16 << 20) /* the longest answer read */
#define MAX_ERR         400        /* an entry's kept error text */
#define DEF_BACKOFF     1000
#define DEF_BACKOFF_MAX 60000
#define DEF_UNKNOWN     300000
#define DEF_LATEST      30000

typedef enum { E_ID, E_VERSION, E_REGISTER } ekind_t;

/* An entry's state. FETCHING: queued or in flight (busy). */
typedef enum { S_FETCHING, S_READY, S_FAILED, S_UNKNOWN } estate_t;

typedef struct waiter {
    struct waiter *next;
    ks_registry_wake_t w;
} waiter_t;

typedef struct entry {
    struct entry *hnext;         /* hash chain */
    struct entry *lprev, *lnext; /* LRU list, most recent first */
    struct entry *qnext;         /* the fetch queue */
    struct entry *rprev, *rnext; /* the retry list: FAILED with waiters */
    /* The key: fixed at creation. */
    ekind_t kind;
    int32_t id;              /* E_ID */
    char *subject, *version; /* E_VERSION; E_REGISTER: subject */
    ks_schema_type_t rtype;  /* E_REGISTER */
    char *rtext;             /* E_REGISTER */
    uint64_t hash;
    /* The state, under r->lock. */
    estate_t state;
    bool busy;           /* queued or in flight: not freed, not queued again */
    bool in_retry;       /* on the retry list */
    ks_schema_t *schema; /* READY; a "latest" keeps it while it is fetched again */
    char *err;           /* FAILED, UNKNOWN */
    int64_t until;       /* FAILED: retry at; UNKNOWN: believed until; "latest": fresh until */
    int failures;        /* in a row, for the backoff */
    waiter_t *waiters;
} entry_t;

/* One request: an entry's fetch, on the registry thread. */
typedef struct xfer {
    struct xfer *next; /* the registry's transfers in flight */
    entry_t *e;
    CURL *easy;
    struct curl_slist *hdrs;
    size_t url_i, tried; /* the URL asked now, and how many have been */
    char *body;          /* the answer */
    size_t len;
    bool too_big;
    char *post; /* E_REGISTER's request body */
    char errbuf[CURL_ERROR_SIZE];
    char errs[MAX_ERR]; /* each URL's failure so far */
} xfer_t;

struct ks_registry {
    /* Settings: fixed after ks_registry_new. */
    char **urls;
    size_t url_cnt;
    char *basic_auth, *token_file, *ca_file, *cert_file, *key_file;
    int timeout_ms, cache_max, backoff_ms, backoff_max_ms, unknown_ms, latest_ms;
    bool auto_register;

    pthread_t thread;
    CURLM *multi;
    atomic_bool stop;

    pthread_mutex_t lock;
    pthread_cond_t called; /* a wake call ended (ks_registry_cancel waits on it) */
    entry_t **buckets;     /* @locks lock */
    size_t nbuckets, count;
    entry_t *lru_head, *lru_tail;
    entry_t *q_head, *q_tail;
    entry_t *retry;
    waiter_t *firing; /* wakes of settled entries, not yet called */
    void *calling;    /* the ctx whose wake runs now, or NULL */
    ks_registry_stats_t st;

    /* The registry thread's own. */
    size_t url_good; /* the URL the last answer came from: asked first */
    xfer_t *xfers;   /* in flight */
    size_t active;
    char *token; /* the bearer token read from token_file */
    struct stat token_st;
    bool token_seen;
};

static const char *const status_names[] = {
    [KS_REG_OK] = "ok",
    [KS_REG_PENDING] = "pending",
    [KS_REG_UNAVAILABLE] = "unavailable",
    [KS_REG_UNKNOWN] = "unknown",
};

const char *ks_registry_status_str(ks_registry_status_t st)
{
    return (unsigned)st < sizeof(status_names) / sizeof(status_names[0]) ? status_names[st] : "?";
}

/* ---- the table ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t key_hash(ekind_t kind, int32_t id, const char *subject, const char *version,
                         ks_schema_type_t rtype, const char *rtext)
{
    uint64_t h = fnv(0xcbf29ce484222325ULL, &kind, sizeof(kind));
    if (kind == E_ID)
        return fnv(h, &id, sizeof(id));
    h = fnv(h, subject, strlen(subject) + 1);
    if (kind == E_VERSION)
        return fnv(h, version, strlen(version));
    h = fnv(h, &rtype, sizeof(rtype));
    return fnv(h, rtext, strlen(rtext));
}

static bool key_eq(const entry_t *e, ekind_t kind, int32_t id, const char *subject,
                   const char *version, ks_schema_type_t rtype, const char *rtext)
{
    if (e->kind != kind)
        return false;
    if (kind == E_ID)
        return e->id == id;
    if (strcmp(e->subject, subject))
        return false;
    if (kind == E_VERSION)
        return !strcmp(e->version, version);
    return e->rtype == rtype && !strcmp(e->rtext, rtext);
}

/* @locks r->lock */
static entry_t *find(ks_registry_t *r, uint64_t h, ekind_t kind, int32_t id, const char *subject,
                     const char *version, ks_schema_type_t rtype, const char *rtext)
{
    for (entry_t *e = r->buckets[h & (r->nbuckets - 1)]; e; e = e->hnext)
        if (e->hash == h && key_eq(e, kind, id, subject, version, rtype, rtext))
            return e;
    return NULL;
}

static void lru_unlink(ks_registry_t *r, entry_t *e)
{
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        r->lru_head = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    else
        r->lru_tail = e->lprev;
    e->lprev = e->lnext = NULL;
}

static void lru_front(ks_registry_t *r, entry_t *e)
{
    if (r->lru_head == e)
        return;
    if (e->lprev || e->lnext || r->lru_tail == e)
        lru_unlink(r, e);
    e->lnext = r->lru_head;
    if (r->lru_head)
        r->lru_head->lprev = e;
    r->lru_head = e;
    if (!r->lru_tail)
        r->lru_tail = e;
}

static void retry_unlink(ks_registry_t *r, entry_t *e)
{
    if (!e->in_retry)
        return;
    if (e->rprev)
        e->rprev->rnext = e->rnext;
    else
        r->retry = e->rnext;
    if (e->rnext)
        e->rnext->rprev = e->rprev;
    e->rprev = e->rnext = NULL;
    e->in_retry = false;
}

static void entry_free(entry_t *e)
{
    while (e->waiters) {
        waiter_t *w = e->waiters;
        e->waiters = w->next;
        free(w);
    }
    ks_schema_unref(e->schema);
    free(e->err);
    free(e->subject);
    free(e->version);
    free(e->rtext);
    free(e);
}

/* Removes e from the table and the lists and frees it. @locks r->lock; e not busy. */
static void entry_drop(ks_registry_t *r, entry_t *e)
{
    entry_t **pp = &r->buckets[e->hash & (r->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(r, e);
    retry_unlink(r, e);
    r->count--;
    entry_free(e);
}

/* Drops the least recently used entries that nobody waits for until the table holds at most
 * cache_max - room. @locks r->lock */
static void evict(ks_registry_t *r, size_t room)
{
    entry_t *e = r->lru_tail;
    while (r->count + room > (size_t)r->cache_max && e) {
        entry_t *prev = e->lprev;
        if (!e->busy && !e->waiters) {
            entry_drop(r, e);
            r->st.evictions++;
        }
        e = prev;
    }
}

static void grow(ks_registry_t *r)
{
    size_t nb = r->nbuckets * 2;
    entry_t **b = calloc(nb, sizeof(*b));
    if (!b)
        abort();
    for (size_t i = 0; i < r->nbuckets; i++)
        for (entry_t *e = r->buckets[i], *next; e; e = next) {
            next = e->hnext;
            e->hnext = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    free(r->buckets);
    r->buckets = b;
    r->nbuckets = nb;
}

/* A new entry for the key, in the table and at the front of the LRU list. @locks r->lock */
static entry_t *entry_add(ks_registry_t *r, uint64_t h, ekind_t kind, int32_t id,
                          const char *subject, const char *version, ks_schema_type_t rtype,
                          const char *rtext)
{
    evict(r, 1); /* first, so that the new entry is not the one evicted */
    entry_t *e = calloc(1, sizeof(*e));
    if (!e)
        abort();
    e->kind = kind;
    e->id = id;
    e->subject = subject ? ks_xstrdup(subject) : NULL;
    e->version = version ? ks_xstrdup(version) : NULL;
    e->rtype = rtype;
    e->rtext = rtext ? ks_xstrdup(rtext) : NULL;
    e->hash = h;
    if (r->count >= r->nbuckets)
        grow(r);
    e->hnext = r->buckets[h & (r->nbuckets - 1)];
    r->buckets[h & (r->nbuckets - 1)] = e;
    r->count++;
    lru_front(r, e);
    return e;
}

/* Queues e's fetch and wakes the registry thread. @locks r->lock */
static void enqueue(ks_registry_t *r, entry_t *e)
{
    e->busy = true;
    retry_unlink(r, e);
    e->qnext = NULL;
    if (r->q_tail)
        r->q_tail->qnext = e;
    else
        r->q_head = e;
    r->q_tail = e;
    curl_multi_wakeup(r->multi);
}

/* Registers wake on e unless its ctx already waits there. @locks r->lock */
static void add_waiter(entry_t *e, const ks_registry_wake_t *wake)
{
    if (!wake || !wake->fn)
        return;
    for (waiter_t *w = e->waiters; w; w = w->next)
        if (w->w.ctx == wake->ctx && w->w.fn == wake->fn)
            return;
    waiter_t *w = malloc(sizeof(*w));
    if (!w)
        abort();
    w->w = *wake;
    w->next = e->waiters;
    e->waiters = w;
}

/* The answer for entry e (found or made for this lookup), by its state. @locks r->lock */
static ks_registry_status_t answer(ks_registry_t *r, entry_t *e, const ks_registry_wake_t *wake,
                                   ks_schema_t **out, char *err, size_t errsize)
{
    int64_t now = ks_now_ms();
    lru_front(r, e);
    switch (e->state) {
    case S_READY:
        /* A "latest" past its time is fetched again; the one kept serves meanwhile. */
        if (e->until && now >= e->until && !e->busy)
            enqueue(r, e);
        r->st.hits++;
        *out = ks_schema_ref(e->schema);
        return KS_REG_OK;
    case S_FETCHING:
        add_waiter(e, wake);
        return KS_REG_PENDING;
    case S_UNKNOWN:
        if (now < e->until) {
            snprintf(err, errsize, "%s", e->err);
            return KS_REG_UNKNOWN;
        }
        break;
    case S_FAILED:
        if (now < e->until) {
            snprintf(err, errsize, "%s", e->err);
            if (wake && wake->fn) {
                add_waiter(e, wake);
                if (!e->in_retry) { /* the registry thread retries it at e->until */
                    e->rnext = r->retry;
                    if (r->retry)
                        r->retry->rprev = e;
                    r->retry = e;
                    e->in_retry = true;
                    curl_multi_wakeup(r->multi);
                }
            }
            return KS_REG_UNAVAILABLE;
        }
        break;
    }
    /* Unknown or failed, and its time is over: ask again. */
    e->state = S_FETCHING;
    add_waiter(e, wake);
    enqueue(r, e);
    return KS_REG_PENDING;
}

static ks_registry_status_t lookup(ks_registry_t *r, ekind_t kind, int32_t id, const char *subject,
                                   const char *version, ks_schema_type_t rtype, const char *rtext,
                                   const ks_registry_wake_t *wake, ks_schema_t **out, char *err,
                                   size_t errsize)
{
    *out = NULL;
    if (errsize)
        err[0] = '\0';
    uint64_t h = key_hash(kind, id, subject, version, rtype, rtext);
    pthread_mutex_lock(&r->lock);
    entry_t *e = find(r, h, kind, id, subject, version, rtype, rtext);
    if (!e) {
        e = entry_add(r, h, kind, id, subject, version, rtype, rtext);
        e->state = S_FAILED; /* with until 0: fetched now, by answer() */
    }
    ks_registry_status_t st = answer(r, e, wake, out, err, errsize);
    pthread_mutex_unlock(&r->lock);
    return st;
}

ks_registry_status_t ks_registry_get(ks_registry_t *r, int32_t id, const ks_registry_wake_t *wake,
                                     ks_schema_t **out, char *err, size_t errsize)
{
    return lookup(r, E_ID, id, NULL, NULL, 0, NULL, wake, out, err, errsize);
}

/* A version is "latest" or a positive decimal number of at most 9 digits. */
static bool version_ok(const char *v)
{
    if (!strcmp(v, "latest"))
        return true;
    size_t n = strlen(v);
    if (n == 0 || n > 9 || v[0] == '0')
        return false;
    return strspn(v, "0123456789") == n;
}

ks_registry_status_t ks_registry_get_version(ks_registry_t *r, const char *subject,
                                             const char *version, const ks_registry_wake_t *wake,
                                             ks_schema_t **out, char *err, size_t errsize)
{
    if (!*subject || !version_ok(version)) {
        *out = NULL;
        snprintf(err, errsize, "%s",
                 !*subject ? "a subject must not be empty"
                           : "a version is a number from 1 or \"latest\"");
        return KS_REG_UNKNOWN;
    }
    return lookup(r, E_VERSION, 0, subject, version, 0, NULL, wake, out, err, errsize);
}

ks_registry_status_t ks_registry_register(ks_registry_t *r, const char *subject,
                                          ks_schema_type_t type, const char *text,
                                          const ks_registry_wake_t *wake, ks_schema_t **out,
                                          char *err, size_t errsize)
{
    if (!*subject) {
        *out = NULL;
        snprintf(err, errsize, "a subject must not be empty");
        return KS_REG_UNKNOWN;
    }
    return lookup(r, E_REGISTER, 0, subject, NULL, type, text, wake, out, err, errsize);
}

void ks_registry_cancel(ks_registry_t *r, void *ctx)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->nbuckets; i++)
        for (entry_t *e = r->buckets[i]; e; e = e->hnext)
            for (waiter_t **pp = &e->waiters; *pp;) {
                waiter_t *w = *pp;
                if (w->w.ctx == ctx) {
                    *pp = w->next;
                    free(w);
                } else {
                    pp = &w->next;
                }
            }
    for (waiter_t **pp = &r->firing; *pp;) {
        waiter_t *w = *pp;
        if (w->w.ctx == ctx) {
            *pp = w->next;
            free(w);
        } else {
            pp = &w->next;
        }
    }
    while (r->calling == ctx && !pthread_equal(pthread_self(), r->thread))
        pthread_cond_wait(&r->called, &r->lock);
    pthread_mutex_unlock(&r->lock);
}

bool ks_registry_auto_register(const ks_registry_t *r)
{
    return r->auto_register;
}

void ks_registry_stats(ks_registry_t *r, ks_registry_stats_t *st)
{
    pthread_mutex_lock(&r->lock);
    *st = r->st;
    st->entries = r->count;
    pthread_mutex_unlock(&r->lock);
}

/* ---- settling an entry (registry thread) ---- */

/* e's waiters move to the firing list. @locks r->lock */
static void fire(ks_registry_t *r, entry_t *e)
{
    while (e->waiters) {
        waiter_t *w = e->waiters;
        e->waiters = w->next;
        w->next = r->firing;
        r->firing = w;
    }
}

/* Calls the wakes of the firing list, one at a time, outside the lock. */
static void call_wakes(ks_registry_t *r)
{
    pthread_mutex_lock(&r->lock);
    while (r->firing) {
        waiter_t *w = r->firing;
        r->firing = w->next;
        r->calling = w->w.ctx;
        pthread_mutex_unlock(&r->lock);
        w->w.fn(w->w.ctx);
        free(w);
        pthread_mutex_lock(&r->lock);
        r->calling = NULL;
        pthread_cond_broadcast(&r->called);
    }
    pthread_mutex_unlock(&r->lock);
}

/* Caches s under its id too (a subject's version, a registered schema), unless the id's entry
 * is busy or already has it; waiters of a failed or unknown entry are woken. @locks r->lock */
static void cache_by_id(ks_registry_t *r, ks_schema_t *s)
{
    int32_t id = ks_schema_id(s);
    uint64_t h = key_hash(E_ID, id, NULL, NULL, 0, NULL);
    entry_t *e = find(r, h, E_ID, id, NULL, NULL, 0, NULL);
    if (!e)
        e = entry_add(r, h, E_ID, id, NULL, NULL, 0, NULL);
    else if (e->busy || e->state == S_READY)
        return;
    retry_unlink(r, e);
    free(e->err);
    e->err = NULL;
    e->state = S_READY;
    e->failures = 0;
    e->schema = ks_schema_ref(s);
    fire(r, e);
}

/* How an answer settles an entry. */
typedef enum { A_READY, A_UNKNOWN, A_FAILED } aresult_t;

/* Settles e: READY with s (taken), or UNKNOWN or FAILED with msg. e may be evicted by the
 * time it returns. @locks r->lock */
static void settle(ks_registry_t *r, entry_t *e, aresult_t res, ks_schema_t *s, const char *msg)
{
    int64_t now = ks_now_ms();
    free(e->err);
    e->err = NULL;
    if (res == A_READY) {
        ks_schema_unref(e->schema);
        e->schema = s;
        e->state = S_READY;
        e->failures = 0;
        e->until = e->kind == E_VERSION && !strcmp(e->version, "latest") ? now + r->latest_ms : 0;
        if (e->kind != E_ID)
            cache_by_id(r, s);
    } else if (e->state == S_READY && e->schema && res == A_FAILED) {
        /* A "latest" that could not be refreshed keeps serving the one it has. */
        e->until = now + r->backoff_ms;
        e->err = NULL;
    } else {
        ks_schema_unref(e->schema);
        e->schema = NULL;
        e->err = ks_xstrdup(msg);
        if (res == A_UNKNOWN) {
            e->state = S_UNKNOWN;
            e->until = now + r->unknown_ms;
            e->failures = 0;
        } else {
            e->state = S_FAILED;
            int64_t b = r->backoff_ms;
            for (int i = 0; i < e->failures && b < r->backoff_max_ms; i++)
                b *= 2;
            e->until = now + (b < r->backoff_max_ms ? b : r->backoff_max_ms);
            e->failures++;
            r->st.failures++;
        }
    }
    fire(r, e);
    e->busy = false; /* only now: cache_by_id's eviction must not take e */
    evict(r, 0);
}

/* ---- requests (registry thread) ---- */

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    xfer_t *x = ud;
    size_t len = size * n;
    if (x->len + len > MAX_BODY) {
        x->too_big = true;
        return 0;
    }
    char *nb = realloc(x->body, x->len + len + 1);
    if (!nb)
        abort();
    memcpy(nb + x->len, p, len);
    x->len += len;
    nb[x->len] = '\0';
    x->body = nb;
    return len;
}

/* Reads the bearer token file again if it changed. Returns 0, or -1 with err. */
static int token_load(ks_registry_t *r, char *err, size_t errsize)
{
    struct stat st;
    if (stat(r->token_file, &st) < 0) {
        snprintf(err, errsize, "schema_registry.bearer_token_file %s: %s", r->token_file,
                 strerror(errno));
        return -1;
    }
    if (r->token && r->token_seen && st.st_ino == r->token_st.st_ino &&
        st.st_dev == r->token_st.st_dev && st.st_size == r->token_st.st_size &&
        st.st_mtim.tv_sec == r->token_st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == r->token_st.st_mtim.tv_nsec)
        return 0;
    char *t = ks_read_file(r->token_file);
    if (!t) {
        snprintf(err, errsize, "schema_registry.bearer_token_file %s: %s", r->token_file,
                 strerror(errno));
        return -1;
    }
    size_t n = strlen(t);
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' ' || t[n - 1] == '\t'))
        t[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] > 0x7e) {
            free(t);
            snprintf(err, errsize,
                     "schema_registry.bearer_token_file %s: a token is visible ASCII only",
                     r->token_file);
            return -1;
        }
    if (!n) {
        free(t);
        snprintf(err, errsize, "schema_registry.bearer_token_file %s is empty", r->token_file);
        return -1;
    }
    free(r->token);
    r->token = t;
    r->token_st = st;
    r->token_seen = true;
    return 0;
}

/* The path of e's request after the base URL. Returns a new string. */
static char *req_path(CURL *easy, const entry_t *e)
{
    char buf[64];
    if (e->kind == E_ID) {
        snprintf(buf, sizeof(buf), "/schemas/ids/%" PRId32, e->id);
        return ks_xstrdup(buf);
    }
    char *subj = curl_easy_escape(easy, e->subject, 0);
    if (!subj)
        abort();
    size_t n = strlen(subj) + (e->version ? strlen(e->version) : 0) + 32;
    char *p = malloc(n);
    if (!p)
        abort();
    if (e->kind == E_VERSION)
        snprintf(p, n, "/subjects/%s/versions/%s", subj, e->version);
    else
        snprintf(p, n, "/subjects/%s/versions", subj);
    curl_free(subj);
    return p;
}

static void xfer_free(xfer_t *x)
{
    if (x->easy)
        curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->hdrs);
    free(x->body);
    free(x->post);
    free(x);
}

/* Appends "url: what" to x's error text. */
static void xfer_err(xfer_t *x, const char *url, const char *what)
{
    size_t n = strlen(x->errs);
    if (n < sizeof(x->errs) - 1)
        snprintf(x->errs + n, sizeof(x->errs) - n, "%s%s: %s", n ? "; " : "", url, what);
}

/* Starts x's request to URL x->url_i. Returns 0, or -1 with x->errs (nothing was sent). */
static int xfer_start(ks_registry_t *r, xfer_t *x)
{
    const entry_t *e = x->e;
    x->tried++; /* tried, whether or not anything is sent */
    if (x->easy)
        curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    free(x->body);
    x->body = NULL;
    x->len = 0;
    x->too_big = false;
    x->errbuf[0] = '\0';
    CURL *c = x->easy = curl_easy_init();
    if (!c)
        abort();
    const char *base = r->urls[x->url_i];
    char *path = req_path(c, e);
    size_t ul = strlen(base) + strlen(path) + 1;
    char *url = malloc(ul);
    if (!url)
        abort();
    snprintf(url, ul, "%s%s", base, path);
    free(path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    free(url); /* libcurl keeps its own copy */
    x->hdrs = curl_slist_append(x->hdrs, "Accept: application/vnd.schemaregistry.v1+json, "
                                         "application/vnd.schemaregistry+json, application/json");
    if (*r->token_file) {
        char err[300];
        if (token_load(r, err, sizeof(err)) < 0) {
            xfer_err(x, base, err);
            return -1;
        }
        size_t hl = strlen(r->token) + 32;
        char *h = malloc(hl);
        if (!h)
            abort();
        snprintf(h, hl, "Authorization: Bearer %s", r->token);
        x->hdrs = curl_slist_append(x->hdrs, h);
        free(h);
    }
    if (e->kind == E_REGISTER) {
        if (!x->post) {
            json_t *j = json_pack("{s:s}", "schema", e->rtext);
            if (j && e->rtype != KS_SCHEMA_AVRO)
                json_object_set_new(j, "schemaType", json_string(ks_schema_type_str(e->rtype)));
            x->post = j ? json_dumps(j, JSON_COMPACT) : NULL;
            json_decref(j);
            if (!x->post) {
                xfer_err(x, base, "the schema text is not valid UTF-8");
                return -1;
            }
        }
        x->hdrs =
            curl_slist_append(x->hdrs, "Content-Type: application/vnd.schemaregistry.v1+json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, x->post);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(c, CURLOPT_PRIVATE, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)r->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)r->timeout_ms);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_USERAGENT, "ksidecar/" KSIDECAR_VERSION);
    if (*r->basic_auth) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERPWD, r->basic_auth);
    }
    if (*r->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, r->ca_file);
    if (*r->cert_file) {
        curl_easy_setopt(c, CURLOPT_SSLCERT, r->cert_file);
        curl_easy_setopt(c, CURLOPT_SSLKEY, r->key_file);
    }
    pthread_mutex_lock(&r->lock);
    r->st.requests++;
    pthread_mutex_unlock(&r->lock);
    curl_multi_add_handle(r->multi, c);
    return 0;
}

/* The registry's own words in an error answer ({"error_code":..,"message":..}), else the start
 * of the body, as printable text. */
static void answer_words(const xfer_t *x, long code, char *out, size_t size)
{
    json_t *j = x->body ? json_loadb(x->body, x->len, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(j, "message"));
    if (m) {
        snprintf(out, size, "HTTP %ld: %s", code, m);
    } else {
        char start[120];
        size_t n = x->body ? (x->len < sizeof(start) - 1 ? x->len : sizeof(start) - 1) : 0;
        for (size_t i = 0; i < n; i++)
            start[i] = (unsigned char)x->body[i] < 0x20 || x->body[i] == 0x7f ? '?' : x->body[i];
        start[n] = '\0';
        snprintf(out, size, "HTTP %ld%s%s", code, n ? ": " : "", start);
    }
    json_decref(j);
}

/* Makes the schema of a 200 answer to e. Returns it, or NULL with what (a malformed answer),
 * *res saying whether that is worth another URL (A_FAILED) or final (A_UNKNOWN). */
static ks_schema_t *parse_answer(const xfer_t *x, aresult_t *res, char *what, size_t wsize)
{
    const entry_t *e = x->e;
    json_error_t je;
    json_t *j = json_loadb(x->body ? x->body : "", x->len, 0, &je);
    ks_schema_t *s = NULL;
    *res = A_FAILED;
    if (!json_is_object(j)) {
        snprintf(what, wsize, "the answer is not a JSON object (%s)", j ? "" : je.text);
        goto out;
    }
    json_t *jid = json_object_get(j, "id");
    int32_t id = e->id;
    if (e->kind != E_ID) {
        if (!json_is_integer(jid) || json_integer_value(jid) < 0 ||
            json_integer_value(jid) > INT32_MAX) {
            snprintf(what, wsize, "the answer has no schema id");
            goto out;
        }
        id = (int32_t)json_integer_value(jid);
    }
    ks_schema_type_t type = e->kind == E_REGISTER ? e->rtype : KS_SCHEMA_AVRO;
    json_t *jt = json_object_get(j, "schemaType");
    if (e->kind != E_REGISTER && json_is_string(jt)) {
        int t = ks_schema_type_from_str(json_string_value(jt));
        if (t < 0) {
            snprintf(what, wsize, "schema %" PRId32 " is of type %s, which ksidecar does not read",
                     id, json_string_value(jt));
            *res = A_UNKNOWN;
            goto out;
        }
        type = (ks_schema_type_t)t;
    }
    const char *text = e->rtext;
    size_t tlen = text ? strlen(text) : 0;
    if (e->kind != E_REGISTER) {
        json_t *js = json_object_get(j, "schema");
        if (!json_is_string(js)) {
            snprintf(what, wsize, "the answer has no schema text");
            goto out;
        }
        text = json_string_value(js);
        tlen = json_string_length(js);
    }
    json_t *jr = json_object_get(j, "references");
    char *refs = json_is_array(jr) && json_array_size(jr) ? json_dumps(jr, JSON_COMPACT) : NULL;
    s = ks_schema_new(id, type, text, tlen, refs);
    free(refs);
    *res = A_READY;
out:
    json_decref(j);
    return s;
}

/* A request ended: settle its entry, or try the next URL. Returns true when x is done. */
static bool xfer_done(ks_registry_t *r, xfer_t *x, CURLcode rc)
{
    const char *base = r->urls[x->url_i];
    long code = 0;
    char what[300];
    aresult_t res = A_FAILED;
    ks_schema_t *s = NULL;
    if (rc != CURLE_OK) {
        snprintf(what, sizeof(what), "%s",
                 x->too_big   ? "the answer is larger than 16 MiB"
                 : *x->errbuf ? x->errbuf
                              : curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code == 200) {
            s = parse_answer(x, &res, what, sizeof(what));
        } else {
            answer_words(x, code, what, sizeof(what));
            /* The registry's answer about this request: another URL would say the same. 401,
             * 403, 408, 429 and 5xx are about the server or our credentials: try the next. */
            if (code >= 400 && code < 500 && code != 401 && code != 403 && code != 408 &&
                code != 429)
                res = A_UNKNOWN;
        }
    }
    if (res == A_READY) {
        r->url_good = x->url_i;
    } else {
        xfer_err(x, base, what);
        if (res == A_FAILED && x->tried < r->url_cnt) {
            x->url_i = (x->url_i + 1) % r->url_cnt;
            curl_multi_remove_handle(r->multi, x->easy);
            if (xfer_start(r, x) == 0)
                return false;
        }
    }
    pthread_mutex_lock(&r->lock);
    settle(r, x->e, res, s, x->errs);
    pthread_mutex_unlock(&r->lock);
    if (res != A_READY)
        ks_warn(RLOG, "%s", x->errs);
    return true;
}

/* Starts queued fetches while fewer than MAX_ACTIVE run; moves retries that are due to the
 * queue. Returns the ms until the next retry is due (-1: none). */
static long start_queued(ks_registry_t *r)
{
    long wait = -1;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        int64_t now = ks_now_ms();
        for (entry_t *e = r->retry, *next; e; e = next) {
            next = e->rnext;
            if (!e->waiters) {
                retry_unlink(r, e);
            } else if (now >= e->until) {
                e->state = S_FETCHING;
                enqueue(r, e);
            } else if (wait < 0 || e->until - now < wait) {
                wait = (long)(e->until - now);
            }
        }
        entry_t *e = r->active < MAX_ACTIVE ? r->q_head : NULL;
        if (e) {
            r->q_head = e->qnext;
            if (!r->q_head)
                r->q_tail = NULL;
        }
        pthread_mutex_unlock(&r->lock);
        if (!e)
            return wait;
        xfer_t *x = calloc(1, sizeof(*x));
        if (!x)
            abort();
        x->e = e;
        x->url_i = r->url_good;
        bool started = false;
        while (x->tried < r->url_cnt && !(started = xfer_start(r, x) == 0))
            x->url_i = (x->url_i + 1) % r->url_cnt;
        if (started) {
            x->next = r->xfers;
            r->xfers = x;
            r->active++;
            continue;
        }
        pthread_mutex_lock(&r->lock);
        settle(r, e, A_FAILED, NULL, x->errs);
        pthread_mutex_unlock(&r->lock);
        ks_warn(RLOG, "%s", x->errs);
        xfer_free(x);
    }
}

static void *registry_thread(void *arg)
{
    ks_registry_t *r = arg;
    while (!atomic_load(&r->stop)) {
        long wait = start_queued(r);
        call_wakes(r);
        int running = 0;
        curl_multi_perform(r->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(r->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            xfer_t *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode rc = m->data.result;
            if (xfer_done(r, x, rc)) {
                curl_multi_remove_handle(r->multi, x->easy);
                xfer_t **pp = &r->xfers;
                while (*pp != x)
                    pp = &(*pp)->next;
                *pp = x->next;
                xfer_free(x);
                r->active--;
            }
        }
        call_wakes(r);
        /* Woken by curl_multi_wakeup (a fetch queued, or stop); libcurl's own timers and the
         * next retry shorten it. */
        curl_multi_poll(r->multi, NULL, 0, wait < 0 || wait > 1000 ? 1000 : (int)wait, NULL);
    }
    return NULL;
}

/* ---- start and stop ---- */

void ks_registry_conf_from(ks_registry_conf_t *conf, const ks_config_t *cfg)
{
    memset(conf, 0, sizeof(*conf));
    conf->urls = (const char *const *)cfg->schema_registry_urls;
    conf->url_cnt = cfg->schema_registry_url_cnt;
    conf->basic_auth = cfg->schema_registry_basic_auth;
    conf->bearer_token_file = cfg->schema_registry_bearer_token_file;
    conf->ca_file = cfg->schema_registry_ca_file;
    conf->cert_file = cfg->schema_registry_cert_file;
    conf->key_file = cfg->schema_registry_key_file;
    conf->timeout_ms = cfg->schema_registry_timeout_ms;
    conf->cache_max = cfg->schema_registry_cache_max;
    conf->auto_register = cfg->schema_registry_auto_register;
}

static char *dup_or_empty(const char *s)
{
    return ks_xstrdup(s ? s : "");
}

int ks_registry_new(const ks_registry_conf_t *c, ks_registry_t **out, char *err, size_t errsize)
{
    *out = NULL;
    if (!c->url_cnt) {
        snprintf(err, errsize, "schema registry: no URL");
        return -1;
    }
    for (size_t i = 0; i < c->url_cnt; i++)
        if (strncmp(c->urls[i], "http://", 7) && strncmp(c->urls[i], "https://", 8)) {
            snprintf(err, errsize, "schema registry: \"%s\" is not an http:// or https:// URL",
                     c->urls[i]);
            return -1;
        }
    if (c->basic_auth && *c->basic_auth && !strchr(c->basic_auth, ':')) {
        snprintf(err, errsize, "schema registry: basic auth is user:password");
        return -1;
    }
    if (c->basic_auth && *c->basic_auth && c->bearer_token_file && *c->bearer_token_file) {
        snprintf(err, errsize,
                 "schema registry: basic auth and a bearer token file exclude each "
                 "other");
        return -1;
    }
    if (!(c->cert_file && *c->cert_file) != !(c->key_file && *c->key_file)) {
        snprintf(err, errsize, "schema registry: a client certificate and its key go together");
        return -1;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        snprintf(err, errsize, "schema registry: libcurl could not start");
        return -1;
    }
    ks_registry_t *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    r->urls = calloc(c->url_cnt, sizeof(char *));
    if (!r->urls)
        abort();
    for (size_t i = 0; i < c->url_cnt; i++) {
        r->urls[i] = ks_xstrdup(c->urls[i]);
        size_t n = strlen(r->urls[i]);
        while (n > 8 && r->urls[i][n - 1] == '/')
            r->urls[i][--n] = '\0';
    }
    r->url_cnt = c->url_cnt;
    r->basic_auth = dup_or_empty(c->basic_auth);
    r->token_file = dup_or_empty(c->bearer_token_file);
    r->ca_file = dup_or_empty(c->ca_file);
    r->cert_file = dup_or_empty(c->cert_file);
    r->key_file = dup_or_empty(c->key_file);
    r->timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : 5000;
    r->cache_max = c->cache_max > 0 ? c->cache_max : 1000;
    r->auto_register = c->auto_register;
    r->backoff_ms = c->backoff_ms > 0 ? c->backoff_ms : DEF_BACKOFF;
    r->backoff_max_ms = c->backoff_max_ms > 0 ? c->backoff_max_ms : DEF_BACKOFF_MAX;
    r->unknown_ms = c->unknown_ms > 0 ? c->unknown_ms : DEF_UNKNOWN;
    r->latest_ms = c->latest_ms > 0 ? c->latest_ms : DEF_LATEST;
    r->nbuckets = 64;
    r->buckets = calloc(r->nbuckets, sizeof(*r->buckets));
    if (!r->buckets)
        abort();
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->called, NULL);
    atomic_init(&r->stop, false);
    r->multi = curl_multi_init();
    if (!r->multi || pthread_create(&r->thread, NULL, registry_thread, r)) {
        snprintf(err, errsize, "schema registry: %s",
                 r->multi ? "its thread did not start" : "libcurl could not start");
        if (r->multi)
            curl_multi_cleanup(r->multi);
        r->multi = NULL;
        r->thread = pthread_self(); /* no thread to join */
        ks_registry_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void ks_registry_free(ks_registry_t *r)
{
    if (!r)
        return;
    if (r->multi) {
        atomic_store(&r->stop, true);
        curl_multi_wakeup(r->multi);
        pthread_join(r->thread, NULL);
        while (r->xfers) {
            xfer_t *x = r->xfers;
            r->xfers = x->next;
            curl_multi_remove_handle(r->multi, x->easy);
            xfer_free(x);
        }
        curl_multi_cleanup(r->multi);
    }
    for (size_t i = 0; i < r->nbuckets; i++)
        for (entry_t *e = r->buckets[i], *next; e; e = next) {
            next = e->hnext;
            entry_free(e);
        }
    while (r->firing) {
        waiter_t *w = r->firing;
        r->firing = w->next;
        free(w);
    }
    free(r->buckets);
    for (size_t i = 0; i < r->url_cnt; i++)
        free(r->urls[i]);
    free(r->urls);
    free(r->basic_auth);
    free(r->token_file);
    free(r->ca_file);
    free(r->cert_file);
    free(r->key_file);
    free(r->token);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->called);
    free(r);
}
