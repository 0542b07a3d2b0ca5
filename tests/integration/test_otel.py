"""ksidecar's own spans over OTLP/HTTP (protobuf, parsed with the opentelemetry-proto package,
and JSON), against a real broker, the real binary and an
OTLP receiver this test runs (http.server): a lease's span continues the record's trace
(parent: its traceparent), carries the messaging attributes and an event for how it ended; a
record whose context says not sampled gets none; a delivery's receive span continues the
record's trace when it went alone (the lease's span links it) and links each record's context
when it went in a batch; a dead letter's traceparent names the lease's span; with the endpoint
down, records still flow and the spans are dropped and counted."""
import base64
import json

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conftest import Recorder, create_topic, free_port, unique, wait_for
from test_metrics import scrape, val
from test_redrive import headers, redrive

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACE4, PARENT4 = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
STATE4, BAGGAGE4 = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", "tenant=t1,user.id=42"
CTX4 = [{"key": "traceparent", "value": f"00-{TRACE4}-{PARENT4}-01"},
        {"key": "tracestate", "value": STATE4}, {"key": "baggage", "value": BAGGAGE4}]


class Receiver(Recorder):
    """An OTLP/HTTP endpoint: keeps every span POSTed to /v1/traces; answers status."""

    def __init__(self, status=200):
        super().__init__(status, b"{}")

    def spans(self):
        out = []
        with self.lock:
            bodies = list(self.bodies)
        for path, hdrs, body in bodies:
            assert path == "/v1/traces"
            if hdrs["Content-Type"] == "application/x-protobuf":
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                doc = MessageToDict(req, use_integers_for_enums=True)
                for rs in doc["resourceSpans"]:  # ids: base64 in protobuf's JSON, hex in OTLP's
                    for ss in rs["scopeSpans"]:
                        for sp in ss["spans"]:
                            for x in [sp] + sp.get("links", []):
                                for k in ("traceId", "spanId", "parentSpanId"):
                                    if k in x:
                                        x[k] = base64.b64decode(x[k]).hex()
            else:
                assert hdrs["Content-Type"] == "application/json"
                doc = json.loads(body)
            for rs in doc["resourceSpans"]:
                res = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        s["resource"] = res
                        s["attrs"] = {a["key"]: list(a["value"].values())[0]
                                      for a in s["attributes"]}
                        out.append(s)
        return out



