"""Dead-letter redrive through the real binary against the real broker: POST
/v1/groups/{group}/redrive and gRPC Consumer/Redrive move dead letters back to the topic (and
partition) they came from with their key, value and headers and a ksidecar.redriven count; a
dry run moves and commits nothing; max limits a call and the next continues where it stopped
(the place is the committed offsets of group "<group>.redrive"); the loop guard
(group.redrive.max) holds a record that failed again; a token without the produce scope of the
original topic gets its records skipped."""
import threading
import time

import grpc

from conftest import (create_topic, fetch_all, free_port, kstool, unique, wait_for,
                      watermarks)
from grpc_support import consumer_pb2, start_grpc, write_tokens_json

from test_grpc import secure_sidecars  # noqa: F401 (fixture)

c = consumer_pb2


def headers(rec):
    return {x["key"]: x["value"] for x in rec["headers"]}


def committed(bootstrap, group, topic, partitions=1):
    """{partition: committed offset (-1001: none)} of group, from the broker."""
    out = kstool("committed", "-b", bootstrap, "-t", topic, "-g", group, "-p", str(partitions))
    return {int(line.split()[0]): int(line.split()[1]) for line in out.splitlines() if line}


def dlt_count(bootstrap, dlt):
    return sum(watermarks(bootstrap, dlt).values())


def read_acking(sc, group, topic, n, timeout=120):
    """The first n records of topic, each acked as it comes (records of one key come one at a
    time until the one before is acked)."""
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        recs = sc.fetch(group, topic, max=100, wait_ms=1000)
        if recs:
            assert sc.ack(group, [r["ack_id"] for r in recs])[0] == 200
        got += recs
    return got


def setup(bootstrap, prefix, partitions=2):
    topic, dlt, g = unique(f"t{prefix}"), unique(f"t{prefix}dl"), unique(f"g{prefix}")
    create_topic(bootstrap, topic, partitions)
    create_topic(bootstrap, dlt, 1)
    return topic, dlt, g


def produce_keyed(sc, topic, n, partition=1, token=None):
    """n records to topic's partition: key k<i>, value v<i> and a user header app: h<i>."""
    recs = [{"key": f"k{i}", "value": f"v{i}", "partition": partition,
             "headers": [{"key": "app", "value": f"h{i}"}]} for i in range(n)]
    kw = {} if token is None else {"token": token}
    st, body = sc.request("POST", f"/v1/topics/{topic}/records", {"records": recs}, **kw)
    assert st == 200 and all(not r.get("error") for r in body["results"]), body


def dead_letter(sc, g, recs, reason="poison", **kw):
    st, body = sc.request("POST", f"/v1/groups/{g}/nacks",
                          {"ack_ids": [r["ack_id"] for r in recs], "dead_letter": True,
                           "reason": reason}, **kw)
    assert st == 200 and all(x["message"] == "rejected: dead-lettered" for x in body["results"]), \
        body


def redrive(sc, g, body=None, want=200, **kw):
    st, rep = sc.request("POST", f"/v1/groups/{g}/redrive", body, **kw)
    assert st == want, (st, rep)
    return rep


