"""The client libraries against a real registry: Avro and JSON Schema values written by
confluent-kafka's serializers (Apicurio, tests/registry/registry.sh; a real broker,
tests/kafka/kafka.sh) are consumed through the real binary by each library, Python in this
process (clients/python), Go and Node through their jsonlines examples
(clients/go/example/jsonlines, clients/node/examples/jsonlines.js); each one's decoded value
equals what confluent-kafka's deserializer returns, exactly (Avro longs to +-2^63 included:
Node's valueJson() has them as BigInt), and the record's bytes stay available. Then each
library produces the same full-range JSON values with a schema id or subject through ksidecar,
read back with confluent-kafka's AvroDeserializer.

Go and Node are skipped, saying so, only when their toolchain is missing (tests/clients/go.sh
and node.sh find it the same way).

Run: tests/registry/registry.sh run tests/kafka/kafka.sh run python3 -m pytest -q \
       -p no:cacheprovider tests/registry/test_registry_clients.py"""

import base64
import importlib.resources
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import threading

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
from conftest import bootstrap, sidecars, create_topic, unique  # noqa: E402,F401
from test_registry_avro import ORDER_V1, ORDERS, as_json_value  # noqa: E402
from test_registry_produce import JSON_SCHEMA, as_json, read_back, register  # noqa: E402
from test_registry_records import write  # noqa: E402

REGISTRY = os.environ.get("KSIDECAR_TEST_REGISTRY")
if not REGISTRY:
    pytest.fail("KSIDECAR_TEST_REGISTRY is not set: run under tests/registry/registry.sh run",
                pytrace=False)

ROOT = pathlib.Path(__file__).resolve().parents[2]
LANGS = ("python", "go", "node")


@pytest.fixture(scope="module")
def client():
    return SchemaRegistryClient({"url": REGISTRY, "timeout": 20})


@pytest.fixture(scope="module")
def pylib(tmp_path_factory):
    """clients/python's package, imported here: copied with the gRPC stubs its build generates
    (ksidecar.v1) beside it; pure Python (its C extension is not built)."""
    d = tmp_path_factory.mktemp("pylib")
    shutil.copytree(ROOT / "clients" / "python" / "ksidecar", d / "ksidecar")
    from grpc_tools import protoc
    wkt = importlib.resources.files("grpc_tools") / "_proto"
    args = ["protoc", f"-I{ROOT / 'proto'}", f"-I{wkt}", f"--python_out={d}",
            f"--grpc_python_out={d}", "ksidecar/v1/consumer.proto", "ksidecar/v1/producer.proto"]
    assert protoc.main(args) == 0, args
    (d / "ksidecar" / "v1" / "__init__.py").touch()
    sys.path.insert(0, str(d))
    # The gRPC tests' stubs (tests/integration/grpc_support.py) may have taken the name
    # ksidecar in this process: theirs stay as imported (the same generated messages).
    for name in [n for n in sys.modules if n == "ksidecar" or n.startswith("ksidecar.")]:
        del sys.modules[name]
    import ksidecar
    assert ksidecar.__file__.startswith(str(d)), ksidecar.__file__
    return ksidecar


