"""The sync Subscriber against the real ksidecar and broker: delivery and commits, lease
extension, nack delays, reconnect after kill -9, close with acks pending, flow control."""
import logging
import re
import signal
import threading
import time

import pytest

import ksidecar
from conftest import Timer, committed, restart_on_same_ports, unique, wait_committed_end, wait_for


def target(sc):
    return f"127.0.0.1:{sc.grpc_port}"


def test_every_record_delivered_and_acked_once(bootstrap, sidecars, topic):
    t = topic(4, 3000, size=100)
    sc = sidecars()
    g = unique("g")
    seen = {}
    with Timer("iterate 3000"):
        sub = ksidecar.Subscriber(target(sc), g, [t])
        for m in sub:
            seen[(m.partition, m.offset)] = seen.get((m.partition, m.offset), 0) + 1
            assert m.attempt == 1 and len(m.value) == 100
            m.ack()
            if len(seen) == 3000:
                break
        assert sub.close(timeout=30) is True
    assert set(seen.values()) == {1}, [k for k, v in seen.items() if v > 1][:10]
    got, end = wait_committed_end(bootstrap, g, t, 4)
    print("committed", got, "end", end)
    assert sum(end.values()) == 3000


def test_callback_form_and_ack_futures(bootstrap, sidecars, topic):
    t = topic(2, 500)
    sc = sidecars()
    g = unique("g")
    lock = threading.Lock()
    futs, seen = [], set()

    def handle(m):
        f = m.ack_with_result()
        with lock:
            seen.add((m.partition, m.offset))
            futs.append(f)

    sub = ksidecar.Subscriber(target(sc), g, [t])
    run = sub.subscribe(handle, workers=4)
    wait_for(lambda: len(seen) >= 500, 60, 0.1, "500 records")
    results = [f.result(timeout=30) for f in list(futs)]
    assert sub.close() is True
    assert run.result(timeout=5) is True
    assert {r.status for r in results} == {ksidecar.AckStatus.ACCEPTED}, results[:5]
    assert len(results) == 500 and len(seen) == 500
    wait_committed_end(bootstrap, g, t, 2)


def test_ack_with_result_wait_commit_resolves_once_committed(bootstrap, sidecars, topic):
    t = topic(2, 200)
    sc = sidecars()
    g = unique("g")
    sub = ksidecar.Subscriber(target(sc), g, [t])
    futs, plain = {}, []
    for m in sub:
        if len(futs) + len(plain) < 150:
            futs[(m.partition, m.offset)] = m.ack_with_result(wait_commit=True)
        else:
            plain.append(m.ack_with_result())
        if len(futs) + len(plain) == 200:
            break
    results = {k: f.result(timeout=30) for k, f in futs.items()}
    # Each resolves only once a confirmed commit covers its record, and says where: by then
    # the broker has that partition's offset past it.
    now = committed(bootstrap, g, t, 2)
    for (p, off), r in results.items():
        assert r.status == ksidecar.AckStatus.COMMITTED and r.ok, r
        assert r.committed_offset > off, (p, off, r)
        assert now[p] >= r.committed_offset, (p, now, r)
    assert {f.result(timeout=30).status for f in plain} == {ksidecar.AckStatus.ACCEPTED}
    assert all(f.result().committed_offset == 0 for f in plain)
    assert sub.close(timeout=30) is True
    wait_committed_end(bootstrap, g, t, 2)


