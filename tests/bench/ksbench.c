/* ksbench.c: benchmark clients: a native librdkafka consumer (the baseline), a gRPC
 * Subscribe client on grpc core, and an HTTP long-poll client (the HTTP stream client is in
 * ksbench_stream.c), each counting records, acking them, and measuring rate, per-key order
 * and produce-to-receipt latency. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ksbench.h"
#include "ksbench_ordered.h"
#include "ksidecar/v1/consumer.pb-c.h"

const char *topic, *group, *addr;
static const char *boot;
long want = 0;
int credits = 20000, ack_batch = 1000;
static int delay_ms = 0, fetch_max = 5000;
/* http --fetches: long-poll fetches kept in flight, each on its own connection */
static int http_fetches = 1;
/* http --query: more of the fetch's query string (e.g. "value_format=avro"), or "" */
static const char *http_query = "";
bool latency_mode = false;
static bool rdk_defaults = false; /* native: librdkafka's default queue limits */
static int produce_rate = 10000;
static long produce_n = 0;
static bool ordered = false; /* grpc: Open.ordered_batches */
bool ack_ranges = false;
/* native: --conf key=value, librdkafka properties set after the others (the latency
 * baseline takes ksidecar's own consumer settings this way) */
static const char *confs[32];
static int conf_cnt;
/* grpc --hold: one credit and no acks until SIGUSR1, "ready" printed once the first record
 * came: clients started together join their groups first, then all run from one moment. */
static bool hold = false;
static volatile sig_atomic_t hold_go;

static void on_usr1(int sig)
{
    (void)sig;
    hold_go = 1;
}
static const char *order_log; /* --order-log: the handling log (ksbench_ordered.c) */

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void die(const char *a, const char *b)
{
    fprintf(stderr, "ksbench: %s: %s\n", a, b);
    exit(1);
}

/* ---- measurements ---- */

static int64_t *lat;
static size_t lat_n, lat_cap;

void lat_add(const void *payload, size_t len)
{
    /* Timed records start with "t=<wall clock microseconds>;". */
    if (len < 3 || memcmp(payload, "t=", 2) != 0)
        return;
    char buf[32];
    size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;
    memcpy(buf, payload, n);
    buf[n] = '\0';
    int64_t t = strtoll(buf + 2, NULL, 10);
    if (lat_n == lat_cap) {
        lat_cap = lat_cap ? lat_cap * 2 : 65536;
        lat = realloc(lat, lat_cap * sizeof(*lat));
        if (!lat)
            abort();
    }
    lat[lat_n++] = wall_us() - t;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Per (partition, key) last offset seen, to count order violations. Keys are "k<n>". */
#define MAX_KEYS 20000
static int64_t *last_off;
static long order_violations;
/* Per (partition, offset) bitmap for distinct counting: partitions below SEEN_PARTS, offsets
 * below 2^SEEN_OFFSET_BITS (1 GiB of address space, touched only where records land). A
 * record outside it is not counted as distinct, so a run past it fails its check. */
#define SEEN_PARTS       1024
#define SEEN_OFFSET_BITS 23
static unsigned char *seen;
static long distinct, dup_deliveries;

void track(int32_t partition, int64_t offset, const void *key, size_t key_len)
{
    if (offset >= 0 && offset < (int64_t)1 << SEEN_OFFSET_BITS && partition >= 0 &&
        partition < SEEN_PARTS) {
        size_t bit = ((size_t)partition << SEEN_OFFSET_BITS) + (size_t)offset;
        if (seen[bit >> 3] & (1u << (bit & 7)))
            dup_deliveries++;
        else {
            seen[bit >> 3] |= (unsigned char)(1u << (bit & 7));
            distinct++;
        }
    }
    if (key && key_len > 1 && ((const char *)key)[0] == 'k') {
        char kb[16];
        size_t n = key_len < 15 ? key_len : 15;
        memcpy(kb, (const char *)key + 1, n - 1);
        kb[n - 1] = '\0';
        long k = atol(kb);
        if (k >= 0 && k < MAX_KEYS && partition < 64) {
            int64_t *l = &last_off[(size_t)partition * MAX_KEYS + (size_t)k];
            if (*l >= offset)
                order_violations++;
            *l = offset;
        }
    }
}

void report(const char *mode, long n, double secs)
{
    /* end_unix: the wall clock now, so that runs in parallel can be put on one time line. */
    printf("mode=%s records=%ld seconds=%.3f rate=%.0f distinct=%ld duplicates=%ld "
           "order_violations=%ld end_unix=%.6f",
           mode, n, secs, n / secs, distinct, dup_deliveries, order_violations, wall_us() / 1e6);
    if (lat_n) {
        /* The first fifth of the run is a warm-up (group join, first fetch, connection
         * set-up) and is left out of the percentiles, in arrival order. */
        size_t skip = lat_n / 5, m = lat_n - skip;
        int64_t *l = lat + skip;
        qsort(l, m, sizeof(*l), cmp64);
        printf(" lat_n=%zu warmup_skipped=%zu p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f", m,
               skip, l[m / 2] / 1000.0, l[(size_t)(m * 0.99)] / 1000.0,
               l[(size_t)(m * 0.999)] / 1000.0, l[m - 1] / 1000.0);
    }
    printf("\n");
    fflush(stdout);
}

/* ---- a timed producer (latency mode) ---- */

static atomic_bool produce_go;

static void *producer_main(void *arg)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", boot, err, sizeof(err));
    /* A little batching: one produce request per record would swamp the broker at 10k/s. */
    rd_kafka_conf_set(conf, "linger.ms", "1", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        die("producer", err);
    while (!atomic_load(&produce_go))
        usleep(1000);
    double start = now_s();
    char val[100];
    for (long i = 0; i < produce_n; i++) {
        /* Steady rate: wait for this record's slot. */
        double due = start + (double)i / produce_rate;
        double d;
        while ((d = due - now_s()) > 0)
            usleep(d > 0.001 ? 500 : 50);
        /* A full local queue is waited out (a record lost would leave the consumer short);
         * the record is stamped when it is taken. */
        rd_kafka_resp_err_t e;
        do {
            int n = snprintf(val, sizeof(val), "t=%lld;", (long long)wall_us());
            memset(val + n, 'x', sizeof(val) - (size_t)n);
            e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_VALUE(val, sizeof(val)), RD_KAFKA_V_END);
            rd_kafka_poll(rk, e == RD_KAFKA_RESP_ERR__QUEUE_FULL ? 1 : 0);
        } while (e == RD_KAFKA_RESP_ERR__QUEUE_FULL);
        if (e)
            die("producer", rd_kafka_err2str(e));
    }
    rd_kafka_flush(rk, 10000);
    rd_kafka_destroy(rk);
    return NULL;
}

