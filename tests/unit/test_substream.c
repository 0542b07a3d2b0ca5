/* test_substream.c: the subscriber-stream core (api/substream.c) through a fake transport that
 * records what it is asked to do, and a fake engine door that records the commands the core
 * submits and lets the test answer its fetches. No broker, no gRPC. The test includes the .c
 * so that the stall sweep can be run by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../api/substream.c"

/* ---- the fake engine door ---- */

typedef struct sent_cmd {
    ks_cmd_t type;
    char group[64];
    char sub[128];
    int max, wait_ms;
    int64_t credit_records, credit_bytes;
    int notify, confirm, hold_stalled;
    unsigned unset;
    ks_fetch_cb *cb;
    void *opaque;
    uint64_t token;
    bool taken;
} sent_cmd_t;

static sent_cmd_t cmds[64];
static size_t cmd_n;
static ks_status_t refuse; /* what the door answers (KS_OK: posted) */

ks_status_t ks_engine_submit(ks_engine_t *e, const ks_cmd_req_t *r, char *err, size_t errsize)
{
    (void)e;
    if (refuse) {
        snprintf(err, errsize, "refused by the test");
        return refuse;
    }
    assert_true(cmd_n < 64);
    sent_cmd_t *c = &cmds[cmd_n++];
    memset(c, 0, sizeof(*c));
    c->type = r->type;
    snprintf(c->group, sizeof(c->group), "%s", r->group ? r->group : "");
    if (r->type == KS_CMD_FETCH) {
        snprintf(c->sub, sizeof(c->sub), "%s", r->u.fetch.opts.subscriber);
        c->max = r->u.fetch.opts.max;
        c->wait_ms = r->u.fetch.opts.wait_ms;
        c->credit_records = r->u.fetch.opts.credit_records;
        c->credit_bytes = r->u.fetch.opts.credit_bytes;
        c->notify = r->u.fetch.opts.notify;
        c->confirm = r->u.fetch.opts.confirm;
        c->hold_stalled = r->u.fetch.opts.hold_stalled;
        c->unset = r->u.fetch.unset;
        c->cb = r->u.fetch.cb;
        c->opaque = r->u.fetch.opaque;
    } else if (r->type == KS_CMD_RELEASE || r->type == KS_CMD_RELEASE_UNREAD) {
        snprintf(c->sub, sizeof(c->sub), "%s", r->u.release.subscriber);
    } else if (r->type == KS_CMD_DELIVERED) {
        c->token = r->u.delivered.token;
        c->taken = r->u.delivered.taken;
    }
    return KS_OK;
}

static size_t count_type(ks_cmd_t t)
{
    size_t n = 0;
    for (size_t i = 0; i < cmd_n; i++)
        n += cmds[i].type == t;
    return n;
}

/* Whether the core reported batch token not taken (its records back, no attempt counted). */
static bool reported_not_taken(uint64_t token)
{
    for (size_t i = 0; i < cmd_n; i++)
        if (cmds[i].type == KS_CMD_DELIVERED && cmds[i].token == token && !cmds[i].taken)
            return true;
    return false;
}

/* The i-th fetch the core parked (0: the first). */
static sent_cmd_t *fetch_no(size_t i)
{
    for (size_t k = 0; k < cmd_n; k++)
        if (cmds[k].type == KS_CMD_FETCH && i-- == 0)
            return &cmds[k];
    fail_msg("no fetch number %zu", i);
    return NULL;
}

/* ---- the fake transport ---- */

typedef struct fake {
    int refs;
    int wakes;
    bool wake_ok;
    ks_batch_t *sent[16]; /* record batches it was given, in order */
    size_t sent_n;
    ks_tp_t rev[16], as[16];
    size_t nrev, nas, assign_calls;
    ks_status_t finished;
    char finish_msg[256];
    int cuts;
    char cut_msg[256];
    char events[64]; /* what reached the transport, in order: 'r' records, 'd' a deferred call */
    size_t ev_n;
    bool freed_in_drain; /* its last reference went while a drain was running */
} fake_t;

