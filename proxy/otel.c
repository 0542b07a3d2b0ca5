/* otel.c: ksidecar's spans, their queue and their exporter thread (OTLP/HTTP, protobuf or JSON,
 * on libcurl). */
#include "otel.h"

#include <curl/curl.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "ksidecar/otlp/trace.pb-c.h"
#include "log.h"
#include "util.h"

bool ks_otel_on = false;

enum { SAMPLE_ON, SAMPLE_OFF, SAMPLE_RATIO };

typedef struct {
    char url[1024];
    struct curl_slist *headers;
    char service[256], resource[2048]; /* resource: extra attributes, k=v,... */
    int root, parent_on;               /* the root sampler; parentbased_* follow the parent */
    bool parent_based, protobuf;
    double ratio;
    size_t queue_max, batch_max;
    int delay_ms, timeout_ms;
    /* the queue: a ring of queue_max spans */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ks_otel_span_t *ring;
    size_t head, cnt;
    bool stopping;
    int64_t stop_by_ms;
    pthread_t thr;
    uint64_t dropped, exported; /* under mu */
} otel_t;

static otel_t O = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* ---- configuration ---- */

static const char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

/* The key's value when set, else the environment's, else def. */
static const char *pick(const char *key, char **envp, const char *env, const char *def)
{
    if (key && *key)
        return key;
    const char *v = env_get(envp, env);
    return v && *v ? v : def;
}

static int pick_int(int key, char **envp, const char *env, int def, int lo, int hi)
{
    if (key > 0)
        return key;
    const char *v = env_get(envp, env);
    if (!v || !*v)
        return def;
    char *end;
    long n = strtol(v, &end, 10);
    return *end || n < lo || n > hi ? def : (int)n;
}

/* Decodes %XX in s in place (OTEL_EXPORTER_OTLP_HEADERS values are URL-encoded). */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        unsigned hi, lo;
        if (*s == '%' && sscanf(s + 1, "%1x%1x", &hi, &lo) == 2) {
            *o++ = (char)(hi * 16 + lo);
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

static void trim(char **s)
{
    while (**s == ' ')
        (*s)++;
    char *e = *s + strlen(*s);
    while (e > *s && e[-1] == ' ')
        *--e = '\0';
}

/* "k=v,k2=v2" into curl header lines. -1 for a malformed one. */
static int parse_headers(const char *spec, char *err, size_t errsize)
{
    char *copy = ks_xstrdup(spec), *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, errsize, "otel.headers: \"%s\" is not key=value", item);
            free(copy);
            return -1;
        }
        *eq = '\0';
        char *k = item, *v = eq + 1;
        trim(&k);
        trim(&v);
        unescape(v);
        if (!*k || strpbrk(k, "\r\n:") || strpbrk(v, "\r\n")) {
            snprintf(err, errsize, "otel.headers: bad header \"%s\"", k);
            free(copy);
            return -1;
        }
        char line[2048];
        snprintf(line, sizeof(line), "%s: %s", k, v);
        O.headers = curl_slist_append(O.headers, line);
    }
    free(copy);
    return 0;
}

static int parse_sampler(const char *name, const char *arg, char *err, size_t errsize)
{
    O.parent_based = !strncmp(name, "parentbased_", 12);
    const char *root = O.parent_based ? name + 12 : name;
    O.ratio = 1.0;
    if (!strcmp(root, "always_on")) {
        O.root = SAMPLE_ON;
    } else if (!strcmp(root, "always_off")) {
        O.root = SAMPLE_OFF;
    } else if (!strcmp(root, "traceidratio")) {
        O.root = SAMPLE_RATIO;
        char *end = NULL;
        double r = arg && *arg ? strtod(arg, &end) : 1.0;
        if ((end && *end) || !(r >= 0 && r <= 1)) {
            snprintf(err, errsize, "otel.sampler_arg: \"%s\" is not a ratio in [0, 1]", arg);
            return -1;
        }
        O.ratio = r;
    } else {
        snprintf(err, errsize,
                 "otel.sampler: \"%s\" is not always_on, always_off, traceidratio or their "
                 "parentbased_ forms",
                 name);
        return -1;
    }
    return 0;
}

