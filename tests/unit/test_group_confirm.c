/* test_group_confirm.c: tests settles that wait for their commit (group_confirm.c): answered
 * only once a confirmed commit is past each accepted ack, and told when the wait ends, the
 * partition goes, is seeked or its commit fails; refusals and plain acks answer at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "group_fixture.h"

static ks_ack_result_t *res;
static size_t res_n, answers;

static void on_acks(ks_ack_result_t *r, size_t n, void *opaque)
{
    (void)opaque;
    free(res);
    res = r;
    res_n = n;
    answers++;
}

static char ids[10][KS_ACK_ID_MAX];
static ks_batch_t *batch;

static void on_batch(ks_batch_t *b, void *opaque)
{
    (void)opaque;
    batch = b;
}

static void deliver_all(ks_group_t *g)
{
    g->wait_head->req.u.fetch.cb = on_batch;
    serve_waiting(g, ks_now_ms());
    assert_non_null(batch);
    assert_int_equal(batch->cnt, 10);
    for (size_t i = 0; i < batch->cnt; i++)
        ks_record_ack_id(&batch->recs[i], ids[i], sizeof(ids[i]));
}

/* A group with partition t[0] holding records 0..9, all delivered to one subscriber; their
 * ack ids in ids. */
static ks_group_t *setup(part_t **pp)
{
    ks_group_t *g = fx_group("g1", KS_ORDER_NONE);
    part_t *p = fx_part(g, "t", 0);
    p->ct.confirmed = 0;
    fx_push(p, 0, 10);
    fx_park_fetch(g, "t", "s1", 10, 0, NULL, NULL);
    batch = NULL;
    answers = 0;
    deliver_all(g);
    return *pp = p, g;
}

static void teardown(ks_group_t *g)
{
    ks_batch_free(batch);
    cwait_expire(g, ks_now_ms(), true);
    fx_group_free(g);
    free(res);
    res = NULL;
    res_n = answers = 0;
}

static ks_ack_result_t *later;
static size_t later_n, later_answers;

static void on_later(ks_ack_result_t *r, size_t n, void *opaque)
{
    (void)opaque;
    free(later);
    later = r;
    later_n = n;
    later_answers++;
}

/* Acks ids[from..to) (and `extra` first, if given), waiting for the commit if wait; confirm:
 * the settle's confirm_cb. */
static void ack_cb(ks_group_t *g, int from, int to, const char *extra, bool wait, int timeout_ms,
                   ks_ack_cb *confirm)
{
    const char *v[12];
    size_t n = 0;
    if (extra)
        v[n++] = extra;
    for (int i = from; i < to; i++)
        v[n++] = ids[i];
    ks_cmd_req_t req = {.type = KS_CMD_SETTLE,
                        .group = g->name,
                        .u.settle = {.op = KS_SETTLE_ACK,
                                     .ack_ids = v,
                                     .n = n,
                                     .wait_commit = wait,
                                     .commit_timeout_ms = timeout_ms,
                                     .cb = on_acks,
                                     .confirm_cb = confirm}};
    char err[256];
    assert_int_equal(ks_cmd_validate(&fx_cfg, &req, err, sizeof(err)), KS_OK);
    handle_settle(g, cmd_copy(&req), ks_now_ms());
}

static void ack(ks_group_t *g, int from, int to, const char *extra, bool wait, int timeout_ms)
{
    ack_cb(g, from, to, extra, wait, timeout_ms, NULL);
}

/* The broker confirmed p's commit of offset. */
static void confirm(ks_group_t *g, part_t *p, int64_t offset)
{
    ks_commit_track_confirmed(&p->ct, offset, NULL, 0);
    cwait_confirmed(g, p);
}

static void test_answered_once_a_confirmed_commit_passes_the_acks(void **state)
{
    (void)state;
    part_t *p;
    ks_group_t *g = setup(&p);
    ack(g, 0, 3, NULL, true, 0);
    assert_int_equal(answers, 0); /* accepted, not yet committed */
    assert_int_equal(g->cwait_cnt, 1);
    confirm(g, p, 2); /* covers 0 and 1, not 2 */
    assert_int_equal(answers, 0);
    confirm(g, p, 3);
    assert_int_equal(answers, 1);
    assert_int_equal(g->cwait_cnt, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].status, KS_OK);
        assert_int_equal(res[i].commit, KS_COMMIT_COMMITTED);
        assert_int_equal(res[i].committed_offset, 3);
    }
    /* Acked again, and out of the window: refused as before, at once. */
    ack(g, 0, 1, NULL, true, 0);
    assert_int_equal(answers, 2);
    assert_int_equal(res[0].status, KS_E_STALE);
    assert_int_equal(res[0].commit, KS_COMMIT_NONE);
    teardown(g);
}

