"""Ordered batches (issue 22) from a raw gRPC client: a subscriber that opens with
ordered_batches gets several records of a key (or, with group.ordering partition, of a
partition) at once and processes them one after another in the order received, while other
keys run in parallel. With random small handler delays, 10% random nacks, a kill -9 of
ksidecar mid-run (and its restart) and a second ksidecar joining the group, every key's
records must still be processed in offset order: at each handler start, every earlier record
of its key has been processed to an ack before (a run restarting after a nack, a crash or a
move begins at the key's lowest record not yet acked, never past it), no two records of a
key are processed at once, nothing is lost, and the group commits every partition to its
end. A client that does not ask keeps one record in flight per key."""
import collections
import random
import signal
import threading
import time

import pytest

from conftest import create_topic, kstool, produce, unique, wait_for, watermarks
from grpc_support import ACCEPTED, STALE, StreamClosed, SubscribeStream, consumer_pb2, start_grpc

RECORDS = 20000
IN_FLIGHT = 64  # ordering.max_in_flight_per_key: a nack takes back at most this many
CREDITS = 400


def committed(bootstrap, group, topic, partitions):
    """{partition: committed offset}, read from the broker with kstool."""
    out = kstool("committed", "-b", bootstrap, "-t", topic, "-g", group, "-p", str(partitions))
    res = {}
    for line in out.split("\n"):
        if line.strip():
            cols = line.split()
            res[int(cols[0])] = int(cols[1])
    return res


def all_committed(bootstrap, group, topic, ends):
    """True once every partition that holds records is committed to its end."""
    got = committed(bootstrap, group, topic, len(ends))
    return all(got.get(p) == end for p, end in ends.items() if end > 0) or False


