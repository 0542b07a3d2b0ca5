"""Chaos: kill -9 of ksidecar during out-of-order acks, a broker kill -9 and restart
mid-stream, and two or three ksidecar processes joining, leaving and dying on one group.

Every record is counted by (partition, offset). Lost (never acked, yet committed past or
never seen) must be 0; duplicates are allowed and printed. Each test is bounded so that
the suite stays well inside CI's time."""
import os
import pathlib
import random
import signal
import subprocess
import threading
import time

import pytest

from conftest import (KAFKA_SH, Sidecar, create_topic, kstool, produce, started_processes,
                      unique, wait_for, watermarks)

ARGS = ["--subscriber.max_records=5000", "--group.revoke_grace_ms=1000"]


class Client:
    """An HTTP consumer that acks out of order: 90% of each batch at once, the rest a few
    batches later, and spends `pace` seconds on each batch. What it holds when its sidecar
    dies is never acked. Thread-safe."""

    def __init__(self, group, topic, rnd, batch=500, hold=0.1, hold_batches=3, pace=0.3):
        self.group, self.topic, self.rnd, self.pace = group, topic, rnd, pace
        self.batch, self.hold, self.hold_batches = batch, hold, hold_batches
        self.lock = threading.Lock()
        self.acked = set()
        self.deliveries = 0
        self.last_progress = time.time()
        self.longest_gap = 0.0

    def _ack(self, sc, recs):
        if not recs:
            return
        st, body = sc.ack(self.group, [r["ack_id"] for r in recs])
        if st not in (200, 409) or "results" not in body:
            return
        with self.lock:
            for r, res in zip(recs, body["results"]):
                if res["status"] == "OK":
                    key = (r["partition"], r["offset"])
                    if key not in self.acked:
                        self.acked.add(key)
                        now = time.time()
                        self.longest_gap = max(self.longest_gap, now - self.last_progress)
                        self.last_progress = now

    def run(self, sc, stop, held=None):
        """Consumes from sc until stop is set or sc stops answering."""
        held = [] if held is None else held
        while not stop.is_set():
            try:
                recs = sc.fetch(self.group, self.topic, max=self.batch, wait_ms=500)
                with self.lock:
                    self.deliveries += len(recs)
                now_acks, later = [], []
                for r in recs:
                    (later if self.rnd.random() < self.hold else now_acks).append(r)
                self.rnd.shuffle(now_acks)
                self._ack(sc, now_acks)
                held.append(later)
                if len(held) > self.hold_batches:
                    self._ack(sc, held.pop(0))
                if recs:
                    time.sleep(self.pace)  # a client that works: the kills land mid-stream
            except Exception:  # the sidecar died under us, or answered mid-kill
                if sc.proc.poll() is not None:
                    return
                time.sleep(0.1)

    def snapshot(self):
        with self.lock:
            return set(self.acked), self.deliveries


def everything(ends):
    return {(p, o) for p, e in ends.items() for o in range(e)}


def committed(bootstrap, group, topic, partitions):
    """{partition: committed offset}, read from the broker with kstool (no Java start-up)."""
    out = kstool("committed", "-b", bootstrap, "-t", topic, "-g", group, "-p", str(partitions))
    return {int(line.split()[0]): int(line.split()[1]) for line in out.split("\n") if line.strip()}


def report(name, client, ends):
    acked, deliveries = client.snapshot()
    want = everything(ends)
    lost = want - acked
    print(f"\nchaos {name}: records {len(want)}, delivered {deliveries}, "
          f"duplicates {deliveries - len(acked & want)}, lost {len(lost)}, "
          f"longest gap without a new ack {client.longest_gap:.1f} s")
    assert not lost, f"lost {len(lost)} records, e.g. {sorted(lost)[:10]}"


def finish(bootstrap, client, sc, group, topic, ends, timeout=180):
    """Runs the client on sc until every partition is committed to its end offset (records
    acked before a crash but not committed come again and are acked again)."""
    stop = threading.Event()
    t = threading.Thread(target=client.run, args=(sc, stop), daemon=True)
    t.start()
    last = None
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            last = committed(bootstrap, group, topic, len(ends))
            if all(last.get(p) == e for p, e in ends.items()):
                break
            time.sleep(1)
        else:
            raise AssertionError(f"not committed to the end: ends {ends}, committed {last}, "
                                 f"ksidecar: {sc.get(f'/v1/groups/{group}')}")
    finally:
        stop.set()
        t.join(30)


