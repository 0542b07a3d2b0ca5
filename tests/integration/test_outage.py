"""A broker outage seen through the real binary: the group status tells the confirmed commit
from the one in flight, /healthz and gRPC health agree, and a new group's fetch says Kafka
is unreachable. Each test kills (-9) and restarts a broker of its own, never the shared one."""
import os
import signal
import subprocess
import tempfile
import threading
import time
import json
import urllib.error
import urllib.request

import grpc
import pytest

from conftest import (KAFKA_SH, Sidecar, create_topic, describe_group, produce, started_processes,
                      unique, wait_for)
from grpc_support import (SERVING, consumer_pb2, consumer_pb2_grpc, health_pb2, health_pb2_grpc,
                          producer_pb2, producer_pb2_grpc)


class Broker:
    """A broker of our own (tests/kafka/kafka.sh start DIR), killed and restarted on the same
    ports and data directory."""

    def __init__(self):
        for attempt in range(2):  # a free port picked for it may be taken before it binds
            self.dir = tempfile.mkdtemp(prefix="ksidecar-outage.")
            out = subprocess.run([KAFKA_SH, "start", self.dir], capture_output=True, text=True,
                                 timeout=180)
            if out.returncode == 0:
                break
            self.stop()
            print(f"broker start {attempt + 1} failed: {out.stderr[-1500:]}")
        assert out.returncode == 0, out.stderr[-3000:]
        self.bootstrap = out.stdout.strip().splitlines()[-1]

    def pid(self):
        with open(os.path.join(self.dir, "pid")) as f:
            return int(f.read())

    def kill9(self):
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
                 open(f"/proc/{pid}/stat").read().split()[2] == "Z", 30, 0.1, "broker gone")

    def restart(self):
        out = subprocess.run([KAFKA_SH, "restart", self.dir], capture_output=True, text=True,
                             timeout=180)
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.strip().splitlines()[-1] == self.bootstrap

    def pause(self, on):
        os.kill(self.pid(), signal.SIGSTOP if on else signal.SIGCONT)

    def up(self):
        try:
            return os.path.exists(f"/proc/{self.pid()}")
        except OSError:
            return False

    def stop(self):
        subprocess.run([KAFKA_SH, "stop", self.dir], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def broker():
    b = Broker()
    yield b
    b.stop()


@pytest.fixture
def live_broker(broker):
    """The module's broker, running (a test that failed mid-outage left it dead)."""
    if not broker.up():
        broker.restart()
    return broker


@pytest.fixture
def sidecar(live_broker, tmp_path):
    """Starts ksidecar processes on the test's own broker; kills them at teardown."""
    yield from started_processes(
        lambda args=(): Sidecar(live_broker.bootstrap, args=args, tmp_path=tmp_path))


def grpc_health(sc):
    with grpc.insecure_channel(f"127.0.0.1:{sc.grpc_port}") as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""),
                                                 timeout=10)
        return r.status


def parts(sc, g):
    st, body = sc.get(f"/v1/groups/{g}")
    assert st == 200, (st, body)
    return {p["partition"]: p for p in body["partitions"]}


