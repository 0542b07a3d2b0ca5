"""One trace through Kafka, ksidecar and the service, read back from a real Jaeger
(tests/tracing/jaeger.sh: v1.75.0 from the Go module proxy, receiving OTLP/HTTP): a producer
span made with the opentelemetry-sdk for Python injects its context into the record's headers;
ksidecar delivers the record over push, HTTP and gRPC to an app that continues the trace from
what it got (the push request's traceparent header, or the record's headers) and exports its
own span; ksidecar exports its receive span and its lease's process span. Jaeger's query API
then has the producer's span, ksidecar's two and the app's in one trace, each a child of the
producer's, the process span linking the receive span, with the messaging attributes. The Jaeger build is bounded; only when it cannot finish does
the test skip, saying so."""
import json
import os
import pathlib
import subprocess
import tempfile
import urllib.request

import pytest

from conftest import create_topic, unique, wait_for
from grpc_support import consumer_pb2, start_grpc
from test_push import App, push_args

otel = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import propagate, trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402

JAEGER_SH = pathlib.Path(__file__).resolve().parents[1] / "tracing" / "jaeger.sh"


@pytest.fixture(scope="module")
def jaeger():
    """(OTLP/HTTP base url, query API base url): the running one jaeger.sh run set, or one
    started here (built first when the cache has none)."""
    if os.environ.get("KSIDECAR_TEST_JAEGER_QUERY"):
        yield os.environ["KSIDECAR_TEST_OTLP"], os.environ["KSIDECAR_TEST_JAEGER_QUERY"]
        return
    d = tempfile.mkdtemp(prefix="jaeger-")
    p = subprocess.run([str(JAEGER_SH), "start", d], capture_output=True, text=True,
                       timeout=2700)
    if p.returncode != 0:
        pytest.skip(f"no Jaeger to test against: {p.stderr.strip()[-500:]}")
    otlp, query = p.stdout.split()
    try:
        yield f"http://127.0.0.1:{otlp}", f"http://127.0.0.1:{query}"
    finally:
        subprocess.run([str(JAEGER_SH), "stop", d], timeout=60)


def provider(otlp, service):
    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp}/v1/traces")))
    return tp


def jaeger_trace(query, trace_id):
    try:
        with urllib.request.urlopen(f"{query}/api/traces/{trace_id}", timeout=10) as r:
            data = json.loads(r.read())["data"]
    except urllib.error.HTTPError:
        return None
    return data[0] if data else None


def produce_in_trace(sc, topic, tracer, value):
    """Produces one record inside a producer span; returns that span's context."""
    with tracer.start_as_current_span(f"send {topic}", kind=trace.SpanKind.PRODUCER) as span:
        carrier = {}
        propagate.inject(carrier)
        hdrs = [{"key": k, "value": v} for k, v in carrier.items()]
        st, body = sc.post(f"/v1/topics/{topic}/records",
                           {"records": [{"key": "order-7", "value": value, "headers": hdrs}]})
        assert st == 200 and "offset" in body["results"][0], body
        return span.get_span_context()


def app_span(tracer, carrier, name):
    ctx = propagate.extract(carrier)
    with tracer.start_as_current_span(name, context=ctx, kind=trace.SpanKind.CONSUMER):
        pass