def otel_env(url, **more):
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "ks-under-test", "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=t%201",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test", **more}


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_lease_spans_continue_the_records_trace_and_the_dead_letter_names_them(bootstrap,
                                                                                sidecars,
                                                                                protocol):
    topic, dlt, group = unique("otel"), unique("otel-dlt"), unique("g-otel")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, dlt, 1)
    rcv = Receiver()
    try:
        sc = sidecars([f"--group.dead_letter_topic={dlt}"],
                      env=otel_env(rcv.url, OTEL_EXPORTER_OTLP_PROTOCOL=protocol))
        recs = [{"key": "order-1", "value": "sampled",
                 "headers": [{"key": "traceparent", "value": f"00-{TRACE}-{PARENT}-01"}]},
                {"key": "order-2", "value": "unsampled",
                 "headers": [{"key": "traceparent",
                              "value": f"00-{'1' * 32}-{'2' * 16}-00"}]},
                {"key": "order-3", "value": "no context"},
                {"key": "order-4", "value": "full context", "headers": CTX4}]
        st, body = sc.post(f"/v1/topics/{topic}/records", {"records": recs})
        assert st == 200, body
        got = []
        wait_for(lambda: got.extend(sc.fetch(group, topic, max=10, wait_ms=1000)) or
                 len(got) >= 4, 60, 0.1, "the four records")
        by = {r["value"]: r for r in got}
        assert sc.ack(group, [by["sampled"]["ack_id"], by["unsampled"]["ack_id"]])[0] == 200
        st, body = sc.post(f"/v1/groups/{group}/nacks",
                           {"ack_ids": [by["no context"]["ack_id"], by["full context"]["ack_id"]],
                            "dead_letter": True, "reason": "poison pill \u00e9"})
        assert st == 200, body

        def process():
            return [s for s in rcv.spans() if s["attrs"]["messaging.operation.type"] == "process"]

        wait_for(lambda: len(process()) >= 3, 60, 0.1, "three process spans at the receiver")
        spans = {s["attrs"]["messaging.kafka.message.key"]: s for s in process()}
        assert set(spans) == {"order-1", "order-3", "order-4"}, spans  # order-2: not sampled
        a = spans["order-1"]
        assert (a["traceId"], a["parentSpanId"]) == (TRACE, PARENT), a
        assert a["name"] == f"process {topic}" and a["kind"] == 5
        assert a["attrs"]["messaging.system"] == "kafka"
        assert a["attrs"]["messaging.destination.name"] == topic
        assert a["attrs"]["messaging.destination.partition.id"] == "0"
        assert a["attrs"]["messaging.kafka.offset"] == "0"
        assert a["attrs"]["messaging.consumer.group.name"] == group
        assert a["attrs"]["ksidecar.attempt"] == "1"
        assert int(a["endTimeUnixNano"]) >= int(a["startTimeUnixNano"]) > 0
        assert [e["name"] for e in a["events"]] == ["ack"]
        assert a["resource"]["service.name"] == {"stringValue": "ks-under-test"}
        assert a["resource"]["deployment.environment"] == {"stringValue": "test"}
        assert "process.pid" in a["resource"] and "host.name" in a["resource"]
        c = spans["order-3"]
        assert "parentSpanId" not in c and len(c["traceId"]) == 32
        ev = [(e["name"], {x["key"]: list(x["value"].values())[0] for x in e["attributes"]})
              for e in c["events"]]
        assert [n for n, _ in ev] == ["nack", "dead_letter"], ev
        assert ev[0][1]["ksidecar.reason"] == "poison pill ??"  # UTF-8 bytes as ?
        with rcv.lock:
            assert all(h.get("x-tenant") == "t 1" for _, h, _ in rcv.bodies)
            want = "application/x-protobuf" if protocol == "http/protobuf" else "application/json"
            assert {h["Content-Type"] for _, h, _ in rcv.bodies} == {want}
        d = spans["order-4"]
        assert (d["traceId"], d["parentSpanId"]) == (TRACE4, PARENT4), d
        # A dead letter's traceparent names the lease's span, in its trace (the record's, or
        # one of its own); tracestate and baggage go as they came.
        dl = []
        dl_group = unique("g-otel-dl")
        wait_for(lambda: dl.extend(sc.fetch(dl_group, dlt, max=10, wait_ms=1000))
                 or len(dl) >= 2, 60, 0.1, "the dead letters")
        dls = {r["key"]: headers(r) for r in dl}
        assert dls["order-3"]["traceparent"] == f"00-{c['traceId']}-{c['spanId']}-01"
        assert "tracestate" not in dls["order-3"] and "baggage" not in dls["order-3"]
        assert dls["order-4"]["traceparent"] == f"00-{TRACE4}-{d['spanId']}-01"
        assert (dls["order-4"]["tracestate"], dls["order-4"]["baggage"]) == (STATE4, BAGGAGE4)
        # Redriven, they keep that context: the trace goes on from ksidecar's span.
        assert redrive(sc, group)["moved"] == 2
        back = []
        reader = unique("g-otel-back")

        def read_back():  # acking each: the redriven record's key waits for the one before
            recs = sc.fetch(reader, topic, max=10, wait_ms=1000)
            if recs:
                sc.ack(reader, [r["ack_id"] for r in recs])
            back.extend(r for r in recs if "ksidecar.redriven" in headers(r))
            return back

        wait_for(lambda: len(read_back()) >= 2, 60, 0.1, "the redriven records")
        for r in back:
            want = {k: v for k, v in dls[r["key"]].items()
                    if k in ("traceparent", "tracestate", "baggage")}
            assert {k: v for k, v in headers(r).items() if k in want} == want, r
        text = scrape(sc)
        assert val(text, "ksidecar_otel_spans_exported_total") >= 3
        assert val(text, "ksidecar_otel_spans_dropped_total") == 0
        assert sc.stop() == 0
    finally:
        rcv.close()