def test_status_shows_the_confirmed_commit_and_the_one_in_flight(live_broker, sidecar):
    b = live_broker
    topic, g = unique("tout"), unique("gout")
    create_topic(b.bootstrap, topic, 2)
    produce(b.bootstrap, topic, 4000, partitions=2)
    # librdkafka drops an assignment whose heartbeats fail for session.timeout.ms: longer
    # than the outage here, as librdkafka's default (45 s) is.
    sc = sidecar(["--commit.interval_ms=200", "--kafka.session.timeout.ms=45000",
                  "--kafka.heartbeat.interval.ms=3000"])

    def fetch_ack(n):
        recs = sc.fetch(g, topic, max=n, wait_ms=5000)
        if recs:
            st, body = sc.ack(g, [r["ack_id"] for r in recs])
            assert st == 200 and all(x["status"] == "OK" for x in body["results"]), body
        return recs

    got = []
    deadline = time.time() + 60
    while (len(got) < 1000 or len({r["partition"] for r in got}) < 2) and time.time() < deadline:
        got += fetch_ack(500)
    assert {r["partition"] for r in got} == {0, 1}

    def all_confirmed():
        """Up: everything sent is confirmed, nothing in flight."""
        ps = parts(sc, g)
        ok = len(ps) == 2 and all(
            p["commit_in_flight"] is None and p["committed_offset"] is not None
            for p in ps.values())
        return ps if ok else None
    before = wait_for(all_confirmed, 60, 1, "commits confirmed")
    confirmed = {p: v["committed_offset"] for p, v in before.items()}
    print(f"confirmed before the outage: {confirmed}")

    b.kill9()
    t0 = time.time()
    down = []
    for _ in range(4):  # prefetched records still come from the windows; acks go on
        down += fetch_ack(500)
    acked_down, moved = len(down), {r["partition"] for r in down}
    # The acks moved the commit points; the commits cannot be confirmed while it is down.
    seen_in_flight = False
    while time.time() - t0 < 10:
        ps = parts(sc, g)
        assert len(ps) == 2, ps
        for p, v in ps.items():
            assert v["committed_offset"] == confirmed[p], \
                f"committed_offset moved during the outage: {v} (was {confirmed[p]})"
            if v["commit_in_flight"] is not None and v["commit_in_flight"] > confirmed[p]:
                seen_in_flight = True
        time.sleep(0.5)
    shown = [(v["committed_offset"], v["commit_in_flight"]) for v in ps.values()]
    print(f"acked {acked_down} records while the broker was down; in flight seen: "
          f"{seen_in_flight}; (committed_offset, commit_in_flight): {shown}")
    assert acked_down > 0 and seen_in_flight

    b.restart()
    print(f"broker back after {time.time() - t0:.1f} s")
    # Once the broker is back the commits are confirmed; the status then agrees with Kafka.
    wait_for(lambda: (lambda ps: len(ps) == 2 and all(
        v["commit_in_flight"] is None and (p not in moved or v["committed_offset"] > confirmed[p])
        for p, v in ps.items()))(parts(sc, g)) or None, 90, 0.5,
        "commits confirmed after the restart")
    # The status agrees with Kafka, at the commit point of every ack: an older commit that
    # librdkafka retried past a newer one shows (the group holds it) and is committed over.
    acked_to = {}
    for r in got + down:
        acked_to[r["partition"]] = max(acked_to.get(r["partition"], 0), r["offset"] + 1)

    def agree():
        ps = parts(sc, g)
        kafka = describe_group(b.bootstrap, g, topic)
        same = all(kafka[p][0] == v["committed_offset"] == acked_to[p] and
                   v["commit_in_flight"] is None for p, v in ps.items())
        return ps if same else print(f"status {ps}, kafka {kafka}, acked to {acked_to}")
    ps = wait_for(agree, 30, 1, "the status agreeing with Kafka at the acked commit point")
    st, body = sc.get(f"/v1/groups/{g}")
    print(f"after: {[(v['committed_offset'], v['commit_in_flight']) for v in ps.values()]}, "
          f"acks lost to a move: {body['counters']['acks_lost_to_move']}")
    # gRPC GetGroup shows the same fields.
    with grpc.insecure_channel(f"127.0.0.1:{sc.grpc_port}") as ch:
        r = consumer_pb2_grpc.ConsumerStub(ch).GetGroup(
            consumer_pb2.GetGroupRequest(group=g), timeout=10)
        gp = {p.partition: p for p in r.partitions}
        for p, v in ps.items():
            assert gp[p].committed_offset == v["committed_offset"]
            assert gp[p].commit_in_flight == -1
        assert r.acks_lost_to_move == body["counters"]["acks_lost_to_move"] == 0
    assert sc.stop() == 0


