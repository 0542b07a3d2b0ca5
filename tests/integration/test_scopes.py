"""Who may do what, through the real binary against the real broker, on both edges: tokens
and certificate subjects scoped to groups, topics to consume and topics to produce to
(JSON tokens file, and the legacy line format), internal topics, the group listing; and
the limits: groups.max, one bound on names, streams per identity, the HTTP body that holds
the largest ack request, and stale acks after a newer id was acked."""
import json
import os
import subprocess
import time

import grpc

from conftest import create_topic, produce, unique, wait_for, watermarks
from grpc_support import (STALE, bearer, consumer_pb2, consumer_pb2_grpc, make_certs,
                          make_client_cert, open_msg, producer_pb2, rpc_code, start_grpc,
                          write_tokens_file, write_tokens_json)

from test_grpc import secure_sidecars, streams  # noqa: F401 (fixtures)

c = consumer_pb2
SC = grpc.StatusCode


def http_fetch_until(sc, group, topic, n, token, timeout=30, extra=""):
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        st, body = sc.request("GET", f"/v1/groups/{group}/records?topic={topic}&wait_ms=1000"
                              f"&max=100{extra}", token=token)
        assert st == 200, (st, body)
        got += body["records"]
    return got


def denied_http(resp, *words, status=403, code="PERMISSION_DENIED"):
    st, body = resp
    assert st == status and body["error"]["code"] == code, (st, body)
    for w in words:
        assert w in body["error"]["message"], (w, body)


def denied_grpc(res, *words, code=SC.PERMISSION_DENIED):
    got, details, _ = res
    assert got == code, (got, details)
    for w in words:
        assert w in details, (w, details)


def wait_assigned(sc):
    """Waits until every group has its partitions, before a stop: librdkafka 2.0.2 can abort
    in rd_kafka_sticky_assignor_state_destroy when a consumer closes mid-assignment."""
    wait_for(lambda: all(g["partitions"] for g in sc.get("/v1/groups")[1]["groups"]), 30,
             what="every group assigned")


def grpc_produce(sc, topics, metadata):
    req = producer_pb2.ProduceRequest(records=[producer_pb2.ProduceRecord(topic=t, value=b"v")
                                               for t in topics])
    return rpc_code(sc.producer.Produce, req, metadata=metadata, timeout=30)


def end_offset(bootstrap, topic):
    return sum(watermarks(bootstrap, topic).values())


# 1 ----------------------------------------------------------------------------------------

