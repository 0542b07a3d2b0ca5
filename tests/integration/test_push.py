"""Push delivery against a real broker and the real binary: a static group with a push url
gets its records POSTed to an app server this test runs (http.server, keep-alive), and the
app's answers settle them. Checked from outside: what the app saw, the offsets committed
(kstool committed) and the dead-letter topic."""
import collections
import http.server
import json
import pathlib
import random
import signal
import threading
import time
import urllib.parse

import pytest

from conftest import create_topic, kstool, produce, unique, wait_for, watermarks
from test_metrics import samples, scrape_text, val


class App:
    """An HTTP app on a free port. decide(rec) answers a request: (status, headers, body).
    Every request is journalled: (start time, end time, record fields, status)."""

    def __init__(self, decide):
        self.decide = decide
        self.lock = threading.Lock()
        self.journal = []  # dicts: t0, t1, topic, partition, offset, key, attempt, value, status
        self.batches = []
        app = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive

            def log_message(self, *a):
                pass

            def do_POST(self):
                t0 = time.monotonic()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                h = self.headers
                rec = {"topic": h.get("ksidecar-topic"),
                       "partition": int(h.get("ksidecar-partition", -1)),
                       "offset": int(h.get("ksidecar-offset", -1)),
                       "key": urllib.parse.unquote(h.get("ksidecar-key") or ""),
                       "attempt": int(h.get("ksidecar-attempt", 0)),
                       "headers": {k[len("ksidecar-header-"):]: v for k, v in h.items()
                                   if k.lower().startswith("ksidecar-header-")},
                       "ce": {k.lower(): v for k, v in h.items() if k.lower().startswith("ce-")},
                       "value": body, "batch": h.get("ksidecar-batch"), "t0": t0,
                       "authorization": h.get("Authorization"),
                       "http": [(k.lower(), v) for k, v in h.items()]}
                status, hdrs, out = app.decide(rec)
                self.send_response(status)
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                rec["t1"] = time.monotonic()
                rec["status"] = status
                with app.lock:
                    app.journal.append(rec)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/in"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def entries(self):
        with self.lock:
            return list(self.journal)

    def ok_offsets(self):
        """{(partition, offset)} answered 2xx."""
        return {(r["partition"], r["offset"]) for r in self.entries() if r["status"] < 300}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def apps():
    made = []

    def make(decide):
        a = App(decide)
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()


def ok(rec):
    return 200, {}, b""


def push_args(group, topic, url, **push):
    g = {"name": group, "topics": [topic], "push": {"url": url, **push}}
    for k in ("dead_letter_topic", "max_attempts"):
        if k in push:
            g[k] = g["push"].pop(k)
    return ["--groups.static=" + json.dumps([g])]


def committed(bootstrap, group, topic, parts):
    out = kstool("committed", "-b", bootstrap, "-t", topic, "-g", group, "-p", str(parts))
    return {int(l.split()[0]): int(l.split()[1]) for l in out.splitlines() if l.strip()}


def wait_committed(bootstrap, group, topic, parts, timeout=120):
    ends = watermarks(bootstrap, topic)
    wait_for(lambda: committed(bootstrap, group, topic, parts) == ends, timeout, 1,
             f"group {group} committed to the end {ends}")


def all_offsets(bootstrap, topic):
    return {(p, o) for p, hi in watermarks(bootstrap, topic).items() for o in range(hi)}


def test_push_20000_records_acked_once_and_committed(bootstrap, sidecars, apps):
    topic, group = unique("push-ok"), unique("g-push-ok")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 20000, partitions=4)
    app = apps(ok)
    sc = sidecars(push_args(group, topic, app.url, concurrency=32))
    want = all_offsets(bootstrap, topic)
    wait_for(lambda: app.ok_offsets() >= want, 150, 1, "every record pushed")
    wait_committed(bootstrap, group, topic, 4)
    seen = collections.Counter((r["partition"], r["offset"]) for r in app.entries())
    assert len(seen) == 20000
    assert max(seen.values()) == 1, "a record was pushed twice"
    assert {r["attempt"] for r in app.entries()} == {1}
    assert all(r["value"].startswith(b"v") and r["headers"].get("i") for r in app.entries())
    assert sc.stop() == 0


