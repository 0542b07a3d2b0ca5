"""Produce and seek over HTTP, through the real binary against the real broker:
POST /v1/topics/{topic}/records round-trips keys, values and headers (text, base64, null), a
record refused on its own (too large, outside the token's produce scope, an unknown partition,
an internal topic) leaves the others written, and a malformed body is a 400 that names the
field and the record; POST /v1/groups/{group}/seek moves one or every partition and makes the
leases taken before it stale."""
import base64
import time

from conftest import create_topic, produce, unique, wait_for, watermarks
from grpc_support import write_tokens_json

from test_grpc import secure_sidecars  # noqa: F401 (fixture)


def b64(b):
    return base64.b64encode(b).decode()


def raw_bytes(value, encoding):
    """The bytes a fetched field stands for (None for null)."""
    if value is None:
        return None
    return base64.b64decode(value) if encoding == "base64" else value.encode()


def fetch_n(sc, group, topic, n, timeout=60, **kw):
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        got += sc.fetch(group, topic, max=100, wait_ms=1000, **kw)
    return got


# produce ----------------------------------------------------------------------------------

def test_produce_then_fetch_round_trips_keys_values_and_headers(bootstrap, sidecars):
    topic, other = unique("hp-rt"), unique("hp-rt-other")
    create_topic(bootstrap, topic, 2)
    create_topic(bootstrap, other, 1)
    sc = sidecars()
    binary = bytes([0, 1, 0xFF, 0xFE, 0x80, 10])
    records = [
        {"key": "k-text", "value": "héllo wörld",
         "headers": [{"key": "h-text", "value": "v1"},
                     {"key": "h-bin", "value": b64(b"\x00\xff"), "value_encoding": "base64"},
                     {"key": "h-null", "value": None}]},
        {"key": b64(b"\xff\x00key"), "key_encoding": "base64", "value": b64(binary),
         "value_encoding": "base64", "partition": 1},
        {"key": None, "value": "null key", "partition": 0},
        {"value": None, "key": "tombstone", "partition": 0},
        {"value": "to the other topic", "topic": other},
        {"key": "nul", "value": "a\u0000b", "partition": 0},
    ]
    st, body = sc.post(f"/v1/topics/{topic}/records", {"records": records})
    assert st == 200, (st, body)
    res = body["results"]
    assert len(res) == len(records)
    for r in res:
        assert "error" not in r and r["offset"] >= 0, res
    assert res[1]["partition"] == 1 and res[2]["partition"] == 0 and res[3]["partition"] == 0
    assert res[4]["partition"] == 0 and res[4]["offset"] == 0

    got = fetch_n(sc, unique("hp-rt-g"), topic, 5)
    assert len(got) == 5, got
    by = {(g["partition"], g["offset"]): g for g in got}
    first = by[(res[0]["partition"], res[0]["offset"])]
    assert raw_bytes(first["key"], first["key_encoding"]) == b"k-text"
    assert raw_bytes(first["value"], first["value_encoding"]) == "héllo wörld".encode()
    hs = [(h["key"], raw_bytes(h["value"], h.get("value_encoding"))) for h in first["headers"]]
    assert hs == [("h-text", b"v1"), ("h-bin", b"\x00\xff"), ("h-null", None)], first
    second = by[(1, res[1]["offset"])]
    assert second["key_encoding"] == "base64" and second["value_encoding"] == "base64"
    assert raw_bytes(second["key"], "base64") == b"\xff\x00key"
    assert raw_bytes(second["value"], "base64") == binary
    third = by[(0, res[2]["offset"])]
    assert third["key"] is None and "key_encoding" not in third and third["value"] == "null key"
    fourth = by[(0, res[3]["offset"])]
    assert fourth["value"] is None and fourth["key"] == "tombstone"
    assert by[(0, res[5]["offset"])]["value"] == "a\u0000b"
    # What a fetch returned goes back as it came (the shapes are the same).
    again = [{k: g[k] for k in ("key", "key_encoding", "value", "value_encoding", "headers")
              if k in g} for g in (first, second)]
    st, body = sc.post(f"/v1/topics/{other}/records", {"records": again})
    assert st == 200 and all("offset" in r for r in body["results"]), body
    back = fetch_n(sc, unique("hp-rt-g2"), other, 3)
    assert [raw_bytes(b["value"], b.get("value_encoding")) for b in back[1:]] == \
        ["héllo wörld".encode(), binary], back
    assert back[1]["headers"] == first["headers"]


