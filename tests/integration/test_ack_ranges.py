"""Ack ranges and results by position, through the real binary against the real broker: an
old-style client's acks answered as before, ranges acked with results by position on the
Subscribe stream, the unary Ack and the HTTP acks body, a range's refused offsets reported by
their own ids, and malformed ranges refused as INVALID."""
import time

import pytest

from conftest import create_topic, produce, unique, wait_for, watermarks
from grpc_support import ACCEPTED, INVALID, StreamClosed, consumer_pb2, open_msg, start_grpc
from test_grpc import all_committed, ack_results, next_batch, streams  # noqa: F401

c = consumer_pb2
NOT_FOUND = c.NOT_FOUND
STALE = c.STALE
COMMITTED = c.COMMITTED


def split_id(ack_id):
    """(head "a1...-<epoch>-<partition>", offset, "<attempt>-<topic>") of a single id."""
    head, rest = ack_id.split("-", 3)[:3], ack_id.split("-", 3)[3]
    off, tail = rest.split("-", 1)
    return "-".join(head), int(off), tail


def range_id(first_id, last):
    head, first, tail = split_id(first_id)
    return f"{head}-{first}~{last}-{tail}"


def coalesce(ids):
    """Runs of consecutive offsets sharing everything else, each as one range id (a batch
    interleaves partitions: grouped first)."""
    out, run = [], None
    for head, off, tail in sorted(split_id(i) for i in ids):
        if run and run[0] == head and run[2] == tail and run[3] + 1 == off:
            run[3] = off
        else:
            if run:
                out.append(f"{run[0]}-{run[1]}~{run[3]}-{run[2]}")
            run = [head, off, tail, off]
    if run:
        out.append(f"{run[0]}-{run[1]}~{run[3]}-{run[2]}")
    return out


def first_batch(bootstrap, sidecars, streams, name, n):
    """A sidecar, a stream of 10 credits on a new one-partition topic of n records, and the
    first batch it got, in offset order."""
    topic, g = unique("t" + name), unique("g" + name)
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, n, partitions=1)
    sc = start_grpc(sidecars)
    st = streams(sc.consumer, open_msg(g, topic, records=10))
    recs = next_batch(st, 30)
    assert recs
    recs.sort(key=lambda x: x.offset)
    return sc, st, recs


def next_ack_message(st, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = st.get(0.5)
        if r is not None and r.WhichOneof("kind") == "ack_results":
            return r.ack_results
    return None


def test_old_style_and_ranges_by_position_commit_everything(bootstrap, sidecars, streams):
    topic, g = unique("tarng"), unique("garng")
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 3000, partitions=3)
    ends = watermarks(bootstrap, topic)
    sc = start_grpc(sidecars)
    st = streams(sc.consumer, open_msg(g, topic, records=500))
    got, old_checked, ranges_sent = 0, False, 0
    deadline = time.time() + 60
    while got < 3000 and time.time() < deadline:
        recs = next_batch(st, 5)
        if not recs:
            continue
        got += len(recs)
        ids = [x.ack_id for x in recs]
        if not old_checked:
            # (a) an old client: one id each, every id echoed with its status, in order.
            st.ack(ids)
            res = ack_results(st, len(ids))
            assert [x.ack_id for x in res] == ids
            assert all(x.status == ACCEPTED and x.position == 0 for x in res), res[:3]
            old_checked = True
            continue
        # (b) ranges, answered by position: a count, and no result for an accepted record.
        rs = coalesce(ids)
        assert len(rs) < len(ids) or len(ids) == 1
        ranges_sent += len(rs)
        st.send(ack=c.AckIds(ack_ids=rs, results_by_position=True))
        ar = next_ack_message(st)
        assert ar is not None
        assert ar.accepted == len(ids) and not ar.results, ar
    assert got == 3000 and ranges_sent
    wait_for(lambda: all_committed(bootstrap, g, topic, ends), 60, 1, "all committed")
    st.cancel()
    assert sc.stop() == 0


def test_a_range_reports_its_refused_offsets_by_id(bootstrap, sidecars, streams):
    sc, st, recs = first_batch(bootstrap, sidecars, streams, "arbad", 200)
    k = len(recs)
    assert [x.offset for x in recs] == list(range(k))
    first = recs[0].ack_id
    head, _, tail = split_id(first)
    attempt, t = tail.split("-", 1)
    # (c) offsets k..k+2 were never delivered: each reported NOT_FOUND by its own id; a range
    # of another attempt (position 1) is stale for each of its offsets; (d) a reversed range
    # and a too long one are INVALID, by their id.
    rs = [range_id(first, k + 2), f"{head}-0~1-{int(attempt) + 1}-{t}",
          range_id(first, 0).replace("0~0", "5~3"), range_id(first, 100000)]
    st.send(ack=c.AckIds(ack_ids=rs, results_by_position=True, wait_commit=True))
    ar = next_ack_message(st)
    assert ar is not None
    assert ar.accepted == k, ar
    bad = [(x.position, x.ack_id, x.status) for x in ar.results]
    want = [(0, f"{head}-{o}-{tail}", NOT_FOUND) for o in range(k, k + 3)]
    want += [(1, f"{head}-{o}-{int(attempt) + 1}-{t}", STALE) for o in (0, 1)]
    want += [(2, rs[2], INVALID), (3, rs[3], INVALID)]
    assert bad == want, ar
    assert "range" in ar.results[-1].message
    # The second answer (wait_commit): the k acks committed, so only the refused ones again.
    ar2 = next_ack_message(st, 30)
    assert ar2 is not None
    assert ar2.accepted == k, ar2
    assert [(x.position, x.ack_id, x.status) for x in ar2.results] == want
    st.cancel()
    assert sc.stop() == 0


