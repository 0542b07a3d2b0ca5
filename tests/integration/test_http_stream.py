"""HTTP record stream (GET /v1/groups/{group}/stream), through the real binary against the real
broker: NDJSON with real `curl -N`, SSE framing and heartbeats, credits freed by POST acks, a
disconnect that gives leases back uncounted, a client that stops reading cut off, bad
parameters, the stream bound, and auth as the fetch has it."""
import http.client
import json
import queue
import socket
import subprocess
import threading
import time

from conftest import create_topic, produce, unique, wait_for
from grpc_support import write_tokens_json


class Lines:
    """Reads lines from a binary file object on a thread; next() waits for the next one."""

    def __init__(self, f):
        self.q = queue.Queue()
        self.f = f
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        try:
            for line in iter(self.f.readline, b""):
                self.q.put(line.decode())
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            pass
        self.q.put(None)

    def next(self, timeout=30):
        return self.q.get(timeout=timeout)

    def records(self, n, timeout=60, seen=None):
        """The next n record lines (NDJSON), skipping heartbeats and news (kept in seen)."""
        out = []
        deadline = time.time() + timeout
        while len(out) < n:
            line = self.next(timeout=max(0.1, deadline - time.time()))
            assert line is not None, f"the stream ended after {len(out)} records"
            if not line.strip():
                continue
            obj = json.loads(line)
            if "ack_id" in obj:
                out.append(obj)
            elif seen is not None:
                seen.append(obj)
        return out

    def records_within(self, secs):
        """Record lines that arrive within secs (heartbeats and news skipped)."""
        out = []
        deadline = time.time() + secs
        while time.time() < deadline:
            try:
                line = self.q.get(timeout=max(0.05, deadline - time.time()))
            except queue.Empty:
                break
            if line is None:
                break
            if line.strip() and "ack_id" in json.loads(line):
                out.append(json.loads(line))
        return out


def open_stream(sc, path, headers=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", sc.port, timeout=timeout)
    conn.request("GET", path, headers=headers or {})
    return conn, conn.getresponse()


def error_of(sc, path, headers=None):
    conn, resp = open_stream(sc, path, headers)
    body = json.loads(resp.read() or b"null")
    conn.close()
    return resp.status, body, resp.getheader("Retry-After")


def test_ndjson_with_curl_and_credits_freed_by_acks(bootstrap, sidecars):
    topic, g = unique("tsn"), unique("gsn")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 10)
    sc = sidecars()
    curl = subprocess.Popen(["curl", "-sN", f"{sc.base}/v1/groups/{g}/stream?topic={topic}"
                             "&max_in_flight=3"], stdout=subprocess.PIPE)
    try:
        lines = Lines(curl.stdout)
        news = []
        first = lines.records(3, seen=news)
        assert [r["offset"] for r in first] == [0, 1, 2]
        assert all(r["topic"] == topic and r["attempt"] == 1 and r["value"] for r in first)
        assert {"assignment": [{"topic": topic, "partition": 0}]} in news, news
        # Three unacked: the stream holds the rest back.
        assert lines.records_within(3) == []
        st, body = sc.ack(g, [r["ack_id"] for r in first[:2]])
        assert st == 200 and body["acked"] == 2, body
        more = lines.records(2)
        assert [r["offset"] for r in more] == [3, 4]
        assert lines.records_within(2) == []
        st, body = sc.ack(g, [r["ack_id"] for r in [first[2]] + more])
        assert st == 200 and body["acked"] == 3, body
        assert [r["offset"] for r in lines.records(3)] == [5, 6, 7]
    finally:
        curl.kill()
        curl.wait()
    assert sc.stop() == 0