def test_endpoint_down_records_flow_and_spans_are_dropped_and_counted(bootstrap, sidecars):
    topic, group = unique("otel-down"), unique("g-otel-down")
    create_topic(bootstrap, topic, 1)
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens
    sc = sidecars([], env=otel_env(down, OTEL_BSP_MAX_QUEUE_SIZE="10",
                                   OTEL_BSP_MAX_EXPORT_BATCH_SIZE="5",
                                   OTEL_BSP_EXPORT_TIMEOUT="500"))
    recs = [{"key": f"k{i}", "value": f"v{i}"} for i in range(200)]
    st, body = sc.post(f"/v1/topics/{topic}/records", {"records": recs})
    assert st == 200, body
    n = 0
    for _ in range(60):
        got = sc.fetch(group, topic, max=100, wait_ms=1000)
        if got:
            assert sc.ack(group, [r["ack_id"] for r in got])[0] == 200
        n += len(got)
        if n >= 200:
            break
    assert n == 200
    wait_for(lambda: val(scrape(sc), "ksidecar_otel_spans_dropped_total") >= 200, 60, 0.2,
             "every span dropped and counted")
    assert val(scrape(sc), "ksidecar_otel_spans_exported_total") == 0
    assert sc.stop() == 0


def tp(trace, span, flags="01"):
    return [{"key": "traceparent", "value": f"00-{trace}-{span}-{flags}"}]


def receive_spans(rcv, topic):
    return [s for s in rcv.spans() if s["attrs"]["messaging.operation.type"] == "receive"
            and s["attrs"].get("messaging.destination.name") == topic]


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_receive_spans_one_record_in_its_trace_a_batch_linking_each(bootstrap, sidecars,
                                                                   protocol):
    alone, batch, group = unique("otel-rcv1"), unique("otel-rcvn"), unique("g-otel-rcv")
    for t in (alone, batch):
        create_topic(bootstrap, t, 1)
    rcv = Receiver()
    try:
        sc = sidecars([], env=otel_env(rcv.url, OTEL_EXPORTER_OTLP_PROTOCOL=protocol))
        # One record a fetch: its receive span's parent is the producer's span.
        st, body = sc.post(f"/v1/topics/{alone}/records",
                           {"records": [{"key": "k-1", "value": "v", "headers": tp(TRACE, PARENT)}]})
        assert st == 200, body
        got = []
        wait_for(lambda: got.extend(sc.fetch(group, alone, max=1, wait_ms=1000)) or got, 60, 0.1,
                 "the record")
        assert sc.ack(group, [got[0]["ack_id"]])[0] == 200
        wait_for(lambda: receive_spans(rcv, alone) and len(
            [s for s in rcv.spans() if s["name"] == f"process {alone}"]), 60, 0.1,
            "the receive and process spans")
        [r] = receive_spans(rcv, alone)
        assert r["name"] == f"receive {alone}" and r["kind"] == 5, r
        assert (r["traceId"], r["parentSpanId"]) == (TRACE, PARENT), r
        want = {"messaging.system": "kafka", "messaging.operation.type": "receive",
                "messaging.destination.name": alone, "messaging.destination.partition.id": "0",
                "messaging.kafka.offset": "0", "messaging.consumer.group.name": group,
                "messaging.kafka.message.key": "k-1", "ksidecar.attempt": "1",
                "ksidecar.subscriber": "default", "ksidecar.transport": "http"}
        assert {k: str(r["attrs"].get(k)) for k in want} == want, r["attrs"]
        assert "links" not in r or not r["links"], r
        # From fetched (it waited in ksidecar's window) to handed to the fetch: before the lease.
        assert 0 < int(r["startTimeUnixNano"]) <= int(r["endTimeUnixNano"])
        [pr] = [s for s in rcv.spans() if s["name"] == f"process {alone}"]
        assert (pr["traceId"], pr["parentSpanId"]) == (TRACE, PARENT), pr
        assert [(x["traceId"], x["spanId"]) for x in pr["links"]] == [(TRACE, r["spanId"])], pr
        assert int(pr["startTimeUnixNano"]) >= int(r["endTimeUnixNano"]) - 2000000

        # Three records in one fetch: one receive span, of a trace of its own, linking the two
        # that have a context (sampled or not); their process spans keep their own parents.
        other = "1" * 32
        recs = [{"key": "b-1", "value": "sampled", "headers": tp(TRACE, PARENT)},
                {"key": "b-2", "value": "unsampled", "headers": tp(other, "2" * 16, "00")},
                {"key": "b-3", "value": "no context"}]
        st, body = sc.post(f"/v1/topics/{batch}/records", {"records": recs})
        assert st == 200, body
        got = []
        wait_for(lambda: got.extend(sc.fetch(group, batch, max=10, wait_ms=1000)) or got, 60,
                 0.1, "the batch")
        assert len(got) == 3, got  # produced together, fetched from Kafka together
        assert sc.ack(group, [x["ack_id"] for x in got])[0] == 200
        wait_for(lambda: receive_spans(rcv, batch), 60, 0.1, "the batch's receive span")
        [b] = receive_spans(rcv, batch)
        assert b["name"] == f"receive {batch}" and b["kind"] == 5, b
        assert "parentSpanId" not in b and b["traceId"] not in (TRACE, other), b
        assert b["attrs"]["messaging.batch.message_count"] == "3", b["attrs"]
        assert b["attrs"]["ksidecar.transport"] == "http"
        for k in ("messaging.kafka.offset", "messaging.destination.partition.id",
                  "messaging.kafka.message.key", "ksidecar.attempt"):
            assert k not in b["attrs"], (k, b["attrs"])
        assert sorted((x["traceId"], x["spanId"]) for x in b["links"]) == sorted(
            [(TRACE, PARENT), (other, "2" * 16)]), b["links"]
        wait_for(lambda: len([s for s in rcv.spans() if s["name"] == f"process {batch}"]) >= 2,
                 60, 0.1, "the batch's process spans")
        procs = {s["attrs"]["messaging.kafka.message.key"]: s
                 for s in rcv.spans() if s["name"] == f"process {batch}"}
        assert set(procs) == {"b-1", "b-3"}, procs  # b-2's context says not sampled
        assert procs["b-1"]["parentSpanId"] == PARENT and not procs["b-1"].get("links"), procs
        assert sc.stop() == 0
    finally:
        rcv.close()


