/* test_group.c: tests the group files through group_int.h, with no Kafka: what settling
 * answers for each kind of ack id (group_settle.c), how parked fetches share records among
 * subscribers (group_deliver.c), and ordered batches: a key's records out to one subscriber
 * several at a time, and what a nack, an expiry, a lost stream or an unsent batch sends back
 * with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "group_fixture.h"

/* Records a subscriber takes in its turn (group_deliver.c's SERVE_TURN). */
#define TURN 32

/* ---- what callbacks got ---- */

static ks_batch_t *got[8];
static size_t got_cnt;

static void on_batch(ks_batch_t *b, void *opaque)
{
    (void)opaque;
    assert_true(got_cnt < sizeof(got) / sizeof(got[0]));
    got[got_cnt++] = b;
}

static ks_ack_result_t *res;
static size_t res_n;

static void on_acks(ks_ack_result_t *r, size_t n, void *opaque)
{
    (void)opaque;
    free(res);
    res = r;
    res_n = n;
}

static void reset_got(void)
{
    for (size_t i = 0; i < got_cnt; i++)
        ks_batch_free(got[i]);
    got_cnt = 0;
}

/* Settles the n ids with op through handle_settle, as the loop does; results land in res. */
static void settle(ks_group_t *g, ks_settle_op_t op, int64_t ms, const char *const *ids, size_t n)
{
    ks_cmd_req_t req = {.type = KS_CMD_SETTLE,
                        .group = g->name,
                        .u.settle = {.op = op, .ms = ms, .ack_ids = ids, .n = n, .cb = on_acks}};
    cmd_t *c = cmd_copy(&req);        /* parses the ids, as ks_group_post does */
    handle_settle(g, c, ks_now_ms()); /* frees c */
    assert_int_equal(res_n, n);
}

static void settle1(ks_group_t *g, ks_settle_op_t op, const char *id, ks_status_t want,
                    const char *want_reason)
{
    settle(g, op, 0, &id, 1);
    assert_int_equal(res[0].status, want);
    assert_string_equal(res[0].reason, want_reason);
}

/* Delivers up to max records of topic t to subscriber "s1" and returns the batch. */
static ks_batch_t *deliver(ks_group_t *g, const char *t, int max)
{
    reset_got();
    fx_park_fetch(g, t, "s1", max, 0, on_batch, NULL);
    serve_waiting(g, ks_now_ms());
    assert_int_equal(got_cnt, 1);
    return got[0];
}

static void ack_id_of(const ks_batch_t *b, size_t i, char *buf, size_t size)
{
    assert_true(i < b->cnt);
    ks_record_ack_id(&b->recs[i], buf, size);
}

/* ---- settle's outcomes ---- */

static void test_settle_ack_and_repeat(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 0, 3);
    ks_batch_t *b = deliver(g, "t", 3);
    assert_int_equal(b->cnt, 3);
    assert_int_equal(p->leased, 3);
    char id0[KS_ACK_ID_MAX], id1[KS_ACK_ID_MAX];
    ack_id_of(b, 0, id0, sizeof(id0));
    ack_id_of(b, 1, id1, sizeof(id1));
    settle1(g, KS_SETTLE_ACK, id1, KS_OK, "acked");
    assert_int_equal(p->leased, 2);
    assert_int_equal(g->st_acked, 1);
    assert_int_equal(ks_ack_window_commit_point(&p->win), 0); /* 0 is not acked yet */
    /* The same ack again is fine; a nack of it is stale. */
    settle1(g, KS_SETTLE_ACK, id1, KS_OK, "already acked");
    settle1(g, KS_SETTLE_NACK, id1, KS_E_STALE, "already acked");
    settle1(g, KS_SETTLE_ACK, id0, KS_OK, "acked");
    assert_int_equal(ks_ack_window_commit_point(&p->win), 2);
    /* Below the commit point the window no longer holds it: which id was acked is not
     * known, so the answer is stale, not OK. */
    settle(g, KS_SETTLE_ACK, 0, (const char *[]){id0}, 1);
    assert_int_equal(res[0].status, KS_E_STALE);
    assert_non_null(strstr(res[0].reason, "already committed"));
    assert_int_equal(g->sub_cnt, 1);
    assert_int_equal(g->subs[0]->out_records, 1);
    assert_int_equal(g->st_acked, 2);
    reset_got();
    fx_group_free(g);
}

