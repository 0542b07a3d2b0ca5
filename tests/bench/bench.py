"""ksidecar benchmarks against a real broker, each beside a native librdkafka consumer
measured in the same run. Prints a table and rewrites the headline block of RESULTS.md (the
rest of the file is left alone; with KSIDECAR_BENCH_NO_RESULTS=1, a trial run, not even
that). Asserts no timing; it does check that every run delivered everything and committed
every partition to its end."""
import argparse
import os
import pathlib
import platform
import signal
import socket
import statistics
import subprocess
import time
import uuid

import results_md

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
# KSIDECAR_TEST_BIN, KSIDECAR_TEST_KSTOOL and KSIDECAR_TEST_KSBENCH name other binaries.
KSIDECAR, KSTOOL, KSBENCH = (pathlib.Path(os.environ.get(var, BUILD / name)) for var, name in (
    ("KSIDECAR_TEST_BIN", "ksidecar"), ("KSIDECAR_TEST_KSTOOL", "kstool"),
    ("KSIDECAR_TEST_KSBENCH", "ksbench")))
PUSH_APP = BUILD / "push_app"
BOOT = os.environ["KSIDECAR_TEST_BOOTSTRAP"]
COMMANDS = []
# --only's names for the sections, and each one's label in the table's first column.
SECTIONS = {"throughput": "1. throughput", "slow": "2. slow consumer", "memory": "3. memory",
            "latency": "4. latency", "groups": "5. many groups", "partitions": "6. partitions",
            "schema": "7. schema-aware"}
# The schema section needs a registry: tests/registry/registry.sh run sets this.
REGISTRY = os.environ.get("KSIDECAR_TEST_REGISTRY")


