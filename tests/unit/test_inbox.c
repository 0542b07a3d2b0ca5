/* test_inbox.c: tests the group loop's command inbox: FIFO order, close, eventfd wakeups and
 * multi-producer delivery (proxy/inbox.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inbox.h"

typedef struct item {
    ks_inbox_node_t node; /* first member, as the inbox wants */
    int producer;
    int seq;
} item_t;

static int readable(const ks_inbox_t *ib)
{
    struct pollfd p = {.fd = ks_inbox_fd(ib), .events = POLLIN};
    int r = poll(&p, 1, 0);
    assert_true(r >= 0);
    return r > 0 && (p.revents & POLLIN);
}

static size_t list_len(const ks_inbox_node_t *n)
{
    size_t k = 0;
    for (; n; n = n->next)
        k++;
    return k;
}

static void test_fifo_order(void **state)
{
    ks_inbox_t ib;
    assert_int_equal(ks_inbox_init(&ib), 0);
    assert_true(ks_inbox_fd(&ib) >= 0);
    assert_null(ks_inbox_take_all(&ib));

    item_t it[8];
    memset(it, 0, sizeof(it));
    for (int i = 0; i < 8; i++) {
        it[i].seq = i;
        it[i].node.next = (ks_inbox_node_t *)&it[0]; /* garbage the post must overwrite */
    }
    for (int i = 0; i < 5; i++)
        assert_int_equal(ks_inbox_post(&ib, &it[i].node), 0);
    ks_inbox_node_t *list = ks_inbox_take_all(&ib);
    assert_int_equal(list_len(list), 5);
    int expect = 0;
    for (ks_inbox_node_t *n = list; n; n = n->next)
        assert_int_equal(((item_t *)n)->seq, expect++);
    assert_ptr_equal(list, &it[0].node);
    assert_null(it[4].node.next);
    /* Taken means gone. */
    assert_null(ks_inbox_take_all(&ib));

    /* Posting after a take starts a fresh list (tail was reset). */
    assert_int_equal(ks_inbox_post(&ib, &it[5].node), 0);
    assert_int_equal(ks_inbox_post(&ib, &it[6].node), 0);
    list = ks_inbox_take_all(&ib);
    assert_ptr_equal(list, &it[5].node);
    assert_ptr_equal(list->next, &it[6].node);
    assert_null(list->next->next);
    /* ...and the earlier list was not extended behind our back. */
    assert_null(it[4].node.next);
    ks_inbox_destroy(&ib);
}

static void test_close(void **state)
{
    ks_inbox_t ib;
    assert_int_equal(ks_inbox_init(&ib), 0);
    item_t it[4];
    memset(it, 0, sizeof(it));
    for (int i = 0; i < 4; i++)
        it[i].seq = i;
    for (int i = 0; i < 3; i++)
        assert_int_equal(ks_inbox_post(&ib, &it[i].node), 0);

    /* Close hands back what was queued, oldest first. */
    ks_inbox_node_t *left = ks_inbox_close(&ib);
    assert_int_equal(list_len(left), 3);
    int expect = 0;
    for (ks_inbox_node_t *n = left; n; n = n->next)
        assert_int_equal(((item_t *)n)->seq, expect++);

    /* Then every post is refused, and the caller still owns the node. */
    assert_int_equal(ks_inbox_post(&ib, &it[3].node), -1);
    assert_int_equal(ks_inbox_post(&ib, &it[3].node), -1);
    assert_null(ks_inbox_take_all(&ib));
    assert_null(ks_inbox_close(&ib)); /* closing again is harmless and returns nothing */
    assert_int_equal(ks_inbox_post(&ib, &it[0].node), -1);
    ks_inbox_destroy(&ib);

    /* Closing an empty inbox returns NULL and still refuses posts. */
    assert_int_equal(ks_inbox_init(&ib), 0);
    assert_null(ks_inbox_close(&ib));
    assert_int_equal(ks_inbox_post(&ib, &it[0].node), -1);
    ks_inbox_destroy(&ib);
}

static void test_eventfd_wakeup(void **state)
{
    ks_inbox_t ib;
    assert_int_equal(ks_inbox_init(&ib), 0);
    item_t it[3];
    memset(it, 0, sizeof(it));

    assert_false(readable(&ib));
    assert_int_equal(ks_inbox_post(&ib, &it[0].node), 0);
    assert_true(readable(&ib));
    assert_true(readable(&ib)); /* polling does not consume it */
    assert_int_equal(ks_inbox_post(&ib, &it[1].node), 0);
    assert_true(readable(&ib));
    assert_int_equal(list_len(ks_inbox_take_all(&ib)), 2);
    assert_false(readable(&ib));

    /* A take with nothing queued leaves it quiet, and the next post wakes again. */
    assert_null(ks_inbox_take_all(&ib));
    assert_false(readable(&ib));
    assert_int_equal(ks_inbox_post(&ib, &it[2].node), 0);
    assert_true(readable(&ib));
    assert_int_equal(list_len(ks_inbox_take_all(&ib)), 1);
    assert_false(readable(&ib));

    /* Many posts between takes: one take clears the wakeup. */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 3; i++)
            assert_int_equal(ks_inbox_post(&ib, &it[i].node), 0);
        assert_true(readable(&ib));
        assert_int_equal(list_len(ks_inbox_take_all(&ib)), 3);
        assert_false(readable(&ib));
    }
    ks_inbox_destroy(&ib);
}

