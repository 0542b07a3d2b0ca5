"""HTTP conventions against the real binary and a real broker: 405 with Allow for a wrong
method, 415 for a POST body that is not JSON, Retry-After on 429 and 503, and X-Request-Id
taken, made or replaced, echoed on every answer (errors and streams too) and in the access
log line."""
import http.client
import json
import pathlib
import re
import subprocess

from conftest import create_topic, free_port, unique, wait_for
from grpc_support import write_tokens_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
MADE_ID = re.compile(r"^[0-9a-f]{32}$")


def call(port, method, path, body=None, headers=None, read=True):
    """One request on its own connection. Returns (status, headers, parsed body or None);
    with read=False the response is left open: (status, headers, (conn, resp))."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    if not read:
        return r.status, r.headers, (c, r)
    data = r.read()
    c.close()
    return r.status, r.headers, json.loads(data) if data else None


def test_wrong_method_is_405_with_allow(bootstrap, sidecars):
    hport = free_port()
    sc = sidecars([f"--http.health_listen=127.0.0.1:{hport}"])
    g = unique("g")
    # One of each kind of row: a probe, a status row checked after the method, rows under a
    # group checked before it (fetch, stream), and the POST rows.
    cases = [("POST", "/healthz", "GET, HEAD"), ("DELETE", "/readyz", "GET, HEAD"),
             ("POST", "/v1/groups", "GET, HEAD"), ("PUT", f"/v1/groups/{g}", "GET, HEAD"),
             ("POST", f"/v1/groups/{g}/records?topic=t", "GET, HEAD"),
             ("DELETE", f"/v1/groups/{g}/stream?topic=t", "GET, HEAD"),
             ("GET", f"/v1/groups/{g}/acks", "POST"), ("PUT", f"/v1/groups/{g}/nacks", "POST"),
             ("HEAD", f"/v1/groups/{g}/deadline", "POST")]
    for method, path, allow in cases:
        st, hdrs, body = call(sc.port, method, path, body=b"{}" if method != "HEAD" else None)
        assert st == 405 and hdrs["Allow"] == allow, (method, path, st, dict(hdrs))
        if method != "HEAD":
            assert body["error"]["code"] == "UNIMPLEMENTED", body
            assert method in body["error"]["message"] and allow in body["error"]["message"], body
        assert MADE_ID.match(hdrs["X-Request-Id"]), dict(hdrs)
    # The probe listener too.
    st, hdrs, body = call(hport, "POST", "/readyz", body=b"{}")
    assert st == 405 and hdrs["Allow"] == "GET, HEAD", (st, body)
    # The right method still works, and an unknown path is still 404.
    assert call(sc.port, "HEAD", "/healthz")[0] == 200
    assert call(sc.port, "DELETE", "/v1/nothing")[0] == 404


def test_post_body_not_json_is_415(bootstrap, sidecars):
    sc = sidecars()
    path = f"/v1/groups/{unique('g')}/acks"
    body = json.dumps({"ack_ids": ["garbage"]}).encode()
    for ct in ("text/plain", "application/x-www-form-urlencoded", "application/jsonx",
               "application/xml; charset=utf-8"):
        st, _, b = call(sc.port, "POST", path, body, {"Content-Type": ct})
        assert st == 415 and ct.split(";")[0] in b["error"]["message"], (ct, st, b)
        assert "application/json" in b["error"]["message"], b
    # curl -d sends a form type: refused, as the docs say; with the JSON type it is read.
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                          sc.base + path, "-d", body.decode()], capture_output=True, text=True)
    assert out.stdout == "415", out
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                          sc.base + path, "-H", "Content-Type: application/json", "-d",
                          body.decode()], capture_output=True, text=True)
    assert out.stdout in ("400", "404"), out  # the decoder's answer (no such group), not 415
    # JSON with parameters, in any case, and no Content-Type at all, reach the decoder.
    for hdrs in ({"Content-Type": "application/json; charset=utf-8"},
                 {"Content-Type": "Application/JSON"}, {}):
        st, _, b = call(sc.port, "POST", path, body, hdrs)
        assert st in (400, 404) and b["error"]["code"] != "UNIMPLEMENTED", (hdrs, st, b)


def test_retry_after_on_429_and_503(bootstrap, sidecars):
    topic = unique("tra")
    create_topic(bootstrap, topic, 1)
    sc = sidecars(["--http.max_streams=1"])
    g = unique("g")
    st, hdrs, (c, r) = call(sc.port, "GET", f"/v1/groups/{g}/stream?topic={topic}", read=False)
    try:
        assert st == 200 and MADE_ID.match(hdrs["X-Request-Id"]), dict(hdrs)
        st, hdrs, body = call(sc.port, "GET", f"/v1/groups/{g}/stream?topic={topic}")
        assert st == 429 and hdrs["Retry-After"] == "1", (st, dict(hdrs), body)
        assert "http.max_streams" in body["error"]["message"]
    finally:
        c.close()
    # Kafka unreachable: /readyz and /healthz are 503 with Retry-After.
    down = sidecars([f"--kafka.bootstrap.servers=127.0.0.1:{free_port()}"])
    wait_for(lambda: call(down.port, "GET", "/readyz")[0] == 503, 20, 0.5, "not ready")
    for path in ("/readyz", "/healthz"):
        st, hdrs, body = call(down.port, "GET", path)
        assert st == 503 and int(hdrs["Retry-After"]) >= 1, (path, st, dict(hdrs), body)


def test_request_id_echoed_made_replaced_and_logged(bootstrap, sidecars):
    hport = free_port()
    sc = sidecars(["--http.access_log=true", f"--http.health_listen=127.0.0.1:{hport}"])
    # Given and sane: echoed, on answers and errors alike.
    for method, path, want in (("GET", "/healthz", 200), ("GET", "/nothing", 404),
                               ("POST", "/healthz", 405)):
        st, hdrs, _ = call(sc.port, method, path, headers={"X-Request-Id": "conv-test-1.a_b:c"})
        assert st == want and hdrs["X-Request-Id"] == "conv-test-1.a_b:c", (path, dict(hdrs))
    # Absent: made, and each one new.
    ids = {call(sc.port, "GET", "/healthz")[1]["X-Request-Id"] for _ in range(5)}
    assert len(ids) == 5 and all(MADE_ID.match(i) for i in ids), ids
    # Not sane (too long, a space, a control or non-ASCII byte, empty): replaced by a made one.
    for bad in ("x" * 129, "two words", "tab\there", "caf\xe9", ""):
        st, hdrs, _ = call(sc.port, "GET", "/healthz",
                           headers={"X-Request-Id": bad.encode("latin-1")})
        assert st == 200 and MADE_ID.match(hdrs["X-Request-Id"]), (bad, dict(hdrs))
    assert call(sc.port, "GET", "/healthz", headers={"X-Request-Id": "y" * 128})[1][
        "X-Request-Id"] == "y" * 128
    # Answered before routing: a URL too long (414), the probe listener's 404.
    st, hdrs, _ = call(sc.port, "GET", "/v1/groups?" + "a" * 9000,
                       headers={"X-Request-Id": "long-url"})
    assert st == 414 and hdrs["X-Request-Id"] == "long-url", (st, dict(hdrs))
    st, hdrs, _ = call(hport, "GET", "/v1/groups", headers={"X-Request-Id": "probe-404"})
    assert st == 404 and hdrs["X-Request-Id"] == "probe-404", (st, dict(hdrs))
    # Every request is in the access log, with its method, path, status, bytes and id.
    call(sc.port, "GET", "/v1/groups", headers={"X-Request-Id": "logged-7"})
    line = re.compile(r"GET /v1/groups 200 \d+ bytes \d+ ms request_id=logged-7")
    wait_for(lambda: line.search(sc.logs()), 10, 0.2, "the access log line")
    assert re.search(r"POST /healthz 405 \d+ bytes \d+ ms request_id=conv-test-1\.a_b:c",
                     sc.logs())


def test_access_log_off_by_default_but_5xx_logged(bootstrap, sidecars):
    sc = sidecars()
    call(sc.port, "GET", "/healthz", headers={"X-Request-Id": "quiet-200"})
    down = sidecars([f"--kafka.bootstrap.servers=127.0.0.1:{free_port()}"])
    wait_for(lambda: call(down.port, "GET", "/readyz")[0] == 503, 20, 0.5, "not ready")
    call(down.port, "GET", "/readyz", headers={"X-Request-Id": "loud-503"})
    wait_for(lambda: "request_id=loud-503" in down.logs(), 10, 0.2, "the 5xx line")
    assert re.search(r"GET /readyz 503 \d+ bytes \d+ ms request_id=loud-503", down.logs())
    # Not a 2xx line (the 503s of /healthz before Kafka's first probe are logged).
    assert "quiet-200" not in sc.logs() and not re.search(r" 200 \d+ bytes", sc.logs())


def test_openapi_yaml_is_served_without_a_token(bootstrap, sidecars, tmp_path):
    tokens = write_tokens_file(tmp_path / "tokens", [("s3cret", "*")])
    sc = sidecars([f"--auth.tokens_file={tokens}"])
    st, hdrs, (c, r) = call(sc.port, "GET", "/openapi.yaml", read=False)
    body = r.read()
    c.close()
    assert st == 200 and hdrs["Content-Type"] == "application/yaml", (st, dict(hdrs))
    assert MADE_ID.match(hdrs["X-Request-Id"]), dict(hdrs)
    spec = (ROOT / "api" / "openapi.yaml").read_bytes()
    assert body == spec  # what the binary was built with
    # The other routes still want the token.
    assert call(sc.port, "GET", "/v1/groups")[0] == 401
    st, hdrs, _ = call(sc.port, "POST", "/openapi.yaml", body=b"{}")
    assert st == 405 and hdrs["Allow"] == "GET, HEAD"
