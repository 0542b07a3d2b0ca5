"""Credentials rotated without a restart, through the real binary against the real broker:
the tokens file replaced while streams of two tokens run (the removed token's gRPC and HTTP
streams end, the kept one's carry on), a broken new file refused with the old one left in
force, and SIGHUP as the other trigger."""
import hashlib
import json
import os
import signal

import grpc

from conftest import create_topic, produce, unique, wait_for
from grpc_support import bearer, open_msg
from test_grpc import secure_sidecars, streams  # noqa: F401 (fixtures)
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

    # The file without "drop": its streams end, "keep"'s carries on.
    replace_file(tokens, tokens_text(["keep"]))
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
