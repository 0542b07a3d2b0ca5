"""Terminal rejects, the retry policy and dead-letter redrive through the real binary against
the real broker: a nack with dead_letter dead-letters at once with its reason (HTTP, gRPC
Nack and the Subscribe stream), or is redelivered when the group has no dead-letter topic."""
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
