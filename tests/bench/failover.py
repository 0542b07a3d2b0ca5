"""Bench: duplicates and the pause when the group coordinator's broker is killed at full speed
(issue 38). Needs the cluster mode (KSIDECAR_TEST_KAFKA_NODES=3 tests/kafka/kafka.sh run); see
tests/bench/failover.sh, which runs it before (no cap, a 10 s session) and after (ksidecar's
defaults).

A topic of 4 partitions (replication factor 3) gets --records records (kstool, acks=all);
one ksidecar serves an HTTP client that fetches 2,000 at a time and holds a twentieth of its
acks back to the next batch. Once a quarter is consumed, the broker that is the group's
coordinator is killed with kill -9 and restarted 20 s later. Prints one row: deliveries per
record, duplicates, the longest pause in deliveries after the kill, acks lost to a move.
Fails only when a record is lost."""
import argparse
import os
import pathlib
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
import conftest  # noqa: E402
import test_cluster_failover as tcf  # noqa: E402


def client(sc, g, topic, counter):
    held = []
    while not counter.stop.is_set():
        try:
            recs = sc.fetch(g, topic, max=2000, wait_ms=500)
            counter.add([(r["partition"], r["offset"]) for r in recs])
            now, held = tcf.shuffled_acks([r["ack_id"] for r in recs], held)
            if now:
                sc.ack(g, now)
        except (OSError, AssertionError):
            time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--label", default="run")
    ap.add_argument("args", nargs="*", help="ksidecar flags, e.g. --group.max_unconfirmed_acks=0")
    a = ap.parse_args()
    b = os.environ["KSIDECAR_TEST_BOOTSTRAP"]
    topic, g = conftest.unique("bfail"), conftest.unique("gfail")
    tcf.create_topic_rf3(b, topic)
    conftest.produce(b, topic, a.records, partitions=tcf.PARTS)
    ends = conftest.watermarks(b, topic)
    total = sum(ends.values())
    sc = conftest.Sidecar(b, args=["--subscriber.max_records=10000", *a.args],
                          kafka_timeouts=False)
    counter = tcf.Counter()
    th = threading.Thread(target=client, args=(sc, g, topic, counter), daemon=True)
    th.start()
    conftest.wait_for(lambda: counter.distinct() >= total // 4, 300, 0.05, "a quarter")
    victim = tcf.coordinator(b, g)
    t0 = time.time()
    tcf.kafka("node", "kill", str(victim))
    time.sleep(20)
    tcf.kafka("node", "start", str(victim))
    conftest.wait_for(lambda: counter.distinct() >= total, 600, 0.5, "every record")
    deliveries = sum(counter.seen.values())
    conftest.wait_for(lambda: all(
        p["committed_offset"] == ends[p["partition"]]
        for p in sc.get(f"/v1/groups/{g}")[1]["partitions"]) or None, 120, 0.5, "committed")
    counter.stop.set()
    th.join(10)
    lost_to_move = sc.get(f"/v1/groups/{g}")[1]["counters"]["acks_lost_to_move"]
    sc.stop()
    print(f"{a.label}: {total} records, coordinator node {victim} killed at 25%: "
          f"{deliveries} deliveries ({deliveries / total:.2f}x), "
          f"{deliveries - total} duplicates, longest pause {counter.gap_after(t0):.1f} s, "
          f"acks lost to a move {lost_to_move}; ksidecar flags: {' '.join(a.args) or '(defaults)'}")


if __name__ == "__main__":
    main()