def test_a_refused_record_gets_its_own_error_while_the_others_are_written(
        bootstrap, secure_sidecars, tmp_path):
    topic, secret = unique("hp-scope"), unique("hp-secret")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, secret, 1)
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"token": "tok-w", "groups": ["hp-*"], "consume": ["hp-*"], "produce": ["hp-scope*"]}])
    sc = secure_sidecars(tokens_file=tokens, token="tok-w")
    big = "x" * (1_200_000)  # over the producer's and the broker's message.max.bytes (1 MB)
    records = [{"value": "one"},
               {"value": big},
               {"value": "secret", "topic": secret},
               {"value": "nowhere", "partition": 7},
               {"value": "internal", "topic": "__consumer_offsets"},
               {"value": "two"}]
    st, body = sc.post(f"/v1/topics/{topic}/records", {"records": records})
    assert st == 200, (st, body)
    res = body["results"]
    assert len(res) == 6, res
    assert res[0]["offset"] == 0 and res[5]["offset"] == 1, res
    assert res[1]["error"]["code"] == "MSG_SIZE_TOO_LARGE", res[1]
    assert res[2]["error"]["code"] == "PERMISSION_DENIED" and secret in \
        res[2]["error"]["message"], res[2]
    assert res[3]["error"]["code"] == "_UNKNOWN_PARTITION", res[3]
    assert res[4]["error"]["code"] == "PERMISSION_DENIED" and "internal" in \
        res[4]["error"]["message"], res[4]
    assert watermarks(bootstrap, topic) == {0: 2}
    assert watermarks(bootstrap, secret) == {0: 0}
    got = fetch_n(sc, unique("hp-g"), topic, 2)
    assert [g["value"] for g in got] == ["one", "two"]
    # Every record refused: still 200, each with its error; nothing reaches Kafka.
    st, body = sc.post(f"/v1/topics/{secret}/records", {"records": [{"value": "a"}]})
    assert st == 200 and body["results"][0]["error"]["code"] == "PERMISSION_DENIED", body
    # No token: the caller is refused before the body is read.
    st, body = sc.request("POST", f"/v1/topics/{topic}/records", {"records": [{"value": "a"}]},
                          token=None)
    assert st == 401, (st, body)
    assert watermarks(bootstrap, topic) == {0: 2}


def test_bad_produce_bodies_are_400_naming_the_field_and_the_record(bootstrap, sidecars):
    topic = unique("hp-bad")
    create_topic(bootstrap, topic, 1)
    sc = sidecars(["--http.max_produce_records=3"])
    ok = {"value": "fine"}
    cases = [
        (b"not json", "not valid JSON"),
        (b"[]", "body must be {\"records\""),
        (b"{\"records\":{}}", "body must be {\"records\""),
        (b"{\"records\":[],\"x\":1}", "unknown field \"x\""),
        (b"{\"records\":[]}", "give 1 to 3 (http.max_produce_records)"),
        (b"{\"records\":[{},{},{},{}]}", "records holds 4 records"),
        ([ok, 5], "records[1] must be an object"),
        ([ok, {"value": "v", "value_encoding": "hex"}], "records[1].value_encoding must be"),
        ([{"key": "***", "key_encoding": "base64"}], "records[0].key is not valid base64"),
        ([ok, ok, {"partition": -1}], "records[2].partition must be an integer"),
        ([{"partition": "1"}], "records[0].partition must be an integer"),
        ([{"value": 5}], "records[0].value must be a string or null"),
        ([{"headers": {}}], "records[0].headers must be an array"),
        ([{"headers": [{"value": "v"}]}], "records[0].headers[0].key must be a string"),
        ([ok, {"headers": [{"key": "a\u0000b"}]}], "records[1].headers[0].key holds a NUL"),
        ([{"headers": [{"key": "k", "value": "v", "x": 1}]}],
         "records[0].headers[0]: unknown field \"x\""),
        ([{"topic": 7}], "records[0].topic must be a string"),
        ([{"offset": 7}], "records[0]: unknown field \"offset\""),
    ]
    for body, words in cases:
        if isinstance(body, bytes):
            st, resp = sc.post(f"/v1/topics/{topic}/records", raw=body)
        else:
            st, resp = sc.post(f"/v1/topics/{topic}/records", {"records": body})
        assert st == 400 and resp["error"]["code"] == "INVALID_ARGUMENT", (body, st, resp)
        assert words in resp["error"]["message"], (body, resp)
    st, resp = sc.get(f"/v1/topics/{topic}/records")
    assert st == 405 and "use POST" in resp["error"]["message"], resp
    # A topic name that is not one, from the path: that record's own error.
    st, resp = sc.post("/v1/topics/bad%20name/records", {"records": [ok]})
    assert st == 200 and resp["results"][0]["error"]["code"] == "INVALID_ARGUMENT", resp
    assert watermarks(bootstrap, topic) == {0: 0}


# seek -------------------------------------------------------------------------------------

def first_offsets(sc, group, topic, want, timeout=30):
    """{partition: lowest offset fetched} once every partition in `want` came (acking what
    came, so nothing is held)."""
    seen = {}
    deadline = time.time() + timeout
    while not want <= set(seen) and time.time() < deadline:
        recs = sc.fetch(group, topic, max=100, wait_ms=1000)
        for r in recs:
            seen[r["partition"]] = min(seen.get(r["partition"], r["offset"]), r["offset"])
        if recs:
            sc.ack(group, [r["ack_id"] for r in recs])
    return seen