static ks_substream_t *draining; /* the stream whose drain_posted says a drain runs */

static void f_ref(void *t)
{
    ((fake_t *)t)->refs++;
}
static void f_unref(void *t)
{
    fake_t *f = t;
    assert_true(f->refs > 0);
    f->refs--;
    if (f->refs == 0 && draining && draining->drain_posted)
        f->freed_in_drain = true; /* a real transport's object would be gone under the drain */
}
static bool f_wake(void *t)
{
    fake_t *f = t;
    f->wakes++;
    return f->wake_ok;
}
static void f_send_records(void *t, ks_batch_t *b)
{
    fake_t *f = t;
    assert_true(f->sent_n < 16);
    f->sent[f->sent_n++] = b;
    f->events[f->ev_n++] = 'r';
}
static void f_send_assignment(void *t, const ks_tp_t *rev, size_t nrev, const ks_tp_t *as,
                              size_t nas)
{
    fake_t *f = t;
    memcpy(f->rev, rev, nrev * sizeof(*rev));
    memcpy(f->as, as, nas * sizeof(*as));
    f->nrev = nrev;
    f->nas = nas;
    f->assign_calls++;
}
static void f_finish(void *t, ks_status_t st, const char *msg)
{
    fake_t *f = t;
    f->finished = st;
    snprintf(f->finish_msg, sizeof(f->finish_msg), "%s", msg);
}
static void f_cut(void *t, const char *msg)
{
    fake_t *f = t;
    f->cuts++;
    snprintf(f->cut_msg, sizeof(f->cut_msg), "%s", msg);
}

static const ks_substream_ops_t fake_ops = {
    f_ref, f_unref, f_wake, f_send_records, f_send_assignment, f_finish, f_cut, "test"};

/* ---- fixture ---- */

static ks_config_t cfg;
static ks_subhub_t hub; /* no sweep thread: the test sweeps by hand */
static fake_t fk;
static ks_substream_t ss;

static const char *const topics[] = {"orders", "billing"};
static const ks_principal_t *open_who; /* the caller setup_stream opens as */

/* A fresh door, transport and hub (numbering subscribers from first_id). */
static void setup_hub(unsigned first_id)
{
    cmd_n = 0;
    refuse = KS_OK;
    memset(&fk, 0, sizeof(fk));
    fk.wake_ok = true;
    ks_config_defaults(&cfg);
    memset(&hub, 0, sizeof(hub));
    hub.cfg = &cfg;
    pthread_mutex_init(&hub.lock, NULL);
    atomic_init(&hub.next_id, first_id);
}

static void setup_stream(int queue_messages, int64_t credits)
{
    setup_hub(7);
    ks_substream_limits_t lim = {.queue_messages = queue_messages,
                                 .queue_bytes = 1 << 20,
                                 .stall_ms = 1000,
                                 .stall_key = "test.stall_ms"};
    ks_substream_init(&ss, &hub, &fake_ops, &fk, KS_CMD_FETCH, &lim);
    ks_substream_open_t o = {.group = "g1",
                             .topics = topics,
                             .topic_cnt = 2,
                             .subscriber = "worker",
                             .credit_records = credits,
                             .credit_bytes = 0,
                             .deadline_ms = 0,
                             .unset = KS_FETCH_UNSET_MAX | KS_FETCH_UNSET_DEADLINE,
                             .max_batch = 50,
                             .max_bytes = 4096,
                             .who = open_who};
    char err[256];
    assert_int_equal(ks_substream_check(&ss, &o, err, sizeof(err)), KS_OK);
    ks_substream_start(&ss, &o, "stream");
}

static void teardown_stream(void)
{
    ks_substream_close(&ss);
    ks_substream_destroy(&ss);
    for (size_t i = 0; i < fk.sent_n; i++)
        ks_batch_free(fk.sent[i]);
    pthread_mutex_destroy(&hub.lock);
    ks_config_free(&cfg);
}