def test_unary_ack_and_http_take_ranges(bootstrap, sidecars):
    topic, g = unique("tarun"), unique("garun")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 40, partitions=1)
    ends = watermarks(bootstrap, topic)
    sc = start_grpc(sidecars)
    recs = []
    deadline = time.time() + 30
    while len(recs) < 40 and time.time() < deadline:
        recs += sc.consumer.Fetch(c.FetchRequest(group=g, topics=[topic], max=40, wait_ms=1000),
                                  timeout=30).records
    assert len(recs) == 40
    recs.sort(key=lambda x: x.offset)
    # Unary Ack: a range of 0..19, by position; without it, a result per record with its id.
    r = sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[range_id(recs[0].ack_id, 9)],
                                     results_by_position=True), timeout=30)
    assert r.accepted == 10 and not r.results, r
    r = sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[range_id(recs[10].ack_id, 19)]),
                        timeout=30)
    assert [x.ack_id for x in r.results] == [x.ack_id for x in recs[10:20]]
    assert all(x.status == ACCEPTED for x in r.results)
    # HTTP: the same ranges in the JSON body, results=errors lists only the refused.
    st, body = sc.post(f"/v1/groups/{g}/acks?results=errors",
                       {"ack_ids": [range_id(recs[20].ack_id, 41)]})
    assert st == 200, body
    assert body["accepted"] == 20 and body["rejected"] == 2, body
    head, _, tail = split_id(recs[0].ack_id)
    assert [(x["index"], x["ack_id"], x["status"]) for x in body["results"]] == \
        [(0, f"{head}-40-{tail}", "NOT_FOUND"), (0, f"{head}-41-{tail}", "NOT_FOUND")]
    st, body = sc.post(f"/v1/groups/{g}/acks", {"ack_ids": [range_id(recs[0].ack_id, 0)
                                                           .replace("0~0", "9~2")]})
    assert st == 400 and "range" in body["error"]["message"], body
    wait_for(lambda: all_committed(bootstrap, g, topic, ends), 60, 1, "all committed")
    assert sc.stop() == 0


def test_range_edges_refused_or_answered_by_single_ids(bootstrap, sidecars, streams):
    """A range ending at the largest offset is answered (each offset NOT_FOUND), not a
    crash; a range padded with zeros past an id's length, and a message naming more than
    8,000 records through ranges, are INVALID; a range of one offset is answered with that
    offset's own id."""
    sc, st, recs = first_batch(bootstrap, sidecars, streams, "aredge", 5)
    head, _, tail = split_id(recs[0].ack_id)
    big = 2**63 - 1
    rs = [f"{head}-{big - 1}~{big}-{tail}", f"{head}-{big}~{big}-{tail}",
          f"{head}-0~{'0' * 4000}1-{tail}", f"{head}-100~100-{tail}"]
    st.send(ack=c.AckIds(ack_ids=rs))
    ar = next_ack_message(st)
    assert ar is not None
    got = [(x.ack_id, x.status) for x in ar.results]
    # (a malformed id is echoed cut to an id's longest length)
    assert len(got) == 5 and rs[2].startswith(got[3][0]) and got[3][1] == INVALID, ar
    got[3] = (rs[2], got[3][1])
    assert got == [(f"{head}-{big - 1}-{tail}", NOT_FOUND), (f"{head}-{big}-{tail}", NOT_FOUND),
                   (f"{head}-{big}-{tail}", NOT_FOUND), (rs[2], INVALID),
                   (f"{head}-100-{tail}", NOT_FOUND)], ar
    # The stream still works: the delivered records ack as one range.
    st.send(ack=c.AckIds(ack_ids=[range_id(recs[0].ack_id, recs[-1].offset)],
                         results_by_position=True))
    ar = next_ack_message(st)
    assert ar is not None and ar.accepted == len(recs) and not ar.results, ar
    # More than 8,000 records through ranges in one message (its answer might not fit one
    # gRPC message): refused as a whole, the stream ends INVALID_ARGUMENT saying why.
    st.send(ack=c.AckIds(ack_ids=[f"{head}-0~4999-{tail}", f"{head}-5000~9999-{tail}"],
                         results_by_position=True))
    with pytest.raises(StreamClosed, match="at most 8000 records"):
        next_ack_message(st)
    st.cancel()
    assert sc.stop() == 0