def test_deliveries_stop_at_the_cap_on_unconfirmed_acks_and_resume(live_broker, sidecar):
    """With the broker down no commit is confirmed: a partition delivers new records only
    until group.max_unconfirmed_acks acks wait for a confirmed commit, then none, and resumes
    once the broker is back; nothing is lost."""
    b = live_broker
    topic, g = unique("tcap"), unique("gcap")
    n, cap, batch = 3000, 300, 50
    create_topic(b.bootstrap, topic, 1)
    produce(b.bootstrap, topic, n)
    sc = sidecar(["--commit.interval_ms=200", "--kafka.session.timeout.ms=45000",
                  "--kafka.heartbeat.interval.ms=3000", f"--group.max_unconfirmed_acks={cap}"])
    seen = {}

    def fetch_ack(wait_ms=3000):
        recs = sc.fetch(g, topic, max=batch, wait_ms=wait_ms)
        if recs:
            st, body = sc.ack(g, [r["ack_id"] for r in recs])
            assert st == 200 and all(x["status"] == "OK" for x in body["results"]), body
        for r in recs:
            seen[r["offset"]] = seen.get(r["offset"], 0) + 1
        return recs

    deadline = time.time() + 60
    while len(seen) < 500 and time.time() < deadline:
        fetch_ack()
    wait_for(lambda: (lambda p: p["commit_in_flight"] is None and
                      p["committed_offset"] == len(seen))(parts(sc, g)[0]) or None,
             60, 0.3, "commits confirmed")
    # Everything is prefetched, so only the cap can stop the deliveries.
    wait_for(lambda: parts(sc, g)[0]["window_records"] >= n - len(seen), 60, 0.3, "prefetch")
    before = len(seen)
    b.kill9()
    down, empty = 0, 0
    deadline = time.time() + 30
    while empty < 3 and time.time() < deadline:
        got = len(fetch_ack(wait_ms=1000))
        down += got
        empty = empty + 1 if got == 0 else 0
    p = parts(sc, g)[0]
    print(f"acked {down} new records with the broker down (cap {cap}, fetches of {batch}); "
          f"status: held_back {p['held_back']}, window {p['window_records']}")
    assert empty == 3, "deliveries did not stop while no commit could be confirmed"
    # It stops at the cap: a fetch started below it may take one batch past it.
    assert cap <= down < cap + batch, down
    assert p["held_back"] is True, p
    b.restart()
    deadline = time.time() + 120
    while len(seen) < n and time.time() < deadline:
        fetch_ack()
    assert sorted(seen) == list(range(n)), f"lost: {n - len(seen)}"
    dups = sum(c - 1 for c in seen.values())
    print(f"after the restart: {len(seen)} records, {dups} delivered twice, {before} before")
    assert dups == 0
    wait_for(lambda: (lambda p: p["committed_offset"] == n and not p["held_back"])(
        parts(sc, g)[0]) or None, 60, 0.3, "committed to the end, not held back")
    assert sc.stop() == 0


def test_healthz_says_what_grpc_health_says(live_broker, sidecar):
    b = live_broker
    sc = sidecar()
    assert grpc_health(sc) == SERVING
    assert sc.get("/healthz") == (200, {"status": "ok"})
    b.kill9()
    t0 = time.time()
    wait_for(lambda: grpc_health(sc) != SERVING, 30, 0.2, "gRPC health NOT_SERVING")
    t_grpc = time.time() - t0
    st, body = sc.get("/healthz")
    print(f"gRPC NOT_SERVING after {t_grpc:.1f} s; /healthz then: {st} {body}")
    assert st == 503 and body["status"] == "NOT_SERVING" and "unreachable" in body["reason"], body
    # Agree on every sample while it is down.
    for _ in range(5):
        h, (st, _b) = grpc_health(sc), sc.get("/healthz")
        assert (h == SERVING) == (st == 200), (h, st)
        time.sleep(0.3)
    b.restart()
    wait_for(lambda: grpc_health(sc) == SERVING, 60, 0.3, "gRPC health SERVING again")
    assert sc.get("/healthz") == (200, {"status": "ok"})
    assert sc.stop() == 0