/* A batch of n records (token tok, bytes each), with an assignment when as_n > 0. */
static ks_batch_t *mk_batch(size_t n, uint64_t tok, int64_t bytes, const ks_tp_t *as, size_t as_n)
{
    ks_batch_t *b = calloc(1, sizeof(*b));
    assert_non_null(b);
    b->cnt = n;
    b->recs = n ? calloc(n, sizeof(ks_record_t)) : NULL;
    b->arena = b->recs; /* ks_batch_free frees the records with the arena */
    b->deliver_token = tok;
    b->bytes = bytes;
    if (as_n) {
        b->has_assignment = 1;
        b->assign_cnt = as_n;
        b->assigned = calloc(as_n, sizeof(ks_tp_t));
        memcpy(b->assigned, as, as_n * sizeof(ks_tp_t));
    }
    return b;
}

/* The engine answers fetch f with b, from "the group loop"; the transport then drains. */
static void answer(sent_cmd_t *f, ks_batch_t *b)
{
    f->cb(b, f->opaque);
    if (fk.wake_ok)
        ks_substream_drain(&ss);
}

/* ---- tests ---- */

static void test_open_parks_the_pipeline(void **state)
{
    (void)state;
    setup_stream(4, 30);
    assert_int_equal(count_type(KS_CMD_FETCH), KS_SUBSTREAM_PIPELINE);
    sent_cmd_t *f = fetch_no(0);
    assert_string_equal(f->group, "g1");
    assert_string_equal(f->sub, "worker#7"); /* the client's name, numbered by the hub */
    assert_int_equal(f->max, 30);            /* min(credits, max_batch) */
    assert_int_equal(f->wait_ms, KS_SUBSTREAM_WAIT_MS);
    assert_int_equal(f->credit_records, 30);
    assert_true(f->notify && f->confirm && f->hold_stalled);
    assert_int_equal(f->unset, KS_FETCH_UNSET_DEADLINE); /* max is the stream's own */
    assert_int_equal(fk.refs, KS_SUBSTREAM_PIPELINE);    /* one per fetch out */
    assert_int_equal(ks_subhub_count(&hub), 1);
    ks_substream_close(&ss);
    assert_int_equal(ks_subhub_count(&hub), 0);
    teardown_stream();
}

static void test_records_assignment_and_refill(void **state)
{
    (void)state;
    setup_stream(4, 0);
    ks_tp_t as1[] = {{"orders", 0}, {"orders", 1}};
    answer(fetch_no(0), mk_batch(3, 11, 300, as1, 2));
    /* Assignment news first, then the records; the answered fetch is parked again. */
    assert_int_equal(fk.assign_calls, 1);
    assert_int_equal(fk.nrev, 0);
    assert_int_equal(fk.nas, 2);
    assert_string_equal(fk.as[1].topic, "orders");
    assert_int_equal(fk.as[1].partition, 1);
    assert_int_equal(fk.sent_n, 1);
    assert_int_equal(fk.sent[0]->deliver_token, 11);
    assert_int_equal(count_type(KS_CMD_FETCH), 3);
    assert_int_equal(fk.wakes, 1);
    /* A rebalance: partition 0 goes, 2 comes; revocations are told with the new ones. */
    ks_tp_t as2[] = {{"orders", 1}, {"orders", 2}};
    answer(fetch_no(1), mk_batch(0, 0, 0, as2, 2));
    assert_int_equal(fk.assign_calls, 2);
    assert_int_equal(fk.nrev, 1);
    assert_int_equal(fk.rev[0].partition, 0);
    assert_int_equal(fk.nas, 1);
    assert_int_equal(fk.as[0].partition, 2);
    /* The same assignment again tells nothing. */
    answer(fetch_no(2), mk_batch(0, 0, 0, as2, 2));
    assert_int_equal(fk.assign_calls, 2);
    /* The transport sent the records: the engine hears it with the batch's token. */
    assert_false(ks_substream_msg_done(&ss, 11, 300, true));
    assert_int_equal(count_type(KS_CMD_DELIVERED), 1);
    assert_int_equal(cmds[cmd_n - 1].token, 11);
    assert_true(cmds[cmd_n - 1].taken);
    assert_int_equal(fk.refs, KS_SUBSTREAM_PIPELINE);
    teardown_stream();
}

