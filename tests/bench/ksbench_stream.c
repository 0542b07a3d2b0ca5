/* ksbench_stream.c: the HTTP NDJSON stream client: one connection reads
 * GET /v1/groups/{group}/stream, a second keep-alive one POSTs the ack ids in batches. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ksbench.h"
#include "ksbench_ordered.h"

/* A growable byte buffer; [off, len) is what is still unread. */
typedef struct {
    char *b;
    size_t off, len, cap;
} buf_t;

static void buf_room(buf_t *x, size_t n)
{
    if (x->off && x->len + n + 1 > x->cap) { /* reuse what was read first */
        memmove(x->b, x->b + x->off, x->len - x->off);
        x->len -= x->off;
        x->off = 0;
    }
    if (x->len + n + 1 > x->cap) {
        x->cap = (x->len + n + 1) * 2;
        if (!(x->b = realloc(x->b, x->cap)))
            die("ksbench", "out of memory");
    }
}

/* The chunked body's decoder: raw socket bytes in, the body's bytes out. libmicrohttpd sends
 * a response of unknown length in chunks ("<hex size>\r\n<data>\r\n", size 0 last). */
typedef struct {
    size_t left;   /* data bytes of the current chunk still to come */
    bool data_end; /* the CRLF after a chunk's data is next */
    bool ended;    /* the last chunk came: the server ended the stream */
} chunks_t;

static void dechunk(chunks_t *c, buf_t *raw, buf_t *body)
{
    while (raw->off < raw->len && !c->ended) {
        size_t have = raw->len - raw->off;
        if (c->left) {
            size_t k = have < c->left ? have : c->left;
            buf_room(body, k);
            memcpy(body->b + body->len, raw->b + raw->off, k);
            body->len += k;
            raw->off += k;
            if (!(c->left -= k))
                c->data_end = true;
            continue;
        }
        char *eol = memchr(raw->b + raw->off, '\n', have);
        if (!eol)
            return; /* a size line or CRLF not all here yet */
        if (c->data_end)
            c->data_end = false;
        else if (!(c->left = strtoul(raw->b + raw->off, NULL, 16)))
            c->ended = true;
        raw->off = (size_t)(eol + 1 - raw->b);
    }
}

/* Dies unless every id of an ack answer was accepted ({...,"rejected":0,...} near its end). */
static void check_ack_answer(char *ans)
{
    size_t l = strlen(ans);
    const char *r = strstr(ans + (l > 200 ? l - 200 : 0), "\"rejected\":");
    if (!r || atol(r + 11) != 0)
        die("stream: ack rejected", r ? r : ans);
    free(ans);
}

/* A record line's fields, read in the order ksidecar writes them (http_put_record in
 * api/http_json.c), and its ack id from the line's end: walking every string of the line,
 * the value's above all, cost the client as much as a third of ksidecar's work a record.
 * `],"ack_id":"` cannot stand unescaped inside a string. Another shape takes the full scan. */
static bool scan_line(char *line, size_t len, jrec_t *r)
{
    static const char ack[] = "],\"ack_id\":\"";
    const size_t al = sizeof(ack) - 1;
    char *e;
    const char *p;
    memset(r, 0, sizeof(*r));
    if (len < 10 + al || strncmp(line, "{\"topic\":\"", 10) != 0 || !(p = strchr(line + 10, '"')) ||
        strncmp(p, "\",\"partition\":", 14) != 0)
        goto full; /* topic names hold no quotes */
    r->partition = (int32_t)strtol(p + 14, &e, 10);
    if (strncmp(e, ",\"offset\":", 10) != 0)
        goto full;
    r->offset = strtoll(e + 10, &e, 10);
    if (strncmp(e, ",\"timestamp\":", 13) != 0 || !(e = strchr(e + 13, ',')) ||
        strncmp(e, ",\"key\":", 7) != 0)
        goto full;
    if (e[7] == '"') {
        const char *q = r->key = e + 8;
        while (*q && *q != '"')
            q += *q == '\\' && q[1] ? 2 : 1;
        r->key_len = (size_t)(q - r->key);
    }
    for (const char *a = line + len - al; a > e; a--) {
        if (*a == ']' && !memcmp(a, ack, al)) {
            r->ack_id = a + al;
            if (!(p = strchr(r->ack_id, '"')))
                goto full;
            r->ack_id_len = (size_t)(p - r->ack_id);
            return true;
        }
    }
full:
    return scan_record(line, r) != NULL;
}

