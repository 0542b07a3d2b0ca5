"""The C extension (ksidecar._speedups) against the pure-Python path, on the same inputs:
the records it decodes off the wire against protobuf's, the Message fields over either
record, the ack ranges, and a whole scenario (a Book taking batches, unordered and chained
messages handed out, acked, nacked, dropped, flushed and answered) run once with
KSIDECAR_TEST_PURE_PYTHON=1 and once without, in two processes, whose traces must be equal.

Without the extension the tests of it are skipped, unless KSIDECAR_TEST_REQUIRE_SPEEDUPS=1 (as
tests/clients/python.sh sets): then its absence fails."""
import json
import os
import random
import subprocess
import sys
import threading

import pytest

from ksidecar import _common, _dispatch
from ksidecar._common import _decoded_of
from ksidecar._proto import pb

try:
    from ksidecar import _speedups
except ImportError:  # built without a C compiler
    _speedups = None

if _speedups is None and os.environ.get("KSIDECAR_TEST_REQUIRE_SPEEDUPS") == "1":
    raise ImportError("ksidecar._speedups was not built, and KSIDECAR_TEST_REQUIRE_SPEEDUPS=1")
needs_c = pytest.mark.skipif(_speedups is None, reason="ksidecar._speedups not built")

HEAD = "a1" + "0123456789abcdef"
FIELDS = [f.name for f in pb.Record.DESCRIPTOR.fields]


def sample_records():
    """Records that reach every field's edge: negatives, the largest values, nulls, empty
    and non-ASCII strings, headers with null values, and topics that change mid-batch."""
    return [
        pb.Record(topic="t", partition=0, offset=0, ack_id=f"{HEAD}-1-0-0-1-t", attempt=1),
        pb.Record(topic="tøpic-ü", partition=7, offset=2**63 - 1, timestamp_ms=-1,
                  key=b"k\x00", value=b"v" * 300, ack_id=f"{HEAD}-2-7-9-1-tøpic-ü",
                  attempt=2, ordering_chain=2**64 - 1,
                  headers=[pb.Header(key="h", value=b"\x01"), pb.Header(key="n", value_null=True),
                           pb.Header(key="", value=b"")]),
        pb.Record(topic="tøpic-ü", partition=-1, offset=-5, timestamp_ms=1700000000000,
                  key_null=True, value_null=True, ack_id="x", attempt=-3, ordering_chain=1),
        pb.Record(topic="t", partition=2**31 - 1, offset=1, value=b"", key=b"",
                  value_decoded=pb.Decoded(json='{"a":1}', format="avro", schema_id=7),
                  key_decoded=pb.Decoded(schema_id=2**31 - 1, decode_error="unknown schema id")),
        pb.Record(),
    ]


def batch_bytes(recs):
    return pb.SubscribeResponse(batch=pb.RecordBatch(records=recs)).SerializeToString()


DECODED = ("key_decoded", "value_decoded")


def fields(rec):
    out = {f: getattr(rec, f) for f in FIELDS if f != "headers" and f not in DECODED}
    out["headers"] = [(h.key, h.value, h.value_null) for h in rec.headers]
    for f in DECODED:
        out[f] = _decoded_of(rec, f)
    return out


def assert_same_records(data):
    c = _speedups.decode_batch(data)
    want = pb.SubscribeResponse.FromString(data).batch.records
    assert [fields(r) for r in c] == [fields(r) for r in want]
    return c


@needs_c
def test_decoded_records_equal_protobufs():
    recs = assert_same_records(batch_bytes(sample_records()))
    assert len(recs) == 5 and recs[1].topic is recs[2].topic  # a batch shares its topics
    assert _speedups.decode_batch(batch_bytes([])) == []


