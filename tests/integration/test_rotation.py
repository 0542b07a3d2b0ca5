"""Credentials rotated without a restart, through the real binary against the real broker:
the tokens file replaced while streams of two tokens run (the removed token's gRPC and HTTP
streams end, the kept one's carry on), a broken new file refused with the old one left in
force, SIGHUP as the other trigger, the tables replaced freed once nothing holds them, a
renewed server certificate on new handshakes of both edges, and a new client CA checking new
connections."""
import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import ssl
import threading
import time

import grpc
import pytest

from conftest import create_topic, produce, unique, wait_for
from grpc_support import (_openssl, bearer, consumer_pb2, consumer_pb2_grpc, make_certs, open_msg,
                          rpc_code)
from test_grpc import fetch, secure_sidecars, streams  # noqa: F401 (fixtures)
from test_http_stream import Lines, open_stream

SC = grpc.StatusCode


def replace_file(path, text):
    """Writes a new version of path as an orchestrator does: a new file renamed over it."""
    tmp = f"{path}.new"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def tokens_text(entries):
    return json.dumps({"tokens": [
        {"sha256": hashlib.sha256(t.encode()).hexdigest(), "groups": ["*"], "consume": ["*"]}
        for t in entries]})


def scoped_tokens_text(entries):
    """A tokens file of (token, consume patterns) entries, each with every group."""
    return json.dumps({"tokens": [
        {"sha256": hashlib.sha256(t.encode()).hexdigest(), "groups": ["*"], "consume": consume}
        for t, consume in entries]})


def records_from(stream, n, timeout=60):
    got = []
    while len(got) < n:
        r = stream.get(timeout)
        assert r is not None, f"{len(got)} of {n} records within {timeout} s"
        if r.WhichOneof("kind") == "batch":
            got += list(r.batch.records)
    return got


def test_removed_token_streams_end_kept_ones_carry_on(bootstrap, secure_sidecars, streams,
                                                      tmp_path):
    topic, g = unique("trot"), unique("grot")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 4)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(tokens_text(["keep", "drop"]))
    sc = secure_sidecars(tokens_file=str(tokens), token="keep")
    keep = streams(sc.consumer, open_msg(g, topic, records=1000), metadata=bearer("keep"))
    drop = streams(sc.consumer, open_msg(g, topic, records=1000), metadata=bearer("drop"))
    conn, resp = open_stream(sc, f"/v1/groups/{g}/stream?topic={topic}",
                             {"Authorization": "Bearer drop"})
    assert resp.status == 200
    http_drop = Lines(resp)
    wait_for(lambda: len(sc.get(f"/v1/groups/{g}")[1].get("subscribers", [])) == 3, 30, 0.2,
             "three subscribers")

    # A broken new file is refused; both tokens still work and no stream ends.
    replace_file(tokens, '{"tokens": [{"sha256": "not hex"}]}')
    wait_for(lambda: "the new tokens file is refused" in sc.logs(), 20, 0.2, "the refusal")
    assert "tokens[0].sha256 is not 64 hex characters" in sc.logs()
    assert sc.request("GET", f"/v1/groups/{g}", token="drop")[0] == 200
    assert not drop.done.is_set() and not keep.done.is_set()

    # A long-poll of "drop" on a second group, waiting when "drop" goes: no record reaches it.
    topic2, g2 = unique("trot2"), unique("grot2")
    create_topic(bootstrap, topic2, 1)
    polled = {}

    def long_poll():
        polled["answer"] = sc.request(
            "GET", f"/v1/groups/{g2}/records?topic={topic2}&max=10&wait_ms=25000", token="drop")

    wait_for(lambda: sc.request("GET", f"/v1/groups/{g2}/records?topic={topic2}&wait_ms=0",
                                token="drop")[0] == 200, 30, 0.2, "the second group joined")
    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(1)  # parked in the group loop

    # The file without "drop": its streams end, "keep"'s carries on.
    replace_file(tokens, tokens_text(["keep"]))
    wait_for(lambda: sc.request("GET", f"/v1/groups/{g}", token="drop")[0] == 401, 20, 0.2,
             "drop refused")
    produce(bootstrap, topic2, 2)
    poller.join(40)
    st, body = polled["answer"]
    assert st == 401 and "removed from the tokens file" in body["error"]["message"], body
    # Its records went back uncounted: "keep" gets both, at attempt 1.
    got = []
    wait_for(lambda: got.extend(sc.request(
        "GET", f"/v1/groups/{g2}/records?topic={topic2}&max=10&wait_ms=1000",
        token="keep")[1]["records"]) or len(got) >= 2, 30, 0.2, "the records for keep")
    assert sorted(r["offset"] for r in got) == [0, 1] and {r["attempt"] for r in got} == {1}, got
    assert drop.wait_closed(30) == SC.UNAUTHENTICATED
    assert "removed from the tokens file" in drop.error.details()
    tail = []
    while (line := http_drop.next(timeout=30)) is not None:
        tail.append(line)
    errors = [json.loads(t)["error"] for t in tail if t.strip() and "error" in json.loads(t)]
    assert errors and errors[-1]["code"] == "UNAUTHENTICATED", tail
    conn.close()
    st, body = sc.request("GET", f"/v1/groups/{g}", token="drop")
    assert st == 401, body
    assert not keep.done.is_set()
    produce(bootstrap, topic, 4)
    assert len(records_from(keep, 1)) >= 1  # it still receives what the group delivers
    assert not keep.done.is_set()

    # SIGHUP reloads too: "drop" is back.
    tokens.write_text(tokens_text(["keep", "drop"]))
    sc.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: sc.request("GET", f"/v1/groups/{g}", token="drop")[0] == 200, 20, 0.2,
             "drop accepted after SIGHUP")
    keep.cancel()
    assert sc.stop() == 0


