"""Shared parts of the sync and asyncio clients: settings, channels, messages, and the book
of leases and acks that both Subscribers drive."""
import collections
import concurrent.futures
import dataclasses
import enum
import itertools
import json
import logging
import operator
import pathlib
import random
import threading
import time

import grpc

from . import errors
from ._accel import speedups as _C
from ._dispatch import DROPPED, RELEASED, SETTLED, UNSETTLED, Dispatcher
from ._proto import pb, pb_grpc

log = logging.getLogger("ksidecar")


class AckStatus(enum.IntEnum):
    """What ksidecar answered for an ack id (consumer.proto AckStatus)."""
    UNSPECIFIED = 0
    ACCEPTED = 1
    INVALID = 2    # malformed, or of another group
    NOT_FOUND = 3  # no delivered record has it
    STALE = 4      # revoked, redelivered since, from an earlier stream or process
    COMMITTED = 5          # only for an ack that waited for its commit
    LOST_TO_REBALANCE = 6  # the same: its partition moved before a commit covered it
    COMMIT_FAILED = 7      # the same: the commit failed


@dataclasses.dataclass(frozen=True)
class AckResult:
    ack_id: str
    status: AckStatus
    message: str = ""
    # For an ack that waited for its commit: the partition's commit point the broker
    # confirmed (the next offset it delivers from), -1 if none; 0 otherwise.
    committed_offset: int = 0

    @property
    def ok(self):
        """ksidecar took the ack (ACCEPTED), and with wait_commit a commit covers it."""
        return self.status in (AckStatus.ACCEPTED, AckStatus.COMMITTED)


# The settlement of an ack that waits for its commit (Book.settle's nack argument).
WAIT_COMMIT = "wait_commit"

# The most records an ack message with ranges may name (ksidecar's KS_ACK_RANGE_MAX): its
# answer, a result for each refused record, must fit one gRPC message.
ACK_RANGE_MAX = 8000


def _offset_field(ack_id):
    """(start, end, offset) of the offset field of an ack id, "a1<16 hex digits>-<epoch>-
    <partition>-<offset>-<attempt>-<topic>", or None for an id of another form (it is then
    sent as it is). An offset written otherwise than ksidecar writes it (a leading zero)
    counts as another form."""
    if len(ack_id) < 20 or ack_id[0] != "a" or ack_id[1] != "1" or ack_id[18] != "-":
        return None
    p = ack_id.split("-", 4)
    if len(p) != 5 or not p[1] or not p[2]:
        return None
    o = p[3]
    if not (o.isascii() and o.isdigit()) or len(o) > 19 or (o[0] == "0" and len(o) > 1):
        return None
    off = int(o)
    if off >= 1 << 63:
        return None
    start = len(p[0]) + len(p[1]) + len(p[2]) + 3
    return start, start + len(o), off


def py_ack_ranges(ids):
    """The ack_ids of one AckIds for ids: each run of ids that differ only in consecutive
    offsets (one partition's records of one epoch and attempt, acked in order) as one range
    id, "<first>~<last>" in the offset's place; any other id as it is. ids must name at
    most ACK_RANGE_MAX records."""
    out = []
    n = len(ids)
    i = 0
    while i < n:
        a = ids[i]
        j = i + 1
        f = _offset_field(a) if j < n else None
        if f is not None:
            s, e, first = f
            head, tail = a[:s], a[e:]
            last = first
            while j < n and ids[j] == f"{head}{last + 1}{tail}":
                last += 1
                j += 1
            if last > first:
                a = f"{head}{first}~{last}{tail}"
        out.append(a)
        i = j
    return out


# The extension's ack_ranges gives the same list (tests/test_speedups.py).
ack_ranges = _C.ack_ranges if _C else py_ack_ranges


def range_ids(ack_id):
    """The single ids of a range id (ack_ranges' form), or None for any other id."""
    if "~" not in ack_id:
        return None
    p = ack_id.split("-", 4)
    if len(p) != 5:
        return None
    lo, _, hi = p[3].partition("~")
    if not (lo.isascii() and lo.isdigit() and hi.isascii() and hi.isdigit()):
        return None
    if not 0 <= int(hi) - int(lo) < ACK_RANGE_MAX:
        return None
    head, tail = "-".join(p[:3]) + "-", "-" + p[4]
    return [f"{head}{o}{tail}" for o in range(int(lo), int(hi) + 1)]


@dataclasses.dataclass(frozen=True)
class TLS:
    """TLS to ksidecar. Each field is PEM bytes or a path to a PEM file. root_certs: the CA
    that signed ksidecar's certificate (None: the system's roots); cert_chain and
    private_key: this client's certificate for mTLS; server_name: overrides the name the
    certificate is checked against."""
    root_certs: object = None
    cert_chain: object = None
    private_key: object = None
    server_name: str = None

    def credentials(self):
        return grpc.ssl_channel_credentials(_pem(self.root_certs), _pem(self.private_key),
                                            _pem(self.cert_chain))


