"""Acks as ack ranges answered by position, without a server: how ids coalesce, what goes on
the wire, and how each answer (a count, and a result by its own id for each refused record)
resolves the futures and logs of the messages it answers, matched by their order."""
import logging

import pytest

import ksidecar
from ksidecar._common import (ACK_RANGE_MAX, Book, Settings, ack_ranges, range_ids)
from ksidecar._proto import pb

HEAD = "a18cc2b65743ce1e18"


def aid(off, part=2, epoch=3, attempt=1, topic="demo-x"):
    return f"{HEAD}-{epoch}-{part}-{off}-{attempt}-{topic}"


def test_consecutive_offsets_of_a_partition_become_one_range():
    ids = [aid(o) for o in range(1000, 1010)]
    assert ack_ranges(ids) == [f"{HEAD}-3-2-1000~1009-1-demo-x"]
    assert range_ids(ack_ranges(ids)[0]) == ids


def test_runs_break_at_a_gap_another_partition_epoch_attempt_or_topic():
    ids = [aid(1), aid(2), aid(4), aid(5), aid(6, part=3), aid(7, part=3), aid(8, epoch=4),
           aid(9, epoch=4, attempt=2), aid(10, epoch=4, attempt=2, topic="other"), aid(12)]
    assert ack_ranges(ids) == [aid("1~2"), aid("4~5"), aid("6~7", part=3), aid(8, epoch=4),
                               aid(9, epoch=4, attempt=2), aid(10, epoch=4, attempt=2,
                                                               topic="other"), aid(12)]


def test_ids_of_another_form_and_single_offsets_go_as_they_are():
    odd = ["1:0:1", "1:1:1", "", "a1short", aid("007"), aid("008"), aid(f"{1 << 63}"),
           aid(f"{(1 << 63) + 1}"), HEAD + "-3-2-5", HEAD + "-3-2-6"]
    assert ack_ranges(odd) == odd
    assert ack_ranges([aid(5)]) == [aid(5)]
    assert ack_ranges([]) == []
    # Out of order, or the same offset twice: no range.
    assert ack_ranges([aid(2), aid(1), aid(1)]) == [aid(2), aid(1), aid(1)]
    assert ack_ranges([aid(0), aid(1), "x", aid(2), aid(3)]) == [aid("0~1"), "x", aid("2~3")]


def test_range_ids_refuses_what_is_not_a_range():
    assert range_ids(aid(5)) is None
    assert range_ids(aid("9~8")) is None
    assert range_ids(aid(f"0~{ACK_RANGE_MAX}")) is None
    assert len(range_ids(aid(f"1~{ACK_RANGE_MAX}"))) == ACK_RANGE_MAX


# -- the Book, with a fake stream


def new_book(**opts):
    b = Book(Settings(target="x", group="g", topics=("t",), **opts), wake=lambda: None)
    sent = []
    gen = b.new_stream(sent.append)
    return b, gen, sent


def deliver(book, gen, offsets, part=2):
    recs = [pb.Record(topic="demo-x", partition=part, offset=o, ack_id=aid(o, part=part),
                      attempt=1) for o in offsets]
    return book.take(pb.SubscribeResponse(batch=pb.RecordBatch(records=recs)), gen).messages()


def answer(book, results=(), accepted=0):
    rs = [pb.AckResult(ack_id=i, status=st, message=msg, position=pos)
          for i, st, msg, pos in results]
    book.take(pb.SubscribeResponse(ack_results=pb.AckResults(results=rs, accepted=accepted)),
              book.gen)


def test_plain_acks_go_as_ranges_by_position_and_a_count_answers_them():
    book, gen, sent = new_book()
    msgs = deliver(book, gen, range(100, 110)) + deliver(book, gen, [7, 8], part=5)
    for m in msgs:
        m.ack()
    book.flush()
    (req,) = sent
    assert req.ack.results_by_position and not req.ack.wait_commit
    assert list(req.ack.ack_ids) == [aid("100~109"), aid("7~8", part=5)]
    assert book.left() == 12
    answer(book, accepted=12)
    assert book.left() == 0 and not book.inflight


