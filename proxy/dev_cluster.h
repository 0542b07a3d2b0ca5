/* dev_cluster.h: dev mode's in-process mock Kafka cluster and its sample-record producer. */
#ifndef KS_DEV_CLUSTER_H
#define KS_DEV_CLUSTER_H

#include <stddef.h>

typedef struct ks_dev ks_dev_t;

/* Starts a one-broker librdkafka mock cluster with `topic` (partitions), and a thread
 * that produces `rate` sample records a second into it. Writes the cluster's
 * bootstrap address into bootstraps. Returns NULL with err on failure. */
ks_dev_t *ks_dev_start(const char *topic, int partitions, int rate, char *bootstraps, size_t bsize,
                       char *err, size_t errsize);

/* Stops the producer thread and destroys the cluster. */
void ks_dev_stop(ks_dev_t *d);

#endif