def topic_list(topics):
    """topics as a tuple; a single string is refused (it would be read as letters)."""
    if isinstance(topics, (str, bytes)) or not topics:
        raise errors.InvalidArgumentError(f"topics must be a non-empty list of names, got {topics!r}")
    return tuple(topics)


def _pem(v):
    if v is None or isinstance(v, bytes):
        return v
    return pathlib.Path(v).read_bytes()


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a Subscriber can be told; see Subscriber's docstring."""
    target: str
    group: str
    topics: tuple
    max_messages: int = 4000
    max_bytes: int = 100 << 20
    deadline_ms: int = 30000
    max_lease_extension_s: float = 3600.0
    ack_max_ids: int = 1000
    ack_max_delay_ms: float = 5.0
    token: str = None
    tls: TLS = None
    subscriber_name: str = ""
    connect_timeout_s: float = 10.0
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    reconnect_timeout_s: float = 300.0
    channel_options: tuple = ()
    ack_ranges: bool = True
    value_format: str = ""
    key_format: str = ""

    def check(self):
        if not self.group:
            raise errors.InvalidArgumentError("group is required")
        for name in ("max_messages", "max_bytes", "deadline_ms", "ack_max_ids"):
            if getattr(self, name) < 1:
                raise errors.InvalidArgumentError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.ack_max_delay_ms < 0 or self.max_lease_extension_s < 0:
            raise errors.InvalidArgumentError("ack_max_delay_ms and max_lease_extension_s must be >= 0")

    def metadata(self):
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def open_request(self):
        return pb.SubscribeRequest(open=pb.Open(
            group=self.group, topics=list(self.topics), deadline_ms=self.deadline_ms,
            credits=pb.Credits(records=self.max_messages, bytes=self.max_bytes),
            subscriber=self.subscriber_name, ordered_batches=True,
            value_format=self.value_format, key_format=self.key_format))

    def backoff(self, attempt):
        """Seconds to wait before reconnect attempt number attempt (0-based): exponential,
        capped, with jitter in [50%, 100%] so that many clients do not come back at once."""
        d = min(self.backoff_max_s, self.backoff_initial_s * (2 ** min(attempt, 30)))
        return d * random.uniform(0.5, 1.0)


CHANNEL_OPTIONS = (("grpc.max_receive_message_length", -1),
                   ("grpc.max_send_message_length", 64 << 20))


def make_channel(target, tls, options, aio=False):
    """A channel to target: TLS when tls is given, else plaintext."""
    mod = grpc.aio if aio else grpc
    opts = list(CHANNEL_OPTIONS) + list(options)
    if tls is not None:
        if tls.server_name:
            opts.append(("grpc.ssl_target_name_override", tls.server_name))
        return mod.secure_channel(target, tls.credentials(), options=opts)
    return mod.insecure_channel(target, options=opts)


def probe_error(err, s):
    """The error to raise for a failed first call, or None to try again (UNAVAILABLE)."""
    if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return None
    what = f"connecting to group {s.group!r}" + (" (no token given)" if not s.token else "")
    return errors.from_rpc(err, s.target, what)


def connect_failed(s, last):
    return errors.ConnectError(
        f"no ksidecar answered at {s.target} within {s.connect_timeout_s:g} s "
        f"({'TLS' if s.tls else 'plaintext'}): {errors.describe(last) if last else 'no answer'}",
        code="UNAVAILABLE", target=s.target, details=errors.describe(last) if last else "")


def probe(channel, s):
    """Checks (sync) that ksidecar answers at s.target and takes the token, with a
    ListGroups call retried until s.connect_timeout_s. Raises ConnectError or the typed
    error of the refusal (AuthenticationError for a bad token)."""
    stub = pb_grpc.ConsumerStub(channel)
    end = time.monotonic() + s.connect_timeout_s
    last = None
    while time.monotonic() < end:
        try:
            stub.ListGroups(pb.ListGroupsRequest(), metadata=s.metadata(),
                            timeout=max(0.1, min(5.0, end - time.monotonic())))
            return
        except grpc.RpcError as e:
            bad = probe_error(e, s)
            if bad:
                raise bad from None
            last = e
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
    raise connect_failed(s, last)