static void test_settle_rejects_foreign_ids(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 0, 2);
    ks_batch_t *b = deliver(g, "t", 1);
    char id[KS_ACK_ID_MAX];
    settle1(g, KS_SETTLE_ACK, "not-an-ack-id", KS_E_INVALID, "malformed ack id");

    ks_record_t r = b->recs[0];
    r.ack_group_hash ^= 1;
    ks_record_ack_id(&r, id, sizeof(id));
    settle1(g, KS_SETTLE_ACK, id, KS_E_INVALID, "ack id belongs to another group");

    r = b->recs[0];
    r.ack_instance++;
    ks_record_ack_id(&r, id, sizeof(id));
    settle(g, KS_SETTLE_ACK, 0, (const char *[]){id}, 1);
    assert_int_equal(res[0].status, KS_E_STALE);
    assert_non_null(strstr(res[0].reason, "earlier ksidecar process"));

    r = b->recs[0];
    r.partition = 9;
    ks_record_ack_id(&r, id, sizeof(id));
    settle(g, KS_SETTLE_ACK, 0, (const char *[]){id}, 1);
    assert_int_equal(res[0].status, KS_E_STALE);
    assert_non_null(strstr(res[0].reason, "no longer assigned"));

    r = b->recs[0];
    r.ack_epoch++;
    ks_record_ack_id(&r, id, sizeof(id));
    settle(g, KS_SETTLE_ACK, 0, (const char *[]){id}, 1);
    assert_int_equal(res[0].status, KS_E_STALE);
    assert_non_null(strstr(res[0].reason, "epoch changed"));

    /* Offset 1 is in the window but was never delivered. */
    r = b->recs[0];
    r.offset = 1;
    ks_record_ack_id(&r, id, sizeof(id));
    settle1(g, KS_SETTLE_ACK, id, KS_E_NOT_FOUND, "unknown ack id: no delivered record has it");

    /* An older attempt's id once the record went out again. */
    r = b->recs[0];
    r.attempt = 2;
    ks_record_ack_id(&r, id, sizeof(id));
    settle(g, KS_SETTLE_ACK, 0, (const char *[]){id}, 1);
    assert_int_equal(res[0].status, KS_E_STALE);
    assert_non_null(strstr(res[0].reason, "delivered again"));

    /* None of that touched the lease. */
    assert_int_equal(p->leased, 1);
    assert_int_equal(g->st_acked, 0);
    reset_got();
    fx_group_free(g);
}

static void test_settle_nack_and_extend(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 0, 2);
    ks_batch_t *b = deliver(g, "t", 2);
    char id0[KS_ACK_ID_MAX], id1[KS_ACK_ID_MAX];
    ack_id_of(b, 0, id0, sizeof(id0));
    ack_id_of(b, 1, id1, sizeof(id1));
    settle1(g, KS_SETTLE_EXTEND, id0, KS_OK, "deadline extended");
    settle1(g, KS_SETTLE_NACK, id0, KS_OK, "nacked; redelivery now");
    assert_int_equal(g->st_nacked, 1);
    assert_int_equal(ks_ack_window_get(&p->win, 0)->state, KS_REC_READY);
    /* Not leased any more. */
    settle1(g, KS_SETTLE_NACK, id0, KS_E_STALE,
            "not leased: the lease already ended (expired or nacked) and the record will be "
            "redelivered");
    settle1(g, KS_SETTLE_EXTEND, id0, KS_E_STALE,
            "not leased: the lease already ended (expired or nacked) and the record will be "
            "redelivered");
    settle(g, KS_SETTLE_NACK, 1000, (const char *[]){id1}, 1);
    assert_int_equal(res[0].status, KS_OK);
    assert_string_equal(res[0].reason, "nacked; redelivery after the delay");
    assert_int_equal(ks_ack_window_get(&p->win, 1)->state, KS_REC_DELAYED);
    /* The nacked record goes out again, attempt 2; its first id is stale now. */
    b = deliver(g, "t", 2);
    assert_int_equal(b->cnt, 1);
    assert_int_equal(b->recs[0].offset, 0);
    assert_int_equal(b->recs[0].attempt, 2);
    settle1(g, KS_SETTLE_ACK, id0, KS_E_STALE,
            "stale ack id: the lease ended and the record was delivered again; use the newer "
            "ack id");
    reset_got();
    fx_group_free(g);
}

