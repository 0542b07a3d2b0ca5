"""The ordered-delivery benchmark (issue 22): for the Python, Go and Node libraries (their
natural loop, a per-message ack) and the C client (ksbench grpc with ordered batches and a
per-message ack), each ordering row beside the same client with ordering=none and beside
the language's own Kafka client, on the same records, in one run; then the seed scenario
(bench.py's slow consumer). Prints a table of rec/s, ratios, order violations and whether
the issue's targets are met (as text: no timing is asserted), then the exact commands.

    tests/bench/ordered.sh [--smoke]    (which runs this under tests/kafka/kafka.sh run)

Every handled record is logged (partition, offset, key, in handling order; by each client
program, from memory after its clock stopped). An order violation is a record handled, in
its last delivery, before the last delivery of an earlier record of its chain: its key in
its partition (ordering key, none and the native clients; null keys are in no chain), or
its partition (ordering partition). A run that loses a record or does not commit every
partition to its end fails the benchmark."""
import argparse
import collections
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench as B  # noqa: E402  (the shared helpers: produce, Sidecar, COMMANDS, ...)

ROOT = B.ROOT
PY = os.environ.get("ORDERED_BENCH_PYTHON", sys.executable)
GOBENCH = os.environ.get("ORDERED_BENCH_GO", "")
PARTS = 8
KEYS = {0: "no keys", 10: "10 keys", 1000: "1,000 keys"}
# The rows, in its order, after the ordering=none row of each topic.
ROWS = [("none", 0), ("none", 10), ("none", 1000), ("key", 0), ("key", 1000), ("key", 10),
        ("partition", 0), ("partition", 10), ("partition", 1000)]
CLIENTS = ["python", "go", "node", "c"]
NATIVE = {"python": "confluent-kafka Consumer, defaults, poll() per message",
          "go": "franz-go, defaults, commit after each poll",
          "node": "KafkaJS, defaults, eachBatch with a commit a batch",
          "c": "librdkafka consumer (ksbench native)"}
LIB = {"python": "Python library, `for msg in sub: msg.ack()`",
       "go": "Go library, `sub.Receive(ctx, func(..., m) { m.Ack() })`",
       "node": "Node library, `for await (const msg of sub) msg.ack()`",
       "c": "C client, ksbench grpc --ordered --ack-batch 1 --credits 20000"}
FAILED = []


def asks_ordered(client):
    """Whether this tree's library asks for ordered batches (its source names the field)."""
    if client == "c":
        return True
    where = {"python": ROOT / "clients" / "python" / "ksidecar",
             "go": ROOT / "clients" / "go", "node": ROOT / "clients" / "node" / "lib"}[client]
    pat = re.compile(r"ordered_?[bB]atches|OrderedBatches")
    return any(pat.search(f.read_text(errors="replace")) for f in where.iterdir()
               if f.suffix in (".py", ".go", ".js") and not f.name.endswith("_test.go"))


def run(cmd, env=None, note=""):
    """Runs a client program; returns (stdout, seconds) or (None, seconds) on failure."""
    cmd = [str(c) for c in cmd]
    B.COMMANDS.append(" ".join(shlex.quote(c) for c in cmd) + (f"   # {note}" if note else ""))
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                       env={**os.environ, **(env or {})}, cwd=ROOT)
    if p.returncode != 0:
        sys.stderr.write(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n"
                         f"{p.stderr[-3000:]}\n")
        return None, time.monotonic() - t0
    return p.stdout, time.monotonic() - t0


def committed_to_end(group, topic, nparts, timeout=60):
    want, got = B.ends(topic), {}
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = B.committed(group, topic, nparts)
        if got == want:
            return True
        time.sleep(0.5)
    sys.stderr.write(f"group {group} committed {got}, end offsets {want}\n")
    return False


def count_order(path, mode):
    """(violations, distinct records, handled records, chains) from a handling log."""
    last, handled = {}, 0
    with open(path) as f:
        for i, line in enumerate(f):
            p, o, k, _ = line.rstrip("\n").split("\t")
            last[(int(p), int(o))] = (i, k)
            handled += 1
    chains = collections.defaultdict(list)
    for (p, o), (i, k) in last.items():
        if mode == "partition":
            chains[p].append((o, i))
        elif k != "\\N":
            chains[(p, k)].append((o, i))
    bad = 0
    for recs in chains.values():
        recs.sort()
        latest = -1
        for _, i in recs:
            if i < latest:
                bad += 1
            latest = max(latest, i)
    return bad, len(last), handled, len(chains)


