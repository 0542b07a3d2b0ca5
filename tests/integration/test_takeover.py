"""How soon a killed or restarted sidecar's partitions move again (issue 10 part 6): ksidecar's
own session.timeout.ms / heartbeat.interval.ms defaults, and static membership
(kafka.group.instance.id). Times are printed; the bounds are generous liveness bounds."""
import signal
import time

from conftest import create_topic, produce, unique, wait_for

PARTS = 4


def owned(sc, g):
    st, body = sc.get(f"/v1/groups/{g}")
    return {p["partition"] for p in body.get("partitions", [])} if st == 200 else set()


def drain_acked(sc, g, topic, quiet_ms=1500):
    """Fetches and acks until a fetch brings nothing."""
    while True:
        recs = sc.fetch(g, topic, max=1000, wait_ms=quiet_ms)
        if not recs:
            return
        st, body = sc.ack(g, [r["ack_id"] for r in recs])
        assert st == 200 and body["rejected"] == 0, body


def split(a, b, g, topic):
    """Waits until a and b, two processes on g, share topic's partitions half and half, and
    acks everything so far."""
    # Both must fetch to subscribe; the group then splits the partitions between them.
    wait_for(lambda: (a.fetch(g, topic, max=1, wait_ms=200) is not None and
                      b.fetch(g, topic, max=1, wait_ms=200) is not None and
                      len(owned(a, g)) == PARTS // 2 and len(owned(b, g)) == PARTS // 2),
             90, 0.5, "two processes with two partitions each")
    drain_acked(a, g, topic)
    drain_acked(b, g, topic)


def first_from(sc, g, topic, parts, timeout):
    """Fetches (and acks) on sc until a record of parts comes; returns when, or fails."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        recs = sc.fetch(g, topic, max=1000, wait_ms=200)
        if recs:
            sc.ack(g, [r["ack_id"] for r in recs])
        if any(r["partition"] in parts for r in recs):
            return time.time()
    raise AssertionError(f"no record of partitions {sorted(parts)} within {timeout} s:\n"
                         f"{sc.logs()}")


def test_kill_9_survivor_takes_over_within_the_default_session_timeout(bootstrap, sidecars):
    """ksidecar's defaults (no kafka.* timeouts given): the survivor delivers the killed
    process's partitions within about session.timeout.ms (30 s), not librdkafka's 45 s."""
    topic, g = unique("ttake"), unique("gtake")
    create_topic(bootstrap, topic, PARTS)
    produce(bootstrap, topic, 400, partitions=PARTS)
    a, b = sidecars(kafka_timeouts=False), sidecars(kafka_timeouts=False)
    split(a, b, g, topic)
    lost = owned(a, g)
    produce(bootstrap, topic, 400, partitions=PARTS)
    t0 = time.time()
    a.stop(sig=signal.SIGKILL)
    t1 = first_from(b, g, topic, lost, 60)
    print(f"kill -9 -> survivor's first delivery of {sorted(lost)}: {t1 - t0:.1f} s")
    assert t1 - t0 < 42, "the survivor waited about librdkafka's 45 s session timeout"
    assert owned(b, g) == set(range(PARTS))
    assert b.stop() == 0


def test_static_member_restarted_after_kill_9_gets_its_partitions_back_at_once(bootstrap,
                                                                                sidecars):
    """Static membership: a sidecar restarted with the same group.instance.id rejoins as the
    same member, with the same partitions, long before the (45 s) session timeout; the other
    member never took them over."""
    topic, g = unique("tstatic"), unique("gstatic")
    create_topic(bootstrap, topic, PARTS)
    produce(bootstrap, topic, 400, partitions=PARTS)
    session = ["--kafka.session.timeout.ms=45000", "--kafka.heartbeat.interval.ms=3000"]
    a = sidecars(session + ["--kafka.group.instance.id=pod-a"])
    b = sidecars(session, env={"KSIDECAR_KAFKA_GROUP_INSTANCE_ID": "pod-b"})
    split(a, b, g, topic)
    mine, theirs = owned(a, g), owned(b, g)
    b_revokes = b.logs().count("revoked ")
    produce(bootstrap, topic, 400, partitions=PARTS)
    a.stop(sig=signal.SIGKILL)
    t0 = time.time()
    a2 = sidecars(session + ["--kafka.group.instance.id=pod-a"])
    t1 = first_from(a2, g, topic, mine, 40)
    print(f"static member restarted (kill -9, same group.instance.id): first delivery "
          f"{t1 - t0:.1f} s after the restart began (session timeout 45 s)")
    assert t1 - t0 < 30, "the restarted static member waited for the session timeout"
    assert owned(a2, g) == mine
    assert owned(b, g) == theirs
    assert b.logs().count("revoked ") == b_revokes, "the other member lost partitions"
    assert a2.stop() == 0
    assert b.stop() == 0


def test_static_member_stopped_by_sigterm_does_not_leave_the_group(bootstrap, sidecars):
    """A static member's clean shutdown commits and closes but sends no LeaveGroup
    (librdkafka's rule for group.instance.id): its partitions wait for the same instance,
    or for the session timeout (ksidecar's 30 s default), before another member gets them."""
    topic, g = unique("tsigterm"), unique("gsigterm")
    create_topic(bootstrap, topic, PARTS)
    produce(bootstrap, topic, 400, partitions=PARTS)
    a = sidecars(["--kafka.group.instance.id=pod-a"], kafka_timeouts=False)
    b = sidecars(kafka_timeouts=False)
    split(a, b, g, topic)
    mine = owned(a, g)
    produce(bootstrap, topic, 400, partitions=PARTS)
    t0 = time.time()
    assert a.stop() == 0
    t1 = first_from(b, g, topic, mine, 60)
    print(f"static member SIGTERM -> the other member's first delivery of {sorted(mine)}: "
          f"{t1 - t0:.1f} s (session timeout 30 s)")
    assert t1 - t0 > 5, "the static member left the group at SIGTERM"
    assert b.stop() == 0