def test_futures_resolve_from_the_count_and_a_refused_one_by_its_own_id(caplog):
    book, gen, sent = new_book()
    msgs = deliver(book, gen, range(10))
    futs = [m.ack_with_result() for m in msgs[:5]]
    for m in msgs[5:]:
        m.ack()
    book.flush()
    assert list(sent[0].ack.ack_ids) == [aid("0~9")]
    with caplog.at_level(logging.WARNING, logger="ksidecar"):
        answer(book, [(aid(3), 4, "redelivered since", 0), (aid(7), 4, "redelivered since", 0)],
               accepted=8)
    got = [f.result(timeout=0) for f in futs]
    assert [r.status for r in got] == [ksidecar.AckStatus.ACCEPTED] * 3 + [
        ksidecar.AckStatus.STALE, ksidecar.AckStatus.ACCEPTED]
    assert [r.ack_id for r in got] == [aid(o) for o in range(5)]
    assert got[3].message == "redelivered since" and got[0].message == ""
    # The refused plain ack is logged by its own id; the refused future is not (it says so).
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and aid(7) in warned[0] and "STALE" in warned[0], warned
    assert book.left() == 0 and not book.waiters


def test_an_id_queued_twice_goes_once():
    # ack() racing ack_with_result() on one message can queue its id twice; sent twice, the
    # server would accept one copy and refuse the other, and only the refusal names the id.
    book, gen, sent = new_book()
    msgs = deliver(book, gen, range(3))
    fut = msgs[1].ack_with_result()
    book.acks.append(msgs[1]._rec.ack_id)
    msgs[0].ack()
    msgs[2].ack()
    book.flush()
    (req,) = sent
    assert len(set(req.ack.ack_ids)) == len(req.ack.ack_ids), req
    assert sum(len(range_ids(i) or [i]) for i in req.ack.ack_ids) == 3, req
    assert book.left() == 3
    answer(book, accepted=3)
    assert fut.result(timeout=0).status == ksidecar.AckStatus.ACCEPTED
    assert book.left() == 0 and not book.inflight


def test_answers_match_their_messages_in_order_not_by_ids():
    book, gen, sent = new_book(ack_max_ids=4)
    a = deliver(book, gen, range(4))
    b = deliver(book, gen, range(10, 14))
    fa = [m.ack_with_result() for m in a]   # the 4th flushes
    fb = [m.ack_with_result() for m in b]
    assert [list(r.ack.ack_ids) for r in sent] == [[aid("0~3")], [aid("10~13")]]
    # Both answers are all-accepted: the same shape, told apart only by their order.
    answer(book, accepted=4)
    assert all(f.done() for f in fa) and not any(f.done() for f in fb)
    answer(book, [(aid(12), 3, "no delivered record has it", 0)], accepted=3)
    assert [f.result().status.name for f in fb] == ["ACCEPTED", "ACCEPTED", "NOT_FOUND",
                                                    "ACCEPTED"]
    assert book.left() == 0


def test_an_extension_answered_before_a_ranged_ack_of_the_same_ids():
    book, gen, sent = new_book(deadline_ms=30)
    msgs = deliver(book, gen, range(3))
    book.margin = 10.0  # every lease is due
    assert book.extend_due() == 3
    futs = [m.ack_with_result() for m in msgs]
    book.flush()
    assert sent[0].HasField("modify_deadline") and sent[1].ack.results_by_position
    # The extension's answer names the same three ids, all refused (the acks came first):
    # it must not be taken for an all-refused answer to the acks.
    answer(book, [(aid(o), 3, "", 0) for o in range(3)])
    assert not any(f.done() for f in futs)
    answer(book, accepted=3)
    assert [f.result().status.name for f in futs] == ["ACCEPTED"] * 3
    assert book.left() == 0


