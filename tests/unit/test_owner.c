/* test_owner.c: tests the owner-thread check of group state (proxy/owner.h): re-entrancy, hand-off,
 * and abort on cross-thread use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Test the checking variant whatever the build type. */
#ifdef KS_OWNER_CHECK
#undef KS_OWNER_CHECK
#endif
#define KS_OWNER_CHECK 1
#include "owner.h"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>

static void owner_init(ks_owner_t *o)
{
    atomic_init(&o->tid, 0);
    o->depth = 0;
}

/* ---- in-process: legal use ---------------------------------------------------------------- */

static void test_reentrant_same_thread(void **state)
{
    ks_owner_t o;
    owner_init(&o);
    long self = ks_owner_self();
    assert_true(self > 0);
    assert_int_equal(ks_owner_self(), self); /* stable */

    ks_owner_enter(&o);
    assert_int_equal(atomic_load(&o.tid), self);
    assert_int_equal(o.depth, 1);
    ks_owner_assert(&o);
    ks_owner_enter(&o);
    ks_owner_enter(&o);
    assert_int_equal(o.depth, 3);
    ks_owner_assert(&o);
    ks_owner_leave(&o);
    assert_int_equal(o.depth, 2);
    assert_int_equal(atomic_load(&o.tid), self); /* still owned until the last leave */
    ks_owner_leave(&o);
    ks_owner_assert(&o);
    ks_owner_leave(&o);
    assert_int_equal(o.depth, 0);
    assert_int_equal(atomic_load(&o.tid), 0); /* free again */

    /* and it can be taken again */
    ks_owner_enter(&o);
    assert_int_equal(atomic_load(&o.tid), self);
    assert_int_equal(o.depth, 1);
    ks_owner_leave(&o);
    assert_int_equal(atomic_load(&o.tid), 0);
}

typedef struct {
    ks_owner_t *o;
    long tid_seen; /* o->tid while this thread held it */
    long self;
    int depth_seen;
    long tid_after; /* o->tid after this thread left */
} handoff_t;

static void *handoff_thread(void *arg)
{
    handoff_t *h = arg;
    h->self = ks_owner_self();
    ks_owner_enter(h->o);
    ks_owner_enter(h->o);
    ks_owner_assert(h->o);
    h->tid_seen = atomic_load(&h->o->tid);
    h->depth_seen = h->o->depth;
    ks_owner_leave(h->o);
    ks_owner_leave(h->o);
    h->tid_after = atomic_load(&h->o->tid);
    return NULL;
}

static void test_other_thread_after_full_leave(void **state)
{
    ks_owner_t o;
    owner_init(&o);
    ks_owner_enter(&o);
    ks_owner_enter(&o);
    ks_owner_leave(&o);
    ks_owner_leave(&o);
    assert_int_equal(atomic_load(&o.tid), 0);

    /* Sequential hand-offs between threads are legal (each joined before the next). */
    for (int round = 0; round < 20; round++) {
        handoff_t h = {.o = &o};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, handoff_thread, &h), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_int_not_equal(h.self, ks_owner_self());
        assert_int_equal(h.tid_seen, h.self);
        assert_int_equal(h.depth_seen, 2);
        assert_int_equal(h.tid_after, 0);
        /* and back to this thread */
        ks_owner_enter(&o);
        assert_int_equal(atomic_load(&o.tid), ks_owner_self());
        assert_int_equal(o.depth, 1);
        ks_owner_leave(&o);
    }
    assert_int_equal(atomic_load(&o.tid), 0);
}

/* ---- forked children: misuse must abort ------------------------------------------------- */

typedef void(child_fn)(void);

/* Runs fn in a forked child (stderr captured into out) and returns its wait status. A
 * child that returns from fn exits 0; one that hangs is killed by SIGALRM. */
