"""Throughput of the ksidecar Python library's natural use (a handler that acks each
message) side by side with confluent-kafka's Consumer in a group with manual commits, on
the same records, in one run. Prints figures, ratios and the exact commands; asserts
nothing about speed.

    KSIDECAR_TEST_BOOTSTRAP=HOST:PORT python bench.py [--records N] [--partitions P] [--runs R]
        [--keys 0,1000] [--clients NAME,...]

--keys: one topic for each count of distinct keys (0: records without keys), each with the
same records otherwise; every run takes each topic with each client. --clients: which (the
iterator, callback and asyncio forms of the library and tuned confluent-kafka by default;
ck-default too when named). Each client runs in its own process (--one NAME), one after the
other, each in a new group; the clients' order is reversed every other run, so that drift
in the machine's load falls on both sides. "cpu" is the process's CPU time (all its threads)
from the first record until the last was handled, and per record in microseconds. The clock
starts at the first record. "handled" stops it when the handler of the
last record returned (its ack or commit handed to the client library); "confirmed" when
that was confirmed (ksidecar: close() returned with every ack result ACCEPTED;
confluent-kafka: the final synchronous commit returned, which waits behind the async
commits still in flight). Ratios are of the "handled" rates. KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL name the
binaries (default build/ksidecar, build/kstool).

For tests/bench/ordered.py: --ordering MODE starts ksidecar with group.ordering=MODE, and
--order-log FILE writes each handled record (partition, offset, key or \\N, chain; tab-
separated, in handling order) to FILE after the run, from memory."""
import argparse
import importlib.util
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time
import urllib.request
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[4]
BIN = os.environ.get("KSIDECAR_TEST_BIN", str(ROOT / "build" / "ksidecar"))
KSTOOL = os.environ.get("KSIDECAR_TEST_KSTOOL", str(ROOT / "build" / "kstool"))

# confluent-kafka "tuned": an unbounded local queue (as tests/bench does for C), fetches
# of up to 10 MB per partition and 100 MB in all, and consume() in batches of 1000.
CK_TUNED = {"queued.max.messages.kbytes": 1048576, "queued.min.messages": 10000000,
            "max.partition.fetch.bytes": 10485760, "fetch.max.bytes": 104857600}


