"""GET /metrics through the real binary against the real broker: each counter moves by exactly
the traffic sent, the lag is the status API's, the output passes prometheus_client's parser
(and promtool's check when it is built), the series cap drops and counts, and a token sees
only its groups."""
import os
import pathlib
import shutil
import subprocess
import urllib.error
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import create_topic, fetch_all, free_port, produce, unique, wait_for, watermarks
from grpc_support import health_pb2, health_pb2_grpc, write_tokens_json
from test_http_stream import stalled_stream

PROMTOOL = os.environ.get("KSIDECAR_TEST_PROMTOOL") or shutil.which("promtool") or str(
    pathlib.Path(os.environ.get("KSIDECAR_CACHE", pathlib.Path.home() / ".cache" / "ksidecar"))
    / "bin" / "promtool")


def scrape_text(base, token=None):
    req = urllib.request.Request(base + "/metrics")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text):
    """{(sample name, frozenset of labels): value}, by prometheus_client's own parser, and the
    families that have samples."""
    out, fams = {}, {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
        if fam.samples:
            fams[fam.name] = fam.type
    return out, fams


def scrape(sc, token=None):
    st, text = scrape_text(sc.base, token)
    assert st == 200, (st, text)
    return samples(text)[0]


def val(s, name, **labels):
    return s.get((name, frozenset(labels.items())), 0)


COUNTERS = ("delivered", "redelivered", "acked", "nacked", "dead_lettered", "expired")
# Histograms whose count moves with a counter: each ack of a leased record, each delivery of
# a record with a timestamp.
HISTS = {"acked": "ksidecar_delivery_to_ack_seconds_count",
         "delivered": "ksidecar_record_age_at_delivery_seconds_count"}


def test_counters_move_by_exactly_the_traffic_and_lag_is_the_status_lag(bootstrap, sidecars):
    topic, dlt, g = unique("tmet"), unique("tmet-dlt"), unique("gmet")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, dlt, 1)
    produce(bootstrap, topic, 5)
    hport = free_port()
    sc = sidecars([f"--group.dead_letter_topic={dlt}", "--group.max_attempts=2",
                   f"--http.health_listen=127.0.0.1:{hport}", "--lease.deadline_ms=600000"])
    first = fetch_all(sc, g, topic, 5)
    assert len(first) == 5
    assert sc.ack(g, [r["ack_id"] for r in first])[1]["acked"] == 5
    before = scrape(sc)
    for c in COUNTERS:
        assert val(before, f"ksidecar_{c}_total", group=g) == (5 if c in ("delivered", "acked")
                                                               else 0), c
    posts_before = val(before, "ksidecar_requests_total", edge="http", method="POST", code="200")

    # Known traffic: 10 delivered, 7 acked, 3 nacked; they come back (3 redelivered), one is
    # nacked again and dead-lettered at its 2nd attempt (max_attempts), 2 acked.
    produce(bootstrap, topic, 10)
    recs = fetch_all(sc, g, topic, 10)
    assert len(recs) == 10
    assert sc.ack(g, [r["ack_id"] for r in recs[:7]])[1]["acked"] == 7
    st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [r["ack_id"] for r in recs[7:]]})
    assert st == 200, body
    again = fetch_all(sc, g, topic, 3)
    assert sorted(r["offset"] for r in again) == sorted(r["offset"] for r in recs[7:])
    st, body = sc.post(f"/v1/groups/{g}/nacks", {"ack_ids": [again[0]["ack_id"]]})
    assert "dead-lettered" in body["results"][0]["message"], body
    assert sc.ack(g, [r["ack_id"] for r in again[1:]])[1]["acked"] == 2
    want = {"delivered": 13, "redelivered": 3, "acked": 9, "nacked": 4, "dead_lettered": 1,
            "expired": 0, "acked histogram": 9, "delivered histogram": 13}

    def moved():
        after = scrape(sc)
        got = {c: val(after, f"ksidecar_{c}_total", group=g) - val(before, f"ksidecar_{c}_total",
                                                                    group=g) for c in COUNTERS}
        got.update({f"{c} histogram": val(after, h, group=g) - val(before, h, group=g)
                    for c, h in HISTS.items()})
        # The POSTs since: 1 ack, 1 nack, 1 nack, 1 ack (each counted once it completed).
        posts = val(after, "ksidecar_requests_total", edge="http", method="POST",
                    code="200") - posts_before
        return after if got == want and posts == 4 else None

    after = wait_for(moved, 30, 0.5, f"counters moved by {want}")

    # Refused ack ids, by reason: a malformed one, and the dead-lettered record's (stale).
    assert sc.ack(g, ["garbage"])[0] == 400
    st, body = sc.ack(g, [again[0]["ack_id"]])
    assert body["results"][0]["status"] == "FAILED_PRECONDITION", body  # KS_E_STALE's code
    refused = {"stale": 1, "unknown": 0, "invalid": 1}
    wait_for(lambda: {k: val(scrape(sc), f"ksidecar_acks_{k}_total", group=g) - val(
        after, f"ksidecar_acks_{k}_total", group=g) for k in refused} == refused, 10, 0.2,
        f"refused ack ids counted {refused}")

    # Leave 4 records unread: the lag settles at 4 once the commit reaches 15.
    produce(bootstrap, topic, 4)
    hw = watermarks(bootstrap, topic)

    def settled():
        st, status = sc.get(f"/v1/groups/{g}")
        p = status["partitions"][0]
        s = scrape(sc)
        lag = val(s, "kafka_consumergroup_lag", consumergroup=g, topic=topic, partition="0")
        if p["lag"] == 4 and p["high_watermark"] == hw[0] and lag == p["lag"]:
            return s, p
        return None

    s, p = wait_for(settled, 30, 0.5, "lag 4 in the status and in /metrics")
    assert val(s, "kafka_consumergroup_lag_sum", consumergroup=g, topic=topic) == 4
    assert val(s, "kafka_consumergroup_current_offset", consumergroup=g, topic=topic,
               partition="0") == p["committed_offset"] == 15
    assert val(s, "kafka_topic_partition_current_offset", topic=topic, partition="0") == hw[0]
    assert val(s, "ksidecar_partition_lag", group=g, topic=topic, partition="0") == 4
    # Commits: every one sent here confirmed (the commit point reached 15), none failed.
    sent, confirmed = (val(s, f"ksidecar_commits_{k}_total", group=g) for k in ("sent",
                                                                              "confirmed"))
    # (Commits that overlap are each counted once their answer comes: CI once saw 1 of 2.
    # All the acks above can fall in one commit interval: one commit, to 15, is enough.)
    assert sent == confirmed >= 1 and val(s, "ksidecar_commits_failed_total", group=g) == 0, s
    assert val(s, "ksidecar_commit_round_trip_seconds_count", group=g) == confirmed
    # Nothing is acked now: the commit point stays, and its age grows past a second.
    wait_for(lambda: val(scrape(sc), "ksidecar_partition_commit_point_age_seconds", group=g,
                         topic=topic, partition="0") >= 1.0, 30, 0.5, "commit point age >= 1 s")
    assert val(s, "ksidecar_commit_round_trip_seconds_bucket", group=g, le="+Inf") == confirmed
    assert val(s, "ksidecar_partition_high_watermark", group=g, topic=topic,
               partition="0") == hw[0]

    # A gRPC call is counted under its method and code.
    with grpc.insecure_channel(f"127.0.0.1:{sc.grpc_port}") as ch:
        health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    wait_for(lambda: val(scrape(sc), "ksidecar_requests_total", edge="grpc",
                         method="/grpc.health.v1.Health/Check", code="OK") == 1, 10, 0.2,
             "the gRPC health check counted")

    # The probe listener serves the same exposition, families and all.
    st, text = scrape_text(f"http://127.0.0.1:{hport}")
    assert st == 200
    s, fams = samples(text)
    ks = [f for f in fams if f.startswith("ksidecar_")]
    assert len(ks) >= 12, ks
    assert "kafka_consumergroup_lag" in fams
    assert fams["ksidecar_delivered"] == "counter" and fams["ksidecar_partition_lag"] == "gauge"
    assert val(s, "ksidecar_groups") == 1
    assert val(s, "ksidecar_build_info", version=open_version()) == 1
    # Bad input: another method is 405 naming what is allowed; nothing else changed.
    st, body = sc.post("/metrics", {})
    assert st == 405 and "GET, HEAD" in body["error"]["message"], body
    assert sc.stop() == 0