def test_token_scopes_refuse_every_uncovered_group_and_topic_on_both_edges(
        bootstrap, secure_sidecars, streams, tmp_path):
    orders, billing, out = unique("orders-t"), unique("secret-billing"), unique("orders-out")
    for t in (orders, billing, out):
        create_topic(bootstrap, t, 1)
    produce(bootstrap, orders, 2)
    produce(bootstrap, billing, 2)
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"token": "tok-orders", "groups": ["orders-*"], "consume": ["orders-t*"],
         "produce": [out]},
        {"token": "tok-billing", "groups": ["billing"], "consume": ["secret-billing*"],
         "produce": ["secret-billing*"]},
        {"token": "tok-none"}])
    sc = secure_sidecars(tokens_file=tokens, token="tok-orders")
    og = unique("orders-x")
    tor, tbi, tno = bearer("tok-orders"), bearer("tok-billing"), bearer("tok-none")

    # Allowed: each token its own.
    own = http_fetch_until(sc, og, orders, 2, "tok-orders")
    assert len(own) == 2
    assert len(http_fetch_until(sc, "billing", billing, 2, "tok-billing")) == 2

    # HTTP fetch: an uncovered topic, alone or beside a covered one; an uncovered group.
    want = f'token may not consume topic "{billing}" (consume scope)'
    denied_http(sc.request("GET", f"/v1/groups/{og}/records?topic={billing}&wait_ms=0"), want)
    denied_http(sc.request("GET", f"/v1/groups/{og}/records?topic={orders},{billing}&wait_ms=0"),
                want)
    denied_http(sc.request("GET", f"/v1/groups/billing/records?topic={orders}&wait_ms=0"),
                'token may not use group "billing" (groups scope)')
    denied_http(sc.request("GET", f"/v1/groups/{og}/records?topic={orders}&wait_ms=0",
                           token="tok-none"), "(groups scope)")
    # Listing: only the groups the token covers; one group's status likewise.
    st, body = sc.request("GET", "/v1/groups")
    assert st == 200 and [g["group"] for g in body["groups"]] == [og], body
    st, body = sc.request("GET", "/v1/groups", token="tok-billing")
    assert st == 200 and [g["group"] for g in body["groups"]] == ["billing"], body
    st, body = sc.request("GET", "/v1/groups", token="tok-none")
    assert st == 200 and body["groups"] == [], body
    denied_http(sc.request("GET", "/v1/groups/billing"), "(groups scope)")

    # Acks, nacks and deadlines act on records: an id of a topic outside the consume scope
    # (here forged from a real one) refuses the request, on both edges.
    forged = own[0]["ack_id"][:-len(orders)] + billing
    denied_http(sc.post(f"/v1/groups/{og}/nacks", {"ack_ids": [own[1]["ack_id"], forged]}),
                f'ack_ids[1]: token may not consume topic "{billing}" (consume scope)')
    denied_grpc(rpc_code(sc.consumer.Nack, c.NackRequest(group=og, ack_ids=[forged]),
                         metadata=tor, timeout=30), "ack_ids[0]", "(consume scope)")
    s = streams(sc.consumer, open_msg(og, [orders], records=10), metadata=tor)
    s.ack([forged])
    assert s.wait_closed(20) == SC.PERMISSION_DENIED
    assert "(consume scope)" in s.error.details(), s.error
    st, body = sc.post(f"/v1/groups/{og}/acks", {"ack_ids": [x["ack_id"] for x in own]})
    assert st == 200 and body["acked"] == 2, body

    # gRPC: Fetch, Subscribe, Produce, Seek, ListGroups and GetGroup.
    denied_grpc(rpc_code(sc.consumer.Fetch, c.FetchRequest(group=og, topics=[orders, billing],
                                                           max=1, wait_ms=0),
                         metadata=tor, timeout=30), want)
    denied_grpc(rpc_code(sc.consumer.Fetch, c.FetchRequest(group="billing", topics=[orders],
                                                           max=1, wait_ms=0),
                         metadata=tor, timeout=30), "(groups scope)")
    s = streams(sc.consumer, open_msg(og, [orders, billing], records=10), metadata=tor)
    assert s.wait_closed(20) == SC.PERMISSION_DENIED
    assert want in s.error.details(), s.error
    s = streams(sc.consumer, open_msg(og, [orders], records=10), metadata=tno)
    assert s.wait_closed(20) == SC.PERMISSION_DENIED

    before = end_offset(bootstrap, out), end_offset(bootstrap, billing)
    denied_grpc(grpc_produce(sc, [billing], tor),
                f'token may not produce to topic "{billing}" (produce scope)')
    # One record out of scope refuses the whole request: nothing is produced.
    denied_grpc(grpc_produce(sc, [out, billing], tor), "(produce scope)")
    denied_grpc(grpc_produce(sc, [orders], tor), "(produce scope)")  # consume only
    assert (end_offset(bootstrap, out), end_offset(bootstrap, billing)) == before
    code, details, _ = grpc_produce(sc, [out], tor)
    assert code == SC.OK, details
    assert end_offset(bootstrap, out) == before[0] + 1

    denied_grpc(rpc_code(sc.consumer.Seek, c.SeekRequest(group=og, topic=billing, partition=0,
                                                         earliest=True),
                         metadata=tor, timeout=30), want)
    denied_grpc(rpc_code(sc.consumer.Seek, c.SeekRequest(group="billing", topic=billing,
                                                         partition=0, earliest=True),
                         metadata=tor, timeout=30), "(groups scope)")
    resp = sc.consumer.ListGroups(c.ListGroupsRequest(), metadata=tor, timeout=30)
    assert [g.group for g in resp.groups] == [og], resp
    resp = sc.consumer.ListGroups(c.ListGroupsRequest(), metadata=tbi, timeout=30)
    assert [g.group for g in resp.groups] == ["billing"], resp
    denied_grpc(rpc_code(sc.consumer.GetGroup, c.GetGroupRequest(group="billing"),
                         metadata=tor, timeout=30), "(groups scope)")
    assert sc.stop() == 0


