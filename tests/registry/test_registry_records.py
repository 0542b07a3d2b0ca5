"""Schema-aware records through the real binary: Avro and JSON Schema values written by
confluent-kafka's serializers against a real registry (Apicurio, tests/registry/registry.sh)
to a real broker (tests/kafka/kafka.sh), fetched over HTTP as JSON; what ksidecar returns
equals what confluent-kafka's deserializer returns. A registry that goes away mid-stream holds
the records (stall reason schema_registry) and delivery resumes by itself; an unknown id or
corrupt bytes come as bytes with value_decode_error, or go to the dead-letter topic.

Run: tests/registry/registry.sh run tests/kafka/kafka.sh run python3 -m pytest -q \
       -p no:cacheprovider tests/registry/test_registry_records.py"""

import json
import os
import pathlib
import socket
import sys
import threading
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
from conftest import bootstrap, sidecars, create_topic, unique, wait_for  # noqa: E402,F401
from test_registry_avro import ORDER_V1, ORDERS, as_json_value, two_versions  # noqa: E402

REGISTRY = os.environ.get("KSIDECAR_TEST_REGISTRY")
if not REGISTRY:
    pytest.fail("KSIDECAR_TEST_REGISTRY is not set: run under tests/registry/registry.sh run",
                pytrace=False)

STALL_MS = 1500


@pytest.fixture(scope="module")
def client():
    return SchemaRegistryClient({"url": REGISTRY, "timeout": 20})


def write(bootstrap, topic, values, key=None):
    """Writes raw values (bytes) to partition 0 of topic."""
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, value=v, key=key, partition=0)
    assert p.flush(30) == 0


def fetch_n(sc, group, topic, n, query="", timeout=60):
    """Fetches and acks until n records came; returns them."""
    got = []

    def more():
        st, body = sc.get(f"/v1/groups/{group}/records?topic={topic}&max=100&wait_ms=1000"
                          f"{query}")
        assert st == 200, (st, body)
        got.extend(body["records"])
        if body["records"]:
            st, _ = sc.ack(group, [r["ack_id"] for r in body["records"]])
            assert st == 200
        return len(got) >= n

    wait_for(more, timeout, 0, f"{n} records of {topic}")
    return got


def curl(sc, path):
    """The body of GET path, as curl prints it."""
    with urllib.request.urlopen(sc.base + path, timeout=30) as r:
        return r.read().decode()


def test_avro_over_http_equals_the_deserializer(bootstrap, sidecars, client):
    topic, group = unique("avro"), unique("g")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = AvroSerializer(client, json.dumps(ORDER_V1))
    data = [ser(o, ctx) for o in ORDERS]
    write(bootstrap, topic, data)
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    de = AvroDeserializer(client)
    want = [as_json_value(de(d, ctx)) for d in data]
    recs = fetch_n(sc, group, topic, len(data), "&value_format=avro_plain")
    sid = int.from_bytes(data[0][1:5], "big")
    for r, w in zip(recs, want):
        assert r["value"] == w
        assert r["value_encoding"] == "json"
        assert r["value_format"] == "avro"
        assert r["value_schema_id"] == sid
        assert "value_decode_error" not in r
    # Avro's own JSON encoding (value_format=avro): unions as {"type": value}; the body as
    # curl shows it is JSON with the value an object.
    group2 = unique("g")
    body = json.loads(curl(sc, f"/v1/groups/{group2}/records?topic={topic}&max=10&wait_ms=5000"
                               "&value_format=avro"))
    recs = body["records"]
    assert [r["value"]["id"] for r in recs] == [o["id"] for o in ORDERS]
    for r, o in zip(recs, ORDERS):
        assert r["value"]["maybe"] == (None if o["maybe"] is None else {"string": o["maybe"]})
        assert r["value"]["note"] == o["note"]


def test_group_format_v1_after_v2_and_stream(bootstrap, sidecars, client):
    """group.value_format applies to a request naming none, the stream included; a record
    written with version 1 still decodes after version 2 is registered."""
    topic, group = unique("evolve"), unique("g")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    old, new = two_versions(client, ctx)
    assert old[1:5] != new[1:5]
    write(bootstrap, topic, [old, new])
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}", "--group.value_format=avro"))
    recs = fetch_n(sc, group, topic, 2)
    assert [r["value"] for r in recs] == [{"a": 1}, {"a": 2, "b": "two"}]
    assert [r["value_schema_id"] for r in recs] == [int.from_bytes(d[1:5], "big")
                                                    for d in (old, new)]
    # ?value_format=binary overrides the group's: the bytes, as before.
    recs = fetch_n(sc, unique("g"), topic, 2, "&value_format=binary&format=base64")
    assert all(r["value_encoding"] == "base64" and "value_format" not in r for r in recs)
    # The NDJSON stream shows the same JSON.
    req = urllib.request.Request(f"{sc.base}/v1/groups/{unique('g')}/stream?topic={topic}")
    lines = []
    with urllib.request.urlopen(req, timeout=30) as s:
        while len(lines) < 2:  # records; other lines are the stream's own (assignment)
            line = json.loads(s.readline())
            if "offset" in line:
                lines.append(line)
    assert [r["value"] for r in lines] == [{"a": 1}, {"a": 2, "b": "two"}]


