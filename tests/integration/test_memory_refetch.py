"""The memory budget with many partitions and a fast client: a partition is paused in
librdkafka before a fetch its window could take only part of, and waits for room for a
whole one before it fetches again, so that budget pauses throw little of what librdkafka
fetched away. Before that, at 64 partitions of 1 MB producer batches, each paused queue
held a whole fetch of which the window had taken a few hundred records: librdkafka
fetched every record three to four times over. Counted by the partitions' budget_dropped_records;
the client is ksbench (the C gRPC client of tests/bench), draining the backlog at full
speed."""
import os
import subprocess

from conftest import ROOT, create_topic, kstool, unique

KSBENCH = os.environ.get("KSIDECAR_TEST_KSBENCH", str(ROOT / "build" / "ksbench"))
PARTS = 64
PER_PART = 24000  # x 100 B: about three producer batches of 1 MB a partition
BUDGET = 256 << 20  # the default: a window share of 3 MiB, pressed at 64 MiB


def test_budget_pauses_drop_little_of_what_was_fetched(bootstrap, sidecars):
    topic = unique("trefetch")
    create_topic(bootstrap, topic, PARTS)
    total = PARTS * PER_PART
    kstool("produce", "-b", bootstrap, "-t", topic, "-n", str(total), "-p", str(PARTS),
           "-s", "100", "-N")
    sc = sidecars([f"--memory.max_bytes={BUDGET}", "--subscriber.max_credit_records=100000"])
    g = unique("refetch")
    out = subprocess.run([KSBENCH, "grpc", "--addr", f"127.0.0.1:{sc.grpc_port}", "--topic", topic,
                          "--group", g, "--count", str(total), "--credits", "20000",
                          "--ack-batch", "2000"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    res = dict(kv.split("=", 1) for kv in out.stdout.split("\n")[-2].split())
    assert int(res["distinct"]) == total and int(res["duplicates"]) == 0, res
    st, gs = sc.get(f"/v1/groups/{g}")
    assert st == 200, gs
    parts = gs["partitions"]
    assert len(parts) == PARTS, gs
    pauses = sum(p["budget_pauses"] for p in parts)
    dropped = sum(p["budget_dropped_records"] for p in parts)
    print(f"{PARTS} partitions x {PER_PART} x 100 B, budget {BUDGET >> 20} MiB: {res['rate']} "
          f"rec/s, {pauses} budget pauses, {dropped} fetched records dropped "
          f"({dropped / total:.2f} of the backlog)")
    # The budget did press (the paths were taken, not dodged) ...
    assert pauses >= PARTS, pauses
    # ... and what its pauses threw away, to be fetched again, is a part of the backlog:
    # 0.12 to 0.28 of it measured (mostly what the first fetches of all partitions at once
    # bring past the budget), 3.4 to 3.5 times it before this change.
    assert dropped <= total * 3 // 4, (dropped, total)
