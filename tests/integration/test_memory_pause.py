"""librdkafka pause and resume from the memory budget: with many partitions and a small
budget, a window at its share pauses its partition in librdkafka (its prefetched records
dropped) and resumes it once drained; every record still comes exactly once, in offset order
per partition (librdkafka 2.0.2's batch consume with pause and resume, NOTES.md), all get
committed, and librdkafka's part of the RSS stays small with its default fetch size."""
import time

from conftest import create_topic, kstool, unique
from test_memory_budget import peak_rss_mb

PARTS = 128
PER_PART = 2000  # x 100 B: about four window shares of a partition at this budget
BUDGET = 16 << 20  # a window share of 96 KiB
RSS_BOUND_MB = 95  # 65 MB measured; 120 MB on 5d6bd3d (no pauses: each queue keeps its fetch)


def test_budget_pauses_lose_and_repeat_nothing(bootstrap, sidecars):
    topic = unique("tpause")
    create_topic(bootstrap, topic, PARTS)
    # librdkafka's default 1 MB producer batches: one fetch takes a partition's whole backlog.
    kstool("produce", "-b", bootstrap, "-t", topic, "-n", str(PARTS * PER_PART), "-p", str(PARTS),
           "-s", "100", "-N")
    sc = sidecars([f"--memory.max_bytes={BUDGET}"])
    g = unique("pause")
    nxt = {}  # partition -> next offset expected on a first delivery
    got, redelivered, t0, queued, n = 0, 0, time.time(), [], 0
    # A slowish client: 500 records a fetch, 50 ms apart, acked at once.
    while got < PARTS * PER_PART and time.time() - t0 < 75:
        recs = sc.fetch(g, topic, max=500, wait_ms=1000)
        for r in recs:
            p, o = r["partition"], r["offset"]
            if r["attempt"] > 1:
                redelivered += 1
                continue
            assert o == nxt.get(p, 0), f"partition {p}: offset {o}, expected {nxt.get(p, 0)}"
            nxt[p] = o + 1
            got += 1
        if recs:
            st, res = sc.ack(g, [r["ack_id"] for r in recs])
            assert st == 200 and res["accepted"] == len(recs), res
        n += 1
        if n % 10 == 0 and time.time() - t0 > 5:  # what librdkafka holds once windows are full
            st, gs = sc.get(f"/v1/groups/{g}")
            assert st == 200, gs
            queued.append(sum(p["kafka_queue_records"] for p in gs["partitions"]))
        time.sleep(0.05)
    took = time.time() - t0
    rss = peak_rss_mb(sc.proc.pid)
    assert got == PARTS * PER_PART, (got, sorted(nxt.items())[:8])
    assert all(nxt[p] == PER_PART for p in range(PARTS)), nxt
    # Everything gets committed.
    deadline, parts = time.time() + 30, []
    while time.time() < deadline:
        st, gs = sc.get(f"/v1/groups/{g}")
        assert st == 200, gs
        parts = gs["partitions"]
        if len(parts) == PARTS and all(p["committed_offset"] == PER_PART for p in parts):
            break
        time.sleep(0.5)
    assert len(parts) == PARTS and all(p["committed_offset"] == PER_PART for p in parts), \
        [(p["partition"], p["committed_offset"]) for p in parts if p["committed_offset"] != PER_PART]
    pauses = sum(p.get("budget_pauses", 0) for p in parts)
    paused_parts = sum(1 for p in parts if p.get("budget_pauses", 0) > 0)
    print(f"{PARTS} partitions x {PER_PART} x 100 B, budget {BUDGET >> 20} MiB: {got} records "
          f"in {took:.1f} s, {redelivered} redelivered, {pauses} librdkafka pauses on "
          f"{paused_parts} partitions, peak RSS {rss:.0f} MB; records in librdkafka's queues "
          f"after 5 s: median {sorted(queued)[len(queued) // 2] if queued else None}, "
          f"most {max(queued, default=None)}")
    # The pauses happened (the path was tested, not dodged) and gave librdkafka's records
    # back: most of the time its queues held a small part of what is left of the backlog.
    assert pauses > PARTS, pauses
    assert queued and sorted(queued)[len(queued) // 2] < PARTS * PER_PART // 20, queued
    assert rss < RSS_BOUND_MB, f"peak RSS {rss:.0f} MB"
