/* group_otel.c: a delivery's receive span and a lease's process span (proxy/otel.h), made on
 * the group's thread when records are handed to a transport and when a lease ends (ack, nack,
 * expiry), and the trace context a dead letter carries. Called only while ks_otel_on. */
#include "group_int.h"
#include "otel.h"

/* The seed of a delivery's ids: where it is, and which attempt. */
static uint64_t delivery_seed(const ks_group_t *g, const part_t *p, const ks_win_entry_t *e)
{
    return p->topic_hash ^ ((uint64_t)g->group_hash << 32 | g->instance) ^
           ((uint64_t)(uint32_t)p->partition << 48) ^ (uint64_t)e->offset * 0x9e3779b97f4a7c15ULL ^
           ((uint64_t)e->attempts << 40);
}

/* Told apart from the process span's seed: a delivery's receive span. */
#define RECEIVE_SALT 0x5245434549564521ULL

/* Whether the delivery is sampled: in the record's trace when it has a context, else in a trace
 * of its own (the same for both its spans). When it is, s has its ids: its receive span's with
 * salt RECEIVE_SALT, else its process span's. An unsampled delivery costs the context's parse,
 * and the trace id only when it has none. */
static bool delivery_ids(const ks_group_t *g, const part_t *p, const ks_win_entry_t *e,
                         uint64_t salt, ks_otel_span_t *s, uint8_t *flags)
{
    const rec_t *m = e->msg;
    uint8_t unused[16];
    uint64_t seed = delivery_seed(g, p, e);
    s->has_parent =
        m && ks_otel_context(rec_headers(m), m->header_cnt, s->trace_id, s->parent_id, flags);
    if (!s->has_parent) {
        ks_otel_ids(seed, s->trace_id, unused);
        *flags = 1;
    }
    if (!ks_otel_sampled(s->trace_id, s->has_parent, *flags))
        return false;
    ks_otel_ids(seed ^ salt, unused, s->span_id);
    *flags |= 1;
    return true;
}

/* Copies s into out (size bytes, cut to fit) with each byte outside printable ASCII as '?', so
 * that the exported string is valid UTF-8 whatever a client sent. */
static void ascii_copy(char *out, size_t size, const char *s)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < size; i++)
        out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    out[i] = '\0';
}

/* Copies s into out (size bytes, cut to fit): what snprintf "%s" did at 2,100 instructions a
 * span for three strings, a tenth of it. */
static void copy_cut(char *out, size_t size, const char *s)
{
    size_t n = strnlen(s, size - 1);
    memcpy(out, s, n);
    out[n] = '\0';
}

/* s->name: "<op> <topic>", or "<op>" for no one topic. */
static void span_name(ks_otel_span_t *s, const char *topic)
{
    size_t n = strlen(s->op);
    memcpy(s->name, s->op, n);
    if (!*topic) {
        s->name[n] = '\0';
        return;
    }
    s->name[n] = ' ';
    copy_cut(s->name + n + 1, sizeof(s->name) - n - 1, topic);
}

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Fills what a span of one record says about it: where it is, its key when text, its group
 * and subscriber. */
static void record_fields(ks_otel_span_t *s, const ks_group_t *g, const part_t *p,
                          const ks_win_entry_t *e, const sub_t *sub)
{
    span_name(s, p->topic);
    copy_cut(s->topic, sizeof(s->topic), p->topic);
    copy_cut(s->group, sizeof(s->group), g->name);
    ascii_copy(s->subscriber, sizeof(s->subscriber), sub ? sub->name : "");
    s->partition = p->partition;
    s->offset = e->offset;
    s->attempt = e->attempts;
    const rec_t *m = e->msg;
    s->has_key = m && m->has_key && m->key_len < sizeof(s->key);
    for (uint32_t i = 0; s->has_key && i < m->key_len; i++)
        s->has_key = rec_key(m)[i] >= 0x20 && rec_key(m)[i] < 0x7f;
    if (s->has_key) {
        memcpy(s->key, rec_key(m), m->key_len);
        s->key[m->key_len] = '\0';
    }
}