def test_nacks_and_waited_acks_keep_their_answers_by_id():
    book, gen, sent = new_book()
    msgs = deliver(book, gen, range(6))
    msgs[0].ack()
    msgs[1].ack()
    fc = msgs[2].ack_with_result(wait_commit=True)
    fn = msgs[3].nack_with_result(delay_ms=5)
    msgs[4].ack()
    book.flush()
    ack, commit, nack = sent
    assert list(ack.ack.ack_ids) == [aid("0~1"), aid(4)] and ack.ack.results_by_position
    assert list(commit.ack.ack_ids) == [aid(2)] and commit.ack.wait_commit
    assert not commit.ack.results_by_position
    assert list(nack.nack.ack_ids) == [aid(3)]
    answer(book, accepted=3)
    answer(book, [(aid(2), 1, "", 0)])  # taken: the future waits for its commit
    answer(book, [(aid(3), 1, "", 0)])
    assert fn.result().status.name == "ACCEPTED" and not fc.done()
    answer(book, [(aid(2), 5, "", 0)])
    assert fc.result().status.name == "COMMITTED"
    assert book.left() == 0


def test_ack_ranges_false_sends_every_id_on_its_own():
    book, gen, sent = new_book(ack_ranges=False)
    msgs = deliver(book, gen, range(5))
    futs = [m.ack_with_result() for m in msgs]
    book.flush()
    assert list(sent[0].ack.ack_ids) == [aid(o) for o in range(5)]
    assert not sent[0].ack.results_by_position
    answer(book, [(aid(o), 1, "", 0) for o in range(5)])
    assert [f.result().status.name for f in futs] == ["ACCEPTED"] * 5 and book.left() == 0


def test_an_old_server_answers_a_range_invalid_by_its_range_id(caplog):
    book, gen, sent = new_book()
    msgs = deliver(book, gen, [1, 2, 3, 9])
    futs = [m.ack_with_result() for m in msgs]
    book.flush()
    assert list(sent[0].ack.ack_ids) == [aid("1~3"), aid(9)]
    with caplog.at_level(logging.WARNING, logger="ksidecar"):
        answer(book, [(aid("1~3"), 2, "malformed ack id", 0), (aid(9), 1, "", 0)])
    assert [(f.result().ack_id, f.result().status.name) for f in futs] == [
        (aid(1), "INVALID"), (aid(2), "INVALID"), (aid(3), "INVALID"), (aid(9), "ACCEPTED")]
    assert any("ack_ranges=False" in r.getMessage() for r in caplog.records)
    assert book.left() == 0


def test_more_than_the_range_bound_goes_in_several_messages():
    book, gen, sent = new_book(ack_max_ids=100000)
    n = ACK_RANGE_MAX + 5
    for m in deliver(book, gen, range(n)):
        m.ack()
    book.flush()
    assert [list(r.ack.ack_ids) for r in sent] == [[aid(f"0~{ACK_RANGE_MAX - 1}")],
                                                   [aid(f"{ACK_RANGE_MAX}~{n - 1}")]]
    answer(book, accepted=ACK_RANGE_MAX)
    assert book.left() == 5
    answer(book, accepted=5)
    assert book.left() == 0


def test_a_lost_stream_resolves_ranged_futures_stale():
    book, gen, sent = new_book()
    futs = [m.ack_with_result() for m in deliver(book, gen, range(3))]
    book.flush()
    book.stream_lost("test", quiet=True)
    assert [f.result().status.name for f in futs] == ["STALE"] * 3
    assert not book.inflight


@pytest.mark.parametrize("shape", ["all", "none"])
def test_an_answer_that_fits_no_message_is_logged_not_matched(caplog, shape):
    book, gen, sent = new_book()
    fut = deliver(book, gen, [1])[0].ack_with_result()
    book.flush()
    with caplog.at_level(logging.WARNING, logger="ksidecar"):
        answer(book, accepted=7) if shape == "all" else answer(book, [(aid(5), 2, "", 0), (aid(6), 2, "", 0)])
    assert "match no message" in caplog.text and not fut.done()
    answer(book, accepted=1)
    assert fut.result().status.name == "ACCEPTED"