static void test_an_ack_above_the_commit_point_waits_and_times_out_accepted(void **state)
{
    (void)state;
    part_t *p;
    ks_group_t *g = setup(&p);
    ack(g, 0, 1, NULL, false, 0); /* 0 done; 1 left unacked */
    assert_int_equal(answers, 1);
    assert_int_equal(res[0].commit, KS_COMMIT_NONE); /* a plain ack: nothing said */
    ack(g, 2, 4, NULL, true, 50);
    /* A commit of 1 carries 2 and 3 in its metadata only: not claimed durable. */
    confirm(g, p, 1);
    assert_int_equal(answers, 1);
    assert_true(cwait_next_due(g) <= ks_now_ms() + 50);
    cwait_expire(g, ks_now_ms(), false); /* not due yet */
    assert_int_equal(answers, 1);
    cwait_expire(g, ks_now_ms() + 51, false);
    assert_int_equal(answers, 2);
    assert_int_equal(res[0].commit, KS_COMMIT_ACCEPTED);
    assert_int_equal(res[0].committed_offset, 1);
    assert_int_equal(res[1].commit, KS_COMMIT_ACCEPTED);
    assert_int_equal(cwait_next_due(g), INT64_MAX);
    teardown(g);
}

static void test_revoke_seek_and_failed_commit_are_told(void **state)
{
    (void)state;
    part_t *p;
    ks_group_t *g = setup(&p);
    ack(g, 0, 2, NULL, true, 0);
    ack(g, 5, 6, NULL, true, 0);
    /* The commit of 2 failed: the acks it was to cover are told, with the broker's error. */
    cwait_failed(g, p, 2, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS);
    assert_int_equal(answers, 1);
    assert_int_equal(res_n, 2);
    assert_int_equal(res[0].commit, KS_COMMIT_FAILED);
    assert_string_equal(res[0].reason, rd_kafka_err2str(RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS));
    /* 5 still waits; the partition is revoked before a commit covers it. */
    ks_owner_enter(&g->owner);
    part_remove(g, p);
    ks_owner_leave(&g->owner);
    assert_int_equal(answers, 2);
    assert_int_equal(res[0].commit, KS_COMMIT_LOST);
    assert_int_equal(res[0].committed_offset, 0);
    assert_string_equal(ks_commit_wait_name(res[0].commit), "LOST_TO_REBALANCE");
    teardown(g);

    g = setup(&p);
    ack(g, 0, 1, NULL, true, 0);
    ack(g, 1, 2, NULL, true, 0);
    confirm(g, p, 1); /* the first is committed before the seek */
    assert_int_equal(answers, 1);
    assert_int_equal(res[0].commit, KS_COMMIT_COMMITTED);
    cwait_part_gone(g, p, true);
    assert_int_equal(answers, 2);
    assert_int_equal(res[0].commit, KS_COMMIT_LOST);
    assert_non_null(strstr(res[0].reason, "seeked"));
    teardown(g);
}

static void test_refusals_answer_with_the_rest_and_the_bound_refuses_whole(void **state)
{
    (void)state;
    part_t *p;
    ks_group_t *g = setup(&p);
    /* Nothing accepted: answered at once, no waiter. */
    ack(g, 0, 0, "not-an-ack-id", true, 0);
    assert_int_equal(answers, 1);
    assert_int_equal(res[0].status, KS_E_INVALID);
    assert_int_equal(res[0].commit, KS_COMMIT_NONE);
    assert_int_equal(g->cwait_cnt, 0);
    /* A refusal among accepted acks: the refusal stands, the others wait. */
    ack(g, 0, 1, "not-an-ack-id", true, 0);
    assert_int_equal(answers, 1);
    confirm(g, p, 1);
    assert_int_equal(answers, 2);
    assert_int_equal(res[0].status, KS_E_INVALID);
    assert_int_equal(res[0].commit, KS_COMMIT_NONE);
    assert_int_equal(res[1].commit, KS_COMMIT_COMMITTED);
    /* At the bound: the whole settle is refused and nothing is acked. */
    g->cwait_cnt = KS_CMD_COMMIT_WAITERS_MAX;
    ack(g, 1, 2, NULL, true, 0);
    assert_int_equal(answers, 3);
    assert_int_equal(res[0].status, KS_E_EXHAUSTED);
    assert_int_equal(ks_ack_window_get(&p->win, 1)->state, KS_REC_LEASED);
    g->cwait_cnt = 0;
    teardown(g);
}

