"""The gRPC edge through the real binary against the real broker: Subscribe streams (credits,
acks, cancel-and-redeliver), the unary calls (stale acks, Seek, Produce), status codes,
limits, health, reflection (also through grpcurl), TLS, mTLS and bearer-token auth."""
import json
import subprocess
import time
import urllib.request

import grpc
import pytest

from conftest import (create_topic, describe_group, produce, started_processes, unique, wait_for,
                      watermarks)
from grpc_support import (ACCEPTED, INVALID, SERVING, STALE, SecureSidecar, StreamClosed, SubscribeStream,
                          bearer, consumer_pb2, consumer_pb2_grpc, grpcurl_path, health_pb2, health_pb2_grpc,
                          make_certs, open_msg, producer_pb2, reflection_file_containing,
                          reflection_services, rpc_code, start_grpc, wait_channel_ready,
                          write_tokens_json)

c = consumer_pb2
SC = grpc.StatusCode
STREAM_TIMEOUT = 120  # hard bound on every Subscribe stream, so that nothing can hang


@pytest.fixture
def streams():
    """Opens Subscribe streams; every one is cancelled at teardown."""
    opened = []

    def open_stream(stub, open_msg=None, first=None, metadata=None):
        s = SubscribeStream(stub, open_msg, first=first, metadata=metadata,
                            timeout=STREAM_TIMEOUT)
        opened.append(s)
        return s

    yield open_stream
    for s in opened:
        s.cancel()


@pytest.fixture
def secure_sidecars(bootstrap, tmp_path):
    """Like conftest's `sidecars`, for SecureSidecar (TLS, mTLS, auth)."""
    yield from started_processes(
        lambda args=(), env=None, **kw: SecureSidecar(bootstrap, args=args, env=env,
                                                      tmp_path=tmp_path, **kw))


def all_committed(bootstrap, group, topic, ends):
    d = describe_group(bootstrap, group, topic)
    return d if len(d) == len(ends) and all(d[p][0] == ends[p] for p in ends) else None


def fetch(stub, group, topics, max=100, wait_ms=2000, deadline_ms=0, subscriber="",
          metadata=None):
    if isinstance(topics, str):
        topics = [topics]
    req = c.FetchRequest(group=group, topics=topics, max=max, wait_ms=wait_ms,
                         deadline_ms=deadline_ms, subscriber=subscriber)
    return list(stub.Fetch(req, metadata=metadata, timeout=wait_ms / 1000 + 30).records)


def fetch_until(stub, group, topics, n, timeout=30, max=100, metadata=None):
    """Fetches until `n` records came or the timeout passed (the first fetch of a group joins
    it, which takes a few seconds)."""
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        got += fetch(stub, group, topics, max=max, wait_ms=1000, metadata=metadata)
    return got


def pos(r):
    return (r.partition, r.offset)


def c_stub(channel):
    return consumer_pb2_grpc.ConsumerStub(channel)