static void *exporter(void *arg);

int ks_otel_start(const ks_config_t *cfg, char **envp, char *err, size_t errsize)
{
    const char *off = env_get(envp, "OTEL_SDK_DISABLED");
    if (off && !strcasecmp(off, "true"))
        return 0;
    const char *traces = pick(cfg->otel_endpoint, envp, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "");
    if (*traces) {
        snprintf(O.url, sizeof(O.url), "%s", traces); /* a signal's endpoint is used as it is */
    } else {
        const char *base = pick(NULL, envp, "OTEL_EXPORTER_OTLP_ENDPOINT", "");
        if (!*base)
            return 0; /* no endpoint: tracing off */
        size_t n = strlen(base);
        snprintf(O.url, sizeof(O.url), "%s%s", base,
                 n && base[n - 1] == '/' ? "v1/traces" : "/v1/traces");
    }
    if (strncmp(O.url, "http://", 7) && strncmp(O.url, "https://", 8)) {
        snprintf(err, errsize, "otel.endpoint: \"%s\" is not an http:// or https:// url", O.url);
        return -1;
    }
    const char *proto = pick(cfg->otel_protocol, envp, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                             pick(NULL, envp, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"));
    O.protobuf = !strcmp(proto, "http/protobuf");
    if (!O.protobuf && strcmp(proto, "http/json")) {
        snprintf(err, errsize, "otel.protocol: \"%s\" is not http/protobuf or http/json", proto);
        return -1;
    }
    O.headers = curl_slist_append(NULL, O.protobuf ? "Content-Type: application/x-protobuf"
                                                   : "Content-Type: application/json");
    const char *hdrs = pick(cfg->otel_headers, envp, "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                            pick(NULL, envp, "OTEL_EXPORTER_OTLP_HEADERS", ""));
    if (parse_headers(hdrs, err, errsize) < 0)
        return -1;
    snprintf(O.service, sizeof(O.service), "%s",
             pick(cfg->otel_service_name, envp, "OTEL_SERVICE_NAME", "ksidecar"));
    snprintf(O.resource, sizeof(O.resource), "%s",
             pick(NULL, envp, "OTEL_RESOURCE_ATTRIBUTES", ""));
    if (parse_sampler(pick(cfg->otel_sampler, envp, "OTEL_TRACES_SAMPLER", "parentbased_always_on"),
                      pick(cfg->otel_sampler_arg, envp, "OTEL_TRACES_SAMPLER_ARG", ""), err,
                      errsize) < 0)
        return -1;
    O.queue_max =
        (size_t)pick_int(cfg->otel_queue_size, envp, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1, 10000000);
    O.batch_max = (size_t)pick_int(cfg->otel_batch_size, envp, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                                   512, 1, 10000000);
    if (O.batch_max > O.queue_max)
        O.batch_max = O.queue_max;
    O.delay_ms = pick_int(cfg->otel_delay_ms, envp, "OTEL_BSP_SCHEDULE_DELAY", 5000, 0, 3600000);
    O.timeout_ms = pick_int(0, envp, "OTEL_BSP_EXPORT_TIMEOUT", 30000, 1, 3600000);
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        snprintf(err, errsize, "otel: libcurl did not initialise");
        return -1;
    }
    O.ring = calloc(O.queue_max, sizeof(*O.ring));
    if (!O.ring)
        abort();
    if (pthread_create(&O.thr, NULL, exporter, NULL)) {
        snprintf(err, errsize, "otel: cannot start the exporter thread");
        return -1;
    }
    pthread_setname_np(O.thr, "ks:otel");
    ks_otel_on = true;
    ks_info("otel", "exporting spans to %s (OTLP/HTTP JSON), service %s", O.url, O.service);
    return 0;
}

void ks_otel_stop(int grace_ms)
{
    if (!ks_otel_on)
        return;
    pthread_mutex_lock(&O.mu);
    O.stopping = true;
    O.stop_by_ms = ks_now_ms() + grace_ms;
    pthread_cond_signal(&O.cv);
    pthread_mutex_unlock(&O.mu);
    pthread_join(O.thr, NULL);
    ks_otel_on = false;
    curl_slist_free_all(O.headers);
    O.headers = NULL;
    free(O.ring);
    O.ring = NULL;
}

/* ---- context, sampling, ids ---- */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* n bytes from 2n lower-case hex digits; false if any is not one, or all are zero. */
static bool unhex(const char *s, uint8_t *out, size_t n, bool id)
{
    bool nonzero = false;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi * 16 + lo);
        nonzero |= out[i] != 0;
    }
    return nonzero || !id;
}

