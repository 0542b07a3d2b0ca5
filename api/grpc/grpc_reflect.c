/* grpc_reflect.c: grpc.health.v1 (the health thread that answers Watch)
 * and server reflection from the descriptor set embedded at build time. */
#include "grpc_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

/* The descriptor set of our protos, embedded at build time for reflection. */
extern const unsigned char ks_descriptor_set[];
extern const size_t ks_descriptor_set_len;
static const char *service_names[] = {
    "ksidecar.v1.Consumer",
    "ksidecar.v1.Producer",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
};

#define NSERVICES (sizeof(service_names) / sizeof(service_names[0]))
int health_status(ks_grpc_t *s)
{
    return ks_engine_kafka_up(s->eng)
               ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
               : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

bool known_service(const char *name)
{
    if (!*name)
        return true;
    for (size_t i = 0; i < NSERVICES; i++)
        if (!strcmp(service_names[i], name))
            return true;
    return false;
}

#define GROUP_SERVICE "ksidecar.group."

/* The group a service names ("ksidecar.group.<name>"), or NULL. */
static const char *service_group(const char *service)
{
    size_t n = sizeof(GROUP_SERVICE) - 1;
    return strncmp(service, GROUP_SERVICE, n) ? NULL : service + n;
}

/* A group's own status: NOT_SERVING while any of its partitions is stalled (or Kafka is
 * down); -1 when the group does not run here. Any thread. */
static int group_status(ks_grpc_t *s, const char *group)
{
    char why[512];
    int n = ks_engine_group_stalled(s->eng, group, why, sizeof(why));
    if (n < 0)
        return -1;
    return n > 0 ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                 : health_status(s);
}

/* Health Check and Watch: the request, then the status now (Watch: and each change, from
 * the health thread, a group's service as Kafka's). @locality a completion-queue thread */
void decode_health(call_t *c, ProtobufCMessage *m)
{
    ks_grpc_t *s = c->s;
    Grpc__Health__V1__HealthCheckRequest *r = (Grpc__Health__V1__HealthCheckRequest *)m;
    const char *name = service_group(r->service);
    int group = name ? group_status(s, name) : -1;
    if (group < 0 && !known_service(r->service)) {
        if (c->method == M_HEALTH_CHECK)
            call_finish(c, GRPC_STATUS_NOT_FOUND, "unknown service \"%s\"", r->service);
        else {
            Grpc__Health__V1__HealthCheckResponse hr =
                GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
            hr.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
            call_send(c, &hr.base);
        }
    } else {
        Grpc__Health__V1__HealthCheckResponse hr = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        int st = group >= 0 ? group : health_status(s);
        hr.status = st;
        pthread_mutex_lock(&c->lock);
        if (group >= 0 && c->method == M_HEALTH_WATCH)
            c->group = ks_xstrdup(name); /* the health thread follows it */
        c->last_health = st;
        pthread_mutex_unlock(&c->lock);
        call_send(c, &hr.base);
        if (c->method == M_HEALTH_CHECK)
            call_finish(c, GRPC_STATUS_OK, "%s", "");
    }
}

/* ---- reflection ---- */

void reflection_load(ks_grpc_t *s)
{
    /* FileDescriptorSet: field 1, length-delimited, repeated; each is a
     * FileDescriptorProto whose field 1 is the file name. */
    const unsigned char *p = ks_descriptor_set, *end = p + ks_descriptor_set_len;
    while (p < end && s->file_cnt < 16) {
        uint64_t tag, len;
        if (!read_varint(&p, end, &tag) || !read_varint(&p, end, &len) || tag != ((1 << 3) | 2) ||
            len > (uint64_t)(end - p))
            break;
        s->files[s->file_cnt].data = (uint8_t *)(uintptr_t)p;
        s->files[s->file_cnt].len = len;
        /* name: field 1 (tag 0x0a), short length */
        if (len > 2 && p[0] == 0x0a && p[1] < 128 && (size_t)p[1] + 2 <= len)
            snprintf(s->file_names[s->file_cnt], sizeof(s->file_names[0]), "%.*s", (int)p[1],
                     (const char *)p + 2);
        s->file_cnt++;
        p += len;
    }
}

static bool known_symbol(const char *sym)
{
    static const char *packages[] = {"ksidecar.v1.", "grpc.health.v1.", "grpc.reflection.v1.",
                                     "grpc.reflection.v1alpha."};
    for (size_t i = 0; i < sizeof(packages) / sizeof(packages[0]); i++)
        if (!strncmp(sym, packages[i], strlen(packages[i])))
            return true;
    return false;
}

void handle_reflection_msg(call_t *c, ProtobufCMessage *m)
{
    ks_grpc_t *s = c->s;
    Grpc__Reflection__V1__ServerReflectionRequest *r =
        (Grpc__Reflection__V1__ServerReflectionRequest *)m;
    Grpc__Reflection__V1__ServerReflectionResponse resp =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    resp.valid_host = r->host;
    resp.original_request = r;
    Grpc__Reflection__V1__ListServiceResponse ls =
        GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1__ServiceResponse svc[NSERVICES];
    Grpc__Reflection__V1__ServiceResponse *svcp[NSERVICES];
    Grpc__Reflection__V1__FileDescriptorResponse fd =
        GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    Grpc__Reflection__V1__ErrorResponse er = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    char emsg[300];
    bool found = false;
    switch (r->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        for (size_t i = 0; i < NSERVICES; i++) {
            grpc__reflection__v1__service_response__init(&svc[i]);
            svc[i].name = (char *)(uintptr_t)service_names[i];
            svcp[i] = &svc[i];
        }
        ls.n_service = NSERVICES;
        ls.service = svcp;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        resp.list_services_response = &ls;
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        for (size_t i = 0; i < s->file_cnt; i++)
            found = found || !strcmp(s->file_names[i], r->file_by_filename);
        snprintf(emsg, sizeof(emsg), "file not found: %.200s", r->file_by_filename);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        found = known_symbol(r->file_containing_symbol);
        snprintf(emsg, sizeof(emsg), "symbol not found: %.200s", r->file_containing_symbol);
        break;
    default:
        snprintf(emsg, sizeof(emsg), "extensions are not supported");
        break;
    }
    if (r->message_request_case !=
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES) {
        if (found) {
            /* Our files are few: each answer carries all of them, dependencies included. */
            fd.n_file_descriptor_proto = s->file_cnt;
            fd.file_descriptor_proto = s->files;
            resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
            resp.file_descriptor_response = &fd;
        } else {
            er.error_code = GRPC_STATUS_NOT_FOUND;
            er.error_message = emsg;
            resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
            resp.error_response = &er;
        }
    }
    call_send(c, &resp.base);
}

/* A group some Watch follows, and its status in this pass. */
typedef struct {
    char *name; /* owned */
    int status;
} watched_t;

/* The statuses of one pass of the health thread: Kafka's, and each distinct group that a
 * Watch follows, computed once. */
typedef struct {
    int kafka;
    watched_t *v;
    size_t n, cap;
} health_pass_t;

static watched_t *find_watched(const health_pass_t *p, const char *group)
{
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->v[i].name, group))
            return &p->v[i];
    return NULL;
}

