"""Bench: drain rate of one partition whose commit metadata overflows (issue 10 part 1).

One partition, N records, 97 keys, key ordering; an HTTP client fetches 500 at a time
(subscriber credits 5000), acks 90% of each batch at once and the other 10% three fetches
later. Runs with each commit.metadata_max_bytes given and prints records/s; a run that
delivers nothing for --stall-s seconds is reported as stalled. Asserts nothing about speed.

  KSIDECAR_TEST_BOOTSTRAP=127.0.0.1:53451 python3 tests/bench/held_back.py \\
      --bin build/ksidecar --records 100000 --meta 4096 512
"""
import argparse
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
import conftest  # noqa: E402
from slow_acker import SlowAcker  # noqa: E402


def run(bootstrap, n, meta, stall_s):
    topic, g = conftest.unique("bheld"), conftest.unique("gheld")
    conftest.create_topic(bootstrap, topic, 1)
    conftest.produce(bootstrap, topic, n, keys=97)
    sc = conftest.Sidecar(bootstrap, args=["--subscriber.max_records=5000",
                                           f"--commit.metadata_max_bytes={meta}"])
    client = SlowAcker(g, topic, seed=3)
    try:
        while not client.step(sc):  # the first delivery starts the clock
            pass
        t0 = time.time()
        first = len(client.acked)
        while len(client.acked) < n and client.gap_now() < stall_s:
            client.step(sc)
        dt = time.time() - t0
        held = sc.logs().count("commit metadata exceeds")
        status = sc.get(f"/v1/groups/{g}")[1]["partitions"][0]
        done = len(client.acked)
        word = "stalled" if done < n else "drained"
        print(f"metadata_max_bytes={meta}: {word}, {done - first} records acked in {dt:.1f} s = "
              f"{(done - first) / dt:,.0f} rec/s; {client.fetches} fetches, {client.empty} empty; truncation warnings {held}, "
              f"metadata_truncations {status['metadata_truncations']}, "
              f"committed {status['committed_offset']} of {n}", flush=True)
    finally:
        sc.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=conftest.BIN)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--meta", type=int, nargs="+", default=[4096, 512])
    ap.add_argument("--stall-s", type=float, default=20)
    a = ap.parse_args()
    conftest.BIN = os.path.abspath(a.bin)
    bootstrap = os.environ.get("KSIDECAR_TEST_BOOTSTRAP", "127.0.0.1:53451")
    for m in a.meta:
        run(bootstrap, a.records, m, a.stall_s)


if __name__ == "__main__":
    main()