static void test_queue_bound_holds_fetches(void **state)
{
    (void)state;
    setup_stream(1, 0); /* one record message queued at most */
    answer(fetch_no(0), mk_batch(2, 21, 200, NULL, 0));
    /* At the bound: the answered fetch is not parked again. */
    assert_int_equal(count_type(KS_CMD_FETCH), 2);
    assert_false(ks_substream_has_room(&ss));
    /* New credits at the bound are taken but wait for the next parked fetch. */
    char err[256];
    assert_int_equal(ks_substream_credits(&ss, 40, 0, err, sizeof(err)), KS_OK);
    assert_int_equal(count_type(KS_CMD_FETCH), 2);
    /* Dropped, not taken: the engine hears it, and nothing is re-armed. */
    size_t before = cmd_n;
    bool again = ks_substream_msg_done(&ss, 21, 200, false);
    assert_false(again);
    assert_int_equal(cmd_n, before + 1);
    assert_false(cmds[before].taken);
    /* The next record message is taken by the client: the held fetch goes, with the credits. */
    answer(fetch_no(1), mk_batch(1, 22, 100, NULL, 0));
    assert_int_equal(count_type(KS_CMD_FETCH), 2);
    assert_true(ks_substream_msg_done(&ss, 22, 100, true));
    ks_substream_refill(&ss);
    assert_int_equal(count_type(KS_CMD_FETCH), 4); /* both pipeline slots */
    assert_int_equal(fetch_no(3)->credit_records, 40);
    assert_int_equal(fk.refs, KS_SUBSTREAM_PIPELINE);
    teardown_stream();
}

static void test_credits_checked_and_carried(void **state)
{
    (void)state;
    setup_stream(4, 0);
    char err[256] = "";
    /* Above subscriber.max_credit_records: refused with the validator's message. */
    assert_int_not_equal(
        ks_substream_credits(&ss, cfg.sub_max_credit_records + 1, 0, err, sizeof(err)), KS_OK);
    assert_non_null(strstr(err, "subscriber.max_credit_records"));
    assert_int_equal(count_type(KS_CMD_FETCH), 2);
    /* Valid: a quick fetch (wait 0) carries them at once. */
    assert_int_equal(ks_substream_credits(&ss, 5, 1000, err, sizeof(err)), KS_OK);
    assert_int_equal(count_type(KS_CMD_FETCH), 3);
    assert_int_equal(fetch_no(2)->wait_ms, 0);
    assert_int_equal(fetch_no(2)->credit_records, 5);
    assert_int_equal(fetch_no(2)->max, 5);
    teardown_stream();
}

static void test_stall_cuts_and_releases_unread(void **state)
{
    (void)state;
    setup_stream(4, 0);
    answer(fetch_no(0), mk_batch(2, 31, 200, NULL, 0));
    ks_substream_send_begin(&ss, 5000);
    sweep(&hub, 5999); /* not yet */
    assert_int_equal(fk.cuts, 0);
    sweep(&hub, 6000);
    assert_int_equal(fk.cuts, 1);
    assert_non_null(strstr(fk.cut_msg, "test.stall_ms"));
    assert_int_equal(count_type(KS_CMD_RELEASE_UNREAD), 1);
    assert_int_equal(count_type(KS_CMD_RELEASE), 0);
    sweep(&hub, 9000); /* once */
    assert_int_equal(fk.cuts, 1);
    /* A batch that still arrives is given back, not taken, not sent: that batch alone. */
    size_t sent = fk.sent_n;
    answer(fetch_no(1), mk_batch(1, 32, 100, NULL, 0));
    assert_int_equal(fk.sent_n, sent);
    assert_true(reported_not_taken(32));
    assert_int_equal(count_type(KS_CMD_RELEASE_UNREAD), 1);
    assert_int_equal(count_type(KS_CMD_FETCH), 3); /* nothing parked after the cut */
    /* The connection ends: released once more, unread, and out of the hub. */
    ks_substream_close(&ss);
    assert_int_equal(count_type(KS_CMD_RELEASE_UNREAD), 2);
    assert_int_equal(ks_subhub_count(&hub), 0);
    teardown_stream();
}