@needs_c
def test_unknown_fields_repeated_fields_and_merged_records_read_as_protobuf_reads_them():
    a, b = sample_records()[1], sample_records()[2]
    unknown = (_varint(15 << 3 | 0) + b"\5" + _varint(16 << 3 | 2) + b"\2zz" + _varint(17 << 3 | 5)
               + b"\0" * 4 + _varint(300 << 3 | 1) + b"\0" * 8)
    # One record's bytes of two records and unknown fields (protobuf merges them: a scalar
    # or string given twice takes the last, headers add up), and a field of a known number
    # with another wire type (unknown to protobuf too).
    merged = a.SerializeToString() + unknown + b.SerializeToString() + bytes([2 << 3 | 5]) + b"\0" * 4
    rec_field = bytes([1 << 3 | 2]) + _varint(len(merged)) + merged  # RecordBatch.records
    batch = rec_field + bytes([9 << 3 | 0, 1])  # and an unknown field of RecordBatch
    data = bytes([1 << 3 | 2]) + _varint(len(batch)) + batch  # SubscribeResponse.batch
    assert_same_records(data)
    assert_same_records(data + data)  # two batch fields: their records add up


@needs_c
def test_other_responses_are_left_to_protobuf():
    for resp in (pb.SubscribeResponse(),
                 pb.SubscribeResponse(ack_results=pb.AckResults(accepted=3)),
                 pb.SubscribeResponse(assignment=pb.Assignment(
                     partitions=[pb.TopicPartition(topic="t", partition=1)])),
                 pb.SubscribeResponse(revocation=pb.Revocation())):
        assert _speedups.decode_batch(resp.SerializeToString()) is None
    # A batch followed by another kind: the last wins, as in protobuf.
    data = batch_bytes(sample_records()) + pb.SubscribeResponse(
        ack_results=pb.AckResults(accepted=1)).SerializeToString()
    assert _speedups.decode_batch(data) is None
    if _common._C is not None:  # the library's own decoder (not with KSIDECAR_TEST_PURE_PYTHON)
        assert _common.decode_response(data).WhichOneof("kind") == "ack_results"


@needs_c
def test_malformed_bytes_fail_as_protobuf_fails():
    good = batch_bytes(sample_records())
    bad_utf8 = batch_bytes([pb.Record(topic="tt")]).replace(b"tt", b"\xff\xfe")
    field_0 = bytes([1 << 3 | 2, 2, 0, 0])  # a RecordBatch field numbered 0
    for data in (good[:-1], good[:7], bytes([1 << 3 | 2, 0x80]), bad_utf8, bytes([1 << 3 | 3]),
                 field_0, bytes([1 << 3 | 2]) + b"\xff" * 11):
        with pytest.raises(Exception):
            pb.SubscribeResponse.FromString(data)
        with pytest.raises(ValueError):
            _speedups.decode_batch(data)


@needs_c
def test_mutated_bytes_decode_as_protobuf_decodes_them():
    """Random bytes changed, cut and added in a valid batch: the library's decoding (the
    extension's, and protobuf for what it leaves) fails exactly when protobuf's does, and
    otherwise gives protobuf's records."""
    base = batch_bytes(sample_records())
    rng = random.Random(39)
    outcomes = set()
    for _ in range(3000):
        d = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            at, op = rng.randrange(len(d) + 1), rng.random()
            if op < 0.5 and at < len(d):
                d[at] = rng.randrange(256)
            elif op < 0.75:
                del d[at:at + rng.randint(1, 5)]
            else:
                d.insert(at, rng.randrange(256))
        d = bytes(d)
        try:
            want = pb.SubscribeResponse.FromString(d)
        except Exception:
            want = None
        try:
            got = _speedups.decode_batch(d)  # ValueError when it refuses
            if got is None:  # another kind of response: the library parses it with protobuf
                pb.SubscribeResponse.FromString(d)
        except Exception:
            assert want is None, d.hex()
            outcomes.add("both refuse")
            continue
        assert want is not None, d.hex()
        if got is not None:
            assert [fields(r) for r in got] == [fields(r) for r in want.batch.records], d.hex()
            outcomes.add("same records")
    assert outcomes == {"both refuse", "same records"}


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


