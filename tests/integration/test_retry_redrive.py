"""Terminal rejects, the retry policy and dead-letter redrive through the real binary against
the real broker: a nack with dead_letter dead-letters at once with its reason (HTTP, gRPC
Nack and the Subscribe stream), or is redelivered when the group has no dead-letter topic;
the delays between redeliveries follow group.retry.* (measured here, with generous upper
bounds), still after a kill -9 and restart."""
import signal
import time

from conftest import create_topic, fetch_all, produce, unique, wait_for
from grpc_support import ACCEPTED, SubscribeStream, consumer_pb2, open_msg, start_grpc

c = consumer_pb2


def headers(rec):
    return {x["key"]: x["value"] for x in rec["headers"]}


def read_dlt(sc, dlt, n):
    """The dead-letter topic's records, read by a group of its own, once n came."""
    got = fetch_all(sc, unique("gdlread"), dlt, n, timeout=60)
    assert len(got) == n, got
    return got


def with_dlt(bootstrap, prefix, n):
    """A topic of one partition holding n records, an empty dead-letter topic and a group
    name, all new."""
    topic, dlt, g = unique(f"t{prefix}"), unique(f"t{prefix}dl"), unique(f"g{prefix}")
    for t in (topic, dlt):
        create_topic(bootstrap, t, 1)
    produce(bootstrap, topic, n)
    return topic, dlt, g


def test_nack_with_dead_letter_dead_letters_at_once_with_its_reason(bootstrap, sidecars):
    topic, dlt, g = with_dlt(bootstrap, "rej", 4)
    sc = start_grpc(sidecars, [f"--group.dead_letter_topic={dlt}", "--group.max_attempts=5"])
    recs = sorted(fetch_all(sc, g, topic, 4), key=lambda r: r["offset"])
    assert [r["attempt"] for r in recs] == [1, 1, 1, 1]
    # HTTP: a bad type is refused naming the field, and nothing moves.
    st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [recs[0]["ack_id"]],
                                                  "dead_letter": "yes"})
    assert st == 400 and "dead_letter" in body["error"]["message"], body
    st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [recs[0]["ack_id"]],
                                                  "dead_letter": True, "reason": "poison: bad json"})
    assert st == 200 and body["results"][0]["message"] == "rejected: dead-lettered", body
    # gRPC Nack and the stream's nack take the same path.
    r = sc.consumer.Nack(c.NackRequest(group=g, ack_ids=[recs[1]["ack_id"]], dead_letter=True,
                                       reason="poison: grpc"), timeout=30)
    assert r.results[0].status == ACCEPTED and "dead-lettered" in r.results[0].message, r
    # A plain nack of the third is redelivered (attempt 2), not dead-lettered.
    st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [recs[2]["ack_id"]],
                                                  "dead_letter": False})
    assert body["results"][0]["message"] == "nacked; redelivery now", body
    again = sc.fetch(g, topic, wait_ms=5000)
    assert [(x["offset"], x["attempt"]) for x in again] == [(2, 2)], again
    assert sc.ack(g, [again[0]["ack_id"], recs[3]["ack_id"]])[1]["acked"] == 2
    dl = sorted(read_dlt(sc, dlt, 2), key=lambda x: int(headers(x)["ksidecar.original.offset"]))
    assert [headers(x)["ksidecar.last_error"] for x in dl] == ["poison: bad json", "poison: grpc"]
    assert [headers(x)["ksidecar.attempts"] for x in dl] == ["1", "1"]
    assert [x["value"] for x in dl] == [recs[0]["value"], recs[1]["value"]]
    assert all(headers(x)["ksidecar.original.topic"] == topic for x in dl)
    st, status = sc.get(f"/v1/groups/{g}")
    assert status["counters"]["dead_lettered"] == 2, status["counters"]
    assert sc.stop() == 0


def test_stream_nack_with_dead_letter(bootstrap, sidecars):
    topic, dlt, g = with_dlt(bootstrap, "rejs", 1)
    sc = start_grpc(sidecars, [f"--group.dead_letter_topic={dlt}"])
    st = SubscribeStream(sc.consumer, open_msg(g, topic, records=10), timeout=60)
    try:
        r = None
        for _ in range(30):  # the group joins first
            r = st.get(1)
            if r is not None and r.WhichOneof("kind") == "batch":
                break
        got = list(r.batch.records)
        assert len(got) == 1
        st.send(nack=c.NackIds(ack_ids=[got[0].ack_id], dead_letter=True, reason="stream poison"))
        dl = read_dlt(sc, dlt, 1)
        assert headers(dl[0])["ksidecar.last_error"] == "stream poison"
    finally:
        st.cancel()
    assert sc.stop() == 0


