"""docker/ksidecar.service's ExecStart line, run as written (the binary's and the config's
paths substituted) under a notify socket of the test's own: READY=1 once the edges listen,
reload on SIGHUP (its ExecReload: RELOADING=1 with MONOTONIC_USEC, then READY=1), STOPPING=1
when SIGTERM starts the drain, exit 0. And docker/example/consumer.py, the compose file's
example service, against the real binary."""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from conftest import BIN, ROOT, free_port, unique, wait_for

UNIT = ROOT / "docker" / "ksidecar.service"


def unit_line(key):
    lines = [ln for ln in UNIT.read_text().splitlines() if ln.startswith(key + "=")]
    assert len(lines) == 1, f"{UNIT} has {len(lines)} {key}= lines"
    return lines[0].split("=", 1)[1]


def recv_states(sock, want, timeout):
    """Datagrams from ksidecar until one holds the line want; returns them all."""
    got = []
    sock.settimeout(timeout)
    while not any(want in d.split("\n") for d in got):
        try:
            got.append(sock.recv(4096).decode())
        except socket.timeout:
            raise AssertionError(f"no {want} on the notify socket within {timeout} s; got {got}")
    return got


def test_unit_exec_start_notifies_ready_then_stopping(bootstrap, tmp_path):
    http, grpc = free_port(), free_port()
    conf = tmp_path / "ksidecar.json"
    conf.write_text(json.dumps({"kafka": {"bootstrap.servers": bootstrap},
                                "http": {"listen": f"127.0.0.1:{http}"},
                                "grpc": {"listen": f"127.0.0.1:{grpc}"}}))
    argv = [a.replace("/usr/local/bin/ksidecar", BIN)
             .replace("/etc/ksidecar/ksidecar.json", str(conf))
            for a in shlex.split(unit_line("ExecStart"))]
    assert argv[0] == BIN, f"ExecStart does not start /usr/local/bin/ksidecar: {argv}"
    assert unit_line("Type") == "notify"
    assert unit_line("ExecReload") == "/bin/kill -HUP $MAINPID"

    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KSIDECAR_")}
    env["NOTIFY_SOCKET"] = path
    log = open(tmp_path / "ksidecar.log", "wb")
    p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        got = recv_states(sock, "READY=1", 60)
        # Ready means the edges listen: /healthz answers at once (503 while the first
        # metadata probe of Kafka has not come back).
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=10).close()
        except urllib.error.HTTPError as e:
            assert e.code == 503, e
        assert not any("STOPPING=1" in d for d in got), got

        before = time.monotonic_ns() // 1000
        p.send_signal(signal.SIGHUP)  # ExecReload: ksidecar carries on
        reload = recv_states(sock, "READY=1", 30)
        after = time.monotonic_ns() // 1000
        got += reload
        assert p.poll() is None, "SIGHUP stopped ksidecar"
        # systemd 253 (Type=notify-reload) takes a reload as begun from RELOADING=1 with
        # MONOTONIC_USEC, CLOCK_MONOTONIC in microseconds, in the same datagram.
        lines = [d.split("\n") for d in reload]
        begun = [i for i, ln in enumerate(lines) if "RELOADING=1" in ln]
        assert len(begun) == 1 and begun[0] < len(lines) - 1, reload  # before the READY=1
        usec = [x.split("=", 1)[1] for x in lines[begun[0]] if x.startswith("MONOTONIC_USEC=")]
        assert len(usec) == 1 and usec[0].isdigit(), reload
        assert before <= int(usec[0]) <= after, (before, usec, after)

        p.send_signal(signal.SIGTERM)
        got += recv_states(sock, "STOPPING=1", 30)
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        sock.close()
        log.close()
    print("notify datagrams:", got)
    text = (tmp_path / "ksidecar.log").read_text()
    assert "sd_notify" not in text, text[-2000:]


def test_compose_example_service_consumes_through_ksidecar(bootstrap, tmp_path):
    http = free_port()
    log = open(tmp_path / "ksidecar.log", "wb")
    p = subprocess.Popen([BIN, f"--kafka.bootstrap.servers={bootstrap}",
                          f"--http.listen=127.0.0.1:{http}", "--grpc.listen="],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        env = {**os.environ, "KSIDECAR_URL": f"http://127.0.0.1:{http}",
               "EXAMPLE_TOPIC": unique("example"), "EXAMPLE_GROUP": unique("gexample"),
               "EXAMPLE_RECORDS": "10", "EXAMPLE_ONCE": "1"}
        out = subprocess.run([sys.executable, str(ROOT / "docker" / "example" / "consumer.py")],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert "acked 10 records" in out.stdout, out.stdout[-2000:]
        keys = set(re.findall(r" (order-\d+):", out.stdout))
        assert keys == {f"order-{i}" for i in range(10)}, out.stdout
    finally:
        p.terminate()
        assert p.wait(60) == 0
        log.close()
