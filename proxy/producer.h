/* producer.h: the engine's shared Kafka producer (Produce calls) and its connectivity probe. */
#ifndef KS_PRODUCER_H
#define KS_PRODUCER_H

#include <stdbool.h>

#include "config.h"
#include "types.h"

typedef struct ks_producer ks_producer_t;

/* Makes the producer and starts its poll thread, which also probes Kafka every 2 s.
 * cfg is borrowed. Returns NULL with err. */
ks_producer_t *ks_producer_new(const ks_config_t *cfg, char *err, size_t errsize);

/* Produces recs (copied); cb runs once, from the poll thread when all are settled or from
 * the deadline thread when timeout_ms (0: produce.timeout_ms) passed first: then every record
 * still unsettled has the code KS_PRODUCE_TIMED_OUT, and may yet be written (librdkafka
 * keeps it until kafka.message.timeout.ms; librdkafka 2.0.2 has no per-message timeout).
 * Returns KS_OK or an error with err (cb then never runs): KS_E_INVALID for a bad topic,
 * partition or timeout, KS_E_UNAVAILABLE at once when the last probe found Kafka
 * unreachable. Any thread. */
ks_status_t ks_producer_send(ks_producer_t *p, const ks_produce_rec_t *recs, size_t n,
                             int timeout_ms, ks_produce_cb *cb, void *opaque, char *err,
                             size_t errsize);

/* True while the last probe reached a broker. Any thread. */
bool ks_producer_kafka_up(ks_producer_t *p);

/* As ks_producer_kafka_up; when down, why (size bytes) says what the probe saw. Any thread. */
bool ks_producer_kafka_health(ks_producer_t *p, char *why, size_t size);

/* True when the last probe failed (not before the first one ends); why as above. Any
 * thread. */
bool ks_producer_kafka_down(ks_producer_t *p, char *why, size_t size);

/* Flushes for up to 5 s, stops the thread and frees p. */
void ks_producer_destroy(ks_producer_t *p);

#endif