def open_version():
    cm = (pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt").read_text()
    return cm.split("project(ksidecar VERSION ", 1)[1].split()[0]


def test_promtool_checks_a_scrape(bootstrap, sidecars):
    if not os.access(PROMTOOL, os.X_OK):
        print(f"promtool not built ({PROMTOOL}): scripts/install-deps.sh builds it into the "
              "cache; the promtool check is skipped")
        pytest.skip("promtool not built")
    topic, g = unique("tprom"), unique("gprom")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 6, partitions=2)
    sc = sidecars()
    recs = fetch_all(sc, g, topic, 6)
    sc.ack(g, [r["ack_id"] for r in recs[:3]])
    st, text = scrape_text(sc.base)
    assert st == 200
    # Well-formed: parsed whole for its cardinality, with the lint off.
    res = subprocess.run([PROMTOOL, "check", "metrics", "--lint=none", "--extended"], input=text,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    # The naming lint finds only kafka_exporter's own name, kept for its dashboards.
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    lines = [x for x in (res.stdout + res.stderr).splitlines() if x.strip()]
    assert res.returncode in (0, 3) and lines == [
        'kafka_consumergroup_lag_sum non-histogram and non-summary metrics should not have '
        '"_sum" suffix'], lines
    assert sc.stop() == 0


def test_series_cap_drops_and_counts(bootstrap, sidecars):
    topic, g = unique("tcap"), unique("gcap")
    create_topic(bootstrap, topic, 12)
    produce(bootstrap, topic, 24, partitions=12)
    sc = sidecars(["--metrics.max_series=100"])
    assert len(fetch_all(sc, g, topic, 24)) == 24

    def count():
        st, text = scrape_text(sc.base)
        s, _ = samples(text)
        return len(s), val(s, "ksidecar_metrics_series_dropped_total")

    n1, d1 = count()
    n2, d2 = count()
    # 100 samples, plus the start time and the dropped counter written whatever the cap.
    assert n1 == n2 == 102, (n1, n2)
    # What each scrape left out adds up (the count of samples moves a little with commits).
    assert d1 > 0 and d2 > d1, (d1, d2)
    # A value out of range is refused at start, naming the key.
    bad = subprocess.run([sc.proc.args[0], "--metrics.max_series=5", "--print-config"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "metrics.max_series" in bad.stderr, bad.stderr
    assert sc.stop() == 0


def test_threads_are_named_for_top_and_per_thread_cpu(bootstrap, sidecars):
    """A group's loop is "ks:" and its name cut to 15 bytes, not the name of whichever thread
    started it (the HTTP server's, for a group that HTTP started), so top -H and
    /proc/PID/task show which group uses the CPU."""
    topic, g = unique("tthr"), unique("gthreadnames")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3)
    sc = sidecars()
    assert len(fetch_all(sc, g, topic, 3)) == 3
    tasks = pathlib.Path(f"/proc/{sc.proc.pid}/task")
    names = sorted(t.joinpath("comm").read_text().strip() for t in tasks.iterdir())
    assert names.count(f"ks:{g}"[:15]) == 1, names
    for want in ("ks:producer", "ks:http-sweep", "ks:lease-sweep", "ks:grpc-cq", "ks:grpc-health"):
        assert want in names, (want, names)
    assert sc.stop() == 0


def test_a_token_sees_only_its_groups(bootstrap, sidecars, tmp_path):
    topic = unique("ttok")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 2)
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"token": "tok-a", "groups": ["a-*"], "consume": [topic]},
        {"token": "tok-b", "groups": ["b-*"], "consume": [topic]},
        {"token": "tok-none"}])
    hport = free_port()
    sc = sidecars([f"--auth.tokens_file={tokens}", f"--http.health_listen=127.0.0.1:{hport}"])
    ga, gb = unique("a-grp"), unique("b-grp")
    for grp, tok in ((ga, "tok-a"), (gb, "tok-b")):
        req = urllib.request.Request(f"{sc.base}/v1/groups/{grp}/records?topic={topic}&wait_ms=5000",
                                     headers={"Authorization": f"Bearer {tok}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
    # The API listener: a listing, as GET /v1/groups.
    st, text = scrape_text(sc.base)
    assert st == 401 and "token" in text, (st, text)
    st, text = scrape_text(sc.base, "tok-wrong")
    assert st == 401, (st, text)
    s, _ = samples(scrape_text(sc.base, "tok-a")[1])
    groups = {dict(k[1]).get("group") for k in s} - {None}
    assert groups == {ga}, groups
    assert val(s, "ksidecar_groups") == 1
    s, _ = samples(scrape_text(sc.base, "tok-none")[1])
    assert val(s, "ksidecar_groups") == 0
    assert not [k for k in s if k[0].startswith("kafka_consumergroup")]
    # The probe listener checks no caller, as for /healthz and /readyz: every group.
    st, text = scrape_text(f"http://127.0.0.1:{hport}")
    assert st == 200, (st, text)
    s, _ = samples(text)
    assert {dict(k[1]).get("group") for k in s} - {None} == {ga, gb}
    assert val(s, "ksidecar_groups") == 2
    assert sc.stop() == 0


def test_a_stream_cut_off_is_counted(bootstrap, sidecars):
    topic, g = unique("tmcut"), unique("gmcut")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3000, size=10000)
    sc = sidecars(["--http.stream_stall_ms=1000"])
    assert val(scrape(sc), "ksidecar_streams_cut_total") == 0
    s = stalled_stream(sc, g, topic)
    # While it is open it is a stream of the group (its name never a label) ...
    wait_for(lambda: val(scrape(sc), "ksidecar_streams", group=g) == 1, 30, 0.3, "one stream")
    # ... and, reading no more, it is cut off and counted once.
    wait_for(lambda: val(scrape(sc), "ksidecar_streams_cut_total") == 1, 60, 0.5, "one cut")
    assert "cut off" in sc.logs()
    s.close()
    assert sc.stop() == 0