def test_legacy_tokens_file_loads_with_group_scopes_only(bootstrap, secure_sidecars, tmp_path):
    topic = unique("tlegacy")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    tokens = write_tokens_file(tmp_path / "tokens", [("old-token", "app-*")])
    sc = secure_sidecars(tokens_file=tokens, token="old-token")
    assert "legacy format" in sc.logs() and "no topic" in sc.logs(), sc.logs()
    g = unique("app")
    denied_http(sc.request("GET", f"/v1/groups/{g}/records?topic={topic}&wait_ms=0"),
                f'consume topic "{topic}" (consume scope', "legacy")
    denied_http(sc.request("GET", f"/v1/groups/other/records?topic={topic}&wait_ms=0"),
                "(groups scope)")
    md = bearer("old-token")
    denied_grpc(rpc_code(sc.consumer.Fetch, c.FetchRequest(group=g, topics=[topic], wait_ms=0),
                         metadata=md, timeout=30), "(consume scope", "legacy")
    denied_grpc(grpc_produce(sc, [topic], md), "(produce scope")
    # What needs the groups scope only still works.
    resp = sc.consumer.ListGroups(c.ListGroupsRequest(), metadata=md, timeout=30)
    assert list(resp.groups) == []
    # One group's readiness (it names partitions and stall details) is the group's scope's
    # business: no token 401, another group 403, a covered one not running here 404.
    st, body = sc.request("GET", f"/readyz?group={g}", token=None)
    assert st == 401, (st, body)
    denied_http(sc.request("GET", "/readyz?group=other"), "(groups scope)")
    assert sc.request("GET", f"/readyz?group={g}")[0] == 404
    assert sc.request("GET", "/readyz", token=None)[0] in (200, 503)  # the process: anyone
    assert sc.stop() == 0


def test_internal_topics_are_refused_unless_allowed(bootstrap, sidecars, streams, tmp_path):
    sc = start_grpc(sidecars)
    g = unique("ginternal")
    denied_http(sc.get(f"/v1/groups/{g}/records?topic=__consumer_offsets&wait_ms=0"),
                "__consumer_offsets", "internal", "topics.allow_internal")
    denied_grpc(rpc_code(sc.consumer.Fetch, c.FetchRequest(group=g, topics=["__consumer_offsets"],
                                                           wait_ms=0), timeout=30),
                "internal", "topics.allow_internal")
    s = streams(sc.consumer, open_msg(g, ["__consumer_offsets"], records=10))
    assert s.wait_closed(20) == SC.PERMISSION_DENIED
    denied_grpc(grpc_produce(sc, ["__ksidecar_test"], None), "internal", "topics.allow_internal")
    # A token whose scopes cover everything still gets no internal topic.
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"token": "all", "groups": ["*"], "consume": ["*"], "produce": ["*"]}])
    sc2 = start_grpc(sidecars, [f"--auth.tokens_file={tokens}"])
    denied_grpc(rpc_code(sc2.consumer.Fetch, c.FetchRequest(group=g, topics=["__consumer_offsets"],
                                                            wait_ms=0),
                         metadata=bearer("all"), timeout=30), "internal")
    # Allowed by the config key: served.
    sc3 = start_grpc(sidecars, ["--topics.allow_internal=true"])
    st, body = sc3.get(f"/v1/groups/{g}/records?topic=__consumer_offsets&wait_ms=0")
    assert st == 200, (st, body)
    wait_assigned(sc3)
    for s in (sc, sc2, sc3):
        assert s.stop() == 0


