"""Engine behaviour through the real binary against the real broker: leases and redelivery,
key ordering, backpressure, crash recovery, rebalance fencing, dead letters, lifecycle."""
import base64
import json
import random
import signal
import threading
import time

import pytest

from conftest import (create_topic, describe_group, drain, fetch_all, produce, unique, wait_for,
                      watermarks)


def by_offset(recs):
    return {(r["partition"], r["offset"]): r for r in recs}


def all_committed(bootstrap, group, topic, ends):
    d = describe_group(bootstrap, group, topic)
    return d if len(d) == len(ends) and all(d[p][0] == ends[p] for p in ends) else None


def test_a_redelivery_after_nack_and_after_deadline_with_attempt_counts(bootstrap, sidecars):
    topic, g = unique("tred"), unique("gred")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    sc = sidecars()
    recs = fetch_all(sc, g, topic, 3)
    # Short leases for this fetch only.
    assert [r["attempt"] for r in recs] == [1, 1, 1]
    r0, r1, r2 = recs

    # Nack without delay: back at once, attempt 2.
    st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [r0["ack_id"]], "reason": "boom"})
    assert st == 200 and body["results"][0]["status"] == "OK", body
    again = sc.fetch(g, topic, wait_ms=5000)
    assert [(r["offset"], r["attempt"]) for r in again] == [(0, 2)]

    # Nack with a delay: not back before it, back after it, attempt 3.
    t0 = time.time()
    st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [again[0]["ack_id"]],
                                                  "delay_ms": 2000})
    assert st == 200, body
    assert sc.fetch(g, topic, wait_ms=1000) == []
    later = sc.fetch(g, topic, wait_ms=5000)
    assert [(r["offset"], r["attempt"]) for r in later] == [(0, 3)]
    assert time.time() - t0 >= 1.9

    # Deadline: r1 is left to expire; r2's lease is extended and must not come back.
    st, body = sc.post(f"/v1/groups/{g}/deadline", {"ack_ids": [r2["ack_id"]],
                                                     "deadline_ms": 120000})
    assert st == 200 and body["results"][0]["message"] == "deadline extended", body
    expired = sc.fetch(g, topic, wait_ms=40000)  # default lease is 30 s
    assert [(r["offset"], r["attempt"]) for r in expired] == [(1, 2)]
    # The expired lease's ack id is stale now: the record went out again.
    assert expired[0]["ack_id"] != r1["ack_id"]
    st, body = sc.ack(g, [r1["ack_id"]])
    assert st == 409 and body["results"][0]["status"] == "FAILED_PRECONDITION", body

    st, body = sc.ack(g, [later[0]["ack_id"], expired[0]["ack_id"], r2["ack_id"]])
    assert st == 200 and body["acked"] == 3, body
    wait_for(lambda: all_committed(bootstrap, g, topic, {0: 3}), 30, 1, "commit at 3")
    assert sc.stop() == 0


def test_a_per_fetch_deadline(bootstrap, sidecars):
    topic, g = unique("tdl"), unique("gdl")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = sidecars()
    st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&deadline_ms=1500&wait_ms=20000")
    assert st == 200 and len(body["records"]) == 1
    t0 = time.time()
    again = sc.fetch(g, topic, wait_ms=10000)
    assert [(r["offset"], r["attempt"]) for r in again] == [(0, 2)]
    assert 1.0 <= time.time() - t0 < 8
    assert sc.stop() == 0