def test_slow_handler_is_extended_not_redelivered(bootstrap, sidecars, topic):
    # Leases of 1.5 s; each handler takes 5 s: without extension every record would expire
    # and come back (attempt 2) several times before its ack. Six distinct keys, so that
    # key ordering lets the six be handled at once on six workers.
    t = topic(1, 6, keys=6)
    sc = sidecars()
    g = unique("g")
    got = []
    lock = threading.Lock()

    def slow(m):
        time.sleep(5)
        with lock:
            got.append((m.offset, m.attempt))
        m.ack()

    sub = ksidecar.Subscriber(target(sc), g, [t], deadline_ms=1500)
    with Timer("6 slow handlers on 6 workers"):
        sub.subscribe(slow, workers=6)
        wait_for(lambda: len(got) >= 6, 60, 0.2, "6 handled records")
        time.sleep(2)  # a redelivery would show up here
        assert sub.close() is True
    print("handled", got, "extension ids sent", sub.book.extended)
    assert sorted(got) == [(o, 1) for o in range(6)]
    assert sub.book.extended >= 6
    st, body = sc.get(f"/v1/groups/{g}")
    assert st == 200, body
    print("counters", body.get("counters"))
    assert body["counters"]["expired"] == 0 and body["counters"]["redelivered"] == 0
    wait_committed_end(bootstrap, g, t, 1)


def test_lease_extension_stops_at_max_and_when_handler_ends(bootstrap, sidecars, topic):
    # max_lease_extension_s=2 with 1 s leases: a message held for 8 s is extended for about
    # 2 s, then expires and comes back with attempt 2. A handler that returns without
    # settling is no longer extended either.
    t = topic(1, 1)
    sc = sidecars()
    sub = ksidecar.Subscriber(target(sc), unique("g"), [t], deadline_ms=1000,
                              max_lease_extension_s=2)
    it = iter(sub)
    m1 = next(it)
    t0 = time.monotonic()
    m2 = next(it)
    print(f"redelivered after {time.monotonic() - t0:.2f} s (attempt {m2.attempt})")
    assert (m1.offset, m1.attempt, m2.offset, m2.attempt) == (0, 1, 0, 2)
    assert sub.book.extended >= 1
    m1.ack()  # STALE: redelivered since
    m2.ack()
    assert sub.close() is True


def test_nack_with_delay_comes_back_with_attempt_2(bootstrap, sidecars, topic):
    t = topic(1, 1)
    sc = sidecars()
    sub = ksidecar.Subscriber(target(sc), unique("g"), [t])
    it = iter(sub)
    m = next(it)
    assert m.attempt == 1
    r = m.nack_with_result(delay_ms=1500, reason="db timeout").result(timeout=30)
    assert r.status == ksidecar.AckStatus.ACCEPTED, r
    t0 = time.monotonic()
    m2 = next(it)
    dt = time.monotonic() - t0
    print(f"nacked record came back after {dt:.2f} s, attempt {m2.attempt}")
    assert (m2.offset, m2.attempt) == (m.offset, 2)
    assert dt >= 1.3  # never before the delay (less our own 5 ms batching)
    assert m2.ack_with_result().result(timeout=30).ok
    assert sub.close() is True


def test_nack_dead_letter_goes_to_the_dead_letter_topic_at_once(bootstrap, sidecars, topic):
    t, dlt = topic(1, 2), topic(1, 0)
    sc = sidecars([f"--group.dead_letter_topic={dlt}", "--group.max_attempts=10"])
    sub = ksidecar.Subscriber(target(sc), unique("g"), [t])
    it = iter(sub)
    first, second = sorted((next(it), next(it)), key=lambda m: m.offset)
    r = first.nack_with_result(reason="poison", dead_letter=True).result(timeout=30)
    assert r.status == ksidecar.AckStatus.ACCEPTED, r
    second.nack(reason="also poison", dead_letter=True)
    assert sub.close() is True
    # Both are in the dead-letter topic at attempt 1, each with its reason (read over HTTP,
    # which has a time bound).
    g, dl = unique("gdl"), []
    deadline = time.monotonic() + 60
    while len(dl) < 2 and time.monotonic() < deadline:
        dl += sc.fetch(g, dlt, wait_ms=1000)
    hs = sorted(({h["key"]: h["value"] for h in r["headers"]} for r in dl),
                key=lambda h: h["ksidecar.original.offset"])
    assert [h["ksidecar.last_error"] for h in hs] == ["poison", "also poison"], dl
    assert [h["ksidecar.attempts"] for h in hs] == ["1", "1"]