class Reconnect:
    """When a Subscriber's stream ends: fail (a non-retryable code, or reconnecting failed
    for reconnect_timeout_s) or wait a backoff and open it again. Not thread-safe: the
    reader alone uses it."""

    def __init__(self, s, book):
        self.s, self.book = s, book
        self.attempt = 0
        self.failing_since = None
        self.count = 0

    def took(self):
        """A response came: the stream works, the next failure starts the backoff again."""
        self.attempt, self.failing_since = 0, None

    def after(self, err, closing):
        """The stream ended with err (a grpc.RpcError, or None when ksidecar ended it).
        Tells the book, then returns (error, None) to give up with, (None, delay) to open
        it again after delay seconds, or (None, None) when closing."""
        if closing:
            self.book.stream_lost("closed", quiet=True)
            return None, None
        why = errors.describe(err) if err is not None else "ended by ksidecar"
        self.book.stream_lost(why)
        what = f"Subscribe to group {self.s.group!r}"
        if err is not None and err.code() not in errors.RETRYABLE:
            return errors.from_rpc(err, self.s.target, what), None
        now = time.monotonic()
        self.failing_since = self.failing_since or now
        if now - self.failing_since > self.s.reconnect_timeout_s:
            return errors.UnavailableError(
                f"{what} at ksidecar {self.s.target}: gave up reconnecting after "
                f"{self.s.reconnect_timeout_s:g} s: {why}",
                code=err.code().name if err is not None else None, target=self.s.target), None
        delay = self.s.backoff(self.attempt)
        self.attempt += 1
        self.count += 1
        log.warning("ksidecar: reconnecting to %s in %.2f s (attempt %d): %s", self.s.target,
                    delay, self.attempt, why)
        return None, delay


class _PyMessageCore:
    """The per-record part of Message: its fields, the getters of its record and ack(). The
    extension's MessageCore is the same in C."""
    __slots__ = ("_rec", "_batch", "_i", "_fut", "_ch")

    def __init__(self, rec, batch, i):
        self._rec = rec
        self._batch = batch
        self._i = i
        self._ch = None

    ack_id = property(lambda self: self._rec.ack_id)
    topic = property(lambda self: self._rec.topic)
    partition = property(lambda self: self._rec.partition)
    offset = property(lambda self: self._rec.offset)
    timestamp_ms = property(lambda self: self._rec.timestamp_ms)
    attempt = property(lambda self: self._rec.attempt)
    key = property(lambda self: None if self._rec.key_null else self._rec.key)
    value = property(lambda self: None if self._rec.value_null else self._rec.value)
    size = property(lambda self: len(self._rec.key) + len(self._rec.value))

    @property
    def settled(self):
        """Acked or nacked (or dropped unhanded, taken back by ksidecar)."""
        return bool(self._batch.state[self._i] & 1)

    def ack(self):
        """Acks the record (batched on the wire). Never blocks, never raises."""
        b = self._batch
        if self._ch is not None:
            if not b.book.disp.settle(self, False):  # marks it SETTLED, hands its chain on
                return
        else:
            st = b.state
            if st[self._i] & 1:
                return
            st[self._i] = SETTLED
        # The hot path: no lock (deque.append is atomic); Book.flush drains the deque. A
        # batch of the current stream means a stream to send on (stream_lost moves gen on).
        book = b.book
        if b.gen != book.gen:
            book.settle(self, None)  # STALE
            return
        acks = book.acks
        acks.append(self._rec.ack_id)
        if len(acks) >= book.max_ids:
            book.flush()
        elif not book.armed:
            book.armed = True
            book.wake()


MessageCore = _C.MessageCore if _C else _PyMessageCore


def _decoded_of(rec, name):
    """Record.key_decoded or value_decoded (a Decoded), or None: from the protobuf record, or
    from the bytes the extension's record keeps of it."""
    if hasattr(rec, "HasField"):
        return getattr(rec, name) if rec.HasField(name) else None
    raw = getattr(rec, name + "_raw")
    return None if raw is None else pb.Decoded.FromString(raw)


def _decoded(d):
    if d is None:
        return None
    if d.decode_error:
        raise errors.DecodeError(d.decode_error)
    return json.loads(d.json) if d.json else None