class Journal:
    """What every handler did, in one order: ("start", stream, chain, offset, key) at a
    handler's start and ("ack"|"nack", ...) at its end. Also tracks which records of each
    chain are being processed, to catch two at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []
        self.running = collections.defaultdict(set)
        self.overlaps = []

    def start(self, stream, chain, offset, key):
        with self.lock:
            if self.running[chain]:
                self.overlaps.append((chain, offset, sorted(self.running[chain])))
            self.running[chain].add(offset)
            self.events.append(("start", stream, chain, offset, key))

    def end(self, stream, chain, offset, key, ok):
        with self.lock:
            self.running[chain].discard(offset)
            self.events.append(("ack" if ok else "nack", stream, chain, offset, key))


class OrderedClient:
    """One Subscribe stream and its handlers, as a client library would run them: records
    queue per ordering chain, a pool of workers takes one chain at a time and runs its
    records one after another; acks go out in batches every few ms. After a nack of X the
    chain's queued later records are dropped, and so are later records of the chain that
    still arrive (sent before the server took the nack) until X comes again."""

    def __init__(self, sc, group, topic, journal, name, ordering, ordered=True, workers=6,
                 seed=0):
        self.sc, self.journal, self.name, self.ordering = sc, journal, name, ordering
        self.rng = random.Random(seed)
        self.rng_lock = threading.Lock()
        self.lock = threading.Condition()
        self.queues = collections.defaultdict(collections.deque)
        self.busy, self.ready, self.skip = set(), collections.deque(), {}
        self.chain_ids = collections.defaultdict(set)  # true chain -> ordering_chain values
        self.pending_acks = []
        self.dropped = 0
        self.closed = False
        self.stream = SubscribeStream(sc.consumer, consumer_pb2.Open(
            group=group, topics=[topic], credits=consumer_pb2.Credits(records=CREDITS),
            subscriber=name, ordered_batches=ordered))
        self.threads = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=self._flush, daemon=True)]
        self.threads += [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]
        for t in self.threads:
            t.start()

    def chain_of(self, r):
        """The chain the test knows the record by: (partition, key), or the partition."""
        return r.partition if self.ordering == "partition" else (r.partition, r.key)

    def _read(self):
        try:
            while not self.closed:
                resp = self.stream.get(0.2)
                if resp is None:
                    continue
                kind = resp.WhichOneof("kind")
                if kind == "batch":
                    self._arrived(resp.batch.records)
                elif kind == "revocation":
                    gone = {tp.partition for tp in resp.revocation.partitions}
                    with self.lock:
                        for ck in list(self.queues):
                            if ck[0] in gone:
                                self.dropped += len(self.queues[ck])
                                self.queues[ck].clear()
                        for ck in list(self.skip):
                            if ck[0] in gone:
                                del self.skip[ck]
        except StreamClosed:
            pass
        with self.lock:
            self.closed = True
            for q in self.queues.values():
                q.clear()
            self.lock.notify_all()

    def _arrived(self, records):
        with self.lock:
            for r in records:
                self.chain_ids[self.chain_of(r)].add(r.ordering_chain)
                ck = (r.partition, r.ordering_chain or ("none", r.offset))
                if ck in self.skip:
                    if r.offset > self.skip[ck]:
                        self.dropped += 1  # taken back by the server: it comes again
                        continue
                    del self.skip[ck]
                self.queues[ck].append(r)
                if ck not in self.busy and ck not in self.ready:
                    self.ready.append(ck)
                    self.lock.notify()

    def _work(self):
        while True:
            with self.lock:
                while not self.ready and not self.closed:
                    self.lock.wait(0.2)
                if self.closed:
                    return
                ck = self.ready.popleft()
                self.busy.add(ck)
            while True:
                with self.lock:
                    if self.closed or not self.queues[ck]:
                        self.busy.discard(ck)
                        break
                    r = self.queues[ck].popleft()
                if not self._handle(ck, r):
                    with self.lock:
                        self.busy.discard(ck)
                    break

    def _handle(self, ck, r):
        """Runs one record's handler; False when it nacked (the rest of its chain waits)."""
        chain = self.chain_of(r)
        self.journal.start(self.name, chain, r.offset, r.key)
        with self.rng_lock:
            delay = self.rng.random() * 0.002 if self.rng.random() < 0.3 else 0
            ok = self.rng.random() >= 0.1
        if delay:
            time.sleep(delay)
        self.journal.end(self.name, chain, r.offset, r.key, ok)
        if ok:
            with self.lock:
                self.pending_acks.append(r.ack_id)
            return True
        with self.lock:
            later = self.queues[ck]
            self.dropped += len(later)
            later.clear()
            self.skip[ck] = r.offset
        self.stream.nack([r.ack_id])
        return False

    def _flush(self):
        while not self.closed:
            time.sleep(0.005)
            with self.lock:
                ids, self.pending_acks = self.pending_acks, []
            if ids:
                self.stream.ack(ids)

    def close(self):
        self.stream.cancel()
        self.closed = True
        for t in self.threads:
            t.join(10)


def check_order(journal, ends, ordering):
    """Every handler start: every earlier record of its chain was processed to an ack before
    (never skipping one); consecutive records of a chain are its next offset or a restart.
    Returns (runs restarted, records processed)."""
    starts = [e for e in journal.events if e[0] == "start"]
    offsets = collections.defaultdict(set)
    for _, _, chain, off, _ in starts:
        offsets[chain].add(off)
    # Nothing lost: every record of every partition was processed at least once.
    seen = collections.defaultdict(set)
    for chain, offs in offsets.items():
        seen[chain if ordering == "partition" else chain[0]] |= offs
    for p, end in ends.items():
        missing = set(range(end)) - seen[p]
        assert not missing, f"partition {p}: never processed {sorted(missing)[:20]}"
    succ = {}
    for chain, offs in offsets.items():
        s = sorted(offs)
        succ[chain] = dict(zip(s, s[1:]))
    acked = collections.defaultdict(set)
    lowest_unacked = {chain: min(offs) for chain, offs in offsets.items()}
    last = {}
    restarts = 0
    for kind, stream, chain, off, _ in journal.events:
        if kind == "ack":
            acked[chain].add(off)
            lo = lowest_unacked[chain]
            while lo is not None and lo in acked[chain]:
                lo = succ[chain].get(lo)
            lowest_unacked[chain] = lo
            continue
        if kind != "start":
            continue
        lo = lowest_unacked[chain]
        assert lo is None or off <= lo, (
            f"chain {chain}: offset {off} processed (by {stream}) while {lo} of the same chain "
            f"had not been processed to an ack")
        if chain in last and succ[chain].get(last[chain]) != off:
            restarts += 1
        last[chain] = off
    assert not journal.overlaps, f"records of one chain processed at once: {journal.overlaps[:5]}"
    return restarts, len(starts)


