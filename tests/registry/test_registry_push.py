"""Push delivery of schema-aware records through the real binary: Avro values written by
confluent-kafka's AvroSerializer against a real registry (Apicurio) to a real broker, pushed by
static groups with value_format avro_plain to an HTTP app of the test's own. One record a
request: the body is the decoded JSON (application/json) with ksidecar-value-schema-id and,
with CloudEvents, ce-dataschema naming the schema in the registry; batches: each record's
value is the JSON. Each must equal what AvroDeserializer returns.

Run: tests/registry/registry.sh run tests/kafka/kafka.sh run python3 -m pytest -q \
       -p no:cacheprovider tests/registry/test_registry_push.py"""

import json
import os
import pathlib
import sys

import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
from conftest import Recorder, bootstrap, sidecars, create_topic, unique, wait_for  # noqa: E402,F401
from test_registry_avro import ORDER_V1, ORDERS, as_json_value, client  # noqa: E402,F401
from test_registry_records import write  # noqa: E402

REGISTRY = os.environ.get("KSIDECAR_TEST_REGISTRY")
if not REGISTRY:
    pytest.fail("KSIDECAR_TEST_REGISTRY is not set: run under tests/registry/registry.sh run",
                pytrace=False)


@pytest.fixture
def app():
    a = Recorder()
    yield a
    a.close()


def test_push_carries_the_decoded_json(bootstrap, sidecars, client, app):
    topic = unique("avro-push")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = [AvroSerializer(client, json.dumps(ORDER_V1))(o, ctx) for o in ORDERS]
    write(bootstrap, topic, data)
    de = AvroDeserializer(client)
    want = [as_json_value(de(d, ctx)) for d in data]
    sid = int.from_bytes(data[0][1:5], "big")
    one, many = unique("push1"), unique("pushn")
    groups = [{"name": one, "topics": [topic], "value_format": "avro_plain",
               "push": {"url": app.url + "/in/one", "batch": 1, "cloudevents": True}},
              {"name": many, "topics": [topic], "value_format": "avro_plain",
               "push": {"url": app.url + "/in/many", "batch": 50}}]
    sidecars(args=(f"--schema_registry.url={REGISTRY}", "--groups.static=" + json.dumps(groups)))

    def all_came():
        batched = sum(len(json.loads(b)) for _, b in app.requests("/in/many"))
        return len(app.requests("/in/one")) >= len(data) and batched >= len(data)

    wait_for(all_came, 60, 0.2, f"{len(data)} records pushed to each group")
    singles = sorted((({k.lower(): v for k, v in h.items()}, b) for h, b in app.requests("/in/one")),
                     key=lambda r: int(r[0]["ksidecar-offset"]))
    assert len(singles) == len(data)
    for (h, body), w in zip(singles, want):
        assert h["content-type"].startswith("application/json"), h
        assert json.loads(body) == w
        assert int(h["ksidecar-value-schema-id"]) == sid
        assert h["ce-dataschema"] == f"{REGISTRY}/schemas/ids/{sid}"
    recs = sorted((r for _, b in app.requests("/in/many") for r in json.loads(b)),
                  key=lambda r: r["offset"])
    assert [r["offset"] for r in recs] == list(range(len(data)))
    for r, w in zip(recs, want):
        assert r["value"] == w
        assert r["value_encoding"] == "json"
        assert r["value_format"] == "avro"
        assert r["value_schema_id"] == sid
        assert "value_decode_error" not in r