class Message(MessageCore):
    """One delivered record, leased to this subscriber until ack() or nack().

    topic, partition, offset, key and value (bytes, or None when null), headers (a list of
    (key, value) pairs), timestamp_ms (-1 if unknown), attempt (1 on first delivery),
    ack_id and size (key plus value bytes). Thread-safe; settling twice does nothing.

    Its state lives in its batch (Batch.state[i]), not in the message, so that nothing of
    the library refers back to an unordered message: it is freed as soon as its handler
    drops it. A message of an ordering chain (_ch, its Chain) settles through the
    Subscriber's Dispatcher, which holds it while it waits its turn."""
    __slots__ = ()

    @property
    def headers(self):
        return [(h.key, None if h.value_null else h.value) for h in self._rec.headers]

    def value_json(self):
        """The value decoded with its schema (value_format, or the group's
        group.value_format, a schema format) as Python objects; None when it was not decoded
        (a binary format, a null value). A value that could not be decoded raises
        ksidecar.DecodeError naming the cause (value still has its bytes)."""
        return _decoded(_decoded_of(self._rec, "value_decoded"))

    def key_json(self):
        """The key as value_json() has the value."""
        return _decoded(_decoded_of(self._rec, "key_decoded"))

    @property
    def value_schema_id(self):
        """The value's schema id when it was shown in a schema format, else None."""
        d = _decoded_of(self._rec, "value_decoded")
        return d.schema_id if d is not None and d.schema_id else None

    def nack(self, delay_ms=0, reason="", dead_letter=False):
        """Puts the record back, to be delivered again after delay_ms. dead_letter=True
        rejects it as poison: it goes to the group's dead-letter topic at once, with reason
        in its ksidecar.last_error header (with no dead-letter topic, it comes again)."""
        if self._take(True):
            self._batch.book.settle(self, (int(delay_ms), reason, bool(dead_letter)))

    def ack_with_result(self, wait_commit=False):
        """Acks and returns a concurrent.futures.Future of its AckResult (ACCEPTED once
        ksidecar took it; STALE, INVALID or NOT_FOUND otherwise). Never raises.

        wait_commit=True resolves only once a commit the broker confirmed covers the record
        (COMMITTED, with committed_offset), or with LOST_TO_REBALANCE or COMMIT_FAILED, or
        ACCEPTED when ksidecar's wait (5 s) ended first: the ack is then taken but not known
        durable. Such acks go in their own messages."""
        return self._settle_with_result(WAIT_COMMIT if wait_commit else None)

    def nack_with_result(self, delay_ms=0, reason="", dead_letter=False):
        return self._settle_with_result((int(delay_ms), reason, bool(dead_letter)))

    def _take(self, nack=False):
        """Marks the message SETTLED; False when it was settled already."""
        if self._ch is not None:
            return self._batch.book.disp.settle(self, nack)
        st = self._batch.state
        if st[self._i] & 1:
            return False
        st[self._i] = SETTLED
        return True

    def _settle_with_result(self, nack):
        if not self._take(nack is not None and nack is not WAIT_COMMIT):
            return getattr(self, "_fut", None) or done_future(
                AckResult(self.ack_id, AckStatus.INVALID, "already settled without a result wanted"))
        self._fut = concurrent.futures.Future()
        self._batch.book.settle(self, nack, self._fut)
        return self._fut

    def __repr__(self):
        return (f"Message({self.topic}[{self.partition}]@{self.offset} attempt={self.attempt} "
                f"ack_id={self.ack_id!r})")


class _PyBatchCore:
    __slots__ = ("book", "gen", "t", "until", "recs", "state", "msgs")


class Batch(_C.BatchCore if _C else _PyBatchCore):
    """One delivered batch: its records, the state of each (UNSETTLED, SETTLED, RELEASED,
    DROPPED) and the lease they share: delivered together, they are due together and
    extended together (those not settled). msgs: its Messages, made on arrival when some
    record belongs to an ordering chain (the chains hold them), else None (made when
    handed out); () once all of them were settled and the book let the batch go."""
    __slots__ = ()

    def __init__(self, book, gen, t, until, recs):
        self.book, self.gen, self.t, self.until = book, gen, t, until
        self.recs = recs
        self.state = bytearray(len(recs))
        self.msgs = None

    def messages(self, cls=None):
        """A new Message for each record (the sync or asyncio class)."""
        return list(fresh_messages(cls or self.book.message_cls, self))

    def forget(self):
        """Every record is settled and the book lets the batch go: drops its messages made
        on arrival, which refer back to it, so that the batch and they are freed as soon as
        nothing else holds them, not when the garbage collector finds the cycle."""
        if self.msgs:
            self.msgs = ()


_chain_of = operator.attrgetter("ordering_chain")

if _C is None:
    def fresh_messages(cls, b):
        """An iterator of a new cls(rec, b, i) for each record of Batch b, each made when
        asked for (so that the loop body's drop frees it)."""
        return map(cls, b.recs, itertools.repeat(b), range(len(b.recs)))

    def handed(msgs, disp):
        """The messages of msgs to hand out, in order: each unordered one, and each chained
        one that disp.hand() takes when its turn comes (it skips those ksidecar took back)."""
        hand = disp.hand
        return (m for m in msgs if m._ch is None or hand(m))

    def any_chained(recs):
        """Whether a record belongs to an ordering chain."""
        return any(map(_chain_of, recs))

    def run_messages(msgs, callback, sub):
        """A sync Subscriber's worker on unordered messages msgs: callback(m) for each one of
        the current stream (sub.book.gen), sub._raised(m, e) when it raised e (an
        Exception), and a message left unsettled released. False when sub closes meanwhile
        (the rest are not run)."""
        book = sub.book
        for m in msgs:
            if sub._closing:
                return False
            if m._batch.gen != book.gen:
                continue  # its stream broke: ksidecar delivers it again
            try:
                callback(m)
            except Exception as e:
                sub._raised(m, e)
            book.release(m)  # if not settled
        return True

    def unchained(msgs):
        """The messages of msgs that belong to no ordering chain, in a list."""
        return [m for m in msgs if m._ch is None]

    def run_chain(c, callback, sub):
        """A sync Subscriber's worker on scheduled Chain c: runs its messages one after
        another while the next is ready (callback(m), sub._raised(m, e) when it raised e)."""
        disp = sub.book.disp
        n = 0
        while not sub._closing:
            m = disp.take(c)
            if m is None:
                return
            try:
                callback(m)
            except Exception as e:
                sub._raised(m, e)
            if not disp.done(c, m, n):
                return  # not settled yet (its settle goes on), or pushed for later
            n += 1
