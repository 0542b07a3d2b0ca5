"""Failover under load on a three-broker cluster (issue 38): run under the cluster mode,
KSIDECAR_TEST_KAFKA_NODES=3 tests/kafka/kafka.sh run python3 -m pytest ... this file.

Each test produces with acks=all while one ksidecar (its own session timeout, a cap on
unconfirmed acks of CAP) is consumed with out-of-order acks, and a broker fails mid-stream.
Every record the broker acknowledged is counted from its produce to its commit:

- 0 lost: every acknowledged record is delivered, and the group commits to the end;
- duplicates counted, printed and bounded by DUP_BOUND: per partition, the cap on unconfirmed
  acks plus the records a consumer holds leased (a lost assignment delivers at most those
  again);
- consumption moves again after the broker's death: the target is 15 s; asserted with a
  generous margin (RECOVERY_BOUND_S) on this shared machine, the time printed;
- after it, /readyz is 200 and the group's status shows every partition committed to the
  end, nothing stalled or held back;
- the dead-letter producer (acks=all) keeps every record it was given through the death of
  its topic's leader, and the redrive (idempotent, acks=all) every record it moves back."""
import http.client
import json
import os
import random
import subprocess
import threading
import time

import grpc
import pytest

from conftest import (KAFKA_SH, Sidecar, describe_group, kstool, started_processes, unique,
                      wait_for, watermarks)
from grpc_support import consumer_pb2, consumer_pb2_grpc, SubscribeStream, StreamClosed

NODES = int(os.environ.get("KSIDECAR_TEST_KAFKA_NODES", "1"))
pytestmark = pytest.mark.skipif(
    NODES < 3, reason="needs the cluster mode: KSIDECAR_TEST_KAFKA_NODES=3 tests/kafka/kafka.sh run")

PARTS = 4
RECORDS = 20000
CAP = 1000            # --group.max_unconfirmed_acks
HELD = 500            # most records one consumer holds leased (its batch, or its credits)
RECOVERY_BOUND_S = 60  # target 15 s; 4x margin for a loaded 2-core machine
PAUSE_S = 40            # a broker paused past the session timeout (30 s)
PAUSED_BOUND_S = 30     # its target 15 s too; shorter than the pause


def dup_bound(consumers):
    return PARTS * CAP + consumers * HELD