/* ---- delivery fairness ---- */

static void test_subscribers_take_turns(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 0, 2 * TURN);
    reset_got();
    /* Both ask for more than there is; each gets a turn's share, not first come, all. */
    fx_park_fetch(g, "t", "a", 1000, 0, on_batch, NULL);
    fx_park_fetch(g, "t", "b", 1000, 0, on_batch, NULL);
    serve_waiting(g, ks_now_ms());
    assert_int_equal(got_cnt, 2);
    assert_int_equal(got[0]->cnt, TURN);
    assert_int_equal(got[1]->cnt, TURN);
    /* a took the first turn: offsets 0..31; b the next. */
    assert_int_equal(got[0]->recs[0].offset, 0);
    assert_int_equal(got[1]->recs[0].offset, TURN);
    assert_int_equal(g->wait_head, NULL);
    reset_got();
    fx_group_free(g);
}

static void test_one_subscribers_fetches_fill_in_order(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 0, 100);
    reset_got();
    /* Two fetches of one subscriber: the first fills before the second takes any, so each
     * batch holds one run of offsets. */
    fx_park_fetch(g, "t", "a", 60, 0, on_batch, NULL);
    fx_park_fetch(g, "t", "a", 60, 0, on_batch, NULL);
    serve_waiting(g, ks_now_ms());
    assert_int_equal(got_cnt, 2);
    assert_int_equal(got[0]->cnt, 60);
    assert_int_equal(got[1]->cnt, 40);
    for (size_t i = 0; i < got[0]->cnt; i++)
        assert_int_equal(got[0]->recs[i].offset, (int64_t)i);
    assert_int_equal(got[1]->recs[0].offset, 60);
    reset_got();
    fx_group_free(g);
}

static void test_credits_bound_a_subscriber(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    fx_push(p, 0, 50);
    reset_got();
    fx_park_fetch(g, "t", "a", 1000, 0, on_batch, NULL);
    sub_get(g, "a", ks_now_ms())->credit_records = 5;
    fx_park_fetch(g, "t", "b", 1000, 0, on_batch, NULL);
    serve_waiting(g, ks_now_ms());
    assert_int_equal(got_cnt, 2);
    assert_int_equal(got[0]->cnt, 5); /* a holds its 5 credits */
    assert_int_equal(got[1]->cnt, 45);
    reset_got();
    fx_group_free(g);
}

static void test_waiting_fetch_stays_parked(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    fx_part(g, "t", 0);
    reset_got();
    int64_t now = ks_now_ms();
    fx_park_fetch(g, "t", "a", 10, now + 60000, on_batch, NULL);
    serve_waiting(g, now);
    assert_int_equal(got_cnt, 0); /* nothing to deliver, the wait has not run out */
    assert_non_null(g->wait_head);
    serve_waiting(g, now + 60000);
    assert_int_equal(got_cnt, 1);
    assert_int_equal(got[0]->status, KS_OK);
    assert_int_equal(got[0]->cnt, 0);
    reset_got();
    fx_group_free(g);
}

/* Every command a group is posted has its handler; the producer's and the redrive's have none
 * and are refused. */
static void test_every_group_command_has_a_handler(void **state)
{
    (void)state;
    for (int t = 0; t < KS_CMD__CNT; t++)
        assert_int_equal(group_serves((ks_cmd_t)t), t != KS_CMD_PRODUCE && t != KS_CMD_REDRIVE);
    assert_false(group_serves(KS_CMD__CNT));
    ks_cmd_req_t p = {.type = KS_CMD_PRODUCE};
    assert_int_equal(ks_group_post(NULL, &p), KS_E_INVALID); /* refused before g is used */
}

/* ---- ordered batches ---- */

