"""The ordered dispatcher without a server: a chain runs one message at a time, a nack
drops the chain's later copies and fences those still on their way, a record sent again
drops the queued copies above it, and a lost stream drops its queued records."""
import gc

import ksidecar
from ksidecar._common import Book, Settings
from ksidecar._dispatch import DROPPED, SETTLED
from ksidecar._proto import pb


def new_book(grace=1.0):
    b = Book(Settings(target="x", group="g", topics=("t",)), wake=lambda: None)
    b.disp.grace = grace
    sent = []
    gen = b.new_stream(sent.append)
    return b, gen, sent


def batch(book, gen, *recs, attempt=1):
    """recs: (chain, offset) pairs on partition 0 (chain 0: unordered)."""
    rs = [pb.Record(topic="t", partition=0, offset=off, ordering_chain=ch,
                    ack_id=f"{ch}:{off}:{attempt}", attempt=attempt) for ch, off in recs]
    return book.take(pb.SubscribeResponse(batch=pb.RecordBatch(records=rs)), gen)


def state(m):
    return m._batch.state[m._i]


def test_a_chain_runs_one_message_at_a_time_and_waits_for_its_settle():
    book, gen, _ = new_book()
    d = book.disp
    pushed = []
    d.start(pushed.append)
    b = batch(book, gen, (1, 0), (2, 0), (1, 1), (0, 5), (1, 2))
    assert [c.key[2] for c in pushed] == [1, 2]  # each chain pushed once
    assert b.msgs[3]._ch is None  # unordered: the batch's chunks carry it
    a = pushed[0]
    m0 = d.take(a)
    assert m0.offset == 0 and a.out is m0
    assert d.done(a, m0, 0) is False  # returned unsettled: holds the chain
    batch(book, gen, (1, 3))
    assert len(pushed) == 2  # still held: nothing pushed
    m0.ack()
    assert pushed[-1] is a and len(pushed) == 3  # its settle hands the chain on
    m1 = d.take(a)
    assert m1.offset == 1
    m1.ack()
    assert d.done(a, m1, 0) is True  # settled in its handler: the worker goes on
    assert [d.take(a).offset for _ in range(1)] == [2]


def test_a_nack_drops_later_copies_and_fences_until_the_record_comes_again():
    book, gen, sent = new_book()
    d = book.disp
    pushed = []
    d.start(pushed.append)
    b = batch(book, gen, (1, 0), (1, 1), (1, 2), (1, 3))
    c = pushed.pop()
    m0 = d.take(c)
    m0.nack()
    assert [state(m) for m in b.msgs[1:]] == [DROPPED] * 3
    assert d.done(c, m0, 0) is False  # nothing left to run
    # Sent before ksidecar read the nack: dropped, whether its result came or not.
    late = batch(book, gen, (1, 4), (1, 5))
    assert [state(m) for m in late.msgs] == [DROPPED] * 2 and not pushed
    book.flush()
    d.answered(["1:0:1"])
    late = batch(book, gen, (1, 6))
    assert state(late.msgs[0]) == DROPPED
    # The nacked record comes again: the chain goes on from it.
    again = batch(book, gen, (1, 0), (1, 1), attempt=2)
    assert pushed == [c] and d.fenced == {}
    assert [d.take(c).offset] == [0]
    assert state(again.msgs[1]) == 0
    assert book.pending() is False and any(r.HasField("nack") for r in sent)
    assert d.dropped == 6


def test_the_fence_ends_after_its_grace():
    book, gen, _ = new_book(grace=0.0)
    d = book.disp
    pushed = []
    d.start(pushed.append)
    batch(book, gen, (1, 0))
    c = pushed.pop()
    m0 = d.take(c)
    m0.nack()
    d.done(c, m0, 0)
    d.answered(["1:0:1"])  # grace 0: lifted at once (the record went to another subscriber)
    later = batch(book, gen, (1, 7))
    assert state(later.msgs[0]) == 0 and [x.key for x in pushed] == [c.key]