static pthread_t producer_thread;

void latency_producer_start(void)
{
    if (latency_mode)
        pthread_create(&producer_thread, NULL, producer_main, NULL);
}

void latency_go(void)
{
    atomic_store(&produce_go, true);
}

void latency_producer_join(void)
{
    if (latency_mode)
        pthread_join(producer_thread, NULL);
}

/* ---- native: the baseline ---- */

static void run_native(void)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", boot, err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", group, err, sizeof(err));
    rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof(err));
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err));
    /* The baseline is the physical limit, so its local queue is unbounded: with the
     * defaults, librdkafka 2.0.2 stops fetching for ~1 s whenever the consumer queue
     * passes queued.min.messages (100,000) or queued.max.messages.kbytes, and 2M-record
     * runs varied from 0.65 to 2.4M rec/s. --librdkafka-defaults measures that too. */
    if (!rdk_defaults) {
        rd_kafka_conf_set(conf, "queued.max.messages.kbytes", "1048576", err, sizeof(err));
        rd_kafka_conf_set(conf, "queued.min.messages", "10000000", err, sizeof(err));
    }
    for (int i = 0; i < conf_cnt; i++) {
        char k[128];
        const char *eq = strchr(confs[i], '=');
        if (!eq || (size_t)(eq - confs[i]) >= sizeof(k))
            die("--conf wants key=value", confs[i]);
        memcpy(k, confs[i], (size_t)(eq - confs[i]));
        k[eq - confs[i]] = '\0';
        if (rd_kafka_conf_set(conf, k, eq + 1, err, sizeof(err)) != RD_KAFKA_CONF_OK)
            die("--conf", err);
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk)
        die("consumer", err);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    latency_producer_start();
    long n = 0;
    double t0 = 0;
    while (n < want) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m) {
            if (latency_mode && !atomic_load(&produce_go)) {
                rd_kafka_topic_partition_list_t *a = NULL;
                if (rd_kafka_assignment(rk, &a) == 0 && a && a->cnt > 0) {
                    atomic_store(&produce_go, true);
                    t0 = now_s();
                }
                if (a)
                    rd_kafka_topic_partition_list_destroy(a);
            }
            continue;
        }
        if (!m->err) {
            if (n == 0 && !latency_mode)
                t0 = now_s();
            if (latency_mode)
                lat_add(m->payload, m->len);
            track(m->partition, m->offset, m->key, m->key_len);
            ksb_order_log_add(m->partition, m->offset, m->key, m->key_len, 0);
            n++;
        }
        rd_kafka_message_destroy(m);
    }
    double secs = now_s() - t0;
    rd_kafka_commit(rk, NULL, 0);
    report("native", n, secs);
    latency_producer_join();
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

/* ---- gRPC Subscribe client on grpc core ---- */

typedef struct {
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_byte_buffer *recv;
    bool send_busy;
    /* Ack ids waiting for the next ack message, already in AckIds' wire format. */
    uint8_t *pend;
    size_t pend_len, pend_cap, pend_n;
    size_t pend_recs; /* records those ids name (a range names each of its offsets) */
} gclient_t;

enum { TAG_START = 1, TAG_RECV, TAG_SEND, TAG_STATUS };