def test_parked_fetches_of_revoked_tokens_get_no_records(bootstrap, secure_sidecars, tmp_path):
    """A unary Fetch already waiting when a reload removes its token (or narrows its scopes)
    ends with the error the HTTP long-poll gives, and its records go back counting no
    attempt: another caller then gets them at attempt 1. A long-poll whose scopes narrowed
    is refused the same way."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(scoped_tokens_text([("keep", ["*"]), ("drop", ["*"]), ("narrow", ["*"])]))
    sc = secure_sidecars(tokens_file=str(tokens), token="keep")
    # case: (token, edge, what it ends with, words of its message)
    cases = {"grpc-drop": ("drop", "grpc", SC.UNAUTHENTICATED, "was removed from the tokens file"),
             "grpc-narrow": ("narrow", "grpc", SC.PERMISSION_DENIED, "narrowed the scopes"),
             "http-narrow": ("narrow", "http", 403, "narrowed the scopes")}
    where = {case: (unique(f"tf{case}"), unique(f"gf{case}")) for case in cases}
    for case, (topic, g) in where.items():
        create_topic(bootstrap, topic, 1)
        fetch(sc.consumer, g, topic, wait_ms=0, metadata=bearer(cases[case][0]))  # its group
        wait_for(lambda: [p for p in sc.request("GET", f"/v1/groups/{g}")[1].get(
            "partitions", []) if p["state"] == "ACTIVE"], 30, 0.2, f"{g} assigned")
    answers = {}

    def long_fetch(case):
        (topic, g), (tok, edge) = where[case], cases[case][:2]
        if edge == "http":
            st, body = sc.request("GET", f"/v1/groups/{g}/records?topic={topic}&max=10"
                                  "&wait_ms=25000", token=tok)
            answers[case] = (st, body["error"]["message"] if st != 200 else body)
            return
        try:
            answers[case] = ("records", fetch(sc.consumer, g, topic, max=10, wait_ms=25000,
                                              metadata=bearer(tok)))
        except grpc.RpcError as e:
            answers[case] = (e.code(), e.details())

    pollers = [threading.Thread(target=long_fetch, args=(case,)) for case in cases]
    for t in pollers:
        t.start()
    wait_for(lambda: all(any(s.get("waiting") for s in sc.request(
        "GET", f"/v1/groups/{g}")[1].get("subscribers", [])) for _, g in where.values()),
        20, 0.2, "every fetch parked")

    # "drop" leaves the file and "narrow" may consume no topic of the test any more.
    tokens.write_text(scoped_tokens_text([("keep", ["*"]), ("narrow", ["other-*"])]))
    sc.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: sc.request("GET", "/v1/groups", token="drop")[0] == 401, 20, 0.2,
             "drop refused")
    for topic, _ in where.values():
        produce(bootstrap, topic, 2)
    for t in pollers:
        t.join(40)
    for case, (_, _, code, words) in cases.items():
        got = answers[case]
        assert got[0] == code and words in got[1] and "go back to the group" in got[1], got
    # Their records went back uncounted: "keep" gets them, at attempt 1.
    for topic, g in where.values():
        got = []
        wait_for(lambda: got.extend(fetch(sc.consumer, g, topic, max=10, wait_ms=1000,
                                          metadata=bearer("keep"))) or len(got) >= 2,
                 30, 0.2, f"the records of {topic} for keep")
        assert sorted(r.offset for r in got) == [0, 1], got
        assert {r.attempt for r in got} == {1}, got
    assert sc.stop() == 0


def test_revoked_stream_drops_its_queued_batches(bootstrap, secure_sidecars, tmp_path):
    """A Subscribe stream a reload ends sends none of the batches queued behind a client that
    does not read: it ends UNAUTHENTICATED after what was already on its way, and the records
    it never sent go back counting no attempt."""
    n, size = 3000, 1000
    topic, g = unique("tqueued"), unique("gqueued")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, n, size=size)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(tokens_text(["keep", "drop"]))
    sc = secure_sidecars(tokens_file=str(tokens), token="keep",
                         args=("--grpc.stream_stall_ms=600000",
                               "--grpc.stream_queue_messages=1000",
                               "--grpc.max_message_bytes=65536"))
    # Messages of about 48 records (grpc.max_message_bytes), and a client that reads none
    # until the end, with a small window that does not grow: the server's send queue fills
    # behind the one send in flight.
    ch = grpc.insecure_channel(sc.grpc_target, options=[("grpc.http2.bdp_probe", 0),
                                                        ("grpc.http2.lookahead_bytes", 65536)])
    stub = consumer_pb2_grpc.ConsumerStub(ch)
    stop = threading.Event()

    def requests():
        yield consumer_pb2.SubscribeRequest(open=open_msg(g, topic, records=n))
        stop.wait(120)

    call = stub.Subscribe(requests(), metadata=bearer("drop"), timeout=120)
    # Every record is leased to the stream: a few messages on their way, the rest queued.
    wait_for(lambda: sum(p["in_flight"] for p in sc.request("GET", f"/v1/groups/{g}")[1].get(
        "partitions", [])) == n, 60, 0.2, "every record leased to the stream")
    tokens.write_text(tokens_text(["keep"]))
    sc.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "removed from the tokens file" in sc.logs(), 20, 0.2, "the stream ended")
    got = []
    with pytest.raises(grpc.RpcError) as e:
        for r in call:
            if r.WhichOneof("kind") == "batch":
                got += [x.offset for x in r.batch.records]
    stop.set()
    assert e.value.code() == SC.UNAUTHENTICATED, e.value
    assert "removed from the tokens file" in e.value.details()
    assert len(got) == len(set(got)) and len(got) < n, len(got)  # the queued ones never went
    # Every record comes back to "keep"; those the stream never sent at attempt 1 (those on
    # their way when it ended went back uncounted too, as the stream's leases do).
    back = {}

    def fetch_and_ack():
        recs = fetch(sc.consumer, g, topic, max=1000, wait_ms=1000, metadata=bearer("keep"))
        back.update({r.offset: r.attempt for r in recs})
        if recs:  # within the subscriber's credits
            sc.consumer.Ack(consumer_pb2.AckRequest(group=g, ack_ids=[r.ack_id for r in recs]),
                            metadata=bearer("keep"), timeout=30)
        return len(back) >= n
    wait_for(fetch_and_ack, 90, 0, "every record for keep")
    assert sorted(back) == list(range(n))
    sent = set(got)
    assert {a for o, a in back.items() if o not in sent} == {1}, back
    assert {a for o, a in back.items() if o in sent} <= {1, 2}, back
    ch.close()
    assert sc.stop() == 0


def server_cert(pki, name):
    """Another server certificate for 127.0.0.1 from the CA make_certs made in pki."""
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=pki)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", "/CN=127.0.0.1", "-out", f"{name}.csr",
             cwd=pki)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", f"{name}.pem",
             cwd=pki)
    return pathlib.Path(pki) / f"{name}.pem", pathlib.Path(pki) / f"{name}.key"


def fingerprint(pem_path):
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pathlib.Path(pem_path).read_text())).hexdigest()


def served_fingerprint(port, ca):
    """The SHA-256 of the certificate a new TLS handshake with 127.0.0.1:port is given."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()