def test_a_record_sent_again_drops_the_queued_copies_above_it():
    book, gen, _ = new_book()
    d = book.disp
    pushed = []
    d.start(pushed.append)
    b = batch(book, gen, (1, 0), (1, 1), (1, 2), (1, 3))
    c = pushed.pop()
    m0 = d.take(c)
    # 1's lease ran out: ksidecar sends 1.. again.
    again = batch(book, gen, (1, 1), (1, 2), attempt=2)
    assert [state(m) for m in b.msgs[1:]] == [DROPPED] * 3
    m0.ack()
    assert d.done(c, m0, 0) is True
    assert d.take(c) is again.msgs[0]


def test_a_lost_stream_drops_its_queued_records_and_a_new_stream_waits_for_the_old_handler():
    book, gen, _ = new_book()
    d = book.disp
    pushed = []
    d.start(pushed.append)
    b = batch(book, gen, (1, 0), (1, 1), (1, 2))
    c = pushed.pop()
    m0 = d.take(c)
    book.stream_lost("test", quiet=True)
    assert [state(m) for m in b.msgs[1:]] == [DROPPED] * 2
    gen2 = book.new_stream(lambda r: None)
    b2 = batch(book, gen2, (1, 0), (1, 1), attempt=2)
    assert not pushed  # m0's handler still runs
    r = m0.ack_with_result().result(timeout=1)
    assert r.status == ksidecar.AckStatus.STALE
    assert d.done(c, m0, 0) is True and d.take(c) is b2.msgs[0]


def test_the_iterator_skips_what_a_nack_dropped():
    book, gen, _ = new_book()
    d = book.disp
    b = batch(book, gen, (1, 0), (0, 9), (1, 1), (1, 2))
    out = []
    for m in b.msgs:
        if m._ch is None or d.hand(m):
            out.append(m.offset)
            if m.offset == 0:
                m.nack()
            else:
                m.ack()
    assert out == [0, 9]
    assert state(b.msgs[1]) == SETTLED
    assert d.chains.keys() == {("t", 0, 1)}  # held by its fence only


def test_settling_a_forgotten_chains_message_leaves_the_newer_chain_of_its_key():
    # The iterator forgets a chain once its messages are handed out; a later batch makes a
    # new chain for the key. Settling the old chain's message must not delete the new one,
    # which knows the key's last offset (so that a record sent again drops its copies).
    book, gen, _ = new_book()
    d = book.disp
    b = batch(book, gen, (1, 0))
    m0 = b.msgs[0]
    assert d.hand(m0) and not d.chains  # handed out: its chain forgotten
    b2 = batch(book, gen, (1, 1), (1, 2))
    c2 = b2.msgs[0]._ch
    assert c2 is not m0._ch and d.chains[("t", 0, 1)] is c2
    m0.ack()
    assert d.chains.get(("t", 0, 1)) is c2
    # 1's lease ran out: ksidecar sends 1.. again; the queued copies are dropped.
    again = batch(book, gen, (1, 1), (1, 2), attempt=2)
    assert [state(m) for m in b2.msgs] == [DROPPED] * 2
    assert [m.offset for m in again.msgs if d.hand(m)] == [1, 2]


def test_a_settled_chained_batch_is_freed_without_the_garbage_collector():
    """A chained batch's messages refer to it and it to them (msgs): once every record is
    settled, the next delivery lets it go and reference counting frees them all, without
    waiting for the garbage collector to find the cycle."""
    def messages():
        return sum(isinstance(o, ksidecar.Message) for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        book, gen, _ = new_book()
        d = book.disp
        b = batch(book, gen, (1, 0), (2, 0), (1, 1))
        for m in b.msgs:
            if d.hand(m):
                m.ack()
        del m
        assert messages() == 3
        batch(book, gen, (0, 5))  # unordered: no messages made on arrival
        assert b.msgs == () and messages() == 0
    finally:
        gc.enable()
