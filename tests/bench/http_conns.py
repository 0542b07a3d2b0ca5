"""Bench: the HTTP edge with many connections held open (half-sent requests). For 0, 1,000
and 5,000 held connections prints ksidecar's RSS and thread count, the latency of new
connections' GET /healthz on the API listener from another address, and keep-alive
throughput of 8 clients. Asserts nothing about speed.

    python3 tests/bench/http_conns.py BIN BOOTSTRAP

Used to choose libmicrohttpd's threading model (results in tests/bench/HISTORY.md)."""
import http.client
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/integration")
from conftest import free_port  # noqa: E402
from test_http_limits import open_many  # noqa: E402


def status_field(pid, name):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return -1


def hold(port, n):
    socks = open_many(port, n, b"GET /v1/groups HTTP/1.1\r\nHost: x\r\n")
    time.sleep(1)
    return socks


def latency(port, n=200):
    out = []
    for _ in range(n):
        t = time.monotonic()
        s = socket.socket()
        s.settimeout(10)
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while s.recv(4096):
            pass
        s.close()
        out.append((time.monotonic() - t) * 1000)
    out.sort()
    return statistics.median(out), out[int(len(out) * 0.99) - 1], out[-1]


def throughput(port, clients=8, secs=3.0):
    counts = [0] * clients
    stop = time.monotonic() + secs

    def run(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                       source_address=("127.0.0.2", 0))
        while time.monotonic() < stop:
            c.request("GET", "/healthz")
            c.getresponse().read()
            counts[i] += 1
        c.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / secs


def main():
    binp, bootstrap = sys.argv[1], sys.argv[2]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 12000), hard))
    port = free_port()
    proc = subprocess.Popen([binp, f"--kafka.bootstrap.servers={bootstrap}",
                             f"--http.listen=127.0.0.1:{port}", "--grpc.listen=",
                             "--http.max_connections=6000", "--http.max_connections_per_client=0",
                             "--http.header_timeout_ms=600000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        print(f"{'held':>6} {'RSS kB':>8} {'threads':>7} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'max ms':>7} {'req/s':>8}")
        held = []
        for n in (0, 1000, 5000):
            held += hold(port, n - len(held))
            p50, p99, mx = latency(port)
            rps = throughput(port)
            print(f"{n:>6} {status_field(proc.pid, 'VmRSS'):>8} "
                  f"{status_field(proc.pid, 'Threads'):>7} {p50:>7.2f} {p99:>7.2f} {mx:>7.2f} "
                  f"{rps:>8.0f}", flush=True)
        for s in held:
            s.close()
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
