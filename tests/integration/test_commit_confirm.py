"""Commit confirmations against a real broker: acks that wait for the commit covering them
(HTTP ?wait=commit, gRPC wait_commit), checked with Kafka's own ConsumerGroupCommand."""
import threading
import time

from conftest import create_topic, describe_group, fetch_all, produce, unique, wait_for


def acks_path(group, query):
    return f"/v1/groups/{group}/acks?{query}"


def ack_wait(sc, group, ids, query="wait=commit"):
    return sc.post(acks_path(group, query), {"ack_ids": list(ids)})


def test_wait_commit_answers_committed_and_kafka_has_the_offset(bootstrap, sidecars):
    topic, group = unique("tcc"), unique("gcc")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 20)
    sc = sidecars()
    recs = fetch_all(sc, group, topic, 20)
    st, body = ack_wait(sc, group, [r["ack_id"] for r in recs])
    assert st == 200, body
    assert body["accepted"] == 20 and body["rejected"] == 0, body
    for res in body["results"]:
        assert res["status"] == "COMMITTED", res
        assert res["committed_offset"] == 20, res
    # Confirmed by the broker before the answer: Kafka's own tool shows it at once.
    assert describe_group(bootstrap, group, topic)[0][0] == 20
    # A plain ack still answers OK, without a commit point.
    produce(bootstrap, topic, 1)
    more = fetch_all(sc, group, topic, 1)
    st, body = sc.ack(group, [more[0]["ack_id"]])
    assert st == 200 and body["results"][0]["status"] == "OK", body
    assert "committed_offset" not in body["results"][0]
    assert sc.stop() == 0


def test_timeout_answers_accepted_with_the_commit_point(bootstrap, sidecars):
    topic, group = unique("tct"), unique("gct")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5)
    sc = sidecars(["--commit.interval_ms=600000"])  # no interval commit during the test
    recs = fetch_all(sc, group, topic, 5)
    t0 = time.monotonic()
    st, body = ack_wait(sc, group, [r["ack_id"] for r in recs], "wait=commit&timeout_ms=1500")
    took = time.monotonic() - t0
    assert st == 200, body
    assert took >= 1.4 and took < 30, took
    for res in body["results"]:
        assert res["status"] == "ACCEPTED", res
        assert res["committed_offset"] == -1, res  # nothing committed on the partition yet
    assert body["accepted"] == 5
    assert sc.stop() == 0  # the shutdown's final commit covers them
    assert describe_group(bootstrap, group, topic)[0][0] == 5


def test_an_ack_above_an_unacked_record_is_not_claimed_committed(bootstrap, sidecars):
    topic, group = unique("tco"), unique("gco")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 10)
    sc = sidecars()
    recs = sorted(fetch_all(sc, group, topic, 10), key=lambda r: r["offset"])
    # 0 stays unacked: the commits stop at 0 and carry 1..9 in their metadata only.
    st, body = ack_wait(sc, group, [r["ack_id"] for r in recs[1:]], "wait=commit&timeout_ms=2000")
    assert st == 200, body
    for res in body["results"]:
        assert res["status"] == "ACCEPTED", res
        assert res["committed_offset"] == 0, res
    # Once 0 is acked the next commit passes all of them.
    st, body = ack_wait(sc, group, [recs[0]["ack_id"]])
    assert st == 200, body
    assert body["results"][0]["status"] == "COMMITTED", body
    assert body["results"][0]["committed_offset"] == 10, body
    assert describe_group(bootstrap, group, topic)[0][0] == 10
    assert sc.stop() == 0


