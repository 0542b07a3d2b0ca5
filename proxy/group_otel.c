/* group_otel.c: a lease's span (proxy/otel.h), made on the group's thread when the lease ends
 * (ack, nack, expiry), and the trace context a dead letter carries. Called only while
 * ks_otel_on. */
#include "group_int.h"
#include "otel.h"

/* The seed of a delivery's ids: where it is, and which attempt. */
static uint64_t delivery_seed(const ks_group_t *g, const part_t *p, const ks_win_entry_t *e)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the topic */
    for (const char *c = p->topic; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    return h ^ ((uint64_t)g->group_hash << 32 | g->instance) ^
           ((uint64_t)(uint32_t)p->partition << 48) ^ (uint64_t)e->offset * 0x9e3779b97f4a7c15ULL ^
           ((uint64_t)e->attempts << 40);
}

/* The delivery's span ids and whether it is sampled: in the record's trace when it has a
 * context, else a trace of its own. */
static bool delivery_ids(const ks_group_t *g, const part_t *p, const ks_win_entry_t *e,
                         ks_otel_span_t *s, uint8_t *flags)
{
    const rec_t *m = e->msg;
    uint8_t trace[16];
    ks_otel_ids(delivery_seed(g, p, e), trace, s->span_id);
    s->has_parent =
        m && ks_otel_context(rec_headers(m), m->header_cnt, s->trace_id, s->parent_id, flags);
    if (!s->has_parent) {
        memcpy(s->trace_id, trace, 16);
        *flags = 1;
    }
    bool on = ks_otel_sampled(s->trace_id, s->has_parent, *flags);
    *flags = on ? (uint8_t)(*flags | 1) : (uint8_t)(*flags & ~1);
    return on;
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

void otel_lease_end(ks_group_t *g, part_t *p, ks_win_entry_t *e, const char *event,
                    const char *reason, bool dead)
{
    ks_otel_span_t s;
    uint8_t flags;
    if (!delivery_ids(g, p, e, &s, &flags))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    int64_t held_ms = ks_now_ms() - e->leased_at_ms;
    s.start_ns = now_ns - (held_ms > 0 ? held_ms : 0) * 1000000;
    s.end_ns = now_ns;
    snprintf(s.name, sizeof(s.name), "process %s", p->topic);
    snprintf(s.topic, sizeof(s.topic), "%s", p->topic);
    snprintf(s.group, sizeof(s.group), "%s", g->name);
    const sub_t *sub = sub_by_id(g, e->sub_id);
    ascii_copy(s.subscriber, sizeof(s.subscriber), sub ? sub->name : "");
    s.partition = p->partition;
    s.offset = e->offset;
    s.attempt = e->attempts;
    const rec_t *m = e->msg;
    s.has_key = m && m->has_key && m->key_len < sizeof(s.key);
    for (uint32_t i = 0; s.has_key && i < m->key_len; i++)
        s.has_key = rec_key(m)[i] >= 0x20 && rec_key(m)[i] < 0x7f;
    if (s.has_key) {
        memcpy(s.key, rec_key(m), m->key_len);
        s.key[m->key_len] = '\0';
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
    if (!delivery_ids(g, p, e, &s, &flags))
        return false;
    ks_otel_traceparent(out, s.trace_id, s.span_id, flags);
    return true;
}