def test_kill9_then_restart_reconnects_and_loses_nothing(bootstrap, sidecars, topic, tmp_path,
                                                         caplog):
    caplog.set_level(logging.WARNING, logger="ksidecar")
    n = 4000
    t = topic(4, n)
    sc = sidecars()
    g = unique("g")
    seen = {}
    futs = {}  # (partition, offset) -> the future of its latest delivery's ack
    held = None
    sub = ksidecar.Subscriber(target(sc), g, [t], backoff_max_s=1.0)
    new = None

    def all_accepted():
        # Done once every record's latest ack was ACCEPTED: messages the old stream had
        # delivered before the kill (up to the credits) still come out of the iterator,
        # their acks come back STALE, and ksidecar delivers those records again.
        return len(futs) == n and all(
            f.result(timeout=30).status == ksidecar.AckStatus.ACCEPTED for f in futs.values())

    try:
        for m in sub:
            key = (m.partition, m.offset)
            seen[key] = seen.get(key, 0) + 1
            if held is None:
                held = m  # settled only after the restart: its ack must come back STALE
                continue
            futs[key] = m.ack_with_result()
            if len(seen) == 1500 and new is None:
                sc.proc.send_signal(signal.SIGKILL)
                sc.proc.wait()
                t_kill = time.monotonic()
                new = restart_on_same_ports(bootstrap, sc, tmp_path)
                print(f"restarted in {time.monotonic() - t_kill:.2f} s")
            if new is not None and len(seen) == n and all_accepted():
                break
        r = held.ack_with_result().result(timeout=10)
        print("held message's ack:", r)
        assert r.status == ksidecar.AckStatus.STALE
        assert sub.close(timeout=30) is True
        print("reconnects", sub.reconnects, "redelivered", sum(v - 1 for v in seen.values()))
        assert new is not None and sub.reconnects >= 1
        assert len(seen) == n
        assert any("STALE" in r.getMessage() for r in caplog.records), "no STALE warning logged"
        got, end = wait_committed_end(bootstrap, g, t, 4)
    finally:
        sub.close(timeout=5)
        if new is not None:
            new.stop()  # the restarted ksidecar is not the fixture's: stop it even on failure


def test_close_with_acks_pending_sends_them_all(bootstrap, sidecars, topic):
    t = topic(2, 1000)
    sc = sidecars()
    g = unique("g")
    sub = ksidecar.Subscriber(target(sc), g, [t], ack_max_delay_ms=600000, ack_max_ids=100000)
    n = 0
    for m in sub:
        m.ack()
        n += 1
        if n == 1000:
            break
    assert sub.book.left() == 1000  # nothing sent yet: all are pending in the library
    with Timer("close with 1000 acks pending"):
        assert sub.close(timeout=30) is True
    wait_committed_end(bootstrap, g, t, 2)


def test_flow_control_never_more_outstanding_than_asked(bootstrap, sidecars, topic):
    t = topic(4, 600, size=100)
    sc = sidecars()
    g = unique("g")
    peak = {"local": 0, "local_bytes": 0, "server": 0}
    lock = threading.Lock()
    done = []

    def sample_local(sub):
        out = sub.book.unsettled()
        with lock:
            peak["local"] = max(peak["local"], len(out))
            peak["local_bytes"] = max(peak["local_bytes"], sum(m.size for m in out))

    def handle(m):
        sample_local(sub)
        time.sleep(0.01)
        with lock:
            done.append(m.offset)
        m.ack()

    stop = threading.Event()

    def sample_server():
        while not stop.wait(0.05):
            st, body = sc.get(f"/v1/groups/{g}")
            if st == 200:
                for s in body.get("subscribers", []):
                    peak["server"] = max(peak["server"], s["outstanding"]["records"])

    sub = ksidecar.Subscriber(target(sc), g, [t], max_messages=40, max_bytes=2500)
    poller = threading.Thread(target=sample_server)
    poller.start()
    sub.subscribe(handle, workers=8)
    wait_for(lambda: len(done) >= 600, 120, 0.2, "600 handled")
    stop.set()
    poller.join()
    assert sub.close() is True
    print("peaks", peak)
    # 2500 bytes of 100-byte values (plus keys) allow at most 25 records
    assert 0 < peak["local"] <= 25 and peak["local_bytes"] <= 2500
    assert 0 < peak["server"] <= 25
    wait_committed_end(bootstrap, g, t, 4)