def test_redrive_moves_the_dead_letters_back_and_the_loop_guard_stops_one_that_fails_again(
        bootstrap, sidecars):
    topic, dlt, g = setup(bootstrap, "rd")
    sc = sidecars([f"--group.dead_letter_topic={dlt}", "--group.redrive.max=1"])
    produce_keyed(sc, topic, 3)
    recs = sorted(fetch_all(sc, g, topic, 3), key=lambda r: r["offset"])
    assert [(r["partition"], r["offset"]) for r in recs] == [(1, 0), (1, 1), (1, 2)], recs
    dead_letter(sc, g, recs)
    wait_for(lambda: dlt_count(bootstrap, dlt) == 3, 60, what="3 dead letters")

    # A dry run reports what would move, and moves and commits nothing.
    rep = redrive(sc, g, {"dry_run": True})
    assert rep["dry_run"] is True and rep["moved"] == 3 and rep["by_topic"] == {topic: 3}, rep
    assert rep["held"] == [] and rep["skipped"] == [] and rep["remaining"] == 0, rep
    assert rep["next_offsets"] == [{"partition": 0, "offset": 3}], rep
    assert rep["dead_letter_topic"] == dlt, rep
    assert watermarks(bootstrap, topic) == {0: 0, 1: 3}
    assert committed(bootstrap, f"{g}.redrive", dlt)[0] < 0

    # max limits one call; the next continues where it stopped (the place is committed).
    rep = redrive(sc, g, {"max": 2})
    assert rep["dry_run"] is False and rep["moved"] == 2 and rep["remaining"] == 1, rep
    assert rep["next_offsets"] == [{"partition": 0, "offset": 2}], rep
    assert committed(bootstrap, f"{g}.redrive", dlt) == {0: 2}
    rep = redrive(sc, g)  # no body: the defaults
    assert rep["moved"] == 1 and rep["remaining"] == 0 and rep["by_topic"] == {topic: 1}, rep
    assert committed(bootstrap, f"{g}.redrive", dlt) == {0: 3}
    assert watermarks(bootstrap, topic) == {0: 0, 1: 6}

    # Back in the topic, on their partition, as they were, with the count and no dead-letter
    # headers.
    back = sorted(fetch_all(sc, g, topic, 3), key=lambda r: r["offset"])
    assert [(r["partition"], r["offset"]) for r in back] == [(1, 3), (1, 4), (1, 5)], back
    assert [(r["key"], r["value"]) for r in back] == [("k0", "v0"), ("k1", "v1"), ("k2", "v2")]
    for i, r in enumerate(back):
        assert headers(r) == {"app": f"h{i}", "ksidecar.redriven": "1"}, r

    # One fails again: its dead letter keeps the count, and the next redrive holds it.
    dead_letter(sc, g, back[:1], reason="still poison")
    st, body = sc.ack(g, [r["ack_id"] for r in back[1:]])
    assert st == 200 and body["acked"] == 2, body
    wait_for(lambda: dlt_count(bootstrap, dlt) == 4, 60, what="the 4th dead letter")
    again = read_acking(sc, unique("gdlread"), dlt, 4)
    last = max(again, key=lambda r: r["offset"])
    assert last["offset"] == 3 and headers(last)["ksidecar.redriven"] == "1", last
    assert headers(last)["ksidecar.last_error"] == "still poison", last
    rep = redrive(sc, g)
    assert rep["moved"] == 0 and rep["by_topic"] == {}, rep
    assert rep["held"] == [{"partition": 0, "offset": 3, "redriven": 1}], rep
    assert rep["held_total"] == 1 and rep["next_offsets"] == [{"partition": 0, "offset": 4}], rep
    assert watermarks(bootstrap, topic) == {0: 0, 1: 6}
    # It stays in the dead-letter topic; the place moved past it.
    rep = redrive(sc, g)
    assert rep["moved"] == 0 and rep["held"] == [] and rep["remaining"] == 0, rep
    assert dlt_count(bootstrap, dlt) == 4
    assert sc.stop() == 0


def test_redrive_refuses_bad_requests(bootstrap, sidecars):
    topic, dlt, g = setup(bootstrap, "rdbad", 1)
    plain = sidecars()
    st, body = plain.post(f"/v1/groups/{g}/redrive", {})
    assert st == 400 and "group.dead_letter_topic" in body["error"]["message"], body
    sc = sidecars([f"--group.dead_letter_topic={dlt}"])
    for bad, words in [({"max": 0}, "max must be"), ({"max": 100001}, "max must be"),
                       ({"max": "5"}, "max must be"), ({"dry_run": "yes"}, "dry_run"),
                       ({"x": 1}, 'unknown field "x"'), ([], "JSON object")]:
        st, body = sc.post(f"/v1/groups/{g}/redrive", bad)
        assert st == 400 and words in body["error"]["message"], (bad, body)
    st, body = sc.post(f"/v1/groups/{g}/redrive", raw=b"{")
    assert st == 400, body
    st, body = sc.post("/v1/groups/bad name/redrive".replace(" ", "%20"), {})
    assert st == 400, body
    # Nothing was dead-lettered: an empty report (the group need not be running).
    rep = redrive(sc, g, {})
    assert rep["moved"] == 0 and rep["remaining"] == 0, rep
    assert rep["next_offsets"] == [{"partition": 0, "offset": 0}], rep
    assert plain.stop() == 0 and sc.stop() == 0


