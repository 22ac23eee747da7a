"""The order of a writer's direct answers in one round: a long poll the
round's PUT satisfies is answered into the processor's ring before that PUT's
own acknowledgement, so the consumer's processor is woken first.

Driven on a real writer's methods with a real partition table and log dir
(the fixture of ``test_writer_deletes``); the processor's answer ring is a
stand-in that keeps what the writer puts into it, in order.
"""

from __future__ import annotations

from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.writer_polls import _NEVER
from tests.workers import test_writer_deletes as deletes
from tests.workers.test_writer_deletes import FAR, SLOT, create

writer = deletes.writer  # the fixture: a real writer on a real table and log dir

PRODUCER, CONSUMER = 22, 11  # connection ids, both on processor 0


class AnswerRing:
    """Stands in for a processor's answer ring: keeps every answer, in order."""

    def __init__(self):
        self.answers = []

    def try_send(self, *parts) -> bool:
        conn_id, seq, flags, pieces, _ = env.decode_response(b"".join(bytes(p) for p in parts))
        self.answers.append((conn_id, pieces))
        return True

    send = try_send


class Bell:
    def __init__(self):
        self.woken = 0

    def wake(self, needed=None) -> None:
        self.woken += 1


class Board:
    """Stands in for the process board: the counters the writer shows."""

    broker_state = procs.BROKER_RUNNING

    def __init__(self):
        self.counters = {}

    def set(self, slot: int, counter: int, value: int) -> None:
        self.counters[slot, counter] = value


def test_a_held_poll_is_answered_before_the_put_that_satisfies_it(writer):
    w = writer
    create(w, "t")
    ring, bell = AnswerRing(), Bell()
    w.answer_rings, w.processor_bells, w.board, w.slot = [ring], [bell], Board(), 3
    w.polls, w.polls_held, w.polls_new, w.polls_deadline = {}, 0, set(), _NEVER
    w.max_polls, w.max_response_bytes = 10, 1 << 20
    w.wait_ns = 0

    out = []
    w._take_poll(0, env.encode_poll(env.Poll(
        5, SLOT, "t", 0, 0, 1 << 20, 1, FAR, env.Direct(0, CONSUMER, 0, 70))), out)
    assert out == []  # held
    w._answer_round([[]], set())  # a round without appends: it stays held
    assert ring.answers == [] and w.polls_held == 1
    assert w.board.counters[w.slot, procs.FETCH_PARKED] == 1  # shown as a long poll

    data = encode_message_set([b"m" * 100])
    head, body = env.encode_put(SLOT, "t", 0, FAR, data, 0, env.Direct(0, PRODUCER, 0, 80))
    touched: set[int] = set()
    w._put(memoryview(head + bytes(body)), touched)
    assert touched == {SLOT}
    w._publish(SLOT, w.slots[SLOT])
    results = [[]]
    w._answer_round(results, touched)

    assert [conn_id for conn_id, _ in ring.answers] == [CONSUMER, PRODUCER]
    (_, poll_pieces), (_, put_pieces) = ring.answers
    # the consumer's answer: the appended bytes, as a file range of the segment
    assert [p.length for p in poll_pieces if isinstance(p, env.FilePiece)] == [len(data)]
    # the producer's: offset 0, the end just past its set
    correlation_id, answer = api.decode_response(
        api.ApiKey.PRODUCE, b"".join(bytes(p) for p in put_pieces)[4:])
    assert correlation_id == 80
    [part] = answer.partitions
    assert (part.error_code, part.base_offset, part.log_end_offset) == (0, 0, len(data))
    # the handler hears that its poll was answered here
    assert results == [[(env.encode_op(env.OP_POLL_DONE, 5),)]]
    assert bell.woken == 2 and w.polls_held == 0
    assert w.board.counters[w.slot, procs.FETCH_PARKED] == 0
