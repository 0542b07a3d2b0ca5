"""Fixtures for integration tests: a real Kafka broker (started by tests/kafka/kafka.sh),
the real ksidecar binary, and helpers that check commits from outside ksidecar."""
import http.server
import json
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("KSIDECAR_TEST_BIN", str(ROOT / "build" / "ksidecar"))
KSTOOL = os.environ.get("KSIDECAR_TEST_KSTOOL", str(ROOT / "build" / "kstool"))
KAFKA_SH = str(ROOT / "tests" / "kafka" / "kafka.sh")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def bootstrap():
    b = os.environ.get("KSIDECAR_TEST_BOOTSTRAP")
    if not b:
        pytest.fail("KSIDECAR_TEST_BOOTSTRAP is not set: run the suite with scripts/test.sh, "
                    "which starts a real Kafka broker")
    return b


def kstool(*args):
    out = subprocess.run([KSTOOL, *args], check=True, capture_output=True, text=True, timeout=300)
    return out.stdout


def create_topic(bootstrap, topic, partitions):
    kstool("create", "-b", bootstrap, "-t", topic, "-p", str(partitions))


def produce(bootstrap, topic, n, partitions=1, keys=0, size=0, binary=False):
    args = ["produce", "-b", bootstrap, "-t", topic, "-n", str(n), "-p", str(partitions)]
    if keys:
        args += ["-k", str(keys)]
    if size:
        args += ["-s", str(size)]
    if binary:
        args += ["-x"]
    kstool(*args)


def watermarks(bootstrap, topic):
    """{partition: high watermark}, as the broker reports it."""
    out = kstool("watermarks", "-b", bootstrap, "-t", topic)
    res = {}
    for line in out.split("\n"):
        if line.strip():
            p, _lo, hi = line.split()
            res[int(p)] = int(hi)
    return res


def describe_group(bootstrap, group, topic):
    """{partition: (committed offset or None, log-end offset)} from Kafka's own
    ConsumerGroupCommand --describe, not from ksidecar."""
    out = subprocess.run([KAFKA_SH, "groups", "--bootstrap-server", bootstrap, "--describe",
                          "--group", group], capture_output=True, text=True, timeout=120)
    res = {}
    for line in out.stdout.split("\n"):
        cols = line.split()
        if len(cols) >= 5 and cols[0] == group and cols[1] == topic:
            cur = None if cols[3] == "-" else int(cols[3])
            end = None if cols[4] == "-" else int(cols[4])
            res[int(cols[2])] = (cur, end)
    return res


def wait_for(pred, timeout, interval=0.5, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


# Short group timeouts for tests; kafka_timeouts=False leaves ksidecar's own defaults.
TEST_KAFKA_TIMEOUTS = ("--kafka.session.timeout.ms=6000", "--kafka.heartbeat.interval.ms=500")


class Sidecar:
    """One real ksidecar process, driven over HTTP."""

    def __init__(self, bootstrap, args=(), env=None, tmp_path=None, kafka_timeouts=True):
        self.port = free_port()
        self.grpc_port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = (tmp_path or pathlib.Path("/tmp")) / f"ksidecar-{self.port}.log"
        cmd = [BIN, f"--kafka.bootstrap.servers={bootstrap}", f"--http.listen=127.0.0.1:{self.port}",
               f"--grpc.listen=127.0.0.1:{self.grpc_port}",
               "--commit.interval_ms=200", *(TEST_KAFKA_TIMEOUTS if kafka_timeouts else ()), *args]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        wait_for(self._healthy, 20, 0.1, "ksidecar /healthz")

    def _healthy(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"ksidecar exited with {self.proc.returncode}:\n{self.logs()}")
        try:
            # Up means answering with Kafka probed once: /healthz is 503 while Kafka is
            # unreachable, and also until the first probe has ended.
            st, body = self.get("/healthz")
            return st == 200 or (st == 503 and "not been probed" not in str(body))
        except OSError:
            return False

    def logs(self):
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def request(self, method, path, body=None, raw=None, timeout=90):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body=None, raw=None):
        return self.request("POST", path, body=body, raw=raw)

    def fetch(self, group, topics, max=100, wait_ms=2000):
        if isinstance(topics, str):
            topics = [topics]
        q = "&".join(f"topic={t}" for t in topics)
        st, body = self.get(f"/v1/groups/{group}/records?{q}&max={max}&wait_ms={wait_ms}")
        assert st == 200, (st, body)
        return body["records"]

    def ack(self, group, ids):
        return self.post(f"/v1/groups/{group}/acks", {"ack_ids": list(ids)})

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"ksidecar did not stop within {timeout}s:\n{self.logs()}")
        self.log.close()
        return self.proc.returncode


def started_processes(make):
    """Fixture body: yields a starter for processes made by `make`, and kills every one
    still running at teardown."""
    started = []

    def start(*args, **kw):
        s = make(*args, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        s.log.close()


@pytest.fixture
def sidecars(bootstrap, tmp_path):
    """Starts ksidecar processes; every one still running is killed at teardown."""
    yield from started_processes(
        lambda args=(), env=None, **kw: Sidecar(bootstrap, args=args, env=env, tmp_path=tmp_path,
                                                **kw))


def fetch_all(sc, group, topic, expect, timeout=120, max=1000):
    """Fetches until `expect` records came, or until the timeout. Returns the records."""
    got = []
    deadline = time.time() + timeout
    while len(got) < expect and time.time() < deadline:
        got += sc.fetch(group, topic, max=max, wait_ms=1000)
    return got


def drain(sc, group, topic, quiet_ms=3000, timeout=60, max=1000):
    """Fetches until no record has come for quiet_ms. Returns what came."""
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        recs = sc.fetch(group, topic, max=max, wait_ms=quiet_ms)
        if not recs and got:
            break
        got += recs
    return got


class Recorder:
    """An HTTP server on a free loopback port that keeps each POST as (path, headers, body) in
    .bodies and answers .status with reply (an app a push goes to, an OTLP endpoint)."""

    def __init__(self, status=200, reply=b""):
        self.lock = threading.Lock()
        self.bodies = []
        self.status = status
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with rec.lock:
                    rec.bodies.append((self.path, dict(self.headers.items()), body))
                self.send_response(rec.status)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def requests(self, path):
        """(headers, body) of each POST to path so far, in order."""
        with self.lock:
            return [(h, b) for p, h, b in self.bodies if p == path]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