/* Sends the message in sl (taken) as the one send in flight. */
static void g_send_slice(gclient_t *g, grpc_slice sl)
{
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
    g->send_busy = true;
    if (grpc_call_start_batch(g->call, &op, 1, (void *)TAG_SEND, NULL) != GRPC_CALL_OK)
        die("grpc", "send batch");
    grpc_byte_buffer_destroy(bb); /* the batch holds its own reference */
}

static void g_send(gclient_t *g, const ProtobufCMessage *m)
{
    grpc_slice sl = grpc_slice_malloc(protobuf_c_message_get_packed_size(m));
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(sl));
    g_send_slice(g, sl);
}

static void g_recv(gclient_t *g)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &g->recv;
    if (grpc_call_start_batch(g->call, &op, 1, (void *)TAG_RECV, NULL) != GRPC_CALL_OK)
        die("grpc", "recv batch");
}

/* ---- the protobuf wire format, by hand for the hot path ----
 * A fast client decodes only what it uses: protobuf-c's generic unpack allocates every
 * record and string. Field numbers are those of proto/ksidecar/v1/consumer.proto. */

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Reads a varint at *p (below end); false if malformed. */
static bool get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* One field: its number, wire type, and (for varints) value or (for LEN) bytes. */
typedef struct {
    uint32_t num, type;
    uint64_t v;
    const uint8_t *data;
    size_t len;
} wfield_t;

static bool next_field(const uint8_t **p, const uint8_t *end, wfield_t *f)
{
    uint64_t key;
    if (!get_varint(p, end, &key))
        return false;
    f->num = (uint32_t)(key >> 3);
    f->type = (uint32_t)(key & 7);
    switch (f->type) {
    case 0:
        return get_varint(p, end, &f->v);
    case 1:
    case 5: {
        size_t n = f->type == 1 ? 8 : 4;
        if ((size_t)(end - *p) < n)
            return false;
        *p += n;
        return true;
    }
    case 2:
        if (!get_varint(p, end, &f->v) || f->v > (uint64_t)(end - *p))
            return false;
        f->data = *p;
        f->len = (size_t)f->v;
        *p += f->len;
        return true;
    default:
        return false;
    }
}

typedef struct {
    int32_t partition;
    int64_t offset;
    const uint8_t *key, *value, *ack_id;
    size_t key_len, value_len, ack_id_len;
    bool key_null;
    uint64_t chain; /* ordering_chain */
} wrecord_t;

static bool decode_record(const uint8_t *p, const uint8_t *end, wrecord_t *r)
{
    memset(r, 0, sizeof(*r));
    wfield_t f;
    while (p < end) {
        if (!next_field(&p, end, &f))
            return false;
        if (f.num == 2 && f.type == 0)
            r->partition = (int32_t)f.v;
        else if (f.num == 3 && f.type == 0)
            r->offset = (int64_t)f.v;
        else if (f.num == 5 && f.type == 2)
            r->key = f.data, r->key_len = f.len;
        else if (f.num == 6 && f.type == 0)
            r->key_null = f.v != 0;
        else if (f.num == 7 && f.type == 2)
            r->value = f.data, r->value_len = f.len;
        else if (f.num == 10 && f.type == 2)
            r->ack_id = f.data, r->ack_id_len = f.len;
        else if (f.num == 12 && f.type == 0)
            r->chain = f.v;
    }
    return r->ack_id_len > 0;
}

/* Queues one ack id (AckIds.ack_ids, field 1). */
static void g_pend(gclient_t *g, const void *id, size_t n)
{
    if (g->pend_len + n + 16 > g->pend_cap) {
        g->pend_cap = (g->pend_len + n + 16) * 2;
        g->pend = realloc(g->pend, g->pend_cap);
        if (!g->pend)
            die("ksbench", "out of memory");
    }
    uint8_t *p = g->pend + g->pend_len;
    *p++ = 1 << 3 | 2;
    p = put_varint(p, n);
    memcpy(p, id, n);
    g->pend_len = (size_t)(p + n - g->pend);
    g->pend_n++;
}

/* --ack-ranges: per partition, the run of consecutive offsets acked since the last flush,
 * kept as its id's text around the offset (a later record of the partition whose id matches
 * there and whose offset is next extends it). Flushed as "<head><first>~<last><tail>". */
typedef struct {
    int32_t partition;
    int64_t first, last;
    size_t hl, tl;
    char head[64], tail[320];
} ack_run_t;
static ack_run_t runs[64];
static size_t run_n;

/* Where the ids and ranges go: the gRPC client's pending message or an HTTP ack body. */
typedef void (*id_sink_fn)(void *ctx, const char *id, size_t n);

static void run_emit(id_sink_fn sink, void *ctx, const ack_run_t *r)
{
    char id[480];
    int n = snprintf(id, sizeof(id), "%.*s%lld~%lld%.*s", (int)r->hl, r->head, (long long)r->first,
                     (long long)r->last, (int)r->tl, r->tail);
    sink(ctx, id, (size_t)n);
}