def test_a_new_groups_fetch_while_kafka_is_down_is_unavailable(live_broker, sidecar):
    b = live_broker
    topic = unique("tdown")
    create_topic(b.bootstrap, topic, 1)
    produce(b.bootstrap, topic, 10)
    sc = sidecar()
    b.kill9()
    # At once, before the probe noticed: the new group's consumer finds no broker.
    t0 = time.time()
    st, body = sc.get(f"/v1/groups/{unique('gnew')}/records?topic={topic}&wait_ms=8000")
    print(f"first fetch after the kill: {st} {body} in {time.time() - t0:.1f} s")
    assert st == 503 and body["error"]["code"] == "UNAVAILABLE", (st, body)
    assert "unreachable" in body["error"]["message"], body
    # Once health says so, at once and on both edges.
    wait_for(lambda: sc.get("/healthz")[0] == 503, 30, 0.2, "/healthz 503")
    t0 = time.time()
    st, body = sc.get(f"/v1/groups/{unique('gnew')}/records?topic={topic}&wait_ms=8000")
    print(f"fetch when health is down: {st} {body} in {time.time() - t0:.1f} s")
    assert st == 503 and "unreachable" in body["error"]["message"], (st, body)
    with grpc.insecure_channel(f"127.0.0.1:{sc.grpc_port}") as ch:
        with pytest.raises(grpc.RpcError) as ei:
            consumer_pb2_grpc.ConsumerStub(ch).Fetch(
                consumer_pb2.FetchRequest(group=unique("gnew"), topics=[topic], max=1,
                                          wait_ms=2000), timeout=30)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, ei.value
        assert "unreachable" in ei.value.details()
    b.restart()
    wait_for(lambda: sc.get("/healthz")[0] == 200, 60, 0.3, "/healthz 200")
    g = unique("gnew")
    recs = []
    deadline = time.time() + 60
    while len(recs) < 10 and time.time() < deadline:
        st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&max=10&wait_ms=2000")
        assert st == 200, (st, body)
        recs += body["records"]
    assert len(recs) == 10
    assert sc.stop() == 0


def test_a_produce_while_kafka_is_down_is_refused_at_once(live_broker, sidecar):
    """A produce the process knows cannot reach Kafka is answered within a second with 503 and
    Retry-After (HTTP) or UNAVAILABLE (gRPC), not after librdkafka's message.timeout.ms; once
    Kafka is back the same produce is written."""
    b = live_broker
    topic = unique("tprodown")
    create_topic(b.bootstrap, topic, 1)
    sc = sidecar()
    b.kill9()
    wait_for(lambda: sc.get("/healthz")[0] == 503, 30, 0.2, "/healthz 503")
    body = json.dumps({"records": [{"value": "v1"}]}).encode()
    req = urllib.request.Request(f"{sc.base}/v1/topics/{topic}/records", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(req, timeout=30)
    took = time.time() - t0
    err = json.loads(ei.value.read())
    print(f"HTTP produce while down: {ei.value.code} {err} in {took:.2f} s")
    assert ei.value.code == 503 and err["error"]["code"] == "UNAVAILABLE", err
    assert "unreachable" in err["error"]["message"] and "no record was sent" in err["error"]["message"]
    assert int(ei.value.headers["Retry-After"]) > 0
    assert took < 5, took  # not message.timeout.ms (300 s); the figure is printed
    with grpc.insecure_channel(f"127.0.0.1:{sc.grpc_port}") as ch:
        t0 = time.time()
        with pytest.raises(grpc.RpcError) as gi:
            producer_pb2_grpc.ProducerStub(ch).Produce(
                producer_pb2.ProduceRequest(
                    records=[producer_pb2.ProduceRecord(topic=topic, value=b"v2")]), timeout=30)
        took = time.time() - t0
        print(f"gRPC produce while down: {gi.value.code()} in {took:.2f} s")
        assert gi.value.code() == grpc.StatusCode.UNAVAILABLE, gi.value
        assert "unreachable" in gi.value.details()
        assert took < 5, took  # not message.timeout.ms (300 s); the figure is printed
    b.restart()
    wait_for(lambda: sc.get("/healthz")[0] == 200, 60, 0.3, "/healthz 200")
    st, res = sc.post(f"/v1/topics/{topic}/records", {"records": [{"value": "v3"}]})
    assert st == 200 and res["results"][0].get("offset", -1) >= 0, (st, res)
    assert sc.stop() == 0


def http_produce(sc, topic, body):
    """POSTs body; returns (status, JSON answer, seconds taken)."""
    req = urllib.request.Request(f"{sc.base}/v1/topics/{topic}/records",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), time.time() - t0
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), time.time() - t0