static void test_send_end_stops_the_clock(void **state)
{
    (void)state;
    setup_stream(4, 0);
    ks_substream_send_begin(&ss, 5000);
    ks_substream_send_end(&ss);
    sweep(&hub, 100000);
    assert_int_equal(fk.cuts, 0);
    teardown_stream();
}

static void test_release_unread_counts_no_attempt(void **state)
{
    (void)state;
    setup_stream(4, 0);
    answer(fetch_no(0), mk_batch(2, 51, 200, NULL, 0));
    assert_int_equal(fk.sent_n, 1);
    /* The client went: its leases go back uncounted, and the stream takes no more. */
    ks_substream_release_unread(&ss);
    assert_false(ks_substream_live(&ss));
    assert_int_equal(count_type(KS_CMD_RELEASE_UNREAD), 1);
    assert_int_equal(count_type(KS_CMD_RELEASE), 0);
    /* A batch that still arrives goes back uncounted too (not taken), and nothing is parked. */
    answer(fetch_no(1), mk_batch(1, 52, 100, NULL, 0));
    assert_int_equal(fk.sent_n, 1);
    assert_true(reported_not_taken(52));
    assert_int_equal(count_type(KS_CMD_RELEASE_UNREAD), 1);
    assert_int_equal(count_type(KS_CMD_FETCH), 3); /* the two first, one refill; none after */
    /* So does the release of the close that follows. */
    ks_substream_close(&ss);
    assert_int_equal(count_type(KS_CMD_RELEASE_UNREAD), 2);
    assert_int_equal(count_type(KS_CMD_RELEASE), 0);
    assert_true(ks_substream_msg_done(&ss, 51, 200, false) == false);
    teardown_stream();
}

static void test_stop_gives_arrivals_back(void **state)
{
    (void)state;
    setup_stream(4, 0);
    ks_substream_stop(&ss);
    assert_false(ks_substream_live(&ss));
    answer(fetch_no(0), mk_batch(3, 41, 300, NULL, 0));
    assert_int_equal(fk.sent_n, 0);
    /* That batch alone goes back, never handed to the client: no attempt counted, and no
     * release of what the stream took before (a stopped push still has requests out). */
    assert_true(reported_not_taken(41));
    assert_int_equal(count_type(KS_CMD_RELEASE), 0);
    assert_int_equal(count_type(KS_CMD_FETCH), 2);
    /* An empty batch on a stopped stream gives nothing back. */
    answer(fetch_no(1), mk_batch(0, 0, 0, NULL, 0));
    assert_int_equal(count_type(KS_CMD_DELIVERED), 1);
    assert_int_equal(count_type(KS_CMD_RELEASE), 0);
    assert_int_equal(fk.refs, 0); /* every fetch's reference dropped */
    teardown_stream();
}