def next_batch(stream, timeout):
    """The records of the next batch on the stream (other responses are skipped), or None."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = stream.get(deadline - time.time())
        if r is not None and r.WhichOneof("kind") == "batch":
            return list(r.batch.records)
    return None


def health_ok(stub, metadata=None, timeout=10):
    """True once Health/Check("") says SERVING. Right after startup the server may say
    NOT_SERVING until it has reached Kafka, so this waits up to `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        resp = stub.Check(health_pb2.HealthCheckRequest(service=""), metadata=metadata,
                          timeout=10)
        if resp.status == SERVING or time.time() > deadline:
            return resp.status == SERVING
        time.sleep(0.2)


# 1 ----------------------------------------------------------------------------------------

def test_subscribe_consumes_10000_records_acks_every_batch_and_commits(bootstrap, sidecars,
                                                                      streams):
    topic, g = unique("tgsub"), unique("ggsub")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 10_000, partitions=4)
    ends = watermarks(bootstrap, topic)
    assert sum(ends.values()) == 10_000
    sc = start_grpc(sidecars)
    st = streams(sc.consumer, open_msg(g, topic, records=2000))

    received = []        # (partition, offset) in arrival order
    sent_ids = []        # every ack id sent
    results = []         # every AckResult received
    events = []          # ("assignment", {(t, p)}) or ("batch", {(t, p)}), in order
    deadline = time.time() + 60
    while (len(received) < 10_000 or len(results) < len(sent_ids)) and time.time() < deadline:
        r = st.get(1)
        if r is None:
            continue
        kind = r.WhichOneof("kind")
        if kind == "batch":
            recs = list(r.batch.records)
            for x in recs:
                assert x.topic == topic and x.attempt == 1 and x.ack_id, x
            received += [pos(x) for x in recs]
            assert len(received) - len(sent_ids) <= 2000, "more unacked records than credits"
            ids = [x.ack_id for x in recs]
            st.ack(ids)
            sent_ids += ids
            events.append(("batch", {(x.topic, x.partition) for x in recs}))
        elif kind == "ack_results":
            results += list(r.ack_results.results)
        elif kind == "assignment":
            events.append(("assignment", {(tp.topic, tp.partition)
                                          for tp in r.assignment.partitions}))

    everything = {(p, o) for p, e in ends.items() for o in range(e)}
    assert len(received) == 10_000, f"got {len(received)} of 10000 in 60 s"
    assert set(received) == everything
    # One stream, nothing redelivered: each partition's records arrive in offset order,
    # even though the server keeps more than one batch in preparation (were the batches
    # filled in turns, acking batch by batch would leave gaps behind every batch).
    for p in ends:
        offs = [o for q, o in received if q == p]
        assert offs == sorted(offs), f"partition {p} arrived out of order: {offs[:20]}"
    assert len(results) == len(sent_ids) == 10_000, (len(results), len(sent_ids))
    assert sorted(x.ack_id for x in results) == sorted(sent_ids)
    bad = [x for x in results if x.status != ACCEPTED]
    assert not bad, bad[:5]
    # Assignment notices are optional; when they come, a partition's notice comes before
    # its first batch.
    if any(kind == "assignment" for kind, _ in events):
        assigned = set()
        for kind, tps in events:
            if kind == "assignment":
                assigned |= tps
            else:
                assert tps <= assigned, f"records of {tps - assigned} before their assignment"
    st.half_close()
    wait_for(lambda: all_committed(bootstrap, g, topic, ends), 60, 1, "all committed")
    st.cancel()
    assert sc.stop() == 0


# 2 ----------------------------------------------------------------------------------------

def test_large_records_come_in_messages_a_default_client_accepts(bootstrap, sidecars, streams):
    # grpcio's default receive limit is 4 MB; the default credits allow 10 MB unacked.
    # 1,000 records of 10 KB, all in the window before the stream opens (a static group),
    # must arrive in several messages, each under the limit.
    topic, g = unique("tbig"), unique("gbig")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1000, size=10_000)
    static = json.dumps([{"name": g, "topics": [topic]}])
    sc = start_grpc(sidecars, [f"--groups.static={static}"])
    last = {}

    def in_window():
        last["group"] = sc.get(f"/v1/groups/{g}")[1]
        parts = last["group"].get("partitions") or [{}]
        return parts[0].get("window_records") == 1000

    # 60 s, not 30: the join and 10 MB of fetches under ASan on a busy machine once took
    # longer; a timeout says where the group stood and what ksidecar logged.
    try:
        wait_for(in_window, 60, 0.5, "all 1,000 records in the window")
    except AssertionError as e:
        raise AssertionError(f"{e}\ngroup: {last.get('group')}\nksidecar's log:\n{sc.logs()}") from None
    st = streams(sc.consumer, open_msg(g, topic, records=5000))
    got, batches = [], 0
    deadline = time.time() + 60
    while len(got) < 1000 and time.time() < deadline:
        r = st.get(1)  # raises StreamClosed if a message broke the client's limit
        if r is not None and r.WhichOneof("kind") == "batch":
            recs = list(r.batch.records)
            assert r.ByteSize() < 4 * 1024 * 1024, r.ByteSize()
            got += recs
            batches += 1
            st.ack([x.ack_id for x in recs])
    assert sorted(x.offset for x in got) == list(range(1000))
    assert all(len(x.value) == 10_000 for x in got)
    assert batches >= 3, batches
    st.cancel()


def test_subscribe_never_holds_more_than_its_credits(bootstrap, sidecars, streams):
    topic, g = unique("tcred"), unique("gcred")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 40, partitions=2)
    sc = start_grpc(sidecars)
    st = streams(sc.consumer, open_msg(g, topic, records=5))
    held = []       # received, not acked yet
    received = []
    limit = [5]

    def pump(seconds, until=None):
        """Reads for up to `seconds` (or until `until()`), checking the credit bound."""
        end = time.time() + seconds
        while time.time() < end and not (until and until()):
            r = st.get(min(0.2, max(end - time.time(), 0)))
            if r is None:
                continue
            if r.WhichOneof("kind") == "batch":
                recs = list(r.batch.records)
                received.extend(recs)
                held.extend(recs)
                assert len(held) <= limit[0], f"{len(held)} unacked with {limit[0]} credits"
            elif r.WhichOneof("kind") == "ack_results":
                assert all(x.status == ACCEPTED for x in r.ack_results.results), r

    pump(20, until=lambda: len(held) == 5)
    assert len(held) == 5
    pump(2)  # nothing more while all 5 are held
    assert len(held) == 5 and len(received) == 5

    # Acking 2 lets at most 2 more come.
    st.ack([x.ack_id for x in held[:2]])
    del held[:2]
    pump(10, until=lambda: len(held) == 5)
    assert len(held) == 5 and len(received) == 7
    pump(1.5)
    assert len(received) == 7

    # New credits replace the old ones: 3 more come without any ack.
    limit[0] = 8
    st.credits(8)
    pump(10, until=lambda: len(held) == 8)
    assert len(held) == 8 and len(received) == 10
    pump(1.5)
    assert len(received) == 10

    # Acking as they come drains the rest, still never past the credits.
    deadline = time.time() + 30
    while len(received) < 40 and time.time() < deadline:
        if held:
            st.ack([x.ack_id for x in held])
            held.clear()
        pump(0.5)
    assert len(received) == 40
    assert len({pos(x) for x in received}) == 40
    assert all(x.attempt == 1 for x in received)
    st.cancel()
    assert sc.stop() == 0


def ack_results(st, n, timeout=10):
    """The stream's next ack results, until n of them came (or the timeout)."""
    deadline = time.time() + timeout
    got = []
    while len(got) < n and time.time() < deadline:
        r = st.get(0.5)
        if r is not None and r.WhichOneof("kind") == "ack_results":
            got += list(r.ack_results.results)
    return got


def test_subscribe_nack_and_deadline_extension_on_the_stream(bootstrap, sidecars, streams):
    topic, g = unique("tsnk"), unique("gsnk")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 2)
    sc = start_grpc(sidecars)
    st = streams(sc.consumer, open_msg(g, topic, records=10, deadline_ms=1500))
    got = []
    deadline = time.time() + 30
    while len(got) < 2 and time.time() < deadline:
        got += next_batch(st, 1) or []
    assert sorted(pos(x) for x in got) == [(0, 0), (0, 1)]
    r0, r1 = sorted(got, key=pos)
    # r0's lease is extended; r1's 1.5 s lease (Open.deadline_ms) runs out.
    st.send(modify_deadline=c.ExtendIds(ack_ids=[r0.ack_id], deadline_ms=60000))
    t0 = time.time()
    again = []
    while time.time() - t0 < 5:
        recs = next_batch(st, 0.5) or []
        if recs:  # keep the redelivered one from expiring once more
            st.send(modify_deadline=c.ExtendIds(ack_ids=[x.ack_id for x in recs],
                                                deadline_ms=60000))
        again += recs
    assert [(pos(x), x.attempt) for x in again] == [((0, 1), 2)], again
    # A nack on the stream redelivers at once, attempt 2.
    st.nack([r0.ack_id], reason="stream nack")
    back = next_batch(st, 5)
    assert back and [(pos(x), x.attempt) for x in back] == [((0, 0), 2)], back
    ids = [back[0].ack_id, again[0].ack_id]
    st.ack(ids)
    results = {x.ack_id: x.status for x in ack_results(st, 2)}
    assert results == {i: ACCEPTED for i in ids}, results
    # Acked twice (committed past by now, so which id was acked is no longer known: not a
    # success), and an id that is no ack id: each result names its own problem, in the
    # order sent.
    st.ack([ids[0], "not-an-ack-id"])
    got = ack_results(st, 2)
    assert [x.ack_id for x in got] == [ids[0], "not-an-ack-id"], got
    assert got[0].status == STALE and "already committed" in got[0].message, got
    assert got[1].status == INVALID and "ack id" in got[1].message, got
    # An id outside ASCII takes the general decoding path; its result echoes it intact.
    st.ack(["ack-\u00e9"])
    got = ack_results(st, 1)
    assert [(x.ack_id, x.status) for x in got] == [("ack-\u00e9", INVALID)], got
    wait_for(lambda: all_committed(bootstrap, g, topic, {0: 2}), 30, 1, "commit at 2")
    st.cancel()
    assert sc.stop() == 0


# 3 ----------------------------------------------------------------------------------------

def test_grpcurl_lists_describes_and_checks_health(sidecars):
    gc = grpcurl_path()
    if not gc:
        pytest.skip("grpcurl not found (KSIDECAR_TEST_GRPCURL, PATH, ~/.cache/ksidecar/bin): "
                    "scripts/install-deps.sh installs it")
    sc = start_grpc(sidecars)

    def grpcurl(*args):
        r = subprocess.run([gc, "-plaintext", *args], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, f"grpcurl {' '.join(args)}: {r.stdout}\n{r.stderr}"
        return r.stdout

    names = grpcurl(sc.grpc_target, "list").split()
    for svc in ("ksidecar.v1.Consumer", "ksidecar.v1.Producer", "grpc.health.v1.Health"):
        assert svc in names, names
    assert any(n.startswith("grpc.reflection.") and n.endswith(".ServerReflection")
               for n in names), names
    out = grpcurl(sc.grpc_target, "describe", "ksidecar.v1.Consumer")
    for m in ("Subscribe", "Fetch", "Ack", "Nack", "ModifyAckDeadline", "GetGroup",
              "ListGroups", "Seek"):
        assert f"rpc {m} " in out, out
    assert "stream .ksidecar.v1.SubscribeRequest" in out, out
    assert "rpc Produce " in grpcurl(sc.grpc_target, "describe", "ksidecar.v1.Producer")
    assert health_ok(sc.health)  # past the startup NOT_SERVING, if any
    out = grpcurl("-d", '{"service":""}', sc.grpc_target, "grpc.health.v1.Health/Check")
    assert '"status": "SERVING"' in out, out
    assert sc.stop() == 0


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_lists_services_and_serves_descriptors(sidecars, version):
    sc = start_grpc(sidecars)
    names = reflection_services(sc.channel, version)
    for svc in ("ksidecar.v1.Consumer", "ksidecar.v1.Producer", "grpc.health.v1.Health"):
        assert svc in names, names
    assert any(n.startswith("grpc.reflection.") for n in names), names
    files = reflection_file_containing(sc.channel, version, "ksidecar.v1.Consumer")
    methods = {m.name: m for f in files for s in f.service if s.name == "Consumer"
               for m in s.method}
    assert methods["Subscribe"].client_streaming and methods["Subscribe"].server_streaming
    assert methods["Fetch"].input_type == ".ksidecar.v1.FetchRequest"
    assert set(methods) >= {"Subscribe", "Fetch", "Ack", "Nack", "ModifyAckDeadline",
                            "GetGroup", "ListGroups", "Seek"}


def test_health_check_and_watch(sidecars):
    sc = start_grpc(sidecars)
    # Watch: the current status at once, then changes; it reaches SERVING with Kafka up
    # (it may say NOT_SERVING first, right after startup).
    watch = sc.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
    seen = []
    for resp in watch:
        seen.append(resp.status)
        if resp.status == SERVING:
            break
    watch.cancel()
    assert seen and seen[-1] == SERVING, seen
    assert health_ok(sc.health, timeout=0)
    assert sc.stop() == 0


# 4 ----------------------------------------------------------------------------------------

def test_cancelled_stream_redelivers_its_leases_at_once(bootstrap, sidecars, streams):
    topic, g = unique("tcancel"), unique("gcancel")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 50, partitions=2)
    sc = start_grpc(sidecars)
    a = streams(sc.consumer, open_msg(g, topic, records=100, subscriber="a"))
    held = []
    deadline = time.time() + 30
    while len(held) < 50 and time.time() < deadline:
        held += next_batch(a, 1) or []
    assert len(held) == 50 and all(x.attempt == 1 for x in held)
    a.cancel()
    t0 = time.time()
    assert a.wait_closed(5) == SC.CANCELLED

    b = streams(sc.consumer, open_msg(g, topic, records=100, subscriber="b"))
    again = []
    # 20 s, still well short of the 30 s lease deadline: CI under ASan once ran past 10 s.
    while len({pos(x) for x in again}) < 50 and time.time() - t0 < 20:
        again += next_batch(b, 0.5) or []
    elapsed = time.time() - t0
    assert {pos(x) for x in again} == {pos(x) for x in held}, \
        f"{len(again)} of 50 redelivered in {elapsed:.1f}s (lease deadline is 30 s)"
    assert all(x.attempt == 2 for x in again), [(pos(x), x.attempt) for x in again][:5]
    assert not ({x.ack_id for x in again} & {x.ack_id for x in held})
    b.ack([x.ack_id for x in again])
    wait_for(lambda: all_committed(bootstrap, g, topic, watermarks(bootstrap, topic)), 30, 1,
             "all committed")
    b.cancel()
    assert sc.stop() == 0


# 5 ----------------------------------------------------------------------------------------

def test_stale_ack_after_redelivery_is_failed_precondition(bootstrap, sidecars):
    topic, g = unique("tstale"), unique("gstale")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    sc = start_grpc(sidecars)
    first = fetch_until(sc.consumer, g, topic, 1, max=1)
    assert [(pos(x), x.attempt) for x in first] == [((0, 0), 1)]
    old = first[0].ack_id
    resp = sc.consumer.Nack(c.NackRequest(group=g, ack_ids=[old], delay_ms=0, reason="x"),
                            timeout=10)
    assert resp.accepted == 1 and resp.results[0].status == ACCEPTED, resp
    again = fetch(sc.consumer, g, topic, max=1, wait_ms=5000)
    assert [(pos(x), x.attempt) for x in again] == [((0, 0), 2)]
    new = again[0].ack_id
    assert new != old

    with pytest.raises(grpc.RpcError) as e:
        sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[old]), timeout=10)
    assert e.value.code() == SC.FAILED_PRECONDITION, e.value
    # Mixed: per-id results and no error status.
    resp = sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[old, new]), timeout=10)
    assert [x.status for x in resp.results] == [STALE, ACCEPTED], resp
    assert [x.ack_id for x in resp.results] == [old, new]
    assert resp.accepted == 1 and resp.rejected == 1, resp
    assert sc.stop() == 0


def test_seek_makes_leases_stale_and_moves_the_position(bootstrap, sidecars):
    topic, g = unique("tseek"), unique("gseek")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5)
    sc = start_grpc(sidecars)
    held = fetch_until(sc.consumer, g, topic, 5, max=10)
    assert sorted(x.offset for x in held) == [0, 1, 2, 3, 4]
    ts = {x.offset: x.timestamp_ms for x in held}

    # Earliest: every in-flight lease of the partition turns stale, and the records come again.
    resp = sc.consumer.Seek(c.SeekRequest(group=g, topic=topic, partition=0, earliest=True),
                            timeout=30)
    assert resp.stale_leases == 5, resp
    with pytest.raises(grpc.RpcError) as e:
        sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[x.ack_id for x in held]), timeout=10)
    assert e.value.code() == SC.FAILED_PRECONDITION, e.value
    again = fetch_until(sc.consumer, g, topic, 5, max=10, timeout=20)
    assert sorted(x.offset for x in again) == [0, 1, 2, 3, 4], again
    assert not ({x.ack_id for x in again} & {x.ack_id for x in held})
    resp = sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[x.ack_id for x in again]), timeout=10)
    assert resp.accepted == 5, resp

    # Latest: nothing old comes; what is produced next does.
    resp = sc.consumer.Seek(c.SeekRequest(group=g, topic=topic, partition=0, latest=True),
                            timeout=30)
    assert resp.stale_leases == 0, resp
    assert fetch(sc.consumer, g, topic, wait_ms=2000) == []
    produce(bootstrap, topic, 2)
    new = fetch_until(sc.consumer, g, topic, 2, timeout=20)
    assert sorted(x.offset for x in new) == [5, 6], new
    sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[x.ack_id for x in new]), timeout=10)

    # An offset: from there on.
    resp = sc.consumer.Seek(c.SeekRequest(group=g, topic=topic, partition=0, offset=4),
                            timeout=30)
    assert resp.offset == 4, resp
    back = fetch_until(sc.consumer, g, topic, 3, timeout=20)
    assert sorted(x.offset for x in back) == [4, 5, 6], back
    sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[x.ack_id for x in back]), timeout=10)

    # A timestamp: from the first record at or after it.
    t = ts[2]
    want = min(o for o, x in ts.items() if x >= t)
    sc.consumer.Seek(c.SeekRequest(group=g, topic=topic, partition=0, timestamp_ms=t),
                     timeout=30)
    back = fetch_until(sc.consumer, g, topic, 7 - want, timeout=20)
    assert sorted(x.offset for x in back) == list(range(want, 7)), back
    assert sc.stop() == 0


# 6 ----------------------------------------------------------------------------------------

def test_tls_for_grpc_and_https(bootstrap, secure_sidecars, tmp_path):
    certs = make_certs(tmp_path / "pki")
    topic, g = unique("ttls"), unique("gtls")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    # Starting it already probed https://127.0.0.1:<port>/healthz trusting only our CA and
    # connected a TLS gRPC channel.
    sc = secure_sidecars(cert=certs["server_cert"], key=certs["server_key"], ca=certs["ca"])
    st, body = sc.get("/healthz")
    assert st == 200, (st, body)
    ctx = sc.make_ssl_context()
    with urllib.request.urlopen(f"https://127.0.0.1:{sc.port}/healthz", context=ctx,
                                timeout=10) as r:
        assert r.status == 200
    assert health_ok(sc.health)
    assert len(fetch_until(sc.consumer, g, topic, 3)) == 3

    # Plaintext gets nothing on either port.
    code, details, _ = rpc_code(health_pb2_grpc.HealthStub(grpc.insecure_channel(
        sc.grpc_target)).Check, health_pb2.HealthCheckRequest(), timeout=5)
    assert code == SC.UNAVAILABLE, (code, details)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sc.port}/healthz", timeout=5) as r:
            plain = r.status
    except OSError:
        plain = None
    assert plain != 200
    # A client that does not trust our CA refuses the server.
    untrusting = grpc.secure_channel(sc.grpc_target, grpc.ssl_channel_credentials())
    code, details, _ = rpc_code(health_pb2_grpc.HealthStub(untrusting).Check,
                                health_pb2.HealthCheckRequest(), timeout=5)
    assert code == SC.UNAVAILABLE, (code, details)
    assert sc.stop() == 0


REJECTED_AT_HANDSHAKE = (SC.UNAVAILABLE, SC.UNAUTHENTICATED, SC.PERMISSION_DENIED, SC.UNKNOWN,
                         SC.INTERNAL)


def test_mtls_requires_a_verified_client_certificate(bootstrap, secure_sidecars, tmp_path):
    certs = make_certs(tmp_path / "pki")
    other = make_certs(tmp_path / "other-pki")  # a client cert from a CA the server does not trust
    topic, g = unique("tmtls"), unique("gmtls")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 2)
    sc = secure_sidecars(cert=certs["server_cert"], key=certs["server_key"], ca=certs["ca"],
                         client_ca=certs["ca"], client_cert=certs["client_cert"],
                         client_key=certs["client_key"])
    # With our client certificate: gRPC and HTTPS work.
    assert health_ok(sc.health)
    assert len(fetch_until(sc.consumer, g, topic, 2)) == 2
    assert sc.get("/v1/groups")[0] == 200

    # Without one: refused.
    no_cert = sc.make_channel(with_client_cert=False)
    code, details, _ = rpc_code(health_pb2_grpc.HealthStub(no_cert).Check,
                                health_pb2.HealthCheckRequest(), timeout=5)
    assert code in REJECTED_AT_HANDSHAKE, (code, details)
    code, details, _ = rpc_code(c_stub(no_cert).Fetch, c.FetchRequest(
        group=g, topics=[topic], max=1, wait_ms=100), timeout=5)
    assert code in REJECTED_AT_HANDSHAKE, (code, details)
    # With a certificate from another CA: refused.
    wrong = grpc.secure_channel(sc.grpc_target, grpc.ssl_channel_credentials(
        root_certificates=open(certs["ca"], "rb").read(),
        private_key=open(other["client_key"], "rb").read(),
        certificate_chain=open(other["client_cert"], "rb").read()))
    code, details, _ = rpc_code(health_pb2_grpc.HealthStub(wrong).Check,
                                health_pb2.HealthCheckRequest(), timeout=5)
    assert code in REJECTED_AT_HANDSHAKE, (code, details)
    # HTTPS without a client certificate: refused at the handshake (or, at least, not served).
    try:
        st, _ = sc.request("GET", "/v1/groups", context=sc.make_ssl_context(False), timeout=10)
    except OSError:
        st = None
    assert st in (None, 401, 403), st
    # The server is still fine afterwards.
    assert health_ok(sc.health)
    assert sc.stop() == 0


# 7 ----------------------------------------------------------------------------------------

def test_bearer_token_auth_for_grpc_and_http(bootstrap, secure_sidecars, streams, tmp_path):
    topic = unique("tauth")
    tokens = write_tokens_json(tmp_path / "tokens", [
        {"token": "good-token", "groups": ["app-*"], "consume": [topic]},
        {"token": "ops-token", "groups": ["ops-*", "billing-*"], "consume": [topic]}])
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    g, other = unique("app"), unique("other")
    sc = secure_sidecars(tokens_file=tokens, token="good-token")
    good, ops = bearer("good-token"), bearer("ops-token")

    def fetch_code(group, metadata):
        return rpc_code(sc.consumer.Fetch, c.FetchRequest(group=group, topics=[topic], max=1,
                                                          wait_ms=200),
                        metadata=metadata, timeout=30)[:2]

    assert fetch_code(g, None)[0] == SC.UNAUTHENTICATED
    assert fetch_code(g, bearer("wrong-token"))[0] == SC.UNAUTHENTICATED
    assert fetch_code(g, (("authorization", "Basic Z29vZC10b2tlbg=="),))[0] == SC.UNAUTHENTICATED
    assert fetch_code(other, good)[0] == SC.PERMISSION_DENIED
    assert fetch_code(unique("ops"), good)[0] == SC.PERMISSION_DENIED
    assert fetch_code(unique("billing"), ops)[0] == SC.OK
    assert fetch_code(unique("app"), ops)[0] == SC.PERMISSION_DENIED
    recs = fetch_until(sc.consumer, g, topic, 3, metadata=good)
    assert len(recs) == 3
    # Other calls are covered too.
    code, _, _ = rpc_code(sc.consumer.Ack, c.AckRequest(group=g, ack_ids=[recs[0].ack_id]),
                          timeout=10)
    assert code == SC.UNAUTHENTICATED
    resp = sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[x.ack_id for x in recs]),
                           metadata=good, timeout=10)
    assert resp.accepted == 3, resp

    # Streams: no token, then a group the token does not cover, then one it does.
    s = streams(sc.consumer, open_msg(g, topic, records=10))
    assert s.wait_closed(10) == SC.UNAUTHENTICATED
    s = streams(sc.consumer, open_msg(other, topic, records=10), metadata=good)
    assert s.wait_closed(10) == SC.PERMISSION_DENIED
    produce(bootstrap, topic, 1)
    s = streams(sc.consumer, open_msg(g, topic, records=10), metadata=good)
    batch = next_batch(s, 20)
    assert batch and [x.offset for x in batch] == [3], batch
    s.cancel()

    # HTTP: the same tokens and patterns.
    path = f"/v1/groups/{g}/records?topic={topic}&wait_ms=100"
    st, body = sc.request("GET", path, token=None)
    assert st == 401 and body["error"]["code"] == "UNAUTHENTICATED", (st, body)
    st, body = sc.request("GET", path, token="wrong-token")
    assert st == 401 and body["error"]["code"] == "UNAUTHENTICATED", (st, body)
    st, body = sc.request("GET", path, token="good-token")
    assert st == 200, (st, body)
    st, body = sc.request("GET", f"/v1/groups/{other}/records?topic={topic}&wait_ms=100",
                          token="good-token")
    assert st == 403 and body["error"]["code"] == "PERMISSION_DENIED", (st, body)
    assert sc.stop() == 0


# 8 ----------------------------------------------------------------------------------------

def test_malformed_protobuf_is_invalid_argument_and_server_stays_up(bootstrap, sidecars):
    topic, g = unique("tmal"), unique("gmal")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = start_grpc(sidecars)
    raw = sc.channel.unary_unary("/ksidecar.v1.Consumer/Fetch", request_serializer=lambda x: x,
                                 response_deserializer=lambda x: x)
    for junk in (b"\xff\xff\xff",          # a truncated varint tag
                 b"\x0a\x10abc"):          # field 1, length 16, 3 bytes
        code, details, _ = rpc_code(raw, junk, timeout=10)
        assert code == SC.INVALID_ARGUMENT, (junk, code, details)
    raw_ack = sc.channel.unary_unary("/ksidecar.v1.Consumer/Ack", request_serializer=lambda x: x,
                                     response_deserializer=lambda x: x)
    assert rpc_code(raw_ack, b"\xff\xff\xff", timeout=10)[0] == SC.INVALID_ARGUMENT
    raw_sub = sc.channel.stream_stream("/ksidecar.v1.Consumer/Subscribe",
                                       request_serializer=lambda x: x,
                                       response_deserializer=lambda x: x)
    with pytest.raises(grpc.RpcError) as e:
        list(raw_sub(iter([b"\xff\xff\xff"]), timeout=10))
    assert e.value.code() == SC.INVALID_ARGUMENT, e.value
    # Still up, and serving.
    assert sc.proc.poll() is None
    assert health_ok(sc.health)
    assert len(fetch_until(sc.consumer, g, topic, 1)) == 1
    assert sc.stop() == 0


# 9 ----------------------------------------------------------------------------------------

def test_unknown_method_is_unimplemented_at_once(sidecars):
    sc = start_grpc(sidecars)
    for method in ("/ksidecar.v1.Consumer/Nope", "/ksidecar.v1.Nope/Fetch", "/nope"):
        fn = sc.channel.unary_unary(method, request_serializer=lambda x: x,
                                    response_deserializer=lambda x: x)
        code, details, elapsed = rpc_code(fn, b"", timeout=5)
        assert code == SC.UNIMPLEMENTED, (method, code, details)
        assert elapsed < 2, (method, elapsed)
    fn = sc.channel.stream_stream("/ksidecar.v1.Consumer/NopeStream",
                                  request_serializer=lambda x: x,
                                  response_deserializer=lambda x: x)
    t0 = time.time()
    with pytest.raises(grpc.RpcError) as e:
        list(fn(iter([b""]), timeout=5))
    assert e.value.code() == SC.UNIMPLEMENTED and time.time() - t0 < 2
    assert health_ok(sc.health)
    assert sc.stop() == 0


# 10 ---------------------------------------------------------------------------------------

def test_produce_returns_partition_and_offset_and_fetch_reads_them_back(bootstrap, sidecars):
    topic, g = unique("tprod"), unique("gprod")
    create_topic(bootstrap, topic, 2)
    sc = start_grpc(sidecars)
    P = producer_pb2
    # Distinct keys: key ordering hands out one record of a key at a time.
    recs = [P.ProduceRecord(topic=topic, partition=1, has_partition=True, key=f"k{i}".encode(),
                            value=f"explicit-{i}".encode(),
                            headers=[P.ProduceHeader(key="h", value=f"{i}".encode())])
            for i in range(3)]
    recs += [P.ProduceRecord(topic=topic, key=f"key-{i}".encode(), value=f"bykey-{i}".encode())
             for i in range(4)]
    recs += [P.ProduceRecord(topic=topic, partition=0, has_partition=True, key_null=True,
                             value_null=True)]
    resp = sc.producer.Produce(P.ProduceRequest(records=recs), timeout=60)
    assert len(resp.results) == len(recs), resp
    assert all(r.error == "" for r in resp.results), resp
    where = [(r.partition, r.offset) for r in resp.results]
    assert len(set(where)) == len(recs), where
    assert all(p in (0, 1) and o >= 0 for p, o in where), where
    explicit = resp.results[:3]
    assert all(r.partition == 1 for r in explicit)
    assert [r.offset for r in explicit] == sorted(r.offset for r in explicit)
    assert resp.results[-1].partition == 0
    ends = watermarks(bootstrap, topic)
    assert sum(ends.values()) == len(recs), ends

    got = {pos(x): x for x in fetch_until(sc.consumer, g, topic, len(recs))}
    assert set(got) == set(where)
    for sent, at in zip(recs, where):
        r = got[at]
        assert r.topic == topic
        if sent.value_null:
            assert r.value_null and r.key_null, r
        else:
            assert r.value == sent.value and r.key == sent.key and not r.key_null, r
        assert [(h.key, h.value) for h in r.headers] == [(h.key, h.value) for h in sent.headers]
    assert sc.stop() == 0


# 11 ---------------------------------------------------------------------------------------

def test_limits_credits_fetch_max_message_size_and_streams_per_client(bootstrap, sidecars,
                                                                      streams):
    topic, g, g2 = unique("tlim"), unique("glim"), unique("glim2")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 30, partitions=2)
    sc = start_grpc(sidecars, ["--subscriber.max_credit_records=10", "--fetch.max_records=20",
                               "--grpc.max_streams_per_client=2",
                               "--grpc.max_message_bytes=65536"])

    # Fetch max: above fetch.max_records is INVALID_ARGUMENT; at it, fine.
    code, details, _ = rpc_code(sc.consumer.Fetch, c.FetchRequest(
        group=g2, topics=[topic], max=21, wait_ms=100), timeout=30)
    assert code == SC.INVALID_ARGUMENT, (code, details)
    assert 0 < len(fetch_until(sc.consumer, g2, topic, 1, max=20)) <= 20

    # A request past grpc.max_message_bytes.
    code, details, _ = rpc_code(sc.consumer.Fetch, c.FetchRequest(
        group=g2, topics=["t" * 100_000], max=1, wait_ms=100), timeout=30)
    assert code == SC.RESOURCE_EXHAUSTED, (code, details)

    # Credits above subscriber.max_credit_records.
    s = streams(sc.consumer, open_msg(g, topic, records=11))
    assert s.wait_closed(10) == SC.RESOURCE_EXHAUSTED

    # Two streams from this client are fine; a third one, even on another connection, is not.
    s1 = streams(sc.consumer, open_msg(g, topic, records=10, subscriber="s1"))
    assert next_batch(s1, 30), "the first stream got no records"
    s2 = streams(sc.consumer, open_msg(g, topic, records=10, subscriber="s2"))
    assert next_batch(s2, 15), "the second stream got no records"
    ch3 = grpc.insecure_channel(sc.grpc_target)
    wait_channel_ready(ch3, 10)
    s3 = streams(c_stub(ch3), open_msg(g, topic, records=10, subscriber="s3"))
    assert s3.wait_closed(10) == SC.RESOURCE_EXHAUSTED
    # Once one ends, a new one may open.
    s1.cancel()
    deadline = time.time() + 10
    while True:
        s4 = streams(c_stub(ch3), open_msg(g, topic, records=10, subscriber="s4"))
        try:
            if next_batch(s4, 5):
                break
        except StreamClosed as e:
            assert e.error is not None and e.error.code() == SC.RESOURCE_EXHAUSTED, e.error
        assert time.time() < deadline, "no new stream allowed after one was cancelled"
        time.sleep(0.3)
    assert sc.proc.poll() is None and health_ok(sc.health)
    s2.cancel()
    s4.cancel()
    assert sc.stop() == 0


# Status codes and the remaining unary calls -----------------------------------------------

def test_status_codes_and_unary_group_calls(bootstrap, sidecars, streams):
    topic = unique("tcodes")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 4, partitions=2)
    sc = start_grpc(sidecars, ["--groups.allowed=app-*"])
    g = unique("app")
    cons = sc.consumer

    def code(fn, req):
        return rpc_code(fn, req, timeout=30)[0]

    assert code(cons.GetGroup, c.GetGroupRequest(group=g)) == SC.NOT_FOUND
    assert code(cons.Ack, c.AckRequest(group=g, ack_ids=["x"])) == SC.NOT_FOUND
    assert code(cons.Fetch, c.FetchRequest(group="bad!group", topics=[topic], wait_ms=100)) \
        == SC.INVALID_ARGUMENT
    assert code(cons.Fetch, c.FetchRequest(group=g, topics=["no/such"], wait_ms=100)) \
        == SC.INVALID_ARGUMENT
    assert code(cons.Fetch, c.FetchRequest(group=g, topics=[], wait_ms=100)) \
        == SC.INVALID_ARGUMENT
    assert code(cons.Fetch, c.FetchRequest(group=unique("other"), topics=[topic], wait_ms=100)) \
        == SC.PERMISSION_DENIED
    s = streams(cons, first=c.SubscribeRequest(ack=c.AckIds(ack_ids=["x"])))
    assert s.wait_closed(10) == SC.INVALID_ARGUMENT
    s = streams(cons, open_msg("bad!group", topic, records=10))
    assert s.wait_closed(10) == SC.INVALID_ARGUMENT

    recs = fetch_until(cons, g, topic, 4)
    assert sorted(pos(x) for x in recs) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    status = cons.GetGroup(c.GetGroupRequest(group=g), timeout=10)
    assert status.group == g and list(status.topics) == [topic], status
    assert sorted(p.partition for p in status.partitions) == [0, 1], status
    assert sum(p.in_flight for p in status.partitions) == 4, status
    groups = cons.ListGroups(c.ListGroupsRequest(), timeout=10)
    assert g in [x.group for x in groups.groups], groups

    r0, r1, r2, r3 = sorted(recs, key=pos)
    resp = cons.ModifyAckDeadline(c.ModifyAckDeadlineRequest(group=g, ack_ids=[r0.ack_id],
                                                             deadline_ms=60000), timeout=10)
    assert resp.accepted == 1 and resp.results[0].status == ACCEPTED, resp
    resp = cons.Nack(c.NackRequest(group=g, ack_ids=[r1.ack_id]), timeout=10)
    assert resp.accepted == 1, resp
    again = fetch(cons, g, topic, wait_ms=5000)
    assert [(pos(x), x.attempt) for x in again] == [(pos(r1), 2)], again

    # Every id rejected as malformed: INVALID_ARGUMENT; mixed: per-id results.
    assert code(cons.Ack, c.AckRequest(group=g, ack_ids=["garbage"])) == SC.INVALID_ARGUMENT
    ids = [r0.ack_id, again[0].ack_id, r2.ack_id, r3.ack_id, "garbage"]
    resp = cons.Ack(c.AckRequest(group=g, ack_ids=ids), timeout=10)
    assert [x.status for x in resp.results] == [ACCEPTED] * 4 + [consumer_pb2.INVALID], resp
    assert resp.accepted == 4 and resp.rejected == 1, resp
    wait_for(lambda: cons.GetGroup(c.GetGroupRequest(group=g), timeout=10).acked == 4, 10, 0.5,
             "acked counter at 4")
    status = cons.GetGroup(c.GetGroupRequest(group=g), timeout=10)
    assert status.nacked == 1 and status.redelivered == 1, status
    wait_for(lambda: all_committed(bootstrap, g, topic, {0: 2, 1: 2}), 30, 1, "all committed")
    assert sc.stop() == 0
