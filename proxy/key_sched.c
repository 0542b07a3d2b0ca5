/* key_sched.c: per-partition ordering scheduler: key chains plus a min-heap of eligible offsets. */
#include "key_sched.h"

#include <stdlib.h>
#include <string.h>

#define F_CHAINED 0x1 /* the entry belongs to a key chain */

const char *ks_ordering_str(ks_ordering_t o)
{
    static const char *names[] = {"key", "partition", "none"};
    return o <= KS_ORDER_NONE ? names[o] : "?";
}

int ks_ordering_parse(const char *s, ks_ordering_t *out)
{
    for (int i = 0; i <= KS_ORDER_NONE; i++)
        if (strcmp(s, ks_ordering_str((ks_ordering_t)i)) == 0) {
            *out = (ks_ordering_t)i;
            return 0;
        }
    return -1;
}

void ks_key_sched_init(ks_key_sched_t *s, ks_ordering_t mode)
{
    memset(s, 0, sizeof(*s));
    s->mode = mode;
}

void ks_key_sched_destroy(ks_key_sched_t *s)
{
    free(s->chains);
    free(s->run);
    free(s->heap);
    ks_key_sched_init(s, s->mode);
}

/* ---- eligible min-heap ---- */

static void heap_push(ks_key_sched_t *s, int64_t off)
{
    if (s->heap_cnt == s->heap_cap) {
        s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 256;
        s->heap = realloc(s->heap, s->heap_cap * sizeof(*s->heap));
        if (!s->heap)
            abort();
    }
    size_t i = s->heap_cnt++;
    s->heap[i] = off;
    while (i > 0 && s->heap[(i - 1) / 2] > s->heap[i]) {
        int64_t t = s->heap[i];
        s->heap[i] = s->heap[(i - 1) / 2];
        s->heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static void heap_pop(ks_key_sched_t *s)
{
    s->heap[0] = s->heap[--s->heap_cnt];
    size_t i = 0;
    for (;;) {
        size_t a = 2 * i + 1, b = a + 1, m = i;
        if (a < s->heap_cnt && s->heap[a] < s->heap[m])
            m = a;
        if (b < s->heap_cnt && s->heap[b] < s->heap[m])
            m = b;
        if (m == i)
            break;
        int64_t t = s->heap[i];
        s->heap[i] = s->heap[m];
        s->heap[m] = t;
        i = m;
    }
}

/* Makes off eligible: appended to the ring if it is above everything there, else heaped. */
static void make_eligible(ks_key_sched_t *s, int64_t off)
{
    size_t mask = s->run_cap - 1;
    if (s->run_cnt > 0 && off <= s->run[(s->run_head + s->run_cnt - 1) & mask]) {
        heap_push(s, off);
        return;
    }
    if (s->run_cnt == s->run_cap) {
        size_t ncap = s->run_cap ? s->run_cap * 2 : 256;
        int64_t *n = malloc(ncap * sizeof(*n));
        if (!n)
            abort();
        for (size_t i = 0; i < s->run_cnt; i++)
            n[i] = s->run[(s->run_head + i) & mask];
        free(s->run);
        s->run = n;
        s->run_cap = ncap;
        s->run_head = 0;
        mask = ncap - 1;
    }
    s->run[(s->run_head + s->run_cnt++) & mask] = off;
}

/* ---- key chains (open addressing, linear probing, backward-shift delete) ---- */

static size_t slot_of(const ks_key_sched_t *s, uint64_t h)
{
    /* Fibonacci hashing: the high half of the product mixes every bit of h. */
    return (size_t)((h * 0x9E3779B97F4A7C15ull) >> 32) & (s->chain_cap - 1);
}

static ks_key_chain_t *chain_find(ks_key_sched_t *s, uint64_t h)
{
    if (!s->chain_cap)
        return NULL;
    for (size_t i = slot_of(s, h);; i = (i + 1) & (s->chain_cap - 1)) {
        ks_key_chain_t *c = &s->chains[i];
        if (c->head < 0)
            return NULL;
        if (c->hash == h)
            return c;
    }
}

static void chain_grow(ks_key_sched_t *s);

static ks_key_chain_t *chain_insert(ks_key_sched_t *s, uint64_t h)
{
    if ((s->chain_cnt + 1) * 2 > s->chain_cap)
        chain_grow(s);
    size_t i = slot_of(s, h);
    while (s->chains[i].head >= 0)
        i = (i + 1) & (s->chain_cap - 1);
    s->chains[i].hash = h;
    s->chain_cnt++;
    return &s->chains[i];
}

static void chain_grow(ks_key_sched_t *s)
{
    size_t ocap = s->chain_cap;
    ks_key_chain_t *old = s->chains;
    s->chain_cap = ocap ? ocap * 2 : 64;
    s->chains = malloc(s->chain_cap * sizeof(*s->chains));
    if (!s->chains)
        abort();
    for (size_t i = 0; i < s->chain_cap; i++)
        s->chains[i].head = -1;
    s->chain_cnt = 0;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i].head < 0)
            continue;
        ks_key_chain_t *c = chain_insert(s, old[i].hash);
        c->head = old[i].head;
        c->tail = old[i].tail;
    }
    free(old);
}

