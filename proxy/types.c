/* types.c: the status code table, and the helpers of the shared record and status types. */
#include "types.h"

#include <stdlib.h>
#include <string.h>

#include "ack_id.h"

/* One row per ks_status_t, indexed by -status: its name, gRPC code, HTTP status and the
 * Retry-After seconds of its HTTP answer (0: none). */
static const struct {
    const char *name;
    int grpc_code;
    int http;
    int retry_s;
} status_tab[] = {
    [-KS_OK] = {"OK", 0, 200, 0},
    [-KS_E_INVALID] = {"INVALID_ARGUMENT", 3, 400, 0},
    [-KS_E_NOT_FOUND] = {"NOT_FOUND", 5, 404, 0},
    [-KS_E_STALE] = {"FAILED_PRECONDITION", 9, 409, 0},
    [-KS_E_EXHAUSTED] = {"RESOURCE_EXHAUSTED", 8, 429, 0},
    [-KS_E_UNAVAILABLE] = {"UNAVAILABLE", 14, 503, 0},
    [-KS_E_PERMISSION] = {"PERMISSION_DENIED", 7, 403, 0},
    [-KS_E_UNAUTH] = {"UNAUTHENTICATED", 16, 401, 0},
    [-KS_E_INTERNAL] = {"INTERNAL", 13, 500, 0},
    [-KS_E_URI_TOO_LONG] = {"RESOURCE_EXHAUSTED", 8, 414, 0},
    [-KS_E_BUSY] = {"RESOURCE_EXHAUSTED", 8, 429, 1},
    [-KS_E_ABORTED] = {"ABORTED", 10, 409, 0},
    [-KS_E_DEADLINE] = {"DEADLINE_EXCEEDED", 4, 504, 0},
};

#define STATUS_CNT (sizeof(status_tab) / sizeof(status_tab[0]))

/* The row of s, or -1 for a value outside the enum (or a row left out). */
static int status_row(ks_status_t s)
{
    int i = -(int)s;
    return i >= 0 && (size_t)i < STATUS_CNT && status_tab[i].name ? i : -1;
}

const char *ks_status_name(ks_status_t s)
{
    int i = status_row(s);
    return i < 0 ? "UNKNOWN" : status_tab[i].name;
}

int ks_status_grpc_code(ks_status_t s)
{
    int i = status_row(s);
    return i < 0 ? status_tab[-KS_E_INTERNAL].grpc_code : status_tab[i].grpc_code;
}

int ks_status_http(ks_status_t s)
{
    int i = status_row(s);
    return i < 0 ? status_tab[-KS_E_INTERNAL].http : status_tab[i].http;
}

int ks_status_retry_after(ks_status_t s)
{
    int i = status_row(s);
    return i < 0 ? 0 : status_tab[i].retry_s;
}

size_t ks_record_ack_id(const ks_record_t *r, char *buf, size_t size)
{
    return ks_ack_id_write(buf, size, r->ack_instance, r->ack_group_hash, r->ack_epoch,
                           r->partition, r->offset, (uint32_t)r->attempt, r->topic,
                           strlen(r->topic));
}

size_t ks_record_ack_id_put(struct ks_ack_id_writer *w, const ks_record_t *r, char *buf,
                            size_t size)
{
    return ks_ack_id_writer_put(w, buf, size, r->ack_instance, r->ack_group_hash, r->ack_epoch,
                                r->partition, r->offset, (uint32_t)r->attempt, r->topic);
}

void ks_batch_free(ks_batch_t *b)
{
    if (!b)
        return;
    free(b->arena);
    free(b->assigned);
    free(b);
}

const int64_t ks_hist_bounds_ms[KS_HIST_BUCKETS] = {5,    10,   25,   50,    100,   250,   500,
                                                    1000, 2500, 5000, 10000, 30000, 60000, 300000};

void ks_hist_add(ks_hist_t *h, int64_t ms)
{
    if (ms < 0)
        ms = 0;
    size_t i = 0;
    while (i < KS_HIST_BUCKETS && ms > ks_hist_bounds_ms[i])
        i++;
    h->counts[i]++;
    h->sum_ms += ms;
    h->count++;
}

void ks_group_status_free(ks_group_status_t *s)
{
    if (!s)
        return;
    free(s->topics);
    free(s->parts);
    free(s->subs);
    free(s);
}

const char *ks_commit_wait_name(ks_commit_wait_t w)
{
    switch (w) {
    case KS_COMMIT_ACCEPTED:
        return "ACCEPTED";
    case KS_COMMIT_COMMITTED:
        return "COMMITTED";
    case KS_COMMIT_LOST:
        return "LOST_TO_REBALANCE";
    case KS_COMMIT_FAILED:
        return "COMMIT_FAILED";
    case KS_COMMIT_NONE:
        break;
    }
    return NULL;
}

void ks_redrive_result_free(ks_redrive_result_t *res)
{
    if (!res)
        return;
    free(res->held);
    free(res->skipped);
    free(res->by_topic);
    free(res->parts);
    free(res);
}

size_t ks_produce_timed_out(const ks_produce_result_t *results, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += strcmp(results[i].code, KS_PRODUCE_TIMED_OUT) == 0;
    return c;
}

static const char *const rec_formats[] = {"binary", "avro",       "json_schema",
                                          "auto",   "avro_plain", "protobuf"};

int ks_rec_format_from_str(const char *s)
{
    for (size_t i = 0; i < sizeof(rec_formats) / sizeof(rec_formats[0]); i++)
        if (!strcmp(s, rec_formats[i]))
            return (int)i;
    return -1;
}

const char *ks_rec_format_str(ks_rec_format_t f)
{
    return (unsigned)f < sizeof(rec_formats) / sizeof(rec_formats[0]) ? rec_formats[f] : "?";
}
