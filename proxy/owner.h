/* owner.h: the owner-thread check that guards group state (a thread id plus a depth count). */
#ifndef KS_OWNER_H
#define KS_OWNER_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Like KafkaConsumer's acquire/release: the first thread to enter owns the state
 * until its matching leave; entry from any other thread meanwhile is a bug, and
 * aborts loudly when KS_OWNER_CHECK is on (every build but Release). */
typedef struct ks_owner {
    atomic_long tid; /* 0 when free */
    int depth;       /* re-entrancy count; touched only by the owner */
} ks_owner_t;

static inline long ks_owner_self(void)
{
    return (long)syscall(SYS_gettid);
}

static inline void ks_owner_violation(const char *what, long owner)
{
    fprintf(stderr, "ksidecar: FATAL: %s: group state owned by thread %ld used from thread %ld\n",
            what, owner, ks_owner_self());
    abort();
}

#if KS_OWNER_CHECK
static inline void ks_owner_enter(ks_owner_t *o)
{
    long self = ks_owner_self();
    long cur = atomic_load(&o->tid);
    if (cur == self) {
        o->depth++;
        return;
    }
    long expect = 0;
    if (!atomic_compare_exchange_strong(&o->tid, &expect, self))
        ks_owner_violation("enter", expect);
    o->depth = 1;
}

static inline void ks_owner_leave(ks_owner_t *o)
{
    if (atomic_load(&o->tid) != ks_owner_self())
        ks_owner_violation("leave", atomic_load(&o->tid));
    if (--o->depth == 0)
        atomic_store(&o->tid, 0);
}

/* Aborts unless the calling thread is inside enter/leave. */
static inline void ks_owner_assert(ks_owner_t *o)
{
    long cur = atomic_load(&o->tid);
    if (cur != ks_owner_self())
        ks_owner_violation("access", cur);
}
#else
static inline void ks_owner_enter(ks_owner_t *o)
{
    (void)o;
}
static inline void ks_owner_leave(ks_owner_t *o)
{
    (void)o;
}
static inline void ks_owner_assert(ks_owner_t *o)
{
    (void)o;
}
#endif

#endif
