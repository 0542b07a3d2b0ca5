"""Stall detection through the real binary against the real broker: a partition with lag whose
commit point has not moved for health.stall_ms is flagged with its reason in the group status,
in gRPC health for ksidecar.group.<name> and in /readyz?group=, and clears when the cause goes."""
import re
import threading
import time

import grpc
import pytest

from conftest import create_topic, produce, unique, wait_for
from grpc_support import SubscribeStream, health_pb2, open_msg, start_grpc
from test_metrics import samples, scrape_text

STALL_MS = 1500
ARGS = (f"--health.stall_ms={STALL_MS}",)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def streams():
    """Opens Subscribe streams; every one is cancelled at teardown."""
    opened = []

    def open_stream(stub, msg):
        s = SubscribeStream(stub, msg, timeout=120)
        opened.append(s)
        return s

    yield open_stream
    for s in opened:
        s.cancel()


def part0(sc, group):
    st, body = sc.get(f"/v1/groups/{group}")
    assert st == 200, (st, body)
    parts = [p for p in body["partitions"] if p["partition"] == 0]
    return parts[0] if parts else None


def health(sc, group):
    return sc.health.Check(health_pb2.HealthCheckRequest(service=f"ksidecar.group.{group}"),
                           timeout=10).status


def wait_stalled(sc, group, reason, timeout=6 * STALL_MS / 1000 + 10):
    """Waits for partition 0 to be stalled with reason; checks status, gRPC health and
    /readyz?group= say so; returns the partition's status."""
    t0 = time.time()
    p = wait_for(lambda: (lambda p: p if p and p["stalled"] else None)(part0(sc, group)),
                 timeout, 0.2, f"{group} stalled")
    assert p["stall_reason"] == reason, p
    # Seen at each commit interval: up to one interval (500 ms) behind the stall check.
    assert p["commit_point_age_ms"] >= STALL_MS - 600, p
    assert time.time() - t0 < timeout
    assert health(sc, group) == NOT_SERVING
    st, body = sc.get(f"/readyz?group={group}")
    assert st == 503, (st, body)
    assert f"[0]: {reason}" in body["error"]["message"], body
    # /metrics says it too, the reason as a label (read with prometheus_client's parser).
    text = scrape_text(sc.base)[1]
    want = frozenset({("group", group), ("topic", p["topic"]), ("partition", "0"),
                      ("reason", reason)})
    assert samples(text)[0].get(("ksidecar_partition_stalled", want)) == 1, text
    return p


def wait_cleared(sc, group):
    wait_for(lambda: not part0(sc, group)["stalled"], 6 * STALL_MS / 1000 + 10, 0.2,
             f"{group} no longer stalled")
    p = part0(sc, group)
    assert p["stall_reason"] == "" and p["stall_detail"] == "", p
    assert health(sc, group) == SERVING
    st, body = sc.get(f"/readyz?group={group}")
    assert st == 200, (st, body)


def fetch(sc, group, topic, wait_ms=1000):
    return sc.fetch(group, topic, max=100, wait_ms=wait_ms)


def take(st, n, timeout=30):
    """Reads a Subscribe stream's batches until n records came (or the timeout passed)."""
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        r = st.get(0.5)
        if r is not None and r.WhichOneof("kind") == "batch":
            got.extend(r.batch.records)
    return got


def ack_until_drained(sc, group, st, timeout=30):
    """Acks what st gets until partition 0 has no lag."""
    deadline = time.time() + timeout
    while time.time() < deadline and (part0(sc, group) or {}).get("lag"):
        r = st.get(0.5)
        if r is not None and r.WhichOneof("kind") == "batch":
            st.ack([x.ack_id for x in r.batch.records])


def test_poison_record_nacked_forever(bootstrap, sidecars):
    topic, g = unique("tpois"), unique("gpois")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5)
    sc = start_grpc(sidecars, ARGS)

    def nack_offset0_ack_the_rest(seconds):
        end = time.time() + seconds
        while time.time() < end:
            recs = fetch(sc, g, topic, wait_ms=300)
            bad = [r["ack_id"] for r in recs if r["offset"] == 0]
            good = [r["ack_id"] for r in recs if r["offset"] != 0]
            if bad:
                st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": bad, "reason": "bad payload"})
                assert st == 200, body
            if good:
                sc.ack(g, good)
            p = part0(sc, g)
            if p and p["stalled"]:
                return p
        return None

    assert nack_offset0_ack_the_rest(30), part0(sc, g)
    p = wait_stalled(sc, g, "poison")
    assert "offset 0" in p["stall_detail"] and "bad payload" in p["stall_detail"], p
    assert "stalled (poison)" in sc.logs()
    # The poison record acked: the commit point moves and the stall clears.
    recs = []
    wait_for(lambda: recs.extend(fetch(sc, g, topic)) or any(r["offset"] == 0 for r in recs), 30)
    sc.ack(g, [r["ack_id"] for r in recs])
    wait_cleared(sc, g)
    # Once the record is out with the test again (not nacked), a check in between may see it
    # as merely unsettled: the clearing line names whichever reason was last.
    assert re.search(r"no longer stalled \(was (poison|unknown)\)", sc.logs()), sc.logs()
    got = samples(scrape_text(sc.base)[1])[0]
    plain = frozenset({("group", g), ("topic", topic), ("partition", "0")})
    assert got.get(("ksidecar_partition_stalled", plain)) == 0, got


