"""A bad token and a bad target give clear typed errors; TLS and mTLS work with the right
certificates and fail clearly without; the Publisher's records arrive as produced."""
import hashlib
import json
import subprocess
import time

import pytest

import ksidecar
from conftest import BIN, ic, unique, wait_committed_end


def test_bad_token_is_an_authentication_error(bootstrap, sidecars, topic, tmp_path):
    t = topic(1, 3)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [
        {"sha256": hashlib.sha256(b"s3cret").hexdigest(), "groups": ["*"], "consume": ["*"],
         "produce": ["*"]},
        {"sha256": hashlib.sha256(b"narrow").hexdigest(), "groups": ["*"], "consume": ["other"],
         "produce": []}]}))
    sc = sidecars(args=[f"--auth.tokens_file={tokens}"])
    tgt = f"127.0.0.1:{sc.grpc_port}"
    g = unique("g")
    for token in ("wrong", None):
        with pytest.raises(ksidecar.AuthenticationError) as ei:
            ksidecar.Subscriber(tgt, g, [t], token=token, connect_timeout_s=10)
        print(f"token={token!r}:", ei.value)
        assert ei.value.code == "UNAUTHENTICATED" and tgt in str(ei.value)
        assert "token" in str(ei.value)
    with pytest.raises(ksidecar.AuthenticationError) as ei:
        ksidecar.Publisher(tgt, token="wrong").publish(t, b"x")
    print("publisher:", ei.value)
    # A valid token whose consume scope leaves the topic out: the stream's error, raised
    # by the iterator, names the topic and the scope.
    sub = ksidecar.Subscriber(tgt, g, [t], token="narrow")
    with pytest.raises(ksidecar.PermissionDeniedError) as ei:
        next(iter(sub))
    print("narrow token:", ei.value)
    assert t in str(ei.value) and "consume" in str(ei.value)
    sub.close()
    # The right token works, so the errors above were about the token.
    with ksidecar.Subscriber(tgt, g, [t], token="s3cret") as sub:
        n = 0
        for m in sub:
            m.ack()
            n += 1
            if n == 3:
                break
    wait_committed_end(bootstrap, g, t, 1)


def test_bad_target_is_a_connect_error():
    port = ic.free_port()  # nothing listens there
    for tgt in (f"127.0.0.1:{port}", "no-such-host.invalid:50051"):
        t0 = time.monotonic()
        with pytest.raises(ksidecar.ConnectError) as ei:
            ksidecar.Subscriber(tgt, "g", ["t"], connect_timeout_s=2)
        print(f"{tgt} after {time.monotonic() - t0:.2f} s:", ei.value)
        assert tgt in str(ei.value) and ei.value.code == "UNAVAILABLE"
    with pytest.raises(ksidecar.ConnectError):
        ksidecar.Publisher(f"127.0.0.1:{port}", timeout_s=2).publish("t", b"x")
    with pytest.raises(ksidecar.InvalidArgumentError):
        ksidecar.Subscriber(f"127.0.0.1:{port}", "g", "not-a-list")


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"openssl {' '.join(args)}: {r.stderr}"


def _pki(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, in d."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=pyclient test CA", cwd=d)
    for name, cn, ext in (("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                          ("client", "pyclient", "extendedKeyUsage=clientAuth")):
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out",
                 f"{name}.pem", cwd=d)


def test_tls_and_mtls(bootstrap, topic, tmp_path):
    _pki(tmp_path)
    t = topic(1, 2)
    gport, hport = ic.free_port(), ic.free_port()
    tgt = f"127.0.0.1:{gport}"
    log = open(tmp_path / "ksidecar.log", "wb")
    proc = subprocess.Popen(
        [BIN, f"--kafka.bootstrap.servers={bootstrap}", f"--grpc.listen={tgt}",
         f"--http.listen=127.0.0.1:{hport}", f"--tls.cert_file={tmp_path}/server.pem",
         f"--tls.key_file={tmp_path}/server.key", f"--tls.client_ca_file={tmp_path}/ca.pem",
         *ic.TEST_KAFKA_TIMEOUTS], stdout=log, stderr=subprocess.STDOUT)
    try:
        mtls = ksidecar.TLS(root_certs=tmp_path / "ca.pem", cert_chain=tmp_path / "client.pem",
                            private_key=tmp_path / "client.key")
        g = unique("g")
        with ksidecar.Subscriber(tgt, g, [t], tls=mtls, connect_timeout_s=20) as sub:
            got = []
            for m in sub:
                got.append(m.ack_with_result())
                if len(got) == 2:
                    break
            assert [f.result(30).status for f in got] == [ksidecar.AckStatus.ACCEPTED] * 2
        for bad in (None, ksidecar.TLS(root_certs=tmp_path / "ca.pem")):  # plaintext; no client cert
            with pytest.raises(ksidecar.ConnectError) as ei:
                ksidecar.Subscriber(tgt, g, [t], tls=bad, connect_timeout_s=2)
            print("tls" if bad else "plaintext", "->", ei.value)
    finally:
        proc.kill()
        proc.wait()
        log.close()


def test_publisher_records_arrive(bootstrap, sidecars, topic):
    t = topic(3, 0)
    sc = sidecars()
    tgt = f"127.0.0.1:{sc.grpc_port}"
    with ksidecar.Publisher(tgt) as pub:
        res = pub.produce([ksidecar.Record(t, f"v{i}", key=f"k{i}", headers=(("h", "x"),))
                           for i in range(20)])
        assert all(r.ok for r in res) and len(res) == 20, res
        one = pub.publish(t, b"last", key=None, partition=2)
        assert one.partition == 2
        with pytest.raises(ksidecar.ProduceError) as ei:
            pub.publish(t, b"x", partition=99)
        print("bad partition:", ei.value)
    got = {}
    g = unique("g")
    with ksidecar.Subscriber(tgt, g, [t]) as sub:
        for m in sub:
            got[m.value] = m
            m.ack()
            if len(got) == 21:
                break
    assert got[b"v7"].key == b"k7" and got[b"v7"].headers == [("h", b"x")]
    assert got[b"last"].key is None and got[b"last"].partition == 2
    wait_committed_end(bootstrap, g, t, 3)
