"""Produce with a schema through the real binary: JSON values given with value_schema_id, or
value_subject and a version, are written by ksidecar in Confluent's wire format, Avro and JSON
Schema, against a real registry (Apicurio, tests/registry/registry.sh) and a real broker
(tests/kafka/kafka.sh), over HTTP and gRPC; confluent-kafka's own deserializers read back what
was given. A value that does not fit is refused for its record, naming the field, while the
others are written; an unknown schema and an unreachable registry are the record's errors.

Run: tests/registry/registry.sh run tests/kafka/kafka.sh run python3 -m pytest -q \
       -p no:cacheprovider tests/registry/test_registry_produce.py"""

import copy
import json
import os
import pathlib
import struct
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
from conftest import bootstrap, sidecars, create_topic, free_port, unique  # noqa: E402,F401
from test_registry_avro import ORDER_V1, ORDERS, as_json_value  # noqa: E402

REGISTRY = os.environ.get("KSIDECAR_TEST_REGISTRY")
if not REGISTRY:
    pytest.fail("KSIDECAR_TEST_REGISTRY is not set: run under tests/registry/registry.sh run",
                pytrace=False)

JSON_SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "P",
               "type": "object", "properties": {"n": {"type": "integer"},
                                                "s": {"type": "string"}}}


@pytest.fixture(scope="module")
def client():
    return SchemaRegistryClient({"url": REGISTRY, "timeout": 20})


def as_json(order):
    """An Order as JSON takes it: bytes and fixed as a string of one code point a byte."""
    o = dict(order)
    for f in ("blob", "hash"):
        o[f] = o[f].decode("latin-1")
    return o


def register(client, subject, schema, kind="AVRO"):
    return client.register_schema(subject, Schema(json.dumps(schema), kind))