def acked_count(journal):
    with journal.lock:
        return len({(e[2], e[3]) for e in journal.events if e[0] == "ack"})


@pytest.mark.parametrize("ordering,keys", [("key", 10), ("key", 1), ("partition", 10),
                                           ("partition", 1)])
def test_ordered_batches_keep_order_through_nacks_crash_and_join(bootstrap, sidecars, ordering,
                                                                 keys):
    parts = 4 if keys > 1 else 2
    topic, g = unique("tord"), unique("gord")
    create_topic(bootstrap, topic, parts)
    produce(bootstrap, topic, RECORDS, keys=keys)
    ends = watermarks(bootstrap, topic)
    assert sum(ends.values()) == RECORDS
    args = [f"--group.ordering={ordering}", f"--ordering.max_in_flight_per_key={IN_FLIGHT}"]
    journal = Journal()
    t0 = time.time()
    a = start_grpc(sidecars, args)
    clients = [OrderedClient(a, g, topic, journal, "a1", ordering, seed=1)]
    wait_for(lambda: acked_count(journal) >= RECORDS // 4, 60, 0.05, "a quarter processed")
    # kill -9 mid-run: acks not committed yet come again; then the same process restarts.
    a.stop(sig=signal.SIGKILL)
    clients[0].close()
    a2 = start_grpc(sidecars, args)
    clients.append(OrderedClient(a2, g, topic, journal, "a2", ordering, seed=2))
    wait_for(lambda: acked_count(journal) >= RECORDS // 2, 90, 0.05, "half processed")
    # A second process joins the group: partitions move between the two.
    b = start_grpc(sidecars, args)
    clients.append(OrderedClient(b, g, topic, journal, "b1", ordering, seed=3))
    try:
        wait_for(lambda: all_committed(bootstrap, g, topic, ends), 100, 0.5,
                 f"every partition committed to its end {ends}")
    finally:
        for c in clients:
            c.close()
    took = time.time() - t0
    restarts, processed = check_order(journal, ends, ordering)
    nacks = sum(1 for e in journal.events if e[0] == "nack")
    dropped = sum(c.dropped for c in clients)
    by_stream = collections.Counter(e[1] for e in journal.events if e[0] == "start")
    print(f"ordering={ordering} keys={keys}: {processed} handler runs for {RECORDS} records "
          f"({dict(by_stream)}), {nacks} nacks, {restarts} runs restarted, {dropped} records "
          f"dropped as taken back, {took:.1f} s")
    if keys > 1:  # the joining process took partitions over
        assert by_stream["b1"] > 0
    # Several records of a chain were out at once (else this tests nothing new), and every
    # record of a chain carried one nonzero ordering_chain.
    assert dropped > 0
    for c in clients:
        for chain, ids in c.chain_ids.items():
            assert len(ids) == 1 and 0 not in ids, (chain, ids)
    assert b.stop() == 0
    assert a2.stop() == 0


def take_until_quiet(stream, first=30.0, quiet=1.0):
    """The records a stream gets, the first within `first` seconds, until none come for
    `quiet` seconds."""
    recs = []
    deadline = time.time() + first
    while True:
        resp = stream.get(quiet if recs else max(deadline - time.time(), 0))
        if resp is None:
            return recs
        if resp.WhichOneof("kind") == "batch":
            recs.extend(resp.batch.records)


def test_plain_client_keeps_one_in_flight_per_key(bootstrap, sidecars):
    """Without ordered_batches a client holds one record per key until it acks it, and its
    records carry no ordering_chain; with it, several of a key come at once, in order."""
    topic, g = unique("tplain"), unique("gplain")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 400, keys=10)
    sc = start_grpc(sidecars, [f"--ordering.max_in_flight_per_key={IN_FLIGHT}"])
    s = SubscribeStream(sc.consumer, consumer_pb2.Open(group=g, topics=[topic]))
    try:
        seen = set()
        for _ in range(3):
            recs = take_until_quiet(s)
            keys = [(r.partition, r.key) for r in recs]
            assert len(recs) == 10 and len(set(keys)) == 10, keys
            assert all(r.ordering_chain == 0 for r in recs)
            assert not seen & {(r.partition, r.offset) for r in recs}
            seen |= {(r.partition, r.offset) for r in recs}
            s.ack([r.ack_id for r in recs])
    finally:
        s.cancel()
    g2 = unique("gord")
    s = SubscribeStream(sc.consumer, consumer_pb2.Open(group=g2, topics=[topic],
                                                       ordered_batches=True))
    try:
        recs = take_until_quiet(s)
        by_key = collections.defaultdict(list)
        for r in recs:
            by_key[(r.partition, r.key)].append(r)
        assert len(by_key) == 10
        for rs in by_key.values():
            assert len(rs) == 40  # all 40 of the key (under the bound of 64), in offset order
            assert [r.offset for r in rs] == sorted(r.offset for r in rs)
            assert len({r.ordering_chain for r in rs}) == 1 and rs[0].ordering_chain != 0
        # A nack of a key's 3rd record takes back the later ones: acks for them are refused,
        # and the key comes again from that record on, in order.
        rs = sorted(by_key[next(iter(by_key))], key=lambda r: r.offset)
        s.ack([r.ack_id for r in rs[:2]])
        s.nack([rs[2].ack_id])
        s.ack([rs[5].ack_id])
        results, again = {}, []
        deadline = time.time() + 10
        while time.time() < deadline and (rs[5].ack_id not in results or len(again) < 38):
            resp = s.get(0.5)
            if resp is None:
                continue
            if resp.WhichOneof("kind") == "ack_results":
                results.update({x.ack_id: x.status for x in resp.ack_results.results})
            elif resp.WhichOneof("kind") == "batch":
                mine = [r for r in resp.batch.records if r.key == rs[0].key and
                        r.partition == rs[0].partition]
                again.extend(mine)
                # After a failure the key goes out a few at a time, more with each ack.
                if mine:
                    s.ack([r.ack_id for r in mine])
        assert results[rs[0].ack_id] == ACCEPTED
        assert results[rs[5].ack_id] == STALE  # taken back: not leased any more
        assert [r.offset for r in again] == [r.offset for r in rs[2:]]
        # Each a new delivery number: the taken-back ones' ids stay stale (they do not count
        # toward max_attempts, though).
        assert again[0].attempt == 2 and again[1].attempt == 2
    finally:
        s.cancel()
    assert sc.stop() == 0


def test_http_fetch_ordered_batches(bootstrap, sidecars):
    """HTTP fetch takes ordered_batches too; its records then carry ordering_chain as a
    decimal string, several of a key at once. Without it they carry none and come one per
    key until acked."""
    topic = unique("thttpord")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 30, keys=3)
    sc = sidecars()

    def fetch_all(g, extra, want):
        recs = []
        deadline = time.time() + 30
        while len(recs) < want and time.time() < deadline:
            st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&max=100&wait_ms=500{extra}")
            assert st == 200, body
            recs += body["records"]
        return recs

    gp = unique("ghttpord")
    plain = fetch_all(gp, "", 3)
    st, body = sc.get(f"/v1/groups/{gp}/records?topic={topic}&max=100&wait_ms=1000")
    assert st == 200 and body["records"] == [], body  # nothing more while those are out
    assert len(plain) == 3 and len({r["key"] for r in plain}) == 3, plain
    assert all("ordering_chain" not in r for r in plain)
    g = unique("ghttpord")
    recs = fetch_all(g, "&ordered_batches=true&subscriber=o1", 30)
    assert len(recs) == 30
    chains = collections.defaultdict(list)
    for r in recs:
        chains[r["key"]].append(r)
    assert len(chains) == 3
    for rs in chains.values():
        assert len({r["ordering_chain"] for r in rs}) == 1, rs
        assert int(rs[0]["ordering_chain"]) > 0
        assert [r["offset"] for r in rs] == sorted(r["offset"] for r in rs)
    st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&ordered_batches=maybe")
    assert st == 400 and "ordered_batches" in body["error"]["message"], body
    assert sc.stop() == 0