/* ---- many producers, one consumer ------------------------------------------------------- */

enum { PRODUCERS = 4, PER_PRODUCER = 10000 };

typedef struct {
    ks_inbox_t *ib;
    item_t *items; /* PER_PRODUCER of them */
    int refused;
} producer_t;

typedef struct {
    ks_inbox_t *ib;
    int received;
    int duplicates;
    int out_of_order;
    int bad_items;
    int lost_wakeups; /* a poll timed out although commands were queued */
    int timed_out;
    unsigned char *seen; /* PRODUCERS * PER_PRODUCER */
    int last_seq[PRODUCERS];
} consumer_t;

static void *producer_main(void *arg)
{
    producer_t *p = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        if (ks_inbox_post(p->ib, &p->items[i].node) != 0)
            p->refused++;
        if (i % 512 == 0)
            sched_yield();
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *consumer_main(void *arg)
{
    consumer_t *c = arg;
    const int total = PRODUCERS * PER_PRODUCER;
    double deadline = now_s() + 30.0;
    while (c->received < total) {
        if (now_s() > deadline) {
            c->timed_out = 1;
            break;
        }
        struct pollfd p = {.fd = ks_inbox_fd(c->ib), .events = POLLIN};
        int r = poll(&p, 1, 2000);
        ks_inbox_node_t *list = ks_inbox_take_all(c->ib);
        if (r == 0 && list)
            c->lost_wakeups++;
        for (ks_inbox_node_t *n = list; n;) {
            ks_inbox_node_t *next = n->next;
            item_t *it = (item_t *)n;
            if (it->producer < 0 || it->producer >= PRODUCERS || it->seq < 0 ||
                it->seq >= PER_PRODUCER) {
                c->bad_items++;
            } else {
                size_t k = (size_t)it->producer * PER_PRODUCER + (size_t)it->seq;
                if (c->seen[k])
                    c->duplicates++;
                c->seen[k] = 1;
                if (it->seq != c->last_seq[it->producer] + 1)
                    c->out_of_order++;
                c->last_seq[it->producer] = it->seq;
            }
            c->received++;
            n = next;
        }
    }
    return NULL;
}

static void test_many_producers(void **state)
{
    ks_inbox_t ib;
    assert_int_equal(ks_inbox_init(&ib), 0);
    item_t *items = calloc((size_t)PRODUCERS * PER_PRODUCER, sizeof(item_t));
    assert_non_null(items);
    producer_t prod[PRODUCERS];
    consumer_t cons;
    memset(&cons, 0, sizeof(cons));
    cons.ib = &ib;
    cons.seen = calloc((size_t)PRODUCERS * PER_PRODUCER, 1);
    assert_non_null(cons.seen);
    for (int p = 0; p < PRODUCERS; p++) {
        cons.last_seq[p] = -1;
        prod[p].ib = &ib;
        prod[p].items = items + (size_t)p * PER_PRODUCER;
        prod[p].refused = 0;
        for (int i = 0; i < PER_PRODUCER; i++) {
            prod[p].items[i].producer = p;
            prod[p].items[i].seq = i;
        }
    }

    pthread_t ct, pt[PRODUCERS];
    assert_int_equal(pthread_create(&ct, NULL, consumer_main, &cons), 0);
    for (int p = 0; p < PRODUCERS; p++)
        assert_int_equal(pthread_create(&pt[p], NULL, producer_main, &prod[p]), 0);
    for (int p = 0; p < PRODUCERS; p++)
        assert_int_equal(pthread_join(pt[p], NULL), 0);
    assert_int_equal(pthread_join(ct, NULL), 0);

    for (int p = 0; p < PRODUCERS; p++)
        assert_int_equal(prod[p].refused, 0);
    assert_int_equal(cons.timed_out, 0);
    assert_int_equal(cons.bad_items, 0);
    assert_int_equal(cons.duplicates, 0);
    assert_int_equal(cons.out_of_order, 0);
    assert_int_equal(cons.lost_wakeups, 0);
    assert_int_equal(cons.received, PRODUCERS * PER_PRODUCER);
    for (size_t k = 0; k < (size_t)PRODUCERS * PER_PRODUCER; k++)
        if (!cons.seen[k])
            fail_msg("producer %zu item %zu never arrived", k / PER_PRODUCER, k % PER_PRODUCER);
    for (int p = 0; p < PRODUCERS; p++)
        assert_int_equal(cons.last_seq[p], PER_PRODUCER - 1);
    /* All delivered: nothing left, nothing signalled. */
    assert_null(ks_inbox_take_all(&ib));
    assert_false(readable(&ib));
    assert_null(ks_inbox_close(&ib));
    ks_inbox_destroy(&ib);
    free(cons.seen);
    free(items);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_close),
        cmocka_unit_test(test_eventfd_wakeup),
        cmocka_unit_test(test_many_producers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