def test_push_failures_and_slow_answers_lose_nothing_and_keep_key_order(bootstrap, sidecars,
                                                                        apps):
    topic, group = unique("push-fail"), unique("g-push-fail")
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 3000, keys=40)
    rnd = random.Random(19)
    state = threading.Lock()
    done = set()  # (partition, offset) answered 200
    by_key = collections.defaultdict(list)  # (partition, key) -> offsets, as first sent
    violations = []

    def decide(rec):
        time.sleep(rnd.random() * 0.02)
        pk, off = (rec["partition"], rec["key"]), rec["offset"]
        with state:
            if off not in by_key[pk]:
                by_key[pk].append(off)
            # Key order: every earlier record of the key was answered 200 before this one
            # was sent.
            missing = [o for o in by_key[pk] if o < off and (pk[0], o) not in done]
            if missing:
                violations.append((pk, off, missing[:3]))
            if rnd.random() < 0.3:
                return 500, {}, b"try later"
            done.add((rec["partition"], off))
            return 200, {}, b""

    app = apps(decide)
    sc = sidecars(push_args(group, topic, app.url, concurrency=16, timeout_ms=5000))
    want = all_offsets(bootstrap, topic)
    wait_for(lambda: app.ok_offsets() >= want, 90, 1, "every record answered 200 once")
    wait_committed(bootstrap, group, topic, 3)
    assert not violations, violations[:5]
    # A key's records were first sent in offset order (kstool keys record i k(i % 40)).
    for pk, offs in by_key.items():
        assert offs == sorted(offs), (pk, offs[:10])
    assert any(r["status"] == 500 for r in app.entries())
    assert max(r["attempt"] for r in app.entries()) > 1
    assert sc.stop() == 0


def test_push_400_dead_letters_the_poison_records_at_once(bootstrap, sidecars, apps):
    topic, group, dlt = unique("push-poison"), unique("g-push-poison"), unique("push-dlt")
    create_topic(bootstrap, topic, 2)
    create_topic(bootstrap, dlt, 1)
    app = apps(lambda rec: (400, {}, b"bad record: poison\n") if b"poison" in rec["value"]
               else ok(rec))
    sc = sidecars(push_args(group, topic, app.url, concurrency=8, dead_letter_topic=dlt,
                            max_attempts=5))
    recs = [{"key": f"k{i % 7}", "value": f"poison {i}" if i % 20 == 3 else f"fine {i}"}
            for i in range(200)]
    st, body = sc.post(f"/v1/topics/{topic}/records", {"records": recs})
    assert st == 200 and all("offset" in r for r in body["results"]), body
    wait_committed(bootstrap, group, topic, 2)
    poison = {r["value"].encode() for r in recs if "poison" in r["value"]}
    # The dead-letter topic holds exactly the poison records, with the app's status.
    reader = unique("g-dlt-reader")
    got = {}  # (partition, offset) -> record: a rebalance of the reader may deliver twice

    def read_dlt():
        recs = sc.fetch(reader, dlt, max=100, wait_ms=1000)
        got.update({(r["partition"], r["offset"]): r for r in recs})
        if recs:
            sc.ack(reader, [r["ack_id"] for r in recs])
        return len(got) >= len(poison)

    wait_for(read_dlt, 60, 0.1, "the dead letters")
    time.sleep(1)
    read_dlt()
    got = list(got.values())
    assert sorted(r["value"].encode() for r in got) == sorted(poison)
    for r in got:
        hdrs = {h["key"]: h["value"] for h in r["headers"]}
        assert "HTTP 400" in hdrs["ksidecar.last_error"], hdrs
        assert "bad record" in hdrs["ksidecar.last_error"], hdrs
    # At once: each poison record was pushed once, not max_attempts times.
    tries = collections.Counter(r["value"] for r in app.entries() if b"poison" in r["value"])
    assert set(tries) == poison and set(tries.values()) == {1}, tries
    assert sc.stop() == 0


def test_push_429_retry_after_delays_the_redelivery(bootstrap, sidecars, apps):
    topic, group = unique("push-429"), unique("g-push-429")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)

    def decide(rec):
        if rec["attempt"] == 1:
            return 429, {"Retry-After": "2"}, b"slow down"
        return 200, {}, b""

    app = apps(decide)
    sc = sidecars(push_args(group, topic, app.url, concurrency=4))
    wait_committed(bootstrap, group, topic, 1, timeout=60)
    tries = collections.defaultdict(list)
    for r in app.entries():
        tries[r["offset"]].append(r)
    assert sorted(tries) == [0, 1, 2]
    for off, rs in tries.items():
        first, second = rs[0], rs[1]
        assert first["status"] == 429 and second["status"] == 200 and second["attempt"] == 2
        # Measured app-side from the 429's answer to the next request: at least 2 s.
        assert second["t0"] - first["t1"] >= 1.95, (off, second["t0"] - first["t1"])
    assert sc.stop() == 0