static int run_child(child_fn *fn, char *out, size_t outsize)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        dup2(pfd[1], STDERR_FILENO);
        close(pfd[1]);
        /* No core files for the expected aborts. */
        struct rlimit rl = {0, 0};
        setrlimit(RLIMIT_CORE, &rl);
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        alarm(10);
        fn();
        _exit(0);
    }
    close(pfd[1]);
    size_t n = 0;
    for (;;) {
        ssize_t r = read(pfd[0], out + n, outsize - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == outsize - 1)
            break;
    }
    out[n] = '\0';
    close(pfd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void expect_abort(child_fn *fn, const char *what)
{
    char out[4096];
    int status = run_child(fn, out, sizeof(out));
    if (WIFEXITED(status))
        fail_msg("child exited with %d instead of aborting (%s); stderr: %s", WEXITSTATUS(status),
                 what, out);
    assert_true(WIFSIGNALED(status));
    if (WTERMSIG(status) != SIGABRT)
        fail_msg("child died by signal %d, not SIGABRT (%s)", WTERMSIG(status), what);
    /* The message says what was misused. */
    if (!strstr(out, "FATAL") || !strstr(out, what))
        fail_msg("abort message lacks \"FATAL\"/\"%s\": %s", what, out);
}

static void expect_clean_exit(child_fn *fn)
{
    char out[4096];
    int status = run_child(fn, out, sizeof(out));
    if (WIFSIGNALED(status))
        fail_msg("child died by signal %d; stderr: %s", WTERMSIG(status), out);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Child-side state. Thread A takes ownership and keeps it until told to stop. */
static ks_owner_t g_owner;
static sem_t g_a_ready, g_a_release;
static int g_a_enters = 1, g_a_leaves = 0;

static void *thread_a(void *arg)
{
    for (int i = 0; i < g_a_enters; i++)
        ks_owner_enter(&g_owner);
    for (int i = 0; i < g_a_leaves; i++)
        ks_owner_leave(&g_owner);
    sem_post(&g_a_ready);
    sem_wait(&g_a_release);
    return NULL;
}

/* Starts A, waits until it has entered (and left g_a_leaves times), runs b in thread B. */
static void with_a_owning(void *(*b)(void *))
{
    owner_init(&g_owner);
    sem_init(&g_a_ready, 0, 0);
    sem_init(&g_a_release, 0, 0);
    pthread_t ta, tb;
    if (pthread_create(&ta, NULL, thread_a, NULL) != 0)
        _exit(10);
    sem_wait(&g_a_ready);
    if (pthread_create(&tb, NULL, b, NULL) != 0)
        _exit(11);
    pthread_join(tb, NULL);
    sem_post(&g_a_release);
    pthread_join(ta, NULL);
    /* Reaching here means B's misuse went unnoticed: exit without aborting. */
}

static void *b_enter(void *arg)
{
    ks_owner_enter(&g_owner);
    ks_owner_leave(&g_owner);
    return NULL;
}

static void *b_leave(void *arg)
{
    ks_owner_leave(&g_owner);
    return NULL;
}

static void *b_assert(void *arg)
{
    ks_owner_assert(&g_owner);
    return NULL;
}

static void child_second_thread_enters(void)
{
    g_a_enters = 1;
    g_a_leaves = 0;
    with_a_owning(b_enter);
}

static void child_enter_after_partial_leave(void)
{
    g_a_enters = 3;
    g_a_leaves = 2; /* still owned at depth 1 */
    with_a_owning(b_enter);
}

static void child_second_thread_leaves(void)
{
    g_a_enters = 1;
    g_a_leaves = 0;
    with_a_owning(b_leave);
}

static void child_assert_from_non_owner(void)
{
    g_a_enters = 2;
    g_a_leaves = 0;
    with_a_owning(b_assert);
}

static void child_assert_when_free(void)
{
    owner_init(&g_owner);
    ks_owner_enter(&g_owner);
    ks_owner_leave(&g_owner);
    ks_owner_assert(&g_owner);
}

static void child_leave_without_enter(void)
{
    owner_init(&g_owner);
    ks_owner_leave(&g_owner);
}

/* The same harness with legal use must exit cleanly (so the aborts above mean something). */
static void *b_legal(void *arg)
{
    ks_owner_enter(&g_owner);
    ks_owner_assert(&g_owner);
    ks_owner_leave(&g_owner);
    return NULL;
}

static void child_legal_handoff(void)
{
    g_a_enters = 2;
    g_a_leaves = 2; /* A fully left before B comes */
    with_a_owning(b_legal);
    if (atomic_load(&g_owner.tid) != 0)
        _exit(20);
}

static void test_second_thread_enter_aborts(void **state)
{
    expect_abort(child_second_thread_enters, "enter");
}

static void test_enter_while_still_owned_aborts(void **state)
{
    expect_abort(child_enter_after_partial_leave, "enter");
}

static void test_leave_from_non_owner_aborts(void **state)
{
    expect_abort(child_second_thread_leaves, "leave");
}

static void test_assert_from_non_owner_aborts(void **state)
{
    expect_abort(child_assert_from_non_owner, "access");
}

static void test_assert_when_free_aborts(void **state)
{
    expect_abort(child_assert_when_free, "access");
}

static void test_leave_without_enter_aborts(void **state)
{
    expect_abort(child_leave_without_enter, "leave");
}

static void test_legal_handoff_in_child(void **state)
{
    expect_clean_exit(child_legal_handoff);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reentrant_same_thread),
        cmocka_unit_test(test_other_thread_after_full_leave),
        cmocka_unit_test(test_legal_handoff_in_child),
        cmocka_unit_test(test_second_thread_enter_aborts),
        cmocka_unit_test(test_enter_while_still_owned_aborts),
        cmocka_unit_test(test_leave_from_non_owner_aborts),
        cmocka_unit_test(test_assert_from_non_owner_aborts),
        cmocka_unit_test(test_assert_when_free_aborts),
        cmocka_unit_test(test_leave_without_enter_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