class _PyMessage(_common._PyMessageCore):
    __slots__ = ()


@needs_c
def test_message_fields_equal_over_either_record_and_either_message():
    class CMessage(_speedups.MessageCore):
        __slots__ = ()

    class Book(_speedups.BookCore):
        pass

    class Batch(_speedups.BatchCore):
        pass

    data = batch_bytes(sample_records())
    for recs in (_speedups.decode_batch(data), list(pb.SubscribeResponse.FromString(data).batch.records)):
        b = Batch()
        b.book, b.gen, b.recs, b.state = Book(), 0, recs, bytearray([0, 1, 2, 3, 0])
        pb_ = _common._PyBatchCore()
        pb_.book, pb_.gen, pb_.recs, pb_.state = None, 0, recs, b.state
        for i, rec in enumerate(recs):
            got, want = CMessage(rec, b, i), _PyMessage(rec, pb_, i)
            for name in ("ack_id", "topic", "partition", "offset", "timestamp_ms", "attempt",
                         "key", "value", "size", "settled", "_i", "_ch"):
                assert getattr(got, name) == getattr(want, name), (i, name)
            assert got._rec is rec and got._batch is b
            with pytest.raises(AttributeError):
                got._fut
    ms = list(_speedups.iter_messages(CMessage, b))
    assert [m._i for m in ms] == list(range(5)) and all(type(m) is CMessage for m in ms)


def ids_for_ranges(rng):
    """A list of ack ids as a subscriber acks them: runs of consecutive offsets, with ids of
    other epochs, partitions, attempts and topics between, repeats, and ids of other forms."""
    odd = ["x", "", "a1", f"{HEAD}-1-0--1-t", f"{HEAD}-1-0-007-1-t", f"{HEAD}-1-0-1~2-1-t",
           f"{HEAD}-1-0-{2**63 - 1}-1-t", f"{HEAD}-1-0-{2**63}-1-t", f"{HEAD}-1-0-{10**19}-1-t",
           f"{HEAD}--0-5-1-t", f"{HEAD}-1--5-1-t", f"{HEAD}-1-0-5", "b1" + HEAD[2:] + "-1-0-5-1-t",
           f"a1{'-' * 17}-1-0-5-1-t", f"{HEAD}-1-0-٣-1-t", f"{HEAD}-1-0-5-1-"]
    topics = ["t", "tøpic", "t-with-dashes", "日本", "𝔘"]
    out = []
    while len(out) < 400:
        r = rng.random()
        if r < 0.1:
            out.append(rng.choice(odd))
        elif r < 0.15 and out:
            out.append(rng.choice(out))
        else:
            e, p, a, t = rng.randint(1, 3), rng.randint(0, 2), rng.randint(1, 2), rng.choice(topics)
            o = rng.choice([0, 1, 9, 99, 2**63 - 5, rng.randint(0, 10**6)])
            for k in range(rng.randint(1, 30)):
                out.append(f"{HEAD}-{e}-{p}-{o + k}-{a}-{t}")
    return out


@needs_c
def test_ack_ranges_equal_pythons():
    rng = random.Random(39)
    for _ in range(200):
        ids = ids_for_ranges(rng)
        cut = rng.randint(0, len(ids))
        for part in (ids, ids[:cut], ids[cut:], ids[::-1], ids[::2]):
            assert _speedups.ack_ranges(part) == _common.py_ack_ranges(part)
    assert _speedups.ack_ranges(()) == [] and _speedups.ack_ranges(["x"]) == ["x"]
    # Each edge of the offset field followed by the id one offset on, which only a field
    # taken for an offset joins into a range.
    for off, nxt in (("07", "8"), ("0", "1"), (str(2**63 - 2), str(2**63 - 1)),
                     (str(2**63 - 1), str(2**63)), ("9" * 19, "1" + "0" * 19), ("٣", "4"),
                     (str(2**64 + 1), "2"), ("1", "2"), ("", "1"), ("+1", "2"), (" 1", "2")):
        for head, tail in ((HEAD, "-1-t"), (HEAD, "-1-"), (HEAD + "x", "-1-t"), ("a1", "-1-t"),
                           (HEAD, "-1-tøpic"), ("a1" + "-" * 16, "-1-t")):
            pair = [f"{head}-1-0-{off}{tail}", f"{head}-1-0-{nxt}{tail}"]
            assert _speedups.ack_ranges(pair) == _common.py_ack_ranges(pair), pair


