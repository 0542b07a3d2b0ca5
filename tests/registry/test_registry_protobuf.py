"""Protobuf through the schema registry, through the real binary: values written by
confluent-kafka's ProtobufSerializer against a real registry (Apicurio, which serves the
schema as the serializer registered it: a base64 FileDescriptorProto) to a real broker, read
over HTTP with value_format=protobuf, equal json_format.MessageToDict of what the library's
ProtobufDeserializer returns: every scalar type, nested messages by their indexes, enums, maps,
oneof. Produce through ksidecar with value_schema_id reads back with ProtobufDeserializer; a
value that does not fit is refused naming the field.

Run: tests/registry/registry.sh run tests/kafka/kafka.sh run python3 -m pytest -q \
       -p no:cacheprovider tests/registry/test_registry_protobuf.py"""

import importlib
import os
import pathlib
import subprocess
import sys

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import json_format

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
from conftest import bootstrap, sidecars, create_topic, unique  # noqa: E402,F401
from test_registry_produce import produce_http, read_back, stopped_clean  # noqa: E402
from test_registry_records import fetch_n, write  # noqa: E402

REGISTRY = os.environ.get("KSIDECAR_TEST_REGISTRY")
if not REGISTRY:
    pytest.fail("KSIDECAR_TEST_REGISTRY is not set: run under tests/registry/registry.sh run",
                pytrace=False)

SHOP_PROTO = """
syntax = "proto3";
package kstest.shop;

// An order: every scalar type, nested messages, an enum, a map, a oneof.
message Order {
  double price = 1; float ratio = 2; int64 id = 3; uint64 big = 4; int32 qty = 5;
  fixed64 f64 = 6; fixed32 f32 = 7; bool paid = 8; string note = 9; bytes blob = 10;
  uint32 u32 = 11; Status status = 12; sfixed32 sf32 = 13; sfixed64 sf64 = 14;
  sint32 si32 = 15; sint64 si64 = 16;
  repeated int64 counts = 17;
  repeated string tags = 18;
  repeated Line lines = 19;
  map<string, Line> by_sku = 20;
  map<int32, string> names = 21;
  oneof pay { string card = 22; int64 voucher = 23; }
  optional int32 maybe = 24;
  Customer customer = 25;
  repeated double scores = 26 [packed = false];
  message Line { string sku = 1; int32 n = 2; Status status = 3; }
  message Customer { string name = 1; Tier tier = 2; enum Tier { TIER_NONE = 0; GOLD = 1; } }
}
enum Status { STATUS_NONE = 0; NEW = 1; SHIPPED = 2; }
message Other { string text = 1; }
"""


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """The module protoc --python_out makes of SHOP_PROTO."""
    d = tmp_path_factory.mktemp("proto")
    (d / "kstest_shop.proto").write_text(SHOP_PROTO)
    subprocess.run(["protoc", f"-I{d}", f"--python_out={d}", "kstest_shop.proto"], check=True)
    sys.path.insert(0, str(d))
    return importlib.import_module("kstest_shop_pb2")


@pytest.fixture(scope="module")
def client():
    return SchemaRegistryClient({"url": REGISTRY, "timeout": 20})


def orders(shop):
    O = shop.Order
    full = O(price=12.5, ratio=0.1, id=-(2**62), big=2**64 - 1, qty=-3, f64=2**63, f32=7,
             paid=True, note="caf\u00e9 \u2713", blob=b"\x00\x01\xfe\xff", u32=2**32 - 1,
             status=shop.SHIPPED, sf32=-5, sf64=-(2**40), si32=-100, si64=-(2**50),
             counts=[1, -1, 2**40], tags=["a", "", "c"], card="4111",
             lines=[O.Line(sku="A", n=1, status=shop.NEW), O.Line()],
             customer=O.Customer(name="Ann", tier=O.Customer.GOLD), maybe=0,
             scores=[1.5, float("inf"), float("nan")])
    full.by_sku["x"].CopyFrom(O.Line(sku="x", n=2))
    full.names[-7] = "minus seven"
    full.names[0] = ""
    return [full, O(), O(voucher=0, qty=1), O(note="only", ratio=float("-inf"), price=-0.0)]


def as_dict(msg):
    d = json_format.MessageToDict(msg)
    return _nan_free(d)


