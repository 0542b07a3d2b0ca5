"""The asyncio Subscriber on grpc.aio: async iteration or an async callback, with the same
batching, lease extension, flow control and reconnect as the sync one."""
import asyncio
import time

import grpc

from ._common import (Batch, Book, Message, Reconnect, Settings, connect_failed, fresh_messages,
                      handed, log, make_channel, probe_error, subscribe_method, topic_list,
                      unchained)
from ._dispatch import Chain
from ._proto import pb, pb_grpc


class AioMessage(Message):
    """A Message whose *_with_result() return asyncio futures."""
    __slots__ = ()

    def ack_with_result(self, wait_commit=False):
        return asyncio.wrap_future(super().ack_with_result(wait_commit))

    def nack_with_result(self, delay_ms=0, reason="", dead_letter=False):
        return asyncio.wrap_future(super().nack_with_result(delay_ms, reason, dead_letter))


class Subscriber:
    """async with Subscriber(target, group, topics, **options) as sub:
           async for msg in sub: ...; msg.ack()
    or await sub.run(async_callback, concurrency=N). Options as ksidecar.Subscriber.
    Everything runs on the event loop that started it (await start(), or async with)."""

    def __init__(self, target, group, topics, **options):
        self.s = Settings(target=target, group=group, topics=topic_list(topics), **options)
        self.s.check()
        self._channel = None
        self._tasks = []
        self._batches = asyncio.Queue()
        self._closing = False
        self._closed = None
        self._error = None
        self._req = None
        self._reconnect = None
        self._running = set()  # the worker tasks of run()
        self._close_task = None
        self._flush_evt = None
        self.book = None

    async def start(self):
        """Connects (raising ConnectError, AuthenticationError, ...) and starts receiving."""
        self._channel = make_channel(self.s.target, self.s.tls, self.s.channel_options, aio=True)
        try:
            await self._probe()
        except BaseException:
            await self._channel.close()
            raise
        self._subscribe = subscribe_method(self._channel)
        self._flush_evt = asyncio.Event()
        self.book = Book(self.s, self._flush_evt.set, AioMessage)
        self._tasks = [asyncio.ensure_future(c) for c in (self._read(), self._flusher(),
                                                          self._leases())]
        return self

    async def _probe(self):
        stub = pb_grpc.ConsumerStub(self._channel)
        end = time.monotonic() + self.s.connect_timeout_s
        last = None
        while time.monotonic() < end:
            try:
                await stub.ListGroups(pb.ListGroupsRequest(), metadata=self.s.metadata(),
                                      timeout=max(0.1, min(5.0, end - time.monotonic())))
                return
            except grpc.RpcError as e:
                bad = probe_error(e, self.s)
                if bad:
                    raise bad from None
                last = e
                await asyncio.sleep(min(0.2, max(0.0, end - time.monotonic())))
        raise connect_failed(self.s, last)

    async def _read(self):
        rc = Reconnect(self.s, self.book)
        self._reconnect = rc
        while not self._closing:
            req = asyncio.Queue()
            req.put_nowait(self.s.open_request())
            gen = self.book.new_stream(req.put_nowait)
            self._req = req
            err = None
            call = self._subscribe(metadata=self.s.metadata())
            writer = asyncio.ensure_future(self._write(call, req))
            try:
                async for resp in call:
                    batch = self.book.take(resp, gen)
                    if batch is not None:
                        self._batches.put_nowait(batch)
                    rc.took()
            except grpc.RpcError as e:
                err = e
            except asyncio.CancelledError:
                call.cancel()
                writer.cancel()
                raise
            writer.cancel()
            fatal, delay = rc.after(err, self._closing)
            if fatal is not None:
                return self._fail(fatal)
            if delay is None:
                break
            await asyncio.sleep(delay)
        self._batches.put_nowait(None)

    @staticmethod
    async def _write(call, req):
        try:
            while True:
                m = await req.get()
                if m is None:
                    await call.done_writing()
                    return
                await call.write(m)
        except (grpc.RpcError, asyncio.InvalidStateError):
            return  # the reader sees the stream's end

    def _fail(self, err):
        log.error("ksidecar: %s", err)
        self._error = err
        self._batches.put_nowait(None)

    async def _flusher(self):
        delay = self.s.ack_max_delay_ms / 1000.0
        while True:
            await self._flush_evt.wait()
            self._flush_evt.clear()
            if delay:
                await asyncio.sleep(delay)
            self.book.flush()

    async def _leases(self):
        tick = min(1.0, max(0.05, self.s.deadline_ms / 6000.0))
        while True:
            await asyncio.sleep(tick)
            self.book.extend_due()

    async def _next_batch(self):
        while True:
            item = await self._batches.get()
            if item is None:
                self._batches.put_nowait(None)
                if self._error is not None and not self._closing:
                    raise self._error
                return None
            if item.gen == self.book.gen:
                return item

    def __aiter__(self):
        return self._iterate()

    async def _iterate(self):
        if self.book is None:
            await self.start()
        disp = self.book.disp
        while True:
            b = await self._next_batch()
            if b is None:
                return
            if b.msgs is None:
                for m in fresh_messages(AioMessage, b):
                    yield m
            else:
                for m in handed(b.msgs, disp):  # made on arrival; skips those taken back
                    yield m

    async def run(self, callback, concurrency=10):
        """Awaits callback(msg) for every message, at most `concurrency` at a time, until
        close() (returns its result) or a fatal error (raised). A key's messages (an
        ordering chain's) are given one at a time, in order, each once the one before was
        settled and its callback returned; other keys run in parallel. A callback that
        raises nacks its message; one that returns without settling stops its lease
        extension and holds its key until it is settled."""
        if self.book is None:
            await self.start()
        # `concurrency` worker tasks share self._batches: Batches (split into chunks of
        # unordered messages), chunks and Chains, as the sync Subscriber's threads do.
        self.book.disp.start(self._batches.put_nowait)
        workers = [asyncio.ensure_future(self._work(callback, max(1, concurrency)))
                   for _ in range(max(1, concurrency))]
        self._running.update(workers)
        await asyncio.wait(workers)
        if self._close_task is not None:
            return await asyncio.shield(self._close_task)
        if self._error is not None:
            raise self._error
        return self._closed

    async def _work(self, callback, nworkers):
        book = self.book
        disp = book.disp
        q = self._batches
        while True:
            item = await q.get()
            if item is None or self._closing:
                q.put_nowait(None)
                return
            if type(item) is Chain:
                n = 0
                while not self._closing:
                    m = disp.take(item)
                    if m is None:
                        break
                    await self._handle(callback, m)
                    if not disp.done(item, m, n):
                        break
                    n += 1
                continue
            if type(item) is Batch:
                if item.gen != book.gen:
                    continue
                msgs = item.messages() if item.msgs is None else unchained(item.msgs)
                per = min(max(len(msgs) // nworkers, 1), 64)
                for lo in range(per, len(msgs), per):
                    q.put_nowait(msgs[lo:lo + per])
                item = msgs[:per]
            for m in item:
                if self._closing:
                    return
                if m._batch.gen != book.gen:
                    continue
                await self._handle(callback, m)
                book.release(m)  # if not settled

    @staticmethod
    async def _handle(callback, m):
        try:
            await callback(m)
        except Exception:
            log.exception("ksidecar: callback raised on %r; nacking it", m)
            m.nack()

    @property
    def reconnects(self):
        return self._reconnect.count if self._reconnect else 0

    @property
    def outstanding(self):
        return len(self.book.unsettled()) if self.book else 0

    async def close(self, timeout=30.0):
        """As Subscriber.close: lets running callbacks end, sends pending settlements and
        waits for their results. Returns True when every result came."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close(timeout))
        return await asyncio.shield(self._close_task)

    async def _close(self, timeout):
        end = time.monotonic() + timeout
        self._closing = True
        self._batches.put_nowait(None)
        me = asyncio.current_task()
        running = [t for t in self._running if t is not me]
        if running:
            await asyncio.wait(running, timeout=max(0.0, end - time.monotonic()))
        ok = True
        if self.book is not None:
            lost = self.book.lost
            self.book.flush()
            ok = await self._wait_answered(end) and self.book.lost == lost
            if self._req is not None:
                self._req.put_nowait(None)
            try:
                await asyncio.wait_for(asyncio.shield(self._tasks[0]), max(0.5, min(5.0, end - time.monotonic())))
            except (asyncio.TimeoutError, Exception):
                pass
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()
        self._closed = ok
        return ok

    async def _wait_answered(self, end):
        while True:
            left = self.book.left()
            if left <= 0:
                return True
            if time.monotonic() >= end:
                self.book.warn_unanswered(left)
                return False
            await asyncio.sleep(0.005)

    async def __aenter__(self):
        if self.book is None:
            await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.close()