@needs_c
def test_the_extensions_lock_works_as_threading_lock_and_holds_off_its_calls():
    lock = _speedups.Lock()
    with lock:
        assert lock.locked() and not lock.acquire(False)
    assert not lock.locked() and lock.acquire(False)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    if _common._C is None:
        return  # KSIDECAR_TEST_PURE_PYTHON: the dispatcher is the Python one
    book = _common.Book(_common.Settings(target="x", group="g", topics=("t",)), wake=lambda: None)
    gen = book.new_stream(lambda r: None)
    recs = [pb.Record(topic="t", partition=0, offset=o, ordering_chain=1, ack_id=f"i{o}")
            for o in range(3)]
    b = book.take(pb.SubscribeResponse(batch=pb.RecordBatch(records=recs)), gen)
    assert type(book.disp.lock) is _speedups.Lock
    got = []
    with book.disp.lock:  # as a Python method of the dispatcher holds it
        t = threading.Thread(target=lambda: got.extend(_common.handed(b.msgs, book.disp)))
        t.start()
        t.join(0.3)
        assert t.is_alive() and got == []  # hand() waits for the lock
    t.join(10)
    assert [m.offset for m in got] == [0, 1, 2] and not t.is_alive()


# A Book taking the same bytes through the library's own path (protobuf with
# KSIDECAR_TEST_PURE_PYTHON=1, the extension without), in a process of its own: its trace.
SCENARIO = r'''
import json, sys
from google.protobuf.json_format import MessageToDict
from ksidecar import _accel, _common
from ksidecar._common import Book, Message, Settings, fresh_messages, handed
from ksidecar._proto import pb

HEAD = "a1" + "0123456789abcdef"
trace = {"path": _accel.active()}
sent = []
book = Book(Settings(target="x", group="g", topics=("t",), ack_max_ids=7), wake=lambda: None)
book.disp.grace = 60.0
gen = book.new_stream(sent.append)

def take(recs):
    data = pb.SubscribeResponse(batch=pb.RecordBatch(records=recs)).SerializeToString()
    resp = (_common.decode_response(data) if _accel.speedups
            else pb.SubscribeResponse.FromString(data))
    return book.take(resp, gen)

def rec(p, o, chain=0, attempt=1, key=b"k", hdr=()):
    return pb.Record(topic="t", partition=p, offset=o, ordering_chain=chain, attempt=attempt,
                     key=key, value=b"v%d" % o, key_null=not key, timestamp_ms=o * 10,
                     headers=[pb.Header(key=k, value=v) for k, v in hdr],
                     ack_id=f"{HEAD}-3-{p}-{o}-{attempt}-t")

def look(m):
    return [m.ack_id, m.topic, m.partition, m.offset, m.timestamp_ms, m.attempt,
            None if m.key is None else m.key.hex(), m.value.hex(), m.size, m.headers and
            [[k, v.hex()] for k, v in m.headers], m.settled, repr(m)]

# Unordered: acked in order but for a nack, an ack with a future and an ack twice.
b = take([rec(0, o) for o in range(12)] + [rec(1, o, key=b"", hdr=[("h", b"1")]) for o in range(5)])
futs = []
for m in fresh_messages(Message, b):
    trace.setdefault("unordered", []).append(look(m))
    if m.offset == 3 and m.partition == 0:
        m.nack(delay_ms=5, reason="r")
    elif m.offset == 5:
        futs.append(m.ack_with_result())
    else:
        m.ack()
        m.ack()
book.flush()
# Chained: two chains; a nack of chain 1 drops its later copies, and those still on their
# way; chain 2 goes on; the nacked record comes again (attempt 2) and lifts the fence.
b2 = take([rec(2, o, chain=1 + o % 2) for o in range(10)])
for m in handed(b2.msgs, book.disp):
    trace.setdefault("chained", []).append(look(m))
    if m.offset == 2:
        m.nack()
    else:
        m.ack()
b3 = take([rec(2, o, chain=1 + o % 2) for o in range(10, 14)])
trace["late"] = [look(m) for m in handed(b3.msgs, book.disp)]
b4 = take([rec(2, o, chain=1, attempt=2) for o in (2, 4)])
for m in handed(b4.msgs, book.disp):
    trace.setdefault("again", []).append(look(m))
    m.ack()
book.flush()
trace["states"] = [list(x.state) for x in (b, b2, b3, b4)]
trace["dropped"] = book.disp.dropped
trace["sent"] = [MessageToDict(r) for r in sent]
# Every ack answered accepted, in order; futures resolve.
for r in sent:
    kind = r.WhichOneof("kind")
    ids = list(getattr(r, kind).ack_ids)
    n = sum(len(_common.range_ids(i) or [i]) for i in ids)
    if kind == "ack" and r.ack.results_by_position:
        book.take(pb.SubscribeResponse(ack_results=pb.AckResults(accepted=n)), gen)
    else:
        book.take(pb.SubscribeResponse(ack_results=pb.AckResults(
            results=[pb.AckResult(ack_id=i, status=1) for i in ids])), gen)
trace["futures"] = [[f.result(0).ack_id, f.result(0).status.name] for f in futs]
trace["left"] = book.left()
trace["unsettled"] = sorted(m.ack_id for m in book.unsettled())

# The callback forms' calls, as a worker makes them: chains pushed, taken, run and done; a
# chain longer than a turn pushed again; a handler that returns without settling holds its
# chain until its settle hands it on; a nack drops its chain's later messages.
book2 = Book(Settings(target="x", group="g", topics=("t",)), wake=lambda: None)
gen = book2.new_stream(sent.append)
book = book2
pushed = []
book.disp.start(pushed.append)
b5 = take([rec(3, o, chain=1) for o in range(70)] + [rec(3, 100 + o, chain=2 + o % 3) for o in range(9)])
ran, held = [], []
while pushed:
    c = pushed.pop(0)
    n = 0
    while True:
        m = book.disp.take(c)
        if m is None:
            break
        ran.append([m.offset, c.key[2]])
        if m.offset == 104:
            m.nack()
        elif m.offset == 101 and not held:
            held.append(m)  # returns unsettled: released, holds chain 3
        else:
            m.ack()
        go = book.disp.done(c, m, n)
        ran[-1] += [go, b5.state[m._i]]  # a held one RELEASED
        if not go:
            break
        n += 1
    if not pushed and held:
        held.pop().ack()  # its settle pushes chain 3 on
trace["ran"] = ran
trace["states5"] = list(b5.state)
trace["dropped2"] = book.disp.dropped

# The sync callback form's worker on unordered messages: a callback that raises (the
# message nacked by sub._raised), one that settles, one that leaves its message unsettled
# (released), a message of an ended stream (skipped), and the subscriber closing mid-way.
class Sub:
    def __init__(self, book):
        self.book, self._closing, self.raised = book, False, []

    def _raised(self, m, e):
        self.raised.append([m.offset, type(e).__name__, str(e), e.__traceback__ is not None])
        m.nack()

def handle(m):
    calls.append(m.offset)
    if m.offset % 5 == 1:
        raise ValueError(f"bad {m.offset}")
    if m.offset % 5 == 2:
        m.ack()
    if m.offset == 17:
        sub._closing = True

sub = Sub(book)
calls = []
b6 = take([rec(4, o) for o in range(10)])
old = b6.messages()[:3]
book.stream_lost("test", quiet=True)
gen = book.new_stream(sent.append)
b7 = take([rec(4, o) for o in range(10, 25)])
msgs = old + b7.messages()
trace["run"] = [_common.run_messages(msgs[:8], handle, sub), _common.run_messages(msgs[8:], handle, sub)]
trace["calls"], trace["raised"] = calls, sub.raised
trace["states7"] = list(b7.state)

# The sync callback form's worker on a chain (run_chain): a chain's messages in turn; one
# whose callback raises is nacked (its chain's later ones dropped) and ends the turn, one
# left unsettled ends it (released, holding its chain), and the subscriber closing ends it.
sub._closing, sub.raised, calls = False, [], []
del pushed[:]

def handle2(m):
    calls.append(m.offset)
    if m.offset == 203:
        raise ValueError("bad 203")
    if m.offset == 301:
        return
    if m.offset == 402:
        sub._closing = True
    m.ack()

b8 = take([rec(5, 200 + o, chain=7) for o in range(8)] + [rec(5, 300 + o, chain=8) for o in range(3)]
          + [rec(5, 400 + o, chain=9) for o in range(5)])
runs = []
while pushed:
    c = pushed.pop(0)
    runs.append([c.key[2], _common.run_chain(c, handle2, sub)])
trace["chain_runs"], trace["chain_calls"], trace["chain_raised"] = runs, calls, sub.raised
trace["states8"] = list(b8.state)
json.dump(trace, sys.stdout)
'''


