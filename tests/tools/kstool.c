/* kstool.c: test helper that creates topics, produces records and reads offsets on a real broker.
 */
#include <getopt.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *boot, *topic, *group, *batch_bytes; /* -B: the producer's batch.size */
static int partitions = 1, count = 0, keys = 0, size = 0, explicit_part = -1, binary = 0,
           no_headers = 0;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "kstool: %s: %s\n", what, why);
    exit(1);
}

static rd_kafka_t *make(rd_kafka_type_t type, const char *extra_k, const char *extra_v)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", boot, err, sizeof(err)) ||
        (extra_k && rd_kafka_conf_set(conf, extra_k, extra_v, err, sizeof(err))))
        die("config", err);
    if (type == RD_KAFKA_PRODUCER) {
        rd_kafka_conf_set(conf, "linger.ms", "20", err, sizeof(err));
        rd_kafka_conf_set(conf, "batch.num.messages", "10000", err, sizeof(err));
        rd_kafka_conf_set(conf, "queue.buffering.max.messages", "1000000", err, sizeof(err));
    }
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof(err));
    if (!rk)
        die("client", err);
    return rk;
}

/* Creates topic with `partitions` partitions; an existing topic is fine. */
static void create_topic(void)
{
    rd_kafka_t *rk = make(RD_KAFKA_PRODUCER, NULL, NULL);
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, 1, NULL, 0);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    if (!ev)
        die("create topic", "timed out");
    const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
    size_t n;
    const rd_kafka_topic_result_t **tr = rd_kafka_CreateTopics_result_topics(res, &n);
    if (n == 1 && rd_kafka_topic_result_error(tr[0]) &&
        rd_kafka_topic_result_error(tr[0]) != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
        die("create topic", rd_kafka_topic_result_error_string(tr[0]));
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    rd_kafka_destroy(rk);
}

/* Deletes topic (a benchmark's big topic, afterwards); a missing topic is fine. */
static void delete_topic(void)
{
    rd_kafka_t *rk = make(RD_KAFKA_PRODUCER, NULL, NULL);
    rd_kafka_DeleteTopic_t *dt = rd_kafka_DeleteTopic_new(topic);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_DeleteTopics(rk, &dt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    if (!ev)
        die("delete topic", "timed out");
    const rd_kafka_DeleteTopics_result_t *res = rd_kafka_event_DeleteTopics_result(ev);
    size_t n;
    const rd_kafka_topic_result_t **tr = rd_kafka_DeleteTopics_result_topics(res, &n);
    if (n == 1 && rd_kafka_topic_result_error(tr[0]) &&
        rd_kafka_topic_result_error(tr[0]) != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        die("delete topic", rd_kafka_topic_result_error_string(tr[0]));
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_DeleteTopic_destroy(dt);
    rd_kafka_destroy(rk);
}

static int delivery_failures = 0;
static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    if (m->err)
        delivery_failures++;
}

/* Produces `count` records: key "k<i % keys>" (null key when keys == 0), value
 * "v<i>" padded to `size` bytes, a header "i" with the index. */
static void produce(void)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", boot, err, sizeof(err));
    rd_kafka_conf_set(conf, "linger.ms", "20", err, sizeof(err));
    rd_kafka_conf_set(conf, "queue.buffering.max.messages", "1000000", err, sizeof(err));
    rd_kafka_conf_set(conf, "queue.buffering.max.kbytes", "1048576", err, sizeof(err));
    if (batch_bytes && rd_kafka_conf_set(conf, "batch.size", batch_bytes, err, sizeof(err)))
        die("-B", err);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        die("producer", err);
    char *val = malloc((size_t)(size > 64 ? size : 64) + 1);
    for (int i = 0; i < count; i++) {
        char key[32], idx[32];
        int vl = snprintf(val, 64, "v%d", i);
        if (vl < size) {
            memset(val + vl, 'x', (size_t)(size - vl));
            vl = size;
        }
        if (binary)
            val[0] = (char)0xff; /* never valid UTF-8 */
        snprintf(key, sizeof(key), "k%d", keys ? i % keys : 0);
        snprintf(idx, sizeof(idx), "%d", i);
        int part = explicit_part >= 0 ? explicit_part
                   : keys             ? RD_KAFKA_PARTITION_UA
                                      : i % partitions;
        rd_kafka_resp_err_t e;
        do {
            if (no_headers)
                e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(part),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                      RD_KAFKA_V_KEY(keys ? key : NULL, keys ? strlen(key) : 0),
                                      RD_KAFKA_V_VALUE(val, (size_t)vl), RD_KAFKA_V_END);
            else
                e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(part),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                      RD_KAFKA_V_KEY(keys ? key : NULL, keys ? strlen(key) : 0),
                                      RD_KAFKA_V_VALUE(val, (size_t)vl),
                                      RD_KAFKA_V_HEADER("i", idx, -1), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                rd_kafka_poll(rk, 50);
        } while (e == RD_KAFKA_RESP_ERR__QUEUE_FULL);
        if (e)
            die("produce", rd_kafka_err2str(e));
        rd_kafka_poll(rk, 0);
    }
    if (rd_kafka_flush(rk, 120000))
        die("produce", "flush timed out");
    if (delivery_failures)
        die("produce", "some records were not delivered");
    free(val);
    rd_kafka_destroy(rk);
    printf("%d\n", count);
}