@pytest.fixture(scope="module")
def gobin(tmp_path_factory):
    """The Go example built: a command line to run it with."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK)
                                else None)
    if not go:
        pytest.skip("no Go toolchain on PATH or in /usr/local/go: the Go library is not tested")
    out = tmp_path_factory.mktemp("go") / "jsonlines"
    r = subprocess.run([go, "build", "-o", str(out), "./example/jsonlines"],
                       cwd=ROOT / "clients" / "go", capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [str(out)]


@pytest.fixture(scope="module")
def nodebin():
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node or npm is not installed: the Node library is not tested")
    r = subprocess.run([ROOT / "tests" / "clients" / "node_env.sh"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return ["node", str(ROOT / "clients" / "node" / "examples" / "jsonlines.js")]


@pytest.fixture
def lang(request):
    """One library: a function consume(sc, group, topic, n, value_format) -> lines, a line a
    record as the examples print them ({offset, value: base64, value_schema_id, value_json}),
    and produce(sc, topic, values, schema id or subject)."""
    if request.param == "python":
        lib = request.getfixturevalue("pylib")
        return (lambda *a: py_consume(lib, *a)), (lambda *a: py_produce(lib, *a))
    cmd = request.getfixturevalue("gobin" if request.param == "go" else "nodebin")
    return ((lambda *a: run_consume(request.param, cmd, *a)),
            (lambda *a: run_produce(request.param, cmd, *a)))


def py_consume(lib, sc, group, topic, n, value_format):
    sub = lib.Subscriber(f"127.0.0.1:{sc.grpc_port}", group, [topic], value_format=value_format)
    timer = threading.Timer(60, sub.close)  # ends the loop below if the records do not come
    timer.start()
    lines = []
    try:
        for m in sub:
            lines.append({"offset": m.offset, "value": base64.b64encode(m.value).decode(),
                          "value_schema_id": m.value_schema_id, "value_json": m.value_json()})
            m.ack()
            if len(lines) == n:
                break
    finally:
        timer.cancel()
        sub.close()
    return lines


def py_produce(lib, sc, topic, values, schema):
    how = {"value_schema_id": schema} if isinstance(schema, int) else {"value_subject": schema}
    with lib.Publisher(f"127.0.0.1:{sc.grpc_port}") as pub:
        res = pub.produce([lib.Record(topic, v, partition=0, **how) for v in values])
    assert all(r.ok for r in res), res


def run_consume(name, cmd, sc, group, topic, n, value_format):
    target = f"127.0.0.1:{sc.grpc_port}"
    if name == "go":
        args = ["-target", target, "-group", group, "-topic", topic, "-n", str(n),
                "-value-format", value_format]
    else:
        args = ["consume", target, group, topic, str(n), value_format]
    r = subprocess.run(cmd + args, capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, f"{name}: {r.stderr}"
    # split, not splitlines: a value's text may hold U+0085 or U+2028, which it breaks at.
    return [json.loads(line) for line in r.stdout.split("\n") if line]


def run_produce(name, cmd, sc, topic, values, schema):
    target = f"127.0.0.1:{sc.grpc_port}"
    if name == "go":
        flag = "-value-schema-id" if isinstance(schema, int) else "-value-subject"
        args = ["-target", target, "-topic", topic, flag, str(schema)]
    else:
        args = ["produce", target, topic, str(schema)]
    r = subprocess.run(cmd + args, input="".join(json.dumps(v) + "\n" for v in values),
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, f"{name}: {r.stderr}"
    assert r.stdout.count("offset") == len(values), r.stdout


def check_lines(name, lines, data, want):
    """Each library's line equals the deserializer's value; its bytes are the record's."""
    assert len(lines) == len(data), lines
    lines.sort(key=lambda x: x["offset"])
    for line, d, w in zip(lines, data, want):
        assert base64.b64decode(line["value"]) == d
        assert line["value_schema_id"] == int.from_bytes(d[1:5], "big")
        assert line["value_json"] == w, f"{name}: offset {line['offset']}"


@pytest.mark.parametrize("lang", LANGS, indirect=True)
def test_library_decodes_like_the_deserializer(bootstrap, sidecars, client, lang, request):
    name = request.node.callspec.params["lang"]
    consume, _ = lang
    avro_topic, js_topic = unique(f"cl-{name}"), unique(f"cljs-{name}")
    create_topic(bootstrap, avro_topic, 1)
    create_topic(bootstrap, js_topic, 1)
    ctx = SerializationContext(avro_topic, MessageField.VALUE)
    avro = [AvroSerializer(client, json.dumps(ORDER_V1))(o, ctx) for o in ORDERS]
    write(bootstrap, avro_topic, avro)
    jctx = SerializationContext(js_topic, MessageField.VALUE)
    jvals = [{"n": 1, "s": "caf\u00e9"}, {"n": -7, "s": ""}]
    jdata = [JSONSerializer(json.dumps(JSON_SCHEMA), client)(v, jctx) for v in jvals]
    write(bootstrap, js_topic, jdata)
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))

    de = AvroDeserializer(client)
    want = [as_json_value(de(d, ctx)) for d in avro]
    check_lines(name, consume(sc, unique("g"), avro_topic, len(avro), "avro_plain"), avro, want)
    jde = JSONDeserializer(json.dumps(JSON_SCHEMA))
    check_lines(name, consume(sc, unique("g"), js_topic, len(jdata), "json_schema"), jdata,
                [jde(d, jctx) for d in jdata])


@pytest.mark.parametrize("lang", LANGS, indirect=True)
def test_library_produces_json_with_a_schema(bootstrap, sidecars, client, lang, request):
    name = request.node.callspec.params["lang"]
    _, produce = lang
    topic = unique(f"clp-{name}")
    create_topic(bootstrap, topic, 1)
    sid = register(client, f"{topic}-value", ORDER_V1)
    sc = sidecars(args=(f"--schema_registry.url={REGISTRY}",))
    values = [as_json(o) for o in ORDERS]
    produce(sc, topic, values, sid)
    produce(sc, topic, values, f"{topic}-value")
    ctx = SerializationContext(topic, MessageField.VALUE)
    de = AvroDeserializer(client)
    msgs = read_back(bootstrap, topic, 2 * len(values))
    for m, o in zip(msgs, ORDERS + ORDERS):
        assert int.from_bytes(m.value()[1:5], "big") == sid
        want = dict(o)
        want["ratio"] = struct.unpack("<f", struct.pack("<f", want["ratio"]))[0]  # a float
        assert as_json_value(de(m.value(), ctx)) == as_json_value(want), name