def one(client, mode, topic, n, nparts, log):
    """Runs one client on topic; mode None is the native client. Returns a result dict
    (rate, ok, notes) or None when the run failed."""
    native = mode is None
    ordering = [] if native else ["--ordering", mode]
    if client == "python":
        out, secs = run([PY, "tests/bench/clients/python/bench.py", "--one",
                         "ck-default" if native else "ksidecar-iterator", "--topic", topic,
                         "--records", n, *ordering, "--order-log", log])
        if out is None:
            return None
        r = json.loads(out.strip().splitlines()[-1])
        ok = committed_to_end(r["group"], topic, nparts) and r["all_acks_confirmed"]
        if r.get("ksidecar"):
            B.COMMANDS.append(f"  # which started: {r['ksidecar']}")
        return {"rate": r["records"] / r["s"], "ok": ok, "secs": secs,
                "notes": f"confirmed {r['records'] / r['confirmed_s']:,.0f} rec/s"}
    if client == "go":
        out, secs = run([GOBENCH, "-topic", topic, "-records", n, "-partitions", nparts, "-only",
                         "franz-default" if native else "ks-default", "-json", "-order-log", log,
                         *(["-ordering", mode] if mode else [])])
        if out is None:
            return None
        lines = out.splitlines()
        r = json.loads(next(l for l in lines if l.startswith("{")))
        B.COMMANDS.extend(f"  # which started: {l.strip()}" for l in lines
                          if "--group.ordering" in l or "--kafka.bootstrap.servers" in l)
        return {"rate": r["rate"], "ok": "committed == end offsets" in r["notes"], "secs": secs,
                "notes": ""}
    if client == "node":
        out, secs = run(["node", "tests/bench/clients/node/bench.js", "--topic", topic, "--records",
                         n, "--partitions", nparts, "--only",
                         "kafkajs-defaults" if native else "ksidecar-iterator", *ordering,
                         "--order-log", log, "--json"])
        if out is None:
            return None
        objs = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        r = next(o for o in objs if "rate" in o)
        for o in objs:
            B.COMMANDS.extend(f"  # which started: {c}" for c in o.get("commands", [])
                              if "ksidecar " in c or "--kafka.bootstrap" in c)
        # bench.js exits non-zero unless every partition was committed to its end.
        return {"rate": r["rate"], "ok": True, "secs": secs, "notes": f"join {r['join']} ms"}
    # client == "c"
    t0 = time.monotonic()
    if native:
        g = B.uniq("ordn")
        out, _ = run([B.KSBENCH, "native", "--bootstrap", B.BOOT, "--topic", topic, "--group", g,
                      "--count", n, "--order-log", log])
        sc = None
    else:
        sc = B.started_sidecar(["--subscriber.max_credit_records=100000",
                                f"--group.ordering={mode}"], None)
        g = B.uniq("ordc")
        out, _ = run([B.KSBENCH, "grpc", "--addr", f"127.0.0.1:{sc.grpc}", "--topic", topic,
                      "--group", g, "--count", n, "--credits", 20000, "--ack-batch", 1, "--ordered",
                      "--order-log", log])
    ok = out is not None and committed_to_end(g, topic, nparts)
    if sc:
        sc.stop()
    if out is None:
        return None
    r = B.parse(out)
    chained = re.search(r"chained=(\d+)", out)
    return {"rate": float(r["rate"]), "ok": ok, "secs": time.monotonic() - t0,
            "notes": f"{chained.group(1)} records came with an ordering_chain" if chained and not native
            else ""}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true",
                    help="2,000 records, one run of each: checks that every row works")
    ap.add_argument("--records", type=int, help="records per topic (default 30,000)")
    ap.add_argument("--seed-records", type=int, help="the seed scenario's records (default 100,000)")
    ap.add_argument("--clients", default=",".join(CLIENTS), help="python,go,node,c")
    a = ap.parse_args()
    n = a.records or (2_000 if a.smoke else 30_000)
    n_seed = a.seed_records or (2_000 if a.smoke else 100_000)
    clients = [c for c in a.clients.split(",") if c]
    started = time.monotonic()
    logs = pathlib.Path(tempfile.mkdtemp(prefix="ksidecar-ordered-"))

    topics = {}
    for keys in KEYS:
        t = B.uniq(f"ord-{n}-k{keys}")
        secs = B.produce(t, n, PARTS, keys=keys)
        topics[keys] = t
        print(f"produced {n:,} x 100 B records, {KEYS[keys]}, on {PARTS} partitions into {t} "
              f"in {secs:.1f} s", flush=True)

    results = {}  # (client, mode or None, keys) -> result
    for client in clients:
        for mode, keys in [(None, k) for k in KEYS] + ROWS:
            log = logs / f"{client}-{mode or 'native'}-{keys}.log"
            r = one(client, mode, topics[keys], n, PARTS, log)
            what = f"{client} {mode or 'native'} {KEYS[keys]}"
            if r is None or not log.exists():
                FAILED.append(what)
                print(f"{what}: FAILED", flush=True)
                continue
            r["viol"], r["distinct"], r["handled"], r["chains"] = count_order(log, mode)
            if r["distinct"] != n or not r["ok"]:
                FAILED.append(what)
                r["notes"] = (f"FAILED: {r['distinct']:,} distinct of {n:,} handled, committed "
                              f"to end: {r['ok']}; " + r["notes"])
            results[(client, mode, keys)] = r
            print(f"{what}: {r['rate']:,.0f} rec/s, {r['viol']} order violations, "
                  f"{r['handled'] - r['distinct']} redeliveries, {r['secs']:.1f} s", flush=True)

    # The seed scenario: bench.py's slow consumer, with its command unchanged.
    t = B.uniq("ordseed")
    B.produce(t, n_seed, 1, keys=1000)
    sc = B.started_sidecar(["--group.ordering=key"], None)
    g = B.uniq("ordseed")
    log = logs / "seed.log"
    out, _ = run([B.KSBENCH, "grpc", "--addr", f"127.0.0.1:{sc.grpc}", "--topic", t, "--group", g,
                  "--count", n_seed, "--credits", 500, "--delay-ms", 10, "--ack-batch", 1,
                  "--order-log", log])
    seed_ok = out is not None and committed_to_end(g, t, 1)
    sc.stop()
    seed = None
    if out is not None:
        seed = B.parse(out)
        seed["viol"], seed["distinct"], _, _ = count_order(log, "key")
        seed_ok = seed_ok and seed["distinct"] == n_seed
    if not seed_ok:
        FAILED.append("seed scenario")

    print_table(results, clients, n, n_seed, seed, a.smoke)
    print("\n## Exact commands\n\n```")
    print("\n".join(B.COMMANDS))
    print("```")
    print(f"\nwall time {time.monotonic() - started:.0f} s; handling logs in {logs}")
    if FAILED:
        print(f"FAILED (records lost or not committed, or a client failed): {', '.join(FAILED)}")
        sys.exit(1)