def test_mtls_subject_maps_to_scopes_without_a_token(bootstrap, secure_sidecars, tmp_path):
    certs = make_certs(tmp_path / "pki")
    app_cert, app_key = make_client_cert(tmp_path / "pki", "app1", "/O=Acme/CN=app1")
    topic, other = unique("tsubj"), unique("tsubj-other")
    for t in (topic, other):
        create_topic(bootstrap, t, 1)
    produce(bootstrap, topic, 2)
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"subject": "CN=app1,O=Acme", "groups": ["app-*"], "consume": [topic],
         "produce": [topic]},
        {"token": "tok", "groups": ["tok-*"], "consume": [topic]}])
    sc = secure_sidecars(cert=certs["server_cert"], key=certs["server_key"], ca=certs["ca"],
                         client_ca=certs["ca"], client_cert=app_cert, client_key=app_key,
                         tokens_file=tokens)
    g = unique("app")
    # No token: the certificate's subject stands for one, on both edges.
    assert len(http_fetch_until(sc, g, topic, 2, None)) == 2
    denied_http(sc.request("GET", f"/v1/groups/{g}/records?topic={other}&wait_ms=0"),
                f'the client certificate may not consume topic "{other}" (consume scope)')
    denied_http(sc.request("GET", f"/v1/groups/tok-x/records?topic={topic}&wait_ms=0"),
                "(groups scope)")
    st, body = sc.request("GET", "/v1/groups")
    assert st == 200 and [x["group"] for x in body["groups"]] == [g], body
    resp = sc.consumer.ListGroups(c.ListGroupsRequest(), timeout=30)
    assert [x.group for x in resp.groups] == [g], resp
    denied_grpc(rpc_code(sc.consumer.Fetch, c.FetchRequest(group=g, topics=[other], wait_ms=0),
                         timeout=30), "the client certificate may not consume", "(consume scope)")
    code, details, _ = grpc_produce(sc, [topic], None)
    assert code == SC.OK, details
    denied_grpc(grpc_produce(sc, [other], None), "(produce scope)")
    # A token, when sent, is who calls: its scopes, not the certificate's.
    denied_grpc(rpc_code(sc.consumer.Fetch, c.FetchRequest(group=g, topics=[topic], wait_ms=0),
                         metadata=bearer("tok"), timeout=30), "(groups scope)")
    denied_http(sc.request("GET", f"/v1/groups/{g}/records?topic={topic}&wait_ms=0",
                           token="tok"), "(groups scope)")

    # A certificate from the same CA whose subject the file does not name: no access.
    ctx = sc.make_ssl_context(with_client_cert=False)
    ctx.load_cert_chain(certs["client_cert"], certs["client_key"])
    denied_http(sc.request("GET", f"/v1/groups/{g}/records?topic={topic}&wait_ms=0",
                           context=ctx), "subject", status=401, code="UNAUTHENTICATED")
    ch = grpc.secure_channel(sc.grpc_target, grpc.ssl_channel_credentials(
        root_certificates=open(certs["ca"], "rb").read(),
        private_key=open(certs["client_key"], "rb").read(),
        certificate_chain=open(certs["client_cert"], "rb").read()))
    denied_grpc(rpc_code(consumer_pb2_grpc.ConsumerStub(ch).Fetch,
                         c.FetchRequest(group=g, topics=[topic], wait_ms=0), timeout=30),
                "subject", code=SC.UNAUTHENTICATED)
    assert sc.stop() == 0


def proc_counts(pid):
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_list_groups_returns_all_200_groups_and_per_group_cost(bootstrap, sidecars):
    topic = unique("tmany")
    create_topic(bootstrap, topic, 1)
    sc = start_grpc(sidecars, ["--groups.max=250"])
    fd0, th0 = proc_counts(sc.proc.pid)
    rss0 = rss_kb(sc.proc.pid)
    names = [unique(f"gmany{i:03d}") for i in range(200)]
    t0 = time.time()
    for g in names:
        st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&wait_ms=0")
        assert st == 200, (st, body)
    took = time.time() - t0
    time.sleep(2)  # let each group's consumer open its broker connections
    fd1, th1 = proc_counts(sc.proc.pid)
    rss1 = rss_kb(sc.proc.pid)
    print(f"\n200 groups started in {took:.1f} s; fds {fd0} -> {fd1} "
          f"({(fd1 - fd0) / 200:.1f} a group), threads {th0} -> {th1} "
          f"({(th1 - th0) / 200:.1f} a group), RSS {rss0} -> {rss1} KiB "
          f"({(rss1 - rss0) / 200:.0f} KiB a group)")
    resp = sc.consumer.ListGroups(c.ListGroupsRequest(), timeout=60)
    assert sorted(g.group for g in resp.groups) == sorted(names)
    st, body = sc.get("/v1/groups")
    assert st == 200 and len(body["groups"]) == 200


# 4 ----------------------------------------------------------------------------------------