def test_a_produce_answers_at_its_own_deadline(live_broker, sidecar):
    """With the broker frozen (SIGSTOP) before the probe notices, a produce is answered at its
    deadline: the request's timeout_ms over gRPC, produce.timeout_ms over HTTP, with 504 /
    DEADLINE_EXCEEDED saying the records may still be written; once the broker runs again
    the process produces as before."""
    b = live_broker
    topic = unique("tprodl")
    create_topic(b.bootstrap, topic, 1)
    sc = sidecar(["--produce.timeout_ms=700"])
    st, res, _ = http_produce(sc, topic, {"records": [{"value": "warm"}]})
    assert st == 200 and res["results"][0]["offset"] >= 0, (st, res)
    out = {}

    def grpc_call():
        with grpc.insecure_channel(f"127.0.0.1:{sc.grpc_port}") as ch:
            t0 = time.time()
            try:
                producer_pb2_grpc.ProducerStub(ch).Produce(producer_pb2.ProduceRequest(
                    records=[producer_pb2.ProduceRecord(topic=topic, value=b"g")],
                    timeout_ms=400), timeout=60)
                out["grpc"] = ("OK", "", time.time() - t0)
            except grpc.RpcError as e:
                out["grpc"] = (e.code(), e.details(), time.time() - t0)

    b.pause(True)
    try:
        th = threading.Thread(target=grpc_call)
        th.start()
        st, err, took = http_produce(sc, topic, {"records": [{"value": "h"}]})
        th.join(60)
    finally:
        b.pause(False)
    print(f"HTTP produce, broker frozen, produce.timeout_ms=700: {st} {err} in {took:.2f} s; "
          f"gRPC timeout_ms=400: {out.get('grpc')}")
    assert st == 504 and err["error"]["code"] == "DEADLINE_EXCEEDED", (st, err)
    assert "timeout_ms" in err["error"]["message"] and "may still be written" in err["error"]["message"]
    assert took < 5, took  # answered at 0.7 s, not at message.timeout.ms (300 s)
    code, details, gtook = out["grpc"]
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED, out
    assert "may still be written" in details and gtook < 5, out
    wait_for(lambda: http_produce(sc, topic, {"records": [{"value": "after"}]})[0] == 200, 60,
             0.5, "produce after the broker resumed")
    assert sc.stop() == 0


def test_a_bad_timeout_ms_is_refused_naming_it(live_broker, sidecar):
    b = live_broker
    topic = unique("tprobad")
    create_topic(b.bootstrap, topic, 1)
    sc = sidecar()
    for bad in (0, -1, 300001, "5", 1.5):
        st, err, _ = http_produce(sc, topic, {"records": [{"value": "x"}], "timeout_ms": bad})
        assert st == 400 and err["error"]["code"] == "INVALID_ARGUMENT", (bad, st, err)
        assert "timeout_ms" in err["error"]["message"], err
    st, res, _ = http_produce(sc, topic, {"records": [{"value": "x"}], "timeout_ms": 30000})
    assert st == 200 and res["results"][0]["offset"] >= 0, (st, res)
    with grpc.insecure_channel(f"127.0.0.1:{sc.grpc_port}") as ch:
        stub = producer_pb2_grpc.ProducerStub(ch)
        for bad in (-1, 300001):
            with pytest.raises(grpc.RpcError) as gi:
                stub.Produce(producer_pb2.ProduceRequest(
                    records=[producer_pb2.ProduceRecord(topic=topic, value=b"x")],
                    timeout_ms=bad), timeout=30)
            assert gi.value.code() == grpc.StatusCode.INVALID_ARGUMENT, gi.value
            assert "timeout_ms" in gi.value.details(), gi.value
        r = stub.Produce(producer_pb2.ProduceRequest(
            records=[producer_pb2.ProduceRecord(topic=topic, value=b"x")], timeout_ms=30000),
            timeout=30)
        assert r.results[0].offset >= 0 and not r.results[0].error, r
    assert sc.stop() == 0