def test_json_schema_values(bootstrap, sidecars, client):
    topic, group = unique("js"), unique("g")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "P",
                         "type": "object", "properties": {"n": {"type": "integer"},
                                                          "s": {"type": "string"}}})
    ser = JSONSerializer(schema, client)
    vals = [{"n": 1, "s": "caf\u00e9"}, {"n": -7, "s": ""}]
    data = [ser(v, ctx) for v in vals]
    write(bootstrap, topic, data + [data[0][:5] + b"{not json"])
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    recs = fetch_n(sc, group, topic, 3, "&value_format=auto")
    de = JSONDeserializer(schema)
    assert [r["value"] for r in recs[:2]] == [de(d, ctx) for d in data]
    assert all(r["value_format"] == "json_schema" for r in recs[:2])
    assert recs[2]["value_encoding"] == "text" and "not JSON" in recs[2]["value_decode_error"]


def test_unknown_id_and_corrupt_bytes(bootstrap, sidecars, client):
    topic, group = unique("bad"), unique("g")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = AvroSerializer(client, json.dumps(ORDER_V1))(ORDERS[0], ctx)
    unknown = b"\x00" + (987654).to_bytes(4, "big") + b"\x02"
    write(bootstrap, topic, [unknown, good[:-3], b"plain text", good])
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}", "--group.value_format=avro"))
    recs = fetch_n(sc, group, topic, 4)
    assert recs[0]["value_encoding"] == "text"  # the bytes as ?format= shows them
    assert recs[0]["value_schema_id"] == 987654
    assert "unknown schema id 987654" in recs[0]["value_decode_error"]
    assert "at byte" in recs[1]["value_decode_error"]
    assert recs[2]["value"] == "plain text" and "first byte" in recs[2]["value_decode_error"]
    assert recs[3]["value"]["id"] == ORDERS[0]["id"] and "value_decode_error" not in recs[3]


class Forwarder:
    """A TCP forwarder to the registry on a port of its own, that can go down (its port
    refuses connections) and come back on the same port."""

    def __init__(self, target):
        host, port = target.split("//")[1].split("/")[0].split(":")
        self.target = (host, int(port))
        self.path = "/" + target.split("//")[1].split("/", 1)[1]
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}{self.path}"
        self.lsock = None
        self.conns = []
        self.up()

    def up(self):
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", self.port))
        self.lsock.listen(16)
        threading.Thread(target=self._accept, args=(self.lsock,), daemon=True).start()

    def down(self):
        # shutdown first: a close alone leaves a socket another thread blocks on open.
        for c in [self.lsock] + self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.conns = []

    def _accept(self, ls):
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def part0(sc, group):
    st, body = sc.get(f"/v1/groups/{group}")
    assert st == 200, (st, body)
    return next((p for p in body["partitions"] if p["partition"] == 0), None)


def test_registry_down_mid_stream(bootstrap, sidecars, client):
    """The registry goes away with a schema not yet fetched: its records wait (nothing skipped,
    nothing shown undecoded), the stall reason says schema_registry, and delivery resumes by
    itself when the registry is back."""
    topic, group = unique("down"), unique("g")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    a = {"type": "record", "name": "A", "fields": [{"name": "n", "type": "int"}]}
    b = {"type": "record", "name": "B", "fields": [{"name": "s", "type": "string"}]}
    sa = AvroSerializer(client, json.dumps(a))
    sb = AvroSerializer(client, json.dumps(b), conf={"auto.register.schemas": True})
    fwd = Forwarder(REGISTRY)
    sc = sidecars(args=(f"--schema_registry.url={fwd.url}", "--schema_registry.timeout_ms=1000",
                        "--group.value_format=avro", f"--health.stall_ms={STALL_MS}"))
    write(bootstrap, topic, [sa({"n": i}, ctx) for i in range(5)])
    first = fetch_n(sc, group, topic, 5)
    assert [r["value"] for r in first] == [{"n": i} for i in range(5)]
    fwd.down()
    second = [sb({"s": f"b{i}"}, ctx) for i in range(5)] + [sa({"n": 5}, ctx)]
    write(bootstrap, topic, second)
    got = []

    def stalled():
        st, body = sc.get(f"/v1/groups/{group}/records?topic={topic}&max=100&wait_ms=200")
        assert st == 200
        got.extend(body["records"])
        p = part0(sc, group)
        return p if p and p["stalled"] else None

    p = wait_for(stalled, 6 * STALL_MS / 1000 + 20, 0.2, "schema_registry stall")
    assert p["stall_reason"] == "schema_registry", (p, got, sc.logs())
    assert got == [], got  # held, not delivered undecoded
    fwd.up()
    rest = fetch_n(sc, group, topic, 6, timeout=90)
    assert [r["value"] for r in rest] == [{"s": f"b{i}"} for i in range(5)] + [{"n": 5}]
    assert all("value_decode_error" not in r for r in rest)
    assert [r["offset"] for r in first + rest] == list(range(11))
    wait_for(lambda: not part0(sc, group)["stalled"], 30, 0.2, "stall cleared")
    fwd.down()


