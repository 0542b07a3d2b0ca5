"""Cooperative rebalances through real ksidecar processes on the real broker: a joining or
leaving member moves only the partitions it must; kept partitions keep their epoch and
leases; no ack that got an OK is ever redelivered (librdkafka#4059 on 2.0.2)."""
import re
import signal
import threading
import time

from conftest import create_topic, produce, unique, wait_for, watermarks

COOP = ["--kafka.partition.assignment.strategy=cooperative-sticky",
        "--group.revoke_grace_ms=2000", "--subscriber.max_records=4000"]


class Ledger:
    """Every delivery and every ack result, across processes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.accepted = set()      # (partition, offset) whose ack got OK
        self.redelivered = []      # deliveries of a record whose ack had got OK
        self.deliveries = 0
        self.rejected = []         # (process, partition, status, message)

    def delivered(self, recs):
        with self.lock:
            self.deliveries += len(recs)
            for r in recs:
                if (r["partition"], r["offset"]) in self.accepted:
                    self.redelivered.append((r["partition"], r["offset"]))

    def acked(self, name, recs, body):
        with self.lock:
            for r, res in zip(recs, body["results"]):
                if res["status"] == "OK":
                    self.accepted.add((r["partition"], r["offset"]))
                else:
                    self.rejected.append((name, r["partition"], res["status"], res["message"]))


class Worker(threading.Thread):
    """A client of one process: fetches and acks everything it gets."""

    def __init__(self, name, sc, group, topic, ledger):
        super().__init__(daemon=True)
        self.name_, self.sc, self.g, self.topic, self.ledger = name, sc, group, topic, ledger
        self.halt = threading.Event()
        self.errors = []

    def run(self):
        while not self.halt.is_set():
            try:
                recs = self.sc.fetch(self.g, self.topic, max=200, wait_ms=300)
                self.ledger.delivered(recs)
                if recs:
                    st, body = self.sc.ack(self.g, [r["ack_id"] for r in recs])
                    assert st == 200, (st, body)
                    self.ledger.acked(self.name_, recs, body)
                time.sleep(0.02)  # a steady stream, not a flood: the join lands mid-stream
            except Exception as e:  # noqa: BLE001 - reported by the test
                if self.sc.proc.poll() is None:
                    self.errors.append(repr(e))
                return

    def stop(self):
        self.halt.set()
        self.join(30)


def with_worker(sidecars, name, g, topic, ledger):
    """A new process and a running Worker on it."""
    sc = sidecars(COOP)
    w = Worker(name, sc, g, topic, ledger)
    w.start()
    return sc, w


def owned(sc, g):
    """{partition: epoch} that the process holds now."""
    st, body = sc.get(f"/v1/groups/{g}")
    if st != 200:
        return {}
    return {p["partition"]: p["epoch"] for p in body["partitions"]}


def settled(procs, g, nparts):
    """The assignment once every partition is held by exactly one process and each process
    holds some, unchanged for 1.5 s."""
    def snap():
        views = [owned(sc, g) for sc in procs]
        parts = [p for v in views for p in v]
        full = sorted(parts) == list(range(nparts)) and all(views)
        return views if full else None
    last = None
    deadline = time.time() + 60
    while time.time() < deadline:
        v = snap()
        if v and v == last:
            return v
        last = v
        time.sleep(1.5 if v else 0.3)
    raise AssertionError(f"no settled assignment in 60 s; last: {last}")


def revoked_lines(sc):
    return re.findall(r"revoked \S+\[(\d+)\]", sc.log_path.read_text(errors="replace"))


def assert_clean_log(sc):
    text = sc.log_path.read_text(errors="replace")
    for bad in ("Illegal generation", "generation id is not valid", "assignment lost",
                "acks lost to a move"):
        assert bad not in text, f"{bad!r} in the log:\n{text[-4000:]}"


def finish(procs, ledger, g, topic, ends, workers):
    everything = {(p, o) for p, e in ends.items() for o in range(e)}
    wait_for(lambda: ledger.accepted >= everything, 120, 1, "every record acked")
    for w in workers:
        w.stop()
        assert not w.errors, w.errors
    assert not ledger.redelivered, f"{len(ledger.redelivered)} records redelivered after an OK"
    for sc in procs:
        st, body = sc.get(f"/v1/groups/{g}")
        assert st == 200 and body["counters"]["acks_lost_to_move"] == 0, body["counters"]
    print(f"deliveries {ledger.deliveries} for {len(everything)} records, "
          f"rejected acks {len(ledger.rejected)}")


def topic_of(bootstrap, prefix, nparts, n):
    """A new topic of nparts partitions with n records, a group name, and its ends."""
    topic, g = unique("t" + prefix), unique("g" + prefix)
    create_topic(bootstrap, topic, nparts)
    produce(bootstrap, topic, n, partitions=nparts)
    return topic, g, watermarks(bootstrap, topic)


def test_a_second_process_joining_moves_only_its_share(bootstrap, sidecars):
    nparts = 8
    topic, g, ends = topic_of(bootstrap, "coop", nparts, 64000)
    ledger = Ledger()
    b = sidecars(COOP)
    wb = Worker("B", b, g, topic, ledger)
    wb.start()
    wait_for(lambda: len(owned(b, g)) == nparts and len(ledger.accepted) > 2000, 60, 0.2,
             "B streams all partitions")
    # Leases B holds across the join, on every partition.
    held = []
    deadline = time.time() + 30
    while len({r["partition"] for r in held}) < nparts and time.time() < deadline:
        held += b.fetch(g, topic, max=100, wait_ms=1000)
    ledger.delivered(held)
    assert len({r["partition"] for r in held}) == nparts
    before = owned(b, g)

    a, wa = with_worker(sidecars, "A", g, topic, ledger)
    t0 = time.time()
    vb, va = settled([b, a], g, nparts)
    print(f"settled in {time.time() - t0:.1f} s: B {sorted(vb)}, A {sorted(va)}; "
          f"{len(ledger.accepted)} of 64000 acked so far")
    assert len(ledger.accepted) < 64000 - 4000, "the stream ended before the rebalance did"
    kept = set(vb)
    moved = set(before) - kept
    assert kept and moved and set(va) == moved, (vb, va)
    for p in kept:
        assert vb[p] == before[p], f"kept partition {p} changed epoch {before[p]} -> {vb[p]}"
    assert sorted(int(p) for p in revoked_lines(b)) == sorted(moved), revoked_lines(b)
    st, body = b.ack(g, [r["ack_id"] for r in held])
    ledger.acked("B-held", held, body)
    for r, res in zip(held, body["results"]):
        if r["partition"] in kept:
            assert res["status"] == "OK", (r["partition"], res)
        else:
            assert res["status"] == "FAILED_PRECONDITION", (r["partition"], res)
    stale_kept = [x for x in ledger.rejected if x[0] == "B" and x[1] in kept]
    assert not stale_kept, stale_kept[:5]
    finish([b, a], ledger, g, topic, ends, [wa, wb])
    assert_clean_log(b)
    assert_clean_log(a)
    assert a.stop() == 0 and b.stop() == 0


def test_b_three_processes_joining_and_leaving(bootstrap, sidecars):
    nparts = 9
    topic, g, ends = topic_of(bootstrap, "coop3", nparts, 45000)
    ledger = Ledger()
    procs, workers = {}, {}

    def start(name):
        procs[name] = sidecars(COOP)
        workers[name] = Worker(name, procs[name], g, topic, ledger)
        workers[name].start()

    def check_step(what, before, after):
        """Each process keeps the epoch of every partition it keeps."""
        for name in before:
            if name not in after:
                continue
            for p, ep in before[name].items():
                if p in after[name]:
                    assert after[name][p] == ep, f"{what}: {name} kept {p}, epoch {ep} -> " \
                        f"{after[name][p]}"
        print(f"{what}: " + ", ".join(f"{n} {sorted(v)}" for n, v in after.items()))

    def view():
        names = sorted(procs)
        return dict(zip(names, settled([procs[n] for n in names], g, nparts)))

    start("P1")
    wait_for(lambda: len(ledger.accepted) > 2000, 60, 0.2, "P1 streams")
    snap = view()
    for name in ("P2", "P3"):
        start(name)
        now = view()
        check_step(f"{name} joined", snap, now)
        snap = now
        time.sleep(1)
    # P2 leaves; its partitions go to the others, who keep theirs.
    workers["P2"].stop()
    assert procs["P2"].stop() == 0
    left = procs.pop("P2")
    now = view()
    check_step("P2 left", snap, now)
    snap = now
    start("P4")
    now = view()
    check_step("P4 joined", snap, now)
    finish(list(procs.values()), ledger, g, topic, ends, list(workers.values()))
    for sc in [*procs.values(), left]:
        assert_clean_log(sc)
    stale_kept = [x for x in ledger.rejected if "epoch" in x[3] and x[1] in snap.get(x[0], {})]
    print(f"rejected acks: {len(ledger.rejected)}; on partitions kept at the end: "
          f"{len(stale_kept)}")
    for sc in procs.values():
        assert sc.stop() == 0


def test_c_a_join_that_waits_for_a_killed_member_loses_nothing_kept(bootstrap, sidecars):
    """P2 is killed and P3 joins at once: P1's rejoin (which comes with no callback) waits
    for P2's session to time out while P1 keeps acking. Commits sent then must not carry
    the old generation into the new one (on 2.0.2 that made P1 lose every partition)."""
    nparts = 8
    topic, g, ends = topic_of(bootstrap, "coopk", nparts, 64000)
    ledger, dead = Ledger(), Ledger()
    p1, w1 = with_worker(sidecars, "P1", g, topic, ledger)
    wait_for(lambda: len(owned(p1, g)) == nparts and len(ledger.accepted) > 2000, 60, 0.2,
             "P1 streams all partitions")
    p2, w2 = with_worker(sidecars, "P2", g, topic, dead)  # its acks may come again after its kill
    v1, v2 = settled([p1, p2], g, nparts)
    p2.stop(sig=signal.SIGKILL)
    w2.stop()
    p3, w3 = with_worker(sidecars, "P3", g, topic, ledger)
    t0 = time.time()
    a1, a3 = settled([p1, p3], g, nparts)
    print(f"after the kill and the join: settled in {time.time() - t0:.1f} s, P1 {sorted(a1)}, "
          f"P3 {sorted(a3)}; {len(ledger.accepted)} of 64000 acked so far")
    for p, ep in v1.items():
        if p in a1:
            assert a1[p] == ep, f"P1 kept partition {p}, epoch {ep} -> {a1[p]}"
    assert_clean_log(p1)
    everything = {(p, o) for p, e in ends.items() for o in range(e)}
    wait_for(lambda: ledger.accepted | dead.accepted >= everything, 120, 1, "every record acked")
    for w in (w1, w3):
        w.stop()
        assert not w.errors, w.errors
    st, body = p1.get(f"/v1/groups/{g}")
    assert st == 200 and body["counters"]["acks_lost_to_move"] == 0, body["counters"]
    assert_clean_log(p1)
    assert p1.stop() == 0 and p3.stop() == 0
