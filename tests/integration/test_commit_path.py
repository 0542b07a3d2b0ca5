"""The whole path against a real broker: Kafka -> ksidecar -> HTTP client -> acks -> commits,
checked with Kafka's own ConsumerGroupCommand."""
import random
import signal

from conftest import (create_topic, describe_group, drain, fetch_all, produce, unique, wait_for,
                      watermarks)


def test_10000_records_acked_in_shuffled_order_are_all_committed(bootstrap, sidecars):
    topic, group = unique("t10k"), unique("g10k")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 10_000, partitions=4)
    ends = watermarks(bootstrap, topic)
    assert sum(ends.values()) == 10_000 and len(ends) == 4

    # Credits above the batch: this client holds all 10,000 before it acks any.
    sc = sidecars(["--subscriber.max_records=10000"])
    recs = fetch_all(sc, group, topic, 10_000)
    assert len(recs) == 10_000
    seen = {(r["partition"], r["offset"]) for r in recs}
    assert len(seen) == 10_000, "a record was delivered twice"
    assert seen == {(p, o) for p, end in ends.items() for o in range(end)}
    assert all(r["attempt"] == 1 for r in recs)
    assert recs[0]["value_encoding"] == "text" and recs[0]["value"].startswith("v")
    assert recs[0]["headers"][0]["key"] == "i"

    ids = [r["ack_id"] for r in recs]
    random.Random(7).shuffle(ids)
    for i in range(0, len(ids), 500):
        st, body = sc.ack(group, ids[i:i + 500])
        assert st == 200, body
        assert body["acked"] == len(ids[i:i + 500]) and body["rejected"] == 0, body

    def all_committed():
        d = describe_group(bootstrap, group, topic)
        return d if len(d) == 4 and all(cur == end == ends[p] for p, (cur, end) in d.items()) else None

    wait_for(all_committed, 60, 1, "every partition committed to its end offset")
    assert sc.stop() == 0


def test_commit_stops_at_first_unacked_and_restart_redelivers_from_there(bootstrap, sidecars):
    topic, group = unique("tgap"), unique("ggap")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 200, partitions=2)  # 100 per partition, round-robin

    sc = sidecars()
    recs = fetch_all(sc, group, topic, 200)
    assert len(recs) == 200
    unacked = {(0, 37), (1, 50), (1, 80)}
    acked = [r for r in recs if (r["partition"], r["offset"]) not in unacked]
    st, body = sc.ack(group, [r["ack_id"] for r in acked])
    assert st == 200 and body["acked"] == 197, body

    def stopped_at_gap():
        d = describe_group(bootstrap, group, topic)
        return d if d.get(0, (None,))[0] == 37 and d.get(1, (None,))[0] == 50 else None

    wait_for(stopped_at_gap, 60, 1, "commits of 37 on partition 0 and 50 on partition 1")
    assert sc.stop() == 0
    # After a clean stop the commit has not moved past the first unacked record.
    d = describe_group(bootstrap, group, topic)
    assert d[0][0] == 37 and d[1][0] == 50, d

    sc2 = sidecars()
    again = drain(sc2, group, topic)
    got = {(r["partition"], r["offset"]) for r in again}
    # The unacked records come back...
    assert unacked <= got
    # ...the acked ones below the first unacked record do not...
    assert not any((p == 0 and o < 37) or (p == 1 and o < 50) for p, o in got), sorted(got)
    # ...and neither do the acked ones above it: the commit metadata kept those acks.
    assert got == unacked, sorted(got)
    assert sc2.stop() == 0


def test_sigterm_commits_what_is_acked_and_exits_zero(bootstrap, sidecars):
    topic, group = unique("tterm"), unique("gterm")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 50)
    # A long commit interval: only the shutdown commit can move the offset.
    sc = sidecars(["--commit.interval_ms=600000"])
    recs = fetch_all(sc, group, topic, 50)
    st, body = sc.ack(group, [r["ack_id"] for r in recs[:30]])
    assert st == 200 and body["acked"] == 30
    assert sc.stop(signal.SIGTERM) == 0
    assert "committed and left the group" in sc.logs()
    assert describe_group(bootstrap, group, topic)[0][0] == 30


def test_attempt_counts_above_the_last_delivery_survive_a_second_restart(bootstrap, sidecars):
    """Attempt counts restored from the commit metadata stay in it while the records wait,
    though nothing above them was delivered again: the metadata's walk of the window must
    reach them (meta_end counts restored attempts too)."""
    topic, group = unique("tatt"), unique("gatt")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 10, partitions=1)

    sc = sidecars()
    recs = fetch_all(sc, group, topic, 10)
    assert sorted(r["offset"] for r in recs) == list(range(10))
    assert all(r["attempt"] == 1 for r in recs)
    st, body = sc.ack(group, [r["ack_id"] for r in recs if r["offset"] < 5])
    assert st == 200 and body["acked"] == 5, body
    wait_for(lambda: describe_group(bootstrap, group, topic).get(0, (None,))[0] == 5, 60, 1,
             "a commit of offset 5")
    assert sc.stop() == 0  # the metadata of offset 5 holds one attempt for each of 5..9

    # The second process delivers only offset 5, then commits 6 with the restored counts.
    sc2 = sidecars()
    got = wait_for(lambda: sc2.fetch(group, topic, max=1, wait_ms=1000), 60, 0,
                   "the first record after the restart")
    assert [(r["offset"], r["attempt"]) for r in got] == [(5, 2)]
    st, body = sc2.ack(group, [got[0]["ack_id"]])
    assert st == 200 and body["acked"] == 1, body
    wait_for(lambda: describe_group(bootstrap, group, topic).get(0, (None,))[0] == 6, 60, 1,
             "a commit of offset 6")
    assert sc2.stop() == 0

    sc3 = sidecars()
    rest = fetch_all(sc3, group, topic, 4)
    assert sorted((r["offset"], r["attempt"]) for r in rest) == [(o, 2) for o in range(6, 10)]
    assert sc3.stop() == 0
