/* C11 threads routed through pthreads, linked into ThreadSanitizer builds only.
 *
 * librdkafka creates its threads and takes its locks with C11 thrd_create/mtx_lock/
 * cnd_wait. glibc 2.34+ implements those by calling its internal pthread functions
 * directly, so gcc 12's libtsan never sees them: a librdkafka thread has no TSan state
 * (it crashes in TSan's allocator at its first malloc), and its locks give no
 * happens-before edges. Defining the C11 calls here makes the dynamic linker bind
 * librdkafka's references to these, which go through the intercepted pthread calls.
 * glibc's mtx_t and cnd_t have the layout of pthread_mutex_t and pthread_cond_t. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <threads.h>

_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t), "mtx_t is a pthread mutex");
_Static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t), "cnd_t is a pthread condvar");

int thrd_create(thrd_t *thr, thrd_start_t func, void *arg);
int thrd_join(thrd_t thr, int *res);
int thrd_detach(thrd_t thr);
int mtx_init(mtx_t *m, int type);
int mtx_lock(mtx_t *m);
int mtx_trylock(mtx_t *m);
int mtx_unlock(mtx_t *m);
void mtx_destroy(mtx_t *m);
int cnd_init(cnd_t *c);
int cnd_signal(cnd_t *c);
int cnd_broadcast(cnd_t *c);
int cnd_wait(cnd_t *c, mtx_t *m);
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts);
void cnd_destroy(cnd_t *c);

struct start {
    thrd_start_t func;
    void *arg;
};

static int result(int rc)
{
    if (rc == 0)
        return thrd_success;
    if (rc == ENOMEM)
        return thrd_nomem;
    if (rc == EBUSY)
        return thrd_busy;
    if (rc == ETIMEDOUT)
        return thrd_timedout;
    return thrd_error;
}

static void *trampoline(void *p)
{
    struct start s = *(struct start *)p;
    free(p);
    return (void *)(long)s.func(s.arg);
}

int thrd_create(thrd_t *thr, thrd_start_t func, void *arg)
{
    struct start *s = malloc(sizeof(*s));
    if (!s)
        return thrd_nomem;
    s->func = func;
    s->arg = arg;
    pthread_t t;
    int rc = pthread_create(&t, NULL, trampoline, s);
    if (rc != 0) {
        free(s);
        return result(rc);
    }
    *thr = (thrd_t)t;
    return thrd_success;
}

int thrd_join(thrd_t thr, int *res)
{
    void *ret = NULL;
    int rc = pthread_join((pthread_t)thr, &ret);
    if (rc == 0 && res)
        *res = (int)(long)ret;
    return result(rc);
}

int thrd_detach(thrd_t thr)
{
    return result(pthread_detach((pthread_t)thr));
}

int mtx_init(mtx_t *m, int type)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (type & mtx_recursive)
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init((pthread_mutex_t *)m, &a);
    pthread_mutexattr_destroy(&a);
    return result(rc);
}

int mtx_lock(mtx_t *m)
{
    return result(pthread_mutex_lock((pthread_mutex_t *)m));
}

int mtx_trylock(mtx_t *m)
{
    return result(pthread_mutex_trylock((pthread_mutex_t *)m));
}

int mtx_unlock(mtx_t *m)
{
    return result(pthread_mutex_unlock((pthread_mutex_t *)m));
}

void mtx_destroy(mtx_t *m)
{
    pthread_mutex_destroy((pthread_mutex_t *)m);
}

int cnd_init(cnd_t *c)
{
    return result(pthread_cond_init((pthread_cond_t *)c, NULL));
}

int cnd_signal(cnd_t *c)
{
    return result(pthread_cond_signal((pthread_cond_t *)c));
}

int cnd_broadcast(cnd_t *c)
{
    return result(pthread_cond_broadcast((pthread_cond_t *)c));
}

int cnd_wait(cnd_t *c, mtx_t *m)
{
    return result(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}

int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts)
{
    return result(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}

void cnd_destroy(cnd_t *c)
{
    pthread_cond_destroy((pthread_cond_t *)c);
}