/* Every run still open goes to the sink. */
static void runs_flush(id_sink_fn sink, void *ctx)
{
    for (size_t i = 0; i < run_n; i++)
        run_emit(sink, ctx, &runs[i]);
    run_n = 0;
}

/* Adds one record's id (offset off) to its partition's run. */
static void range_add(id_sink_fn sink, void *ctx, int32_t partition, int64_t off, const uint8_t *id,
                      size_t n)
{
    /* The offset is the 4th '-'-separated field: "a1<hex16>-<epoch>-<partition>-<offset>-";
     * the first '-' is at 18. */
    const uint8_t *e = n > 19 && id[18] == '-' ? memchr(id + 19, '-', n - 19) : NULL;
    const uint8_t *o = e ? memchr(e + 1, '-', n - (size_t)(e + 1 - id)) : NULL;
    const uint8_t *ot = o ? memchr(o + 1, '-', n - (size_t)(o + 1 - id)) : NULL;
    size_t h = o ? (size_t)(o + 1 - id) : 0, t = ot ? (size_t)(ot - id) : n;
    if (!ot || h > sizeof(runs[0].head) || n - t > sizeof(runs[0].tail)) {
        sink(ctx, (const char *)id, n); /* not an id this client knows: sent as it is */
        return;
    }
    ack_run_t *r = NULL;
    for (size_t i = 0; i < run_n; i++)
        if (runs[i].partition == partition)
            r = &runs[i];
    if (r && r->last + 1 == off && r->hl == h && r->tl == n - t && !memcmp(r->head, id, h) &&
        !memcmp(r->tail, id + t, n - t)) {
        r->last = off;
        return;
    }
    if (r)
        run_emit(sink, ctx, r);
    else if (run_n < sizeof(runs) / sizeof(runs[0]))
        r = &runs[run_n++];
    else {
        sink(ctx, (const char *)id, n);
        return;
    }
    *r = (ack_run_t){.partition = partition, .first = off, .last = off, .hl = h, .tl = n - t};
    memcpy(r->head, id, h);
    memcpy(r->tail, id + t, n - t);
}

static void g_sink(void *ctx, const char *id, size_t n)
{
    g_pend(ctx, (const uint8_t *)id, n);
}

static void g_pend_range(gclient_t *g, int32_t partition, int64_t off, const uint8_t *id, size_t n)
{
    range_add(g_sink, g, partition, off, id, n);
}

/* Sends the queued ack ids as SubscribeRequest{ack: AckIds} (field 2). */
static void g_flush_acks(gclient_t *g)
{
    if (g->send_busy || (g->pend_n == 0 && run_n == 0))
        return;
    if (ack_ranges) {
        runs_flush(g_sink, g);
        uint8_t *p = g->pend + g->pend_len; /* g_pend left room */
        *p++ = 4 << 3;                      /* AckIds.results_by_position */
        *p++ = 1;
        g->pend_len += 2;
    }
    uint8_t head[11];
    head[0] = 2 << 3 | 2;
    size_t hl = (size_t)(put_varint(head + 1, g->pend_len) - head);
    grpc_slice sl = grpc_slice_malloc(hl + g->pend_len);
    memcpy(GRPC_SLICE_START_PTR(sl), head, hl);
    memcpy(GRPC_SLICE_START_PTR(sl) + hl, g->pend, g->pend_len);
    g_send_slice(g, sl);
    g->pend_len = 0;
    g->pend_n = 0;
    g->pend_recs = 0;
}

/* Acks waiting out the simulated processing time (slow mode), oldest first. */
typedef struct {
    double due;
    char *id;
} delayed_t;