def test_a_revoke_before_the_commit_is_reported_lost(bootstrap, sidecars):
    topic, group = unique("tcr"), unique("gcr")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 20, partitions=2)
    a = sidecars(["--group.revoke_grace_ms=1000"])
    recs = fetch_all(a, group, topic, 20)
    by_part = {p: sorted((r for r in recs if r["partition"] == p), key=lambda r: r["offset"])
               for p in (0, 1)}
    # Each partition's first record stays unacked, so no commit covers the rest; each
    # partition's acks wait in a request of their own.
    answers = {}

    def wait_acks(p):
        answers[p] = ack_wait(a, group, [r["ack_id"] for r in by_part[p][1:]],
                              "wait=commit&timeout_ms=60000")

    threads = [threading.Thread(target=wait_acks, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    time.sleep(1)
    assert not answers, answers  # both still waiting
    # A second member joins: one partition moves to it.
    b = sidecars()
    b.fetch(group, topic, max=1, wait_ms=0)
    moved = wait_for(lambda: list(answers), 60, 0.2, "a partition revoked from a")[0]
    kept = 1 - moved
    st, body = answers[moved]
    assert st == 200, body
    for res in body["results"]:
        assert res["status"] == "LOST_TO_REBALANCE", res
        assert res["committed_offset"] == by_part[moved][0]["offset"], res
        assert "revoked" in res["message"], res
    # The kept partition's acks are committed once its first record is acked too.
    st, body = a.ack(group, [by_part[kept][0]["ack_id"]])
    assert st == 200 and body["acked"] == 1, body
    threads[kept].join(60)
    st, body = answers[kept]
    assert st == 200, body
    assert all(res["status"] == "COMMITTED" for res in body["results"]), body
    # Kafka shows the moved partition committed only up to its unacked first record.
    d = describe_group(bootstrap, group, topic)
    assert d[moved][0] == by_part[moved][0]["offset"], d
    threads[moved].join(5)


def test_bad_wait_parameters_are_refused_by_name(bootstrap, sidecars):
    topic, group = unique("tcb"), unique("gcb")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = sidecars()
    rec = fetch_all(sc, group, topic, 1)[0]
    for query, word in [("wait=soon", "wait must be commit"),
                        ("wait=commit&timeout_ms=abc", "timeout_ms"),
                        ("wait=commit&timeout_ms=0", "timeout_ms"),
                        ("wait=commit&timeout_ms=60001", "timeout_ms"),
                        ("timeout_ms=100", "only with wait=commit"),
                        ("wait=commit&tmeout_ms=5", "tmeout_ms")]:
        st, body = ack_wait(sc, group, [rec["ack_id"]], query)
        assert st == 400, (query, body)
        assert body["error"]["code"] == "INVALID_ARGUMENT", (query, body)
        assert word in body["error"]["message"], (query, body)
    # Nothing was acked by those: the record is still out, and acks now.
    st, body = ack_wait(sc, group, [rec["ack_id"]], "wait=commit&timeout_ms=60000")
    assert st == 200 and body["results"][0]["status"] == "COMMITTED", body
    assert sc.stop() == 0


def test_grpc_unary_ack_with_wait_commit(bootstrap, sidecars):
    from grpc_support import consumer_pb2 as c, start_grpc
    topic, group = unique("tcg"), unique("gcg")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 6)
    sc = start_grpc(sidecars)
    recs = sorted(fetch_all(sc, group, topic, 6), key=lambda r: r["offset"])
    # 0 unacked: the others wait, then time out ACCEPTED at commit point 0.
    resp = sc.consumer.Ack(c.AckRequest(group=group, ack_ids=[r["ack_id"] for r in recs[1:]],
                                        wait_commit=True, commit_timeout_ms=1500), timeout=30)
    assert resp.accepted == 5, resp
    for res in resp.results:
        assert res.status == c.ACCEPTED and res.committed_offset == 0, res
    resp = sc.consumer.Ack(c.AckRequest(group=group, ack_ids=[recs[0]["ack_id"]],
                                        wait_commit=True), timeout=30)
    assert resp.results[0].status == c.COMMITTED, resp
    assert resp.results[0].committed_offset == 6, resp
    assert describe_group(bootstrap, group, topic)[0][0] == 6
    assert sc.stop() == 0


def stream_results(st, want, timeout=30):
    """The next `want` ack results read from a Subscribe stream, each AckResults a list."""
    got, end = [], time.time() + timeout
    while len(got) < want and time.time() < end:
        r = st.get(min(1, max(end - time.time(), 0)))
        if r is not None and r.WhichOneof("kind") == "ack_results":
            got.append(list(r.ack_results.results))
    return got


def test_grpc_stream_ack_answers_twice_with_wait_commit(bootstrap, sidecars):
    from grpc_support import SubscribeStream, consumer_pb2 as c, start_grpc
    topic, group = unique("tcs"), unique("gcs")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 6)
    sc = start_grpc(sidecars)
    st = SubscribeStream(sc.consumer, c.Open(group=group, topics=[topic],
                                             credits=c.Credits(records=100)), timeout=120)
    try:
        recs, end = [], time.time() + 60
        while len(recs) < 6 and time.time() < end:
            r = st.get(1)
            if r is not None and r.WhichOneof("kind") == "batch":
                recs += list(r.batch.records)
        assert len(recs) == 6, recs
        recs.sort(key=lambda r: r.offset)
        # Offsets 1..5 wait behind the unacked 0: accepted now, ACCEPTED again at the timeout
        # with the commit point still 0.
        ids = [r.ack_id for r in recs[1:]]
        st.send(ack=c.AckIds(ack_ids=ids, wait_commit=True, commit_timeout_ms=1500))
        first, second = stream_results(st, 2)
        assert [x.ack_id for x in first] == ids and all(x.status == c.ACCEPTED for x in first)
        assert [x.ack_id for x in second] == ids, second
        assert all(x.status == c.ACCEPTED and x.committed_offset == 0 for x in second), second
        # Acking 0 lets a commit cover all six; the second answer says COMMITTED, 6.
        st.send(ack=c.AckIds(ack_ids=[recs[0].ack_id], wait_commit=True))
        first, second = stream_results(st, 2)
        assert first[0].status == c.ACCEPTED and first[0].committed_offset == 0, first
        assert second[0].ack_id == recs[0].ack_id, second
        assert second[0].status == c.COMMITTED and second[0].committed_offset == 6, second
        assert describe_group(bootstrap, group, topic)[0][0] == 6
        # A plain ack on the same stream is answered once, as before.
        produce(bootstrap, topic, 1)
        more = []
        while not more and time.time() < end + 30:
            r = st.get(1)
            if r is not None and r.WhichOneof("kind") == "batch":
                more = list(r.batch.records)
        st.ack([more[0].ack_id])
        assert len(stream_results(st, 1)) == 1
        assert stream_results(st, 1, timeout=3) == [], "a plain ack got a second result"
        # A stale id waiting: refused in the first answer, the same status in the second.
        st.send(ack=c.AckIds(ack_ids=[recs[0].ack_id], wait_commit=True))
        first, second = stream_results(st, 2)
        assert first[0].status != c.ACCEPTED and second[0].status == first[0].status, second
    finally:
        st.cancel()
    assert sc.stop() == 0


