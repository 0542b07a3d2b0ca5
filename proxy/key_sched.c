/* key_sched.c: per-partition ordering scheduler: key chains with their cursor and owner, plus
 * min-heaps of the offsets eligible for anyone and for each chain owner. */
#include "key_sched.h"

#include <stdlib.h>
#include <string.h>

#define F_CHAINED 0x1 /* the entry belongs to a key chain */
#define F_OUT     0x2 /* the entry is handed out: counted in its chain's out */

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
    free(s->heap.v);
    for (size_t i = 0; i < s->aff_cnt; i++)
        free(s->aff[i].heap.v);
    free(s->aff);
    ks_key_sched_init(s, s->mode);
}

/* ---- offset min-heaps ---- */

static void heap_push(ks_off_heap_t *h, int64_t off)
{
    if (h->cnt == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 256;
        h->v = realloc(h->v, h->cap * sizeof(*h->v));
        if (!h->v)
            abort();
    }
    size_t i = h->cnt++;
    h->v[i] = off;
    while (i > 0 && h->v[(i - 1) / 2] > h->v[i]) {
        int64_t t = h->v[i];
        h->v[i] = h->v[(i - 1) / 2];
        h->v[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static void heap_pop(ks_off_heap_t *h)
{
    h->v[0] = h->v[--h->cnt];
    size_t i = 0;
    for (;;) {
        size_t a = 2 * i + 1, b = a + 1, m = i;
        if (a < h->cnt && h->v[a] < h->v[m])
            m = a;
        if (b < h->cnt && h->v[b] < h->v[m])
            m = b;
        if (m == i)
            break;
        int64_t t = h->v[i];
        h->v[i] = h->v[m];
        h->v[m] = t;
        i = m;
    }
}

/* Makes off eligible: appended to the ring if it is above everything there, else heaped. */
static void make_eligible(ks_key_sched_t *s, int64_t off)
{
    size_t mask = s->run_cap - 1;
    if (s->run_cnt > 0 && off <= s->run[(s->run_head + s->run_cnt - 1) & mask]) {
        heap_push(&s->heap, off);
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
        *chain_insert(s, old[i].hash) = old[i];
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

/* ---- eligibility ---- */

static ks_key_aff_t *aff_find(ks_key_sched_t *s, uint32_t sub, bool make)
{
    for (size_t i = 0; i < s->aff_cnt; i++)
        if (s->aff[i].sub == sub)
            return &s->aff[i];
    if (!make)
        return NULL;
    s->aff = realloc(s->aff, (s->aff_cnt + 1) * sizeof(*s->aff));
    if (!s->aff)
        abort();
    ks_key_aff_t *a = &s->aff[s->aff_cnt++];
    memset(a, 0, sizeof(*a));
    a->sub = sub;
    return a;
}

/* How many of c its owner may hold at once now: its limit, capped by the window after a
 * record came back. */
static inline uint32_t chain_cap(const ks_key_chain_t *c)
{
    return c->win && c->win < c->limit ? c->win : c->limit;
}

/* Makes c's cursor eligible, if it is READY and may go: for anyone when nobody holds c,
 * for its owner while it has room. Pushing twice is harmless (take checks). */
static void push_cursor(ks_key_sched_t *s, ks_ack_window_t *w, const ks_key_chain_t *c)
{
    if (c->cursor < 0)
        return;
    const ks_win_entry_t *e = ks_ack_window_get(w, c->cursor);
    if (!e || e->state != KS_REC_READY)
        return; /* DELAYED or being dead-lettered: requeued once READY */
    if (c->out == 0) {
        make_eligible(s, c->cursor);
    } else if (c->out < chain_cap(c)) {
        heap_push(&aff_find(s, c->owner, true)->heap, c->cursor);
        s->aff_total++;
    }
}

/* The first record of the chain after e that is not done, or -1. */
static int64_t next_undone(ks_ack_window_t *w, const ks_win_entry_t *e)
{
    for (int64_t next = e->next_same_key; next >= 0;) {
        const ks_win_entry_t *n = ks_ack_window_get(w, next);
        if (!n)
            return -1;
        if (n->state != KS_REC_ACKED)
            return next;
        next = n->next_same_key;
    }
    return -1;
}

/* ---- scheduling ---- */

void ks_key_sched_add(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e, bool has_key,
                      uint64_t key_hash)
{
    e->next_same_key = -1;
    e->flags &= (uint8_t) ~(F_CHAINED | F_OUT);
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
        c->head = c->tail = c->cursor = e->offset;
        c->out = c->owner = c->win = 0;
        c->limit = 1;
        make_eligible(s, e->offset);
        return;
    }
    ks_win_entry_t *tail = ks_ack_window_get(w, c->tail);
    if (tail)
        tail->next_same_key = e->offset;
    c->tail = e->offset;
    if (c->cursor < 0) { /* everything before it is out or done */
        c->cursor = e->offset;
        push_cursor(s, w, c);
    }
}

void ks_key_sched_back(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e,
                       ks_key_sched_back_fn *back, void *opaque)
{
    if (!(e->flags & F_CHAINED) || !(e->flags & F_OUT))
        return;
    e->flags &= (uint8_t)~F_OUT;
    ks_key_chain_t *c = chain_find(s, e->key_hash);
    if (!c)
        return;
    c->out--;
    /* The records after e that are out lie between e and the cursor. */
    for (int64_t next = e->next_same_key; next >= 0 && next != c->cursor;) {
        ks_win_entry_t *n = ks_ack_window_get(w, next);
        if (!n)
            break;
        if (n->flags & F_OUT) {
            n->flags &= (uint8_t)~F_OUT;
            c->out--;
            if (back)
                back(opaque, n);
        }
        next = n->next_same_key;
    }
    c->cursor = e->offset;
    if (c->out == 0)
        c->owner = 0;
}

void ks_key_sched_narrow(ks_key_sched_t *s, const ks_win_entry_t *e)
{
    if (!(e->flags & F_CHAINED))
        return;
    ks_key_chain_t *c = chain_find(s, e->key_hash);
    if (c)
        c->win = c->out + KS_CHAIN_RESTART; /* those still out (all earlier than e) and more */
}

void ks_key_sched_requeue(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e)
{
    if (!(e->flags & F_CHAINED)) {
        make_eligible(s, e->offset);
        return;
    }
    if (e->flags & F_OUT)
        ks_key_sched_back(s, w, e, NULL, NULL);
    ks_key_chain_t *c = chain_find(s, e->key_hash);
    if (c && c->cursor == e->offset)
        push_cursor(s, w, c);
    /* else not its turn: it goes when the records before it are out or done */
}

void ks_key_sched_done(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e)
{
    if (!(e->flags & F_CHAINED))
        return;
    bool was_out = e->flags & F_OUT;
    e->flags &= (uint8_t) ~(F_CHAINED | F_OUT);
    ks_key_chain_t *c = chain_find(s, e->key_hash);
    if (!c)
        return;
    if (was_out && c->win && ++c->win >= c->limit)
        c->win = 0; /* back to the limit */
    if (was_out && --c->out == 0)
        c->owner = 0;
    bool was_cursor = c->cursor == e->offset; /* acked late, after its lease ended */
    if (was_cursor)
        c->cursor = next_undone(w, e);
    if (c->head == e->offset) {
        /* The next record of the key that is not done yet becomes the head. */
        int64_t next = next_undone(w, e);
        if (next < 0) {
            chain_remove(s, c);
            return;
        }
        c->head = next;
    }
    if (was_out || was_cursor)
        push_cursor(s, w, c); /* room for one more, or a new cursor */
}

/* True if the READY entry e may go to sub now (from its own heap: mine); *cp is its chain
 * (NULL for an unchained record). */
static bool may_take(ks_key_sched_t *s, const ks_win_entry_t *e, uint32_t sub, bool mine,
                     ks_key_chain_t **cp)
{
    *cp = NULL;
    if (!(e->flags & F_CHAINED))
        return !mine;
    ks_key_chain_t *c = *cp = chain_find(s, e->key_hash);
    if (!c || c->cursor != e->offset)
        return false;
    if (!mine)
        return c->out == 0;
    return c->out > 0 && c->owner == sub && c->out < chain_cap(c);
}

/* e goes to sub: counted out, its chain c held by sub, the cursor on to the next record. */
static void hand_out(ks_key_sched_t *s, ks_ack_window_t *w, ks_win_entry_t *e, ks_key_chain_t *c,
                     uint32_t sub, uint32_t limit)
{
    if (!c)
        return;
    e->flags |= F_OUT;
    c->out++;
    c->owner = sub;
    c->limit = limit;
    c->cursor = next_undone(w, e);
    push_cursor(s, w, c);
}

ks_win_entry_t *ks_key_sched_take_for(ks_key_sched_t *s, ks_ack_window_t *w, int64_t hold_from,
                                      uint32_t sub, uint32_t limit)
{
    /* A taker allowed one record per chain never continues a chain: nothing is its own. */
    ks_key_aff_t *a = limit > 1 && s->aff_total > 0 ? aff_find(s, sub, false) : NULL;
    for (;;) {
        bool have_run = s->run_cnt > 0, have_heap = s->heap.cnt > 0;
        bool have_mine = a && a->heap.cnt > 0;
        if (!have_run && !have_heap && !have_mine)
            return NULL;
        /* The lowest candidate of the three: the ring, the shared heap, sub's own heap. */
        int which = 0;
        int64_t off = INT64_MAX;
        if (have_run) {
            which = 1;
            off = s->run[s->run_head];
        }
        if (have_heap && s->heap.v[0] < off) {
            which = 2;
            off = s->heap.v[0];
        }
        if (have_mine && a->heap.v[0] < off) {
            which = 3;
            off = a->heap.v[0];
        }
        ks_win_entry_t *e = ks_ack_window_get(w, off);
        ks_key_chain_t *c = NULL;
        /* acked, leased or gone since, or no longer its turn */
        bool stale = !e || e->state != KS_REC_READY || !may_take(s, e, sub, which == 3, &c);
        if (!stale && e->attempts == 0 && off >= hold_from)
            return NULL;
        if (which == 1) {
            s->run_head = (s->run_head + 1) & (s->run_cap - 1);
            s->run_cnt--;
        } else if (which == 2) {
            heap_pop(&s->heap);
        } else {
            heap_pop(&a->heap);
            s->aff_total--;
        }
        if (!stale) {
            hand_out(s, w, e, c, sub, limit);
            return e;
        }
    }
}

void ks_key_sched_forget_sub(ks_key_sched_t *s, uint32_t sub)
{
    for (size_t i = 0; i < s->aff_cnt; i++)
        if (s->aff[i].sub == sub) {
            s->aff_total -= s->aff[i].heap.cnt;
            free(s->aff[i].heap.v);
            s->aff[i] = s->aff[--s->aff_cnt];
            return;
        }
}

uint64_t ks_key_sched_chain_id(const ks_win_entry_t *e)
{
    if (!(e->flags & F_CHAINED))
        return 0;
    return e->key_hash ? e->key_hash : 1; /* 0 means "no chain" on the wire */
}