def sh(cmd, **kw):
    COMMANDS.append(" ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, **kw)


def uniq(p):
    return f"{p}-{uuid.uuid4().hex[:8]}"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def produce(topic, n, parts, keys=0, size=100, batch_bytes=0):
    sh([KSTOOL, "create", "-b", BOOT, "-t", topic, "-p", parts])
    args = [KSTOOL, "produce", "-b", BOOT, "-t", topic, "-n", n, "-p", parts, "-s", size, "-N"]
    if batch_bytes:
        args += ["-B", batch_bytes]
    if keys:
        args += ["-k", keys]
    t0 = time.time()
    sh(args, timeout=1800)
    return time.time() - t0


def ends(topic):
    out = sh([KSTOOL, "watermarks", "-b", BOOT, "-t", topic]).stdout
    return {int(l.split()[0]): int(l.split()[2]) for l in out.splitlines() if l.strip()}


def committed(group, topic, nparts):
    out = sh([KSTOOL, "committed", "-b", BOOT, "-t", topic, "-g", group, "-p", nparts]).stdout
    return {int(l.split()[0]): int(l.split()[1]) for l in out.splitlines() if l.strip()}


def check_committed(group, topic, nparts, timeout=60):
    want = ends(topic)
    deadline = time.time() + timeout
    got = {}
    while time.time() < deadline:
        got = committed(group, topic, nparts)
        if got == want:
            return True
        time.sleep(0.5)
    raise SystemExit(f"FAIL: group {group} committed {got}, end offsets {want}")


def parse(out):
    line = [l for l in out.splitlines() if l.startswith("mode=")][-1]
    return {k: v for k, v in (kv.split("=", 1) for kv in line.split())}


class Sidecar:
    def __init__(self, args=(), binary=None):
        self.http, self.grpc = free_port(), free_port()
        cmd = [binary or KSIDECAR, f"--kafka.bootstrap.servers={BOOT}", f"--http.listen=127.0.0.1:{self.http}",
               f"--grpc.listen=127.0.0.1:{self.grpc}", "--log.level=warn", *args]
        COMMANDS.append(" ".join(str(c) for c in cmd))
        self.proc = subprocess.Popen([str(c) for c in cmd], stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def peak_rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        rss = self.peak_rss_mb()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        if rc != 0:
            raise SystemExit(f"FAIL: ksidecar exited {rc}")
        return rss


def bench(args, timeout=3600):
    return parse(sh([KSBENCH, *args], timeout=timeout).stdout)


def http_json(port, path, body=None):
    import json
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body and json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def started_sidecar(args, binary):
    """A Sidecar that answers /healthz (a port another process took meanwhile: try again)."""
    why = ""
    for _ in range(5):
        sc = Sidecar(args, binary=binary)
        for _ in range(120):
            try:
                http_json(sc.http, "/healthz")
                return sc
            except OSError as e:
                why = f"{e!r}, exit code {sc.proc.poll()}"
                if sc.proc.poll() is not None:
                    break
                time.sleep(0.25)
        sc.proc.kill()
        sc.proc.wait()
    raise SystemExit(f"FAIL: ksidecar would not start: {why}")


def memory_by_partitions(counts, per_part, secs, binary, keep, extra=(), batch_bytes=0):
    """Peak RSS with a backlog of per_part x 100 B in every partition and a slow HTTP
    client: 100 records every 100 ms, acked. Prints one line per partition count."""
    rows = []
    for n in counts:
        per = per_part[n]
        t = f"mem{n}-{per}" + (f"-b{batch_bytes}" if batch_bytes else "")
        sh([KSTOOL, "create", "-b", BOOT, "-t", t, "-p", n])  # before any metadata look-up
        for _ in range(40):  # a new topic's metadata takes a moment
            try:
                have = sum(ends(t).values())
                break
            except subprocess.CalledProcessError:
                time.sleep(0.5)
        if have < n * per:
            secs_p = produce(t, n * per, n, batch_bytes=batch_bytes)
            print(f"preloaded {n * per:,} records ({per:,} a partition) into {t} in {secs_p:.0f} s",
                  flush=True)
        sc = started_sidecar(list(extra), binary)
        g = uniq(f"memg{n}")
        got, peak_used, worst, share, peak_queued = 0, 0, 0, None, 0
        t0 = time.time()
        while time.time() - t0 < secs:
            r = http_json(sc.http, f"/v1/groups/{g}/records?topic={t}&max=100&wait_ms=1000")
            ids = [x["ack_id"] for x in r["records"]]
            got += len(ids)
            if ids:
                http_json(sc.http, f"/v1/groups/{g}/acks", {"ack_ids": ids})
            st = http_json(sc.http, f"/v1/groups/{g}")
            if "memory" in st:
                peak_used = max(peak_used, st["memory"]["used_bytes"])
                queued = sum(p["kafka_queue_records"] for p in st["partitions"])
                peak_queued = max(peak_queued, queued)
                share = st["memory"]["window_share_bytes"]
                worst = max([worst] + [p["window_memory_bytes"] for p in st["partitions"]])
            time.sleep(0.1)
        rss = sc.stop()
        info = f" budget used peak {peak_used / 2**20:.0f} MB, share {share / 2**10:.0f} KiB, " \
                f"largest window {worst / 2**10:.0f} KiB, librdkafka queues held up to " \
                f"{peak_queued:,} records" if share else ""
        line = f"partitions={n} backlog={per:,}/partition seconds={secs} acked={got} " \
               f"peak_rss_mb={rss:.0f}{info}"
        print(line, flush=True)
        rows.append(line)
    return rows


def push_run(topic, n, nparts, batch, concurrency):
    """Push delivery of topic's n records to push_app (200 at once, keep-alive): the rate from
    the app's first record to its last, and ksidecar's peak RSS. Fails when the app did not get
    exactly n records or the group did not commit every partition to its end."""
    import json
    import urllib.request
    port = free_port()
    app = subprocess.Popen([str(PUSH_APP), str(port)], stdout=subprocess.PIPE, text=True)
    COMMANDS.append(f"{PUSH_APP} {port}")
    try:
        assert app.stdout.readline().startswith("listening"), "push_app did not start"
        g = uniq(f"push{batch}")
        grp = {"name": g, "topics": [topic],
               "push": {"url": f"http://127.0.0.1:{port}/in", "batch": batch,
                        "concurrency": concurrency}}
        sc = started_sidecar(["--groups.static=" + json.dumps([grp])], None)

        def stats():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=30) as r:
                return json.loads(r.read())
        deadline = time.time() + 1800
        while stats()["records"] < n and time.time() < deadline:
            time.sleep(0.2)
        check_committed(g, topic, nparts)
        rss = sc.stop()
        st = stats()
        if st["records"] != n:
            raise SystemExit(f"FAIL: push batch {batch}: the app got {st['records']} records of {n}")
        secs = max(st["last_us"] - st["first_us"], 1) / 1e6
        return n / secs, rss
    finally:
        app.send_signal(signal.SIGTERM)
        app.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="small sizes: check that it all works")
    ap.add_argument("--partitions-memory", metavar="COUNTS",
                    help="only the memory-by-partition-count run, e.g. 8,64,256,1024")
    ap.add_argument("--per-partition", type=int, default=20_000,
                    help="backlog per partition (100 B records); 1,024 partitions get at most 5,000")
    ap.add_argument("--seconds", type=int, default=30, help="how long the slow client runs")
    ap.add_argument("--ksidecar", help="binary to measure (default: this build)")
    ap.add_argument("--keep-topics", action="store_true", help="reuse and keep the mem<N> topics")
    ap.add_argument("--sidecar-arg", action="append", default=[], help="an extra ksidecar flag")
    ap.add_argument("--batch-bytes", type=int, default=0,
                    help="the producer's batch.size for the backlog (default librdkafka's 1 MB)")
    ap.add_argument("--throughput-only", action="store_true",
                    help="only the throughput rows (1.), printed, RESULTS.md left as it is")
    ap.add_argument("--rounds", type=int, default=3, help="throughput rounds (default 3)")
    ap.add_argument("--only", metavar="SECTIONS",
                    help="only these sections, comma-separated, of " + ",".join(SECTIONS) +
                    "; their rows replace theirs in RESULTS.md's headline, the others stay")
    ap.add_argument("--latency-seconds", type=int, default=20,
                    help="how long each latency run produces (default 20 s at each rate)")
    ap.add_argument("--groups-records", type=int, default=1_000_000,
                    help="records per group in the many-groups rows (default 1,000,000)")
    ap.add_argument("--groups-counts", default="10,32",
                    help="how many groups at once, one row each (default 10,32)")
    ap.add_argument("--partitions-records", type=int, default=2_000_000,
                    help="records per topic in the partition-count rows (default 2,000,000)")
    ap.add_argument("--partitions-counts", default="8,64,256",
                    help="the partition counts of those rows, the first the baseline (default 8,64,256)")
    ap.add_argument("--schema-records", type=int, default=1_000_000,
                    help="Avro records in the schema-aware row (default 1,000,000)")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else set(SECTIONS)
    if not REGISTRY and "schema" in only:
        if a.only:
            ap.error("--only schema needs a schema registry: run under tests/registry/registry.sh run")
        print("schema-aware row skipped: no registry (run under tests/registry/registry.sh run)")
        only.discard("schema")
    if a.throughput_only:
        only = {"throughput"}
    if only - set(SECTIONS):
        ap.error(f"--only: unknown section(s) {','.join(sorted(only - set(SECTIONS)))}; "
                 f"known: {','.join(SECTIONS)}")

    def want(section):
        return section in only
    if a.partitions_memory:
        counts = [int(x) for x in a.partitions_memory.split(",")]
        per = {n: min(a.per_partition, 5_000) if n >= 1024 else a.per_partition for n in counts}
        rows = memory_by_partitions(counts, per, a.seconds, a.ksidecar, a.keep_topics,
                                    a.sidecar_arg, a.batch_bytes)
        if not a.keep_topics:
            for n in counts:
                sh([KSTOOL, "delete", "-b", BOOT, "-t",
                    f"mem{n}-{per[n]}" + (f"-b{a.batch_bytes}" if a.batch_bytes else "")])
        print("\n".join(["commands:"] + COMMANDS))
        return
    s = a.smoke
    n_tp = 20_000 if s else 2_000_000
    n_slow = 2_000 if s else 100_000
    n_mem = 50_000 if s else 5_000_000
    rows = []

    # 1. Throughput ceiling: 8 partitions of 100-byte records.
    if want("throughput"):
        t = uniq("tp")
        secs = produce(t, n_tp, 8)
        print(f"preloaded {n_tp} records into {t} in {secs:.1f} s", flush=True)
        # Three rounds of native, gRPC, HTTP long-poll and HTTP stream, each on a new group over
        # the same records; the table shows each mode's median, so one noisy run on a shared
        # machine does not decide.
        rates = {"native": [], "native-defaults": [], "grpc": [], "http": [], "http2": [], "stream": [],
                 "push1": [], "push500": []}
        rss = {"grpc": 0.0, "http": 0.0, "http2": 0.0, "stream": 0.0, "push1": 0.0, "push500": 0.0}
        for _ in range(1 if s else a.rounds):
            for mode, extra in (("native", []), ("native-defaults", ["--librdkafka-defaults"])):
                g = uniq("native")
                r = bench(["native", "--bootstrap", BOOT, "--topic", t, "--group", g, "--count", n_tp,
                           *extra])
                check_committed(g, t, 8)
                assert int(r["distinct"]) == n_tp, r
                rates[mode].append(float(r["rate"]))
            # Each through its own ksidecar: the row, ksbench's mode, ksidecar's flags, its port,
            # ksbench's flags. The NDJSON stream gets the long-poll's credits (max_in_flight) and
            # ack batch (its fetch); http2 is the long-poll with a second fetch in flight.
            for mode, ksb, flags, port, args in (
                    ("grpc", "grpc", ["--subscriber.max_credit_records=100000"], "grpc",
                     ["--credits", "20000", "--ack-batch", "2000"]),
                    ("http", "http", ["--subscriber.max_records=20000"], "http", ["--fetch-max", "5000"]),
                    ("http2", "http", ["--subscriber.max_records=20000"], "http",
                     ["--fetch-max", "5000", "--fetches", "2"]),
                    ("stream", "stream", ["--subscriber.max_records=20000"], "http",
                     ["--credits", "20000", "--ack-batch", "5000"])):
                sc = Sidecar(flags)
                g = uniq(mode)
                r = bench([ksb, "--addr", f"127.0.0.1:{getattr(sc, port)}", "--topic", t, "--group", g,
                           "--count", n_tp, *args])
                check_committed(g, t, 8)
                rss[mode] = max(rss[mode], sc.stop())
                assert int(r["distinct"]) == n_tp and int(r["duplicates"]) == 0, r
                rates[mode].append(float(r["rate"]))
            # Push to an app that answers at once: one record a request with 64 in flight, and
            # batches of 500 (the default concurrency, 16).
            for mode, batch, conc in (("push1", 1, 64), ("push500", 500, 16)):
                rate, peak = push_run(t, n_tp, 8, batch, conc)
                rates[mode].append(rate)
                rss[mode] = max(rss[mode], peak)
            print(f"round: native {rates['native'][-1]:,.0f} (librdkafka defaults "
                  f"{rates['native-defaults'][-1]:,.0f}), gRPC {rates['grpc'][-1]:,.0f}, "
                  f"HTTP {rates['http'][-1]:,.0f} (two fetches {rates['http2'][-1]:,.0f}), "
                  f"HTTP stream {rates['stream'][-1]:,.0f}, "
                  f"push {rates['push1'][-1]:,.0f} (batch 1), {rates['push500'][-1]:,.0f} "
                  "(batch 500) rec/s", flush=True)
        med = {k: statistics.median(v) for k, v in rates.items()}
        runs = {k: "runs " + ", ".join(f"{x:,.0f}" for x in v) for k, v in rates.items()}
        rows.append(("1. throughput", "native librdkafka consumer, local queue unbounded (baseline)",
                     f"{med['native']:,.0f} rec/s", "1.00x", runs["native"]))
        rows.append(("1. throughput", "native librdkafka consumer, librdkafka's default queue limits",
                     f"{med['native-defaults']:,.0f} rec/s",
                     f"{med['native-defaults'] / med['native']:.2f}x",
                     f"{runs['native-defaults']} (2.0.2 stops fetching ~1 s at the queue limits)"))
        def verdict(ratio, target):  # exact, not the rounded figure
            return f"{ratio:.3f}x (target >= {target}x: {'met' if ratio >= target else 'not met'})"

        rows.append(("1. throughput", "ksidecar gRPC Subscribe, acks batched", f"{med['grpc']:,.0f} rec/s",
                     verdict(med["grpc"] / med["native"], 0.8),
                     f"{runs['grpc']}; peak RSS {rss['grpc']:.0f} MB"))
        rows.append(("1. throughput", "ksidecar HTTP long-poll, batched acks", f"{med['http']:,.0f} rec/s",
                     verdict(med["http"] / med["native"], 0.55),
                     f"{runs['http']}; peak RSS {rss['http']:.0f} MB"))
        rows.append(("1. throughput", "ksidecar HTTP long-poll, batched acks, two fetches in flight",
                     f"{med['http2']:,.0f} rec/s", verdict(med["http2"] / med["native"], 0.55),
                     f"{runs['http2']}; peak RSS {rss['http2']:.0f} MB"))
        rows.append(("1. throughput", "ksidecar HTTP NDJSON stream, batched acks",
                     f"{med['stream']:,.0f} rec/s", verdict(med["stream"] / med["native"], 0.6),
                     f"{runs['stream']}; peak RSS {rss['stream']:.0f} MB"))
        rows.append(("1. throughput", "ksidecar push, batch 1, 64 requests in flight (app answers 200 at "
                     "once)", f"{med['push1']:,.0f} rec/s", f"{med['push1'] / med['native']:.3f}x",
                     f"{runs['push1']}; peak RSS {rss['push1']:.0f} MB"))
        rows.append(("1. throughput", "ksidecar push, batches of 500, 16 in flight",
                     f"{med['push500']:,.0f} rec/s", verdict(med["push500"] / med["native"], 0.3),
                     f"{runs['push500']}; peak RSS {rss['push500']:.0f} MB"))
        if a.throughput_only:
            print("\n".join(f"| {a_} | {b} | {c} | {d} | {e} |" for a_, b, c, d, e in rows))
            print("\n".join(["commands:"] + COMMANDS))
            return

    # 2. The slow consumer: one partition, 1000 keys, 10 ms per record, 500 in flight.
    if want("slow"):
        t = uniq("slow")
        produce(t, n_slow, 1, keys=1000)
        sc = Sidecar(["--group.ordering=key"])
        g = uniq("slow")
        r = bench(["grpc", "--addr", f"127.0.0.1:{sc.grpc}", "--topic", t, "--group", g, "--count", n_slow,
                   "--credits", "500", "--delay-ms", "10", "--ack-batch", "1"])
        check_committed(g, t, 1)
        sc.stop()
        assert int(r["distinct"]) == n_slow and int(r["order_violations"]) == 0, r
        rows.append(("2. slow consumer", "plain single-threaded consumer (10 ms/record)", "100 rec/s",
                     "", "computed: 1 / 10 ms"))
        rows.append(("2. slow consumer", "ksidecar gRPC, key order, 500 in flight",
                     f"{float(r['rate']):,.0f} rec/s",
                     f"{float(r['rate']) / 100:.0f}x the plain consumer (target >= 45,000 rec/s)",
                     f"lost 0, order violations {r['order_violations']}"))

    # 3. Memory: a slower client drains a big backlog.
    if want("memory"):
        t = uniq("mem")
        produce(t, n_mem, 8)
        sc = Sidecar([])
        g = uniq("mem")
        r = bench(["grpc", "--addr", f"127.0.0.1:{sc.grpc}", "--topic", t, "--group", g, "--count", n_mem,
                   "--credits", "5000", "--delay-ms", "20", "--ack-batch", "500"], timeout=7200)
        check_committed(g, t, 8)
        rss = sc.stop()
        assert int(r["distinct"]) == n_mem, r
        rows.append(("3. memory", f"{n_mem:,} backlog, client slower than the broker",
                     f"{float(r['rate']):,.0f} rec/s", "target peak RSS <= 256 MB",
                     f"ksidecar peak RSS {rss:.0f} MB"))

    # 4. Latency: a steady produce rate, produce -> the client's receipt, on one partition.
    if want("latency"):
        rows += latency_rows(LAT_RATES[:1] if s else LAT_RATES, a.latency_seconds,
                             1_000 if s else 0)

    # 5. Many groups against one ksidecar.
    if want("groups"):
        rows += groups_rows(500 if s else a.groups_records,
                            [int(x) for x in a.groups_counts.split(",")])

    # 6. The same backlog over more partitions, one fast gRPC client, the default budget.
    if want("partitions"):
        rows += partitions_rows([int(x) for x in a.partitions_counts.split(",")],
                                20_000 if s else a.partitions_records, 1 if s else a.rounds,
                                a.sidecar_arg)

    # 7. Avro values decoded to JSON against the same records as base64, HTTP long-poll.
    if want("schema"):
        rows += schema_rows(2_000 if s else a.schema_records, 1 if s else a.rounds)

    write_results(rows, s, sorted(only), a)
    print(f"bench: {len({r[0] for r in rows})} passed, 0 failed")