def test_results_errors_lists_only_the_refused_with_their_index(bootstrap, sidecars):
    topic, group = unique("tre"), unique("gre")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5)
    sc = sidecars()
    recs = sorted(fetch_all(sc, group, topic, 5), key=lambda r: r["offset"])
    ids = [r["ack_id"] for r in recs]
    st, body = sc.post(acks_path(group, "results=errors"), {"ack_ids": [ids[0], "junk", ids[1]]})
    assert st == 200, body
    assert body["accepted"] == 2 and body["rejected"] == 1, body
    assert [(x["index"], x["ack_id"]) for x in body["results"]] == [(1, "junk")], body
    assert body["results"][0]["status"] == "INVALID_ARGUMENT", body
    # Every one refused: the request failed, and each is listed.
    st, body = sc.post(acks_path(group, "results=errors"), {"ack_ids": [ids[0], ids[1]]})
    assert st != 200 and [x["index"] for x in body["results"]] == [0, 1], body
    # With wait=commit an ack not known committed is listed; a committed one is not.
    st, body = sc.post(acks_path(group, "results=errors&wait=commit&timeout_ms=1000"),
                       {"ack_ids": [ids[3]]})
    assert st == 200 and body["results"][0]["status"] == "ACCEPTED", body
    st, body = sc.post(acks_path(group, "results=errors&wait=commit"), {"ack_ids": [ids[2], ids[4]]})
    assert st == 200 and body["results"] == [] and body["accepted"] == 2, body
    # The default, and results=all, list every one without an index.
    produce(bootstrap, topic, 1)
    more = fetch_all(sc, group, topic, 1)
    st, body = sc.post(acks_path(group, "results=all"), {"ack_ids": [more[0]["ack_id"]]})
    assert st == 200 and len(body["results"]) == 1 and "index" not in body["results"][0], body
    st, body = sc.post(acks_path(group, "results=some"), {"ack_ids": ["x"]})
    assert st == 400 and "results must be all" in body["error"]["message"], body
    assert sc.stop() == 0