bool ks_otel_context(const ks_header_t *hs, size_t n, uint8_t trace[16], uint8_t parent[8],
                     uint8_t *flags)
{
    const ks_header_t *tp = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(hs[i].name, "traceparent"))
            continue;
        if (tp)
            return false;
        tp = &hs[i];
    }
    return tp && ks_otel_traceparent_parse(tp->value, tp->value_len, trace, parent, flags);
}

bool ks_otel_traceparent_parse(const char *v, size_t n, uint8_t trace[16], uint8_t parent[8],
                               uint8_t *flags)
{
    return v && n == 55 && !memcmp(v, "00-", 3) && v[35] == '-' && v[52] == '-' &&
           unhex(v + 3, trace, 16, true) && unhex(v + 36, parent, 8, true) &&
           unhex(v + 53, flags, 1, false);
}

bool ks_otel_sampled(const uint8_t trace[16], bool has_parent, uint8_t parent_flags)
{
    if (has_parent && O.parent_based)
        return parent_flags & 1;
    if (O.root == SAMPLE_ON)
        return true;
    if (O.root == SAMPLE_OFF)
        return false;
    uint64_t lo; /* the trace id's last 8 bytes, big-endian, as the ratio sampler reads them */
    memcpy(&lo, trace + 8, 8);
    lo = be64toh(lo);
    return (double)(lo >> 11) < O.ratio * (double)(1ULL << 53);
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void ks_otel_ids(uint64_t seed, uint8_t trace[16], uint8_t span[8])
{
    uint64_t a = mix(seed), b = mix(a), c = mix(b);
    uint64_t w[3] = {htole64(a), htole64(b), htole64(c)}; /* byte i: bits 8i.. of each */
    memcpy(trace, &w[0], 8); /* a store each, where a loop of bytes was 150 instructions */
    memcpy(trace + 8, &w[1], 8);
    memcpy(span, &w[2], 8);
    span[0] |= 1; /* never all zero */
    trace[15] |= 1;
}

static void hex(char *o, const uint8_t *b, size_t n)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        o[2 * i] = d[b[i] >> 4];
        o[2 * i + 1] = d[b[i] & 15];
    }
    o[2 * n] = '\0';
}

void ks_otel_traceparent(char out[56], const uint8_t trace[16], const uint8_t span[8],
                         uint8_t flags)
{
    memcpy(out, "00-", 3);
    hex(out + 3, trace, 16);
    out[35] = '-';
    hex(out + 36, span, 8);
    out[52] = '-';
    hex(out + 53, &flags, 1);
}

/* ---- the queue ---- */

bool ks_otel_push(const ks_otel_span_t *s)
{
    pthread_mutex_lock(&O.mu);
    bool ok = O.ring && O.cnt < O.queue_max && !O.stopping;
    if (ok) {
        O.ring[(O.head + O.cnt) % O.queue_max] = *s;
        if (++O.cnt == O.batch_max)
            pthread_cond_signal(&O.cv);
    } else {
        O.dropped++;
    }
    pthread_mutex_unlock(&O.mu);
    return ok;
}

uint64_t ks_otel_dropped(void)
{
    pthread_mutex_lock(&O.mu);
    uint64_t n = O.dropped;
    pthread_mutex_unlock(&O.mu);
    return n;
}

uint64_t ks_otel_exported(void)
{
    pthread_mutex_lock(&O.mu);
    uint64_t n = O.exported;
    pthread_mutex_unlock(&O.mu);
    return n;
}

