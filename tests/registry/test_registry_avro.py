"""The schema registry client and the Avro decoder against a real registry (Apicurio's ccompat
API, started by tests/registry/registry.sh run): schemas registered over HTTP and by
confluent-kafka's AvroSerializer are fetched by id, and what the decoder makes of the
serializer's bytes equals what confluent-kafka's AvroDeserializer returns.

Needs KSIDECAR_TEST_REGISTRY (registry.sh sets it) and KSIDECAR_TEST_KSREGISTRY (the
tests/tools/ksregistry binary; default build/ksregistry)."""

import json
import os
import subprocess

import pytest
import requests
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

REGISTRY = os.environ.get("KSIDECAR_TEST_REGISTRY")
TOOL = os.environ.get(
    "KSIDECAR_TEST_KSREGISTRY",
    os.path.join(os.path.dirname(__file__), "..", "..", "build", "ksregistry"))

if not REGISTRY:
    pytest.fail("KSIDECAR_TEST_REGISTRY is not set: run under tests/registry/registry.sh run",
                pytrace=False)

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "paid", "type": "boolean"},
        {"name": "note", "type": "string"},
        {"name": "maybe", "type": ["null", "string"]},
        {"name": "either", "type": ["int", "string", {"type": "array", "items": "long"}]},
        {"name": "customer", "type": {
            "type": "record", "name": "Customer", "fields": [
                {"name": "name", "type": "string"},
                {"name": "tier", "type": ["null", {
                    "type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}]}]}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [
                {"name": "sku", "type": "string"}, {"name": "n", "type": "int"}]}}},
        {"name": "tags", "type": {"type": "map", "values": "long"}},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "SHIPPED", "DONE"]}},
        {"name": "blob", "type": "bytes"},
        {"name": "hash", "type": {"type": "fixed", "name": "H4", "size": 4}},
    ],
}

ORDERS = [
    {"id": 9007199254740993, "qty": -42, "price": 19.99, "ratio": 0.1, "paid": True,
     "note": "caf\u00e9 \"quoted\"\n\U0001f375", "maybe": "yes", "either": 7,
     "customer": {"name": "Ada", "tier": "SILVER"},
     "lines": [{"sku": "A-1", "n": 1}, {"sku": "B-2", "n": 2}],
     "tags": {"a": 1, "b\u00e9": -2}, "status": "DONE",
     "blob": b"\x00a\"\\\x7f\x80\xff", "hash": b"\xde\xad\x01 "},
    {"id": -(2 ** 63), "qty": 2 ** 31 - 1, "price": 1e300, "ratio": -0.0, "paid": False,
     "note": "", "maybe": None, "either": [0, 10 ** 12, -1],
     "customer": {"name": "Bob", "tier": None}, "lines": [], "tags": {}, "status": "NEW",
     "blob": b"", "hash": b"abcd"},
    {"id": 1, "qty": 0, "price": -2.5, "ratio": 3.25, "paid": True, "note": "x",
     "maybe": None, "either": "text", "customer": {"name": "", "tier": "GOLD"},
     "lines": [{"sku": "s", "n": -1}], "tags": {"k": 2 ** 62}, "status": "SHIPPED",
     "blob": bytes(range(256)), "hash": b"\x00\x00\x00\x00"},
]


def two_versions(client, ctx):
    """A record written with version 1 of a schema, then one with version 2 (a field added)."""
    v1 = {"type": "record", "name": "E", "fields": [{"name": "a", "type": "int"}]}
    v2 = {"type": "record", "name": "E", "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": "none"}]}
    old = AvroSerializer(client, json.dumps(v1))({"a": 1}, ctx)
    new = AvroSerializer(client, json.dumps(v2))({"a": 2, "b": "two"}, ctx)
    return old, new


def ksregistry(*args, data=None):
    return subprocess.run([TOOL, REGISTRY, *args], input=data, capture_output=True, timeout=30)


def as_json_value(v):
    """A deserialized value as the decoder's JSON has it: bytes and fixed as one code point per
    byte."""
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, dict):
        return {k: as_json_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [as_json_value(x) for x in v]
    return v


@pytest.fixture(scope="module")
def client():
    return SchemaRegistryClient({"url": REGISTRY, "timeout": 20})


def test_registered_over_http_is_fetched_by_id():
    schema = {"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "int"}]}
    r = requests.post(f"{REGISTRY}/subjects/ping-value/versions",
                      headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
                      data=json.dumps({"schema": json.dumps(schema)}), timeout=10)
    assert r.status_code == 200, r.text
    sid = r.json()["id"]
    out = ksregistry("get", str(sid))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["id"] == sid
    assert got["type"] == "AVRO"
    assert json.loads(got["schema"]) == schema


def test_serializer_bytes_decode_as_the_deserializer_reads_them(client):
    ctx = SerializationContext("orders", MessageField.VALUE)
    ser = AvroSerializer(client, json.dumps(ORDER_V1), conf={"auto.register.schemas": True})
    de = AvroDeserializer(client)
    for order in ORDERS:
        data = ser(order, ctx)
        want = as_json_value(de(data, ctx))
        out = ksregistry("decode", "plain", data=data)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == want
        # Avro's own JSON encoding: the same but for unions, {"type": value} unless null.
        out = ksregistry("decode", data=data)
        assert out.returncode == 0, out.stderr
        avro = json.loads(out.stdout)
        assert avro["maybe"] == (None if order["maybe"] is None else {"string": order["maybe"]})
        branch = {int: "int", str: "string", list: "array"}[type(order["either"])]
        assert avro["either"] == {branch: want["either"]}
        tier = order["customer"]["tier"]
        assert avro["customer"]["tier"] == (None if tier is None else {"com.acme.Tier": tier})


def test_records_of_two_versions(client):
    """A record written with version 1 still decodes after version 2 is registered: each
    names its own writer's schema."""
    ctx = SerializationContext("evolving", MessageField.VALUE)
    old, new = two_versions(client, ctx)
    assert old[1:5] != new[1:5]
    assert json.loads(ksregistry("decode", data=old).stdout) == {"a": 1}
    assert json.loads(ksregistry("decode", data=new).stdout) == {"a": 2, "b": "two"}


def test_unknown_id_and_corrupt_bytes(client):
    out = ksregistry("decode", data=b"\x00" + (987654).to_bytes(4, "big") + b"\x02")
    assert out.returncode == 1
    assert b"schema 987654: unknown" in out.stderr
    ctx = SerializationContext("orders", MessageField.VALUE)
    data = AvroSerializer(client, json.dumps(ORDER_V1))(ORDERS[0], ctx)
    out = ksregistry("decode", data=data[:-3])
    assert out.returncode == 1
    assert b"at byte" in out.stderr
    out = ksregistry("decode", data=b"\x01" + data[1:])
    assert out.returncode == 1
    assert b"first byte 0x01" in out.stderr