def test_groups_max_is_resource_exhausted_on_both_edges(bootstrap, sidecars, streams):
    topic = unique("tgmax")
    create_topic(bootstrap, topic, 1)
    sc = start_grpc(sidecars, ["--groups.max=3"])
    gs = [unique("gmax") for _ in range(5)]
    for g in gs[:3]:
        st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&wait_ms=0")
        assert st == 200, (st, body)
    denied_http(sc.get(f"/v1/groups/{gs[3]}/records?topic={topic}&wait_ms=0"),
                "groups.max (3)", gs[3], status=429, code="RESOURCE_EXHAUSTED")
    denied_grpc(rpc_code(sc.consumer.Fetch, c.FetchRequest(group=gs[4], topics=[topic],
                                                           wait_ms=0), timeout=30),
                "groups.max (3)", code=SC.RESOURCE_EXHAUSTED)
    s = streams(sc.consumer, open_msg(gs[4], [topic], records=10))
    assert s.wait_closed(20) == SC.RESOURCE_EXHAUSTED
    # The running groups still serve; the process is up.
    st, body = sc.get(f"/v1/groups/{gs[0]}/records?topic={topic}&wait_ms=0")
    assert st == 200, (st, body)
    st, body = sc.get("/v1/groups")
    assert sorted(g["group"] for g in body["groups"]) == sorted(gs[:3])
    wait_assigned(sc)
    assert sc.stop() == 0


def test_groups_static_beyond_groups_max_stops_startup(bootstrap):
    from conftest import BIN
    static = json.dumps([{"name": f"s{i}", "topics": ["t"]} for i in range(3)])
    r = subprocess.run([BIN, f"--kafka.bootstrap.servers={bootstrap}", "--groups.max=2",
                        f"--groups.static={static}", "--http.listen=", "--grpc.listen="],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "groups.max" in r.stderr, (r.returncode, r.stderr)


def test_one_bound_on_names_for_every_kind_on_both_edges(bootstrap, sidecars, streams):
    topic, g = unique("tnames"), unique("gnames")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = start_grpc(sidecars)
    ok_sub, long_sub = "s" * 249, "s" * 250
    # Subscribers: 249 characters work on both edges, 250 do not.
    st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&wait_ms=0&subscriber={ok_sub}")
    assert st == 200, (st, body)
    denied_http(sc.get(f"/v1/groups/{g}/records?topic={topic}&wait_ms=0&subscriber={long_sub}"),
                "subscriber name", "at most 249", status=400, code="INVALID_ARGUMENT")
    denied_grpc(rpc_code(sc.consumer.Fetch, c.FetchRequest(group=g, topics=[topic], wait_ms=0,
                                                           subscriber=long_sub), timeout=30),
                "subscriber name", "at most 249", code=SC.INVALID_ARGUMENT)
    s = streams(sc.consumer, open_msg(g, [topic], records=10, subscriber=long_sub))
    assert s.wait_closed(20) == SC.INVALID_ARGUMENT
    assert "at most 249" in s.error.details()
    s = streams(sc.consumer, open_msg(g, [topic], records=10, subscriber=ok_sub))
    # The stream's subscriber keeps its whole name (and its stream number).
    resp = wait_for(lambda: [x for x in sc.consumer.GetGroup(c.GetGroupRequest(group=g),
                                                              timeout=30).subscribers
                             if x.name.startswith(ok_sub + "#")], 20, what="the stream's subscriber")
    assert len(resp) == 1
    # Groups and topics: 249 valid characters pass the name check, 250 do not.
    for kind, path, req in (
            ("group", f"/v1/groups/{'g' * 250}/records?topic={topic}&wait_ms=0",
             c.FetchRequest(group="g" * 250, topics=[topic], wait_ms=0)),
            ("topic", f"/v1/groups/{g}/records?topic={'t' * 250}&wait_ms=0",
             c.FetchRequest(group=g, topics=["t" * 250], wait_ms=0))):
        denied_http(sc.get(path), f"{kind} name", "1-249", status=400, code="INVALID_ARGUMENT")
        denied_grpc(rpc_code(sc.consumer.Fetch, req, timeout=30), f"{kind} name", "1-249",
                    code=SC.INVALID_ARGUMENT)
    s = streams(sc.consumer, open_msg(g, ["t" * 250], records=10))
    assert s.wait_closed(20) == SC.INVALID_ARGUMENT
    wait_assigned(sc)
    assert sc.stop() == 0


def test_streams_per_client_count_per_identity(bootstrap, secure_sidecars, streams, tmp_path):
    topic = unique("tident")
    create_topic(bootstrap, topic, 1)
    tokens = write_tokens_json(tmp_path / "tokens.json", [
        {"token": "a", "groups": ["*"], "consume": [topic]},
        {"token": "b", "groups": ["*"], "consume": [topic]}])
    sc = secure_sidecars(["--grpc.max_streams_per_client=2"], tokens_file=tokens, token="a")
    g = unique("gident")
    a, b = bearer("a"), bearer("b")
    for md in (a, a, b, b):
        s = streams(sc.consumer, open_msg(g, [topic], records=10), metadata=md)
        assert not s.done.wait(2), s.error  # open and still running
    for md in (a, b):
        s = streams(sc.consumer, open_msg(g, [topic], records=10), metadata=md)
        assert s.wait_closed(20) == SC.RESOURCE_EXHAUSTED
        assert "identity token#" in s.error.details(), s.error
    wait_assigned(sc)
    assert sc.stop() == 0


def test_http_body_limit_holds_100000_real_ack_ids(bootstrap, sidecars):
    topic, g = "t" * 241 + unique("")[:8], unique("gbody")
    topic = topic[:249]
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1)
    sc = start_grpc(sidecars)
    recs = []
    deadline = time.time() + 30
    while not recs and time.time() < deadline:
        recs = sc.fetch(g, topic, max=1, wait_ms=1000)
    real = recs[0]["ack_id"]
    # Ids of the same shape for offsets never delivered, each as long as the real one or
    # longer (offsets up to 6 digits where the real one has 1).
    head, rest = real.split("-", 1)
    epoch, part, off, att, tname = rest.split("-", 4)
    ids = [real] + [f"{head}-{epoch}-{part}-{100000 + i}-{att}-{tname}" for i in range(99_999)]
    body = json.dumps({"ack_ids": ids}).encode()
    print(f"\nbody of 100,000 ack ids of {len(ids[-1])} characters: {len(body)} bytes")
    assert len(body) > 4 << 20
    t0 = time.time()
    st, resp = sc.post(f"/v1/groups/{g}/acks", raw=body)
    print(f"answered in {time.time() - t0:.1f} s")
    assert st == 200, (st, str(resp)[:300])
    assert resp["accepted"] == 1 and resp["rejected"] == 99_999
    assert resp["results"][0]["message"] == "acked"
    assert sc.stop() == 0