def run_scenario(pure):
    env = dict(os.environ, KSIDECAR_TEST_PURE_PYTHON="1" if pure else "0")
    out = subprocess.run([sys.executable, "-c", SCENARIO], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@needs_c
def test_a_scenario_traces_the_same_on_both_paths():
    c, py = run_scenario(False), run_scenario(True)
    assert (c.pop("path"), py.pop("path")) == ("c", "python")
    assert c == py
    # What the scenario is meant to reach, so that equal traces mean something.
    assert len(py["unordered"]) == 17 and py["dropped"] >= 4
    assert [m[3] for m in py["late"]] == [11, 13]  # chain 1's dropped: its nack's fence
    assert any("~" in i for r in py["sent"] for i in r.get("ack", {}).get("ackIds", []))
    assert any("nack" in r for r in py["sent"]) and py["left"] == 0
    assert [s for s, _ in py["futures"]] and py["futures"][0][1] == "ACCEPTED"
    ran = [r[0] for r in py["ran"]]
    assert [101, 3, False, 2] in py["ran"]  # returned unsettled: released, holds its chain
    assert ran[:64] == list(range(64)) and 101 in ran and 107 not in ran and 69 in ran
    assert _speedups.CHAIN_RUN == _dispatch.CHAIN_RUN
    assert py["run"] == [True, False] and py["calls"][0] == 10 and py["calls"][-1] == 17
    assert ["11", "ValueError"] == [str(py["raised"][0][0]), py["raised"][0][1]] and py["raised"][0][3]
    assert 2 in py["states7"] and 1 in py["states7"] and 0 in py["states7"]  # released, settled, not run
    assert py["chain_runs"] == [[7, None], [8, None], [9, None]]
    assert py["chain_calls"] == [200, 201, 202, 203, 300, 301, 400, 401, 402]
    assert [r[:2] for r in py["chain_raised"]] == [[203, "ValueError"]] and py["chain_raised"][0][3]
    # 200-203 settled (203 nacked), 204-207 dropped, 301 released, 403 and 404 not run.
    assert py["states8"] == [1] * 4 + [3] * 4 + [1, 2, 0] + [1, 1, 1, 0, 0]
