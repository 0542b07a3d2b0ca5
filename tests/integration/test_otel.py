"""ksidecar's own spans over OTLP/HTTP (protobuf, parsed with the opentelemetry-proto package,
and JSON), against a real broker, the real binary and an
OTLP receiver this test runs (http.server): a lease's span continues the record's trace
(parent: its traceparent), carries the messaging attributes and an event for how it ended; a
record whose context says not sampled gets none; a dead letter's traceparent names the lease's
span; with the endpoint down, records still flow and the spans are dropped and counted."""
import base64
import http.server
import json
import threading

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conftest import create_topic, free_port, unique, wait_for
from test_metrics import scrape, val
from test_redrive import headers, redrive

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP endpoint: keeps every span POSTed to /v1/traces; answers status."""

    def __init__(self, status=200):
        self.lock = threading.Lock()
        self.bodies = []
        self.status = status
        rcv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with rcv.lock:
                    rcv.bodies.append((self.path, dict(self.headers.items()), body))
                self.send_response(rcv.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

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
                            for k in ("traceId", "spanId", "parentSpanId"):
                                if k in sp:
                                    sp[k] = base64.b64decode(sp[k]).hex()
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

    def close(self):
        self.server.shutdown()
        self.server.server_close()


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
                {"key": "order-3", "value": "no context"}]
        st, body = sc.post(f"/v1/topics/{topic}/records", {"records": recs})
        assert st == 200, body
        got = []
        wait_for(lambda: got.extend(sc.fetch(group, topic, max=10, wait_ms=1000)) or
                 len(got) >= 3, 60, 0.1, "the three records")
        by = {r["value"]: r for r in got}
        assert sc.ack(group, [by["sampled"]["ack_id"], by["unsampled"]["ack_id"]])[0] == 200
        st, body = sc.post(f"/v1/groups/{group}/nacks",
                           {"ack_ids": [by["no context"]["ack_id"]], "dead_letter": True,
                            "reason": "poison pill \u00e9"})
        assert st == 200, body
        wait_for(lambda: len(rcv.spans()) >= 2, 60, 0.1, "two spans at the receiver")
        spans = {s["attrs"]["messaging.kafka.message.key"]: s for s in rcv.spans()}
        assert set(spans) == {"order-1", "order-3"}, spans  # order-2 is not sampled
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
        # The dead letter's traceparent names the lease's span, in its trace.
        dl = []
        wait_for(lambda: dl.extend(sc.fetch(unique("g-otel-dl"), dlt, max=10, wait_ms=1000))
                 or dl, 60, 0.1, "the dead letter")
        assert headers(dl[0])["traceparent"] == f"00-{c['traceId']}-{c['spanId']}-01"
        # Redriven, it keeps that parent: the trace goes on from ksidecar's span.
        assert redrive(sc, group)["moved"] == 1
        back = []
        reader = unique("g-otel-back")

        def read_back():  # acking each: the redriven record's key waits for the one before
            recs = sc.fetch(reader, topic, max=10, wait_ms=1000)
            if recs:
                sc.ack(reader, [r["ack_id"] for r in recs])
            back.extend(r for r in recs if "ksidecar.redriven" in headers(r))
            return back

        wait_for(read_back, 60, 0.1, "the redriven record")
        assert headers(back[0])["traceparent"] == headers(dl[0])["traceparent"]
        text = scrape(sc)
        assert val(text, "ksidecar_otel_spans_exported_total") >= 2
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
