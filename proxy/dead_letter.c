/* dead_letter.c: a group's dead letters: records past max_attempts produced to its dead-letter
 * topic. */
#include "group_int.h"
#include "kconf.h"
#include "otel.h"

#include <strings.h>

#define DLQ_RETRY_MS 1000

static void dlq_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    ks_group_t *g = opaque;
    dlq_ref_t *ref = m->_private;
    part_t *p = part_find(g, ref->topic, ref->partition);
    ks_win_entry_t *e =
        p && p->epoch == ref->epoch ? ks_ack_window_get(&p->win, ref->offset) : NULL;
    if (!e || e->state != KS_REC_DEAD_LETTERING) {
        /* The partition moved on; its new owner redelivers the record. */
        free(ref);
        return;
    }
    if (m->err) {
        ks_warn(g->log_name, "%s[%d]@%lld: producing to dead-letter topic %s failed: %s; retrying",
                ref->topic, ref->partition, (long long)ref->offset, g->gconf->dead_letter_topic,
                rd_kafka_err2str(m->err));
        ks_lease_delay(&g->leases, &p->win, p, e, ks_now_ms(), DLQ_RETRY_MS);
        free(ref);
        return;
    }
    ks_info(g->log_name, "%s[%d]@%lld: dead-lettered to %s after %u attempts", ref->topic,
            ref->partition, (long long)ref->offset, g->gconf->dead_letter_topic,
            ks_win_attempts_counted(e));
    g->st_dead_lettered++;
    mark_done(g, p, e);
    ks_ack_window_ack(&p->win, ref->offset);
    part_check_bound(g, p);
    free(ref);
}

static int dlq_start(ks_group_t *g)
{
    char e[512];
    rd_kafka_conf_t *conf = ks_kconf_new(g->cfg, KS_KCONF_DEAD_LETTER, NULL, e, sizeof(e));
    if (!conf) {
        ks_err(g->log_name, "cannot make the dead-letter producer: %s", e);
        return -1;
    }
    rd_kafka_conf_set_opaque(conf, g);
    rd_kafka_conf_set_dr_msg_cb(conf, dlq_dr_cb);
    g->dlq_rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (!g->dlq_rk) {
        ks_err(g->log_name, "cannot make the dead-letter producer: %s", e);
        return -1;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_get_main(g->dlq_rk);
    rd_kafka_queue_io_event_enable(q, g->dlq_pipe[1], "1", 1);
    rd_kafka_queue_destroy(q);
    return 0;
}

void dead_letter(ks_group_t *g, part_t *p, ks_win_entry_t *e)
{
    const rec_t *m = e->msg;
    (void)ks_rec_move(e, KS_REC_DEAD_LETTERING);
    if (!g->dlq_rk && dlq_start(g) < 0) {
        (void)ks_rec_move(e, KS_REC_READY);
        ks_key_sched_requeue(&p->sched, &p->win, e);
        return;
    }
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new((m ? m->header_cnt : 0) + 7);
    /* With tracing on, its traceparent names the lease's span; else it is copied as it is. */
    char tp[56];
    bool own_tp = __builtin_expect(ks_otel_on, 0) && otel_dead_letter_parent(g, p, e, tp);
    for (size_t h = 0; m && h < m->header_cnt; h++)
        if (!own_tp || strcasecmp(rec_headers(m)[h].name, "traceparent"))
            rd_kafka_header_add(hdrs, rec_headers(m)[h].name, -1, rec_headers(m)[h].value,
                                (ssize_t)rec_headers(m)[h].value_len);
    if (own_tp)
        rd_kafka_header_add(hdrs, "traceparent", -1, tp, 55);
    char part[16], off[32], att[16];
    snprintf(part, sizeof(part), "%d", p->partition);
    snprintf(off, sizeof(off), "%lld", (long long)e->offset);
    snprintf(att, sizeof(att), "%u", ks_win_attempts_counted(e));
    rd_kafka_header_add(hdrs, "ksidecar.original.topic", -1, p->topic, -1);
    rd_kafka_header_add(hdrs, "ksidecar.original.partition", -1, part, -1);
    rd_kafka_header_add(hdrs, "ksidecar.original.offset", -1, off, -1);
    rd_kafka_header_add(hdrs, "ksidecar.attempts", -1, att, -1);
    rd_kafka_header_add(hdrs, "ksidecar.last_error", -1, e->reason ? e->reason : "", -1);
    rd_kafka_header_add(hdrs, "ksidecar.group", -1, g->name, -1);
    dlq_ref_t *ref = calloc(1, sizeof(*ref));
    if (!ref)
        abort();
    snprintf(ref->topic, sizeof(ref->topic), "%s", p->topic);
    ref->partition = p->partition;
    ref->epoch = p->epoch;
    ref->offset = e->offset;
    rd_kafka_resp_err_t err =
        rd_kafka_producev(g->dlq_rk, RD_KAFKA_V_TOPIC(g->gconf->dead_letter_topic),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_KEY(m ? rec_key(m) : NULL, m ? m->key_len : 0),
                          RD_KAFKA_V_VALUE(m ? rec_value(m) : NULL, m ? m->value_len : 0),
                          RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(ref), RD_KAFKA_V_END);
    if (err) {
        rd_kafka_headers_destroy(hdrs);
        free(ref);
        ks_warn(g->log_name, "dead-letter produce: %s; retrying", rd_kafka_err2str(err));
        ks_lease_delay(&g->leases, &p->win, p, e, ks_now_ms(), DLQ_RETRY_MS);
    }
}

void drain_dlq(ks_group_t *g)
{
    char buf[256];
    while (read(g->dlq_pipe[0], buf, sizeof(buf)) > 0)
        ;
    if (g->dlq_rk)
        rd_kafka_poll(g->dlq_rk, 0);
}