static void test_engine_errors_finish(void **state)
{
    (void)state;
    setup_stream(4, 0);
    ks_batch_t *b = mk_batch(0, 0, 0, NULL, 0);
    b->status = KS_E_UNAVAILABLE;
    snprintf(b->message, sizeof(b->message), "shutting down");
    answer(fetch_no(0), b);
    assert_int_equal(fk.finished, KS_E_UNAVAILABLE);
    assert_string_equal(fk.finish_msg, "shutting down");
    assert_int_equal(count_type(KS_CMD_FETCH), 2);
    /* A fetch the door refuses: the stream ends with the door's message, no reference kept. */
    refuse = KS_E_NOT_FOUND;
    char err[256];
    assert_int_equal(ks_substream_credits(&ss, 9, 0, err, sizeof(err)), KS_OK);
    assert_int_equal(fk.finished, KS_E_NOT_FOUND);
    assert_string_equal(fk.finish_msg, "refused by the test");
    assert_int_equal(fk.refs, 1); /* the one fetch still out */
    refuse = KS_OK;
    teardown_stream();
}

static void test_no_wake_drains_inline(void **state)
{
    (void)state;
    setup_stream(4, 0);
    fk.wake_ok = false; /* the transport cannot be woken: the core serves on the caller */
    answer(fetch_no(0), mk_batch(1, 51, 10, NULL, 0));
    assert_int_equal(fk.sent_n, 1);
    assert_int_equal(count_type(KS_CMD_FETCH), 3);
    teardown_stream();
}

/* A deferred call (a stream's ack results) is the transport's in its turn: after the batches
 * that arrived before it, before those after it. */
static void deferred(void *t, void *arg)
{
    fake_t *f = t;
    assert_ptr_equal(arg, &fk);
    f->events[f->ev_n++] = 'd';
}

/* A stream whose transport cannot be woken any more (its connection ended) while fetches are
 * out: the inline drain runs the batches, each dropping its fetch's reference, and the
 * transport's object must outlive the drain. */
static void test_inline_drain_holds_the_transport(void **state)
{
    (void)state;
    setup_stream(4, 0);
    draining = &ss;
    ks_substream_release_unread(&ss);
    fk.wake_ok = false;
    answer(fetch_no(0), mk_batch(1, 61, 10, NULL, 0));
    answer(fetch_no(1), mk_batch(0, 0, 0, NULL, 0));
    assert_int_equal(fk.refs, 0); /* every fetch's reference dropped */
    assert_false(fk.freed_in_drain);
    draining = NULL;
    teardown_stream();
}

static void test_defer_keeps_arrival_order(void **state)
{
    (void)state;
    setup_stream(4, 0);
    fetch_no(0)->cb(mk_batch(1, 61, 10, NULL, 0), fetch_no(0)->opaque); /* woken, not drained */
    ks_substream_defer(&ss, deferred, &fk);
    fetch_no(1)->cb(mk_batch(1, 62, 10, NULL, 0), fetch_no(1)->opaque);
    assert_int_equal(fk.wakes, 1); /* one wake for all three */
    assert_int_equal(fk.ev_n, 0);
    ks_substream_drain(&ss);
    assert_int_equal(fk.ev_n, 3);
    assert_memory_equal(fk.events, "rdr", 3);
    teardown_stream();
}

static void test_default_name(void **state)
{
    (void)state;
    setup_hub(3);
    ks_substream_limits_t lim = {4, 1 << 20, 1000, "k"};
    ks_substream_init(&ss, &hub, &fake_ops, &fk, KS_CMD_FETCH, &lim);
    ks_substream_open_t o = {.group = "g1", .topics = topics, .topic_cnt = 1, .max_batch = 10};
    ks_substream_start(&ss, &o, "push");
    assert_string_equal(fetch_no(0)->sub, "push#3");
    teardown_stream();
}

/* sha256("s3cret") and sha256("other") */
#define H_S3CRET          "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0"
#define H_OTHER           "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa"
#define ENTRY(h, consume) "{\"sha256\":\"" h "\",\"groups\":[\"g*\"],\"consume\":[" consume "]}"

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A reload of the tokens file: the stream of a token it keeps carries on; of one whose
 * scopes no longer cover its topics ends PERMISSION_DENIED; of one it removed ends
 * UNAUTHENTICATED, its leases back uncounted; a bad file changes nothing. */