def test_push_batches_and_per_record_statuses(bootstrap, sidecars, apps):
    topic, group = unique("push-batch"), unique("g-push-batch")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 1000, partitions=2)
    retried = set()
    lock = threading.Lock()
    got = []

    def decide(rec):
        arr = json.loads(rec["value"])
        statuses = []
        with lock:
            for r in arr:
                got.append(r)
                k = (r["partition"], r["offset"])
                # Every 10th record is retried once, by its own status in the answer.
                if r["offset"] % 10 == 0 and k not in retried:
                    retried.add(k)
                    statuses.append("RETRY")
                else:
                    statuses.append("SUCCESS")
        return 200, {"Content-Type": "application/json"}, json.dumps(
            {"statuses": statuses}).encode()

    app = apps(decide)
    sc = sidecars(push_args(group, topic, app.url, concurrency=4, batch=100))
    wait_committed(bootstrap, group, topic, 2)
    assert max(int(r["batch"]) for r in app.entries()) > 1
    assert all(int(r["batch"]) <= 100 for r in app.entries())
    seen = collections.Counter((r["partition"], r["offset"]) for r in got)
    assert set(seen) == all_offsets(bootstrap, topic)
    assert {k for k, n in seen.items() if n > 1} == retried
    assert {r["attempt"] for r in got if (r["partition"], r["offset"]) in retried} == {1, 2}
    assert sc.stop() == 0


def test_push_kill_9_mid_push_loses_nothing(bootstrap, sidecars, apps):
    topic, group = unique("push-kill"), unique("g-push-kill")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 6000, partitions=4, keys=50)

    def decide(rec):
        time.sleep(0.002)
        return 200, {}, b""

    app = apps(decide)
    args = push_args(group, topic, app.url, concurrency=16)
    sc = sidecars(args)
    wait_for(lambda: len(app.ok_offsets()) >= 1500, 60, 0.05, "a quarter pushed")
    sc.proc.send_signal(signal.SIGKILL)
    sc.proc.wait()
    assert len(app.ok_offsets()) < 6000, "all pushed before the kill: make the app slower"
    sc2 = sidecars(args)
    want = all_offsets(bootstrap, topic)
    wait_for(lambda: app.ok_offsets() >= want, 120, 1, "every record pushed after the restart")
    wait_committed(bootstrap, group, topic, 4)
    assert sc2.stop() == 0


