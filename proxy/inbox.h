/* inbox.h: the one thread-safe door into a group loop: a FIFO of commands plus an eventfd. */
#ifndef KS_INBOX_H
#define KS_INBOX_H

#include <pthread.h>
#include <stdbool.h>

/* Embed this as the first member of a command. */
typedef struct ks_inbox_node {
    struct ks_inbox_node *next;
} ks_inbox_node_t;

typedef struct ks_inbox {
    pthread_mutex_t lock; /* guards head, tail, closed */
    ks_inbox_node_t *head, *tail;
    bool closed;
    int efd; /* readable while commands wait */
} ks_inbox_t;

/* Returns 0, or -1 with errno if the eventfd could not be made. */
int ks_inbox_init(ks_inbox_t *ib);

/* Frees the eventfd. Commands still queued are the caller's: take them first. */
void ks_inbox_destroy(ks_inbox_t *ib);

/* Queues n and wakes the loop. Any thread. Returns 0 (the inbox owns n), or -1 when
 * the inbox is closed (the caller still owns n). */
int ks_inbox_post(ks_inbox_t *ib, ks_inbox_node_t *n);

/* Takes every queued command, oldest first, and clears the wakeup. The caller owns
 * the list. @locality the loop thread */
ks_inbox_node_t *ks_inbox_take_all(ks_inbox_t *ib);

/* Refuses further posts. Returns what was still queued, oldest first (caller owns). */
ks_inbox_node_t *ks_inbox_close(ks_inbox_t *ib);

static inline int ks_inbox_fd(const ks_inbox_t *ib)
{
    return ib->efd;
}

#endif