def test_seek_to_offset_timestamp_earliest_and_latest_makes_old_leases_stale(
        bootstrap, sidecars):
    topic, group = unique("hs-seek"), unique("hs-g")
    create_topic(bootstrap, topic, 2)
    sc = sidecars()
    for part in (0, 1):
        for _ in range(2):  # two batches a little apart, so timestamps differ
            st, body = sc.post(f"/v1/topics/{topic}/records",
                               {"records": [{"value": f"p{part}", "partition": part}] * 5})
            assert st == 200 and all("offset" in x for x in body["results"]), body
            time.sleep(0.05)
    leased = fetch_n(sc, group, topic, 20)
    assert len(leased) == 20
    old = next(r for r in leased if r["partition"] == 0)
    ts = {(r["partition"], r["offset"]): r["timestamp"] for r in leased}

    # One partition to an offset: its 10 leases turn stale, an ack of one says so.
    st, body = sc.post(f"/v1/groups/{group}/seek", {"topic": topic, "partition": 0, "offset": 3})
    assert st == 200, body
    assert body == {"partitions": [{"topic": topic, "partition": 0, "offset": 3,
                                    "stale_leases": 10}], "stale_leases": 10}
    st, ack = sc.ack(group, [old["ack_id"]])
    assert ack["results"][0]["status"] == "FAILED_PRECONDITION", ack
    assert first_offsets(sc, group, topic, {0}) == {0: 3}

    # Every partition assigned here, to earliest (partition 1's leases are still out).
    st, body = sc.post(f"/v1/groups/{group}/seek", {"topic": topic, "position": "earliest"})
    assert st == 200, body
    assert sorted(p["partition"] for p in body["partitions"]) == [0, 1], body
    assert {p["partition"]: p["stale_leases"] for p in body["partitions"]}[1] == 10, body
    assert body["stale_leases"] == sum(p["stale_leases"] for p in body["partitions"])
    assert first_offsets(sc, group, topic, {0, 1}) == {0: 0, 1: 0}

    # A timestamp: the first record at or after it.
    t = ts[(1, 7)]
    want = min(o for (p, o), v in ts.items() if p == 1 and v >= t)
    st, body = sc.post(f"/v1/groups/{group}/seek",
                       {"topic": topic, "partition": 1, "timestamp_ms": t})
    assert st == 200 and body["partitions"][0]["offset"] == want, body
    assert first_offsets(sc, group, topic, {1}) == {1: want}

    # Latest: nothing more until a new record comes, which is the next one fetched.
    st, body = sc.post(f"/v1/groups/{group}/seek", {"topic": topic, "position": "latest"})
    assert st == 200 and len(body["partitions"]) == 2, body
    assert sc.fetch(group, topic, max=100, wait_ms=1500) == []
    st, body = sc.post(f"/v1/topics/{topic}/records", {"records": [{"value": "new",
                                                                    "partition": 1}]})
    assert body["results"][0]["offset"] == 10
    assert first_offsets(sc, group, topic, {1}) == {1: 10}


def test_bad_seeks_are_refused_naming_the_problem(bootstrap, sidecars):
    topic, group = unique("hs-bad"), unique("hs-bg")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    sc = sidecars()
    assert len(fetch_n(sc, group, topic, 3)) == 3
    url = f"/v1/groups/{group}/seek"
    cases = [
        ({"topic": topic}, 400, "exactly one of offset, timestamp_ms or position"),
        ({"topic": topic, "offset": 1, "position": "latest"}, 400, "exactly one of"),
        ({"topic": topic, "position": "middle"}, 400, "position must be"),
        ({"topic": topic, "offset": "1"}, 400, "offset must be an integer"),
        ({"topic": topic, "offset": -1}, 400, "offset must be >= 0"),
        # Found by the contract run: a negative timestamp reached Kafka, which answered 503.
        ({"topic": topic, "timestamp_ms": -1515457}, 400, "timestamp_ms must be >= 0"),
        ({"topic": topic, "partition": 0, "timestamp_ms": -1}, 400, "timestamp_ms must be >= 0"),
        ({"topic": topic, "partition": -1, "offset": 0}, 400, "partition must be"),
        ({"offset": 0}, 400, "topic must be a string"),
        ({"topic": topic, "offset": 0, "x": 1}, 400, "unknown field \"x\""),
        ({"topic": "__consumer_offsets", "offset": 0}, 403, "internal"),
        ({"topic": topic, "partition": 5, "offset": 0}, 404,
         f"partition 5 of topic \"{topic}\" is not assigned"),
        ({"topic": unique("hs-none"), "offset": 0}, 404, "no partition of topic"),
    ]
    for body, status, words in cases:
        st, resp = sc.post(url, body)
        assert st == status and words in resp["error"]["message"], (body, st, resp)
    st, resp = sc.post(url, raw=b"[1")
    assert st == 400 and "not valid JSON" in resp["error"]["message"], resp
    st, resp = sc.post(f"/v1/groups/{unique('hs-nogroup')}/seek", {"topic": topic, "offset": 0})
    assert st == 404, resp
