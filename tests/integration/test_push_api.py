"""Push set by API call (PUT, GET, DELETE /v1/groups/{group}/push) for a dynamic group,
against a real broker, the real binary and an app server this test runs. Checked from
outside: what the app saw, the offsets committed, and what a plain fetch gets after."""
import hashlib
import json
import threading
import time
import urllib.request

from conftest import create_topic, produce, unique, wait_for
from test_push import App, all_offsets, apps, ok, push_args, wait_committed  # noqa: F401

def allow(app):
    """push.allowed_urls naming app's origin (http://127.0.0.1:PORT/)."""
    return f"--push.allowed_urls={app.url.rsplit('/', 1)[0]}/"


def call(sc, method, path, body=None, token=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(sc.base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def gone(sc, g):
    return call(sc, "GET", f"/v1/groups/{g}/push")[0] == 404


def test_push_set_by_api_call_pushes_until_deleted(bootstrap, sidecars, apps):
    topic, g = unique("tpapi"), unique("gpapi")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 200, partitions=2)
    app = apps(ok)
    sc = sidecars([allow(app)])
    st, body = call(sc, "PUT", f"/v1/groups/{g}/push",
                    {"topics": [topic], "url": app.url, "concurrency": 4, "batch": 1})
    assert st == 201, body
    assert body["source"] == "api" and body["state"] == "pushing" and body["url"] == app.url
    assert body["topics"] == [topic] and body["concurrency"] == 4
    want = all_offsets(bootstrap, topic)
    wait_for(lambda: app.ok_offsets() >= want, 120, 0.5, "every record pushed")
    wait_committed(bootstrap, g, topic, 2)
    assert {r["attempt"] for r in app.entries()} == {1}
    st, body = call(sc, "GET", f"/v1/groups/{g}/push")
    assert st == 200 and body["state"] == "pushing", body
    # The group shows its push subscriber.
    subs = sc.get(f"/v1/groups/{g}")[1]["subscribers"]
    assert any(s["name"].startswith("push") for s in subs), subs

    st, body = call(sc, "DELETE", f"/v1/groups/{g}/push")
    assert st == 200 and body["url"] == app.url, body
    wait_for(lambda: gone(sc, g), 30, 0.2, "the push gone")
    seen = len(app.entries())
    # Records produced after it went are not pushed: a plain fetch gets them, first attempt.
    produce(bootstrap, topic, 20, partitions=2)
    got = []
    wait_for(lambda: got.extend(sc.fetch(g, topic, max=100, wait_ms=1000)) or len(got) >= 20, 60,
             0, "the 20 new records fetched")
    assert len(got) == 20 and {r["attempt"] for r in got} == {1}
    assert len(app.entries()) == seen, "a record was pushed after DELETE"
    assert sc.ack(g, [r["ack_id"] for r in got])[0] == 200
    # It can be set again, once gone.
    st, body = call(sc, "PUT", f"/v1/groups/{g}/push", {"topics": [topic], "url": app.url})
    assert st == 201, body
    assert sc.stop() == 0


def test_delete_lets_requests_in_flight_settle_and_gives_back_the_rest(bootstrap, sidecars, apps):
    """DELETE while a slow app holds requests: those finish and are acked; every other record
    goes to a plain fetch, never attempted before; none is lost."""
    topic, g = unique("tpdel"), unique("gpdel")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 60)
    started, release = threading.Event(), threading.Event()

    def slow(rec):
        started.set()
        release.wait(30)
        return 200, {}, b""

    app = apps(slow)
    sc = sidecars([allow(app)])
    st, body = call(sc, "PUT", f"/v1/groups/{g}/push",
                    {"topics": [topic], "url": app.url, "concurrency": 3, "batch": 1})
    assert st == 201, body
    assert started.wait(60), "no request reached the app"
    time.sleep(1)  # let the other requests start
    st, body = call(sc, "DELETE", f"/v1/groups/{g}/push")
    assert st == 200 and body["state"] == "stopping", body
    st, body = call(sc, "GET", f"/v1/groups/{g}/push")
    assert st == 200 and body["state"] == "stopping", (st, body)
    assert call(sc, "PUT", f"/v1/groups/{g}/push", {"topics": [topic], "url": app.url})[0] == 409
    release.set()
    wait_for(lambda: gone(sc, g), 60, 0.2, "the push gone once its requests were answered")
    pushed = app.ok_offsets()
    assert pushed and len(pushed) <= 3, sorted(pushed)
    # Everything else comes to a plain fetch, never attempted before.
    got = []
    wait_for(lambda: got.extend(sc.fetch(g, topic, max=100, wait_ms=1000)) or
             len(got) >= 60 - len(pushed), 60, 0, "the rest fetched")
    assert {(0, r["offset"]) for r in got} == all_offsets(bootstrap, topic) - pushed
    assert {r["attempt"] for r in got} == {1}, [(r["offset"], r["attempt"]) for r in got]
    assert sc.ack(g, [r["ack_id"] for r in got])[0] == 200
    wait_committed(bootstrap, g, topic, 1, timeout=60)
    assert sc.stop() == 0