def test_b_key_ordering_with_random_nacks(bootstrap, sidecars):
    topic, g = unique("tkey"), unique("gkey")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 10_000, keys=20)  # 20 keys x 500 records
    ends = watermarks(bootstrap, topic)
    sc = sidecars()
    rnd = random.Random(11)
    acked_order = {}  # key -> offsets in the order their acks succeeded
    done = set()
    deadline = time.time() + 300
    while len(done) < 10_000 and time.time() < deadline:
        recs = sc.fetch(g, topic, max=500, wait_ms=2000)
        keys_in_batch = [(r["partition"], r["key"]) for r in recs]
        assert len(keys_in_batch) == len(set(keys_in_batch)), "two records of one key in flight"
        nack = [r for r in recs if rnd.random() < 0.1]
        ack = [r for r in recs if r not in nack]
        rnd.shuffle(ack)
        if nack:
            st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [r["ack_id"] for r in nack]})
            assert st == 200 and body["rejected"] == 0, body
        if ack:
            st, body = sc.ack(g, [r["ack_id"] for r in ack])
            assert st == 200, body
            for r, res in zip(ack, body["results"]):
                if res["status"] == "OK" and res["message"] == "acked":
                    acked_order.setdefault((r["partition"], r["key"]), []).append(r["offset"])
                    done.add((r["partition"], r["offset"]))
    assert len(done) == 10_000
    assert len(acked_order) == 20
    for key, offs in acked_order.items():
        assert len(offs) == 500, key
        assert offs == sorted(offs), f"key {key}: acks out of offset order"
    wait_for(lambda: all_committed(bootstrap, g, topic, ends), 60, 1, "all committed")
    assert sc.stop() == 0


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_c_backpressure_keeps_memory_flat_then_delivers_everything(bootstrap, sidecars):
    topic, g = unique("tbp"), unique("gbp")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 200_000, partitions=4, size=1000)  # ~200 MB backlog
    ends = watermarks(bootstrap, topic)
    static = json.dumps([{"name": g, "topics": [topic]}])
    sc = sidecars([f"--groups.static={static}", "--window.max_records=2000",
                   "--subscriber.max_records=5000"])
    base = rss_kb(sc.proc.pid)
    peak = base
    t_end = time.time() + 10  # no client at all for 10 s
    while time.time() < t_end:
        peak = max(peak, rss_kb(sc.proc.pid))
        time.sleep(0.25)
    st, status = sc.get(f"/v1/groups/{g}")
    assert st == 200
    parts = status["partitions"]
    assert len(parts) == 4
    assert all(p["window_records"] <= 2000 + 500 for p in parts), parts
    assert all(p["paused"] for p in parts), parts
    # Window bound: 4 x 2000 x ~1 KB, plus librdkafka's queue of each partition (2 MB), plus slack.
    # The backlog itself is ~200 MB: without backpressure RSS would pass it.
    grown_mb = (peak - base) / 1024
    print(f"RSS base {base/1024:.1f} MB, peak {peak/1024:.1f} MB, grown {grown_mb:.1f} MB")
    assert grown_mb < 64, grown_mb

    got = 0
    deadline = time.time() + 300
    while got < 200_000 and time.time() < deadline:
        recs = sc.fetch(g, topic, max=5000, wait_ms=2000)
        if recs:
            st, body = sc.ack(g, [r["ack_id"] for r in recs])
            assert st == 200 and body["rejected"] == 0
            got += len(recs)
        peak = max(peak, rss_kb(sc.proc.pid))
    assert got == 200_000
    wait_for(lambda: all_committed(bootstrap, g, topic, ends), 60, 1, "all committed")
    assert sc.stop() == 0


def test_full_partition_queues_refill_with_nothing_lost_or_repeated(bootstrap, sidecars):
    # Tiny fetches and a tiny librdkafka queue per partition: the queue is full after every
    # ~100 records, and each time ksidecar empties it, it seeks the partition to where the
    # queue ended to wake librdkafka's fetcher (~200 such seeks here). Every record must
    # still come exactly once, in order, and be committed.
    topic, g = unique("tqf"), unique("gqf")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 20_000, size=100)
    ends = watermarks(bootstrap, topic)
    sc = sidecars(["--window.max_records=500", "--kafka.queued.max.messages.kbytes=16",
                   "--kafka.max.partition.fetch.bytes=16384"])
    got = []
    deadline = time.time() + 120
    while len(got) < 20_000 and time.time() < deadline:
        recs = sc.fetch(g, topic, max=1000, wait_ms=1000)
        if recs:
            st, body = sc.ack(g, [r["ack_id"] for r in recs])
            assert st == 200 and body["rejected"] == 0, body
            got += recs
    assert [r["offset"] for r in got] == list(range(20_000))
    assert all(r["attempt"] == 1 for r in got)
    wait_for(lambda: all_committed(bootstrap, g, topic, ends), 30, 1, "all committed")
    assert sc.stop() == 0


