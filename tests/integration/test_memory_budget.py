"""The process's one memory budget (memory.max_bytes): with many partitions, a backlog and a
slow client, every window stays within its share, the budget's tally within the budget, and
the process's RSS within a generous bound; the status shows the budget and its use."""
import json
import subprocess
import threading
import time

from conftest import create_topic, kstool, unique
from grpc_support import grpcurl_path

PARTS = 128
PER_PART = 3000  # x 100 B: far more than a partition's share of a 32 MiB budget
BUDGET = 32 << 20
RSS_BOUND_MB = 100  # 49 MB measured with the budget; 150+ MB before it


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_windows_stay_within_their_share_with_many_partitions_and_a_slow_client(bootstrap, sidecars):
    topic = unique("tmem")
    create_topic(bootstrap, topic, PARTS)
    # In 16 KB producer batches (a Java producer's default): a fetch returns at least one
    # whole batch, so librdkafka holds about one batch a partition whatever its limits.
    kstool("produce", "-b", bootstrap, "-t", topic, "-n", str(PARTS * PER_PART), "-p", str(PARTS),
           "-s", "100", "-N", "-B", "16384")
    # librdkafka's part: at its queue limit a partition still takes one more fetch of up to
    # fetch.message.max.bytes (1 MiB by default, about 5 MB of memory in 100-byte records),
    # which no budget bounds; a sidecar with many partitions sets it lower, as here.
    sc = sidecars([f"--memory.max_bytes={BUDGET}", "--kafka.fetch.message.max.bytes=16384"])
    g = unique("mem")
    acked, worst, worst_used, share, t0 = 0, 0, 0, None, time.time()
    # The slow client: 100 records every 100 ms, acked; long enough for every window to fill.
    while time.time() - t0 < 25:
        ids = [r["ack_id"] for r in sc.fetch(g, topic, max=100, wait_ms=1000)]
        if ids:
            st, res = sc.ack(g, ids)
            assert st == 200 and res["accepted"] == len(ids), res
            acked += len(ids)
        rss = peak_rss_mb(sc.proc.pid)
        assert rss < RSS_BOUND_MB, f"peak RSS {rss:.0f} MB with {PARTS} partitions"
        st, gs = sc.get(f"/v1/groups/{g}")
        assert st == 200, gs
        mem = gs["memory"]
        assert mem["max_bytes"] == BUDGET
        share = mem["window_share_bytes"]
        if len(gs["partitions"]) == PARTS:
            assert mem["partitions"] == PARTS, mem
            assert share == BUDGET * 3 // 4 // PARTS, mem
        # A window may pass its share by one record (its last batch is cut to fit).
        slack = 2048
        for p in gs["partitions"]:
            assert p["window_memory_bytes"] <= share + slack, (p, mem)
            worst = max(worst, p["window_memory_bytes"])
        assert mem["used_bytes"] <= BUDGET * 3 // 4 + PARTS * slack, mem
        worst_used = max(worst_used, mem["used_bytes"])
        time.sleep(0.1)
    rss = peak_rss_mb(sc.proc.pid)
    print(f"{PARTS} partitions, {PER_PART} x 100 B each, budget {BUDGET >> 20} MiB: peak RSS "
          f"{rss:.0f} MB, budget used at most {worst_used / 2**20:.1f} MiB, share "
          f"{share / 1024:.0f} KiB, largest window {worst / 1024:.0f} KiB, acked {acked}")
    # The windows did fill (the bound was reached, not dodged), and records kept flowing.
    assert worst > share // 2, (worst, share)
    assert acked >= 2000, acked
    # /v1/groups shows the same budget.
    st, all_ = sc.get("/v1/groups")
    assert st == 200
    mine = [x for x in all_["groups"] if x["group"] == g]
    assert mine and mine[0]["memory"]["max_bytes"] == BUDGET, all_
    # And so does gRPC GetGroup (grpcurl: int64 as strings, camelCase names).
    gc = grpcurl_path()
    if gc:
        r = subprocess.run([gc, "-plaintext", "-d", json.dumps({"group": g}),
                            f"127.0.0.1:{sc.grpc_port}", "ksidecar.v1.Consumer/GetGroup"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        gg = json.loads(r.stdout)
        assert gg["memory"]["maxBytes"] == str(BUDGET), gg["memory"]
        assert gg["memory"]["partitions"] == str(PARTS), gg["memory"]
        assert int(gg["memory"]["windowShareBytes"]) == BUDGET * 3 // 4 // PARTS, gg["memory"]
        assert all(int(p.get("windowMemoryBytes", 0)) <= share + 2048 for p in gg["partitions"])
        assert any(int(p.get("windowMemoryBytes", 0)) > 0 for p in gg["partitions"])
    else:
        print("grpcurl not found: GetGroup not checked")


def test_memory_budget_range_is_checked(bootstrap):
    from conftest import BIN
    r = subprocess.run([BIN, f"--kafka.bootstrap.servers={bootstrap}", "--memory.max_bytes=1000",
                        "--print-config"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r
    assert "memory.max_bytes" in r.stderr, r.stderr


GROUPS, GROUP_PARTS, GROUP_RECS = 10, 8, 40_000  # 4 MB a group: 40 MB, past a 24 MiB budget
GROUPS_BUDGET = 24 << 20
# One bound for the whole process: the budget, the groups' fetch responses in flight (an
# eighth of the budget, 1 MiB at least a group), ksidecar's 4 malloc arenas and what each
# group costs besides (threads, librdkafka's handle: ~0.3 MB idle). 64 MB measured.
GROUPS_RSS_BOUND_MB = 100


def test_many_groups_share_one_budget(bootstrap, sidecars):
    """Ten groups drained at once by fast clients through one ksidecar with a small budget:
    the groups started later get smaller fetch sizes from what the earlier ones left of the
    budget's fetch part, and the process's peak RSS stays within one bound."""
    topics = [unique("tmg") for _ in range(GROUPS)]
    for t in topics:
        create_topic(bootstrap, t, GROUP_PARTS)
        kstool("produce", "-b", bootstrap, "-t", t, "-n", str(GROUP_RECS), "-p", str(GROUP_PARTS),
               "-s", "100", "-N")
    sc = sidecars([f"--memory.max_bytes={GROUPS_BUDGET}"])
    groups = [unique("gmg") for _ in topics]
    got = {g: 0 for g in groups}
    # One at a time, so the order of their starts (and so their fetch sizes) is known.
    for g, t in zip(groups, topics):
        recs = sc.fetch(g, t, max=1, wait_ms=20000)
        assert recs, g
        st, res = sc.ack(g, [r["ack_id"] for r in recs])
        assert st == 200, res
        got[g] += len(recs)
    fetch = []
    for g in groups:
        st, gs = sc.get(f"/v1/groups/{g}")
        assert st == 200, gs
        fetch.append(gs["memory"]["kafka_fetch_bytes"] * 2)  # fetch.max.bytes, half of it
    part, floor, cap = GROUPS_BUDGET // 8, 1 << 20, 2 << 20
    print(f"fetch.max.bytes of the groups in the order they started: {fetch}")
    assert all(floor <= f <= cap for f in fetch), fetch
    assert fetch == sorted(fetch, reverse=True), fetch  # later groups never get more
    within = [f for f in fetch if f > floor]
    assert sum(within) <= part, (fetch, part)
    assert fetch[0] == cap and fetch[-1] == floor, fetch

    def drain(g, t):
        deadline = time.time() + 240
        while got[g] < GROUP_RECS and time.time() < deadline:
            recs = sc.fetch(g, t, max=2000, wait_ms=1000)
            if recs:
                st, res = sc.ack(g, [r["ack_id"] for r in recs])
                assert st == 200, res
                got[g] += len(recs)

    ths = [threading.Thread(target=drain, args=(g, t)) for g, t in zip(groups, topics)]
    for th in ths:
        th.start()
    peak = 0.0
    while any(th.is_alive() for th in ths):
        peak = max(peak, peak_rss_mb(sc.proc.pid))
        assert peak < GROUPS_RSS_BOUND_MB, f"peak RSS {peak:.0f} MB with {GROUPS} groups"
        time.sleep(0.2)
    for th in ths:
        th.join()
    peak = max(peak, peak_rss_mb(sc.proc.pid))
    print(f"{GROUPS} groups x {GROUP_PARTS} partitions x {GROUP_RECS // GROUP_PARTS} records, "
          f"budget {GROUPS_BUDGET >> 20} MiB: peak RSS {peak:.0f} MB; delivered {got}")
    assert all(n >= GROUP_RECS for n in got.values()), got
    assert peak < GROUPS_RSS_BOUND_MB, peak