def test_a_token_without_the_produce_scope_of_the_original_topic_gets_its_records_skipped(
        bootstrap, secure_sidecars, tmp_path):
    topic, dlt, g = setup(bootstrap, "rdscope", 1)
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"token": "app", "groups": [g], "consume": [topic], "produce": [topic]},
        {"token": "ops", "groups": [g], "consume": [topic], "produce": ["other-*"]}])
    sc = secure_sidecars([f"--group.dead_letter_topic={dlt}"], tokens_file=tokens, token="app")
    produce_keyed(sc, topic, 1, partition=0)
    recs = fetch_all(sc, g, topic, 1)
    dead_letter(sc, g, recs)
    wait_for(lambda: dlt_count(bootstrap, dlt) == 1, 60, what="the dead letter")
    rep = redrive(sc, g, {}, token="ops")
    assert rep["moved"] == 0 and rep["skipped_total"] == 1, rep
    assert rep["skipped"][0]["offset"] == 0, rep
    assert f'may not produce to topic "{topic}" (produce scope)' in \
        rep["skipped"][0]["reason"], rep
    assert rep["next_offsets"] == [{"partition": 0, "offset": 1}], rep
    assert watermarks(bootstrap, topic) == {0: 1}
    # A token without the group is refused before anything is read.
    st, body = sc.request("POST", f"/v1/groups/{unique('gother')}/redrive", {}, token="app")
    assert st == 403 and "(groups scope)" in body["error"]["message"], body
    assert sc.stop() == 0


def test_grpc_redrive(bootstrap, sidecars):
    topic, dlt, g = setup(bootstrap, "rdg", 1)
    sc = start_grpc(sidecars, [f"--group.dead_letter_topic={dlt}"])
    produce_keyed(sc, topic, 2, partition=0)
    recs = fetch_all(sc, g, topic, 2)
    r = sc.consumer.Nack(c.NackRequest(group=g, ack_ids=[x["ack_id"] for x in recs],
                                       dead_letter=True, reason="grpc poison"), timeout=30)
    assert all("dead-lettered" in x.message for x in r.results), r
    wait_for(lambda: dlt_count(bootstrap, dlt) == 2, 60, what="2 dead letters")
    dry = sc.consumer.Redrive(c.RedriveRequest(group=g, dry_run=True), timeout=60)
    assert dry.dry_run and dry.moved == 2 and dict(dry.by_topic) == {topic: 2}, dry
    rep = sc.consumer.Redrive(c.RedriveRequest(group=g, max=1), timeout=60)
    assert rep.moved == 1 and rep.remaining == 1 and rep.dead_letter_topic == dlt, rep
    assert [(o.partition, o.offset) for o in rep.next_offsets] == [(0, 1)], rep
    rep = sc.consumer.Redrive(c.RedriveRequest(group=g), timeout=60)
    assert rep.moved == 1 and rep.remaining == 0 and not rep.error, rep
    assert watermarks(bootstrap, topic) == {0: 4}
    try:
        sc.consumer.Redrive(c.RedriveRequest(group=g, max=-1), timeout=30)
        raise AssertionError("max=-1 was taken")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "max must be" in e.details(), e
    assert sc.stop() == 0


