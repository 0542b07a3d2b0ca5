"""A/B runs of one row of bench.py for two or more ksidecar binaries, alternating, each round
native first, over one topic of N records on 8 partitions. Prints each run and its ratio to
that round's native consumer.

  tests/kafka/kafka.sh run python3 tests/bench/ab.py stream N ROUNDS BIN [BIN...]
      the HTTP NDJSON stream (ksbench stream --credits 20000 --ack-batch 5000)
  tests/kafka/kafka.sh run python3 tests/bench/ab.py push1 N ROUNDS BIN [BIN...]
      push, one record a request, 64 in flight, to build/push_app
"""
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402


def main():
    mode, n, rounds, bins = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    if mode not in ("stream", "push1") or not bins:
        raise SystemExit(__doc__)
    t = bench.uniq("ab")
    bench.produce(t, n, 8)
    for _ in range(rounds):
        g = bench.uniq("native")
        nat = float(bench.bench(["native", "--bootstrap", bench.BOOT, "--topic", t, "--group", g,
                                 "--count", n])["rate"])
        line = [f"native {nat:,.0f}"]
        for b in bins:
            if mode == "stream":
                sc = bench.started_sidecar(["--subscriber.max_records=20000"], pathlib.Path(b))
                g = bench.uniq("stream")
                r = bench.bench(["stream", "--addr", f"127.0.0.1:{sc.http}", "--topic", t,
                                 "--group", g, "--count", n, "--credits", "20000",
                                 "--ack-batch", "5000"])
                bench.check_committed(g, t, 8)
                sc.stop()
                rate = float(r["rate"])
            else:
                bench.KSIDECAR = pathlib.Path(b)
                rate, _ = bench.push_run(t, n, 8, 1, 64)
            line.append(f"{os.path.basename(b)} {rate:,.0f} ({rate / nat:.3f}x)")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