def reload_counts(sc):
    """The table counts of the tokens file's reloads, in order, from sc's whole log."""
    logs = sc.log_path.read_text(errors="replace")
    return [int(m.group(1)) for m in re.finditer(r"tokens file \S+ reloaded \((\d+) tables", logs)]


def test_replaced_tokens_tables_are_freed(bootstrap, secure_sidecars, streams, tmp_path):
    """Reloads while a gRPC and an HTTP stream stay open: the tables replaced are freed once no
    request or stream holds them, so the count the reload logs stays small whatever the number
    of reloads (the one in force, the one the streams' calls were checked against, the one
    their streams moved to at the last sweep, and one a request just answered or the sweep
    may hold a moment longer: 30 were kept before), and is back to 1 when the streams have
    ended."""
    topic, g, g_http = unique("tfree"), unique("gfree"), unique("gfreeh")
    create_topic(bootstrap, topic, 1)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(tokens_text(["keep"]))
    sc = secure_sidecars(tokens_file=str(tokens), token="keep")
    keep = streams(sc.consumer, open_msg(g, topic, records=1000), metadata=bearer("keep"))
    conn, resp = open_stream(sc, f"/v1/groups/{g_http}/stream?topic={topic}",
                             {"Authorization": "Bearer keep"})
    assert resp.status == 200
    for group in (g, g_http):
        wait_for(lambda: len(sc.get(f"/v1/groups/{group}")[1].get("subscribers", [])) == 1, 30,
                 0.2, f"the stream of {group}")

    def reload():
        n = len(reload_counts(sc))
        sc.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: len(reload_counts(sc)) > n, 20, 0.05, "a reload")
        return reload_counts(sc)[-1]

    for _ in range(30):
        reload()
        assert sc.request("GET", f"/v1/groups/{g}", token="keep")[0] == 200
    counts = reload_counts(sc)
    assert len(counts) >= 30, counts
    assert max(counts) <= 5, counts
    assert not keep.done.is_set()
    produce(bootstrap, topic, 2)
    assert len(records_from(keep, 1)) >= 1  # the stream still works on the newest table

    keep.cancel()
    conn.close()
    for group in (g, g_http):
        wait_for(lambda: not sc.get(f"/v1/groups/{group}")[1].get("subscribers"), 30, 0.2,
                 f"the stream of {group} gone")
    wait_for(lambda: reload() == 1, 20, 0.5, "every replaced table freed")
    assert sc.stop() == 0