def write_results(rows, smoke, only, a):
    """The headline block at the top of RESULTS.md (build/bench-smoke.md for --smoke): the rows
    of the sections this run measured replace theirs, the other sections' rows stay as they were
    (each row says when and at which commit it was measured); the text after the blocks is
    never touched."""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
    when = f"{results_md.now()}, {results_md.commit()}"
    dest = (BUILD / "bench-smoke.md") if smoke else results_md.RESULTS
    if smoke and dest.exists():
        dest.unlink()
    ran = {SECTIONS[k] for k in only}
    old = [l for l in results_md.read_block("headline", dest)
           if l.startswith("| ") and not l.startswith(("| Benchmark", "| ---")) and
           l.split("|")[1].strip() not in ran]
    new = [f"| {a_} | {b} | {c} | {d} | {e} | {when} |" for a_, b, c, d, e in rows]
    order = list(SECTIONS.values())

    def key(line):
        sec = line.split("|")[1].strip()
        return order.index(sec) if sec in order else len(order)
    table = sorted(old + new, key=key)  # stable: a section's rows keep their order
    cmd = "tests/bench/run.sh" + (" --smoke" if smoke else "") + \
        (f" --only {a.only}" if a.only else "")
    lines = [f"### Headline{' (smoke run)' if smoke else ''}: `tests/bench/run.sh`", "",
             f"- last updated: {when}, by `{cmd}`",
             f"- machine of the last run: {os.cpu_count()} cores ({cpu}), {int(mem) // 1024 // 1024} GiB, "
             f"{platform.platform()}",
             "- broker: Apache Kafka 4.1.1, one KRaft node on loopback (tests/kafka/kafka.sh)",
             "- throughput: the median of the rounds (native, gRPC, HTTP long-poll, HTTP stream, "
             "push in turn over the same records), each run listed under Notes",
             "- latency: native is librdkafka's consumer with ksidecar's own consumer settings "
             f"({', '.join(KSIDECAR_CONSUMER_CONF)}); \"adds\" is against the native row of the "
             "same rate in the same run", "",
             "| Benchmark | Run | Result | Ratio / target | Notes | Measured |",
             "| --- | --- | --- | --- | --- | --- |", *table, "",
             "<details><summary>The exact commands of the last run</summary>", "", "```",
             *COMMANDS, "```", "", "</details>"]
    print("\n".join(["| Benchmark | Run | Result | Ratio / target | Notes | Measured |", *new]))
    if not smoke and os.environ.get("KSIDECAR_BENCH_NO_RESULTS"):
        print(f"KSIDECAR_BENCH_NO_RESULTS is set: {dest} left as it is")
        return
    results_md.write_block("headline", lines, dest)
    print(f"written to {dest}")


