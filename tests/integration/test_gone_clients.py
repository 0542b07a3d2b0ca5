"""Clients that stop reading or leave, through the real binary against the real broker: a
Subscribe stream that never reads (memory stays bounded, no attempt counts, nothing is
dead-lettered, and it is cut off after grpc.stream_stall_ms), and an HTTP long-poll whose
client left before its records came (they go back at once, attempt 1)."""
import json
import subprocess
import threading
import time

import grpc

from conftest import create_topic, produce, unique, wait_for, watermarks
from grpc_support import consumer_pb2, consumer_pb2_grpc, open_msg, start_grpc

RECORDS = 20000
SIZE = 1000
RSS_CAP_MB = 400        # the whole process, with 20 MB of records held
RSS_GROWTH_MB = 64      # from 10 s into the never-reading stream to its end
RSS_SAFETY_MB = 1000    # stop early rather than let a runaway process eat the machine


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class NeverReader:
    """A grpcio Subscribe stream that sends open and then never reads a response (nor
    half-closes: its request iterator blocks until close())."""

    def __init__(self, stub, msg):
        self._stop = threading.Event()
        self.call = stub.Subscribe(self._requests(msg))

    def _requests(self, msg):
        yield consumer_pb2.SubscribeRequest(open=msg)
        self._stop.wait()

    def close(self):
        self.call.cancel()
        self._stop.set()


def group_status(sc, group, missing_ok=False):
    st, body = sc.get(f"/v1/groups/{group}")
    if missing_ok and st == 404:  # not started yet
        return {"subscribers": [], "partitions": [], "counters": {"delivered": 0}}
    assert st == 200, (st, body)
    return body


def read_all(sc, group, topic, expect, timeout=60):
    """Fetches (HTTP, subscriber "reader") until `expect` distinct records came; acks them."""
    got = {}
    deadline = time.time() + timeout
    while len(got) < expect and time.time() < deadline:
        st, body = sc.get(f"/v1/groups/{group}/records?topic={topic}&max=5000&wait_ms=1000"
                          f"&subscriber=reader")
        assert st == 200, (st, body)
        for r in body["records"]:
            got[(r["partition"], r["offset"])] = r
        if body["records"]:
            sc.ack(group, [r["ack_id"] for r in body["records"]])
    return got


def test_never_reading_stream_holds_bounded_memory_and_counts_no_attempt(sidecars, bootstrap):
    # Two never-reading streams in one process for 60 s: group g retries forever (the
    # default), group gd (static) dead-letters after 3 attempts.
    topic, dlq = unique("stall"), unique("stall-dlq")
    g, gd = unique("gstall"), unique("gstall-dlq")
    create_topic(bootstrap, topic, 4)
    create_topic(bootstrap, dlq, 1)
    produce(bootstrap, topic, RECORDS, partitions=4, size=SIZE)
    static = json.dumps([{"name": gd, "topics": [topic], "dead_letter_topic": dlq,
                          "max_attempts": 3}])
    sc = start_grpc(sidecars, [f"--groups.static={static}", "--grpc.stream_stall_ms=120000"])
    streams = [NeverReader(sc.consumer, open_msg(grp, topic, records=100000, bytes=1 << 30,
                                                 deadline_ms=2000, subscriber="never"))
               for grp in (g, gd)]
    for grp in (g, gd):
        wait_for(lambda: any(s["name"].startswith("never") and s["outstanding"]["records"] > 0
                             for s in group_status(sc, grp, True)["subscribers"]), 60, 0.5,
                 f"records held for the never-reading stream of {grp}")
    start = time.time()
    samples, dead, stopped_early = [], 0, False
    while time.time() - start < 60:
        mb = rss_mb(sc.proc.pid)
        samples.append((time.time() - start, mb))
        dead = max(dead, group_status(sc, gd)["counters"]["dead_lettered"])
        if mb > RSS_SAFETY_MB:
            stopped_early = True
            break
        time.sleep(1)
    st = {grp: group_status(sc, grp) for grp in (g, gd)}
    print(f"RSS (s, MB): {[(round(t), round(m)) for t, m in samples[::5]]}")
    for grp in (g, gd):
        print(f"{grp}: counters {st[grp]['counters']}; subscribers {st[grp]['subscribers']}")
    for s in streams:
        s.close()
    attempts, got = {}, {}
    for grp in (g, gd):
        got[grp] = read_all(sc, grp, topic, RECORDS)
        for r in got[grp].values():
            attempts[r["attempt"]] = attempts.get(r["attempt"], 0) + 1
    dlq_count = sum(watermarks(bootstrap, dlq).values())
    print(f"readers got {[len(v) for v in got.values()]} records, by attempt {attempts}; "
          f"the dead-letter topic holds {dlq_count}")

    problems = []
    peak = max(m for _, m in samples)
    after10 = [m for t, m in samples if t >= 10]
    if stopped_early or peak > RSS_CAP_MB:
        problems.append(f"RSS reached {peak:.0f} MB (cap {RSS_CAP_MB})")
    if after10 and max(after10) - after10[0] > RSS_GROWTH_MB:
        problems.append(f"RSS grew {max(after10) - after10[0]:.0f} MB after 10 s")
    if dead or st[gd]["counters"]["dead_lettered"] or dlq_count:
        problems.append(f"{max(dead, st[gd]['counters']['dead_lettered'], dlq_count)} records "
                        "dead-lettered that no client received")
    for grp in (g, gd):
        if len(got[grp]) != RECORDS:
            problems.append(f"the reader of {grp} got {len(got[grp])} of {RECORDS} records")
    if set(attempts) - {1}:
        problems.append(f"the readers saw attempts {attempts}, not all 1")
    assert not problems, "; ".join(problems) + f"\n{sc.logs()[-3000:]}"


