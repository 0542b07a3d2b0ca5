"""Ordered dispatch: a chain's messages (same topic, partition and ordering_chain) go out
one after another in the order received, and the copies ksidecar took back are dropped
before they are handed out.

ksidecar sends an ordered-batches subscriber several in-flight records of a chain at once.
When one is nacked, its lease expires or its stream ends, ksidecar takes back every later
record of the chain it had sent (acks for them come back STALE) and sends them again after
it. The library must then not hand out the copies it still holds: a later record would run
before the earlier one came back and finished."""
import collections
import threading
import time

from ._accel import speedups as _C

# The state of each record of a Batch (Batch.state[i]). Odd means settled: acked or nacked
# (SETTLED), or dropped unhanded (DROPPED: taken back by ksidecar; no ack is sent).
UNSETTLED, SETTLED, RELEASED, DROPPED = 0, 1, 2, 3

# How long after a nack's result its chain's later records of the same stream are still
# taken for stale copies. ksidecar sends a nack's result in turn after the batches it had
# sent before it read the nack, so the result alone would do; the grace covers a server
# without that ordering. The nacked record coming again ends the fence at once, so the
# grace matters only when that redelivery went to another subscriber.
FENCE_GRACE_S = 1.0

# How many of a chain's messages a worker runs before it lets other work go first.
CHAIN_RUN = 64


class _PyChain:
    """What the dispatcher knows of one chain, across the streams of one Subscriber (a
    message of a new stream waits for a handler still running one of the old stream's).
    @locks Dispatcher.lock"""
    __slots__ = ("key", "q", "out", "returned", "sched", "top", "fence", "fence_at")

    def __init__(self, key):
        self.key = key                # (topic, partition, ordering_chain)
        self.q = collections.deque()  # received, not yet handed out, in offset order
        self.out = None       # handed to a handler, not yet both settled and returned
        self.returned = False  # out's handler returned (out not settled yet)
        self.sched = False    # pushed to the workers, or taken by one
        self.top = -1         # offset of the last message received
        # A nack (a Message) and when its result came (None: not yet): the chain's later
        # records of its stream that arrive meanwhile are stale copies.
        self.fence = None
        self.fence_at = None


# The extension's Chain has the same fields, in C.
Chain = _C.Chain if _C else _PyChain