def test_push_config_errors_name_the_field(bootstrap, sidecars):
    import subprocess

    from conftest import BIN
    for push, what in ((
        {"url": "ftp://x"}, "url"), ({"url": "http://a/b", "batch": 0}, "batch"),
            ({"concurrency": 3}, "needs a url"), ({"url": "http://a/b", "colour": 1}, "colour")):
        g = [{"name": "g", "topics": ["t"], "push": push}]
        out = subprocess.run([BIN, "--groups.static=" + json.dumps(g), "--print-config"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and what in out.stderr, (push, out.stderr)
    g = [{"name": "g", "topics": ["t"], "push": {"url": "http://a/b", "bearer_token": "s3"}}]
    out = subprocess.run([BIN, "--kafka.bootstrap.servers=x:1", "--groups.static=" + json.dumps(g),
                          "--group.push.batch=7",
                          "--print-config"], capture_output=True, text=True, timeout=30)
    cfg = json.loads(out.stdout)
    p = cfg["groups.static"][0]["push"]
    assert p["batch"] == 7 and p["concurrency"] == 16 and p["bearer_token"] == "********"


def test_push_slow_app_holds_only_its_credits(bootstrap, sidecars, apps):
    topic, group = unique("push-slow"), unique("g-push-slow")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 3000, keys=300)
    lock = threading.Lock()
    now = [0, 0]  # requests in the app now, the most at once

    def decide(rec):
        with lock:
            now[0] += 1
            now[1] = max(now[1], now[0])
        time.sleep(0.2)
        with lock:
            now[0] -= 1
        return 200, {}, b""

    app = apps(decide)
    sc = sidecars(push_args(group, topic, app.url, concurrency=4))
    held = []

    def sample():
        st, body = sc.get(f"/v1/groups/{group}")
        subs = [s for s in (body or {}).get("subscribers", []) if s["name"].startswith("push#")]
        if st == 200 and subs:
            held.append((subs[0]["credits"]["records"], subs[0]["outstanding"]["records"]))
        return len(held) >= 20 and len(app.entries()) >= 40

    wait_for(sample, 60, 0.2, "a slow push under way")
    # What the group leased to push never passed concurrency x batch (4 records), though
    # thousands wait in Kafka; the app never had more than 4 requests at once.
    assert {c for c, _ in held} == {4}, held
    assert max(o for _, o in held) <= 4 and max(o for _, o in held) >= 1, held
    assert now[1] <= 4, now
    assert sc.stop() == 0


def test_push_sends_the_bearer_token_as_it_is(bootstrap, sidecars, apps):
    topic, group = unique("push-tok"), unique("g-push-tok")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    token = "eyJhbGci.OiJIUzI1-NiJ9_x~y+z/w=="
    app = apps(lambda rec: (200, {}, b"") if rec["authorization"] == f"Bearer {token}"
               else (401, {}, b"who are you"))
    sc = sidecars(push_args(group, topic, app.url, bearer_token=token))
    wait_committed(bootstrap, group, topic, 1, timeout=60)
    assert {r["authorization"] for r in app.entries()} == {f"Bearer {token}"}
    assert all(r["status"] == 200 for r in app.entries())
    assert sc.stop() == 0
    # A token with a space or a control byte is refused at startup, naming the field.
    import subprocess

    from conftest import BIN
    for bad in ("two words", "tab\there"):
        out = subprocess.run([BIN, *push_args(group, topic, app.url, bearer_token=bad),
                              "--print-config"], capture_output=True, text=True, timeout=30)
        assert out.returncode != 0 and "bearer_token" in out.stderr, (bad, out.stderr)


def test_push_cloudevents_binary_mode(bootstrap, sidecars, apps):
    topic, group = unique("push-ce"), unique("g-push-ce")
    create_topic(bootstrap, topic, 1)
    app = apps(ok)
    args = push_args(group, topic, app.url, cloudevents=True)
    sc = sidecars(args)
    recs = [{"key": "k", "value": "plain"},
            {"key": "k", "value": "{\"n\":1}",
             "headers": [{"key": "ce_specversion", "value": "1.0"},
                         {"key": "ce_id", "value": "order-7"},
                         {"key": "ce_source", "value": "/shop"},
                         {"key": "ce_type", "value": "order.created"}]}]
    st, body = sc.post(f"/v1/topics/{topic}/records", {"records": recs})
    assert st == 200, body
    wait_committed(bootstrap, group, topic, 1, timeout=60)
    by = {r["value"]: r["ce"] for r in app.entries()}
    plain = by[b"plain"]
    assert plain["ce-specversion"] == "1.0" and plain["ce-id"] == f"{topic}-0-0"
    assert plain["ce-source"] == f"/ksidecar/{group}/{topic}"
    assert plain["ce-type"] == "ksidecar.kafka.record" and plain["ce-time"].endswith("Z")
    own = by[b'{"n":1}']
    assert own == {"ce-specversion": "1.0", "ce-id": "order-7", "ce-source": "/shop",
                   "ce-type": "order.created"}, own
    assert sc.stop() == 0


def test_push_backoff_follows_the_policy_from_the_apps_side_and_after_kill_9(bootstrap, sidecars,
                                                                              apps):
    """A record the app fails (500) comes back after the retry policy's delay, measured here
    from the app's answer to the next request; a kill -9 and restart in the middle does not
    reset the backoff (the attempt count is in the commit metadata)."""
    topic, group = unique("push-bo"), unique("g-push-bo")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    policy = ["--group.retry.initial_ms=800", "--group.retry.multiplier=2",
              "--group.retry.max_ms=3200", "--commit.interval_ms=200"]
    app = apps(lambda rec: (200, {}, b"") if rec["attempt"] >= 6 else (500, {}, b"down"))
    args = push_args(group, topic, app.url) + policy
    sc = sidecars(args)
    wait_for(lambda: len(app.entries()) >= 3, 60, 0.05, "three attempts")
    time.sleep(1.0)  # a commit (every 200 ms) carries attempt 3's count; attempt 4 waits 3.2 s
    assert len(app.entries()) == 3, [e["attempt"] for e in app.entries()]
    sc.proc.send_signal(signal.SIGKILL)
    sc.proc.wait()
    killed_at = time.monotonic()
    sc2 = sidecars(args)
    wait_for(lambda: any(e["status"] == 200 for e in app.entries()), 60, 0.05, "acked at last")
    wait_committed(bootstrap, group, topic, 1, timeout=60)
    assert sc2.stop() == 0
    seen = sorted(app.entries(), key=lambda e: e["t0"])
    attempts = [e["attempt"] for e in seen]
    gaps = [(b["t0"] - a["t1"]) * 1000 for a, b in zip(seen, seen[1:])]
    print(f"attempts {attempts}, gaps {[round(g) for g in gaps]} ms")
    assert attempts[:3] == [1, 2, 3] and attempts[-1] >= 6, attempts
    # Before the kill: 800 ms after attempt 1, 1600 ms after attempt 2.
    for gap, policy_ms in zip(gaps[:2], (800, 1600)):
        assert policy_ms - 50 <= gap <= policy_ms + 2500, (gaps, policy_ms)
    # After the restart, the record comes back with its count (>= 4), and the failure after
    # it waits the capped 3.2 s, not the first delay again.
    after = [(e, g) for e, g in zip(seen[1:], gaps) if e["t0"] > killed_at]
    assert after and after[0][0]["attempt"] >= 4, attempts
    later = [g for e, g in after[1:]]
    assert later and all(3200 - 50 <= g <= 3200 + 2500 for g in later), (attempts, gaps)


def test_push_metrics_count_requests_records_in_flight_and_durations(bootstrap, sidecars,
                                                                     apps):
    """Push's families in /metrics, against answers the app gives in turn: 200, 503, 200, and
    a 200 it holds until the scrape has seen it in flight. Every ksidecar_ family the scrape
    shows is in docs/metrics.md."""
    topic, group = unique("push-met"), unique("g-push-met")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    lock, release = threading.Lock(), threading.Event()
    answered = []

    def decide(rec):
        with lock:
            answered.append(rec["offset"])
            k = len(answered)
        if k == 2:
            return 503, {}, b"busy"
        if k == 4:
            release.wait(20)
        return 200, {}, b""

    app = apps(decide)
    sc = sidecars(push_args(group, topic, app.url, concurrency=1))

    def scrape():
        st, text = scrape_text(sc.base)
        assert st == 200, (st, text)
        return samples(text)

    # The 4th request waits in the app: one in flight.
    wait_for(lambda: val(scrape()[0], "ksidecar_push_requests_in_flight", group=group) == 1,
             60, 0.2, "a push request in flight")
    release.set()
    wait_committed(bootstrap, group, topic, 1, timeout=60)
    want = {("requests", "200"): 3, ("requests", "503"): 1, ("records", "ack"): 3,
            ("records", "retry"): 1, ("records", "dead_letter"): 0, "in flight": 0,
            "durations": 4}

    def counted():
        s, fams = scrape()
        got = {("requests", c): val(s, "ksidecar_push_requests_total", group=group, code=c)
               for c in ("200", "503")}
        got.update({("records", v): val(s, "ksidecar_push_records_total", group=group,
                                         verdict=v) for v in ("ack", "retry", "dead_letter")})
        got["in flight"] = val(s, "ksidecar_push_requests_in_flight", group=group)
        got["durations"] = val(s, "ksidecar_push_request_duration_seconds_count", group=group)
        return (s, fams) if got == want else None

    s, fams = wait_for(counted, 30, 0.3, f"push's families counted {want}")
    assert val(s, "ksidecar_push_request_duration_seconds_bucket", group=group, le="+Inf") == 4
    assert fams["ksidecar_push_request_duration_seconds"] == "histogram"
    # Only the statuses the app gave: no request went unanswered.
    codes = {dict(k[1])["code"] for k in s if k[0] == "ksidecar_push_requests_total"}
    assert codes == {"200", "503"}, codes
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    undocumented = [f for f in fams if f.startswith("ksidecar_")
                    and f"| `{f}` |" not in doc and f"| `{f}_total` |" not in doc]
    assert not undocumented, undocumented
    assert sc.stop() == 0