def test_stream_that_stops_reading_is_cut_off_and_its_records_go_back(sidecars, bootstrap):
    topic, g = unique("cut"), unique("gcut")
    n = 4000
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, n, partitions=4, size=SIZE)
    sc = start_grpc(sidecars, ["--grpc.stream_stall_ms=2000"])
    # Its own channel with BDP probing off keeps the stream's window at 64 KiB, so its
    # transport cannot take all 4 MB (grpcio grows the window past 4 MB otherwise, and a
    # stream whose transport took everything has no send waiting to be cut off); a lease
    # of 120 s means no expiry counts an attempt while the test runs.
    ch = grpc.insecure_channel(sc.grpc_target, options=[("grpc.http2.bdp_probe", 0)])
    stream = NeverReader(consumer_pb2_grpc.ConsumerStub(ch),
                         open_msg(g, topic, records=100000, bytes=1 << 30,
                                  deadline_ms=120000, subscriber="never"))
    try:
        wait_for(lambda: "grpc.stream_stall_ms" in sc.logs(), 60, 0.5,
                 "the never-reading stream to be cut off")
        wait_for(lambda: not any(s["name"].startswith("never") for s in
                                 group_status(sc, g)["subscribers"]), 10, 0.2,
                 "its subscriber gone")
        # The client only hears of it once it reads what its transport took.
        taken, code, details = 0, None, ""
        try:
            for resp in stream.call:
                taken += len(resp.batch.records)
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
        print(f"stream ended with {code}: {details}, after {taken} records its transport took")
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert "grpc.stream_stall_ms" in details, details
        t0 = time.time()
        got = read_all(sc, g, topic, n)
        print(f"reader got {len(got)} records in {time.time() - t0:.1f} s")
        assert len(got) == n
        bad = [(k, r["attempt"]) for k, r in got.items() if r["attempt"] != 1]
        assert not bad, f"{len(bad)} records not at attempt 1, e.g. {bad[:5]}"
    finally:
        stream.close()
        ch.close()


def test_long_poll_whose_client_left_gives_its_records_back_at_once(sidecars, bootstrap):
    topic, g = unique("gone"), unique("ggone")
    create_topic(bootstrap, topic, 1)
    sc = sidecars()
    wait_for(lambda: (sc.fetch(g, topic, max=1, wait_ms=500) == [] and
                      len(group_status(sc, g, True)["partitions"]) == 1), 60, 0.5, "assignment")
    url = f"{sc.base}/v1/groups/{g}/records?topic={topic}&max=100&wait_ms=10000"
    cp = subprocess.run(["curl", "-s", "--max-time", "1", url], capture_output=True, timeout=30)
    assert cp.returncode == 28, cp  # curl's "operation timed out": it left
    produce(bootstrap, topic, 5)
    t0 = time.time()
    got = {}
    while len(got) < 5 and time.time() - t0 < 20:  # the lease deadline is 30 s
        for r in sc.fetch(g, topic, max=100, wait_ms=2000):
            got[r["offset"]] = r
    took = time.time() - t0
    print(f"next fetches got {len(got)} records in {took:.1f} s: "
          f"{[(o, r['attempt']) for o, r in sorted(got.items())]}")
    assert len(got) == 5, f"{len(got)} of 5 records within 20 s\n{sc.logs()[-2000:]}"
    assert all(r["attempt"] == 1 for r in got.values()), got
    sc.ack(g, [r["ack_id"] for r in got.values()])