static void run_grpc(void)
{
    grpc_init();
    gclient_t g = {0};
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_arg arg = {
        GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = 64 << 20}};
    grpc_channel_args args = {1, &arg};
    grpc_channel *ch = grpc_channel_create(addr, cr, &args);
    grpc_channel_credentials_release(cr);
    g.cq = grpc_completion_queue_create_for_next(NULL);
    grpc_slice method = grpc_slice_from_static_string("/ksidecar.v1.Consumer/Subscribe");
    g.call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, g.cq, method, NULL,
                                      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_metadata_array md_in, trailing;
    grpc_metadata_array_init(&md_in);
    grpc_metadata_array_init(&trailing);
    grpc_status_code status;
    grpc_slice details;
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &md_in;
    grpc_call_start_batch(g.call, ops, 2, (void *)TAG_START, NULL);
    grpc_op st;
    memset(&st, 0, sizeof(st));
    st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st.data.recv_status_on_client.trailing_metadata = &trailing;
    st.data.recv_status_on_client.status = &status;
    st.data.recv_status_on_client.status_details = &details;
    grpc_call_start_batch(g.call, &st, 1, (void *)TAG_STATUS, NULL);

    char *topics[1] = {(char *)topic};
    Ksidecar__V1__Credits c = KSIDECAR__V1__CREDITS__INIT;
    c.records = hold ? 1 : credits;
    bool held = hold, ready = false;
    if (hold)
        signal(SIGUSR1, on_usr1);
    Ksidecar__V1__Open open = KSIDECAR__V1__OPEN__INIT;
    open.group = (char *)group;
    open.n_topics = 1;
    open.topics = topics;
    open.credits = &c;
    open.deadline_ms = 120000;
    open.ordered_batches = ordered;
    Ksidecar__V1__SubscribeRequest req = KSIDECAR__V1__SUBSCRIBE_REQUEST__INIT;
    req.kind_case = KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_OPEN;
    req.open = &open;
    g_send(&g, &req.base);
    g_recv(&g);

    delayed_t *dq = calloc((size_t)credits + 16, sizeof(*dq));
    size_t dq_h = 0, dq_n = 0, dq_cap = (size_t)credits + 16;
    latency_producer_start();

    long n = 0;
    double t0 = 0;
    bool done = false;
    while (!done) {
        if (held && hold_go && !g.send_busy) { /* released: all the credits, the clock starts */
            Ksidecar__V1__Credits more = KSIDECAR__V1__CREDITS__INIT;
            more.records = credits;
            Ksidecar__V1__SubscribeRequest cr = KSIDECAR__V1__SUBSCRIBE_REQUEST__INIT;
            cr.kind_case = KSIDECAR__V1__SUBSCRIBE_REQUEST__KIND_CREDITS;
            cr.credits = &more;
            g_send(&g, &cr.base);
            held = false;
            t0 = now_s();
        }
        /* Slow mode: acks come due 10 ms after receipt. */
        double wait = held ? 0.01 : 0.2;
        if (dq_n) {
            double now = now_s();
            while (dq_n && dq[dq_h].due <= now) {
                g_pend(&g, dq[dq_h].id, strlen(dq[dq_h].id));
                g.pend_recs++;
                free(dq[dq_h].id);
                dq_h = (dq_h + 1) % dq_cap;
                dq_n--;
            }
            if (dq_n)
                wait = dq[dq_h].due - now;
        }
        if (!held)
            g_flush_acks(&g);
        if (n >= want && g.pend_n == 0 && run_n == 0 && dq_n == 0 && !g.send_busy)
            break;
        /* The completion queue's deadline wakes about a millisecond late (its timers count
         * whole milliseconds), which made the simulated 10 ms about 11.1 ms: wake early, and
         * sleep out the last stretch exactly. */
        if (dq_n && wait < 0.002) {
            struct timespec ts = {0, (long)(wait * 1e9)};
            nanosleep(&ts, NULL);
            continue;
        }
        if (dq_n)
            wait -= 0.0015;
        gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                       gpr_time_from_micros((int64_t)(wait * 1e6), GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(g.cq, dl, NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        switch ((intptr_t)ev.tag) {
        case TAG_SEND:
            g.send_busy = false;
            break;
        case TAG_STATUS:
            fprintf(stderr, "ksbench: stream ended with status %d\n", status);
            done = true;
            break;
        case TAG_RECV: {
            if (!g.recv) {
                done = true;
                break;
            }
            grpc_byte_buffer_reader r;
            grpc_byte_buffer_reader_init(&r, g.recv);
            grpc_slice sl = grpc_byte_buffer_reader_readall(&r);
            grpc_byte_buffer_reader_destroy(&r);
            grpc_byte_buffer_destroy(g.recv);
            g.recv = NULL;
            /* SubscribeResponse: batch = 1 (RecordBatch: records = 1), assignment = 2. */
            const uint8_t *p = GRPC_SLICE_START_PTR(sl), *pend = p + GRPC_SLICE_LENGTH(sl);
            wfield_t top;
            while (p < pend) {
                if (!next_field(&p, pend, &top))
                    die("ksbench", "malformed SubscribeResponse");
                if (top.num == 2 && top.type == 2 && latency_mode)
                    atomic_store(&produce_go, true);
                if (top.num != 1 || top.type != 2)
                    continue;
                if (n == 0)
                    t0 = now_s();
                double now = now_s();
                const uint8_t *q = top.data, *qend = top.data + top.len;
                wfield_t rf;
                while (q < qend) {
                    if (!next_field(&q, qend, &rf))
                        die("ksbench", "malformed RecordBatch");
                    if (rf.num != 1 || rf.type != 2)
                        continue;
                    wrecord_t rec;
                    if (!decode_record(rf.data, rf.data + rf.len, &rec))
                        die("ksbench", "record without an ack id");
                    if (latency_mode)
                        lat_add(rec.value, rec.value_len);
                    track(rec.partition, rec.offset, rec.key_null ? NULL : rec.key, rec.key_len);
                    ksb_order_log_add(rec.partition, rec.offset, rec.key_null ? NULL : rec.key,
                                      rec.key_len, rec.chain);
                    if (delay_ms > 0) {
                        char *id = strndup((const char *)rec.ack_id, rec.ack_id_len);
                        dq[(dq_h + dq_n) % dq_cap] = (delayed_t){now + delay_ms / 1000.0, id};
                        dq_n++;
                    } else if (ack_ranges) {
                        g_pend_range(&g, rec.partition, rec.offset, rec.ack_id, rec.ack_id_len);
                        /* A message with ranges names at most 8,000 records (the server's
                         * KS_ACK_RANGE_MAX): send now, after the send in flight. No receive
                         * is posted meanwhile, so only that send's completion can come. */
                        if (++g.pend_recs >= 8000) {
                            while (g.send_busy) {
                                grpc_event se = grpc_completion_queue_next(
                                    g.cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
                                if (se.type != GRPC_OP_COMPLETE || (intptr_t)se.tag != TAG_SEND)
                                    die("ksbench", "stream ended while acks waited to be sent");
                                g.send_busy = false;
                            }
                            g_flush_acks(&g);
                        }
                    } else {
                        g_pend(&g, rec.ack_id, rec.ack_id_len);
                        g.pend_recs++;
                    }
                    n++;
                }
            }
            grpc_slice_unref(sl);
            if (held && n > 0 && !ready) {
                printf("ready\n");
                fflush(stdout);
                ready = true;
            }
            if (!held && (g.pend_recs >= (size_t)ack_batch || n >= want))
                g_flush_acks(&g);
            g_recv(&g);
            break;
        }
        default:
            break;
        }
    }
    double secs = now_s() - t0;
    report(delay_ms ? "grpc-slow" : "grpc", n, secs);
    /* Give the last acks a moment to land, then cancel. */
    usleep(300000);
    grpc_call_cancel(g.call, NULL);
    latency_producer_join();
    grpc_call_unref(g.call);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(g.cq);
    while (grpc_completion_queue_next(g.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(g.cq);
    grpc_shutdown();
    free(g.pend);
    free(dq);
}

/* ---- HTTP long-poll client (keep-alive connections: fetches, and acks) ---- */

/* Keep-alive connections: fetches on one (or --fetches of them), acks on another, so that a
 * batch's ack travels while the next fetch waits for records (the client keeps at most one
 * ack outstanding, within its subscriber credits). With --fetches 2 the server renders the
 * next fetch while the client reads the last; one fetch waits for each answer. */
#define HTTP_MAX_FETCHES 8
static int http_fetch_fd[HTTP_MAX_FETCHES], http_ack_fd = -1;

int http_connect(void)
{
    char host[128];
    snprintf(host, sizeof(host), "%s", addr);
    char *colon = strrchr(host, ':');
    if (!colon)
        die("http", "address must be host:port");
    *colon = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        die("http connect", strerror(errno));
    return fd;
}

void http_send(int fd, const char *method, const char *path, const char *body, size_t blen)
{
    char head[1024];
    int hl = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      method, path, blen);
    if (write(fd, head, (size_t)hl) != hl || (blen && write(fd, body, blen) != (ssize_t)blen))
        die("http", "write");
}

/* Reads one response; returns its body (caller frees). Fails on a status other than 200. */
char *http_recv(int fd)
{
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 65536 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r <= 0)
            die("http", "connection closed");
        len += (size_t)r;
        buf[len] = '\0';
        char *eoh = strstr(buf, "\r\n\r\n");
        if (!eoh)
            continue;
        if (strncmp(buf, "HTTP/1.1 200", 12) != 0)
            die("http", buf);
        char *cl = strcasestr(buf, "Content-Length:");
        if (!cl || cl > eoh)
            die("http", "no content length");
        size_t clen = (size_t)atol(cl + 15);
        size_t have = len - (size_t)(eoh + 4 - buf);
        if (have < clen)
            continue;
        if (have > clen)
            die("http", "more than one response at a time");
        memmove(buf, eoh + 4, clen);
        buf[clen] = '\0';
        return buf;
    }
}

/* ---- reading the fetch reply: a small JSON walker ----
 * It walks the whole document (strings with escapes, nested arrays and objects) but keeps
 * only what the benchmark needs from each record; jansson's tree of one allocation per
 * value cost more than the server's side. Strings are used raw (ack ids and the
 * benchmark's keys have no escapes). */

static const char *jws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    return p;
}