@pytest.mark.parametrize("partitions", [1, 4])
def test_chaos_kill_9_during_out_of_order_acks(bootstrap, sidecars, partitions):
    topic, g = unique("tchaos"), unique("gchaos")
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, 25_000, partitions=partitions, keys=97)
    ends = watermarks(bootstrap, topic)
    rnd = random.Random(int.from_bytes(os.urandom(4), "little"))
    client = Client(g, topic, rnd)
    for kill in range(5):
        sc = sidecars(ARGS)
        stop = threading.Event()
        t = threading.Thread(target=client.run, args=(sc, stop), daemon=True)
        t.start()
        # Kill mid-stream: once this process delivers (its join waits out the dead
        # one's session), then 1-3 s later.
        before = len(client.snapshot()[0])
        wait_for(lambda: len(client.snapshot()[0]) > before, 60, 0.1, "a delivery")
        time.sleep(rnd.uniform(1, 3))
        sc.stop(sig=signal.SIGKILL)
        stop.set()
        t.join(30)
        time.sleep(rnd.uniform(0, 1.5))
    acked, _ = client.snapshot()
    assert len(acked) < len(everything(ends)), "every kill came after the last record"
    finish(bootstrap, client, sidecars(ARGS), g, topic, ends)
    report(f"kill -9 x5, {partitions} partition(s)", client, ends)


@pytest.fixture
def own_broker(tmp_path):
    """A broker of this test's own, which it may kill -9 and restart."""
    d = tmp_path / "kafka"
    out = subprocess.run([KAFKA_SH, "start", str(d)], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    yield d, out.stdout.strip().split("\n")[-1]
    subprocess.run([KAFKA_SH, "stop", str(d)], capture_output=True, timeout=120)


def test_chaos_broker_kill_9_and_restart_mid_stream(own_broker, tmp_path):
    d, boot = own_broker
    topic, g = unique("tbchaos"), unique("gbchaos")
    create_topic(boot, topic, 4)
    produce(boot, topic, 20_000, partitions=4, keys=97)
    ends = watermarks(boot, topic)
    rnd = random.Random(int.from_bytes(os.urandom(4), "little"))
    client = Client(g, topic, rnd)
    starter = started_processes(lambda args=(): Sidecar(boot, args=args, tmp_path=tmp_path))
    start = next(starter)
    try:
        sc = start(ARGS)
        stop = threading.Event()
        t = threading.Thread(target=client.run, args=(sc, stop), daemon=True)
        t.start()
        wait_for(lambda: len(client.snapshot()[0]) >= 6000, 60, 0.2, "6,000 acks")
        pid = int((d / "pid").read_text())
        os.killpg(pid, signal.SIGKILL)
        down = rnd.uniform(3, 8)
        time.sleep(down)
        out = subprocess.run([KAFKA_SH, "restart", str(d)], capture_output=True, text=True,
                             timeout=180)
        assert out.returncode == 0, out.stderr
        stop.set()
        t.join(30)
        assert sc.proc.poll() is None, f"ksidecar died with the broker:\n{sc.logs()}"
        finish(boot, client, sc, g, topic, ends)
        report(f"broker kill -9, down {down:.1f} s", client, ends)
        assert sc.stop() == 0
    finally:
        next(starter, None)  # kills whatever is still running


def test_chaos_two_and_three_processes_join_leave_and_die(bootstrap, sidecars):
    topic, g = unique("tmchaos"), unique("gmchaos")
    create_topic(bootstrap, topic, 8)
    produce(bootstrap, topic, 40_000, partitions=8, keys=97)
    ends = watermarks(bootstrap, topic)
    rnd = random.Random(int.from_bytes(os.urandom(4), "little"))
    client = Client(g, topic, rnd, batch=200, pace=0.25)
    running = {}  # name -> (sidecar, stop event, thread)

    def up(name):
        sc = sidecars(ARGS)
        stop = threading.Event()
        t = threading.Thread(target=client.run, args=(sc, stop), daemon=True)
        t.start()
        running[name] = (sc, stop, t)

    def down(name, sig):
        sc, stop, t = running.pop(name)
        if sig == signal.SIGTERM:
            stop.set()  # a clean leave: the client stops first, then the process drains
            t.join(30)
            assert sc.stop() == 0, sc.logs()
        else:
            sc.stop(sig=sig)
            stop.set()
            t.join(30)

    # Two join, a third joins, one dies, one leaves, one comes back, another dies.
    plan = [("up", "a"), ("up", "b"), ("up", "c"), ("kill", "b"), ("term", "a"),
            ("up", "a2"), ("kill", "c"), ("up", "b2"), ("term", "a2")]  # b2 is left
    for action, name in plan:
        if action == "up":
            up(name)
        else:
            down(name, signal.SIGKILL if action == "kill" else signal.SIGTERM)
        time.sleep(rnd.uniform(2, 4))
    # The one survivor drains the rest.
    (name,) = running
    sc, stop, t = running.pop(name)
    stop.set()
    t.join(30)
    finish(bootstrap, client, sc, g, topic, ends)
    report("2-3 processes joining, leaving, killed", client, ends)
    assert sc.stop() == 0