def test_stale_ack_after_its_newer_id_was_acked_is_failed_precondition(bootstrap, sidecars):
    topic, g = unique("tstale2"), unique("gstale2")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 2)
    sc = start_grpc(sidecars, ["--group.ordering=none"])
    low = []
    deadline = time.time() + 30
    while not low and time.time() < deadline:
        low = sc.fetch(g, topic, max=1, wait_ms=1000)  # offset 0, kept leased
    assert low[0]["offset"] == 0
    st, body = sc.get(f"/v1/groups/{g}/records?topic={topic}&max=1&wait_ms=5000&deadline_ms=500")
    assert st == 200 and body["records"][0]["offset"] == 1, body
    old = body["records"][0]["ack_id"]
    newer = wait_for(lambda: sc.fetch(g, topic, max=1, wait_ms=1000), 20, what="redelivery")
    assert newer[0]["offset"] == 1 and newer[0]["attempt"] == 2, newer
    new = newer[0]["ack_id"]
    st, body = sc.ack(g, [new])
    assert st == 200 and body["results"][0]["message"] == "acked", body
    # The same id again, still in the window: verifiably acked.
    st, body = sc.ack(g, [new])
    assert st == 200 and body["results"][0]["message"] == "already acked", body
    # The stale id: never a success, on both edges.
    st, body = sc.ack(g, [old])
    assert st == 409 and body["results"][0]["status"] == "FAILED_PRECONDITION", body
    assert "stale" in body["results"][0]["message"]
    resp = sc.consumer.Ack(c.AckRequest(group=g, ack_ids=[old, low[0]["ack_id"]]), timeout=10)
    assert [x.status for x in resp.results][0] == STALE, resp
    # Committed past: which id was acked is no longer known, so not a success either.
    st, body = sc.ack(g, [old])
    assert st == 409 and "already committed" in body["results"][0]["message"], body
    st, body = sc.ack(g, [new])
    assert st == 409 and "already committed" in body["results"][0]["message"], body
    assert sc.stop() == 0
