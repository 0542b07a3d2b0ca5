"""HTTP edge: every request gets an answer, with a body that is valid JSON whatever bytes the
request held; too-large URLs get 414; NUL in a name is refused; HEAD works where GET does."""
import json
import socket

import pytest

from conftest import create_topic, unique, wait_for


def raw_request(sc, head, timeout=15):
    """Sends the bytes `head` (a request line and headers, without the final blank line) with
    Connection: close, and reads the whole answer. Returns (status, headers, body bytes);
    fails when the server closes without an answer or sends none within the timeout."""
    s = socket.create_connection(("127.0.0.1", sc.port), timeout=timeout)
    try:
        s.sendall(head + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                raise AssertionError(f"no complete answer within {timeout}s to {head[:120]!r}; "
                                     f"got {data[:200]!r}")
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    assert data, f"empty reply to {head[:120]!r}"
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode()
    return status, headers, body


def json_error(sc, head, status, code, words=()):
    st, _, body = raw_request(sc, head)
    text = body.decode("utf-8")  # must be UTF-8
    doc = json.loads(text)        # and JSON
    assert st == status, (st, doc)
    assert doc["error"]["code"] == code, doc
    for w in words:
        assert w in doc["error"]["message"], (w, doc)
    return doc["error"]["message"]


@pytest.fixture
def sc(bootstrap, sidecars):
    return sidecars(["--groups.allowed=*"])


def test_bad_utf8_anywhere_in_the_url_gets_a_json_error(bootstrap, sc):
    topic = unique("tbad")
    g = unique("g")
    # Percent-encoded and raw invalid bytes in the group, a topic, max, a parameter name, and
    # an unknown path: each echoes the bytes back in its message.
    for enc in (b"%FF", b"\xff", b"%C3%28", b"\xed\xa0\x80"):
        json_error(sc, b"GET /v1/groups/g" + enc + b"/records?topic=" + topic.encode()
                   + b" HTTP/1.1", 400, "INVALID_ARGUMENT", ["group"])
        json_error(sc, b"GET /v1/groups/" + g.encode() + b"/records?topic=t" + enc + b" HTTP/1.1",
                   400, "INVALID_ARGUMENT", ["topic"])
        json_error(sc, b"GET /v1/groups/" + g.encode() + b"/records?topic=" + topic.encode()
                   + b"&max=" + enc + b" HTTP/1.1", 400, "INVALID_ARGUMENT", ["max"])
        json_error(sc, b"GET /v1/groups/" + g.encode() + b"/records?topic=" + topic.encode()
                   + b"&x" + enc + b"=1 HTTP/1.1", 400, "INVALID_ARGUMENT",
                   ["unknown query parameter"])
        json_error(sc, b"GET /v1/nothing" + enc + b" HTTP/1.1", 404, "NOT_FOUND", ["/v1/nothing"])
        json_error(sc, b"DELETE /v1/groups/" + g.encode() + b"/records" + enc + b" HTTP/1.1", 404,
                   "NOT_FOUND", ["DELETE"])
    msg = json_error(sc, b"GET /v1/groups/" + g.encode() + b"/records?topic=" + topic.encode()
                     + b"&max=%FF HTTP/1.1", 400, "INVALID_ARGUMENT", ["max"])
    assert "\\xFF" in msg, msg  # the byte is shown, not dropped
    # A subscriber name that is not UTF-8 still shows in the group's status (it was left out).
    create_topic(bootstrap, topic, 1)
    st, _, _ = raw_request(sc, b"GET /v1/groups/" + g.encode() + b"/records?topic=" + topic.encode()
                           + b"&wait_ms=0&subscriber=s%FF HTTP/1.1")
    assert st == 200
    for path in (f"/v1/groups/{g}", "/v1/groups"):
        st, _, body = raw_request(sc, f"GET {path} HTTP/1.1".encode())
        doc = json.loads(body.decode("utf-8"))
        subs = doc["subscribers"] if "subscribers" in doc else doc["groups"][0]["subscribers"]
        assert [x["name"] for x in subs] == ["s\\xFF"], doc
    assert sc.get("/healthz")[0] == 200


def test_multibyte_echo_cut_at_the_message_bound_stays_json(bootstrap, sc):
    topic = unique("tcut")
    g = unique("g")
    # Values of 2-, 3- and 4-byte characters, at every offset against the message bound.
    for ch in ("é", "€", "😀"):
        for pad in range(0, 4):
            val = ("a" * pad + ch * 300).encode()
            q = "".join(f"%{b:02X}" for b in val).encode()
            msg = json_error(sc, b"GET /v1/groups/" + g.encode() + b"/records?topic="
                             + topic.encode() + b"&max=" + q + b" HTTP/1.1", 400,
                             "INVALID_ARGUMENT", ["max"])
            assert "\ufffd" not in msg and ch in msg, msg


def test_too_many_query_parameters_and_long_urls_are_answered(bootstrap, sc):
    g = unique("g")
    # 400 to 600 parameters in a 3-7 KB URL: from ~500 on they hung with "Not enough memory in
    # pool" (libmicrohttpd 0.9.75 logs its 431 but never sends it).
    for n in (400, 600):
        for name in ("p", "topic=t"):
            q = "&".join(f"{name}{i}=1" for i in range(n))
            head = f"GET /v1/groups/{g}/records?topic=t&{q} HTTP/1.1".encode()
            json_error(sc, head, 414, "RESOURCE_EXHAUSTED", ["query parameters"])
    # Many short ones (an empty name each).
    json_error(sc, f"GET /v1/groups/{g}/records?topic=t{'&' * 3000} HTTP/1.1".encode(), 414,
               "RESOURCE_EXHAUSTED", ["query parameters"])
    # A 20 KB URL: a JSON 414. A URL larger than the connection's memory gets libmicrohttpd's
    # own 414 (not JSON), but an answer.
    json_error(sc, f"GET /v1/groups/{g}/records?topic={'t' * 20000} HTTP/1.1".encode(), 414,
               "RESOURCE_EXHAUSTED", ["URL"])
    st, _, _ = raw_request(sc, f"GET /v1/groups/{g}/records?topic={'t' * 200000} HTTP/1.1"
                           .encode())
    assert st in (414, 431), st
    # Too many header lines: an answer too.
    hdrs = b"".join(b"\r\nX-H%d: v" % i for i in range(3000))
    st, _, _ = raw_request(sc, b"GET /healthz HTTP/1.1" + hdrs)
    assert st == 431, st
    # A normal request still works on the same process.
    assert sc.get("/healthz")[0] == 200


def test_nul_in_a_name_is_invalid_argument(bootstrap, sc):
    topic = unique("tnul")
    create_topic(bootstrap, topic, 1)
    g = unique("g")
    json_error(sc, f"GET /v1/groups/{g}/records?topic={topic}%00b&wait_ms=0 HTTP/1.1".encode(),
               400, "INVALID_ARGUMENT", ["topic", "NUL"])
    json_error(sc, f"GET /v1/groups/{g}/records?topic=a,{topic}%00&wait_ms=0 HTTP/1.1".encode(),
               400, "INVALID_ARGUMENT", ["topic", "NUL"])
    json_error(sc, f"GET /v1/groups/{g}%00b/records?topic={topic}&wait_ms=0 HTTP/1.1".encode(),
               400, "INVALID_ARGUMENT", ["NUL"])
    json_error(sc, f"GET /v1/groups/{g}/records?topic={topic}&subscriber=s%00x&wait_ms=0 "
               "HTTP/1.1".encode(), 400, "INVALID_ARGUMENT", ["subscriber", "NUL"])
    json_error(sc, f"GET /v1/groups/{g}/records?topic={topic}&max%00=1 HTTP/1.1".encode(), 400,
               "INVALID_ARGUMENT", ["NUL"])
    # Nothing of those reached the engine: no group a, no group g.
    st, body = sc.get("/v1/groups")
    assert st == 200 and body["groups"] == [], body


def test_head_works_where_get_does(bootstrap, sc):
    wait_for(lambda: sc.get("/readyz")[0] == 200, 30, 0.2, "/readyz")
    for path in (b"/healthz", b"/readyz", b"/v1/groups"):
        st, hdrs, body = raw_request(sc, b"HEAD " + path + b" HTTP/1.1")
        assert st == 200, (path, st, body)
        assert body == b"", body
        assert hdrs.get("content-type") == "application/json", hdrs
    st, _, body = raw_request(sc, b"HEAD /v1/groups/nope HTTP/1.1")
    assert st == 404 and body == b""
    # A HEAD fetch checks its parameters and leases nothing.
    st, _, body = raw_request(sc, b"HEAD /v1/groups/g/records?topic=t&max=0 HTTP/1.1")
    assert st == 400 and body == b""
    st, _, body = raw_request(sc, b"HEAD /v1/groups/g/records?topic=t HTTP/1.1")
    assert st == 200 and body == b""
    st, body = sc.get("/v1/groups")
    assert body["groups"] == [], body