def test_reconnect_backs_off_exponentially_with_jitter(bootstrap, sidecars, topic, tmp_path,
                                                       caplog):
    """ksidecar killed and kept down: the library's reconnect attempts wait
    min(backoff_max_s, backoff_initial_s * 2**k) times a jitter in [0.5, 1], and really wait
    that long; once ksidecar is back on its port, the stream resumes by itself and nothing
    is lost."""
    caplog.set_level(logging.WARNING, logger="ksidecar")
    n = 2000
    t = topic(4, n)
    sc = sidecars()
    g = unique("g")
    initial, cap, want = 0.05, 0.8, 10
    sub = ksidecar.Subscriber(target(sc), g, [t], backoff_initial_s=initial, backoff_max_s=cap,
                              max_messages=500)
    futs = {}
    new = None
    pat = re.compile(r"reconnecting to \S+ in ([0-9.]+) s \(attempt (\d+)\)")

    def attempts():
        out = []
        for r in list(caplog.records):
            mt = pat.search(r.getMessage())
            if mt:
                out.append((r.created, float(mt.group(1)), int(mt.group(2))))
        return out

    try:
        it = iter(sub)
        for m in it:
            futs[(m.partition, m.offset)] = m.ack_with_result()
            if len(futs) == 600:
                break
        for f in futs.values():
            assert f.result(timeout=30).status == ksidecar.AckStatus.ACCEPTED
        sc.proc.send_signal(signal.SIGKILL)
        sc.proc.wait()
        wait_for(lambda: len(attempts()) >= want, 60, 0.05, f"{want} reconnect attempts")
        seen = attempts()[:want]
        t_up = time.monotonic()
        new = restart_on_same_ports(bootstrap, sc, tmp_path)
        print(f"ksidecar back after {time.monotonic() - t_up:.2f} s")
        for m in it:
            # Every delivery is acked: acks ksidecar took but had not committed when it was
            # killed come again, as Kafka's at-least-once has it.
            futs[(m.partition, m.offset)] = m.ack_with_result()
            if len(futs) == n and all(f.result(timeout=30).status == ksidecar.AckStatus.ACCEPTED
                                      for f in futs.values()):
                break
        t_back = time.monotonic() - t_up
        print("attempts (created, delay, attempt):",
              [(round(c - seen[0][0], 3), d, a) for c, d, a in seen])
        print(f"all {n} acked ACCEPTED {t_back:.2f} s after the restart began")
        assert [a for _, _, a in seen] == list(range(1, want + 1)), seen
        for _, d, a in seen:
            base = min(cap, initial * 2 ** (a - 1))
            assert 0.5 * base - 0.006 <= d <= base + 0.006, (a, d, base)
        # Each attempt waited its announced delay before the next one was announced.
        for (c0, d0, _), (c1, _, _) in zip(seen, seen[1:]):
            assert c1 - c0 >= d0 - 0.01, (c0, d0, c1)
        capped = [d for _, d, a in seen if initial * 2 ** (a - 1) >= cap]
        assert len(capped) >= 4 and len(set(capped)) > 1, capped  # jittered, not fixed
        assert sub.close(timeout=30) is True
        assert sub.reconnects >= want
        wait_committed_end(bootstrap, g, t, 4)
    finally:
        sub.close(timeout=5)
        if new is not None:
            new.stop()


def record_wire(sub):
    """Records the settlement messages sub sends from now on, and the shape of each answer
    it takes, (results, accepted): lists the caller reads."""
    book = sub.book
    sent, answers = [], []
    send, results = book.send, book.results

    def rec_send(req):
        sent.append(req)
        send(req)

    def rec_results(rs, accepted=0):
        answers.append(([(r.ack_id, r.status, r.position) for r in rs], accepted))
        results(rs, accepted)

    book.send, book.results = rec_send, rec_results
    return sent, answers