class _PyDispatcher:
    """The chains of one Subscriber. Thread-safe.

    receive() is called by the reader with each batch's chained messages, in the order
    received. In the iterator form (push None) the iterator hands messages out in
    delivered order and asks hand() first. In the callback forms start(push) is called
    once: then a chain with a message to run is given to push (a worker queue's put), and
    the worker that gets it runs it with take() and done() until the chain has nothing
    ready; settle() (from Message.ack / nack, on any thread) hands the chain on when the
    handler had already returned."""

    def __init__(self, book, grace=FENCE_GRACE_S):
        self.book = book  # its gen says which stream is current
        self.grace = grace
        self.lock = threading.Lock()
        self.chains = {}  # key -> Chain with messages queued, out, or fenced
        self.fenced = {}  # ack id of a fence's nack -> its Chain
        self.push = None
        self.dropped = 0  # messages dropped unhanded, for tests and status

    # -- called with self.lock held

    def _drop(self, m):
        st = m._batch.state
        if not st[m._i] & 1:
            st[m._i] = DROPPED
            self.dropped += 1

    def _drop_from(self, q, off):
        """Drops q's messages from offset off on (q is in offset order)."""
        while q and q[-1]._rec.offset >= off:
            self._drop(q.pop())

    def _forget(self, c):
        """Deletes c when nothing of it is left, so that the map does not grow with every
        key ever seen. Only c: once forgotten, a newer chain may hold its key."""
        if c.out is None and not c.sched and not c.q and c.fence is None:
            if self.chains.get(c.key) is c:
                del self.chains[c.key]

    def _unfence(self, c):
        self.fenced.pop(c.fence._rec.ack_id, None)
        c.fence = c.fence_at = None

    def _finished(self, c):
        """c's message out is done. Returns whether c has another to run; it is then left
        scheduled for the caller to run or push."""
        c.out = None
        c.returned = False
        if not c.q:
            self._forget(c)
            return False
        c.sched = True
        return True

    # -- the reader

    def receive(self, msgs):
        """Queues a received batch's messages that belong to a chain (ordering_chain != 0) on
        their chains, and sets their _ch. Drops the chain's queued messages that ksidecar
        went back on (a message at or below the chain's last offset: a nack or an expired
        lease made it send the chain again from there), and those that arrive above a nack
        of their stream before the nacked message comes again."""
        ready = []
        now = time.monotonic()
        with self.lock:
            chains, push = self.chains, self.push
            for m in msgs:
                rec = m._rec
                cid = rec.ordering_chain
                if not cid:
                    continue
                key = (rec.topic, rec.partition, cid)
                c = chains.get(key)
                if c is None:
                    c = chains[key] = Chain(key)
                m._ch = c
                off = rec.offset
                f = c.fence
                if f is not None:
                    if (m._batch.gen == f._batch.gen and off > f._rec.offset
                            and (c.fence_at is None or now - c.fence_at < self.grace)):
                        c.top = off  # sent before ksidecar read the nack: taken back
                        self._drop(m)
                        continue
                    self._unfence(c)  # the nacked record (or a new stream) goes on
                if off <= c.top:
                    self._drop_from(c.q, off)
                c.top = off
                c.q.append(m)
                if push is not None and c.out is None and not c.sched:
                    c.sched = True
                    ready.append(c)
        for c in ready:
            push(c)

    def answered(self, ack_ids):
        """Settlement results came for ack_ids: starts the grace of the fences whose nacks
        were answered, and lifts those whose grace ran out."""
        if not self.fenced:
            return
        now = time.monotonic()
        with self.lock:
            fenced = self.fenced
            for i in ack_ids:
                c = fenced.get(i)
                if c is not None and c.fence_at is None:
                    c.fence_at = now
            for c in list(fenced.values()):
                if c.fence_at is not None and now - c.fence_at >= self.grace:
                    self._unfence(c)
                    self._forget(c)

    def purge(self):
        """The stream ended (book.gen moved on): drops the queued messages of older streams
        (their leases went back to ksidecar) and lifts those streams' fences."""
        gen = self.book.gen
        with self.lock:
            for c in list(self.chains.values()):
                if c.q:
                    keep = collections.deque()
                    for m in c.q:
                        if m._batch.gen == gen:
                            keep.append(m)
                        else:
                            self._drop(m)
                    c.q = keep
                if c.fence is not None and c.fence._batch.gen != gen:
                    self._unfence(c)
                self._forget(c)

    # -- the iterator form

    def hand(self, m):
        """The iterator is about to yield chained message m: False when it was dropped
        (skip it), else takes it off its chain's queue and returns True."""
        with self.lock:
            if m._batch.state[m._i] & 1:
                return False
            c = m._ch
            q = c.q
            if q and q[0] is m:
                q.popleft()
            elif m in q:
                q.remove(m)
            self._forget(c)
            return True

    # -- the callback forms

    def start(self, push):
        """Switches to the callback form: push(chain) from now on gives a chain with a
        message ready to a worker; the chains already holding some are pushed now."""
        with self.lock:
            self.push = push
            ready = [c for c in self.chains.values() if c.q and c.out is None and not c.sched]
            for c in ready:
                c.sched = True
        for c in ready:
            push(c)

    def take(self, c):
        """The next message of scheduled chain c for the calling worker, or None (c is then
        no longer scheduled). Messages of an ended stream are dropped on the way."""
        gen = self.book.gen
        with self.lock:
            c.sched = False
            q = c.q
            while q:
                m = q.popleft()
                if m._batch.gen != gen:
                    self._drop(m)  # purge ran or is about to: its lease is gone
                    continue
                c.out = m
                c.returned = False
                return m
            self._forget(c)
            return None

    def done(self, c, m, n):
        """m's handler returned; n messages of c ran before it in this turn. Returns True
        when the caller goes on with c's next message. A message not settled yet is
        released (its lease is no longer extended) and holds c until it is settled."""
        push = False
        with self.lock:
            st = m._batch.state
            v = st[m._i]
            if not v & 1:
                if v == UNSETTLED:
                    st[m._i] = RELEASED
                c.returned = True
                return False
            go = self._finished(c)
            if go and n + 1 >= CHAIN_RUN:
                push, go = True, False
        if push:
            self.push(c)
        return go

    def settle(self, m, nack):
        """Marks chained message m SETTLED; False when it was settled (or dropped) already.
        A nack drops the chain's later messages not handed out yet and fences the chain.
        When m's handler had returned, the chain goes on (pushed to the workers)."""
        c = m._ch
        more = False
        with self.lock:
            st = m._batch.state
            if st[m._i] & 1:
                return False
            st[m._i] = SETTLED
            if nack and m._batch.gen == self.book.gen:
                # The iterator form forgets a chain once all of it was handed out: the
                # fence goes on the chain now known by that key.
                f = self.chains.setdefault(c.key, c)
                self._drop_from(f.q, m._rec.offset + 1)
                if f.fence is not None:
                    self.fenced.pop(f.fence._rec.ack_id, None)
                f.fence, f.fence_at = m, None
                self.fenced[m._rec.ack_id] = f
            if c.out is m and c.returned:
                more = self._finished(c)
            elif c.out is None:
                self._forget(c)
        if more:
            self.push(c)
        return True


if _C is None:
    Dispatcher = _PyDispatcher
else:
    class Dispatcher(_C.DispatcherCore, _PyDispatcher):
        """_PyDispatcher with its fields and its per-message calls (receive, hand, settle) in
        the extension; its other methods are _PyDispatcher's, under the same lock (one that
        the extension's calls take without a method call)."""

        def __init__(self, book, grace=FENCE_GRACE_S):
            super().__init__(book, grace)
            self.lock = _C.Lock()