def kafka(*args, timeout=180):
    out = subprocess.run([KAFKA_SH, *args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"kafka.sh {' '.join(args)}: {out.stderr[-2000:]}"
    return out.stdout.strip()


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic_rf3(bootstrap, topic):
    from confluent_kafka.admin import NewTopic
    a = admin(bootstrap)  # kept alive until the future is done
    a.create_topics([NewTopic(topic, PARTS, replication_factor=3)])[topic].result(60)
    wait_for(lambda: len(leaders(bootstrap, topic)) == PARTS, 30, 0.3, "topic leaders")


def leaders(bootstrap, topic):
    md = admin(bootstrap).list_topics(topic, timeout=20)
    return {p: pm.leader for p, pm in md.topics[topic].partitions.items() if pm.leader >= 0}


def coordinator(bootstrap, group):
    a = admin(bootstrap)
    return a.describe_consumer_groups([group], request_timeout=20)[group].result(30).coordinator.id


class Producer(threading.Thread):
    """Produces RECORDS records with acks=all at about `rate` a second; `acked` holds the
    (partition, offset) of each the broker acknowledged."""

    def __init__(self, bootstrap, topic, rate=700):
        super().__init__(daemon=True)
        from confluent_kafka import Producer as P
        # socket.timeout.ms as ksidecar's (kconf.c): at librdkafka's 60 s the records for a
        # paused leader waited for its resume, and the consumers had nothing to deliver.
        self.p = P({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                    "linger.ms": 5, "message.timeout.ms": 120000,
                    "socket.timeout.ms": 10000})
        self.topic, self.rate = topic, rate
        self.acked, self.failed = set(), 0
        self.start()

    def _cb(self, err, msg):
        if err:
            self.failed += 1
        else:
            self.acked.add((msg.partition(), msg.offset()))

    def run(self):
        t0 = time.time()
        for i in range(RECORDS):
            self.p.produce(self.topic, key=str(i).encode(), value=b"v%d" % i, on_delivery=self._cb)
            if i % 100 == 99:
                self.p.poll(0)
                ahead = (i + 1) / self.rate - (time.time() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        self.p.flush(180)


class Counter:
    """Every delivery of every record, and when deliveries came."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = {}
        self.times = []
        self.stop = threading.Event()

    def add(self, recs):
        now = time.time()
        with self.lock:
            for p, off in recs:
                self.seen[(p, off)] = self.seen.get((p, off), 0) + 1
            if recs:
                self.times.append(now)

    def distinct(self):
        with self.lock:
            return len(self.seen)

    def duplicates(self):
        with self.lock:
            return sum(c - 1 for c in self.seen.values())

    def gap_after(self, t):
        """The longest time without a delivery from t on (to the last delivery), and the
        time of the delivery that ended it."""
        with self.lock:
            ts = [x for x in self.times if x >= t]
        prev, gap, end = t, 0.0, t
        for x in ts:
            if x - prev > gap:
                gap, end = x - prev, x
            prev = x
        return gap, end


def shuffled_acks(ids, held):
    """Out of order: this batch's ids shuffled, with a twentieth of them held for the next."""
    ids = held + ids
    random.shuffle(ids)
    keep = len(ids) // 20
    return ids[keep:], ids[:keep]


def fetch_consumer(sc, g, topic, counter):
    """HTTP long-poll fetches of up to HELD records, acked out of order."""
    held = []
    while not counter.stop.is_set():
        try:
            recs = sc.fetch(g, topic, max=HELD - len(held), wait_ms=1000)
        except (OSError, AssertionError):
            time.sleep(0.5)
            continue
        counter.add([(r["partition"], r["offset"]) for r in recs])
        now, held = shuffled_acks([r["ack_id"] for r in recs], held)
        try:
            if now:
                sc.ack(g, now)
        except OSError:
            time.sleep(0.5)
        time.sleep(0.02)
    if held:
        sc.ack(g, held)


def http_stream_consumer(sc, g, topic, counter):
    """GET /stream (NDJSON), HELD records in flight, acked by POST in shuffled batches."""
    while not counter.stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", sc.port, timeout=5)
        try:
            conn.request("GET", f"/v1/groups/{g}/stream?topic={topic}&max_in_flight={HELD}")
            resp = conn.getresponse()
            ids, held, last = [], [], time.time()
            while not counter.stop.is_set():
                try:
                    line = resp.readline()
                except TimeoutError:
                    line = b"\n"
                if not line and resp.isclosed():
                    break
                if line.strip():
                    obj = json.loads(line)
                    if "ack_id" in obj:
                        counter.add([(obj["partition"], obj["offset"])])
                        ids.append(obj["ack_id"])
                if len(ids) >= 100 or (ids and time.time() - last > 0.2):
                    now, held = shuffled_acks(ids, held)
                    sc.ack(g, now)
                    ids, last = [], time.time()
            if ids or held:
                sc.ack(g, ids + held)
        except (OSError, http.client.HTTPException, ValueError):
            time.sleep(0.5)
        finally:
            conn.close()


def grpc_consumer(sc, g, topic, counter):
    """A Subscribe stream with HELD credits, acked on the stream in shuffled batches."""
    with grpc.insecure_channel(f"127.0.0.1:{sc.grpc_port}") as ch:
        stub = consumer_pb2_grpc.ConsumerStub(ch)
        while not counter.stop.is_set():
            s = SubscribeStream(stub, consumer_pb2.Open(
                group=g, topics=[topic], credits=consumer_pb2.Credits(records=HELD),
                subscriber="grpc"), timeout=600)
            held = []
            try:
                while not counter.stop.is_set():
                    r = s.get(0.5)
                    if r is None or not r.HasField("batch"):
                        continue
                    recs = r.batch.records
                    counter.add([(x.partition, x.offset) for x in recs])
                    now, held = shuffled_acks([x.ack_id for x in recs], held)
                    if now:
                        s.ack(now)
                if held:
                    s.ack(held)
                    time.sleep(0.5)
            except StreamClosed:
                time.sleep(0.5)
            finally:
                s.cancel()


@pytest.fixture
def cluster(bootstrap):
    yield bootstrap
    # A test that failed mid-fault leaves no node down or paused for the next.
    for i in range(1, NODES + 1):
        subprocess.run([KAFKA_SH, "node", "resume", str(i)], capture_output=True, timeout=30)
        pid = kafka("node", "pid", str(i))
        if not os.path.exists(f"/proc/{pid}"):
            kafka("node", "start", str(i))


@pytest.fixture
def sidecar(cluster, tmp_path):
    # ksidecar's own session timeout (kafka_timeouts=False), not the tests' short one.
    yield from started_processes(lambda args=(): Sidecar(
        cluster, args=["--commit.interval_ms=500", f"--group.max_unconfirmed_acks={CAP}",
                       *args], tmp_path=tmp_path, kafka_timeouts=False))


class Run:
    """One topic under load: a producer, consumers on threads, then the reckoning."""

    def __init__(self, bootstrap, sc, kinds=("fetch",)):
        self.bootstrap, self.sc = bootstrap, sc
        self.topic, self.g = unique("tfail"), unique("gfail")
        create_topic_rf3(bootstrap, self.topic)
        self.counter = Counter()
        self.producer = Producer(bootstrap, self.topic)
        fns = {"fetch": fetch_consumer, "http_stream": http_stream_consumer,
               "grpc": grpc_consumer}
        self.threads = [threading.Thread(target=fns[k], args=(sc, self.g, self.topic,
                                                             self.counter), daemon=True)
                        for k in kinds]
        for t in self.threads:
            t.start()

    def until_consumed(self, n, timeout=120):
        wait_for(lambda: self.counter.distinct() >= n, timeout, 0.2, f"{n} records consumed")

    def finish(self, t_fault, what, bound=RECOVERY_BOUND_S):
        self.producer.join(240)
        assert not self.producer.is_alive(), "the producer did not finish"
        acked = self.producer.acked
        deadline = time.time() + 180
        while time.time() < deadline:
            with self.counter.lock:
                missing = acked - self.counter.seen.keys()
            if not missing:
                break
            time.sleep(0.5)
        self.counter.stop.set()
        for t in self.threads:
            t.join(30)
        gap, gap_end = self.counter.gap_after(t_fault)
        # What a client had leased but not read when it stopped goes back to the window, and
        # a produce retried across a broker's restart may have written a record twice, at an
        # offset its producer never heard of: take and ack the rest, counted like the others.
        quiet, drain_end = 0, time.time() + 60
        while quiet < 3 and time.time() < drain_end:
            recs = self.sc.fetch(self.g, self.topic, max=500, wait_ms=1000)
            if recs:
                self.counter.add([(r["partition"], r["offset"]) for r in recs])
                st, _ = self.sc.ack(self.g, [r["ack_id"] for r in recs])
                assert st == 200
                quiet = 0
            else:
                quiet += 1
        lost = len(missing)
        ends = {}
        for p, off in acked:
            ends[p] = max(ends.get(p, 0), off + 1)
        dups = self.counter.duplicates()
        st, body = self.sc.get(f"/v1/groups/{self.g}")
        print(f"\n{what}: {len(acked)} records acknowledged by the broker "
              f"({self.producer.failed} produce errors), {self.counter.distinct()} delivered, "
              f"{lost} lost, {dups} duplicates (bound {dup_bound(len(self.threads))}), "
              f"longest pause after the fault {gap:.1f} s (to +{gap_end - t_fault:.1f} s), "
              f"acks lost to a move "
              f"{body['counters']['acks_lost_to_move'] if st == 200 else '?'}")
        assert lost == 0, f"{lost} acknowledged records never delivered: {sorted(missing)[:10]}"
        assert dups <= dup_bound(len(self.threads)), dups
        assert gap < bound, f"no delivery for {gap:.1f} s after the fault (bound {bound} s)"

        def committed():
            st, body = self.sc.get(f"/v1/groups/{self.g}")
            ps = {p["partition"]: p for p in body.get("partitions", [])} if st == 200 else {}
            ok = len(ps) == PARTS and all(ps[p]["committed_offset"] == e for p, e in ends.items())
            if not ok:
                print(f"not committed to the end {ends}: " + str({
                    p: {k: v.get(k) for k in ("committed_offset", "commit_in_flight", "state",
                                              "in_flight", "held_back", "stall_reason")}
                    for p, v in ps.items()}))
            return ps if ok else None
        ps = wait_for(committed, 90, 0.5, "the group committed to the end")
        for p in ps.values():
            assert not p["stalled"] and not p["held_back"] and p["commit_in_flight"] is None, p
        kafka_view = describe_group(self.bootstrap, self.g, self.topic)
        assert {p: kafka_view[p][0] for p in ends} == ends, kafka_view
        wait_for(lambda: self.sc.get("/readyz")[0] == 200, 60, 0.5, "/readyz 200")
        st, body = self.sc.get("/healthz")
        assert st == 200, body
        return dups, gap, gap_end


def kill_mid_stream(cluster, sc, pick, what):
    """A quarter consumed, kills (-9) the node pick(run) names; once half is consumed,
    starts it again; then the reckoning."""
    run = Run(cluster, sc)
    run.until_consumed(RECORDS // 4)
    victim = pick(run)
    t0 = time.time()
    kafka("node", "kill", str(victim))
    print(f"killed node {victim}, {what}; the controller now: {kafka('quorum-leader')}, "
          f"the group's coordinator now: {coordinator(cluster, run.g)}")
    run.until_consumed(RECORDS // 2, timeout=RECOVERY_BOUND_S * 2)
    kafka("node", "start", str(victim))
    run.finish(t0, f"{what} (node {victim}) killed")
    assert sc.stop() == 0


def test_leader_killed_with_kill_9_mid_stream_then_restarted(cluster, sidecar):
    kill_mid_stream(cluster, sidecar(), lambda run: leaders(cluster, run.topic)[0],
                    "the leader of partition 0")


def test_rolling_restart_with_a_grpc_and_an_http_stream(cluster, sidecar):
    sc = sidecar()
    run = Run(cluster, sc, kinds=("grpc", "http_stream"))
    run.until_consumed(RECORDS // 5)
    t0 = time.time()
    for i in range(1, NODES + 1):
        kafka("node", "stop", str(i))
        kafka("node", "start", str(i))
        print(f"node {i} restarted at +{time.time() - t0:.1f} s")
    run.finish(t0, "rolling restart")
    assert sc.stop() == 0


def test_active_controller_killed(cluster, sidecar):
    kill_mid_stream(cluster, sidecar(), lambda run: int(kafka("quorum-leader")),
                    "the active controller")


def test_coordinator_broker_paused_longer_than_the_session_timeout(cluster, sidecar):
    """To the cluster a paused broker is dead once its broker.session.timeout.ms (9 s)
    passes: its leaderships and the group's coordinator move. Deliveries must move again
    while it is still paused, not only after it resumes."""
    sc = sidecar()
    run = Run(cluster, sc)
    run.until_consumed(RECORDS // 4)
    victim = coordinator(cluster, run.g)
    t0 = time.time()
    kafka("node", "pause", str(victim))
    print(f"paused node {victim}, the group's coordinator, for {PAUSE_S} s "
          "(session timeout 30 s)")
    time.sleep(PAUSE_S)
    t_resume = time.time()
    kafka("node", "resume", str(victim))
    # Requests to the paused broker time out after socket.timeout.ms (kconf.c): 8.1-14.2 s
    # without a delivery measured, against 32-33 s to after the resume (and the assignment
    # lost) at librdkafka's default 60 s. The bound, twice the target of 15 s, is shorter
    # than the pause, and the longest stall must end before the resume.
    print(f"node {victim} resumed at +{t_resume - t0:.1f} s")
    _, _, gap_end = run.finish(t0, f"coordinator {victim} paused {PAUSE_S} s",
                               bound=PAUSED_BOUND_S)
    assert gap_end < t_resume, "consumption waited for the paused broker's resume"
    assert sc.stop() == 0


def test_dead_letters_through_a_killed_leader(cluster, sidecar):
    """Every tenth record is rejected to the dead-letter topic (acks=all) while the leader of
    its partition 0 is killed and restarted: each record rejected with an OK answer is in the
    dead-letter topic, the rest are acked, and the source commits to the end."""
    dlq = unique("tdlq")
    create_topic_rf3(cluster, dlq)
    sc = sidecar(["--group.dead_letter_topic=" + dlq])
    run = Run(cluster, sc, kinds=())
    rejected = set()

    def consume():
        while not run.counter.stop.is_set():
            try:
                recs = sc.fetch(run.g, run.topic, max=HELD, wait_ms=1000)
            except (OSError, AssertionError):
                time.sleep(0.5)
                continue
            run.counter.add([(r["partition"], r["offset"]) for r in recs])
            poison = [r for r in recs if r["offset"] % 10 == 0]
            rest = [r["ack_id"] for r in recs if r["offset"] % 10 != 0]
            try:
                if poison:
                    st, body = sc.post(f"/v1/groups/{run.g}/nacks", {
                        "ack_ids": [r["ack_id"] for r in poison], "dead_letter": True,
                        "reason": "poison"})
                    assert st == 200, (st, body)
                    for r, res in zip(poison, body["results"]):
                        if res["status"] == "OK":
                            rejected.add((r["partition"], r["offset"]))
                if rest:
                    random.shuffle(rest)
                    sc.ack(run.g, rest)
            except OSError:
                time.sleep(0.5)

    t = threading.Thread(target=consume, daemon=True)
    run.threads.append(t)
    t.start()
    run.until_consumed(RECORDS // 4)
    victim = leaders(cluster, dlq)[0]
    t0 = time.time()
    kafka("node", "kill", str(victim))
    print(f"killed node {victim}, the leader of the dead-letter topic's partition 0")
    run.until_consumed(RECORDS // 2, timeout=RECOVERY_BOUND_S * 2)
    kafka("node", "start", str(victim))
    run.finish(t0, f"dead-letter leader (node {victim}) killed")

    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": cluster, "group.id": unique("dlqread"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(dlq, p, 0) for p in range(PARTS)])
    found, copies = set(), 0
    deadline = time.time() + 60
    while time.time() < deadline and not rejected <= found:
        for m in c.consume(500, timeout=1.0):
            if m.error():
                continue
            h = {k: v.decode() for k, v in (m.headers() or [])}
            assert h["ksidecar.original.topic"] == run.topic, h
            assert h["ksidecar.last_error"] == "poison", h
            found.add((int(h["ksidecar.original.partition"]), int(h["ksidecar.original.offset"])))
            copies += 1
    c.close()
    missing = rejected - found
    print(f"dead letters: {len(rejected)} rejected, {len(found)} in the topic "
          f"({copies - len(found)} written twice), {len(missing)} missing")
    assert len(rejected) >= RECORDS // 20, len(rejected)
    assert not missing, sorted(missing)[:10]
    assert sc.stop() == 0


REDRIVE_RECORDS = 60000


def test_redrive_through_a_killed_leader(cluster, sidecar):
    """REDRIVE_RECORDS records dead-lettered (replication factor 3) are redriven back to
    their topic while the broker of the redrive's coordinator, a leader of both topics, is
    killed (-9) mid-redrive, then restarted: each comes back once, and the one redrive call
    reports nothing left (the test calls again where one stopped on an error, and counts
    what that costs)."""
    from confluent_kafka import Consumer, Producer as P, TopicPartition
    topic, dlq, g = unique("tredrive"), unique("tredrivedl"), unique("gredrive")
    create_topic_rf3(cluster, topic)
    create_topic_rf3(cluster, dlq)
    sc = sidecar(["--group.dead_letter_topic=" + dlq])
    p = P({"bootstrap.servers": cluster, "acks": "all", "enable.idempotence": True,
           "linger.ms": 20})
    for i in range(REDRIVE_RECORDS):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTS)
        if i % 1000 == 999:
            p.poll(0)
    assert p.flush(60) == 0
    assert sum(watermarks(cluster, topic).values()) == REDRIVE_RECORDS

    # Every record dead-lettered through the group's nacks.
    t_dl, nacked = time.time(), 0
    while nacked < REDRIVE_RECORDS and time.time() - t_dl < 120:
        recs = sc.fetch(g, topic, max=1000, wait_ms=1000)
        if not recs:
            continue
        st, body = sc.post(f"/v1/groups/{g}/nacks", {
            "ack_ids": [r["ack_id"] for r in recs], "dead_letter": True, "reason": "poison"})
        assert st == 200 and all(x["status"] == "OK" for x in body["results"]), (st, body)
        nacked += len(recs)
    assert nacked == REDRIVE_RECORDS, nacked
    wait_for(lambda: sum(watermarks(cluster, dlq).values()) == REDRIVE_RECORDS, 60, 0.5,
             "every dead letter in its topic")
    print(f"\n{REDRIVE_RECORDS} records dead-lettered in {time.time() - t_dl:.1f} s")

    # The redrive on a thread; the leader killed once it wrote a tenth back.
    reports, calls = [], []

    def redrive():
        while True:
            st, rep = sc.request("POST", f"/v1/groups/{g}/redrive",
                                 {"max": REDRIVE_RECORDS}, timeout=180)
            calls.append(time.time())
            reports.append((st, rep))
            if st != 200 or rep["remaining"] == 0 or len(reports) >= 5:
                return

    t0 = time.time()
    th = threading.Thread(target=redrive, daemon=True)
    th.start()
    wait_for(lambda: sum(watermarks(cluster, topic).values()) >= REDRIVE_RECORDS * 11 // 10,
             60, 0.2, "the redrive writing back")
    # The broker of the redrive's coordinator (its place commits move with it), leading
    # partitions of both topics (a new topic's leaders are spread over the three).
    victim = coordinator(cluster, f"{g}.redrive")
    led = {t: sorted(q for q, b in leaders(cluster, t).items() if b == victim)
           for t in (topic, dlq)}
    assert led[topic] and led[dlq], led
    written = sum(watermarks(cluster, topic).values()) - REDRIVE_RECORDS
    t_kill = time.time()
    kafka("node", "kill", str(victim))
    assert not calls, f"the redrive ended before the kill: {reports}"
    print(f"killed node {victim}, the redrive's coordinator and the leader of partitions "
          f"{led[topic]} and {led[dlq]} of the two topics, {t_kill - t0:.1f} s into the "
          f"redrive, {written} records written back")
    time.sleep(5)
    kafka("node", "start", str(victim))
    th.join(240)
    assert not th.is_alive(), "the redrive did not end"
    for st, rep in reports:
        print(f"redrive call: {st}, moved {rep.get('moved')}, remaining {rep.get('remaining')}, "
              f"error {rep.get('error')!r}")
    st, rep = reports[-1]
    assert st == 200 and rep["remaining"] == 0, reports
    moved = sum(r["moved"] for s, r in reports if s == 200)
    print(f"redrive: {len(reports)} call(s), {moved} moved in {calls[-1] - t0:.1f} s "
          f"(the kill at +{t_kill - t0:.1f} s), its place's commit sent again "
          f"{sc.log_path.read_text(errors='replace').count('committing the place in')} time(s)")

    # Back in the topic past its first end, each key counted.
    c = Consumer({"bootstrap.servers": cluster, "group.id": unique("redriveread"),
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, q, REDRIVE_RECORDS // PARTS) for q in range(PARTS)])
    seen, ends = {}, watermarks(cluster, topic)
    want = sum(ends.values()) - REDRIVE_RECORDS
    got, deadline = 0, time.time() + 60
    while got < want and time.time() < deadline:
        for m in c.consume(1000, timeout=1.0):
            if m.error():
                continue
            i = int(m.key()[1:])
            assert m.value() == b"v%d" % i and m.partition() == i % PARTS, (m.key(), m.value())
            h = dict(m.headers() or [])
            assert h.get("ksidecar.redriven") == b"1", h
            seen[i] = seen.get(i, 0) + 1
            got += 1
    c.close()
    missing = REDRIVE_RECORDS - len(seen)
    twice = sum(n - 1 for n in seen.values())
    print(f"redriven: {len(seen)} of {REDRIVE_RECORDS} back, {missing} missing, "
          f"{twice} written twice, {moved} reported moved")
    assert got == want, (got, want)
    assert missing == 0, sorted(set(range(REDRIVE_RECORDS)) - seen.keys())[:10]
    # One call: the redrive commits its place through the coordinator's move (redrive.c's
    # commit_place; before it, the call stopped at "Coordinator load in progress" and the
    # next moved the chunk written since its last commit again: 1,000 twice), and the
    # idempotent producer writes nothing twice through the leader's death.
    assert len(reports) == 1 and twice == 0, (len(reports), twice)
    assert moved == REDRIVE_RECORDS + twice, (moved, twice)
    # Its place, the group "<group>.redrive", committed at the dead-letter topic's end.
    out = kstool("committed", "-b", cluster, "-t", dlq, "-g", f"{g}.redrive", "-p", str(PARTS))
    place = {int(x.split()[0]): int(x.split()[1]) for x in out.splitlines() if x}
    assert place == watermarks(cluster, dlq), place
    assert sc.stop() == 0