/* Appends records [from, to) of p with key hash h (0: a null key), READY. */
static void push_key(part_t *p, int64_t from, int64_t to, uint64_t h)
{
    for (int64_t off = from; off < to; off++) {
        rec_t *r = calloc(1, sizeof(rec_t) + 2);
        assert_non_null(r);
        r->timestamp = -1;
        if (ks_ack_window_push(&p->win, off, 1, r) < 0)
            fail();
        ks_key_sched_add(&p->sched, &p->win, ks_ack_window_get(&p->win, off), h != 0, h);
    }
}

/* One fetch of up to max records for sub, ordered or not, served now: its batch (owned by
 * got[]). confirm: the batch waits for handle_delivered, as a stream's does. */
static ks_batch_t *fetch_as(ks_group_t *g, const char *sub, int max, bool ordered, bool confirm)
{
    reset_got();
    cmd_t *c = fx_park_fetch(g, "t", sub, max, 0, on_batch, NULL);
    c->req.u.fetch.opts.ordered_batches = ordered;
    c->req.u.fetch.opts.confirm = confirm;
    serve_waiting(g, ks_now_ms());
    assert_int_equal(got_cnt, 1);
    return got[0];
}

static void assert_batch(const ks_batch_t *b, const int64_t *want, size_t n)
{
    assert_int_equal(b->cnt, n);
    for (size_t i = 0; i < n; i++)
        if (b->recs[i].offset != want[i])
            fail_msg("record %zu: offset %lld, want %lld", i, (long long)b->recs[i].offset,
                     (long long)want[i]);
}

/* An ack id, kept past its batch. */
typedef struct {
    char s[KS_ACK_ID_MAX];
} id_t_;

static id_t_ id_at(const ks_batch_t *b, size_t i)
{
    id_t_ id;
    ack_id_of(b, i, id.s, sizeof(id.s));
    return id;
}

/* Settles one ack id with op, as the loop does; the result lands in res. */
static void settle_id(ks_group_t *g, ks_settle_op_t op, int64_t ms, const id_t_ *id)
{
    settle(g, op, ms, (const char *[]){id->s}, 1);
}

static sub_t *sub_named(ks_group_t *g, const char *name)
{
    for (size_t i = 0; i < g->sub_cnt; i++)
        if (!strcmp(g->subs[i]->name, name))
            return g->subs[i];
    return NULL;
}

static void test_ordered_fetch_gets_a_chain_in_order(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_KEY);
    fx_gconf.max_in_flight_per_key = 3;
    part_t *p = fx_part(g, "t", 0);
    push_key(p, 0, 5, 0xA);
    push_key(p, 5, 6, 0);
    ks_batch_t *b = fetch_as(g, "s1", 100, true, false);
    /* Three of A (the bound), then the null-key record. */
    assert_batch(b, (const int64_t[]){0, 1, 2, 5}, 4);
    assert_int_equal(b->recs[0].ordering_chain, 0xA);
    assert_int_equal(b->recs[2].ordering_chain, 0xA);
    assert_int_equal(b->recs[3].ordering_chain, 0); /* in no chain */
    id_t_ r0 = id_at(b, 0);
    /* Another subscriber, ordered or not, gets nothing of A meanwhile. */
    assert_int_equal(fetch_as(g, "s2", 100, true, false)->cnt, 0);
    assert_int_equal(fetch_as(g, "s3", 100, false, false)->cnt, 0);
    settle_id(g, KS_SETTLE_ACK, 0, &r0);
    assert_int_equal(res[0].status, KS_OK);
    assert_batch(fetch_as(g, "s1", 100, true, false), (const int64_t[]){3}, 1);
    reset_got();
    fx_group_free(g);
}

static void test_plain_fetch_one_per_key_no_chain_id(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_KEY);
    part_t *p = fx_part(g, "t", 0);
    push_key(p, 0, 3, 0xA);
    push_key(p, 3, 5, 0xB);
    ks_batch_t *b = fetch_as(g, "s1", 100, false, false);
    assert_batch(b, (const int64_t[]){0, 3}, 2);
    assert_int_equal(b->recs[0].ordering_chain, 0);
    assert_int_equal(b->recs[1].ordering_chain, 0);
    reset_got();
    fx_group_free(g);
}