def print_table(results, clients, n, n_seed, seed, smoke):
    def ratio(x, base):
        return f"{x / base:.2f}x" if base else "-"

    print(f"\n# Ordered delivery (issue 22){' - SMOKE RUN: the figures mean nothing' if smoke else ''}\n")
    print(f"{n:,} x 100 B records on {PARTS} partitions per topic (no keys, 10 keys, 1,000 keys); "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end. "
          "rec/s from the first record to the last one handled. \"vs none\": the same client "
          "with ordering=none on the same records; \"vs native\": the language's own Kafka "
          "client on the same records.\n")
    for c in clients:
        print(f"- {c}: {LIB[c]}; asks for ordered batches: "
              f"{'yes' if asks_ordered(c) else 'no (this tree of the library does not)'}; "
              f"native: {NATIVE[c]}")
    print()
    print("| client | ordering | keys | rec/s | vs none | vs native | order violations | target | notes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in clients:
        for mode, keys in [(None, k) for k in KEYS] + ROWS:
            r = results.get((c, mode, keys))
            if r is None:
                print(f"| {c} | {mode or 'native'} | {KEYS[keys]} | FAILED | | | | | |")
                continue
            none = results.get((c, "none", keys))
            nat = results.get((c, None, keys))
            vs_none = ratio(r["rate"], none["rate"]) if mode and none else "-"
            vs_nat = ratio(r["rate"], nat["rate"]) if mode and nat else "-"
            viol = "-" if r["chains"] == 0 else str(r["viol"])
            target = ""
            if mode in ("key", "partition"):
                parts = []
                if none and (mode == "partition" or keys == 10):
                    met = r["rate"] >= 0.5 * none["rate"]
                    parts.append(f">= 0.5x none: {'met' if met else 'not met'}")
                if r["chains"]:
                    parts.append(f"0 violations: {'met' if r['viol'] == 0 else 'not met'}")
                target = "; ".join(parts)
            elif mode == "none" and r["chains"]:
                viol += " (no order promised)"
            notes = r["notes"]
            if r["handled"] != r["distinct"]:
                notes = f"{r['handled'] - r['distinct']} redeliveries; " + notes
            print(f"| {c} | {mode or 'native: ' + NATIVE[c].split(',')[0]} | {KEYS[keys]} | "
                  f"{r['rate']:,.0f} | {vs_none} | {vs_nat} | {viol} | {target} | {notes.strip('; ')} |")
    print()
    if seed is None:
        print("seed scenario: FAILED")
        return
    rate = float(seed["rate"])
    print(f"seed scenario (bench.py's slow consumer: 1 partition, 1,000 keys, 10 ms a record, 500 "
          f"in flight, ordering=key, C client, {n_seed:,} records): {rate:,.0f} rec/s, order "
          f"violations {seed['viol']} (ksbench's own count, redeliveries included: "
          f"{seed['order_violations']}); target >= 45,000 rec/s: "
          f"{'met' if rate >= 45_000 else 'not met'}; 0 violations: "
          f"{'met' if seed['viol'] == 0 and seed['order_violations'] == '0' else 'not met'}")


if __name__ == "__main__":
    main()