else:
    fresh_messages, handed, any_chained = _C.iter_messages, _C.iter_handed, _C.any_chained
    run_messages, run_chain, unchained = _C.run_messages, _C.run_chain, _C.unchained


def subscribe_method(channel):
    """The Subscribe stream's multicallable on channel (sync or grpc.aio). With the
    extension, a response that is a batch is decoded straight into its records (a list,
    which Book.take takes), and any other with protobuf."""
    if _C is None:
        return pb_grpc.ConsumerStub(channel).Subscribe
    return channel.stream_stream("/ksidecar.v1.Consumer/Subscribe",
                                 request_serializer=pb.SubscribeRequest.SerializeToString,
                                 response_deserializer=decode_response, _registered_method=True)


def decode_response(data):
    """A SubscribeResponse's bytes as the extension reads them: a batch's records as a list
    of records, any other response a pb.SubscribeResponse."""
    recs = _C.decode_batch(data)
    return pb.SubscribeResponse.FromString(data) if recs is None else recs


def done_future(result):
    f = concurrent.futures.Future()
    f.set_result(result)
    return f


class _Limited:
    """Logs at most `burst` warnings per `window` seconds, then one count of those left out."""

    def __init__(self, burst=10, window=10.0):
        self.burst, self.window, self.t0, self.n, self.dropped = burst, window, 0.0, 0, 0

    def warn(self, fmt, *args):
        now = time.monotonic()
        if now - self.t0 > self.window:
            if self.dropped:
                log.warning("ksidecar: %d more such warnings in the last %.0f s", self.dropped,
                            self.window)
            self.t0, self.n, self.dropped = now, 0, 0
        self.n += 1
        if self.n <= self.burst:
            log.warning(fmt, *args)
        else:
            self.dropped += 1


# The kinds of settlement messages in flight (Book.inflight): acks, acks as ranges answered
# by position, acks that wait for their commit (their first answer), nacks, extensions.
_ACK, _RANGED, _COMMIT, _NACK, _EXTEND = range(5)

OLD_SERVER = ("; a ksidecar older than ack ranges refuses them: give the Subscriber "
              "ack_ranges=False")


def _records(results):
    """How many records results answer: a range's result (from a ksidecar older than
    ranges, which answers one by its own id) counts its offsets."""
    n = len(results)
    for r in results:
        if "~" in r.ack_id:
            singles = range_ids(r.ack_id)
            n += len(singles) - 1 if singles else 0
    return n


def _all_settled(state):
    return state.find(UNSETTLED) < 0 and state.find(RELEASED) < 0


