/* inbox.c: a mutex-guarded FIFO of commands with an eventfd wakeup. */
#include "inbox.h"

#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

int ks_inbox_init(ks_inbox_t *ib)
{
    ib->head = ib->tail = NULL;
    ib->closed = false;
    ib->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ib->efd < 0)
        return -1;
    pthread_mutex_init(&ib->lock, NULL);
    return 0;
}

void ks_inbox_destroy(ks_inbox_t *ib)
{
    if (ib->efd >= 0)
        close(ib->efd);
    ib->efd = -1;
    pthread_mutex_destroy(&ib->lock);
}

int ks_inbox_post(ks_inbox_t *ib, ks_inbox_node_t *n)
{
    n->next = NULL;
    pthread_mutex_lock(&ib->lock);
    if (ib->closed) {
        pthread_mutex_unlock(&ib->lock);
        return -1;
    }
    bool was_empty = ib->head == NULL;
    if (ib->tail)
        ib->tail->next = n;
    else
        ib->head = n;
    ib->tail = n;
    pthread_mutex_unlock(&ib->lock);
    /* Only the empty → non-empty edge needs a wakeup: the loop drains everything. */
    if (was_empty) {
        uint64_t one = 1;
        ssize_t w = write(ib->efd, &one, sizeof(one));
        (void)w; /* EAGAIN means the counter is already non-zero: awake anyway */
    }
    return 0;
}

ks_inbox_node_t *ks_inbox_take_all(ks_inbox_t *ib)
{
    uint64_t v;
    ssize_t r = read(ib->efd, &v, sizeof(v));
    (void)r;
    pthread_mutex_lock(&ib->lock);
    ks_inbox_node_t *list = ib->head;
    ib->head = ib->tail = NULL;
    pthread_mutex_unlock(&ib->lock);
    return list;
}

ks_inbox_node_t *ks_inbox_close(ks_inbox_t *ib)
{
    pthread_mutex_lock(&ib->lock);
    ib->closed = true;
    ks_inbox_node_t *list = ib->head;
    ib->head = ib->tail = NULL;
    pthread_mutex_unlock(&ib->lock);
    return list;
}
