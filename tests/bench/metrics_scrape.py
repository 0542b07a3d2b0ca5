"""Bench: what GET /metrics costs (issue 20). One ksidecar holds --partitions partitions over
--groups static groups (one topic each), and a gRPC Subscribe stream (ksbench grpc) reads
--records records of another topic at full speed. Measures a scrape's time and size with
every group assigned, then the stream's rate twice: with no scrape, and with a scrape every
--every-s seconds. Checks that every scrape parses (prometheus_client) and carries each
group's lag, and that the stream lost nothing; asserts nothing about speed.

  tests/kafka/kafka.sh run python3 tests/bench/metrics_scrape.py              # 1,024 over 50
  tests/kafka/kafka.sh run python3 tests/bench/metrics_scrape.py --smoke      # a small run

Run it on an idle machine only; its figures belong in tests/bench/HISTORY.md.
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
import conftest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

KSBENCH = pathlib.Path(os.environ.get("KSIDECAR_TEST_KSBENCH", conftest.ROOT / "build" / "ksbench"))


def scrape(base):
    """(seconds, bytes, {group: lag sum}) of one GET /metrics, parsed."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        text = r.read().decode()
    dt = time.perf_counter() - t0
    lags = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "kafka_consumergroup_lag":
            for s in fam.samples:
                g = s.labels["consumergroup"]
                lags[g] = lags.get(g, 0) + s.value
    return dt, len(text), lags


def stream_rate(sc, topic, n, scrape_every):
    """Runs ksbench's gRPC Subscribe client over n records of topic in a new group, scraping
    every scrape_every seconds meanwhile (0: never). Returns (its output, scrape times)."""
    g = conftest.unique("bstream")
    times, stop = [], threading.Event()

    def scraper():
        while not stop.wait(scrape_every):
            times.append(scrape(sc.base)[0])

    th = threading.Thread(target=scraper, daemon=True) if scrape_every > 0 else None
    if th:
        th.start()
    try:
        out = conftest.subprocess.run(
            [str(KSBENCH), "grpc", "--addr", f"127.0.0.1:{sc.grpc_port}", "--topic", topic,
             "--group", g, "--count", str(n)], check=True, capture_output=True, text=True,
            timeout=3600).stdout
    finally:
        stop.set()
        if th:
            th.join()
    res = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    assert int(res["distinct"]) == n, f"the stream lost records: {out}"
    return res, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=conftest.BIN)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=1024, help="over all the groups")
    ap.add_argument("--records", type=int, default=2_000_000, help="for the stream")
    ap.add_argument("--every-s", type=float, default=1.0)
    ap.add_argument("--scrapes", type=int, default=20, help="timed with the stream idle")
    ap.add_argument("--smoke", action="store_true",
                    help="4 groups, 16 partitions, 20,000 records, a scrape every 50 ms")
    a = ap.parse_args()
    if a.smoke:
        a.groups, a.partitions, a.records, a.scrapes, a.every_s = 4, 16, 20_000, 3, 0.05
    conftest.BIN = os.path.abspath(a.bin)
    bootstrap = os.environ["KSIDECAR_TEST_BOOTSTRAP"]

    static, total = [], 0
    for i in range(a.groups):
        parts = a.partitions // a.groups + (i < a.partitions % a.groups)
        topic = conftest.unique(f"bmet{i}")
        conftest.create_topic(bootstrap, topic, parts)
        conftest.produce(bootstrap, topic, parts * 10, partitions=parts)
        static.append({"name": conftest.unique(f"gmet{i}"), "topics": [topic]})
        total += parts
    st_topic = conftest.unique("bmetstream")
    conftest.create_topic(bootstrap, st_topic, 8)
    conftest.produce(bootstrap, st_topic, a.records, partitions=8, size=100)
    sc = conftest.Sidecar(bootstrap, args=[f"--groups.static={json.dumps(static)}",
                                           "--subscriber.max_credit_records=100000"])
    try:
        def assigned():
            groups = sc.get("/v1/groups")[1]["groups"]
            return sum(len(g["partitions"]) for g in groups) == total
        conftest.wait_for(assigned, 300, 1, f"{total} partitions assigned")
        conftest.wait_for(lambda: len(scrape(sc.base)[2]) == a.groups, 120, 1, "every group's lag")
        idle = [scrape(sc.base) for _ in range(a.scrapes)]
        for _, _, lags in idle:
            assert len(lags) == a.groups, lags
        secs = [s for s, _, _ in idle]
        print(f"scrape, {total} partitions over {a.groups} groups, stream idle: median "
              f"{statistics.median(secs) * 1000:.1f} ms, max {max(secs) * 1000:.1f} ms, "
              f"{idle[-1][1]:,} bytes", flush=True)
        # The same records twice, each time by a new group: without, then with scrapes.
        plain, _ = stream_rate(sc, st_topic, a.records, 0)
        busy, during = stream_rate(sc, st_topic, a.records, a.every_s)
        r0, r1 = float(plain["rate"]), float(busy["rate"])
        print(f"gRPC stream, {a.records:,} records: {r0:,.0f} rec/s without scrapes, {r1:,.0f} "
              f"rec/s with one every {a.every_s:g} s ({r1 / r0:.2f}x); scrapes meanwhile: "
              f"{len(during)}, median {statistics.median(during) * 1000 if during else 0:.1f} ms",
              flush=True)
    finally:
        sc.stop()
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