def test_dead_letter_without_a_dead_letter_topic_is_redelivered_and_logged(bootstrap, sidecars):
    topic, g = unique("trejn"), unique("grejn")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = sidecars()
    rec = fetch_all(sc, g, topic, 1)[0]
    st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [rec["ack_id"]], "dead_letter": True,
                                                  "reason": "poison"})
    assert st == 200 and "no dead-letter topic (group.dead_letter_topic)" in \
        body["results"][0]["message"], body
    again = sc.fetch(g, topic, wait_ms=5000)
    assert [(x["offset"], x["attempt"]) for x in again] == [(0, 2)], again
    wait_for(lambda: "poison record" in sc.logs(), 10, 0.2, "the poison warning")
    assert sc.stop() == 0


# 800 ms, then doubling up to 3.2 s: 800, 1600, 3200, 3200, ...
POLICY = ["--group.retry.initial_ms=800", "--group.retry.multiplier=2", "--group.retry.max_ms=3200"]
SLACK_MS = 2500  # upper bound's room for a loaded machine; the lower bounds are the policy's


def nack_and_time(sc, g, topic, rec, **body):
    """Nacks rec and fetches until it comes again. Returns (the new delivery, ms waited)."""
    st, res = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [rec["ack_id"]], **body})
    assert st == 200 and res["accepted"] == 1, res
    t0 = time.monotonic()
    again = []
    while not again and time.monotonic() - t0 < 30:
        again = sc.fetch(g, topic, wait_ms=1000)
    assert len(again) == 1, again
    return again[0], (time.monotonic() - t0) * 1000


def assert_waited(ms, policy_ms):
    assert policy_ms - 50 <= ms <= policy_ms + SLACK_MS, f"waited {ms:.0f} ms, policy {policy_ms}"


def test_backoff_follows_the_policy_and_survives_kill9(bootstrap, sidecars):
    topic, g = unique("tbo"), unique("gbo")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = sidecars(POLICY)
    rec = fetch_all(sc, g, topic, 1)[0]
    waits = []
    for attempt, policy_ms in ((1, 800), (2, 1600)):
        assert rec["attempt"] == attempt
        rec, ms = nack_and_time(sc, g, topic, rec, reason="downstream down")
        waits.append(ms)
        assert_waited(ms, policy_ms)
    # An explicit delay wins over the policy's.
    assert rec["attempt"] == 3
    rec, ms = nack_and_time(sc, g, topic, rec, delay_ms=300)
    assert 250 <= ms <= 300 + SLACK_MS, ms
    print(f"waits {[round(w) for w in waits]} ms, explicit 300 ms: {ms:.0f} ms")
    # kill -9 with attempt 4 out; the commit metadata keeps the count, so after the restart
    # the record comes as attempt 5 and its nack waits the capped 3.2 s, not 800 ms again.
    assert rec["attempt"] == 4
    time.sleep(1.5)  # a commit (every 200 ms) carries the attempt count
    sc.stop(sig=signal.SIGKILL)
    sc2 = sidecars(POLICY)
    rec = fetch_all(sc2, g, topic, 1, timeout=60)[0]
    assert rec["attempt"] >= 4, rec
    rec, ms = nack_and_time(sc2, g, topic, rec)
    assert_waited(ms, 3200)
    assert sc2.ack(g, [rec["ack_id"]])[1]["acked"] == 1
    assert sc2.stop() == 0


def test_expired_lease_waits_the_policy_delay(bootstrap, sidecars):
    topic, g = unique("tboexp"), unique("gboexp")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = sidecars(["--group.retry.backoff_ms=1500,4000"])
    recs = []
    deadline = time.monotonic() + 60
    while not recs and time.monotonic() < deadline:
        st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&wait_ms=1000&deadline_ms=500")
        recs = body["records"]
    t0 = time.monotonic()
    again = []
    while not again and time.monotonic() - t0 < 30:
        again = sc.fetch(g, topic, wait_ms=1000)
    ms = (time.monotonic() - t0) * 1000
    assert [x["attempt"] for x in again] == [2], again
    assert 500 + 1500 - 50 <= ms <= 2000 + SLACK_MS, f"redelivered after {ms:.0f} ms"
    assert sc.ack(g, [again[0]["ack_id"]])[1]["acked"] == 1
    assert sc.stop() == 0