# ksidecar's own consumer settings that decide when fetched records reach it (proxy/group.c,
# the defaults it sets before the user's kafka.*): the latency baseline takes the same, so the
# difference is what ksidecar adds. queued.max.messages.kbytes (ksidecar's comes from the
# memory budget) is left out: at these rates the local queue never holds near a limit's worth.
KSIDECAR_CONSUMER_CONF = ["fetch.wait.max.ms=100", "fetch.max.bytes=2097152",
                          "queued.min.messages=100000",
                          "partition.assignment.strategy=cooperative-sticky",
                          "session.timeout.ms=30000", "heartbeat.interval.ms=1000",
                          "enable.partition.eof=false"]
LAT_RATES = (1_000, 10_000, 50_000)
LAT_GOAL_RATE, LAT_GOAL_MS = 10_000, 1.0


def fmt_lat(r):
    return (f"p50 {float(r['p50_ms']):.2f} ms, p99 {float(r['p99_ms']):.2f} ms, "
            f"p99.9 {float(r['p999_ms']):.2f} ms")


def latency_rows(rates, seconds, smoke_n):
    """Per rate: native (ksidecar's consumer settings), ksidecar gRPC and the HTTP NDJSON
    stream, each on a new one-partition topic that its own timed producer fills at the rate;
    the first fifth of each run is left out of the percentiles (ksbench)."""
    rows = []
    for rate in rates:
        n = smoke_n or rate * seconds
        common = ["--bootstrap", BOOT, "--count", n, "--latency", "--produce", n, "--rate", rate]
        res = {}
        for mode in ("native", "grpc", "stream"):
            t = uniq(f"lat{mode}")
            sh([KSTOOL, "create", "-b", BOOT, "-t", t, "-p", 1])
            g = uniq(f"lat{mode}")
            if mode == "native":
                conf = [x for c in KSIDECAR_CONSUMER_CONF for x in ("--conf", c)]
                r = bench(["native", "--topic", t, "--group", g, *common, *conf])
            else:
                sc = Sidecar([])
                port = sc.grpc if mode == "grpc" else sc.http
                r = bench([mode, "--addr", f"127.0.0.1:{port}", "--topic", t, "--group", g,
                           "--credits", "20000", "--ack-batch", "100", *common])
                check_committed(g, t, 1)
                sc.stop()
            assert int(r["distinct"]) == n and int(r["duplicates"]) == 0, r
            res[mode] = r
        base = float(res["native"]["p99_ms"])
        rows.append(("4. latency", f"native consumer, ksidecar's fetch settings, {rate:,} rec/s "
                     "produced", fmt_lat(res["native"]), "", f"{res['native']['lat_n']} records timed"))
        for mode, what in (("grpc", "ksidecar gRPC Subscribe"), ("stream", "ksidecar HTTP NDJSON stream")):
            added = float(res[mode]["p99_ms"]) - base
            verdict = f"adds {added:.2f} ms at p99"
            if rate == LAT_GOAL_RATE:
                verdict += f" (target <= +{LAT_GOAL_MS:g} ms: {'met' if added <= LAT_GOAL_MS else 'not met'})"
            rows.append(("4. latency", f"{what}, {rate:,} rec/s produced", fmt_lat(res[mode]),
                         verdict, f"{res[mode]['lat_n']} records timed; credits 20000, acks in 100s"))
        print(f"latency {rate:,} rec/s: " + "; ".join(f"{m} {fmt_lat(r)}" for m, r in res.items()),
              flush=True)
    return rows


