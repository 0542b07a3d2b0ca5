"""W3C trace context through ksidecar, against a real broker, the real binary and a real push
receiver (http.server): a record's traceparent, tracestate and baggage headers become the
same-named HTTP headers of a one-record push, as they are (a traceparent only when valid,
tracestate only with it); a batch carries them in each record's headers; they stay in the
record headers of HTTP and gRPC fetches; a dead letter and its redriven record keep them."""
import json

from conftest import create_topic, unique, wait_for
from grpc_support import consumer_pb2, start_grpc
from test_push import App, push_args, wait_committed
from test_redrive import headers, redrive

import pytest

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
BAGGAGE = "user.id=a%20b, tenant=t1;prop=1"
CONTEXT = [{"key": "traceparent", "value": TP}, {"key": "tracestate", "value": STATE},
           {"key": "baggage", "value": BAGGAGE}]
BAD_TP = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"  # upper case: invalid


@pytest.fixture
def apps():
    made = []

    def make(decide):
        made.append(App(decide))
        return made[-1]

    yield make
    for a in made:
        a.close()


def trace_lines(rec):
    """The push request's own trace context lines: [(name, value)]."""
    return [(k, v) for k, v in rec["http"] if k in ("traceparent", "tracestate", "baggage")]


def produce(sc, topic, recs):
    st, body = sc.post(f"/v1/topics/{topic}/records", {"records": recs})
    assert st == 200 and all("offset" in r for r in body["results"]), body


def test_push_writes_the_trace_context_as_its_own_headers_and_dead_letters_and_redrives_keep_it(
        bootstrap, sidecars, apps):
    topic, group, dlt = unique("tc-push"), unique("g-tc-push"), unique("tc-dlt")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, dlt, 1)

    def decide(rec):
        # The record with context is refused once (dead-lettered at once), taken when redriven.
        if rec["value"] == b"ctx" and "ksidecar.redriven" not in rec["headers"]:
            return 400, {}, b"refused"
        return 200, {}, b""

    app = apps(decide)
    sc = sidecars(push_args(group, topic, app.url, concurrency=1, dead_letter_topic=dlt))
    produce(sc, topic, [
        {"key": "k", "value": "ctx", "headers": CONTEXT},
        {"key": "k", "value": "bad", "headers": [{"key": "traceparent", "value": BAD_TP},
                                                 {"key": "tracestate", "value": STATE}]},
        {"key": "k", "value": "baggage", "headers": [{"key": "baggage", "value": BAGGAGE}]},
        {"key": "k", "value": "none"},
    ])
    wait_committed(bootstrap, group, topic, 1, timeout=60)
    by = {}
    for r in app.entries():
        by.setdefault(r["value"], []).append(r)
    first = by[b"ctx"][0]
    assert first["status"] == 400
    assert trace_lines(first) == [("traceparent", TP), ("tracestate", STATE),
                                  ("baggage", BAGGAGE)], first["http"]
    # Also still as the record's own headers, escaped as every ksidecar-header-* is.
    assert first["headers"]["traceparent"] == TP
    assert first["headers"]["baggage"] == "user.id=a%2520b,%20tenant=t1;prop=1"
    bad = by[b"bad"][0]
    assert trace_lines(bad) == [] and bad["headers"]["traceparent"] == BAD_TP, bad["http"]
    assert trace_lines(by[b"baggage"][0]) == [("baggage", BAGGAGE)]
    assert trace_lines(by[b"none"][0]) == []
    # The dead letter keeps the context as it came.
    reader = unique("g-tc-dlt")
    got = []
    wait_for(lambda: got.extend(sc.fetch(reader, dlt, max=10, wait_ms=1000)) or got, 60, 0.1,
             "the dead letter")
    h = headers(got[0])
    assert got[0]["value"] == "ctx"
    assert (h["traceparent"], h["tracestate"], h["baggage"]) == (TP, STATE, BAGGAGE), h
    # Redriven, it comes back with the context and is pushed with it again.
    rep = redrive(sc, group)
    assert rep["moved"] == 1, rep
    wait_for(lambda: len(by_value(app, b"ctx")) == 2, 60, 0.2, "the redriven record's push")
    again = by_value(app, b"ctx")[1]
    assert again["status"] == 200 and again["headers"]["ksidecar.redriven"] == "1"
    assert trace_lines(again) == trace_lines(first), again["http"]
    assert sc.stop() == 0


def by_value(app, value):
    return [r for r in app.entries() if r["value"] == value]


def test_a_push_batch_and_the_fetches_carry_the_context_in_each_records_headers(
        bootstrap, sidecars, apps):
    topic, group = unique("tc-batch"), unique("g-tc-batch")
    create_topic(bootstrap, topic, 1)
    app = apps(lambda rec: (200, {"Content-Type": "application/json"}, json.dumps(
        {"statuses": ["SUCCESS"] * len(json.loads(rec["value"]))}).encode()))
    sc = start_grpc(sidecars, push_args(group, topic, app.url, concurrency=1, batch=10))
    tps = [f"00-{i:032x}-{i + 1:016x}-01" for i in range(1, 21)]
    produce(sc, topic, [{"key": f"k{i}", "value": f"v{i}",
                         "headers": [{"key": "traceparent", "value": tp},
                                     {"key": "baggage", "value": f"n={i}"}]}
                        for i, tp in enumerate(tps)])
    wait_committed(bootstrap, group, topic, 1, timeout=60)
    seen = {}
    for req in app.entries():
        assert req["batch"] is not None and trace_lines(req) == [], req["http"]
        for r in json.loads(req["value"]):
            seen[r["value"]] = headers(r)
    assert {v: (h["traceparent"], h["baggage"]) for v, h in seen.items()} == {
        f"v{i}": (tp, f"n={i}") for i, tp in enumerate(tps)}
    # An HTTP fetch and a gRPC fetch of other groups get them in the record headers.
    recs = []
    wait_for(lambda: recs.extend(sc.fetch(unique("g-tc-http"), topic, max=100, wait_ms=1000))
             or len(recs) >= 20, 60, 0.1, "the HTTP fetch")
    want = {f"v{i}": tp for i, tp in enumerate(tps)}
    assert {r["value"]: headers(r)["traceparent"] for r in recs} == want
    grecs = []
    gg = unique("g-tc-grpc")

    def grpc_fetch():
        req = consumer_pb2.FetchRequest(group=gg, topics=[topic], max=100, wait_ms=1000)
        grecs.extend(sc.consumer.Fetch(req, timeout=30).records)
        return len(grecs) >= 20

    wait_for(grpc_fetch, 60, 0.1, "the gRPC fetch")
    assert {r.value.decode(): {h.key: h.value.decode() for h in r.headers}["traceparent"]
            for r in grecs} == want
    assert sc.stop() == 0