/* ---- the exporter ---- */

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static void put(buf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(buf_t *b, const char *s)
{
    put(b, s, strlen(s));
}

static void putf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(buf_t *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    put(b, tmp, n < 0 ? 0 : (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string of s (bytes below 0x20, '"' and '\\' escaped; the rest as they are). */
static void jstr(buf_t *b, const char *s)
{
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c < 0x20) {
            putf(b, "\\u%04x", c);
        } else {
            put(b, s, 1);
        }
    }
    put(b, "\"", 1);
}

/* ---- the payload: one attribute list, written as JSON or protobuf ---- */

typedef struct {
    const char *key, *str; /* str NULL: an int */
    int64_t num;
} attr_t;

#define ATTRS_MAX 24

/* The resource's attributes (into strings owned by res_buf). */
static size_t resource_attrs(attr_t *a, char *res_buf, size_t res_size, char *host,
                             size_t host_size, int64_t *pid)
{
    size_t n = 0;
    a[n++] = (attr_t){"service.name", O.service, 0};
    a[n++] = (attr_t){"service.version", KSIDECAR_VERSION, 0};
    a[n++] = (attr_t){"telemetry.sdk.name", "ksidecar", 0};
    if (!gethostname(host, host_size - 1)) {
        host[host_size - 1] = '\0';
        a[n++] = (attr_t){"host.name", host, 0};
    }
    *pid = (int64_t)getpid();
    a[n++] = (attr_t){"process.pid", NULL, *pid};
    snprintf(res_buf, res_size, "%s", O.resource);
    char *save = NULL;
    for (char *it = strtok_r(res_buf, ",", &save); it && n < ATTRS_MAX;
         it = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(it, '=');
        if (!eq)
            continue;
        *eq = '\0';
        char *k = it, *v = eq + 1;
        trim(&k);
        trim(&v);
        unescape(v);
        if (*k && strcmp(k, "service.name"))
            a[n++] = (attr_t){k, v, 0};
    }
    return n;
}

/* A span's attributes; part: room for the partition id's text. A batch's receive span names
 * no one record: its count instead of a partition, an offset, a key and an attempt. */
static size_t span_attrs(const ks_otel_span_t *s, attr_t *a, char part[16])
{
    size_t n = 0;
    a[n++] = (attr_t){"messaging.system", "kafka", 0};
    a[n++] = (attr_t){"messaging.operation.type", s->op, 0};
    a[n++] = (attr_t){"messaging.operation.name", s->op, 0};
    if (*s->topic)
        a[n++] = (attr_t){"messaging.destination.name", s->topic, 0};
    if (s->batch > 1) {
        a[n++] = (attr_t){"messaging.batch.message_count", NULL, s->batch};
    } else {
        snprintf(part, 16, "%d", (int)s->partition);
        a[n++] = (attr_t){"messaging.destination.partition.id", part, 0};
        a[n++] = (attr_t){"messaging.kafka.offset", NULL, s->offset};
    }
    a[n++] = (attr_t){"messaging.consumer.group.name", s->group, 0};
    if (s->has_key)
        a[n++] = (attr_t){"messaging.kafka.message.key", s->key, 0};
    if (s->batch <= 1)
        a[n++] = (attr_t){"ksidecar.attempt", NULL, s->attempt};
    if (*s->subscriber)
        a[n++] = (attr_t){"ksidecar.subscriber", s->subscriber, 0};
    if (s->transport)
        a[n++] = (attr_t){"ksidecar.transport", s->transport, 0};
    return n;
}

static size_t event_attrs(const ks_otel_span_t *s, const ks_otel_event_t *e, attr_t *a)
{
    size_t n = 0;
    a[n++] = (attr_t){"ksidecar.attempt", NULL, s->attempt};
    if (*e->reason)
        a[n++] = (attr_t){"ksidecar.reason", e->reason, 0};
    return n;
}

/* JSON (OTLP's JSON mapping: ids in hex, 64-bit numbers as strings). */
static void json_attrs(buf_t *b, const attr_t *a, size_t n)
{
    puts_(b, "[");
    for (size_t i = 0; i < n; i++) {
        puts_(b, i ? ",{\"key\":" : "{\"key\":");
        jstr(b, a[i].key);
        if (a[i].str) {
            puts_(b, ",\"value\":{\"stringValue\":");
            jstr(b, a[i].str);
            puts_(b, "}}");
        } else {
            putf(b, ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", a[i].num);
        }
    }
    puts_(b, "]");
}

static void json_body(buf_t *b, const ks_otel_span_t *spans, size_t cnt)
{
    attr_t a[ATTRS_MAX];
    char res[2048], host[256], part[16], t[33], id[17], par[17];
    int64_t pid;
    puts_(b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":");
    json_attrs(b, a, resource_attrs(a, res, sizeof(res), host, sizeof(host), &pid));
    puts_(b, "},\"scopeSpans\":[{\"scope\":{\"name\":\"ksidecar\",\"version\":\"" KSIDECAR_VERSION
             "\"},\"spans\":[");
    for (size_t k = 0; k < cnt; k++) {
        const ks_otel_span_t *s = &spans[k];
        hex(t, s->trace_id, 16);
        hex(id, s->span_id, 8);
        putf(b, "%s{\"traceId\":\"%s\",\"spanId\":\"%s\"", k ? "," : "", t, id);
        if (s->has_parent) {
            hex(par, s->parent_id, 8);
            putf(b, ",\"parentSpanId\":\"%s\"", par);
        }
        puts_(b, ",\"name\":");
        jstr(b, s->name);
        putf(b,
             ",\"kind\":5,\"startTimeUnixNano\":\"%" PRId64 "\",\"endTimeUnixNano\":\"%" PRId64
             "\",\"attributes\":",
             s->start_ns, s->end_ns);
        json_attrs(b, a, span_attrs(s, a, part));
        puts_(b, ",\"events\":[");
        for (size_t i = 0; i < s->event_cnt; i++) {
            const ks_otel_event_t *e = &s->events[i];
            putf(b, "%s{\"timeUnixNano\":\"%" PRId64 "\",\"name\":", i ? "," : "", e->time_ns);
            jstr(b, e->name);
            puts_(b, ",\"attributes\":");
            json_attrs(b, a, event_attrs(s, e, a));
            puts_(b, "}");
        }
        puts_(b, "],\"links\":[");
        for (size_t i = 0; i < s->link_cnt; i++) {
            hex(t, s->links[i].trace_id, 16);
            hex(id, s->links[i].span_id, 8);
            putf(b, "%s{\"traceId\":\"%s\",\"spanId\":\"%s\",\"flags\":%u}", i ? "," : "", t, id,
                 (unsigned)s->links[i].flags);
        }
        putf(b, "],\"droppedLinksCount\":%u}", (unsigned)s->links_dropped);
    }
    puts_(b, "]}]}]}");
}

/* Protobuf (proto/ksidecar/otlp/trace.proto). kv and av: room for every attribute. */
typedef struct {
    Ksidecar__Otlp__KeyValue *kv, **kvp;
    Ksidecar__Otlp__AnyValue *av;
    size_t used, cap;
} pb_pool_t;

static Ksidecar__Otlp__KeyValue **pb_attrs(pb_pool_t *p, const attr_t *a, size_t n)
{
    if (p->used + n > p->cap)
        abort(); /* sized by the caller */
    Ksidecar__Otlp__KeyValue **out = &p->kvp[p->used];
    for (size_t i = 0; i < n; i++, p->used++) {
        Ksidecar__Otlp__AnyValue *v = &p->av[p->used];
        ksidecar__otlp__any_value__init(v);
        if (a[i].str) {
            v->value_case = KSIDECAR__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
            v->string_value = (char *)(uintptr_t)a[i].str;
        } else {
            v->value_case = KSIDECAR__OTLP__ANY_VALUE__VALUE_INT_VALUE;
            v->int_value = a[i].num;
        }
        Ksidecar__Otlp__KeyValue *kv = &p->kv[p->used];
        ksidecar__otlp__key_value__init(kv);
        kv->key = (char *)(uintptr_t)a[i].key;
        kv->value = v;
        p->kvp[p->used] = kv;
    }
    return out;
}

static void pb_body(buf_t *b, ks_otel_span_t *spans, size_t cnt)
{
    attr_t a[ATTRS_MAX];
    char res[2048], host[256];
    int64_t pid;
    /* spans' attributes: at most ATTRS_MAX each, and each event's */
    size_t cap = ATTRS_MAX * (1 + cnt * (1 + KS_OTEL_EVENTS_MAX));
    pb_pool_t pool = {.kv = calloc(cap, sizeof(*pool.kv)),
                      .kvp = calloc(cap, sizeof(*pool.kvp)),
                      .av = calloc(cap, sizeof(*pool.av)),
                      .cap = cap};
    Ksidecar__Otlp__Span *sp = calloc(cnt, sizeof(*sp));
    Ksidecar__Otlp__Span **spp = calloc(cnt, sizeof(*spp));
    Ksidecar__Otlp__Span__Event *ev = calloc(cnt * KS_OTEL_EVENTS_MAX, sizeof(*ev));
    Ksidecar__Otlp__Span__Event **evp = calloc(cnt * KS_OTEL_EVENTS_MAX, sizeof(*evp));
    char(*parts)[16] = calloc(cnt, 16);
    Ksidecar__Otlp__Span__Link *ln = calloc(cnt * KS_OTEL_LINKS_MAX, sizeof(*ln));
    Ksidecar__Otlp__Span__Link **lnp = calloc(cnt * KS_OTEL_LINKS_MAX, sizeof(*lnp));
    if (!pool.kv || !pool.kvp || !pool.av || !sp || !spp || !ev || !evp || !parts || !ln || !lnp)
        abort();
    Ksidecar__Otlp__Resource r = KSIDECAR__OTLP__RESOURCE__INIT;
    r.n_attributes = resource_attrs(a, res, sizeof(res), host, sizeof(host), &pid);
    r.attributes = pb_attrs(&pool, a, r.n_attributes);
    for (size_t k = 0; k < cnt; k++) {
        ks_otel_span_t *s = &spans[k];
        Ksidecar__Otlp__Span *x = &sp[k];
        ksidecar__otlp__span__init(x);
        x->trace_id = (ProtobufCBinaryData){16, s->trace_id};
        x->span_id = (ProtobufCBinaryData){8, s->span_id};
        if (s->has_parent)
            x->parent_span_id = (ProtobufCBinaryData){8, s->parent_id};
        x->name = s->name;
        x->kind = 5;
        x->start_time_unix_nano = (uint64_t)s->start_ns;
        x->end_time_unix_nano = (uint64_t)s->end_ns;
        x->n_attributes = span_attrs(s, a, parts[k]);
        x->attributes = pb_attrs(&pool, a, x->n_attributes);
        x->n_events = s->event_cnt;
        x->events = &evp[k * KS_OTEL_EVENTS_MAX];
        for (size_t i = 0; i < s->event_cnt; i++) {
            Ksidecar__Otlp__Span__Event *e = &ev[k * KS_OTEL_EVENTS_MAX + i];
            ksidecar__otlp__span__event__init(e);
            e->time_unix_nano = (uint64_t)s->events[i].time_ns;
            e->name = (char *)(uintptr_t)s->events[i].name;
            e->n_attributes = event_attrs(s, &s->events[i], a);
            e->attributes = pb_attrs(&pool, a, e->n_attributes);
            x->events[i] = e;
        }
        x->n_links = s->link_cnt;
        x->links = &lnp[k * KS_OTEL_LINKS_MAX];
        for (size_t i = 0; i < s->link_cnt; i++) {
            Ksidecar__Otlp__Span__Link *l = &ln[k * KS_OTEL_LINKS_MAX + i];
            ksidecar__otlp__span__link__init(l);
            l->trace_id = (ProtobufCBinaryData){16, s->links[i].trace_id};
            l->span_id = (ProtobufCBinaryData){8, s->links[i].span_id};
            l->flags = s->links[i].flags;
            x->links[i] = l;
        }
        x->dropped_links_count = s->links_dropped;
        spp[k] = x;
    }
    Ksidecar__Otlp__InstrumentationScope scope = KSIDECAR__OTLP__INSTRUMENTATION_SCOPE__INIT;
    static char scope_name[] = "ksidecar", scope_version[] = KSIDECAR_VERSION;
    scope.name = scope_name;
    scope.version = scope_version;
    Ksidecar__Otlp__ScopeSpans ss = KSIDECAR__OTLP__SCOPE_SPANS__INIT, *ssp = &ss;
    ss.scope = &scope;
    ss.n_spans = cnt;
    ss.spans = spp;
    Ksidecar__Otlp__ResourceSpans rs = KSIDECAR__OTLP__RESOURCE_SPANS__INIT, *rsp = &rs;
    rs.resource = &r;
    rs.n_scope_spans = 1;
    rs.scope_spans = &ssp;
    Ksidecar__Otlp__ExportTraceServiceRequest req =
        KSIDECAR__OTLP__EXPORT_TRACE_SERVICE_REQUEST__INIT;
    req.n_resource_spans = 1;
    req.resource_spans = &rsp;
    size_t need = ksidecar__otlp__export_trace_service_request__get_packed_size(&req);
    if (b->cap < need + 1) {
        b->cap = need + 1;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    b->len = ksidecar__otlp__export_trace_service_request__pack(&req, (uint8_t *)b->p);
    free(lnp);
    free(ln);
    free(parts);
    free(evp);
    free(ev);
    free(spp);
    free(sp);
    free(pool.av);
    free(pool.kvp);
    free(pool.kv);
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

/* POSTs body; retries 429 and 503 (and no answer) with backoff until the export timeout or
 * the shutdown's deadline. True when the endpoint took it. */
static bool post(CURL *c, const buf_t *body)
{
    int64_t start = ks_now_ms(), wait = 250;
    for (;;) {
        curl_easy_setopt(c, CURLOPT_URL, O.url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, O.headers);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->p);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body->len);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)O.timeout_ms);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
        CURLcode rc = curl_easy_perform(c);
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        if (rc == CURLE_OK && code >= 200 && code < 300)
            return true;
        bool again = rc != CURLE_OK || code == 429 || code == 503 || code == 502 || code == 504;
        int64_t now = ks_now_ms();
        pthread_mutex_lock(&O.mu);
        int64_t by = O.stopping ? O.stop_by_ms : start + O.timeout_ms;
        pthread_mutex_unlock(&O.mu);
        if (!again || now + wait > by) {
            ks_warn("otel", "exporting spans to %s failed: %s (HTTP %ld); dropped", O.url,
                    rc != CURLE_OK ? curl_easy_strerror(rc) : "refused", code);
            return false;
        }
        usleep((useconds_t)wait * 1000);
        wait = wait * 2 > 5000 ? 5000 : wait * 2;
    }
}

static void *exporter(void *arg)
{
    (void)arg;
    CURL *c = curl_easy_init();
    ks_otel_span_t *batch = calloc(O.batch_max, sizeof(*batch));
    buf_t body = {0};
    if (!c || !batch)
        abort();
    for (;;) {
        pthread_mutex_lock(&O.mu);
        if (!O.stopping && O.cnt < O.batch_max) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t ns = ts.tv_nsec + (int64_t)O.delay_ms % 1000 * 1000000;
            ts.tv_sec += O.delay_ms / 1000 + ns / 1000000000;
            ts.tv_nsec = ns % 1000000000;
            while (!O.stopping && O.cnt < O.batch_max &&
                   pthread_cond_timedwait(&O.cv, &O.mu, &ts) != ETIMEDOUT)
                ;
        }
        size_t n = O.cnt < O.batch_max ? O.cnt : O.batch_max;
        for (size_t i = 0; i < n; i++)
            batch[i] = O.ring[(O.head + i) % O.queue_max];
        O.head = (O.head + n) % O.queue_max;
        O.cnt -= n;
        bool done = O.stopping && (O.cnt == 0 || ks_now_ms() >= O.stop_by_ms);
        if (done) {
            O.dropped += O.cnt; /* past the shutdown's grace */
            O.cnt = 0;
        }
        pthread_mutex_unlock(&O.mu);
        if (n) {
            body.len = 0;
            if (O.protobuf)
                pb_body(&body, batch, n);
            else
                json_body(&body, batch, n);
            bool ok = post(c, &body);
            pthread_mutex_lock(&O.mu);
            if (ok)
                O.exported += n;
            else
                O.dropped += n;
            pthread_mutex_unlock(&O.mu);
        }
        if (done)
            break;
    }
    free(body.p);
    free(batch);
    curl_easy_cleanup(c);
    return NULL;
}
