"""The ksidecar wheel as a user installs it, in a fresh venv that holds only the wheel and its
dependencies (tests/clients/python.sh makes it): the C extension imports and runs the
per-record path, and a Subscriber takes keyed records from a real ksidecar, acks each, and
closes with every ack answered. Standard library and ksidecar only.

    python python_wheel_smoke.py BOOTSTRAP KSIDECAR_BIN KSTOOL_BIN

Exits non-zero (an assertion or an exception) when any of it fails."""
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import ksidecar
from ksidecar import _accel, _speedups

N = 300


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    boot, binary, kstool = sys.argv[1:4]
    assert _accel.active() == "c", "the wheel's package does not run the C extension"
    topic = f"pywheel-{uuid.uuid4().hex[:8]}"
    subprocess.run([kstool, "create", "-b", boot, "-t", topic, "-p", "2"], check=True,
                   capture_output=True, timeout=120)
    subprocess.run([kstool, "produce", "-b", boot, "-t", topic, "-n", str(N), "-p", "2",
                    "-k", "10"], check=True, capture_output=True, timeout=120)
    gport, hport = free_port(), free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([binary, f"--kafka.bootstrap.servers={boot}",
                             f"--grpc.listen=127.0.0.1:{gport}",
                             f"--http.listen=127.0.0.1:{hport}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                sys.exit(f"python_wheel_smoke: ksidecar exited with {proc.returncode}:\n"
                         f"{log.read()[-3000:].decode(errors='replace')}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{hport}/healthz", timeout=1)
                break
            except urllib.error.HTTPError:
                break  # it answers (503 while Kafka is being probed is fine)
            except OSError:
                assert time.monotonic() < end, "ksidecar did not answer /healthz in 60 s"
                time.sleep(0.1)
        seen = set()
        sub = ksidecar.Subscriber(f"127.0.0.1:{gport}", f"g-{topic}", [topic])
        for msg in sub:
            assert type(msg._rec) is _speedups.Record, type(msg._rec)
            assert msg.key is not None and msg._ch is not None  # keyed: ordering chains
            seen.add((msg.partition, msg.offset))
            msg.ack()
            if len(seen) == N:
                break
        assert sub.close(timeout=30), "not every ack was answered"
        print(f"python_wheel_smoke: {N} keyed records taken and acked through the C extension "
              f"({_speedups.__file__})")
    finally:
        proc.terminate()
        proc.wait(30)
        subprocess.run([kstool, "delete", "-b", boot, "-t", topic], capture_output=True,
                       timeout=120)


if __name__ == "__main__":
    main()