def test_d_kill_9_mid_stream_redelivers_exactly_the_unacked(bootstrap, sidecars):
    topic, g = unique("tcrash"), unique("gcrash")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 5000, partitions=4)
    sc = sidecars(["--subscriber.max_records=5000"])
    rnd = random.Random(5)
    # fetch_all may overshoot 2000 (a short batch, then a full one): those extra records
    # were delivered too, and come back as attempt 2 like the others.
    delivered = fetch_all(sc, g, topic, 2000, max=500)
    fetched = delivered[:2000]
    # Let the remaining ones be fetched into the window too, but never delivered.
    acked = [r for r in fetched if rnd.random() < 0.7]
    rnd.shuffle(acked)
    for i in range(0, len(acked), 100):
        st, body = sc.ack(g, [r["ack_id"] for r in acked[i:i + 100]])
        assert st == 200 and body["acked"] == len(acked[i:i + 100]), body
    time.sleep(1.5)  # several commit intervals: every ack is in a commit now
    sc.stop(sig=signal.SIGKILL)
    assert sc.proc.returncode == -9

    acked_set = {(r["partition"], r["offset"]) for r in acked}
    ends = watermarks(bootstrap, topic)
    everything = {(p, o) for p, e in ends.items() for o in range(e)}
    sc2 = sidecars(["--subscriber.max_records=5000"])
    again = []
    deadline = time.time() + 120
    while len(again) < len(everything - acked_set) and time.time() < deadline:
        recs = sc2.fetch(g, topic, max=1000, wait_ms=2000)
        again += recs
        if recs:
            st, body = sc2.ack(g, [r["ack_id"] for r in recs])
            assert st == 200 and body["rejected"] == 0
    redelivered = {(r["partition"], r["offset"]) for r in again}
    assert len(redelivered) == len(again), "a record came twice after the restart"
    assert redelivered == everything - acked_set
    # Attempt counts carry on: a record delivered once before the crash is attempt 2 now.
    fetched_set = {(r["partition"], r["offset"]) for r in delivered}
    for r in again:
        want = 2 if (r["partition"], r["offset"]) in fetched_set else 1
        assert r["attempt"] == want, r
    wait_for(lambda: all_committed(bootstrap, g, topic, ends), 60, 1, "all committed")
    assert sc2.stop() == 0


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_e_two_processes_split_partitions_stale_acks_rejected_nothing_lost(bootstrap, sidecars,
                                                                          strategy):
    topic, g = unique("treb"), unique("greb")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 4000, partitions=4)
    ends = watermarks(bootstrap, topic)
    args = ["--group.revoke_grace_ms=1000", "--subscriber.max_records=4000",
            f"--kafka.partition.assignment.strategy={strategy}"]
    a = sidecars(args)
    acked = set()

    def ack_all(sc, recs):
        if not recs:
            return
        st, body = sc.ack(g, [r["ack_id"] for r in recs])
        for r, res in zip(recs, body["results"]):
            if res["status"] == "OK":
                acked.add((r["partition"], r["offset"]))

    first = fetch_all(a, g, topic, 400, max=400)
    ack_all(a, first)
    held = []  # leased on A, not acked yet, on every partition
    deadline = time.time() + 30
    while len({r["partition"] for r in held}) < 4 and time.time() < deadline:
        held += a.fetch(g, topic, max=100, wait_ms=2000)
    assert len({r["partition"] for r in held}) == 4
    b = sidecars(args)
    ack_all(b, b.fetch(g, topic, max=1, wait_ms=0))  # B's first fetch joins the group
    # B's join moves partitions away from A; A's held leases on them turn stale.
    wait_for(lambda: b.get(f"/v1/groups/{g}")[0] == 200 and
             len(b.get(f"/v1/groups/{g}")[1]["partitions"]) >= 1, 60, 0.5, "B gets partitions")
    a_parts = {p["partition"] for p in a.get(f"/v1/groups/{g}")[1]["partitions"]}
    b_parts = {p["partition"] for p in b.get(f"/v1/groups/{g}")[1]["partitions"]}
    assert a_parts and b_parts and not (a_parts & b_parts), (a_parts, b_parts)
    st, body = a.ack(g, [r["ack_id"] for r in held])
    stale = [(r, res) for r, res in zip(held, body["results"]) if r["partition"] in b_parts]
    assert stale, "no held record was on a moved partition"
    for r, res in stale:
        assert res["status"] == "FAILED_PRECONDITION" and "stale" in res["message"], res
    for r, res in zip(held, body["results"]):
        if res["status"] == "OK":
            acked.add((r["partition"], r["offset"]))
    # Ack ids of A mean nothing to B.
    st, body = b.ack(g, [held[0]["ack_id"]])
    assert body["results"][0]["status"] == "FAILED_PRECONDITION", body

    # Both serve; then A stops mid-stream and B takes everything over.
    for _ in range(3):
        ack_all(a, a.fetch(g, topic, max=200, wait_ms=1000))
        ack_all(b, b.fetch(g, topic, max=200, wait_ms=1000))
    mid = a.fetch(g, topic, max=100, wait_ms=1000)  # A holds these when it stops
    assert a.stop() == 0
    deadline = time.time() + 120
    everything = {(p, o) for p, e in ends.items() for o in range(e)}
    while acked != everything and time.time() < deadline:
        ack_all(b, b.fetch(g, topic, max=1000, wait_ms=2000))
    assert acked == everything, f"lost: {sorted(everything - acked)[:10]}"
    assert mid is not None
    wait_for(lambda: all_committed(bootstrap, g, topic, ends), 60, 1, "all committed")
    assert b.stop() == 0