static void test_nack_sends_later_records_back(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_PARTITION);
    part_t *p = fx_part(g, "t", 0);
    push_key(p, 0, 6, 0xA);
    ks_batch_t *b = fetch_as(g, "s1", 100, true, false);
    assert_batch(b, (const int64_t[]){0, 1, 2, 3, 4, 5}, 6);
    assert_int_not_equal(b->recs[0].ordering_chain, 0);
    id_t_ r[6];
    for (size_t i = 0; i < 6; i++)
        r[i] = id_at(b, i);
    sub_t *s1 = sub_named(g, "s1");
    settle_id(g, KS_SETTLE_ACK, 0, &r[0]);
    settle_id(g, KS_SETTLE_NACK, 0, &r[2]);
    assert_int_equal(res[0].status, KS_OK);
    /* 3, 4 and 5 came back with 2: READY, uncounted, their credits returned; 1 is still out. */
    assert_int_equal(p->leased, 1);
    assert_int_equal(s1->out_records, 1);
    for (int64_t o = 3; o < 6; o++) {
        assert_int_equal(ks_ack_window_get(&p->win, o)->state, KS_REC_READY);
        assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, o)), 0);
    }
    /* An ack of one of them that comes late is refused: it was not leased any more. */
    settle_id(g, KS_SETTLE_ACK, 0, &r[4]);
    assert_int_equal(res[0].status, KS_E_STALE);
    settle_id(g, KS_SETTLE_NACK, 0, &r[4]);
    assert_int_equal(res[0].status, KS_E_STALE);
    /* The partition is still s1's (1 is out); they come again after 2, in order. */
    assert_int_equal(fetch_as(g, "s2", 100, true, false)->cnt, 0);
    b = fetch_as(g, "s1", 100, true, false);
    assert_batch(b, (const int64_t[]){2, 3, 4, 5}, 4);
    assert_int_equal(b->recs[0].attempt, 2);
    assert_int_equal(b->recs[1].attempt, 2); /* a new delivery number, not counted */
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, 3)), 1);
    /* The taken-back delivery's id stays stale now the record is out again. */
    settle_id(g, KS_SETTLE_ACK, 0, &r[4]);
    assert_int_equal(res[0].status, KS_E_STALE);
    /* The commit point never passed the unsettled record 1. */
    assert_int_equal(ks_ack_window_commit_point(&p->win), 1);
    reset_got();
    fx_group_free(g);
}

static void test_expiry_sends_later_records_back(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_KEY);
    part_t *p = fx_part(g, "t", 0);
    push_key(p, 0, 4, 0xA);
    cmd_t *c = fx_park_fetch(g, "t", "s1", 100, 0, on_batch, NULL);
    c->req.u.fetch.opts.ordered_batches = true;
    c->req.u.fetch.opts.deadline_ms = 1000;
    reset_got();
    int64_t now = ks_now_ms();
    serve_waiting(g, now);
    assert_batch(got[0], (const int64_t[]){0, 1, 2, 3}, 4);
    id_t_ r1 = id_at(got[0], 1);
    /* Every lease ends at once; the first to expire takes the later ones back with it. */
    ks_leases_run(&g->leases, now + 1000, lease_event, g);
    assert_int_equal(g->st_expired, 1);
    assert_int_equal(p->leased, 0);
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, 0)), 1);
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, 1)), 0);
    settle_id(g, KS_SETTLE_ACK, 0, &r1);
    assert_int_equal(res[0].status, KS_E_STALE);
    /* Nothing of A is out: another subscriber takes it over from the first record on. */
    assert_batch(fetch_as(g, "s2", 100, true, false), (const int64_t[]){0, 1, 2, 3}, 4);
    reset_got();
    fx_group_free(g);
}

static void test_release_hands_the_chain_over(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_KEY);
    part_t *p = fx_part(g, "t", 0);
    push_key(p, 0, 4, 0xA);
    ks_batch_t *b = fetch_as(g, "s1", 100, true, false);
    assert_batch(b, (const int64_t[]){0, 1, 2, 3}, 4);
    id_t_ r0 = id_at(b, 0);
    settle_id(g, KS_SETTLE_ACK, 0, &r0);
    /* s1's stream ends: what it held goes back, the first counted, the later ones not. */
    handle_release(g, "s1", false);
    assert_int_equal(p->leased, 0);
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, 1)), 1);
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, 2)), 0);
    b = fetch_as(g, "s2", 100, true, false);
    assert_batch(b, (const int64_t[]){1, 2, 3}, 3);
    assert_int_equal(b->recs[0].attempt, 2);
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, 2)), 1);
    assert_int_equal(ks_ack_window_commit_point(&p->win), 1);
    reset_got();
    fx_group_free(g);
}