/* Notes each distinct group a live Watch follows (pick_calls' predicate; picks none).
 * @locks the server's and c's */
static bool note_watched(call_t *c, const void *arg)
{
    health_pass_t *p = *(health_pass_t *const *)arg;
    if (c->method != M_HEALTH_WATCH || !c->group || c->closed || find_watched(p, c->group))
        return false;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 8;
        p->v = realloc(p->v, p->cap * sizeof(*p->v));
        if (!p->v)
            abort();
    }
    p->v[p->n++] = (watched_t){.name = ks_xstrdup(c->group), .status = -1};
    return false;
}

/* A health Watch whose last answer differs from its status in this pass: marked answered. */
static bool pick_health(call_t *c, const void *arg)
{
    const health_pass_t *p = *(const health_pass_t *const *)arg;
    if (c->method != M_HEALTH_WATCH || c->last_health < 0 || c->closed)
        return false;
    const watched_t *w = c->group ? find_watched(p, c->group) : NULL;
    int now = c->group ? (w ? w->status : -1) : p->kafka; /* no w: it came after the notes */
    if (now < 0 || c->last_health == now)
        return false;
    c->last_health = now;
    return true;
}

/* Sends health Watch updates when Kafka's reachability changes, and a group's Watch when its
 * group stalls or clears (or Kafka goes or comes back): each status once per change. */
void *health_main(void *arg)
{
    ks_grpc_t *s = arg;
    health_pass_t pass = {0}, *pp = &pass;
    while (!atomic_load(&s->stopping)) {
        struct timespec ts = {0, 250 * 1000000};
        nanosleep(&ts, NULL);
        call_cut_stalled_replies(s); /* a unary Fetch's reply the client does not take */
        pass.kafka = health_status(s);
        pass.n = 0;
        call_t *todo[256];
        (void)pick_calls(s, note_watched, &pp, todo, 256); /* it picks none */
        /* Each group once, with no call's lock held: the engine answers from its last check. */
        for (size_t i = 0; i < pass.n; i++) {
            int st = group_status(s, pass.v[i].name);
            pass.v[i].status =
                st >= 0 ? st
                        : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
        }
        size_t n = pick_calls(s, pick_health, &pp, todo, 256);
        for (size_t i = 0; i < n; i++) {
            Grpc__Health__V1__HealthCheckResponse hr =
                GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
            pthread_mutex_lock(&todo[i]->lock);
            hr.status = todo[i]->last_health; /* what pick_health marked */
            pthread_mutex_unlock(&todo[i]->lock);
            call_send(todo[i], &hr.base);
            call_unref(todo[i]);
        }
        for (size_t i = 0; i < pass.n; i++)
            free(pass.v[i].name);
    }
    free(pass.v);
    return NULL;
}