/* Skips a string at p (at its quote); sets its raw contents. NULL if malformed. */
static const char *jstr(const char *p, const char **s, size_t *len)
{
    if (*p != '"')
        return NULL;
    const char *q = ++p;
    while (*q && *q != '"')
        q += *q == '\\' && q[1] ? 2 : 1;
    if (*q != '"')
        return NULL;
    *s = p;
    *len = (size_t)(q - p);
    return q + 1;
}

static const char *jskip(const char *p)
{
    p = jws(p);
    const char *s;
    size_t l;
    if (*p == '"')
        return jstr(p, &s, &l);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = jws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (!(p = jstr(jws(p), &s, &l)) || *(p = jws(p)) != ':')
                    return NULL;
                p++;
            }
            if (!(p = jskip(p)))
                return NULL;
            p = jws(p);
            if (*p == ',') {
                p++;
                continue;
            }
            return *p == close ? p + 1 : NULL;
        }
    }
    const char *q = p; /* number, true, false, null */
    while (*q && strchr("0123456789+-.eEtruefalsn", *q))
        q++;
    return q > p ? q : NULL;
}

const char *scan_record(const char *p, jrec_t *r)
{
    const char *s;
    size_t l;
    memset(r, 0, sizeof(*r));
    if (*p != '{')
        return NULL;
    p = jws(p + 1);
    while (*p != '}') {
        if (!(p = jstr(p, &s, &l)) || *(p = jws(p)) != ':')
            return NULL;
        p = jws(p + 1);
        if (l == 9 && !memcmp(s, "partition", 9))
            r->partition = (int32_t)strtol(p, NULL, 10);
        else if (l == 6 && !memcmp(s, "offset", 6))
            r->offset = strtoll(p, NULL, 10);
        else if (l == 3 && !memcmp(s, "key", 3) && *p == '"')
            jstr(p, &r->key, &r->key_len);
        else if (l == 6 && !memcmp(s, "ack_id", 6) && *p == '"')
            jstr(p, &r->ack_id, &r->ack_id_len);
        if (!(p = jskip(p)))
            return NULL;
        p = jws(p);
        if (*p == ',')
            p = jws(p + 1);
    }
    return r->ack_id ? p + 1 : NULL;
}