def test_a_second_redrive_of_a_group_while_one_runs_is_refused(sidecars):
    """With no broker to answer, a redrive waits (10 s) for the dead-letter topic's metadata:
    a second one sent meanwhile is 409 ABORTED, and once the first has answered (503) the
    group may be redriven again."""
    sc = sidecars([f"--kafka.bootstrap.servers=127.0.0.1:{free_port()}",
                   "--group.dead_letter_topic=dlt"])
    first = {}

    def run():
        first["resp"] = sc.post("/v1/groups/g1/redrive", {})

    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: "group g1: redrive of dlt started" in sc.logs(), 30, 0.05,
             what="the first redrive to start")
    st, body = sc.post("/v1/groups/g1/redrive", {"dry_run": True})
    assert st == 409 and body["error"]["code"] == "ABORTED", (st, body)
    assert 'a redrive of group "g1" is running' in body["error"]["message"], body
    # Another group is not held up by it.
    st2, body2 = sc.post("/v1/groups/g2/redrive", {"dry_run": True})
    t.join(120)
    st, body = first["resp"]
    assert st == 503 and "dead-letter topic \"dlt\"" in body["error"]["message"], (st, body)
    assert st2 == 503, (st2, body2)
    st, body = sc.post("/v1/groups/g1/redrive", {})
    assert st == 503, (st, body)  # not refused: the first one is over
    assert sc.stop() == 0


def test_what_a_redrive_skips_holds_and_moves_by_its_headers(bootstrap, sidecars):
    """Dead letters written straight to the dead-letter topic, one case each: skipped with the
    reason, held by the loop guard (the default group.redrive.max, 3), or moved, by key when
    its original partition is gone."""
    topic, dlt, g = setup(bootstrap, "rdcase", 1)
    sc = sidecars([f"--group.dead_letter_topic={dlt}"])

    def rec(key, **hs):
        return {"key": key, "value": "v", "partition": 0,
                "headers": [{"key": k.replace("_", "."), "value": v} for k, v in hs.items()]}

    o, r, p = "ksidecar_original_topic", "ksidecar_redriven", "ksidecar_original_partition"
    recs = [rec("k0", app="a"),
            rec("k1", **{o: unique("missing")}),
            rec("k2", **{o: "bad name"}),
            rec("k3", **{o: topic, r: "x"}),
            rec("k4", **{o: topic, r: "3"}),
            rec("k5", app="kept", **{o: topic, p: "7", r: "2"}),
            rec("k6", **{o: "__consumer_offsets"}),
            rec("k7", **{o: topic, "ksidecar_group": "another-group"}),
            rec("k8", **{o: topic, "ksidecar_group": g, r: "1"})]
    st, body = sc.post(f"/v1/topics/{dlt}/records", {"records": recs})
    assert st == 200 and all(not x.get("error") for x in body["results"]), body
    rep = redrive(sc, g)
    assert rep["moved"] == 2 and rep["by_topic"] == {topic: 2}, rep
    assert rep["held"] == [{"partition": 0, "offset": 4, "redriven": 3}], rep
    reasons = {x["offset"]: x["reason"] for x in rep["skipped"]}
    assert sorted(reasons) == [0, 1, 2, 3, 6, 7] and rep["skipped_total"] == 6, rep
    assert "no ksidecar.original.topic header" in reasons[0], reasons
    assert "does not exist" in reasons[1], reasons
    assert "not a valid topic name" in reasons[2], reasons
    assert "ksidecar.redriven header is not a count" in reasons[3], reasons
    assert "internal to Kafka" in reasons[6], reasons
    # Groups may share a dead-letter topic: another group's dead letter is its own to move.
    assert 'group "another-group" dead-lettered it' in reasons[7], reasons
    assert rep["next_offsets"] == [{"partition": 0, "offset": 9}] and rep["remaining"] == 0, rep
    back = sorted(fetch_all(sc, g, topic, 2), key=lambda x: x["key"])
    assert [(x["partition"], x["key"]) for x in back] == [(0, "k5"), (0, "k8")], back
    assert headers(back[0]) == {"app": "kept", "ksidecar.redriven": "3"}, back
    assert headers(back[1]) == {"ksidecar.redriven": "2"}, back
    assert sc.stop() == 0