def streamed(bootstrap, sidecars, streams, n, credits):
    """A one-partition topic of n records, a sidecar, and a Subscribe stream of its group with
    the given credits that has received that many records: (sc, group, topic, stream, records)."""
    topic, g = unique("tstall"), unique("gstall")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, n)
    sc = start_grpc(sidecars, ARGS)
    st = streams(sc.consumer, open_msg(g, topic, records=credits))
    got = take(st, credits)
    assert len(got) == credits
    return sc, g, topic, st, got


def test_no_subscriber(bootstrap, sidecars, streams):
    sc, g, topic, st, got = streamed(bootstrap, sidecars, streams, 20, 3)
    st.ack([r.ack_id for r in got])
    wait_for(lambda: (part0(sc, g) or {}).get("committed_offset") == 3, 20)
    st.cancel()  # the group's only subscriber goes, 17 records left
    wait_stalled(sc, g, "no_subscriber")
    # A subscriber comes back and acks everything: the stall clears.
    ack_until_drained(sc, g, streams(sc.consumer, open_msg(g, topic, records=100)))
    wait_cleared(sc, g)


def test_group_watch_follows_the_stall(bootstrap, sidecars, streams):
    """A health Watch of ksidecar.group.<name> is told each change: NOT_SERVING when the group
    stalls, SERVING when the stall clears, once per change."""
    sc, g, topic, st, got = streamed(bootstrap, sidecars, streams, 20, 3)
    st.ack([r.ack_id for r in got])
    wait_for(lambda: (part0(sc, g) or {}).get("committed_offset") == 3, 20)
    watch = sc.health.Watch(health_pb2.HealthCheckRequest(service=f"ksidecar.group.{g}"),
                            timeout=120)
    seen = []

    def read():
        try:
            for r in watch:
                seen.append(r.status)
        except grpc.RpcError:
            pass
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_for(lambda: seen, 10, 0.1, "the Watch's first status")
    assert seen[0] == SERVING, seen
    st.cancel()  # the group's only subscriber goes, 17 records left
    wait_for(lambda: NOT_SERVING in seen, 6 * STALL_MS / 1000 + 10, 0.2, "NOT_SERVING on the Watch")
    assert part0(sc, g)["stalled"]
    # A subscriber comes back and acks everything: the stall clears, and the Watch says so.
    ack_until_drained(sc, g, streams(sc.consumer, open_msg(g, topic, records=100)))
    wait_for(lambda: seen[-1] == SERVING, 6 * STALL_MS / 1000 + 10, 0.2, "SERVING again")
    assert seen.index(NOT_SERVING) < len(seen) - 1, seen
    assert all(a != b for a, b in zip(seen, seen[1:])), seen  # each status once per change
    watch.cancel()
    reader.join(10)


def test_subscriber_out_of_credits(bootstrap, sidecars, streams):
    sc, g, _, st, held = streamed(bootstrap, sidecars, streams, 10, 2)
    p = wait_stalled(sc, g, "no_credits")
    assert "credits" in p["stall_detail"], p
    # Acks sent: records flow again and the commit point moves.
    st.ack([r.ack_id for r in held])
    ack_until_drained(sc, g, st)
    wait_cleared(sc, g)


def test_held_back_by_commit_metadata(bootstrap, sidecars):
    topic, g = unique("tmeta"), unique("gmeta")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 300)
    # 64 bytes: the acks above the commit point do not fit, so the partition is held back.
    sc = start_grpc(sidecars, (*ARGS, "--commit.metadata_max_bytes=64"))
    recs = []

    def fetched_all():
        st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&max=1000&wait_ms=1000"
                          "&deadline_ms=120000")
        assert st == 200, body
        recs.extend(body["records"])
        return len(recs) >= 300
    wait_for(fetched_all, 30, 0, "300 records fetched")
    # Every other record acked, the even ones (offset 0 among them) held: 150 ranges.
    sc.ack(g, [r["ack_id"] for r in recs if r["offset"] % 2])
    p = wait_stalled(sc, g, "metadata")
    assert "commit.metadata_max_bytes" in p["stall_detail"], p
    sc.ack(g, [r["ack_id"] for r in recs if r["offset"] % 2 == 0])
    wait_cleared(sc, g)


def test_unknown_group_and_bad_parameter(bootstrap, sidecars):
    sc = start_grpc(sidecars, ARGS)
    st, body = sc.get("/readyz?group=nosuchgroup")
    assert st == 404 and "nosuchgroup" in body["error"]["message"], body
    st, body = sc.get("/readyz?group=")
    assert st == 400 and "group" in body["error"]["message"], body
    with pytest.raises(grpc.RpcError) as e:
        health(sc, "nosuchgroup")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