class Book(_C.BookCore if _C else object):
    """The leases and acks of one Subscriber, across its streams. Thread-safe; the asyncio
    Subscriber drives it from its loop thread only.

    Each stream has a generation. A message delivered on it is outstanding until settled;
    its batch stays in self.live until every message of it is settled or released. Acks
    go to self.acks (a deque, appended without the lock) and nacks to self.nacks; flush
    sends them with the stream's send (a non-blocking callable set by new_stream), under
    self.lock, as extend_due sends extensions: so an extension sent before an ack of the
    same id is answered first. When a stream breaks, stream_lost resolves everything of
    that stream as STALE: its leases went back to ksidecar, which delivers the records
    again. unanswered counts ids sent on the current stream whose results have not come.

    ksidecar answers a stream's settlement messages in order, one AckResults each (and a
    second, later one for acks that wait for their commit): self.inflight keeps the
    messages sent, oldest first, so that an answer is matched to its message by its place,
    not by the ids it names. With s.ack_ranges, acks go out as ack ranges answered by
    position (an accepted count, and a result by its own id only for each record refused):
    such an answer names none of the accepted ids, so its message tells which they were."""

    def __init__(self, s, wake, message_cls=Message):
        self.s = s
        self.message_cls = message_cls
        self.wake = wake  # called when a first settlement waits to be sent
        self.armed = False  # wake was called and the flush it starts has not begun
        self.max_ids = s.ack_max_ids
        self.lock = threading.Lock()
        self.gen = 0
        self.send = None
        self.live = set()   # Batches of this stream with a message not settled
        self.acks = collections.deque()  # ack ids waiting for the next flush
        # Whether self.acks may hold an id twice (see _flush_locked): the pure-Python ack()
        # checks and marks a message in two steps, so two threads may both queue its id; the
        # extension's ack() does both under the GIL, and an id queued twice needs settle()
        # (ack_with_result) besides, which sets this.
        self.acks_dup = _C is None
        self.nacks = {}      # (delay_ms, reason, dead_letter) -> [ack ids] for the next flush
        self.waiters = {}    # ack_id -> Future of its ack or nack result
        # (kind, first id, records, ids of a ranged ack) of each message sent on this stream
        # and not answered yet, oldest first (the second answer of acks that wait for their
        # commit is not in it: commit_due tells those).
        self.inflight = collections.deque()
        self.commit_acks = []  # acks waiting for their commit, for the next flush
        # Their ids in flight: answered twice, at once (True here), then once committed.
        self.commit_due = {}
        self.unanswered = 0
        self.lost = 0  # settlements a broken stream took with it unanswered (they are STALE)
        self.deadline = s.deadline_ms / 1000.0
        self.margin = max(self.deadline / 3.0, 0.05)
        self.warn_bad = _Limited()
        self.warn_stale = _Limited()
        self.extended = 0  # ids sent in ExtendIds, for tests and status
        self.assignment = []  # (topic, partition) of the last assignment notice
        self.disp = Dispatcher(self)

    def new_stream(self, send):
        with self.lock:
            self.gen += 1
            self.send = send
            return self.gen

    def delivered(self, records, gen):
        """A Batch of the stream gen; its records are outstanding until settled."""
        now = time.monotonic()
        b = Batch(self, gen, now, now + self.deadline, records)
        with self.lock:
            if gen == self.gen:
                # Forget the batches settled since (memchr over a few bytearrays), so that
                # their records are freed now rather than at the next lease tick.
                done = [x for x in self.live if _all_settled(x.state)]
                self.live.difference_update(done)
                for x in done:
                    x.forget()
                self.live.add(b)
        return b

    def take(self, resp, gen):
        """Takes one SubscribeResponse of stream gen (or a batch's records, as the extension
        decodes them: a list): returns the Batch of a batch, or None (ack results are settled
        here; assignments kept in self.assignment)."""
        if type(resp) is list:  # a batch's records, decoded by the extension
            return self._batch(resp, gen)
        kind = resp.WhichOneof("kind")
        if kind == "batch":
            # The records' Python objects are made once, here, and kept with the batch: the
            # chain test and the Messages made later share them (walking the protobuf list
            # made each anew, twice a record).
            return self._batch(list(resp.batch.records), gen)
        if kind == "ack_results":
            ar = resp.ack_results
            self.results(ar.results, ar.accepted)
        elif kind == "assignment":
            self.assignment = [(p.topic, p.partition) for p in resp.assignment.partitions]
        return None

    def _batch(self, recs, gen):
        b = self.delivered(recs, gen)
        if any_chained(recs):
            b.msgs = b.messages()
            self.disp.receive(b.msgs)
        return b

    def settle(self, m, nack, fut=None):
        """Queues m's ack (nack None) or nack ((delay_ms, reason, dead_letter)); fut gets its
        result.
        m is already marked SETTLED. A message of an earlier stream resolves STALE at once."""
        wake = False
        with self.lock:
            stale = m._batch.gen != self.gen or self.send is None
            if not stale:
                if fut is not None:
                    self.waiters[m.ack_id] = fut
                if nack is None:
                    self.acks_dup = True
                    self.acks.append(m.ack_id)
                    n = len(self.acks)
                elif nack is WAIT_COMMIT:
                    self.commit_acks.append(m.ack_id)
                    n = len(self.commit_acks)
                else:
                    ids = self.nacks.setdefault(nack, [])
                    ids.append(m.ack_id)
                    n = len(ids)
                if n >= self.max_ids:
                    self._flush_locked()
                elif not self.armed:
                    self.armed = wake = True
        if stale:
            why = "lease of an earlier stream: the stream broke and ksidecar delivers the record again"
            self.warn_stale.warn("ksidecar: %s of %s[%d]@%d not sent: %s",
                                 "ack" if nack is None else "nack", m.topic, m.partition,
                                 m.offset, why)
            if fut is not None:
                fut.set_result(AckResult(m.ack_id, AckStatus.STALE, why))
        elif wake:
            self.wake()

    @staticmethod
    def release(m):
        """Stops extending m's lease (its handler ended without settling it): the lease
        runs out and ksidecar delivers the record again. It may still be settled."""
        st = m._batch.state
        if st[m._i] == UNSETTLED:
            st[m._i] = RELEASED

    def unsettled(self):
        """New Messages for the records of this stream not settled yet (released ones
        included)."""
        with self.lock:
            return [m for b in self.live for m in b.messages() if not m.settled]

    def pending(self):
        with self.lock:
            return bool(self.acks or self.nacks or self.commit_acks)

    def flush(self):
        with self.lock:
            self._flush_locked()

    def _flush_locked(self):
        self.armed = False
        send = self.send
        if send is None:
            return
        acks = self.acks
        inflight = self.inflight
        if acks:
            pop = acks.popleft
            # An id queued twice (ack() racing ack_with_result() on one message) goes once: in
            # a by-position answer only the second copy's refusal would name it. Without
            # acks_dup no id can be there twice, and the de-duplication (hashing each id) is
            # skipped.
            ids = itertools.islice(iter(pop, None), len(acks))
            if self.acks_dup:
                self.acks_dup = _C is None
                ids = list(dict.fromkeys(ids))
            else:
                ids = list(ids)
            self.unanswered += len(ids)
            if self.s.ack_ranges:
                for lo in range(0, len(ids), ACK_RANGE_MAX):
                    part = ids[lo:lo + ACK_RANGE_MAX] if len(ids) > ACK_RANGE_MAX else ids
                    inflight.append((_RANGED, None, len(part), part))
                    send(pb.SubscribeRequest(ack=pb.AckIds(ack_ids=ack_ranges(part),
                                                           results_by_position=True)))
            else:
                inflight.append((_ACK, ids[0], len(ids), None))
                send(pb.SubscribeRequest(ack=pb.AckIds(ack_ids=ids)))
        if self.commit_acks:
            ids, self.commit_acks = self.commit_acks, []
            self.unanswered += 2 * len(ids)
            for i in ids:
                self.commit_due[i] = True
            inflight.append((_COMMIT, ids[0], len(ids), None))
            send(pb.SubscribeRequest(ack=pb.AckIds(ack_ids=ids, wait_commit=True)))
        if self.nacks:
            nacks, self.nacks = self.nacks, {}
            for (delay, reason, dead_letter), ids in nacks.items():
                self.unanswered += len(ids)
                inflight.append((_NACK, ids[0], len(ids), None))
                send(pb.SubscribeRequest(nack=pb.NackIds(ack_ids=ids, delay_ms=delay,
                                                         reason=reason, dead_letter=dead_letter)))

    def extend_due(self):
        """Forgets batches with nothing left to extend, and sends ExtendIds for the
        messages not settled of batches whose lease ends within the margin and whose
        total lease time stays under max_lease_extension_s. Returns how many."""
        now = time.monotonic()
        limit = self.s.max_lease_extension_s
        with self.lock:
            if self.send is None:
                return 0
            ids = []
            for b in list(self.live):
                st = b.state
                if _all_settled(st):
                    self.live.discard(b)
                    b.forget()
                elif st.find(UNSETTLED) >= 0 and b.until - now < self.margin and now - b.t < limit:
                    b.until = now + self.deadline
                    recs = b.recs
                    ids += [recs[i].ack_id for i, v in enumerate(st) if v == UNSETTLED]
            if not ids:
                return 0
            self.inflight.append((_EXTEND, ids[0], len(ids), None))
            self.unanswered += len(ids)
            self.extended += len(ids)
            self.send(pb.SubscribeRequest(modify_deadline=pb.ExtendIds(
                ack_ids=ids, deadline_ms=self.s.deadline_ms)))
            return len(ids)

    def results(self, results, accepted=0):
        """Takes an AckResults message of the current stream (accepted: its count of
        records accepted, in an answer by position)."""
        bad = []
        done = []  # (future, ack id, status, message, committed offset)
        fenced = self.disp.fenced  # nacks wait for their results: tell the dispatcher
        answered = [] if fenced else None
        with self.lock:
            waiters, due = self.waiters, self.commit_due
            if results and due and due.get(results[0].ack_id) is False:
                # The second answer to acks that wait for their commit: where it stands.
                self.unanswered -= len(results)
                for r in results:
                    due.pop(r.ack_id, None)
                    f = waiters.pop(r.ack_id, None)
                    if f is not None:
                        done.append((f, r.ack_id, r.status, r.message, r.committed_offset))
                kind = None
            else:
                e = self._match(results, accepted)
                if e is None:
                    log.warning("ksidecar: ack results that match no message sent (first %r, "
                                "%d accepted); taken by their ids",
                                results[0].ack_id if results else None, accepted)
                    e = (_ACK, None, len(results) + accepted, None)
                kind = e[0]
                self.unanswered -= e[2]
            if kind == _RANGED:
                for r in results:
                    i = r.ack_id
                    singles = range_ids(i)
                    if singles is not None:  # answered as a whole: a ksidecar older than ranges
                        bad.append(("ack range", r))
                        for i in singles:
                            f = waiters.pop(i, None)
                            if f is not None:
                                done.append((f, i, r.status, r.message, 0))
                        continue
                    f = waiters.pop(i, None)
                    if f is not None:
                        done.append((f, i, r.status, r.message, r.committed_offset))
                    elif r.status != 1:
                        bad.append(("ack", r))
                if waiters:  # the others were accepted (those refused are popped already)
                    for i in e[3]:
                        f = waiters.pop(i, None)
                        if f is not None:
                            done.append((f, i, 1, "", 0))
            elif kind == _EXTEND:
                bad = [("extension", r) for r in results if r.status != 1]
            elif kind is not None:
                for r in results:
                    if kind == _COMMIT:  # the answer at once to acks that wait for their commit
                        due[r.ack_id] = False
                        if r.status == 1:
                            continue  # taken: its future waits for the second answer
                    if answered is not None:
                        answered.append(r.ack_id)
                    f = waiters.pop(r.ack_id, None) if waiters else None
                    if f is not None:
                        done.append((f, r.ack_id, r.status, r.message, r.committed_offset))
                    elif r.status != 1:
                        bad.append(("ack", r))
        if answered is not None:  # also with none named (a ranged answer): lifts expired fences
            self.disp.answered(answered)
        # Warnings first: a caller woken by a future of this same answer finds them logged.
        for what, r in bad:
            self.warn_bad.warn("ksidecar: %s of %s: %s (%s)%s", what, r.ack_id,
                               AckStatus(r.status).name, r.message,
                               OLD_SERVER if what == "ack range" and r.status == 2 else "")
        for f, i, status, msg, off in done:
            f.set_result(AckResult(i, AckStatus(status), msg, off))

    def _match(self, results, accepted):
        """Takes the message in flight that results (and accepted) answer off
        self.inflight: the oldest, unless its shape differs (then the oldest that fits, as a
        safeguard). None when none fits."""
        q = self.inflight
        for k, e in enumerate(q):
            kind, first, n, _ = e
            if kind == _RANGED:
                fits = accepted + _records(results) == n
            else:
                fits = not accepted and len(results) == n and results[0].ack_id == first
            if fits:
                if k == 0:
                    q.popleft()
                else:
                    del q[k]
                return e
        return None

    def left(self):
        """Settlements not sent or not answered yet on the current stream (0 without one)."""
        with self.lock:
            if self.send is None:
                return 0
            return (self.unanswered + len(self.acks) + len(self.commit_acks) +
                    sum(map(len, self.nacks.values())))

    def warn_unanswered(self, left):
        log.warning("ksidecar: close: %d settlements of group %r were not answered in time",
                    left, self.s.group)

    def stream_lost(self, why, quiet=False):
        """The current stream ended: every settlement not answered resolves STALE (its
        leases went back to ksidecar) and the outstanding messages are forgotten."""
        with self.lock:
            self.send = None
            self.gen += 1  # acks from now on of this stream's messages resolve STALE
            held = sum(len(b.state) - b.state.count(SETTLED) - b.state.count(DROPPED)
                       for b in self.live)
            n_ids = len(self.acks) + sum(map(len, self.nacks.values()))
            unanswered = self.unanswered
            waiters = self.waiters
            n_ids += len(self.commit_acks)
            self.live, self.nacks, self.waiters = set(), {}, {}
            self.inflight.clear()
            self.commit_acks, self.commit_due = [], {}
            self.acks.clear()
            self.unanswered = 0
        self.disp.purge()
        if not quiet:
            self.lost += n_ids + max(unanswered, 0)
        msg = f"the stream ended before ksidecar answered ({why}); ksidecar delivers the record again"
        for ack_id, f in waiters.items():
            f.set_result(AckResult(ack_id, AckStatus.STALE, msg))
        if not quiet and (held or n_ids or unanswered > 0):
            log.warning("ksidecar: stream to %s for group %r ended (%s): %d messages held, %d "
                        "settlements not sent and %d not answered are STALE; ksidecar delivers "
                        "those records again", self.s.target, self.s.group, why, held, n_ids,
                        max(unanswered, 0))


def wait_answered(book, deadline):
    """Polls (sync) until every settlement was sent and answered, or the monotonic
    deadline. Returns True when all were answered."""
    while True:
        left = book.left()
        if left <= 0:
            return True
        if time.monotonic() >= deadline:
            book.warn_unanswered(left)
            return False
        time.sleep(0.005)
