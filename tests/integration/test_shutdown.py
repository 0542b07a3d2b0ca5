"""Stopping ksidecar while its groups are still joining exits cleanly."""
import subprocess
import time

from conftest import BIN, create_topic, free_port, unique, wait_for
import urllib.request


def test_sigterm_while_groups_are_joining_exits_cleanly(bootstrap):
    """librdkafka 2.0.2 aborts (its #4312) when a cooperative-sticky consumer that joined
    but never got an assignment is destroyed; ksidecar must still exit 0 on SIGTERM at any
    moment of a join."""
    topic = unique("tjoin")
    create_topic(bootstrap, topic, 4)
    codes, errs = [], []
    for i in range(16):
        port, gport = free_port(), free_port()
        p = subprocess.Popen([BIN, f"--kafka.bootstrap.servers={bootstrap}",
                              f"--http.listen=127.0.0.1:{port}",
                              f"--grpc.listen=127.0.0.1:{gport}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def up():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                              timeout=1).status == 200
            except OSError:
                return p.poll() is not None
        wait_for(up, 20, 0.05, "ksidecar up")
        for _ in range(3):  # three groups, each starting its join
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/groups/{unique('gjoin')}/records"
                                   f"?topic={topic}&wait_ms=0", timeout=30).read()
        time.sleep(0.02 * i)  # stop at a different point of the joins each round
        p.terminate()
        rc = p.wait(60)
        err = p.stderr.read().decode(errors="replace")
        assert "Assertion" not in err, err[-2000:]
        codes.append(rc)
        if rc != 0:
            errs.append(f"round {i}, exit {rc}:\n{err[-3000:]}")
    print("\nexit codes:", codes)
    assert codes == [0] * len(codes), (codes, "\n".join(errs))
