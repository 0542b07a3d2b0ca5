"""The Subscriber on grpcio's sync API: an iterator form and a callback form over one
Subscribe stream, reopened with backoff when it breaks."""
import collections
import itertools
import queue
import threading
import time

import grpc

from . import errors
from ._common import (Book, Message, Reconnect, Settings, log, make_channel, probe, topic_list,
                      wait_answered)
from ._proto import pb_grpc

_END = object()   # ends a request iterator
_STOP = object()  # ends the delivery queue


class Subscriber:
    """Records of a consumer group over one Subscribe stream.

    Subscriber(target, group, topics, **options) connects (raising ConnectError,
    AuthenticationError, ... at once) and starts receiving. Then either iterate:

        for msg in sub:        # blocks; ends after close()
            handle(msg); msg.ack()

    or subscribe(callback, workers=N), which calls callback(msg) on N threads.

    Options (all keywords): max_messages / max_bytes: the most outstanding (delivered and
    not settled) messages and key+value bytes, sent to ksidecar as the stream's credits;
    deadline_ms: the lease deadline; max_lease_extension_s: the longest a message's lease
    is extended while it is not settled; ack_max_ids / ack_max_delay_ms: a batch of acks
    (or nacks) is sent at that many ids or that long after its first one; token: a bearer
    token; tls: a ksidecar.TLS; subscriber_name; connect_timeout_s; backoff_initial_s,
    backoff_max_s: the reconnect backoff; reconnect_timeout_s: how long reconnecting may
    fail before the subscriber gives up with the last error; channel_options: extra grpc
    channel options.

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
        self._stub = pb_grpc.ConsumerStub(self._channel)
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
        self._ready = collections.deque()
        self._cond = threading.Condition()
        self._fed_all = False
        self._fetching = False
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
                call = self._stub.Subscribe(iter(req.get, _END), metadata=self.s.metadata())
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
        # Messages are made one at a time (map), each freed once the loop body drops it.
        while True:
            b = self._next_batch()
            if b is None:
                return
            yield from map(Message, b.recs, itertools.repeat(b), range(len(b.recs)))

    def subscribe(self, callback, workers=4):
        """Calls callback(msg) for every message on `workers` threads and returns a
        SubscribeFuture at once. A callback that raises nacks its message; one that returns
        without settling stops its lease extension (the record comes back after its
        deadline)."""
        if self._workers or self._iterating:
            raise errors.InvalidArgumentError("a Subscriber has one iterator or one callback")
        self._workers = [threading.Thread(target=self._work, args=(callback,), daemon=True,
                                          name=f"ksidecar-worker-{i}") for i in range(workers)]
        for t in self._workers:
            t.start()
        return SubscribeFuture(self)

    def _refill(self):
        """Refills self._ready (the deque the workers share; popleft is atomic) with the
        next batch: one worker at a time waits for it, the others wait on self._cond.
        Returns False at the end. With one worker nothing changes threads per batch."""
        cond = self._cond
        with cond:
            while self._fetching and not self._ready and not self._fed_all and not self._closing:
                cond.wait(0.5)
            if self._ready or self._closing:
                return True
            if self._fed_all:
                return False
            self._fetching = True
        try:
            b = self._next_batch()
        except errors.KsidecarError:
            b = None
        with cond:
            self._fetching = False
            if b is None:
                self._fed_all = True
            else:
                self._ready.extend(b.messages())
            cond.notify_all()
        return b is not None

    def _work(self, callback):
        book = self.book
        ready = self._ready
        while not self._closing:
            try:
                m = ready.popleft()
            except IndexError:
                if not self._refill():
                    return
                continue
            if m._batch.gen != book.gen:
                continue  # its stream broke: ksidecar delivers it again
            try:
                callback(m)
            except Exception:
                log.exception("ksidecar: callback raised on %r; nacking it", m)
                m.nack()
            book.release(m)  # if not settled

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
        with self._cond:
            self._cond.notify_all()
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
