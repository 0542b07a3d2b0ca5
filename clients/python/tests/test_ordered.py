"""Ordered dispatch against the real ksidecar and broker: a key's (or, with
group.ordering=partition, a partition's) records are processed in offset order through
nacks, a kill -9 and restart of ksidecar, and a second ksidecar joining the group."""
import collections
import dataclasses
import random
import signal
import threading
import time

import pytest

import ksidecar
from conftest import restart_on_same_ports, unique, wait_committed_end, wait_for, watermarks

PARTS = 4


@dataclasses.dataclass
class Call:
    """One handler call, as the test logged it."""
    key: str  # partition/key, or the partition (ordering=partition)
    p: int
    off: int
    start: float
    end: float
    nacked: bool
    fut: object  # the Future of its ack's or nack's AckResult
    sub: int     # which Subscriber
    acked: bool = False  # an ack ksidecar ACCEPTED, or may have: sent before its stream broke

    def __str__(self):
        r = self.fut.result()
        return (f"{self.key} {self.p}@{self.off} sub {self.sub} {self.start:.6f}-{self.end:.6f} "
                f"{'nack' if self.nacked else 'ack'}: {r.status.name} {r.message}")


class CallLog:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []

    def count(self):
        with self.lock:
            return len(self.calls)

    def handler(self, sub, by_partition):
        """Sleeps 0-2 ms, then nacks one record in ten and acks the rest."""
        def handle(m):
            start = time.monotonic()
            key = str(m.partition) if by_partition else f"{m.partition}/{m.key!r}"
            time.sleep(random.randrange(3) / 1000.0)
            nacked = random.randrange(10) == 0
            fut = m.nack_with_result() if nacked else m.ack_with_result()
            c = Call(key, m.partition, m.offset, start, time.monotonic(), nacked, fut, sub)
            with self.lock:
                self.calls.append(c)
        return handle


def check_order(calls, end):
    """Checks every key's calls, in start order: none starts before the one before it
    ended; a run goes on from a call that acked to the key's next offset, and any other
    call starts a run, at or below the key's lowest offset not yet acked (never skipping
    one). A run may start below it: an ACCEPTED ack is not yet committed, and a kill -9 or
    a partition's move replays what the commit did not cover (at-least-once). Every record
    was processed. Returns (keys, runs started, runs started below the lowest not acked)."""
    processed = set()
    by_key = collections.defaultdict(list)
    for c in calls:
        r = c.fut.result(timeout=10)
        # An ack sent before its stream broke, whose result never came, may have been taken
        # and committed: it may count as acked, not as proof of no loss.
        unknown = r.status == ksidecar.AckStatus.STALE and "before ksidecar answered" in r.message
        c.acked = not c.nacked and (r.status == ksidecar.AckStatus.ACCEPTED or unknown)
        processed.add((c.p, c.off))
        by_key[c.key].append(c)
    for p, hi in end.items():
        for off in range(hi):
            assert (p, off) in processed, f"{p}@{off} was never processed: lost"
    restarts = replays = 0
    for key, cs in by_key.items():
        cs.sort(key=lambda c: c.start)
        offs = sorted({c.off for c in cs})
        index = {o: i for i, o in enumerate(offs)}
        acked = set()
        low = 0  # index in offs of the lowest offset not yet acked
        for i, c in enumerate(cs):
            while low < len(offs) and offs[low] in acked:
                low += 1
            lowest = offs[low] if low < len(offs) else -1
            prev = cs[i - 1] if i else None
            assert prev is None or c.start >= prev.end, (
                f"key {key}: {c.off} started at {c.start:.6f}, while {prev.off} (started "
                f"{prev.start:.6f}) still ran until {prev.end:.6f}")
            goes_on = prev is not None and not prev.nacked and index[c.off] == index[prev.off] + 1
            if not goes_on:
                restarts += 1
                replays += c.off < lowest
                if lowest >= 0 and c.off > lowest:
                    around = "\n".join(map(str, cs[max(i - 8, 0):i + 3]))
                    pytest.fail(f"key {key}: call {i} at {c.off} (after "
                                f"{prev.off if prev else -1}) while {lowest} was not yet "
                                f"acked: skipped; calls around it:\n{around}")
            if c.acked:
                acked.add(c.off)
    return len(by_key), restarts, replays


def target(sc):
    return f"127.0.0.1:{sc.grpc_port}"


def ordered_run(bootstrap, sidecars, topic, tmp_path, n, keys):
    """n records on 4 partitions (keys distinct keys; 0: none, ordering=partition) through
    two ksidecars, with nacks, a kill -9 and a restart of the first, and the second joining
    the group; then check_order."""
    by_partition = keys == 0
    mode = "--group.ordering=partition" if by_partition else "--group.ordering=key"
    t = topic(PARTS, n, size=20, keys=keys)
    g = unique("g")
    log = CallLog()
    opts = dict(backoff_initial_s=0.05, backoff_max_s=1.0)
    t0 = time.monotonic()
    a = sidecars(args=(mode,))
    a2 = None
    subs = []
    try:
        sub_a = ksidecar.Subscriber(target(a), g, [t], **opts)
        subs.append(sub_a)
        run_a = sub_a.subscribe(log.handler(0, by_partition), workers=8)
        wait_for(lambda: log.count() >= n // 4, 60, 0.02, f"{n // 4} calls")
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        print(f"killed ksidecar -9 after {log.count()} calls")
        time.sleep(0.3)
        a2 = restart_on_same_ports(bootstrap, a, tmp_path, args=(mode,))

        wait_for(lambda: log.count() >= n * 3 // 5, 90, 0.05, f"{n * 3 // 5} calls")
        b = sidecars(args=(mode,))
        sub_b = ksidecar.Subscriber(target(b), g, [t], **opts)
        subs.append(sub_b)
        run_b = sub_b.subscribe(log.handler(1, by_partition), workers=8)
        print(f"second ksidecar joined after {log.count()} calls")

        wait_committed_end(bootstrap, g, t, PARTS, timeout=100)
        print(f"all committed after {time.monotonic() - t0:.1f} s")
        assert sub_a.close(timeout=30) is not None and run_a.result(timeout=5) is not None
        assert sub_b.close(timeout=30) is not None and run_b.result(timeout=5) is not None
        with log.lock:
            calls = list(log.calls)
        by_sub = collections.Counter(c.sub for c in calls)
        print(f"{len(calls)} calls ({by_sub[0]} on the first ksidecar, {by_sub[1]} on the "
              f"second), {sum(c.nacked for c in calls)} nacks; reconnects {sub_a.reconnects} "
              f"and {sub_b.reconnects}; dropped unhanded {sub_a.book.disp.dropped} and "
              f"{sub_b.book.disp.dropped}")
        assert sub_a.reconnects >= 1, "the first Subscriber never reconnected after the kill"
        nkeys, restarts, replays = check_order(calls, watermarks(bootstrap, t))
        print(f"{nkeys} keys: {restarts} runs started ({replays} below the lowest not acked)")
    finally:
        for s in subs:
            s.close(timeout=5)
        if a2 is not None:
            a2.stop()


@pytest.mark.parametrize("keys", [10, 1])
def test_ordered_keys(bootstrap, sidecars, topic, tmp_path, keys):
    """ordering=key: each key's records processed in offset order, with 10 keys and with 1."""
    ordered_run(bootstrap, sidecars, topic, tmp_path, 20000, keys)


def test_ordered_partitions(bootstrap, sidecars, topic, tmp_path):
    """ordering=partition: each partition's records processed in offset order."""
    ordered_run(bootstrap, sidecars, topic, tmp_path, 20000, 0)