static void test_reload_revokes_removed_tokens(void **state)
{
    (void)state;
    char path[64], err[512];
    snprintf(path, sizeof(path), "/tmp/ks_test_substream_%d.json", (int)getpid());
    write_text(path, "{\"tokens\":[" ENTRY(H_S3CRET, "\"*\"") "," ENTRY(H_OTHER, "\"*\"") "]}");
    ks_auth_t *auth = ks_auth_load(path, err, sizeof(err));
    assert_non_null(auth);
    assert_int_equal(ks_auth_identify(auth, "Bearer s3cret", NULL, &open_who, err, sizeof(err)),
                     KS_OK);
    setup_stream(4, 0);
    open_who = NULL;
    ks_subhub_watch_auth(&hub, auth);
    sweep(&hub, 1000);
    assert_int_equal(fk.finished, KS_OK);

    /* Kept, with the same scopes: carries on, now known by its new entry. */
    write_text(path, "{\"tokens\":[" ENTRY(H_OTHER, "\"*\"") "," ENTRY(H_S3CRET, "\"*\"") "]}");
    assert_int_equal(ks_auth_reload(auth, path, err, sizeof(err)), 0);
    sweep(&hub, 1000);
    assert_int_equal(fk.finished, KS_OK);
    assert_string_equal(ks_auth_principal_id(ss.who), "token#2");

    /* A broken file is refused; the one in force stays. */
    write_text(path, "{\"tokens\":[{\"sha256\":\"zz\"}]}");
    assert_int_equal(ks_auth_reload(auth, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "tokens[0].sha256"));
    sweep(&hub, 1000);
    assert_int_equal(fk.finished, KS_OK);

    /* Removed: the stream ends UNAUTHENTICATED naming it, its leases back uncounted. */
    write_text(path, "{\"tokens\":[" ENTRY(H_OTHER, "\"*\"") "]}");
    assert_int_equal(ks_auth_reload(auth, path, err, sizeof(err)), 0);
    sweep(&hub, 1000);
    assert_int_equal(fk.finished, KS_E_UNAUTH);
    assert_non_null(strstr(fk.finish_msg, "token#2 was removed from the tokens file"));
    assert_int_equal(count_type(KS_CMD_RELEASE_UNREAD), 1);
    fk.finished = KS_OK;
    sweep(&hub, 1000); /* once */
    assert_int_equal(fk.finished, KS_OK);
    teardown_stream();

    /* Kept with a consume scope that no longer covers the stream's topics. */
    assert_int_equal(ks_auth_identify(auth, "Bearer other", NULL, &open_who, err, sizeof(err)),
                     KS_OK);
    setup_stream(4, 0);
    open_who = NULL;
    ks_subhub_watch_auth(&hub, auth);
    write_text(path, "{\"tokens\":[" ENTRY(H_OTHER, "\"orders\"") "]}");
    assert_int_equal(ks_auth_reload(auth, path, err, sizeof(err)), 0);
    sweep(&hub, 1000);
    assert_int_equal(fk.finished, KS_E_PERMISSION);
    assert_non_null(strstr(fk.finish_msg, "\"billing\" (consume scope)"));
    teardown_stream();
    ks_auth_free(auth);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_parks_the_pipeline),
        cmocka_unit_test(test_records_assignment_and_refill),
        cmocka_unit_test(test_queue_bound_holds_fetches),
        cmocka_unit_test(test_credits_checked_and_carried),
        cmocka_unit_test(test_stall_cuts_and_releases_unread),
        cmocka_unit_test(test_send_end_stops_the_clock),
        cmocka_unit_test(test_release_unread_counts_no_attempt),
        cmocka_unit_test(test_stop_gives_arrivals_back),
        cmocka_unit_test(test_engine_errors_finish),
        cmocka_unit_test(test_no_wake_drains_inline),
        cmocka_unit_test(test_inline_drain_holds_the_transport),
        cmocka_unit_test(test_defer_keeps_arrival_order),
        cmocka_unit_test(test_default_name),
        cmocka_unit_test(test_reload_revokes_removed_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
