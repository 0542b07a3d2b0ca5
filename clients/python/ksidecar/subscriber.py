"""The Subscriber on grpcio's sync API: an iterator form and a callback form over one
Subscribe stream, reopened with backoff when it breaks."""
import queue
import threading
import time

import grpc

from . import errors
from ._common import (Batch, Book, Message, Reconnect, Settings, fresh_messages, handed, log,
                      make_channel, probe, run_chain, run_messages, subscribe_method, topic_list,
                      unchained, wait_answered)
from ._dispatch import Chain

_END = object()   # ends a request iterator
_STOP = object()  # ends the delivery queue
_CHUNK = 64       # most unordered messages a worker takes from a batch at once


class Subscriber:
    """Records of a consumer group over one Subscribe stream.

    Subscriber(target, group, topics, **options) connects (raising ConnectError,
    AuthenticationError, ... at once) and starts receiving. Then either iterate:

        for msg in sub:        # blocks; ends after close()
            handle(msg); msg.ack()

    or subscribe(callback, workers=N), which calls callback(msg) on N threads: one key's
    messages one after another, in offset order, different keys in parallel (see the
    README's "Ordering").

    Options (all keywords): max_messages / max_bytes: the most outstanding (delivered and
    not settled) messages and key+value bytes, sent to ksidecar as the stream's credits;
    deadline_ms: the lease deadline; max_lease_extension_s: the longest a message's lease
    is extended while it is not settled; ack_max_ids / ack_max_delay_ms: a batch of acks
    (or nacks) is sent at that many ids or that long after its first one; token: a bearer
    token; tls: a ksidecar.TLS; subscriber_name; connect_timeout_s; backoff_initial_s,
    backoff_max_s: the reconnect backoff; reconnect_timeout_s: how long reconnecting may
    fail before the subscriber gives up with the last error; channel_options: extra grpc
    channel options; ack_ranges (True): acks of consecutive offsets of a partition go out
    as one ack range, answered by a count and the ids refused; a ksidecar older than ack
    ranges refuses them (INVALID), so False sends every id on its own; value_format /
    key_format: "avro", "avro_plain", "json_schema", "protobuf" or "auto" decode values or
    keys in the schema wire format with the schema registry (msg.value_json(), msg.key_json()), ""
    (default) the group's group.value_format, "binary" none.

    A broken stream (UNAVAILABLE, a reset, ksidecar restarting) is reopened by itself;
    messages of the old stream settle as STALE (their futures say so and a warning is
    logged), and ksidecar delivers them again. close(timeout) sends pending acks and waits
    for their results."""

    def __init__(self, target, group, topics, **options):
        self.s = Settings(target=target, group=group, topics=topic_list(topics), **options)
        self.s.check()
        self._channel = make_channel(target, self.s.tls, self.s.channel_options)
        try:
            probe(self._channel, self.s)
        except BaseException:
            self._channel.close()
            raise
        self._subscribe = subscribe_method(self._channel)
        self._flush_evt = threading.Event()
        self.book = Book(self.s, self._flush_evt.set)
        self._batches = queue.SimpleQueue()
        self._closing = False
        self._closed = None
        self._stop = threading.Event()
        self._error = None
        self._call = None
        self._req = None
        self._iterating = False
        self._workers = []
        self._nworkers = 1
        self._done = threading.Event()
        self._reconnect = Reconnect(self.s, self.book)
        self._threads = [threading.Thread(target=f, name=f"ksidecar-{n}", daemon=True)
                         for n, f in (("reader", self._read), ("flusher", self._flusher),
                                      ("leases", self._leases))]
        for t in self._threads:
            t.start()

    # -- the stream

    def _read(self):
        rc = self._reconnect
        while not self._closing:
            req = queue.SimpleQueue()
            req.put(self.s.open_request())
            gen = self.book.new_stream(req.put)
            self._req = req
            err = None
            try:
                call = self._subscribe(iter(req.get, _END), metadata=self.s.metadata())
                self._call = call
                for resp in call:
                    batch = self.book.take(resp, gen)
                    if batch is not None:
                        self._batches.put(batch)
                    rc.took()
            except grpc.RpcError as e:
                err = e
            req.put(_END)
            fatal, delay = rc.after(err, self._closing)
            if fatal is not None:
                return self._fail(fatal)
            if delay is None or self._stop.wait(delay):
                break
        self._batches.put(_STOP)

    def _fail(self, err):
        log.error("ksidecar: %s", err)
        self._error = err
        self._batches.put(_STOP)
        self._done.set()

    def _flusher(self):
        delay = self.s.ack_max_delay_ms / 1000.0
        while not self._stop.is_set():
            if not self._flush_evt.wait(0.5):
                continue
            self._flush_evt.clear()
            if delay:
                time.sleep(delay)
            self.book.flush()

    def _leases(self):
        tick = min(1.0, max(0.05, self.s.deadline_ms / 6000.0))
        while not self._stop.wait(tick):
            self.book.extend_due()

    # -- delivery

    def _next_batch(self):
        """The next Batch of the current stream, or None at the end. Raises the
        subscriber's error if it failed."""
        while True:
            item = self._batches.get()
            if item is _STOP:
                self._batches.put(_STOP)
                if self._error is not None and not self._closing:
                    raise self._error
                return None
            if item.gen == self.book.gen:  # an older stream's leases are gone
                return item

    def __iter__(self):
        if self._workers or self._iterating:
            raise errors.InvalidArgumentError("a Subscriber has one iterator or one callback")
        self._iterating = True
        return self._iterate()

    def _iterate(self):
        # Messages are made one at a time, each freed once the loop body drops it. A batch
        # with chained records has its messages made on arrival; those ksidecar took back
        # since are skipped.
        disp = self.book.disp
        while True:
            b = self._next_batch()
            if b is None:
                return
            if b.msgs is None:
                yield from fresh_messages(Message, b)
            else:
                yield from handed(b.msgs, disp)

    def subscribe(self, callback, workers=4):
        """Calls callback(msg) for every message on `workers` threads and returns a
        SubscribeFuture at once. A key's messages (an ordering chain's) are given one at a
        time, in order, each once the one before was settled and its callback returned;
        other keys and unkeyed messages run in parallel. A callback that raises nacks its
        message; one that returns without settling stops its lease extension (the record
        comes back after its deadline) and holds its key until it is settled."""
        if self._workers or self._iterating:
            raise errors.InvalidArgumentError("a Subscriber has one iterator or one callback")
        self._nworkers = max(1, workers)
        self._workers = [threading.Thread(target=self._work, args=(callback,), daemon=True,
                                          name=f"ksidecar-worker-{i}") for i in range(workers)]
        # The workers share self._batches: Batches (a worker splits a batch's unordered
        # messages into chunks, puts the others back and runs one), chunks, and Chains.
        self.book.disp.start(self._batches.put)
        for t in self._workers:
            t.start()
        return SubscribeFuture(self)

    def _work(self, callback):
        book = self.book
        q = self._batches
        while True:
            item = q.get()
            if item is _STOP or self._closing:
                q.put(_STOP)
                return
            if type(item) is Chain:
                run_chain(item, callback, self)
                continue
            if type(item) is Batch:
                if item.gen != book.gen:
                    continue  # its stream broke: ksidecar delivers it again
                msgs = item.messages() if item.msgs is None else unchained(item.msgs)
                per = min(max(len(msgs) // self._nworkers, 1), _CHUNK)
                for lo in range(per, len(msgs), per):
                    q.put(msgs[lo:lo + per])
                item = msgs[:per]
            if not run_messages(item, callback, self):
                return

    @staticmethod
    def _raised(m, e):
        """m's callback raised e: logged, and m nacked."""
        log.error("ksidecar: callback raised on %r; nacking it", m, exc_info=e)
        m.nack()

    # -- status and close

    @property
    def reconnects(self):
        """Times the stream was opened again."""
        return self._reconnect.count

    @property
    def outstanding(self):
        """Messages delivered and not settled, on the current stream."""
        return len(self.book.unsettled())

    def close(self, timeout=30.0):
        """Stops delivery, lets running callbacks end, sends every pending ack and nack and
        waits up to timeout seconds for their results, then closes the stream. Returns True
        when every result came (False also when a broken stream took some with it: they are
        STALE). Messages delivered and not settled go back to ksidecar."""
        if self._closed is not None:
            return self._closed
        end = time.monotonic() + timeout
        self._closing = True
        self._batches.put(_STOP)
        for t in self._workers:
            if t is not threading.current_thread():  # a callback may close its subscriber
                t.join(max(0.0, end - time.monotonic()))
        lost = self.book.lost
        self.book.flush()
        ok = wait_answered(self.book, end) and self.book.lost == lost
        self._stop.set()
        self._flush_evt.set()
        req = self._req
        if req is not None:
            req.put(_END)  # half-close: ksidecar ends the stream
        self._threads[0].join(max(0.5, min(5.0, end - time.monotonic())))
        if self._call is not None:
            self._call.cancel()
        for t in self._threads:
            t.join(1.0)
        self._channel.close()
        self._closed = ok
        self._done.set()
        return ok

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SubscribeFuture:
    """The running callback form: result(timeout) blocks until close() or a fatal error
    (raised); cancel() closes the subscriber."""

    def __init__(self, sub):
        self._sub = sub

    def result(self, timeout=None):
        if not self._sub._done.wait(timeout):
            raise TimeoutError(f"the subscriber is still running after {timeout} s")
        if self._sub._error is not None:
            raise self._sub._error
        return self._sub._closed

    def cancel(self, timeout=30.0):
        return self._sub.close(timeout)

    def running(self):
        return not self._sub._done.is_set()