def test_f_dead_letter_after_max_attempts(bootstrap, sidecars):
    topic, dlt, g = unique("tdlq"), unique("dlt"), unique("gdlq")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, dlt, 1)
    produce(bootstrap, topic, 5)
    sc = sidecars([f"--group.dead_letter_topic={dlt}", "--group.max_attempts=3"])
    recs = fetch_all(sc, g, topic, 5)
    victim = recs[2]
    st, body = sc.ack(g, [r["ack_id"] for r in recs if r is not victim])
    assert body["acked"] == 4
    cur = victim
    for attempt in (1, 2, 3):
        assert cur["offset"] == 2 and cur["attempt"] == attempt
        st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [cur["ack_id"]],
                                                      "reason": f"failure {attempt}"})
        assert st == 200 and body["results"][0]["status"] == "OK", body
        if attempt < 3:
            cur = sc.fetch(g, topic, wait_ms=5000)[0]
    assert "dead-lettered" in body["results"][0]["message"]
    # Nothing comes back, and the commit moves past the dead-lettered record.
    assert sc.fetch(g, topic, wait_ms=1500) == []
    wait_for(lambda: all_committed(bootstrap, g, topic, {0: 5}), 30, 1, "commit past it")
    # The dead-letter topic holds it, with headers naming its origin.
    dl = fetch_all(sc, unique("gread"), dlt, 1)
    assert len(dl) == 1
    d = dl[0]
    assert d["value"] == victim["value"]
    h = {x["key"]: x["value"] for x in d["headers"]}
    assert h["ksidecar.original.topic"] == topic
    assert h["ksidecar.original.partition"] == "0"
    assert h["ksidecar.original.offset"] == "2"
    assert h["ksidecar.attempts"] == "3"
    assert h["ksidecar.last_error"] == "failure 3"
    st, status = sc.get(f"/v1/groups/{g}")
    assert status["counters"]["dead_lettered"] == 1
    assert sc.stop() == 0