GROUP_PARTS = 8


def threads_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("Threads:"))
    except (OSError, StopIteration):
        return 0


def run_groups(topics, n, flags, ksb_args, nparts=None):
    """One ksidecar, one ksbench gRPC client a topic (each its own new group), all at once:
    each client joins holding one credit (ksbench --hold) and all are released together once
    every one has its first record, so that group joins do not count. Returns the aggregate
    rate (all records over the span from the release to the last client's last record),
    ksidecar's most threads seen while they ran, its peak RSS, and each client's result."""
    sc = started_sidecar(flags, None)
    groups = [uniq("grp") for _ in topics]
    procs = []
    for t, g in zip(topics, groups):
        cmd = [KSBENCH, "grpc", "--addr", f"127.0.0.1:{sc.grpc}", "--topic", t, "--group", g,
               "--count", n, "--hold", *ksb_args]
        COMMANDS.append(" ".join(str(c) for c in cmd))
        procs.append(subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, text=True))
    for p in procs:  # each prints "ready" once its group has joined and its first record came
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"FAIL: ksbench --hold said {line!r}, exit code {p.poll()}")
    threads = threads_of(sc.proc.pid)
    for p in procs:
        p.send_signal(signal.SIGUSR1)
    deadline = time.time() + 3600
    while any(p.poll() is None for p in procs) and time.time() < deadline:
        threads = max(threads, threads_of(sc.proc.pid))
        time.sleep(0.2)
    results = []
    for p in procs:
        out = p.communicate(timeout=60)[0]
        if p.returncode != 0:
            raise SystemExit(f"FAIL: ksbench exited {p.returncode}: {out}")
        r = parse(out)
        assert int(r["distinct"]) == n and int(r["duplicates"]) == 0, r
        results.append(r)
    for t, g in zip(topics, groups):
        check_committed(g, t, nparts or GROUP_PARTS)
    rss = sc.stop()
    start = min(float(r["end_unix"]) - float(r["seconds"]) for r in results)
    end = max(float(r["end_unix"]) for r in results)
    return n * len(topics) / max(end - start, 1e-6), threads, rss, results