def test_new_handshakes_use_the_new_certificate(bootstrap, secure_sidecars, streams, tmp_path):
    topic, g = unique("tcert"), unique("gcert")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 2)
    pki = tmp_path / "pki"
    certs = make_certs(pki)
    new_cert, new_key = server_cert(pki, "server2")
    live_cert, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(certs["server_cert"], live_cert)
    shutil.copy(certs["server_key"], live_key)
    sc = secure_sidecars(ca=certs["ca"], cert=str(live_cert), key=str(live_key))
    port = int(sc.grpc_target.rsplit(":", 1)[1])
    old_fp, new_fp = fingerprint(certs["server_cert"]), fingerprint(new_cert)
    assert old_fp != new_fp
    assert served_fingerprint(port, certs["ca"]) == old_fp
    assert served_fingerprint(sc.port, certs["ca"]) == old_fp
    kept = streams(sc.consumer, open_msg(g, topic, records=1000))
    assert len(records_from(kept, 1)) >= 1

    # The new key, then the new certificate, as a renewal writes them: new handshakes get
    # the new certificate; the stream opened before keeps its connection.
    replace_file(live_key, new_key.read_text())
    replace_file(live_cert, new_cert.read_text())
    wait_for(lambda: served_fingerprint(port, certs["ca"]) == new_fp, 30, 0.5,
             "the new certificate on a new gRPC handshake")
    assert served_fingerprint(sc.port, certs["ca"]) == new_fp  # and on HTTP
    assert not kept.done.is_set()

    # A broken certificate is refused, naming it; handshakes keep the one in force.
    replace_file(live_cert, "not a certificate\n")
    wait_for(lambda: "tls.cert_file" in sc.logs() and "no PEM certificate" in sc.logs(), 20, 0.2,
             "the refusal of the broken certificate")
    assert served_fingerprint(port, certs["ca"]) == new_fp
    assert served_fingerprint(sc.port, certs["ca"]) == new_fp
    produce(bootstrap, topic, 2)
    assert len(records_from(kept, 1)) >= 1
    assert not kept.done.is_set()
    # A new HTTPS connection, verified against the CA, is served.
    st, _ = sc.request("GET", f"/v1/groups/{g}")
    assert st == 200
    kept.cancel()
    assert sc.stop() == 0