static void chain_remove(ks_key_sched_t *s, ks_key_chain_t *c)
{
    size_t i = (size_t)(c - s->chains);
    s->chains[i].head = -1;
    s->chain_cnt--;
    /* Backward-shift the entries after it so probing never stops early. */
    for (size_t j = (i + 1) & (s->chain_cap - 1); s->chains[j].head >= 0;
         j = (j + 1) & (s->chain_cap - 1)) {
        size_t want = slot_of(s, s->chains[j].hash);
        /* Move j into the hole at i if its home slot is not in (i, j]. */
        bool between = i <= j ? (want > i && want <= j) : (want > i || want <= j);
        if (!between) {
            s->chains[i] = s->chains[j];
            s->chains[j].head = -1;
            i = j;
        }
    }
}

/* ---- scheduling ---- */

void ks_key_sched_add(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e, bool has_key,
                      uint64_t key_hash)
{
    e->next_same_key = -1;
    e->flags &= (uint8_t)~F_CHAINED;
    if (s->mode == KS_ORDER_NONE || (s->mode == KS_ORDER_KEY && !has_key)) {
        make_eligible(s, e->offset);
        return;
    }
    uint64_t h = s->mode == KS_ORDER_PARTITION ? 0 : key_hash;
    e->key_hash = h;
    e->flags |= F_CHAINED;
    ks_key_chain_t *c = chain_find(s, h);
    if (!c) {
        c = chain_insert(s, h);
        c->head = c->tail = e->offset;
        make_eligible(s, e->offset);
        return;
    }
    ks_win_entry_t *tail = ks_ack_window_get(w, c->tail);
    if (tail)
        tail->next_same_key = e->offset;
    c->tail = e->offset;
}

void ks_key_sched_requeue(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e)
{
    if (e->flags & F_CHAINED) {
        ks_key_chain_t *c = chain_find(s, e->key_hash);
        if (!c || c->head != e->offset)
            return; /* not its turn: it goes when the records before it are done */
    }
    make_eligible(s, e->offset);
}

void ks_key_sched_done(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e)
{
    if (!(e->flags & F_CHAINED))
        return;
    e->flags &= (uint8_t)~F_CHAINED;
    ks_key_chain_t *c = chain_find(s, e->key_hash);
    if (!c || c->head != e->offset)
        return;
    /* The next record of the key that is not done yet becomes the head. */
    for (int64_t next = e->next_same_key; next >= 0;) {
        ks_win_entry_t *n = ks_ack_window_get(w, next);
        if (!n)
            break;
        if (n->state != KS_REC_ACKED) {
            c->head = next;
            if (n->state == KS_REC_READY)
                make_eligible(s, n->offset);
            return;
        }
        next = n->next_same_key;
    }
    chain_remove(s, c);
}

ks_win_entry_t *ks_key_sched_take(ks_key_sched_t *s, ks_ack_window_t *w, int64_t hold_from)
{
    while (s->heap_cnt > 0 || s->run_cnt > 0) {
        bool from_run = s->heap_cnt == 0 || (s->run_cnt > 0 && s->run[s->run_head] < s->heap[0]);
        int64_t off = from_run ? s->run[s->run_head] : s->heap[0];
        ks_win_entry_t *e = ks_ack_window_get(w, off);
        bool stale = !e || e->state != KS_REC_READY; /* acked, leased or gone since */
        if (!stale && e->attempts == 0 && off >= hold_from)
            return NULL;
        if (from_run) {
            s->run_head = (s->run_head + 1) & (s->run_cap - 1);
            s->run_cnt--;
        } else {
            heap_pop(s);
        }
        if (!stale)
            return e;
    }
    return NULL;
}