/* Prints "partition low high" for each partition of topic. */
static void watermarks(void)
{
    rd_kafka_t *rk = make(RD_KAFKA_PRODUCER, NULL, NULL);
    const rd_kafka_metadata_t *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000))
        die("metadata", "failed");
    if (md->topic_cnt != 1 || md->topics[0].err)
        die("metadata", "no such topic");
    for (int p = 0; p < md->topics[0].partition_cnt; p++) {
        int64_t lo, hi;
        if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 10000))
            die("watermarks", "failed");
        printf("%d %lld %lld\n", p, (long long)lo, (long long)hi);
    }
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
}

/* Prints "partition offset metadata" for group's committed offsets of topic. */
static void committed(void)
{
    rd_kafka_t *rk = make(RD_KAFKA_CONSUMER, "group.id", group);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(l, topic, p);
    rd_kafka_resp_err_t e = rd_kafka_committed(rk, l, 10000);
    if (e)
        die("committed", rd_kafka_err2str(e));
    for (int i = 0; i < l->cnt; i++)
        printf("%d %lld %.*s\n", l->elems[i].partition, (long long)l->elems[i].offset,
               (int)l->elems[i].metadata_size,
               l->elems[i].metadata ? (const char *)l->elems[i].metadata : "");
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(rk);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: kstool create|delete|produce|watermarks|committed -b BOOT -t TOPIC "
                        "[-p PARTS] [-n N] [-k KEYS] [-s SIZE] [-P PARTITION] [-g GROUP] [-x] [-N] "
                        "[-B BATCH_BYTES]\n");
        return 2;
    }
    const char *cmd = argv[1];
    int c;
    optind = 2;
    while ((c = getopt(argc, argv, "b:t:p:n:k:s:g:P:xNB:")) != -1) {
        switch (c) {
        case 'b':
            boot = optarg;
            break;
        case 't':
            topic = optarg;
            break;
        case 'p':
            partitions = atoi(optarg);
            break;
        case 'n':
            count = atoi(optarg);
            break;
        case 'k':
            keys = atoi(optarg);
            break;
        case 's':
            size = atoi(optarg);
            break;
        case 'g':
            group = optarg;
            break;
        case 'P':
            explicit_part = atoi(optarg);
            break;
        case 'x':
            binary = 1;
            break;
        case 'N':
            no_headers = 1;
            break;
        case 'B':
            batch_bytes = optarg;
            break;
        default:
            return 2;
        }
    }
    if (!boot || !topic)
        die("usage", "-b and -t are required");
    if (!strcmp(cmd, "create"))
        create_topic();
    else if (!strcmp(cmd, "delete"))
        delete_topic();
    else if (!strcmp(cmd, "produce"))
        produce();
    else if (!strcmp(cmd, "watermarks"))
        watermarks();
    else if (!strcmp(cmd, "committed") && group)
        committed();
    else
        die("usage", "unknown command or missing -g");
    return 0;
}