def test_sse_ids_are_ack_ids_and_idle_heartbeats(bootstrap, sidecars):
    topic, g = unique("tss"), unique("gss")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 2)
    sc = sidecars(["--http.stream_heartbeat_ms=300"])
    conn, resp = open_stream(sc, f"/v1/groups/{g}/stream?topic={topic}",
                             {"Accept": "text/event-stream"})
    assert resp.status == 200
    assert resp.getheader("Content-Type") == "text/event-stream"
    lines = Lines(resp)
    events, ev, comments = [], {}, []
    deadline = time.time() + 60
    while time.time() < deadline and not (len([e for e in events if "id" in e]) == 2 and comments):
        line = lines.next()
        assert line is not None
        line = line.rstrip("\n")
        if line.startswith(":"):
            comments.append(line)
        elif line == "":
            if ev:
                events.append(ev)
            ev = {}
        else:
            k, _, v = line.partition(": ")
            ev[k] = v
    recs = [e for e in events if "id" in e]
    assert len(recs) == 2, events
    for e in recs:
        data = json.loads(e["data"])
        assert e["id"] == data["ack_id"] and data["topic"] == topic
    asg = [e for e in events if e.get("event") == "assignment"]
    assert asg and json.loads(asg[0]["data"]) == {"assignment": [{"topic": topic,
                                                                   "partition": 0}]}
    assert comments and comments[0].startswith(": heartbeat")
    # An ack by POST settles what the stream delivered.
    st, body = sc.ack(g, [e["id"] for e in recs])
    assert st == 200 and body["acked"] == 2, body
    conn.close()
    assert sc.stop() == 0


def test_disconnect_gives_leases_back_uncounted(bootstrap, sidecars):
    topic, g = unique("tsd"), unique("gsd")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5)
    sc = sidecars()
    # A long lease: only the disconnect can give them back within the test.
    path = f"/v1/groups/{g}/stream?topic={topic}&deadline_ms=600000"
    conn, resp = open_stream(sc, path)
    got = Lines(resp).records(5)
    assert [r["attempt"] for r in got] == [1] * 5
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    conn2, resp2 = open_stream(sc, path)
    again = Lines(resp2).records(5, timeout=60)
    assert sorted(r["offset"] for r in again) == [0, 1, 2, 3, 4]
    assert [r["attempt"] for r in again] == [1] * 5, again
    conn2.close()
    assert sc.stop() == 0