def _integration_helpers():
    spec = importlib.util.spec_from_file_location(
        "ksidecar_integration_conftest", ROOT / "tests" / "integration" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


free_port = _integration_helpers().free_port


ORDERING = None  # --ordering: ksidecar's group.ordering for the run
ORDER_LOG = None  # --order-log: where the handled records go, or None
HANDLED = []  # (partition, offset, key) in handling order, when ORDER_LOG is set


def log_handled(partition, offset, key):
    if ORDER_LOG:
        HANDLED.append((partition, offset, key))


def write_order_log():
    if not ORDER_LOG:
        return
    with open(ORDER_LOG, "w") as f:
        for p, o, k in HANDLED:
            k = "\\N" if k is None else k.decode(errors="replace")
            f.write(f"{p}\t{o}\t{k}\t0\n")


def figures(got, t0, c0, t1, ok):
    """The result of one run: t0/c0 wall and CPU clocks at the first record, t1 when the
    last was handled, now when it was confirmed."""
    return {"records": got, "s": t1 - t0, "confirmed_s": time.monotonic() - t0,
            "cpu_s": time.process_time() - c0, "all_acks_confirmed": ok}


def run_ksidecar_client(boot, topic, n, form):
    import ksidecar
    gport, hport = free_port(), free_port()
    log = open(f"/tmp/ksidecar-pybench-{gport}.log", "wb")
    ordering = [f"--group.ordering={ORDERING}"] if ORDERING else []
    cmd = [BIN, f"--kafka.bootstrap.servers={boot}", f"--grpc.listen=127.0.0.1:{gport}",
           f"--http.listen=127.0.0.1:{hport}", "--log.level=warn", *ordering]
    sc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{hport}/healthz", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        opts = json.loads(os.environ.get("PYBENCH_SUBSCRIBER_OPTIONS", "{}"))
        tgt, group = f"127.0.0.1:{gport}", f"pybench-{uuid.uuid4().hex[:8]}"
        run_of = {"group": group, "ksidecar": " ".join(cmd)}
        got = 0
        t0 = c0 = None
        if form == "asyncio":
            import asyncio
            import ksidecar.aio

            async def consume():
                nonlocal got, t0, c0
                async with ksidecar.aio.Subscriber(tgt, group, [topic], **opts) as asub:
                    async for msg in asub:
                        if t0 is None:
                            t0, c0 = time.monotonic(), time.process_time()
                        log_handled(msg.partition, msg.offset, msg.key)
                        msg.ack()
                        got += 1
                        if got == n:
                            break
                    t1 = time.monotonic()
                    ok = await asub.close(timeout=60)
                return t1, ok

            t1, ok = asyncio.run(consume())
            return {**figures(got, t0, c0, t1, ok), **run_of}
        sub = ksidecar.Subscriber(tgt, group, [topic], **opts)
        if form == "iterator":
            for msg in sub:
                if t0 is None:
                    t0, c0 = time.monotonic(), time.process_time()
                log_handled(msg.partition, msg.offset, msg.key)
                msg.ack()
                got += 1
                if got == n:
                    break
        else:
            import threading
            done = threading.Event()
            first = []
            count = [0]

            def handle(msg):
                if not first:
                    first.append((time.monotonic(), time.process_time()))
                log_handled(msg.partition, msg.offset, msg.key)
                msg.ack()
                count[0] += 1  # one worker: no lock needed
                if count[0] == n:
                    done.set()

            sub.subscribe(handle, workers=1)
            done.wait(600)
            got = count[0]
            t0, c0 = first[0]
            t1 = time.monotonic()
        if form == "iterator":
            t1 = time.monotonic()
        ok = sub.close(timeout=60)
        return {**figures(got, t0, c0, t1, ok), **run_of}
    finally:
        sc.terminate()
        sc.wait()
        log.close()


def run_confluent(boot, topic, n, tuned):
    import confluent_kafka
    conf = {"bootstrap.servers": boot, "group.id": f"ckbench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if tuned:
        conf.update(CK_TUNED)
    c = confluent_kafka.Consumer(conf)
    c.subscribe([topic])
    got = 0
    t0 = c0 = None
    while got < n:
        msgs = c.consume(1000, 1.0) if tuned else [c.poll(1.0)]
        for m in msgs:
            if m is None or m.error():
                continue
            if t0 is None:
                t0, c0 = time.monotonic(), time.process_time()
            log_handled(m.partition(), m.offset(), m.key())
            got += 1
            if got % 1000 == 0:
                c.commit(asynchronous=True)
    t1 = time.monotonic()
    c.commit(asynchronous=False)
    r = figures(got, t0, c0, t1, True)
    r.update(librdkafka=confluent_kafka.libversion()[0], confluent_kafka=confluent_kafka.__version__,
             group=conf["group.id"])
    c.close()
    return r


CLIENTS = {
    "ksidecar-iterator": ("ksidecar library, iterator, msg.ack() per message, defaults",
                          lambda b, t, n: run_ksidecar_client(b, t, n, "iterator")),
    "ksidecar-callback": ("ksidecar library, subscribe(callback, workers=1), msg.ack() per message",
                          lambda b, t, n: run_ksidecar_client(b, t, n, "callback")),
    "ksidecar-asyncio": ("ksidecar.aio library, async for, msg.ack() per message, defaults",
                         lambda b, t, n: run_ksidecar_client(b, t, n, "asyncio")),
    "ck-default": ("confluent-kafka Consumer, defaults, poll() per message, async commit every 1000",
                   lambda b, t, n: run_confluent(b, t, n, False)),
    "ck-tuned": ("confluent-kafka Consumer, unbounded local queue, 10 MB fetches, consume(1000), async commit every 1000",
                 lambda b, t, n: run_confluent(b, t, n, True)),
}


DEFAULT_CLIENTS = ("ksidecar-iterator", "ksidecar-callback", "ksidecar-asyncio", "ck-tuned")
OURS = ("ksidecar-iterator", "ksidecar-callback", "ksidecar-asyncio")
TARGET = 0.5  # issue 39: each form at least this ratio of tuned confluent-kafka
KEYS_NAME = {0: "no keys"}


def keys_name(k):
    return KEYS_NAME.get(k, f"{k:,} keys")


def run_one(name, topic, records, ordering):
    """Runs client name in its own process; its figures (with rate and cpu_us a record), or
    None after printing why it failed."""
    out = subprocess.run([sys.executable, __file__, "--one", name, "--topic", topic,
                          "--records", str(records),
                          *(["--ordering", ordering] if ordering else [])],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        print(f"{name} failed:\n{out.stderr[-3000:]}")
        return None
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["rate"] = r["records"] / r["s"]
    r["cpu_us"] = r["cpu_s"] / r["records"] * 1e6
    return r


def summary(rates, runs):
    """The ratio of each form to tuned confluent-kafka, per topic, over the runs."""
    print("# ratio to ck-tuned by records handled, each run's own pair (median, range; "
          f"target >= {TARGET}x):")
    for keys in sorted({k for _, k, _ in rates}):
        for ours in OURS:
            rs = sorted(rates[(ours, keys, r)] / rates[("ck-tuned", keys, r)]
                        for r in range(1, runs + 1)
                        if (ours, keys, r) in rates and ("ck-tuned", keys, r) in rates)
            if rs:
                med = rs[len(rs) // 2] if len(rs) % 2 else (rs[len(rs) // 2 - 1] + rs[len(rs) // 2]) / 2
                print(f"summary  {keys_name(keys):10s} {ours:18s} {med:.2f}x "
                      f"({rs[0]:.2f}-{rs[-1]:.2f}x over {len(rs)} runs)"
                      f"{'' if med >= TARGET else '  below target'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--topic", help="with --one: the topic to take; else one topic of records "
                    "already there, instead of --keys' topics")
    ap.add_argument("--keys", default="0,1000",
                    help="comma-separated counts of distinct keys, one topic each (0: no keys)")
    ap.add_argument("--clients", default=",".join(DEFAULT_CLIENTS),
                    help=f"comma-separated, of {', '.join(CLIENTS)}")
    ap.add_argument("--one", choices=CLIENTS)
    ap.add_argument("--ordering", choices=("none", "key", "partition"),
                    help="ksidecar's group.ordering (default: ksidecar's own, key)")
    ap.add_argument("--order-log", help="with --one: write the handled records here")
    a = ap.parse_args()
    boot = os.environ["KSIDECAR_TEST_BOOTSTRAP"]
    global ORDERING, ORDER_LOG
    ORDERING, ORDER_LOG = a.ordering, a.order_log
    if a.one:
        res = CLIENTS[a.one][1](boot, a.topic, a.records)
        write_order_log()
        print(json.dumps(res))
        return
    clients = [c for c in a.clients.split(",") if c]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        ap.error(f"--clients: unknown {', '.join(unknown)}")
    keys = [int(k) for k in a.keys.split(",")] if not a.topic else [None]
    topics = {}
    try:
        for k in keys:
            if a.topic:
                topics[k] = a.topic
                continue
            t = topics[k] = f"pybench-k{k}-{uuid.uuid4().hex[:8]}"
            subprocess.run([KSTOOL, "create", "-b", boot, "-t", t, "-p", str(a.partitions)],
                           check=True)
            subprocess.run([KSTOOL, "produce", "-b", boot, "-t", t, "-n", str(a.records), "-p",
                            str(a.partitions), "-s", "100", *(["-k", str(k)] if k else ["-N"])],
                           check=True, capture_output=True)
        import ksidecar._accel
        print(f"# {a.records:,} x 100 B records on {a.partitions} partitions, topics "
              + ", ".join(f"{t} ({keys_name(k) if k is not None else 'given'})"
                          for k, t in topics.items())
              + f"; python {sys.version.split()[0]}, ksidecar's per-record path "
              f"{ksidecar._accel.active()}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
        print("# command: KSIDECAR_TEST_BOOTSTRAP=%s %s" % (boot, " ".join(map(shlex.quote, sys.argv))))
        rates = {}
        for run in range(1, a.runs + 1):
            order = clients if run % 2 else clients[::-1]
            for k, topic in topics.items():
                res = {}
                where = f"run {run}  {keys_name(k) if k is not None else topic:10s}"
                for name in order:
                    r = run_one(name, topic, a.records, a.ordering)
                    if r is None:
                        continue
                    res[name] = r
                    rates[(name, k, run)] = r["rate"]
                    extra = (f", confluent-kafka {r['confluent_kafka']}, librdkafka {r['librdkafka']}"
                             if "librdkafka" in r else "")
                    print(f"{where} {name:18s} handled {r['rate']:>9,.0f} rec/s ({r['s']:.2f} s), "
                          f"confirmed {r['records'] / r['confirmed_s']:>9,.0f} rec/s "
                          f"({r['confirmed_s']:.2f} s), cpu {r['cpu_s']:.2f} s = "
                          f"{r['cpu_us']:.2f} us/rec  ({CLIENTS[name][0]}{extra})", flush=True)
                for ours in OURS:
                    for base in ("ck-default", "ck-tuned"):
                        if ours in res and base in res:
                            print(f"{where} ratio {ours} / {base}: "
                                  f"{res[ours]['rate'] / res[base]['rate']:.2f}x, cpu a record "
                                  f"{res[ours]['cpu_us'] / res[base]['cpu_us']:.2f}x")
            print(f"# load after run {run}: {os.getloadavg()[0]:.2f}", flush=True)
        summary(rates, a.runs)
    finally:
        if not a.topic:
            for t in topics.values():
                subprocess.run([KSTOOL, "delete", "-b", boot, "-t", t], capture_output=True)


if __name__ == "__main__":
    main()
