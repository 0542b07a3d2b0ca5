"""An HTTP client that acks out of order: it fetches a batch, acks 90% of it at once and
holds the other 10% back for a few fetches (issue 10 part 1). Shared by test_stall.py and
tests/bench/held_back.py."""
import random
import time


class SlowAcker:
    """Drives one group over HTTP. Counts every offset acked (200 and counted as acked) and
    every delivery; checks that no two records of one key are out at once."""

    def __init__(self, group, topic, seed=1, batch=500, hold=0.10, hold_fetches=3, wait_ms=1000):
        self.group, self.topic = group, topic
        self.rnd = random.Random(seed)
        self.batch, self.hold, self.hold_fetches, self.wait_ms = batch, hold, hold_fetches, wait_ms
        self.acked = set()       # offsets whose ack was accepted
        self.deliveries = 0      # records received, redeliveries included
        self.fetches = 0
        self.empty = 0           # fetches that brought nothing
        self.held = []           # (release at fetch number, record)
        self.out_keys = {}       # key -> offset out now (delivered, not acked)
        self.last_progress = time.time()
        self.max_gap = 0.0       # longest time without a fetch that brought records

    def restarted(self):
        """ksidecar died: what was held is never acked (those ack ids are dead)."""
        self.held = []
        self.out_keys = {}

    def _ack(self, sc, recs):
        if not recs:
            return
        st, body = sc.ack(self.group, [r["ack_id"] for r in recs])
        assert st == 200 and body["acked"] == len(recs), (st, body)
        for r in recs:
            self.acked.add(r["offset"])
            self.out_keys.pop(r["key"], None)

    def step(self, sc):
        """One fetch, its acks, and the release of held records that are due. Returns the
        number of records fetched."""
        recs = sc.fetch(self.group, self.topic, max=self.batch, wait_ms=self.wait_ms)
        self.fetches += 1
        self.empty += not recs
        now = time.time()
        if recs:
            self.max_gap = max(self.max_gap, now - self.last_progress)
            self.last_progress = now
        for r in recs:
            assert r["key"] not in self.out_keys, (
                f"key order: {r['key']} offset {r['offset']} delivered while offset "
                f"{self.out_keys[r['key']]} of the same key is out")
            self.out_keys[r["key"]] = r["offset"]
        self.deliveries += len(recs)
        now_acks, later = [], []
        for r in recs:
            (later if self.rnd.random() < self.hold else now_acks).append(r)
        self._ack(sc, now_acks)
        self.held += [(self.fetches + self.hold_fetches, r) for r in later]
        due = [r for at, r in self.held if at <= self.fetches]
        self.held = [(at, r) for at, r in self.held if at > self.fetches]
        self._ack(sc, due)
        return len(recs)

    def gap_now(self):
        return time.time() - self.last_progress