def stalled_stream(sc, g, topic):
    """Opens a stream of g on topic with a small receive buffer, reads its status line and
    nothing more; returns the socket."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", sc.port))
    s.sendall(f"GET /v1/groups/{g}/stream?topic={topic}&max_in_flight=5000"
              f"&max_in_flight_bytes=200000000&deadline_ms=600000 HTTP/1.1\r\n"
              f"Host: x\r\n\r\n".encode())
    assert s.recv(12).startswith(b"HTTP/1.1 200")
    return s


def test_client_that_stops_reading_is_cut_off(bootstrap, sidecars):
    topic, g = unique("tsc"), unique("gsc")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3000, size=10000)
    sc = sidecars(["--http.stream_stall_ms=1000", "--http.max_streams=1"])
    s = stalled_stream(sc, g, topic)
    # ... and reads no more.
    wait_for(lambda: "http.stream_stall_ms" in sc.logs(), 60, what="the stall log line")
    assert "cut off" in sc.logs()
    # The records go to another subscriber, their attempt not counted.
    st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&max=10&wait_ms=20000")
    assert st == 200 and body["records"], body
    assert body["records"][0]["offset"] == 0
    assert all(r["attempt"] == 1 for r in body["records"]), body["records"][:2]
    # ... and its stream ended while the client still reads nothing: the bound of one stream
    # is free again.
    def opens():
        c, r = open_stream(sc, f"/v1/groups/{g}/stream?topic={topic}&max_in_flight=1")
        ok = r.status == 200
        c.close()
        return ok
    wait_for(opens, 30, what="the stalled stream's slot free again")
    # What was sent reads out, then the end.
    s.settimeout(30)
    try:
        while s.recv(1 << 20):
            pass
    except ConnectionResetError:
        pass
    s.close()
    assert sc.stop() == 0, sc.logs()


def test_bad_parameters_and_the_stream_bound(bootstrap, sidecars):
    topic, g = unique("tsb"), unique("gsb")
    create_topic(bootstrap, topic, 1)
    sc = sidecars(["--http.max_streams=1"])
    base = f"/v1/groups/{g}/stream"
    cases = [
        ("", ["topic"]),
        (f"?topic={topic}&max_in_flight=abc", ["max_in_flight", "abc"]),
        (f"?topic={topic}&max_in_flight=-1", ["max_in_flight"]),
        (f"?topic={topic}&max_in_flight_bytes=x", ["max_in_flight_bytes"]),
        (f"?topic={topic}&deadline_ms=soon", ["deadline_ms"]),
        (f"?topic={topic}&format=xml", ["format"]),
        (f"?topic={topic}&ordered_batches=maybe", ["ordered_batches"]),
        (f"?topic={topic}&wait_ms=100", ["wait_ms", "max_in_flight"]),
        ("?topic=no/such", ["no/such"]),
    ]
    for q, words in cases:
        st, body, _ = error_of(sc, base + q)
        assert st == 400 and body["error"]["code"] == "INVALID_ARGUMENT", (q, st, body)
        for w in words:
            assert w in body["error"]["message"], (q, w, body)
    # Above the server's bound: the validator's answer, as for a gRPC stream's credits.
    st, body, _ = error_of(sc, f"{base}?topic={topic}&max_in_flight=99999999999999")
    assert st == 429 and body["error"]["code"] == "RESOURCE_EXHAUSTED", body
    for w in ["max_in_flight", "subscriber.max_credit_records"]:
        assert w in body["error"]["message"], body
    st, body, _ = error_of(sc, f"/v1/groups/bad!group/stream?topic={topic}")
    assert st == 400 and "bad!group" in body["error"]["message"], body
    # One stream open: the next is told to come back.
    conn, resp = open_stream(sc, f"{base}?topic={topic}")
    assert resp.status == 200
    st, body, retry = error_of(sc, f"{base}?topic={topic}")
    assert st == 429 and "http.max_streams" in body["error"]["message"] and retry, body
    conn.close()
    # Closed: the bound is free again.
    wait_for(lambda: error_of(sc, f"{base}?topic={topic}&format=xml")[0] == 400, 10)

    def opens():
        c, r = open_stream(sc, f"{base}?topic={topic}")
        ok = r.status == 200
        c.close()
        return ok
    wait_for(opens, 20, what="a stream after the first closed")
    assert sc.stop() == 0


def test_auth_and_scopes_as_the_fetch(bootstrap, sidecars, tmp_path):
    topic, other, g = unique("tsa"), unique("tso"), unique("app")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, other, 1)
    produce(bootstrap, topic, 1)
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"token": "tok-app", "groups": ["app-*"], "consume": [topic]}])
    sc = sidecars([f"--auth.tokens_file={tokens}"])
    auth = {"Authorization": "Bearer tok-app"}
    st, body, _ = error_of(sc, f"/v1/groups/{g}/stream?topic={topic}")
    assert st == 401 and body["error"]["code"] == "UNAUTHENTICATED", body
    st, body, _ = error_of(sc, f"/v1/groups/{g}/stream?topic={other}", auth)
    assert st == 403 and other in body["error"]["message"], body
    st, body, _ = error_of(sc, f"/v1/groups/other-{g}/stream?topic={topic}", auth)
    assert st == 403 and f"other-{g}" in body["error"]["message"], body
    conn, resp = open_stream(sc, f"/v1/groups/{g}/stream?topic={topic}", auth)
    assert resp.status == 200
    assert Lines(resp).records(1)[0]["offset"] == 0
    conn.close()
    assert sc.stop() == 0


def test_shutdown_ends_open_streams(bootstrap, sidecars):
    topic, g = unique("tsx"), unique("gsx")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = sidecars()
    conn, resp = open_stream(sc, f"/v1/groups/{g}/stream?topic={topic}")
    sse_conn, sse = open_stream(sc, f"/v1/groups/{g}/stream?topic={topic}",
                                {"Accept": "text/event-stream"})
    lines = Lines(resp)
    assert len(lines.records(1)) == 1
    # Both streams idle (suspended) when the process is told to stop: it stops, and each
    # stream ends (after an error line, if the engine's refusal reached it first).
    assert sc.stop() == 0
    tail = []
    while (line := lines.next(timeout=30)) is not None:
        tail.append(line)
    assert all(not t.strip() or "error" in json.loads(t) or "assignment" in json.loads(t)
               for t in tail), tail
    sse_lines = Lines(sse)
    while sse_lines.next(timeout=30) is not None:
        pass
    conn.close()
    sse_conn.close()