/* {"records":[{...},...]} -> the records' fields the benchmark uses. */
static bool scan_records(const char *p, jrec_t **out, size_t *cnt)
{
    size_t cap = 1024, n = 0;
    jrec_t *v = malloc(cap * sizeof(*v));
    const char *s;
    size_t l;
    p = jws(p);
    if (*p++ != '{' || !(p = jstr(jws(p), &s, &l)) || l != 7 || memcmp(s, "records", 7) ||
        *(p = jws(p)) != ':' || *(p = jws(p + 1)) != '[')
        goto bad;
    p = jws(p + 1);
    while (*p != ']') {
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof(*v));
        if (!(p = scan_record(p, &v[n++])))
            goto bad;
        p = jws(p);
        if (*p == ',')
            p = jws(p + 1);
    }
    *out = v;
    *cnt = n;
    return true;
bad:
    free(v);
    return false;
}

void ackbuf_add(ackbuf_t *a, const char *id, size_t n)
{
    if (a->len + n + 32 > a->cap) { /* room for the head and the closing "]}" */
        a->cap = (a->len + n + 32) * 2;
        if (!(a->b = realloc(a->b, a->cap)))
            die("ksbench", "out of memory");
    }
    if (a->n == 0)
        a->len = (size_t)sprintf(a->b, "{\"ack_ids\":[");
    else
        a->b[a->len++] = ',';
    a->b[a->len++] = '"';
    memcpy(a->b + a->len, id, n);
    a->len += n;
    a->b[a->len++] = '"';
    a->n++;
}

static void ackbuf_sink(void *ctx, const char *id, size_t n)
{
    ackbuf_add(ctx, id, n);
}

void ackbuf_add_record(ackbuf_t *a, int32_t partition, int64_t offset, const char *id, size_t n)
{
    a->recs++;
    if (ack_ranges)
        range_add(ackbuf_sink, a, partition, offset, (const uint8_t *)id, n);
    else
        ackbuf_add(a, id, n);
}

void ackbuf_post(ackbuf_t *a, int fd, const char *path)
{
    runs_flush(ackbuf_sink, a);
    a->len += (size_t)sprintf(a->b + a->len, "]}"); /* ackbuf_add left room */
    http_send(fd, "POST", path, a->b, a->len);
    a->len = 0;
    a->n = a->recs = 0;
}