def test_no_receive_span_without_a_sampled_context_when_the_sampler_says_no(bootstrap,
                                                                           sidecars):
    topic, group = unique("otel-rcv0"), unique("g-otel-rcv0")
    create_topic(bootstrap, topic, 1)
    rcv = Receiver()
    try:
        sc = sidecars([], env=otel_env(rcv.url, OTEL_TRACES_SAMPLER="parentbased_traceidratio",
                                       OTEL_TRACES_SAMPLER_ARG="0"))
        # Alone: none without a context, one in the record's trace with a sampled context.
        for key, headers_ in (("none", []), ("sampled", tp(TRACE, PARENT))):
            st, body = sc.post(f"/v1/topics/{topic}/records",
                               {"records": [{"key": key, "value": "v", "headers": headers_}]})
            assert st == 200, body
            got = []
            wait_for(lambda: got.extend(sc.fetch(group, topic, max=1, wait_ms=1000)) or got, 60,
                     0.1, "the record")
            assert sc.ack(group, [got[0]["ack_id"]])[0] == 200
        # A batch with no context, and one with an unsampled context only: no span.
        st, body = sc.post(f"/v1/topics/{topic}/records", {"records": [
            {"key": "n1", "value": "v"}, {"key": "n2", "value": "v",
                                          "headers": tp("3" * 32, "4" * 16, "00")}]})
        assert st == 200, body
        got = []
        wait_for(lambda: got.extend(sc.fetch(group, topic, max=10, wait_ms=1000)) or
                 len(got) >= 2, 60, 0.1, "the batch")
        assert sc.ack(group, [x["ack_id"] for x in got])[0] == 200
        wait_for(lambda: len(receive_spans(rcv, topic)) >= 1, 60, 0.1, "the sampled one's span")
        assert sc.stop() == 0  # flushes what is queued
        spans = rcv.spans()
        assert {(s["name"], s["attrs"].get("messaging.kafka.message.key")) for s in spans} == {
            (f"receive {topic}", "sampled"), (f"process {topic}", "sampled")}, spans
        [r] = receive_spans(rcv, topic)
        assert (r["traceId"], r["parentSpanId"]) == (TRACE, PARENT)
    finally:
        rcv.close()