def read_back(bootstrap, topic, n, field=MessageField.VALUE):
    """The first n records of topic as confluent-kafka's consumer gets them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("read"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    try:
        while len(got) < n:
            m = c.poll(30)
            assert m is not None, f"only {len(got)} of {n} records came"
            assert m.error() is None, m.error()
            got.append(m)
    finally:
        c.close()
    return got


def stopped_clean(sc):
    """Stops sc and checks it exits 0 (an ASan binary's leak report fails it)."""
    assert sc.stop() == 0, sc.logs()


def produce_http(sc, topic, records):
    st, body = sc.post(f"/v1/topics/{topic}/records", {"records": records})
    assert st == 200, (st, body)
    return body["results"]


def test_avro_by_id_and_by_subject_latest(bootstrap, sidecars, client):
    topic = unique("pavro")
    create_topic(bootstrap, topic, 1)
    sid = register(client, f"{topic}-value", ORDER_V1)
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    recs = [{"value": as_json(o), "value_schema_id": sid, "partition": 0} for o in ORDERS]
    recs += [{"value": as_json(o), "value_subject": f"{topic}-value", "partition": 0}
             for o in ORDERS]
    recs += [{"value": as_json(ORDERS[0]), "value_subject": f"{topic}-value",
              "value_schema_version": 1, "key": "k", "partition": 0}]
    res = produce_http(sc, topic, recs)
    assert all("error" not in r for r in res), res
    ctx = SerializationContext(topic, MessageField.VALUE)
    de = AvroDeserializer(client)
    msgs = read_back(bootstrap, topic, len(recs))
    for m, r in zip(msgs, recs):
        assert m.value()[0] == 0 and int.from_bytes(m.value()[1:5], "big") == sid
        want = dict(next(o for o in ORDERS if as_json(o) == r["value"]))
        want["ratio"] = struct.unpack("<f", struct.pack("<f", want["ratio"]))[0]  # a float
        assert as_json_value(de(m.value(), ctx)) == as_json_value(want)
    assert msgs[-1].key() == b"k"
    stopped_clean(sc)


def test_avro_refusals_name_the_field(bootstrap, sidecars, client):
    topic = unique("pbad")
    create_topic(bootstrap, topic, 1)
    sid = register(client, f"{topic}-value", ORDER_V1)
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    good = as_json(ORDERS[0])
    wrong_type = copy.deepcopy(good)
    wrong_type["qty"] = "many"
    missing = copy.deepcopy(good)
    del missing["note"]
    bad_enum = copy.deepcopy(good)
    bad_enum["customer"]["tier"] = "PLATINUM"
    recs = [{"value": v, "value_schema_id": sid, "partition": 0}
            for v in (wrong_type, good, missing, bad_enum)]
    recs.append({"value": good, "value_schema_id": 999999, "partition": 0})
    recs.append({"value": good, "value_subject": f"{topic}-nosuch", "partition": 0})
    res = produce_http(sc, topic, recs)
    assert res[0]["error"]["code"] == "INVALID_ARGUMENT"
    assert f'value does not fit schema {sid}: field "qty": "many"' in res[0]["error"]["message"]
    assert "offset" in res[1]
    assert 'field "note": missing' in res[2]["error"]["message"]
    assert ('field "customer.tier": "PLATINUM" is not a symbol of enum com.acme.Tier'
            in res[3]["error"]["message"]), res[3]
    assert res[4]["error"]["code"] == "NOT_FOUND"
    assert "schema id 999999" in res[4]["error"]["message"]
    assert res[5]["error"]["code"] == "NOT_FOUND"
    assert f'subject "{topic}-nosuch"' in res[5]["error"]["message"]
    # Only the one that fits was written.
    msgs = read_back(bootstrap, topic, 1)
    assert AvroDeserializer(client)(msgs[0].value(), SerializationContext(
        topic, MessageField.VALUE))["id"] == ORDERS[0]["id"]
    # A pick that is not well formed is the request's 400.
    for bad, words in (({"value_schema_id": "7"}, "value_schema_id must be an integer"),
                       ({"value_schema_version": 1}, "goes with records[0].value_subject"),
                       ({"value_subject": "x", "value_schema_version": "newest"},
                        "must be \"latest\" or a version"),
                       ({"value_schema_id": sid, "value_encoding": "base64"},
                        "value_encoding goes without a schema")):
        st, body = sc.post(f"/v1/topics/{topic}/records", {"records": [{"value": good, **bad}]})
        assert st == 400 and words in body["error"]["message"], (bad, body)
    stopped_clean(sc)


def test_json_schema_and_key(bootstrap, sidecars, client):
    topic = unique("pjs")
    create_topic(bootstrap, topic, 1)
    vid = register(client, f"{topic}-value", JSON_SCHEMA, "JSON")
    kid = register(client, f"{topic}-key", {"type": "string"})
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    vals = [{"n": 1, "s": "one"}, {"n": 2, "s": "caf\u00e9"}]
    recs = [{"value": v, "value_subject": f"{topic}-value", "value_schema_version": "latest",
             "key": f"k{i}", "key_schema_id": kid, "partition": 0} for i, v in enumerate(vals)]
    res = produce_http(sc, topic, recs)
    assert all("error" not in r for r in res), res
    msgs = read_back(bootstrap, topic, 2)
    de = JSONDeserializer(json.dumps(JSON_SCHEMA), schema_registry_client=client)
    kde = AvroDeserializer(client)
    for i, (m, v) in enumerate(zip(msgs, vals)):
        assert int.from_bytes(m.value()[1:5], "big") == vid
        assert de(m.value(), SerializationContext(topic, MessageField.VALUE)) == v
        assert kde(m.key(), SerializationContext(topic, MessageField.KEY)) == f"k{i}"
    stopped_clean(sc)


ORDER_JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "definitions": {"line": {"type": "object", "required": ["sku", "qty"],
                             "additionalProperties": False,
                             "properties": {"sku": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
                                            "qty": {"type": "integer", "minimum": 1}}}},
    "required": ["id", "items"],
    "properties": {"id": {"type": "integer"},
                   "tier": {"enum": ["GOLD", "SILVER"]},
                   "note": {"type": ["string", "null"], "maxLength": 5},
                   "items": {"type": "array", "minItems": 1,
                             "items": {"$ref": "#/definitions/line"}}}}