static void test_unsent_batch_goes_back_uncounted(void **state)
{
    (void)state;
    ks_group_t *g = fx_group("g1", KS_ORDER_KEY);
    part_t *p = fx_part(g, "t", 0);
    push_key(p, 0, 3, 0xA);
    ks_batch_t *b = fetch_as(g, "s1", 100, true, true);
    assert_batch(b, (const int64_t[]){0, 1, 2}, 3);
    handle_delivered(g, b->deliver_token, false, ks_now_ms());
    for (int64_t o = 0; o < 3; o++) {
        assert_int_equal(ks_ack_window_get(&p->win, o)->state, KS_REC_READY);
        assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, o)), 0);
    }
    assert_int_equal(p->leased, 0);
    b = fetch_as(g, "s2", 100, true, true);
    assert_batch(b, (const int64_t[]){0, 1, 2}, 3);
    assert_int_equal(b->recs[0].attempt, 1); /* never sent: as if never handed out */
    assert_int_equal(b->recs[2].attempt, 2); /* a new number, in case the first got out */
    assert_int_equal(ks_win_attempts_counted(ks_ack_window_get(&p->win, 2)), 1);
    handle_delivered(g, b->deliver_token, true, ks_now_ms());
    assert_int_equal(p->leased, 3);
    reset_got();
    fx_group_free(g);
}

static ks_seek_result_t *seek_res;

static void on_seek_res(ks_seek_result_t *r, void *opaque)
{
    seek_res = r;
}

/* A seek that covers no assigned partition answers NOT_FOUND naming it, for one partition and
 * for every partition of a topic (the group has no librdkafka handle: nothing is moved). */
static void test_seek_unassigned_names_it(void **state)
{
    ks_group_t *g = fx_group("g", KS_ORDER_NONE);
    fx_part(g, "t", 0);
    ks_cmd_req_t req = {.type = KS_CMD_SEEK,
                        .group = "g",
                        .u.seek = {.topic = "t", .partition = 3, .cb = on_seek_res}};
    handle_seek(g, cmd_copy(&req));
    assert_non_null(seek_res);
    assert_int_equal(seek_res->status, KS_E_NOT_FOUND);
    assert_int_equal(seek_res->part_cnt, 0);
    assert_string_equal(seek_res->message,
                        "partition 3 of topic \"t\" is not assigned to this process");
    free(seek_res);
    req.u.seek.topic = "u";
    req.u.seek.all_partitions = true;
    handle_seek(g, cmd_copy(&req));
    assert_int_equal(seek_res->status, KS_E_NOT_FOUND);
    assert_string_equal(seek_res->message,
                        "no partition of topic \"u\" is assigned to this process");
    free(seek_res);
    fx_group_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settle_ack_and_repeat),
        cmocka_unit_test(test_settle_rejects_foreign_ids),
        cmocka_unit_test(test_settle_nack_and_extend),
        cmocka_unit_test(test_subscribers_take_turns),
        cmocka_unit_test(test_one_subscribers_fetches_fill_in_order),
        cmocka_unit_test(test_credits_bound_a_subscriber),
        cmocka_unit_test(test_waiting_fetch_stays_parked),
        cmocka_unit_test(test_every_group_command_has_a_handler),
        cmocka_unit_test(test_ordered_fetch_gets_a_chain_in_order),
        cmocka_unit_test(test_plain_fetch_one_per_key_no_chain_id),
        cmocka_unit_test(test_nack_sends_later_records_back),
        cmocka_unit_test(test_expiry_sends_later_records_back),
        cmocka_unit_test(test_release_hands_the_chain_over),
        cmocka_unit_test(test_unsent_batch_goes_back_uncounted),
        cmocka_unit_test(test_seek_unassigned_names_it),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    reset_got();
    free(res);
    return rc;
}