def test_push_api_refusals_name_the_problem(bootstrap, sidecars, apps, tmp_path):
    topic, static_topic, g = unique("tpref"), unique("tpref-s"), unique("gpref")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, static_topic, 1)
    app = apps(ok)
    # Off unless push.allowed_urls says where.
    sc = sidecars([])
    st, body = call(sc, "PUT", f"/v1/groups/{g}/push", {"topics": [topic], "url": app.url})
    assert st == 403 and "push.allowed_urls" in body["error"]["message"], body
    assert sc.stop() == 0

    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [
        {"sha256": hashlib.sha256(b"all").hexdigest(), "groups": ["*"], "consume": ["*"]},
        {"sha256": hashlib.sha256(b"narrow").hexdigest(), "groups": ["*"],
         "consume": [static_topic]}]}))
    static = unique("gpref-static")
    sc = sidecars([allow(app), f"--auth.tokens_file={tokens}",
                   *push_args(static, static_topic, app.url)])
    put = lambda body, token="all", group=g: call(sc, "PUT", f"/v1/groups/{group}/push", body,  # noqa
                                                  token=token)
    st, body = put({"topics": [topic], "url": "http://10.0.0.1:80/in"})
    assert st == 403 and "push.allowed_urls" in body["error"]["message"], body
    st, body = put({"topics": [topic], "url": app.url, "concurrency": 0})
    assert st == 400 and "concurrency" in body["error"]["message"], body
    st, body = put({"topics": [topic], "url": app.url, "ca_file": "/etc/passwd"})
    assert st == 400 and "ca_file" in body["error"]["message"], body
    st, body = put({"topics": [topic], "url": app.url, "bearer_token": "two words"})
    assert st == 400 and "bearer_token" in body["error"]["message"], body
    st, body = put({"url": app.url})
    assert st == 400 and "topics" in body["error"]["message"], body
    st, body = put({"topics": [topic]})
    assert st == 400 and "url" in body["error"]["message"], body
    assert call(sc, "PUT", f"/v1/groups/{g}/push", raw=b"{not json", token="all")[0] == 400
    st, body = put({"topics": [topic], "url": app.url}, token="narrow")
    assert st == 403 and topic in body["error"]["message"], body
    assert call(sc, "PUT", f"/v1/groups/{g}/push", {"topics": [topic], "url": app.url})[0] == 401
    st, body = put({"topics": [static_topic], "url": app.url}, group=static)
    assert st == 409 and "groups.static" in body["error"]["message"], body
    # A static group's push shows, and cannot be deleted by API call.
    st, body = call(sc, "GET", f"/v1/groups/{static}/push", token="all")
    assert st == 200 and body["source"] == "config", body
    assert call(sc, "DELETE", f"/v1/groups/{static}/push", token="all")[0] == 409
    assert call(sc, "DELETE", f"/v1/groups/{g}/push", token="all")[0] == 404
    assert call(sc, "GET", f"/v1/groups/{g}/push", token="all")[0] == 404
    st, body = put({"topics": [topic], "url": app.url})
    assert st == 201, body
    assert put({"topics": [topic], "url": app.url})[0] == 409  # pushes already
    assert call(sc, "POST", f"/v1/groups/{g}/push", {}, token="all")[0] == 405
    assert sc.stop() == 0


def test_push_ends_when_a_reload_removes_the_token_that_set_it(bootstrap, sidecars, apps,
                                                                tmp_path):
    topic, g = unique("tprev"), unique("gprev")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5)
    app = apps(ok)

    def tokens(*names):
        return json.dumps({"tokens": [
            {"sha256": hashlib.sha256(t.encode()).hexdigest(), "groups": ["*"], "consume": ["*"]}
            for t in names]})

    path = tmp_path / "tokens.json"
    path.write_text(tokens("setter", "reader"))
    sc = sidecars([allow(app), f"--auth.tokens_file={path}"])
    st, body = call(sc, "PUT", f"/v1/groups/{g}/push", {"topics": [topic], "url": app.url},
                    token="setter")
    assert st == 201, body
    wait_for(lambda: len(app.ok_offsets()) == 5, 60, 0.2, "the first 5 pushed")
    tmp = f"{path}.new"
    with open(tmp, "w") as f:
        f.write(tokens("reader"))
    import os
    os.replace(tmp, path)
    wait_for(lambda: call(sc, "GET", f"/v1/groups/{g}/push", token="reader")[0] == 404, 30,
             0.2, "the push ended by the reload")
    assert "push ends" in sc.logs(), sc.logs()
    produce(bootstrap, topic, 5)
    got = []

    def fetched():
        st, body = call(sc, "GET", f"/v1/groups/{g}/records?topic={topic}&max=10&wait_ms=1000",
                        token="reader")
        assert st == 200, body
        got.extend(body["records"])
        return len(got) >= 5
    wait_for(fetched, 60, 0, "the 5 new records fetched by the other token")
    assert sorted(r["offset"] for r in got) == [5, 6, 7, 8, 9]
    assert len(app.ok_offsets()) == 5, "a record was pushed after the token went"
    assert sc.stop() == 0