def test_new_client_ca_checks_new_connections(bootstrap, secure_sidecars, tmp_path):
    old, new = make_certs(tmp_path / "pki-old"), make_certs(tmp_path / "pki-new")
    live_ca = tmp_path / "client-ca.pem"
    shutil.copy(old["ca"], live_ca)
    sc = secure_sidecars(cert=old["server_cert"], key=old["server_key"], ca=old["ca"],
                         client_ca=str(live_ca), client_cert=old["client_cert"],
                         client_key=old["client_key"])

    def https_status(pki):
        ctx = sc.make_ssl_context(with_client_cert=False)
        ctx.load_cert_chain(pki["client_cert"], pki["client_key"])
        try:
            return sc.request("GET", "/v1/groups", context=ctx)[0]
        except OSError:  # the handshake itself refused
            return 0

    def grpc_code(pki):
        ch = grpc.secure_channel(sc.grpc_target, grpc.ssl_channel_credentials(
            root_certificates=pathlib.Path(old["ca"]).read_bytes(),
            private_key=pathlib.Path(pki["client_key"]).read_bytes(),
            certificate_chain=pathlib.Path(pki["client_cert"]).read_bytes()))
        try:
            return rpc_code(consumer_pb2_grpc.ConsumerStub(ch).ListGroups,
                            consumer_pb2.ListGroupsRequest(), timeout=10)[0]
        finally:
            ch.close()

    assert https_status(old) == 200 and grpc_code(old) == SC.OK
    assert https_status(new) != 200 and grpc_code(new) != SC.OK
    replace_file(live_ca, pathlib.Path(new["ca"]).read_text())
    wait_for(lambda: https_status(new) == 200, 30, 0.5, "the new CA's client on HTTPS")
    wait_for(lambda: grpc_code(new) == SC.OK, 30, 0.5, "the new CA's client on gRPC")
    assert https_status(old) != 200 and grpc_code(old) != SC.OK
    assert sc.stop() == 0
