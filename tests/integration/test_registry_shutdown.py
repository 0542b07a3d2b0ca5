"""A produce waiting for the schema registry at shutdown, or whose client leaves: the real
binary and a real broker, with a "registry" that takes connections and never answers
(schema_registry.timeout_ms 60000). SIGTERM must answer each waiting produce (gRPC
UNAVAILABLE, HTTP 503 with Retry-After) and exit 0 within seconds; a client that leaves
while its produce waits frees it (the ASan binary's leak check fails the exit code)."""
import http.client
import json
import socket
import threading
import time

import grpc
import pytest

from conftest import create_topic, unique, wait_for
from grpc_support import producer_pb2 as P, start_grpc


class SilentRegistry:
    """Accepts connections, reads what comes, answers nothing; release() closes them all."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/apis/ccompat/v7"
        self.conns, self.paths = [], []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(c)
            threading.Thread(target=self._read, args=(c,), daemon=True).start()

    def _read(self, c):
        try:
            first = c.recv(4096).decode(errors="replace").split("\r\n")[0]
            with self.lock:
                self.paths.append(first)
        except OSError:
            pass

    def asked(self, what):
        with self.lock:
            return any(what in p for p in self.paths)

    def release(self):
        with self.lock:
            for c in self.conns:
                c.close()
            self.conns = []

    def close(self):
        self.release()
        self.sock.close()


def start(sidecars, reg):
    return start_grpc(sidecars, args=(f"--schema_registry.url={reg.url}",
                                      "--schema_registry.timeout_ms=60000"))


def http_produce(sc, topic, sid, out):
    """POSTs one record naming schema sid; out gets (status, headers, body) or the error."""
    conn = http.client.HTTPConnection("127.0.0.1", sc.port, timeout=30)
    try:
        conn.request("POST", f"/v1/topics/{topic}/records",
                     json.dumps({"records": [{"value": {"a": 1}, "value_schema_id": sid}]}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        out["http"] = (r.status, dict(r.getheaders()), json.loads(r.read() or b"null"))
    except Exception as e:  # noqa: BLE001: what the client saw is the result
        out["http"] = e
    finally:
        conn.close()


def grpc_produce_future(sc, topic, sid):
    return sc.producer.Produce.future(P.ProduceRequest(records=[P.ProduceRecord(
        topic=topic, value_json='{"a": 1}', value_schema_id=sid)]), timeout=30)


def test_sigterm_answers_produces_waiting_for_the_registry(bootstrap, sidecars):
    topic = unique("regstop")
    create_topic(bootstrap, topic, 1)
    reg = SilentRegistry()
    sc = start(sidecars, reg)
    try:
        out = {}
        fut = grpc_produce_future(sc, topic, 41)
        t = threading.Thread(target=http_produce, args=(sc, topic, 42, out))
        t.start()
        wait_for(lambda: reg.asked("/schemas/ids/41") and reg.asked("/schemas/ids/42"), 10, 0.05,
                 "both produces waiting for the registry")
        time.sleep(0.3)
        t0 = time.time()
        rc = sc.stop(timeout=20)
        took = time.time() - t0
        t.join(10)
        try:
            fut.result(10)
            got = "OK"
        except grpc.RpcError as e:
            got = (e.code(), e.details())
        print(f"\nSIGTERM to exit: {took:.2f} s, exit {rc}; gRPC: {got}; HTTP: {out.get('http')}")
        assert rc == 0, sc.logs()
        assert took < 5, (took, sc.logs())
        assert got[0] == grpc.StatusCode.UNAVAILABLE and "shutting down" in got[1], got
        st, hdrs, body = out["http"]
        assert st == 503 and "Retry-After" in hdrs, out["http"]
        assert body["error"]["code"] == "UNAVAILABLE" and "shutting down" in \
            body["error"]["message"], body
    finally:
        reg.close()


@pytest.mark.parametrize("answer", [True, False], ids=["registry_answers", "registry_silent"])
def test_client_leaving_while_waiting_frees_the_produce(bootstrap, sidecars, answer):
    """Both clients leave while their produce waits; then the registry's answer (its
    connections closed: a failure) finds nothing to wake, or it never answers and SIGTERM
    comes: either way no crash, exit 0 at once, nothing leaked."""
    topic = unique("reggone")
    create_topic(bootstrap, topic, 1)
    reg = SilentRegistry()
    sc = start(sidecars, reg)
    try:
        fut = grpc_produce_future(sc, topic, 51)
        conn = http.client.HTTPConnection("127.0.0.1", sc.port, timeout=30)
        conn.request("POST", f"/v1/topics/{topic}/records",
                     json.dumps({"records": [{"value": {"a": 1}, "value_schema_id": 52}]}),
                     {"Content-Type": "application/json"})
        wait_for(lambda: reg.asked("/schemas/ids/51") and reg.asked("/schemas/ids/52"), 10, 0.05,
                 "both produces waiting for the registry")
        fut.cancel()
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        time.sleep(0.5)
        if answer:
            reg.release()
            time.sleep(1)
        st, body = sc.get("/healthz")
        assert st == 200, body
        t0 = time.time()
        rc = sc.stop(timeout=20)
        took = time.time() - t0
        print(f"\nafter the clients left: SIGTERM to exit {took:.2f} s, exit {rc}")
        assert rc == 0, sc.logs()
        assert took < 5, (took, sc.logs())
    finally:
        reg.close()