void otel_lease_end(ks_group_t *g, part_t *p, ks_win_entry_t *e, const char *event,
                    const char *reason, bool dead)
{
    int64_t now_ms = ks_now_ms(), held_ms = now_ms - e->leased_at_ms;
    e->leased_at_ms = now_ms; /* a redelivery's receive span starts here (otel_ready_since) */
    ks_otel_span_t s;
    uint8_t flags;
    if (!delivery_ids(g, p, e, 0, &s, &flags))
        return;
    int64_t now_ns = wall_ns();
    s.start_ns = now_ns - (held_ms > 0 ? held_ms : 0) * 1000000;
    s.end_ns = now_ns;
    s.op = "process";
    s.transport = NULL;
    s.batch = 0;
    record_fields(&s, g, p, e, sub_by_id(g, e->sub_id));
    s.link_cnt = 0;
    s.links_dropped = 0;
    if (e->flags & KS_WIN_F_ALONE) { /* its delivery's receive span, in the same trace */
        ks_otel_span_t r;
        uint8_t rflags;
        (void)delivery_ids(g, p, e, RECEIVE_SALT, &r, &rflags);
        ks_otel_link_t *l = &s.links[s.link_cnt++];
        memcpy(l->trace_id, r.trace_id, 16);
        memcpy(l->span_id, r.span_id, 8);
        l->flags = rflags;
    }
    s.event_cnt = 0;
    s.events[s.event_cnt++] = (ks_otel_event_t){.name = event, .time_ns = now_ns};
    ascii_copy(s.events[0].reason, sizeof(s.events[0].reason), reason);
    if (dead)
        s.events[s.event_cnt++] = (ks_otel_event_t){.name = "dead_letter", .time_ns = now_ns};
    (void)ks_otel_push(&s);
}

bool otel_dead_letter_parent(const ks_group_t *g, const part_t *p, const ks_win_entry_t *e,
                             char out[56])
{
    ks_otel_span_t s;
    uint8_t flags;
    if (!delivery_ids(g, p, e, 0, &s, &flags))
        return false;
    ks_otel_traceparent(out, s.trace_id, s.span_id, flags);
    return true;
}

void otel_receive(ks_group_t *g, const sub_t *sub, const char *transport, part_t *const *eparts,
                  ks_win_entry_t *const *ents, const int64_t *since, size_t n)
{
    ks_otel_span_t s;
    uint8_t flags;
    int64_t now_ms = ks_now_ms(), first = now_ms;
    for (size_t i = 0; i < n; i++) {
        ents[i]->flags = n == 1 ? (uint8_t)(ents[i]->flags | KS_WIN_F_ALONE)
                                : (uint8_t)(ents[i]->flags & ~KS_WIN_F_ALONE);
        if (since[i] > 0 && since[i] < first)
            first = since[i];
    }
    s.op = "receive";
    s.transport = transport;
    s.event_cnt = 0;
    s.link_cnt = 0;
    s.links_dropped = 0;
    if (n == 1) {
        if (!delivery_ids(g, eparts[0], ents[0], RECEIVE_SALT, &s, &flags))
            return;
        record_fields(&s, g, eparts[0], ents[0], sub);
        s.batch = 0;
    } else {
        /* A trace of its own, seeded by its first record's delivery, linking each record's
         * context: sampled when one of them is, or when the sampler takes a new trace. */
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            const rec_t *m = ents[i]->msg;
            ks_otel_link_t l;
            uint8_t parent[8];
            if (!m || !ks_otel_context(rec_headers(m), m->header_cnt, l.trace_id, parent, &l.flags))
                continue;
            memcpy(l.span_id, parent, 8);
            any = any || ks_otel_sampled(l.trace_id, true, l.flags);
            if (s.link_cnt < KS_OTEL_LINKS_MAX)
                s.links[s.link_cnt++] = l;
            else
                s.links_dropped++;
        }
        ks_otel_ids(delivery_seed(g, eparts[0], ents[0]) ^ RECEIVE_SALT, s.trace_id, s.span_id);
        s.has_parent = false;
        if (!any && !ks_otel_sampled(s.trace_id, false, 0))
            return;
        const part_t *p = eparts[0];
        bool one_topic = true;
        for (size_t i = 1; i < n && one_topic; i++)
            one_topic = !strcmp(eparts[i]->topic, p->topic);
        span_name(&s, one_topic ? p->topic : "");
        copy_cut(s.topic, sizeof(s.topic), one_topic ? p->topic : "");
        copy_cut(s.group, sizeof(s.group), g->name);
        ascii_copy(s.subscriber, sizeof(s.subscriber), sub ? sub->name : "");
        s.partition = -1;
        s.offset = -1;
        s.attempt = 0;
        s.has_key = false;
        s.batch = (uint32_t)n;
    }
    int64_t now_ns = wall_ns();
    s.start_ns = now_ns - (now_ms - first) * 1000000;
    s.end_ns = now_ns;
    (void)ks_otel_push(&s);
}