def test_without_dead_letter_topic_retries_never_stop(bootstrap, sidecars):
    topic, g = unique("tnodlq"), unique("gnodlq")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = sidecars(["--group.max_attempts=2"])
    cur = fetch_all(sc, g, topic, 1)[0]
    for attempt in range(1, 6):
        assert cur["attempt"] == attempt
        sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [cur["ack_id"]]})
        cur = sc.fetch(g, topic, wait_ms=5000)[0]
    assert sc.stop() == 0


def test_subscribers_credits_topics_and_status(bootstrap, sidecars):
    t1, t2, g = unique("ts1"), unique("ts2"), unique("gsub")
    create_topic(bootstrap, t1, 2)
    create_topic(bootstrap, t2, 1)
    produce(bootstrap, t1, 40, partitions=2)
    produce(bootstrap, t2, 10)
    sc = sidecars(["--subscriber.max_records=5"])
    # Credits: never more than 5 unacked per subscriber.
    a = fetch_all(sc, g, t1, 5, max=100)
    assert len(a) == 5
    assert sc.get(f"/v1/groups/{g}/records?topic={t1}&max=100&wait_ms=500")[1]["records"] == []
    # Another subscriber has its own credits.
    st, body = sc.get(f"/v1/groups/{g}/records?topic={t1}&max=100&wait_ms=5000&subscriber=b")
    assert len(body["records"]) == 5
    st, status = sc.get(f"/v1/groups/{g}")
    subs = {s["name"]: s for s in status["subscribers"]}
    assert subs["default"]["outstanding"]["records"] == 5
    assert subs["b"]["outstanding"]["records"] == 5
    assert subs["b"]["credits"]["records"] == 5
    sc.ack(g, [r["ack_id"] for r in a])
    # A topic's records go only to those that asked for it; the subscription grows.
    recs = fetch_all(sc, g, t2, 5, max=5)
    assert {r["topic"] for r in recs} == {t2}
    st, status = sc.get(f"/v1/groups/{g}")
    assert sorted(status["topics"]) == sorted([t1, t2])
    parts = {(p["topic"], p["partition"]): p for p in status["partitions"]}
    assert set(parts) == {(t1, 0), (t1, 1), (t2, 0)}
    p = parts[(t2, 0)]
    assert p["in_flight"] == 5 and p["high_watermark"] == 10 and p["window_records"] == 10
    assert p["oldest_lease_age_ms"] is not None and p["paused"] is False
    assert status["ordering"] == "key"
    st, all_groups = sc.get("/v1/groups")
    assert [x["group"] for x in all_groups["groups"]] == [g]
    assert sc.get("/v1/groups/nope-not-here")[0] == 404
    assert sc.stop() == 0


def test_two_concurrent_subscribers_share_the_load(bootstrap, sidecars):
    topic, g = unique("tbal"), unique("gbal")
    create_topic(bootstrap, topic, 4)
    sc = sidecars()
    sc.fetch(g, topic, wait_ms=3000)  # join the group first
    results = {}

    def poll(name):
        st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&max=1000&wait_ms=20000"
                          f"&subscriber={name}")
        results[name] = body["records"]

    threads = [threading.Thread(target=poll, args=(n,)) for n in ("x", "y")]
    for t in threads:
        t.start()
    time.sleep(1.5)  # both are parked now
    produce(bootstrap, topic, 400, partitions=4)
    for t in threads:
        t.join()
    nx, ny = len(results["x"]), len(results["y"])
    assert nx > 0 and ny > 0, (nx, ny)
    assert not ({r["ack_id"] for r in results["x"]} & {r["ack_id"] for r in results["y"]})
    assert sc.stop() == 0