GROUPS_GOAL, GROUPS_RSS_MB = 0.9, 300


def groups_rows(n, counts):
    """For each count in counts, that many groups of 8 partitions each (a topic each), one
    gRPC client each, against one ksidecar at the default memory budget, beside one such group
    alone through its own ksidecar in the same run (the throughput row's flags)."""
    topics = [uniq("grp") for _ in range(max(counts))]
    t0 = time.time()
    for t in topics:
        produce(t, n, GROUP_PARTS)
    print(f"preloaded {len(topics)} topics of {n:,} records on {GROUP_PARTS} partitions in "
          f"{time.time() - t0:.0f} s", flush=True)
    flags = ["--subscriber.max_credit_records=100000"]
    ksb = ["--credits", "20000", "--ack-batch", "2000"]
    one, one_threads, one_rss, _ = run_groups(topics[:1], n, flags, ksb)
    rows = [("5. many groups", f"one group of {GROUP_PARTS} partitions, one gRPC client "
             f"({n:,} records)", f"{one:,.0f} rec/s", "1.00x",
             f"ksidecar threads {one_threads}; peak RSS {one_rss:.0f} MB")]
    for c in counts:
        many, threads, rss, res = run_groups(topics[:c], n, flags, ksb)
        each = ", ".join(f"{float(r['rate']):,.0f}" for r in res)
        print(f"groups: one {one:,.0f} rec/s ({one_threads} threads); {c} at once {many:,.0f} "
              f"rec/s ({threads} threads), peak RSS {rss:.0f} MB", flush=True)
        ratio = many / one
        rows.append((
            "5. many groups", f"{c} groups of {GROUP_PARTS} partitions, one gRPC client "
            f"each, one ksidecar ({n:,} records each)", f"{many:,.0f} rec/s in all",
            f"{ratio:.2f}x the one group (target >= {GROUPS_GOAL}x: "
            f"{'met' if ratio >= GROUPS_GOAL else 'not met'})",
            f"ksidecar threads up to {threads}; peak RSS {rss:.0f} MB (target <= {GROUPS_RSS_MB} "
            f"MB: {'met' if rss <= GROUPS_RSS_MB else 'not met'}); the clients joined first and "
            f"were released together, the rate runs from the release to the last record; each "
            f"client {each} rec/s"))
    return rows