@pytest.mark.parametrize("ranges", [True, False])
def test_acks_go_as_ranges_answered_by_a_count(bootstrap, sidecars, topic, ranges):
    # One partition's 500 acks, sent at close in one message: with ranges one range id,
    # answered by accepted=500 and no result; without, 500 ids and 500 results.
    t = topic(1, 500)
    sc = sidecars()
    g = unique("g")
    sub = ksidecar.Subscriber(target(sc), g, [t], ack_max_delay_ms=600000, ack_max_ids=100000,
                              ack_ranges=ranges)
    sent = answers = None
    n = 0
    for m in sub:
        if sent is None:
            sent, answers = record_wire(sub)
        m.ack()
        n += 1
        if n == 500:
            break
    assert sub.close(timeout=30) is True
    acks = [r.ack for r in sent if r.HasField("ack")]
    assert len(acks) == 1, sent
    ids = list(acks[0].ack_ids)
    if ranges:
        assert acks[0].results_by_position and len(ids) == 1 and "-0~499-" in ids[0], ids
        assert answers == [([], 500)], answers
    else:
        assert not acks[0].results_by_position and len(ids) == 500 and "~" not in ids[0]
        assert len(answers) == 1 and answers[0][1] == 0 and len(answers[0][0]) == 500
    wait_committed_end(bootstrap, g, t, 1)


def test_a_refused_ack_in_a_range_resolves_by_its_own_id(bootstrap, sidecars, topic, caplog):
    # Ten records held past their 1 s lease (never extended) come again with attempt 2. The
    # old copies' acks and the new ones' go in one message, two ranges: ksidecar answers
    # accepted=10 and each old id STALE by itself, at its range's position.
    t = topic(1, 10)
    sc = sidecars()
    g = unique("g")
    sub = ksidecar.Subscriber(target(sc), g, [t], deadline_ms=1000, max_lease_extension_s=0,
                              ack_max_delay_ms=600000, ack_max_ids=20)
    old, new = [], []
    for m in sub:
        (old if m.attempt == 1 else new).append(m)
        if len(new) == 10:
            break
    assert [m.offset for m in old] == list(range(10)), old
    assert [m.offset for m in new] == list(range(10)), new
    sent, answers = record_wire(sub)
    with caplog.at_level(logging.WARNING, logger="ksidecar"):
        for m in old[:5]:
            m.ack()  # refused: logged by its own id
        old_futs = [m.ack_with_result() for m in old[5:]]
        new_futs = [m.ack_with_result() for m in new]  # the 20th ack sends the message
        got_old = [f.result(timeout=30) for f in old_futs]
        got_new = [f.result(timeout=30) for f in new_futs]
    (req,) = [r.ack for r in sent if r.HasField("ack")]
    assert req.results_by_position and len(req.ack_ids) == 2, req
    assert "-0~9-1-" in req.ack_ids[0] and "-0~9-2-" in req.ack_ids[1], req
    (shape,) = answers
    assert shape[1] == 10 and [(i, st, pos) for i, st, pos in shape[0]] == [
        (m.ack_id, ksidecar.AckStatus.STALE, 0) for m in old], shape
    assert [(r.ack_id, r.status) for r in got_old] == [
        (m.ack_id, ksidecar.AckStatus.STALE) for m in old[5:]]
    assert all(r.message for r in got_old), got_old
    assert [(r.ack_id, r.status) for r in got_new] == [
        (m.ack_id, ksidecar.AckStatus.ACCEPTED) for m in new]
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert all(m.ack_id in warned for m in old[:5]) and "STALE" in warned, warned
    assert not any(m.ack_id in warned for m in old[5:] + new), warned
    assert sub.close() is True
    wait_committed_end(bootstrap, g, t, 1)