def test_graceful_shutdown_waits_for_outstanding_acks(bootstrap, sidecars):
    topic, g = unique("tgs"), unique("ggs")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 20)
    sc = sidecars(["--shutdown.grace_ms=20000", "--commit.interval_ms=600000"])
    recs = fetch_all(sc, g, topic, 20)
    sc.proc.send_signal(signal.SIGTERM)
    time.sleep(1)
    # Fetches are refused now, acks still taken.
    st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&wait_ms=0")
    assert st == 503 and body["error"]["code"] == "UNAVAILABLE"
    st, body = sc.ack(g, [r["ack_id"] for r in recs])
    assert st == 200 and body["acked"] == 20, body
    t0 = time.time()
    assert sc.proc.wait(timeout=20) == 0
    assert time.time() - t0 < 10  # it left as soon as nothing was outstanding
    assert describe_group(bootstrap, g, topic)[0][0] == 20


def test_idle_dynamic_group_closes(bootstrap, sidecars):
    topic, g = unique("tidle"), unique("gidle")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 2)
    sc = sidecars(["--group.idle_close_ms=2000"])
    recs = fetch_all(sc, g, topic, 2)
    sc.ack(g, [r["ack_id"] for r in recs])
    wait_for(lambda: sc.get("/v1/groups")[1]["groups"] == [], 20, 0.5, "the group to close")
    assert "idle for 2000 ms" in sc.logs()
    assert describe_group(bootstrap, g, topic)[0][0] == 2
    # A new fetch opens it again.
    produce(bootstrap, topic, 1)
    assert [r["offset"] for r in fetch_all(sc, g, topic, 1)] == [2]
    assert sc.stop() == 0


def test_metadata_overflow_holds_back_new_deliveries(bootstrap, sidecars):
    topic, g = unique("tmeta"), unique("gmeta")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 200)
    sc = sidecars(["--commit.metadata_max_bytes=64", "--group.ordering=none"])
    recs = fetch_all(sc, g, topic, 200, max=200)
    assert len(recs) == 200
    # Every other record acked: 100 scattered acks above offset 0 do not fit in 64 bytes.
    st, body = sc.ack(g, [r["ack_id"] for r in recs if r["offset"] % 2 == 1])
    assert body["acked"] == 100

    def held():
        p = sc.get(f"/v1/groups/{g}")[1]["partitions"][0]
        return p if p["held_back"] and p["metadata_truncations"] >= 1 else None

    wait_for(held, 20, 0.3, "the partition to be held back")
    produce(bootstrap, topic, 5)  # new records: held back while the metadata overflows
    assert sc.fetch(g, topic, wait_ms=2000) == []
    # Held back for 5 s: a warning says why (offset 0, the commit point, is still leased).
    t0 = time.time()
    line = wait_for(lambda: next((ln for ln in sc.logs().split("\n") if "held back for" in ln),
                                 None), 30, 0.5, "the held-back warning")
    print(f"warned after {time.time() - t0:.1f} s more: {line}")
    assert "commit point 0" in line and "LEASED" in line and "metadata_max_bytes=64" in line
    # Ack the rest: the metadata fits again and the new records flow.
    st, body = sc.ack(g, [r["ack_id"] for r in recs if r["offset"] % 2 == 0])
    assert body["acked"] == 100
    new = fetch_all(sc, g, topic, 5, max=10)
    assert sorted(r["offset"] for r in new) == [200, 201, 202, 203, 204]
    assert sc.get(f"/v1/groups/{g}")[1]["partitions"][0]["held_back"] is False
    assert sc.stop() == 0