PARTS_GOAL, PARTS_RSS_MB = 0.8, 300


def partitions_rows(counts, n, rounds, extra=()):
    """The same number of 100-byte records on topics of each partition count, drained by one
    fast gRPC client (the throughput row's credits and acks) through its own ksidecar at the
    default memory budget; the client joins holding one credit and the clock starts when it
    takes them all (ksbench --hold), so the group join does not count. Rounds alternate the
    counts; each row is the median, beside the first count's median."""
    topics = {c: uniq(f"parts{c}") for c in counts}
    t0 = time.time()
    for c, t in topics.items():
        produce(t, n, c)
    print(f"preloaded {n:,} records on each of {', '.join(map(str, counts))} partitions in "
          f"{time.time() - t0:.0f} s", flush=True)
    flags = ["--subscriber.max_credit_records=100000", *extra]
    ksb = ["--credits", "20000", "--ack-batch", "2000"]
    rates, rss = {c: [] for c in counts}, {c: 0.0 for c in counts}
    for _ in range(rounds):
        for c, t in topics.items():
            rate, _, peak, _ = run_groups([t], n, flags, ksb, nparts=c)
            rates[c].append(rate)
            rss[c] = max(rss[c], peak)
        print("partitions round: " + ", ".join(f"{c} {rates[c][-1]:,.0f}" for c in counts) +
              " rec/s", flush=True)
    med = {c: statistics.median(v) for c, v in rates.items()}
    base = counts[0]
    rows = []
    for c in counts:
        ratio = med[c] / med[base]
        verdict = "1.00x" if c == base else (
            f"{ratio:.2f}x the {base} partitions (target >= {PARTS_GOAL}x: "
            f"{'met' if ratio >= PARTS_GOAL else 'not met'})")
        rows.append(("6. partitions", f"{c} partitions, {n:,} records backlog, one gRPC client, "
                     "default memory budget", f"{med[c]:,.0f} rec/s", verdict,
                     f"runs {', '.join(f'{x:,.0f}' for x in rates[c])}; peak RSS {rss[c]:.0f} MB "
                     f"(target <= {PARTS_RSS_MB} MB: {'met' if rss[c] <= PARTS_RSS_MB else 'not met'})"))
    return rows