def test_json_schema_values_checked(bootstrap, sidecars, client):
    """A JSON Schema value that does not fit is refused for its record, naming where and why;
    those that fit are written, and confluent-kafka's JSONDeserializer (which checks them too)
    reads them back equal."""
    topic = unique("pjsv")
    create_topic(bootstrap, topic, 1)
    vid = register(client, f"{topic}-value", ORDER_JSON_SCHEMA, "JSON")
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    good = {"id": 7, "tier": "GOLD", "note": None,
            "items": [{"sku": "A-1", "qty": 1}, {"sku": "B-22", "qty": 3}]}
    good2 = {"id": 8, "note": "caf\u00e9", "items": [{"sku": "C-3", "qty": 10}]}
    bad = []
    for path, change in ((("items", 1, "qty"), 0), (("tier",), "PLATINUM"), (("id",), "7"),
                         (("items", 0, "sku"), "a1"), (("note",), "toolong"),
                         (("items", 0, "extra"), 1)):
        v = copy.deepcopy(good)
        o = v
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = change
        bad.append(v)
    missing = copy.deepcopy(good)
    del missing["items"][0]["sku"]
    bad.append(missing)
    bad.append(dict(good, items=[]))
    vals = [bad[0], good] + bad[1:] + [good2]
    recs = [{"value": v, "value_schema_id": vid, "partition": 0} for v in vals]
    res = produce_http(sc, topic, recs)
    msgs = [r.get("error", {}).get("message") for r in res]
    want = [f"value does not fit schema {vid}: /items/1/qty: 0 is less than minimum 1",
            None,
            f'value does not fit schema {vid}: /tier: "PLATINUM" is not one of enum '
            '["GOLD","SILVER"]',
            f'value does not fit schema {vid}: /id: "7" is not of type integer',
            f'value does not fit schema {vid}: /items/0/sku: "a1" does not match pattern '
            '"^[A-Z]+-[0-9]+$"',
            f"value does not fit schema {vid}: /note: a string of 7 characters, longer than "
            "maxLength 5",
            f"value does not fit schema {vid}: /items/0/extra: a property the schema does not "
            "name (additionalProperties is false)",
            f"value does not fit schema {vid}: /items/0/sku: missing (required)",
            f"value does not fit schema {vid}: /items: an array of 0 items, fewer than "
            "minItems 1",
            None]
    assert msgs == want, res
    assert all(r["error"]["code"] == "INVALID_ARGUMENT" for r, w in zip(res, want) if w)
    got = read_back(bootstrap, topic, 2)
    de = JSONDeserializer(json.dumps(ORDER_JSON_SCHEMA), schema_registry_client=client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    for m, v in zip(got, (good, good2)):
        assert m.value()[0] == 0 and int.from_bytes(m.value()[1:5], "big") == vid
        assert de(m.value(), ctx) == v
    stopped_clean(sc)


def test_registry_down(bootstrap, sidecars):
    topic = unique("pdown")
    create_topic(bootstrap, topic, 1)
    down = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    sc = sidecars(args=(f"--schema_registry.url={down}", "--schema_registry.timeout_ms=1000"))
    res = produce_http(sc, topic, [{"value": {"a": 1}, "value_schema_id": 5, "partition": 0},
                                   {"value": "plain", "partition": 0}])
    assert res[0]["error"]["code"] == "UNAVAILABLE"
    assert "schema_registry: schema id 5 could not be fetched" in res[0]["error"]["message"]
    assert "offset" in res[1]
    # Without a registry set, the same is refused saying so.
    sc2 = sidecars()
    res = produce_http(sc2, topic, [{"value": {"a": 1}, "value_schema_id": 5}])
    assert "no schema registry is set (schema_registry.url)" in res[0]["error"]["message"]
    stopped_clean(sc)
    stopped_clean(sc2)


def test_grpc_avro_and_refusals(bootstrap, sidecars, client):
    from grpc_support import producer_pb2 as P, start_grpc  # noqa: E402
    topic = unique("pgrpc")
    create_topic(bootstrap, topic, 1)
    sid = register(client, f"{topic}-value", ORDER_V1)
    sc = start_grpc(sidecars, args=(f"--schema_registry.url={REGISTRY}",))
    bad = copy.deepcopy(as_json(ORDERS[1]))
    bad["customer"]["tier"] = "PLATINUM"
    recs = [P.ProduceRecord(topic=topic, partition=0, has_partition=True,
                            value_json=json.dumps(as_json(o)), value_schema_id=sid)
            for o in ORDERS]
    recs.append(P.ProduceRecord(topic=topic, partition=0, has_partition=True,
                                value_json=json.dumps(bad), value_schema_id=sid))
    recs.append(P.ProduceRecord(topic=topic, partition=0, has_partition=True,
                                value_json=json.dumps(as_json(ORDERS[0])),
                                value_subject=f"{topic}-value", value_schema_version="latest",
                                key=b"last"))
    recs.append(P.ProduceRecord(topic=topic, partition=0, has_partition=True,
                                value_json="{}", value_schema_id=999998))
    resp = sc.producer.Produce(P.ProduceRequest(records=recs), timeout=60)
    res = list(resp.results)
    assert len(res) == len(recs)
    n = len(ORDERS)
    assert all(r.error == "" and r.code == "" for r in res[:n]), res
    assert res[n].code == "INVALID_ARGUMENT"
    assert ('field "customer.tier": "PLATINUM" is not a symbol of enum com.acme.Tier'
            in res[n].error), res[n]
    assert res[n + 1].error == ""
    assert res[n + 2].code == "NOT_FOUND" and "schema id 999998" in res[n + 2].error
    # Written in order, the refused one left out; read back with confluent-kafka.
    msgs = read_back(bootstrap, topic, n + 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    de = AvroDeserializer(client)
    for m, want in zip(msgs, ORDERS + [ORDERS[0]]):
        want = dict(want)
        want["ratio"] = struct.unpack("<f", struct.pack("<f", want["ratio"]))[0]
        assert as_json_value(de(m.value(), ctx)) == as_json_value(want)
    assert msgs[-1].key() == b"last"
    # A pick that is not well formed, or JSON that is not, fails the call.
    import grpc  # noqa: E402
    for rec, words in ((P.ProduceRecord(topic=topic, value_json="{", value_schema_id=sid),
                        "records[0].value_json is not JSON"),
                       (P.ProduceRecord(topic=topic, value_json="{}", value_subject="s",
                                        value_schema_version="v2"),
                        "must be \"latest\" or a version")):
        with pytest.raises(grpc.RpcError) as e:
            sc.producer.Produce(P.ProduceRequest(records=[rec]), timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert words in e.value.details()
    stopped_clean(sc)


def test_auto_register(bootstrap, sidecars, client):
    """A record given with its schema registers it under its subject only with
    schema_registry.auto_register; the id it gets is the one written, over HTTP and gRPC."""
    from grpc_support import producer_pb2 as P, start_grpc  # noqa: E402
    topic = unique("preg")
    create_topic(bootstrap, topic, 1)
    subject = f"{topic}-value"
    order = as_json(ORDERS[2])
    rec = {"value": order, "value_subject": subject, "value_schema": ORDER_V1, "partition": 0}
    # Off (the default): refused, saying which key turns it on; nothing registered.
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    res = produce_http(sc, topic, [rec])
    assert res[0]["error"]["code"] == "INVALID_ARGUMENT"
    assert "registering schemas is off (schema_registry.auto_register)" in \
        res[0]["error"]["message"]
    assert subject not in client.get_subjects()
    stopped_clean(sc)
    sc = start_grpc(sidecars, args=(f"--schema_registry.url={REGISTRY}",
                                    "--schema_registry.auto_register=true"))
    res = produce_http(sc, topic, [rec, dict(rec, value_schema=json.dumps(ORDER_V1))])
    assert all("error" not in r for r in res), res
    sid = client.get_latest_version(subject).schema_id
    resp = sc.producer.Produce(P.ProduceRequest(records=[P.ProduceRecord(
        topic=topic, partition=0, has_partition=True, value_json=json.dumps(order),
        value_subject=subject, value_schema=json.dumps(ORDER_V1))]), timeout=60)
    assert resp.results[0].error == "", resp
    # A schema the registry refuses (not Avro) is the record's error.
    res = produce_http(sc, topic, [dict(rec, value_schema={"type": "nonsense"})])
    assert res[0]["error"]["code"] == "INVALID_ARGUMENT", res
    assert "did not register the schema given for subject" in res[0]["error"]["message"]
    msgs = read_back(bootstrap, topic, 3)
    de = AvroDeserializer(client)
    want = dict(ORDERS[2])
    want["ratio"] = struct.unpack("<f", struct.pack("<f", want["ratio"]))[0]
    for m in msgs:
        assert int.from_bytes(m.value()[1:5], "big") == sid
        assert as_json_value(de(m.value(), SerializationContext(topic, MessageField.VALUE))) == \
            as_json_value(want)
    stopped_clean(sc)


def test_grpc_many_schemas_fetched_apart_write_each_record_once(bootstrap, sidecars, client):
    """A Produce naming schemas the cache lacks waits while the registry client fetches them, one
    request each; their answers come apart, some while a pass over the request runs. Each round
    (a new ksidecar, so a cold cache) must write every record once: no pass lost (the call would
    hang to its deadline) and none run twice (records written twice)."""
    from grpc_support import producer_pb2 as P, start_grpc  # noqa: E402
    topic = unique("pmany")
    create_topic(bootstrap, topic, 1)
    ids = [register(client, f"{topic}-s{i}-value",
                    {"type": "record", "name": f"R{i}", "fields": [{"name": "n", "type": "int"}]})
           for i in range(12)]
    rounds, written = 4, 0
    for r in range(rounds):
        sc = start_grpc(sidecars, args=(f"--schema_registry.url={REGISTRY}",))
        recs = [P.ProduceRecord(topic=topic, partition=0, has_partition=True,
                                value_json=json.dumps({"n": r * 100 + i}), value_schema_id=sid)
                for i, sid in enumerate(ids)]
        resp = sc.producer.Produce(P.ProduceRequest(records=recs), timeout=30)
        assert [x.error for x in resp.results] == [""] * len(ids), resp
        written += len(ids)
        stopped_clean(sc)
    msgs = read_back(bootstrap, topic, written)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("end")})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    assert hi - lo == written, f"{hi - lo} records in the topic for {written} produced"
    got = sorted(zz(m.value()[5:]) for m in msgs)
    assert got == sorted(r * 100 + i for r in range(rounds) for i in range(len(ids)))


def zz(b):
    """An Avro int (a zigzag varint) from b."""
    v, shift = 0, 0
    for byte in b:
        v |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return (v >> 1) ^ -(v & 1)
