"""HTTP edge: bad input gets a JSON error with a code, a clear message and the right status,
and the process keeps running."""
import base64

from conftest import create_topic, fetch_all, produce, unique


def assert_error(resp, status, code, words):
    st, body = resp
    assert st == status, (st, body)
    assert body["error"]["code"] == code, body
    msg = body["error"]["message"]
    for w in words:
        assert w in msg, (w, msg)


def test_bad_input_gets_clear_errors_and_process_survives(bootstrap, sidecars):
    topic = unique("terr")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    sc = sidecars(["--groups.allowed=app-*,team.*"])
    g = unique("app")

    assert_error(sc.get(f"/v1/groups/bad!group/records?topic={topic}"), 400, "INVALID_ARGUMENT",
                 ["group name", "bad!group"])
    assert_error(sc.get(f"/v1/groups/other-group/records?topic={topic}"), 403, "PERMISSION_DENIED",
                 ["other-group", "groups.allowed"])
    assert_error(sc.get(f"/v1/groups/{g}/records?topic=no/such"), 400, "INVALID_ARGUMENT",
                 ["topic name", "no/such"])
    assert_error(sc.get(f"/v1/groups/{g}/records"), 400, "INVALID_ARGUMENT", ["topic"])
    assert_error(sc.get(f"/v1/groups/{g}/records?topic={topic}&max=0"), 400, "INVALID_ARGUMENT",
                 ["max", "1 to 10000"])
    assert_error(sc.get(f"/v1/groups/{g}/records?topic={topic}&max=10001"), 400,
                 "INVALID_ARGUMENT", ["max"])
    assert_error(sc.get(f"/v1/groups/{g}/records?topic={topic}&max=abc"), 400, "INVALID_ARGUMENT",
                 ["max", "abc"])
    assert_error(sc.get(f"/v1/groups/{g}/records?topic={topic}&wait_ms=-5"), 400,
                 "INVALID_ARGUMENT", ["wait_ms"])
    assert_error(sc.get(f"/v1/groups/{g}/records?topic={topic}&bogus=1"), 400, "INVALID_ARGUMENT",
                 ["bogus"])
    assert_error(sc.get(f"/v1/groups/{g}/records?topic={topic}&format=xml"), 400,
                 "INVALID_ARGUMENT", ["format"])
    assert_error(sc.get("/v1/nothing"), 404, "NOT_FOUND", ["/v1/nothing"])
    # Acks for a group this process has not served.
    assert_error(sc.post(f"/v1/groups/{g}/acks", {"ack_ids": ["x"]}), 404, "NOT_FOUND",
                 ["not active"])

    recs = fetch_all(sc, g, topic, 3)
    assert len(recs) == 3
    assert_error(sc.post(f"/v1/groups/{g}/acks", raw=b"{not json"), 400, "INVALID_ARGUMENT",
                 ["not valid JSON"])
    assert_error(sc.post(f"/v1/groups/{g}/acks", {"ids": []}), 400, "INVALID_ARGUMENT",
                 ["ack_ids"])
    assert_error(sc.post(f"/v1/groups/{g}/acks", {"ack_ids": []}), 400, "INVALID_ARGUMENT",
                 ["ack_ids"])
    assert_error(sc.post(f"/v1/groups/{g}/acks", {"ack_ids": [5]}), 400, "INVALID_ARGUMENT",
                 ["ack_ids[0]"])
    assert_error(sc.post(f"/v1/groups/{g}/acks", {"ack_ids": ["garbage"]}), 400,
                 "INVALID_ARGUMENT", ["malformed"])
    # A well-formed id for an offset never delivered: unknown.
    real = recs[0]["ack_id"]
    fake = real[:-(len(topic) + 1)].rsplit("-", 2)[0] + f"-999-1-{topic}"
    assert_error(sc.post(f"/v1/groups/{g}/acks", {"ack_ids": [fake]}), 404, "NOT_FOUND",
                 ["unknown ack id"])
    # An id of another group is refused.
    other = "a1" + real[2:10] + "00000000" + real[18:]
    assert_error(sc.post(f"/v1/groups/{g}/acks", {"ack_ids": [other]}), 400, "INVALID_ARGUMENT",
                 ["another group"])

    # Mixed: per-id results, 200 overall.
    st, body = sc.ack(g, [real, "garbage"])
    assert st == 200
    assert [r["status"] for r in body["results"]] == ["OK", "INVALID_ARGUMENT"]
    assert body["acked"] == 1 and body["rejected"] == 1
    # A second ack of the same id: offset 0 is committed past, and which of its ids was
    # acked is no longer known, so the answer is not a success (test_scopes has the rest).
    st, body = sc.ack(g, [real])
    assert st == 409 and "already committed" in body["results"][0]["message"], body

    # Too large a body (the default limit is 32 MiB).
    big = b'{"ack_ids":["' + b"a" * (33 << 20) + b'"]}'
    assert_error(sc.post(f"/v1/groups/{g}/acks", raw=big), 429, "RESOURCE_EXHAUSTED",
                 ["http.max_request_bytes"])

    st, body = sc.get("/healthz")
    assert st == 200 and body == {"status": "ok"}
    assert sc.proc.poll() is None
    assert sc.stop() == 0


def test_values_as_text_or_base64(bootstrap, sidecars):
    topic, g = unique("tbin"), unique("gbin")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 2, binary=True)
    produce(bootstrap, topic, 1)
    sc = sidecars()
    recs = fetch_all(sc, g, topic, 3)
    assert [r["value_encoding"] for r in recs] == ["base64", "base64", "text"]
    assert base64.b64decode(recs[0]["value"]) == b"\xff0"
    assert recs[2]["value"] == "v0" and recs[2]["key"] is None
    # format=base64 forces base64 everywhere.
    topic2 = unique("tb64")
    create_topic(bootstrap, topic2, 1)
    produce(bootstrap, topic2, 1)
    st, body = sc.get(f"/v1/groups/{g}/records?topic={topic2}&format=base64&wait_ms=20000")
    assert st == 200 and len(body["records"]) == 1, body
    r = body["records"][0]
    assert r["value_encoding"] == "base64" and base64.b64decode(r["value"]) == b"v0"
    assert sc.stop() == 0


def test_long_poll_waits_for_records_and_times_out_empty(bootstrap, sidecars):
    import threading
    import time
    topic, g = unique("tlp"), unique("glp")
    create_topic(bootstrap, topic, 1)
    sc = sidecars()
    # Nothing there: an empty list after about wait_ms.
    t0 = time.time()
    assert sc.fetch(g, topic, wait_ms=1500) == []
    assert time.time() - t0 >= 1.4
    # A record produced during the wait is returned before the wait ends.
    timer = threading.Timer(3.0, lambda: produce(bootstrap, topic, 1))
    timer.start()
    t0 = time.time()
    recs = sc.fetch(g, topic, wait_ms=30000)
    timer.join()
    assert len(recs) == 1 and time.time() - t0 < 25
    assert sc.stop() == 0