# The schema-aware row's records: an order of 10 fields, about 200 bytes in Avro.
ORDER_SCHEMA = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
               {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"},
               {"name": "price", "type": "double"}, {"name": "currency", "type": "string"},
               {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
               {"name": "status", "type": {"type": "enum", "name": "Status",
                                           "symbols": ["NEW", "PAID", "SHIPPED", "RETURNED"]}},
               {"name": "note", "type": ["null", "string"], "default": None},
               {"name": "tags", "type": {"type": "array", "items": "string"}}]}


def avro_topic(n, parts=8):
    """A topic of n Avro records in the schema wire format, written with confluent-kafka's
    AvroSerializer against the registry (1,000 distinct values, cycled); returns its name and
    the mean value size."""
    import json
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    t = uniq("avro")
    sh([KSTOOL, "create", "-b", BOOT, "-t", t, "-p", str(parts)])
    reg = SchemaRegistryClient({"url": REGISTRY, "timeout": 20})
    ser = AvroSerializer(reg, json.dumps(ORDER_SCHEMA))
    ctx = SerializationContext(t, MessageField.VALUE)
    values = [ser({"id": 1_000_000 + i, "customer": f"customer-{i % 97:04d}.lastname@example.com",
                   "sku": f"SKU-{i % 500:05d}-SHIRT-COTTON-BLUE-XL", "qty": 1 + i % 9,
                   "price": round(19.99 + i % 200, 2), "currency": "EUR", "created": 1_796_000_000_000 + i,
                   "status": "PAID", "note": None if i % 5 == 0 else
                   f"leave the parcel at the door and ring twice, please ({i % 7} floors up)",
                   "tags": ["gift", "express", "insured", f"batch-{i % 10}", "eu-west"]}, ctx)
              for i in range(1000)]
    p = Producer({"bootstrap.servers": BOOT, "linger.ms": 50, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 1_000_000})
    for i in range(n):
        while True:
            try:
                p.produce(t, values[i % 1000], partition=i % parts)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(120):
        raise SystemExit("FAIL: the Avro records were not all written")
    COMMANDS.append(f"# bench.py avro_topic: {n} records by confluent-kafka's AvroSerializer "
                    f"(registry {REGISTRY}) into {t}, {parts} partitions")
    return t, statistics.mean(len(v) for v in values)


def schema_rows(n, rounds):
    """Avro values decoded to JSON (value_format=avro) against the same records as base64
    (format=base64), each run on a new group of its own ksidecar, the two alternating."""
    t, size = avro_topic(n)
    print(f"preloaded {n} Avro records ({size:.0f} B a value) into {t}", flush=True)
    rates = {"base64": [], "avro": []}
    rss = {"base64": 0.0, "avro": 0.0}
    for _ in range(rounds):
        for mode, query in (("base64", "format=base64"), ("avro", "value_format=avro")):
            sc = Sidecar(["--subscriber.max_records=20000", f"--schema_registry.url={REGISTRY}"])
            g = uniq("schema-" + mode)
            r = bench(["http", "--addr", f"127.0.0.1:{sc.http}", "--topic", t, "--group", g,
                       "--count", n, "--fetch-max", "5000", "--query", query])
            check_committed(g, t, 8)
            rss[mode] = max(rss[mode], sc.stop())
            assert int(r["distinct"]) == n and int(r["duplicates"]) == 0, r
            rates[mode].append(float(r["rate"]))
        print(f"round: base64 {rates['base64'][-1]:,.0f}, Avro to JSON {rates['avro'][-1]:,.0f} "
              "rec/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = med["avro"] / med["base64"]
    return [("7. schema-aware", f"HTTP long-poll, {size:.0f} B Avro values (10 fields) as base64 "
             "(baseline)", f"{med['base64']:,.0f} rec/s", "1.00x",
             "runs " + ", ".join(f"{x:,.0f}" for x in rates["base64"]) +
             f"; peak RSS {rss['base64']:.0f} MB"),
            ("7. schema-aware", "the same records decoded to JSON (value_format=avro)",
             f"{med['avro']:,.0f} rec/s",
             f"{ratio:.3f}x (target >= 0.5x: {'met' if ratio >= 0.5 else 'not met'})",
             "runs " + ", ".join(f"{x:,.0f}" for x in rates["avro"]) +
             f"; peak RSS {rss['avro']:.0f} MB")]


if __name__ == "__main__":
    main()