def test_dead_letter_mode(bootstrap, sidecars, client):
    """group.decode_errors=dead_letter: a value with an unknown schema id goes to the dead-letter
    topic at once; the good ones are delivered."""
    topic, dlq, group = unique("dl"), unique("dlq"), unique("g")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, dlq, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = AvroSerializer(client, json.dumps(ORDER_V1))(ORDERS[1], ctx)
    unknown = b"\x00" + (987655).to_bytes(4, "big") + b"\x02"
    write(bootstrap, topic, [good, unknown, good])
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}", "--group.value_format=avro",
                        "--group.decode_errors=dead_letter", f"--group.dead_letter_topic={dlq}"))
    recs = fetch_n(sc, group, topic, 2)
    assert [r["offset"] for r in recs] == [0, 2]
    assert all("value_decode_error" not in r for r in recs)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("check"),
                  "auto.offset.reset": "earliest"})
    c.subscribe([dlq])
    try:
        m = wait_for(lambda: (lambda m: m if m and not m.error() else None)(c.poll(1)), 60, 0,
                     "the dead letter")
    finally:
        c.close()
    assert m.value() == unknown


def test_grpc_fetch_and_subscribe_carry_the_json(bootstrap, sidecars, client):
    """gRPC: Record.value_decoded holds the JSON, its format and schema id beside the raw
    bytes, for a Fetch and a Subscribe stream that name value_format; a bad name is refused."""
    import grpc
    from grpc_support import SubscribeStream, consumer_pb2, open_msg, start_grpc

    topic = unique("grpc")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = AvroSerializer(client, json.dumps(ORDER_V1))
    data = [ser(o, ctx) for o in ORDERS]
    write(bootstrap, topic, data + [b"\x00" + (987656).to_bytes(4, "big") + b"\x02"])
    sc = start_grpc(sidecars, args=(f"--schema_registry.url={REGISTRY}",))
    de = AvroDeserializer(client)
    want = [as_json_value(de(d, ctx)) for d in data]
    got, group = [], unique("g")
    while len(got) < len(data) + 1:
        got += sc.consumer.Fetch(consumer_pb2.FetchRequest(
            group=group, topics=[topic], max=10, wait_ms=2000,
            value_format="avro_plain"), timeout=60).records
    for r, d, w in zip(got, data, want):
        assert r.value == d  # the raw bytes stay
        assert json.loads(r.value_decoded.json) == w
        assert r.value_decoded.format == "avro"
        assert r.value_decoded.schema_id == int.from_bytes(d[1:5], "big")
        assert not r.key_decoded.json and not r.HasField("key_decoded")
    bad = got[len(data)]
    assert bad.value_decoded.json == "" and bad.value_decoded.schema_id == 987656
    assert "unknown schema id 987656" in bad.value_decoded.decode_error
    with pytest.raises(grpc.RpcError) as e:
        sc.consumer.Fetch(consumer_pb2.FetchRequest(group="g", topics=[topic],
                                                    value_format="xml"), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "value_format" in e.value.details()
    msg = open_msg(unique("g"), [topic])
    msg.value_format = "avro"
    s = SubscribeStream(sc.consumer, msg, timeout=60)
    try:
        recs = []
        while len(recs) < len(data):
            item = s.get(30)
            assert item is not None, "no batch within 30 s"
            if item.HasField("batch"):
                recs += item.batch.records
        assert [json.loads(r.value_decoded.json)["id"] for r in recs[:len(data)]] == \
            [o["id"] for o in ORDERS]
    finally:
        s.cancel()