def _nan_free(v):
    """NaN as a string: MessageToDict gives the float, JSON's "NaN" never equals it."""
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, dict):
        return {k: _nan_free(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_nan_free(x) for x in v]
    return v


def test_serializer_records_over_http(bootstrap, sidecars, client, shop):
    topic, group = unique("proto"), unique("g")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    ser = ProtobufSerializer(shop.Order, client, conf)
    data = [ser(o, ctx) for o in orders(shop)]
    # A nested message and the second top-level one, each under a subject of its own: their
    # message indexes name them (Line's counts the map entries before it).
    line_ctx = SerializationContext(topic + "-line", MessageField.VALUE)
    other_ctx = SerializationContext(topic + "-other", MessageField.VALUE)
    line = ProtobufSerializer(shop.Order.Line, client, conf)(
        shop.Order.Line(sku="L", n=-2, status=shop.NEW), line_ctx)
    other = ProtobufSerializer(shop.Other, client, conf)(shop.Other(text="o"), other_ctx)
    write(bootstrap, topic, data + [line, other])
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    de = ProtobufDeserializer(shop.Order, conf)
    want = [as_dict(de(d, ctx)) for d in data]
    want.append(as_dict(ProtobufDeserializer(shop.Order.Line, conf)(line, line_ctx)))
    want.append(as_dict(ProtobufDeserializer(shop.Other, conf)(other, other_ctx)))
    assert want[0]["names"] == {"-7": "minus seven", "0": ""}  # the reference is what we think
    recs = fetch_n(sc, group, topic, len(want), "&value_format=protobuf")
    for r, w, d in zip(recs, want, data + [line, other]):
        assert "value_decode_error" not in r, r
        assert r["value"] == w
        assert r["value_encoding"] == "json"
        assert r["value_format"] == "protobuf"
        assert r["value_schema_id"] == int.from_bytes(d[1:5], "big")
    # auto takes Protobuf too; avro names the mismatch; corrupt bytes are the record's error.
    corrupt = data[0][:5] + b"\x00\x0a\x7f\x01"
    write(bootstrap, topic, [corrupt])
    recs = fetch_n(sc, unique("g"), topic, len(want) + 1, "&value_format=auto")
    assert [r["value"] for r in recs[:len(want)]] == want
    assert recs[-1]["value_encoding"] != "json"  # the bytes, as auto shows them
    assert "runs past the end" in recs[-1]["value_decode_error"], recs[-1]
    recs = fetch_n(sc, unique("g"), topic, 1, "&value_format=avro")
    assert "is PROTOBUF, not AVRO" in recs[0]["value_decode_error"]
    stopped_clean(sc)


def test_produce_with_schema_id(bootstrap, sidecars, client, shop):
    """JSON values (MessageToDict's, and original field names) written by ksidecar with the
    serializer's schema id read back with ProtobufDeserializer; one that does not fit is refused
    naming the field while the others are written."""
    topic = unique("pproto")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    msgs = orders(shop)
    sid = int.from_bytes(ProtobufSerializer(shop.Order, client, conf)(msgs[0], ctx)[1:5], "big")
    values = [as_dict(m) for m in msgs]
    values.append({"by_sku": {"k": {"sku": "k", "status": 2}}, "lines": [{"n": "7"}],
                   "id": 5, "big": "18446744073709551615"})
    bad = [{"qty": "many"}, {"lines": [{}, {"n": 1.5}]}, {"status": "LOST"}, {"nope": 1}]
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    res = produce_http(sc, topic, [{"value": v, "value_schema_id": sid, "partition": 0}
                                   for v in values + bad])
    assert all("offset" in r for r in res[:len(values)]), res
    errs = [r["error"] for r in res[len(values):]]
    assert all(e["code"] == "INVALID_ARGUMENT" for e in errs), errs
    assert f'value does not fit schema {sid}: field "qty": "many" is not an integer' \
        in errs[0]["message"], errs[0]
    assert 'field "lines[1].n": 1.5 is not an integer' in errs[1]["message"], errs[1]
    assert '"LOST" is not a value of enum kstest.shop.Status' in errs[2]["message"], errs[2]
    assert 'field "nope"' in errs[3]["message"], errs[3]
    de = ProtobufDeserializer(shop.Order, conf)
    got = [as_dict(de(m.value(), ctx)) for m in read_back(bootstrap, topic, len(values))]
    assert got[:len(msgs)] == values[:len(msgs)]
    assert got[-1] == {"bySku": {"k": {"sku": "k", "status": "SHIPPED"}}, "lines": [{"n": 7}],
                       "id": "5", "big": "18446744073709551615"}
    stopped_clean(sc)
