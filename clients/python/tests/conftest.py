"""Fixtures for the ksidecar Python library's tests: the real ksidecar binary (its Sidecar
starter is the integration suite's, loaded from tests/integration/conftest.py) against the
real broker of KSIDECAR_TEST_BOOTSTRAP, and commit checks read from the broker with kstool."""
import importlib.util
import pathlib
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("ksidecar_integration_conftest",
                                               ROOT / "tests" / "integration" / "conftest.py")
ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ic)

bootstrap = ic.bootstrap
sidecars = ic.sidecars
unique, wait_for, kstool, watermarks = ic.unique, ic.wait_for, ic.kstool, ic.watermarks
BIN = ic.BIN


def committed(bootstrap, group, topic, partitions):
    """{partition: committed offset} read from the broker (not from ksidecar)."""
    out = kstool("committed", "-b", bootstrap, "-t", topic, "-g", group, "-p", str(partitions))
    res = {}
    for line in out.split("\n"):
        cols = line.split()
        if len(cols) >= 2:
            res[int(cols[0])] = int(cols[1])
    return res


def wait_committed_end(bootstrap, group, topic, partitions, timeout=60):
    """Waits until every partition's committed offset is its end offset; returns both. An
    empty partition, which nothing commits, counts as committed at 0."""
    end = watermarks(bootstrap, topic)
    got = {}

    def done():
        nonlocal got
        got = committed(bootstrap, group, topic, partitions)
        got = {p: 0 if off < 0 and end.get(p) == 0 else off for p, off in got.items()}
        return all(got.get(p) == hi for p, hi in end.items())

    try:
        wait_for(done, timeout, 0.5, f"committed offsets of {group} == end offsets {end}")
    except AssertionError:
        raise AssertionError(f"committed {got} != end {end}") from None
    return got, end


@pytest.fixture
def topic(bootstrap):
    """make(partitions, n, size=0, keys=0): a new topic with n records produced."""
    made = []

    def make(partitions, n, size=0, keys=0):
        t = unique("pyclient")
        ic.create_topic(bootstrap, t, partitions)
        if n:
            ic.produce(bootstrap, t, n, partitions=partitions, size=size, keys=keys)
        made.append(t)
        return t

    yield make
    for t in made:
        subprocess.run([ic.KSTOOL, "delete", "-b", bootstrap, "-t", t], capture_output=True,
                       timeout=60)


def restart_on_same_ports(bootstrap, old, tmp_path, args=()):
    """A new ksidecar on old's HTTP and gRPC ports (old must be gone)."""
    ports = iter([old.port, old.grpc_port])
    orig = ic.free_port
    ic.free_port = lambda: next(ports)
    try:
        return ic.Sidecar(bootstrap, args=args, tmp_path=tmp_path)
    finally:
        ic.free_port = orig


class Timer:
    def __init__(self, what):
        self.what = what

    def __enter__(self):
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.s = time.monotonic() - self.t0
        print(f"{self.what}: {self.s:.2f} s")