void run_stream(void)
{
    int sfd = http_connect(), afd = http_connect();
    char path[512], ackpath[300];
    snprintf(path, sizeof(path), "/v1/groups/%s/stream?topic=%s&max_in_flight=%d", group, topic,
             credits);
    snprintf(ackpath, sizeof(ackpath), "/v1/groups/%s/acks?results=errors", group);
    http_send(sfd, "GET", path, NULL, 0);
    buf_t raw = {0}, body = {0};
    chunks_t ch = {0};
    ackbuf_t ab = {0};
    bool head_done = false, ack_out = false;
    /* A batch goes once the last one was answered; never wait for more ids than credits,
     * nor past a short lull (key order holds a key's next record until this one is acked). */
    size_t batch = (size_t)(ack_batch < credits ? ack_batch : credits);
    if (ack_ranges && batch > 6000) /* a body with ranges names at most 8,000 records */
        batch = 6000;
    bool lull = false;
    long n = 0;
    double t0 = 0;
    latency_producer_start();
    while (n < want || ab.recs || ack_out) {
        if (!ack_out && ab.recs && (ab.recs >= batch || n >= want || lull)) {
            ackbuf_post(&ab, afd, ackpath);
            ack_out = true;
        }
        /* An ack body with ranges names at most 8,000 records: with one in flight, stop
         * reading at 6,000 (a 256 KiB read holds under 1,000 record lines of ~280 bytes;
         * records much smaller than 100-byte values would need a lower mark). */
        bool room = !ack_ranges || !ack_out || ab.recs < 6000;
        struct pollfd pf[2] = {{.fd = sfd, .events = n < want && room ? POLLIN : 0},
                               {.fd = afd, .events = ack_out ? POLLIN : 0}};
        int pr = poll(pf, 2, ab.recs && !ack_out ? 5 : 60000);
        if ((lull = pr == 0 && ab.recs && !ack_out))
            continue;
        if (pr == 0)
            die("stream", "nothing came for 60 s");
        if (pr < 0)
            continue;
        if (pf[1].revents) {
            check_ack_answer(http_recv(afd));
            ack_out = false;
        }
        if (!pf[0].revents)
            continue;
        buf_room(&raw, 1 << 18);
        ssize_t r = read(sfd, raw.b + raw.len, raw.cap - raw.len - 1);
        if (r <= 0)
            die("stream", "connection closed");
        raw.len += (size_t)r;
        if (!head_done) {
            raw.b[raw.len] = '\0';
            char *eoh = strstr(raw.b + raw.off, "\r\n\r\n");
            if (!eoh)
                continue;
            if (strncmp(raw.b + raw.off, "HTTP/1.1 200", 12) != 0)
                die("stream", raw.b + raw.off);
            if (!strcasestr(raw.b + raw.off, "Transfer-Encoding: chunked"))
                die("stream", "the response is not chunked");
            raw.off = (size_t)(eoh + 4 - raw.b);
            head_done = true;
        }
        dechunk(&ch, &raw, &body);
        char *line, *eol;
        while (body.off < body.len &&
               (eol = memchr(line = body.b + body.off, '\n', body.len - body.off))) {
            body.off = (size_t)(eol + 1 - body.b);
            *eol = '\0';
            if (!strncmp(line, "{\"error\"", 8))
                die("stream ended", line);
            if (strncmp(line, "{\"topic\"", 8) != 0) {
                if (latency_mode && !strncmp(line, "{\"assignment\"", 13))
                    latency_go(); /* the timed producer starts once the group has joined */
                continue;         /* a heartbeat, assignment or revocation news */
            }
            jrec_t rec;
            if (!scan_line(line, (size_t)(eol - line), &rec))
                die("stream: not a record", line);
            if (n == 0)
                t0 = now_s();
            if (latency_mode) { /* a timed value is text: "value":"t=<us>;xx..." */
                const char *v = strstr(line, ",\"value\":\"t=");
                if (v)
                    lat_add(v + 10, (size_t)(eol - v - 10));
            }
            track(rec.partition, rec.offset, rec.key, rec.key_len);
            ksb_order_log_add(rec.partition, rec.offset, rec.key, rec.key_len, 0);
            ackbuf_add_record(&ab, rec.partition, rec.offset, rec.ack_id, rec.ack_id_len);
            n++;
        }
        if (ch.ended && n < want)
            die("stream", "the server ended the stream");
    }
    report("stream", n, now_s() - t0);
    latency_producer_join();
    close(sfd);
    close(afd);
    free(raw.b);
    free(body.b);
    free(ab.b);
}