static void run_http(void)
{
    char path[512];
    snprintf(path, sizeof(path), "/v1/groups/%s/records?topic=%s&max=%d&wait_ms=2000%s%s", group,
             topic, fetch_max, *http_query ? "&" : "", http_query);
    for (int k = 0; k < http_fetches; k++) { /* every fetch asked for at once */
        http_fetch_fd[k] = http_connect();
        http_send(http_fetch_fd[k], "GET", path, NULL, 0);
    }
    http_ack_fd = http_connect();
    char ackpath[300];
    snprintf(ackpath, sizeof(ackpath), "/v1/groups/%s/acks?results=errors", group);
    long n = 0;
    double t0 = 0;
    ackbuf_t ab = {0};
    bool ack_out = false;
    long fetches = 0;
    /* Answers are read in the order the fetches were sent. With more than one fetch, each
     * connection asks again at once, before its records are handled; fetches still out
     * when the count is reached are dropped with their connections (their records stay
     * leased until their deadline). One fetch asks after its batch's ack is sent. */
    for (int k = 0; n < want; k = (k + 1) % http_fetches) {
        char *body = http_recv(http_fetch_fd[k]);
        if (http_fetches > 1)
            http_send(http_fetch_fd[k], "GET", path, NULL, 0);
        jrec_t *recs = NULL;
        size_t cnt = 0;
        if (!scan_records(body, &recs, &cnt))
            die("http", "fetch reply is not the expected JSON");
        if (cnt && n == 0)
            t0 = now_s();
        if (ack_out) { /* the previous batch's ack: answered by now, usually */
            free(http_recv(http_ack_fd));
            ack_out = false;
        }
        for (size_t i = 0; i < cnt; i++) {
            jrec_t *r = &recs[i];
            track(r->partition, r->offset, r->key, r->key_len);
            ksb_order_log_add(r->partition, r->offset, r->key, r->key_len, 0);
            ackbuf_add_record(&ab, r->partition, r->offset, r->ack_id, r->ack_id_len);
        }
        n += (long)cnt;
        fetches++;
        if (cnt) {
            ackbuf_post(&ab, http_ack_fd, ackpath);
            ack_out = true;
        }
        if (http_fetches == 1 && n < want)
            http_send(http_fetch_fd[k], "GET", path, NULL, 0);
        free(recs);
        free(body);
    }
    if (ack_out)
        free(http_recv(http_ack_fd));
    report("http", n, now_s() - t0);
    fprintf(stderr, "http: %ld fetches answered, %.0f records each\n", fetches,
            fetches ? (double)n / (double)fetches : 0.0);
    for (int k = 0; k < http_fetches; k++)
        close(http_fetch_fd[k]);
    close(http_ack_fd);
    free(ab.b);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage", "ksbench native|grpc|http|stream [options]");
    const char *mode = argv[1];
    static struct option opts[] = {{"bootstrap", 1, 0, 'b'},
                                   {"topic", 1, 0, 't'},
                                   {"group", 1, 0, 'g'},
                                   {"addr", 1, 0, 'a'},
                                   {"count", 1, 0, 'n'},
                                   {"credits", 1, 0, 'c'},
                                   {"ack-batch", 1, 0, 'k'},
                                   {"delay-ms", 1, 0, 'd'},
                                   {"fetch-max", 1, 0, 'm'},
                                   {"latency", 0, 0, 'L'},
                                   {"librdkafka-defaults", 0, 0, 'D'},
                                   {"rate", 1, 0, 'r'},
                                   {"produce", 1, 0, 'p'},
                                   {"ordered", 0, 0, 'O'},
                                   {"order-log", 1, 0, 'l'},
                                   {"ack-ranges", 0, 0, 'R'},
                                   {"conf", 1, 0, 'C'},
                                   {"hold", 0, 0, 'H'},
                                   {"fetches", 1, 0, 'F'},
                                   {"query", 1, 0, 'Q'},
                                   {0, 0, 0, 0}};
    int o;
    optind = 2;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'b':
            boot = optarg;
            break;
        case 't':
            topic = optarg;
            break;
        case 'g':
            group = optarg;
            break;
        case 'a':
            addr = optarg;
            break;
        case 'n':
            want = atol(optarg);
            break;
        case 'c':
            credits = atoi(optarg);
            break;
        case 'k':
            ack_batch = atoi(optarg);
            break;
        case 'd':
            delay_ms = atoi(optarg);
            break;
        case 'm':
            fetch_max = atoi(optarg);
            break;
        case 'D':
            rdk_defaults = true;
            break;
        case 'L':
            latency_mode = true;
            break;
        case 'r':
            produce_rate = atoi(optarg);
            break;
        case 'p':
            produce_n = atol(optarg);
            break;
        case 'O':
            ordered = true;
            break;
        case 'l':
            order_log = optarg;
            break;
        case 'R':
            ack_ranges = true;
            break;
        case 'H':
            hold = true;
            break;
        case 'F':
            http_fetches = atoi(optarg);
            if (http_fetches < 1 || http_fetches > HTTP_MAX_FETCHES)
                die("usage", "--fetches must be 1 to 8");
            break;
        case 'Q':
            http_query = optarg;
            break;
        case 'C':
            if (conf_cnt == (int)(sizeof(confs) / sizeof(confs[0])))
                die("usage", "too many --conf");
            confs[conf_cnt++] = optarg;
            break;
        default:
            return 2;
        }
    }
    if (!topic || !group || want <= 0)
        die("usage", "--topic, --group and --count are required");
    if (latency_mode && (!boot || produce_n <= 0))
        die("usage", "--latency needs --bootstrap and --produce N");
    last_off = malloc((size_t)64 * MAX_KEYS * sizeof(int64_t));
    memset(last_off, 0xff, (size_t)64 * MAX_KEYS * sizeof(int64_t)); /* -1 */
    seen = calloc(((size_t)SEEN_PARTS << SEEN_OFFSET_BITS) / 8, 1);
    if (!last_off || !seen)
        die("memory", "out of memory");
    if (order_log && ksb_order_log_open(order_log) != 0)
        die("memory", "out of memory");
    atomic_init(&produce_go, false);
    if (!strcmp(mode, "native"))
        run_native();
    else if (!strcmp(mode, "grpc"))
        run_grpc();
    else if (!strcmp(mode, "http"))
        run_http();
    else if (!strcmp(mode, "stream"))
        run_stream();
    else
        die("usage", "mode must be native, grpc, http or stream");
    if (ksb_order_log_write() != 0)
        die("order log", order_log);
    return 0;
}