def check_trace(query, producer_ctx, group, topic, app_name, transport):
    tid = format(producer_ctx.trace_id, "032x")
    pid = format(producer_ctx.span_id, "016x")
    got = {}

    def complete():
        t = jaeger_trace(query, tid)
        if not t:
            return False
        services = {k: v["serviceName"] for k, v in t["processes"].items()}
        got["spans"] = {(services[s["processID"]], s["operationName"]): s for s in t["spans"]}
        return {("shop", f"send {topic}"), ("ksidecar-under-test", f"receive {topic}"),
                ("ksidecar-under-test", f"process {topic}"), ("app", app_name)} <= set(got["spans"])

    wait_for(complete, 60, 0.5, f"the trace {tid} with three services in Jaeger")
    spans = got["spans"]
    prod = spans[("shop", f"send {topic}")]
    ks = spans[("ksidecar-under-test", f"process {topic}")]
    rcv = spans[("ksidecar-under-test", f"receive {topic}")]
    app = spans[("app", app_name)]
    assert prod["spanID"] == pid
    for s in (rcv, ks, app):  # each continues the producer's span
        assert s["traceID"] == tid
        assert [(r["refType"], r["spanID"]) for r in s["references"]
                if r["refType"] == "CHILD_OF"] == [("CHILD_OF", pid)], s
    # The lease's span links its delivery's receive span (a link: FOLLOWS_FROM in Jaeger).
    assert ("FOLLOWS_FROM", rcv["spanID"]) in [(r["refType"], r["spanID"])
                                               for r in ks["references"]], ks["references"]
    rtags = {t["key"]: t["value"] for t in rcv["tags"]}
    assert rtags["ksidecar.transport"] == transport and rtags["span.kind"] == "consumer", rtags
    assert rtags["messaging.operation.type"] == "receive"
    assert rtags["messaging.kafka.message.key"] == "order-7"
    assert rcv["startTime"] + rcv["duration"] <= ks["startTime"] + 2000  # microseconds
    tags = {t["key"]: t["value"] for t in ks["tags"]}
    assert tags["messaging.system"] == "kafka" and tags["messaging.destination.name"] == topic
    assert tags["messaging.consumer.group.name"] == group
    assert tags["messaging.kafka.message.key"] == "order-7"
    assert str(tags["messaging.destination.partition.id"]) == "0"
    assert int(tags["messaging.kafka.offset"]) >= 0 and int(tags["ksidecar.attempt"]) == 1
    assert [lg["fields"] for lg in ks["logs"]] and any(
        f["value"] == "ack" for lg in ks["logs"] for f in lg["fields"]), ks["logs"]
    # In order: the producer's span starts first, ksidecar's lease ends after the app's span.
    assert prod["startTime"] <= ks["startTime"]
    assert ks["startTime"] + ks["duration"] >= app["startTime"] + app["duration"]


def test_one_trace_from_the_producer_through_ksidecar_into_the_app(bootstrap, sidecars, jaeger):
    otlp, query = jaeger
    shop, app_tp = provider(otlp, "shop"), provider(otlp, "app")
    tracer, app_tracer = shop.get_tracer("shop"), app_tp.get_tracer("app")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp, "OTEL_SERVICE_NAME": "ksidecar-under-test",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    try:
        # Push: the app continues from the request's own traceparent header.
        topic, group = unique("jg-push"), unique("g-jg-push")
        create_topic(bootstrap, topic, 1)

        def decide(rec):
            app_span(app_tracer, dict(rec["http"]), "handle pushed")
            return 200, {}, b""

        app = App(decide)
        try:
            sc = start_grpc(sidecars, push_args(group, topic, app.url, concurrency=1), env=env)
            ctx = produce_in_trace(sc, topic, tracer, "pushed")
            wait_for(lambda: app.entries(), 60, 0.1, "the push")
            check_trace(query, ctx, group, topic, "handle pushed", "push")
        finally:
            app.close()
        # HTTP fetch: from the record's headers.
        topic, group = unique("jg-http"), unique("g-jg-http")
        create_topic(bootstrap, topic, 1)
        ctx = produce_in_trace(sc, topic, tracer, "fetched")
        recs = []
        wait_for(lambda: recs.extend(sc.fetch(group, topic, max=1, wait_ms=1000)) or recs, 60,
                 0.1, "the HTTP fetch")
        app_span(app_tracer, {h["key"]: h["value"] for h in recs[0]["headers"]}, "handle fetched")
        assert sc.ack(group, [recs[0]["ack_id"]])[0] == 200
        check_trace(query, ctx, group, topic, "handle fetched", "http")
        # gRPC fetch: from the record's headers.
        topic, group = unique("jg-grpc"), unique("g-jg-grpc")
        create_topic(bootstrap, topic, 1)
        ctx = produce_in_trace(sc, topic, tracer, "grpc")
        grecs = []

        def grpc_fetch():
            req = consumer_pb2.FetchRequest(group=group, topics=[topic], max=1, wait_ms=1000)
            grecs.extend(sc.consumer.Fetch(req, timeout=30).records)
            return grecs

        wait_for(grpc_fetch, 60, 0.1, "the gRPC fetch")
        app_span(app_tracer, {h.key: h.value.decode() for h in grecs[0].headers}, "handle grpc")
        sc.consumer.Ack(consumer_pb2.AckRequest(group=group, ack_ids=[grecs[0].ack_id]),
                        timeout=30)
        check_trace(query, ctx, group, topic, "handle grpc", "grpc")
        assert sc.stop() == 0
    finally:
        shop.shutdown()
        app_tp.shutdown()