/* A stream's ack with wait_commit: answered at once and again through on_later. */
static void ack_twice(ks_group_t *g, int from, int to, const char *extra)
{
    ack_cb(g, from, to, extra, true, 0, on_later);
}

static void test_a_stream_wait_answers_now_and_once_committed(void **state)
{
    (void)state;
    part_t *p;
    ks_group_t *g = setup(&p);
    later_answers = 0;
    ack_twice(g, 0, 2, "nonsense");
    /* The first answer at once, as a plain ack's; the second waits for the commit. */
    assert_int_equal(answers, 1);
    assert_int_equal(res_n, 3);
    assert_int_equal(res[0].status, KS_E_INVALID);
    assert_int_equal(res[1].status, KS_OK);
    assert_int_equal(res[1].commit, KS_COMMIT_NONE);
    assert_int_equal(later_answers, 0);
    confirm(g, p, 2);
    assert_int_equal(later_answers, 1);
    assert_int_equal(later_n, 3);
    assert_int_equal(later[0].status, KS_E_INVALID);
    assert_int_equal(later[0].commit, KS_COMMIT_NONE);
    assert_int_equal(later[1].commit, KS_COMMIT_COMMITTED);
    assert_int_equal(later[2].committed_offset, 2);
    /* Nothing accepted: the second answer comes at once too. */
    ack_twice(g, 0, 1, NULL);
    assert_int_equal(answers, 2);
    assert_int_equal(later_answers, 2);
    assert_int_equal(later[0].status, KS_E_STALE);
    /* With every waiter's place taken the acks are still taken, and the second answer says
     * ACCEPTED at once instead of refusing them. */
    size_t had = g->cwait_cnt;
    g->cwait_cnt = KS_CMD_COMMIT_WAITERS_MAX;
    ack_twice(g, 2, 4, NULL);
    g->cwait_cnt = had;
    assert_int_equal(later_answers, 3);
    assert_int_equal(later[0].status, KS_OK);
    assert_int_equal(later[0].commit, KS_COMMIT_NONE);
    assert_int_equal(res[0].status, KS_OK); /* taken, not refused */
    free(later);
    later = NULL;
    teardown(g);
}

static void test_validate_bounds_the_wait(void **state)
{
    (void)state;
    ks_config_t cfg;
    ks_config_defaults(&cfg);
    const char *id = "x";
    char err[256];
    ks_cmd_req_t req = {
        .type = KS_CMD_SETTLE,
        .group = "g1",
        .u.settle = {.op = KS_SETTLE_ACK, .ack_ids = &id, .n = 1, .wait_commit = 1}};
    assert_int_equal(ks_cmd_validate(&cfg, &req, err, sizeof(err)), KS_OK);
    assert_int_equal(req.u.settle.commit_timeout_ms, KS_CMD_COMMIT_WAIT_DEFAULT_MS);
    req.u.settle.commit_timeout_ms = KS_CMD_COMMIT_WAIT_MAX_MS + 1;
    assert_int_equal(ks_cmd_validate(&cfg, &req, err, sizeof(err)), KS_E_INVALID);
    assert_non_null(strstr(err, "timeout_ms"));
    req.u.settle.commit_timeout_ms = 10;
    req.u.settle.op = KS_SETTLE_NACK;
    assert_int_equal(ks_cmd_validate(&cfg, &req, err, sizeof(err)), KS_E_INVALID);
    assert_non_null(strstr(err, "acks only"));
    ks_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answered_once_a_confirmed_commit_passes_the_acks),
        cmocka_unit_test(test_an_ack_above_the_commit_point_waits_and_times_out_accepted),
        cmocka_unit_test(test_revoke_seek_and_failed_commit_are_told),
        cmocka_unit_test(test_refusals_answer_with_the_rest_and_the_bound_refuses_whole),
        cmocka_unit_test(test_a_stream_wait_answers_now_and_once_committed),
        cmocka_unit_test(test_validate_bounds_the_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
