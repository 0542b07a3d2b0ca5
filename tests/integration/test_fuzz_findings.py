"""Inputs the libFuzzer harnesses (tests/fuzz) found, each against the real binary: the
answer is the clear error, and the process stays up."""
import json
import os
import subprocess

from conftest import BIN, unique


def assert_error(resp, status, code, words):
    st, body = resp
    assert st == status, (st, body)
    assert body["error"]["code"] == code, body
    for w in words:
        assert w in body["error"]["message"], (w, body)


def test_topic_names_past_64_are_refused_not_written_past_the_array(bootstrap, sidecars):
    # fuzz_http_url: 64 names in one topic= parameter, then an empty topic=, wrote a 65th
    # pointer past the 64-entry array on the stack (UBSan: index 64 out of bounds); names
    # past 64 in comma lists were dropped without a word.
    sc = sidecars(["--groups.allowed=fz-*"])
    g = unique("fz")
    names = [f"t{i}" for i in range(64)]
    cases = [
        "topic=" + ",".join(names) + "&topic=",
        "topic=" + ",".join(names) + "&topic=,,",
        "topic=" + ",".join(names + ["t64", "t65"]),
        "&".join(f"topic={n}" for n in names[:32]) + "&topic=" + ",".join(names[32:] + ["x"]),
    ]
    for q in cases:
        assert_error(sc.get(f"/v1/groups/{g}/records?{q}&wait_ms=0"), 400, "INVALID_ARGUMENT",
                     ["at most 64 topics"])
    assert sc.get("/healthz")[0] == 200
    assert sc.proc.poll() is None


def test_print_config_shows_values_that_are_not_utf8():
    # fuzz_config: a flag value that is not UTF-8 made json_string fail, and --print-config
    # left the key out without a word. It is shown with the odd bytes as \xHH.
    out = subprocess.run([os.fsencode(BIN), b"--kafka.bootstrap.servers=b:9092",
                          b"--kafka.client.id=a\xffb", b"--groups.allowed=x\xfe*,y",
                          b"--kafka.\xe9t\xe9=1", b"--tls.cert_file=/etc/c\xe8rt.pem",
                          b"--tls.key_file=/k", b"--print-config"], capture_output=True, timeout=30)
    assert out.returncode == 0, out
    cfg = json.loads(out.stdout)
    assert cfg["kafka.client.id"] == "a\\xffb", cfg
    assert cfg["groups.allowed"] == ["x\\xfe*", "y"], cfg
    assert cfg["kafka.\\xe9t\\xe9"] == "1", cfg
    assert cfg["tls.cert_file"] == "/etc/c\\xe8rt.pem", cfg
    assert cfg["kafka.bootstrap.servers"] == "b:9092", cfg
