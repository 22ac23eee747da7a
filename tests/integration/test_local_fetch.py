"""FETCHes of a few partitions answered by the processor itself
(``processor.local.fetch``, ``processor.fetch.max.partitions``): which it
takes, that it answers them as a handler would (data, errors and the
answer's byte budget), that one waiting for data waits there and gets it as
soon as its partitions are appended to (min_bytes over all of them), that it
is bounded, and that a connection closed meanwhile leaves nothing behind.
And, wherever a fetch waits (processor, writer or handler): min_bytes and
the deadline, its topic deleted, its writer dying, later requests of its
connection not held back, and the broker stopping answer it.

Tests of one combination of settings that several use share one broker
(``shared``, one of WAITS_AT at a time, pytest running the tests of each
together; ``parked_2``; ``one_processor``): each on a topic of its own,
starting once nothing waits in it (:func:`idle`), its counters read from
there. A test whose settings are its own, that kills a writer or stops the
broker keeps its own."""

from __future__ import annotations

import os
import signal
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.broker import Broker
from tests.integration.wire_helpers import (
    RawSocket,
    created_topic,
    fetch_frame,
    fetched,
    module_broker,
    produce_request,
    stop_or_kill,
    wait_for,
    waiting,
)

# where a FETCH of one partition that must wait for data does
WAITS_AT = {
    "processor": {},
    "writer": {"processor.local.fetch": "false"},
    "handler": {"processor.local.fetch": "false", "fetch.writer.polls": "false"},
}
waits_at = pytest.mark.parametrize("where", list(WAITS_AT))

# waits_at, on the shared broker of each ``where``. (pytest runs the tests of
# a module-scoped parameter together by its index: each WAITS_AT key has the
# same index, its place in WAITS_AT, in every parametrize of ``shared``.)
shared_waits_at = pytest.mark.parametrize("where, shared", [(w, w) for w in WAITS_AT],
                                          indirect=["shared"], ids=list(WAITS_AT),
                                          scope="module")


@pytest.fixture(scope="module")
def shared(request, tmp_path_factory):
    """A broker of the settings WAITS_AT[param] for the tests that wait there
    and neither stop it nor kill its workers (one of them at a time)."""
    broker = Broker(tmp_path_factory.mktemp("hb"), **WAITS_AT[request.param]).start()
    yield broker
    stop_or_kill(broker)


# The two tests of each of these bounds share a broker.
parked_2 = module_broker(**{"processor.fetch.max.parked": 2, "num.processors": 1})
one_processor = module_broker(**{"num.processors": 1})


def idle(broker):
    """``broker`` once nothing waits in it: the fetches of the test before
    (its connections closed) gone, each count this test reads starts at 0."""
    assert parked(broker, "processor", 0) and parked(broker, "handler", 0)
    return broker


@pytest.fixture
def served(shared):
    """The shared broker of the test's WAITS_AT, idle."""
    return idle(shared)


def produce(broker, topic: str, data: bytes) -> None:
    with broker.client(broker.tcp) as c:
        assert c.produce(topic, 0, data).error_code == 0


def parked(broker, kind: str, n: int) -> bool:
    """``kind``'s processes come to hold ``n`` waiting fetches (FETCH_PARKED)."""
    return wait_for(lambda: broker.counter(kind, "fetch_parked") == n)


def fetch_of(topic: str, partitions, correlation_id: int, offset: int = 0,
             max_wait_ms: int = 5000, min_bytes: int = 1, max_bytes: int = 1 << 20) -> bytes:
    """A FETCH request frame of ``partitions`` of ``topic``, each from ``offset``."""
    return api.encode_request(api.FetchRequest(max_wait_ms, min_bytes, tuple(
        api.FetchPartition(topic, p, offset, max_bytes) for p in partitions)), correlation_id)


def fetched_sets(sock: RawSocket) -> tuple[int, list]:
    """(correlation id, [(error, message set)] by partition) of the next FETCH answer."""
    correlation_id, response = sock.read_response(api.ApiKey.FETCH)
    return correlation_id, [(p.error_code, bytes(p.message_set)) for p in response.partitions]


@pytest.mark.parametrize("local", [True, False])
def test_who_answers_a_fetch(make_broker, local):
    """Up to processor.fetch.max.partitions partitions: the processor, with
    the setting on; past it, or with it off, the handler."""
    broker = make_broker(**{"processor.local.fetch": str(local).lower(),
                            "processor.fetch.max.partitions": 3})
    topic = created_topic(broker.tcp, partitions=4)
    data = encode_message_set([b"one", b"two"])
    produce(broker, topic, data)
    handler_before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        for i in range(10):
            sock.send(fetch_frame(topic, 0, i))
            assert fetched(sock) == (i, 0, data)
        for n in (2, 3, 4):  # partition 0 and empty ones; 4 is past the setting
            sock.send(fetch_of(topic, range(n), 90 + n, max_wait_ms=0))
            assert fetched_sets(sock) == (90 + n, [(0, data)] + [(0, b"")] * (n - 1))
        # one partition twice in one request
        sock.send(fetch_of(topic, (0, 0), 99))
        assert fetched_sets(sock) == (99, [(0, data), (0, data)])
    handler = broker.counter("handler", "requests") - handler_before
    assert handler == (1 if local else 14)


def test_one_round_looks_up_its_share_and_the_handler_takes_the_rest(make_broker):
    """Twelve FETCHes in one write, with processor.fetch.max.partitions 2: the
    processor looks up 8 partitions in one round (4 x the setting) and the
    handler answers the rest; the answers come whole and in order."""
    broker = make_broker(**{"processor.fetch.max.partitions": 2, "num.processors": 1})
    topic = created_topic(broker.tcp, partitions=2)
    data = encode_message_set([b"one", b"two"])
    produce(broker, topic, data)
    handler_before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        sock.send(b"".join(fetch_of(topic, (0, 1), i, max_wait_ms=0) for i in range(4))
                  + b"".join(fetch_frame(topic, 0, 4 + i) for i in range(8)))
        for i in range(4):
            assert fetched_sets(sock) == (i, [(0, data), (0, b"")])
        for i in range(4, 12):
            assert fetched(sock) == (i, 0, data)
    # 4 FETCHes of two partitions fill the round: the 8 after them go to the handler
    assert broker.counter("handler", "requests") - handler_before == 8


def test_answers_are_the_handlers(make_broker, tmp_path):
    """Errors, a cut set, an offset past the end and the answer's byte
    budget (fetch.max.bytes) over several partitions read as the handler
    gives them."""
    answers = {}
    for local in (True, False):
        (tmp_path / str(local)).mkdir()
        broker = make_broker(root=tmp_path / str(local), **{
            "processor.local.fetch": str(local).lower(), "fetch.max.bytes": 1024})
        topic = "same"
        with broker.client(broker.tcp) as c:
            c.create_topic(topic, 2)
        data = encode_message_set([b"x" * 100] * 8)
        produce(broker, topic, data)
        with broker.client(broker.tcp) as c:
            assert c.produce(topic, 1, data).error_code == 0
        two = (api.FetchPartition(topic, 0, 0, 1 << 20), api.FetchPartition(topic, 1, 0, 1 << 20))
        got = []
        with RawSocket(broker.tcp) as sock:
            for frame in (fetch_frame(topic, 0, 1, max_bytes=150),  # cut inside the 2nd
                          fetch_frame(topic, 0, 2, max_bytes=0),  # INVALID_FETCH_SIZE
                          fetch_frame("nosuch", 0, 3),  # UNKNOWN_TOPIC_OR_PARTITION
                          fetch_frame(topic, 0, 4, partition=7),
                          fetch_frame(topic, 1, 5, max_wait_ms=0),  # not an entry's start
                          fetch_frame(topic, 10_000, 6, max_wait_ms=0),  # past the end
                          fetch_frame(topic, len(data), 7, max_wait_ms=0),  # at the end
                          # the budget: the first partition takes its all, the second the rest
                          api.encode_request(api.FetchRequest(0, 1, two), 8),
                          # errors beside data, in request order
                          api.encode_request(api.FetchRequest(0, 1, (
                              api.FetchPartition("nosuch", 0, 0, 100),
                              api.FetchPartition(topic, 1, 0, 200),
                              api.FetchPartition(topic, 0, 0, 0),
                              api.FetchPartition(topic, 9, 0, 100))), 9)):
                sock.send(frame)
                got.append(sock.read_frame())
        answers[local] = got
        broker.stop(timeout=20)
    assert answers[True] == answers[False]
    decoded = [api.decode_response(api.ApiKey.FETCH, f)[1].partitions for f in answers[True]]
    codes = [parts[0].error_code for parts in decoded]
    assert codes[:4] == [0, ErrorCode.INVALID_FETCH_SIZE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert [len(p.message_set) for p in decoded[7]] == [len(data), 1024 - len(data)]
    assert [p.error_code for p in decoded[8]] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, ErrorCode.INVALID_FETCH_SIZE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


@pytest.mark.parametrize("shared", ["processor"], indirect=True)
def test_a_long_poll_waits_at_the_processor_and_gets_the_data(served):
    broker = served
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"first"])
    handler_before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 7, max_wait_ms=20_000))
        assert waiting(sock)
        assert broker.counter("processor", "fetch_parked") == 1
        assert broker.counter("handler", "fetch_parked") == 0
        started = time.monotonic()
        produce(broker, topic, data)
        assert fetched(sock) == (7, 0, data)
        assert time.monotonic() - started < 2  # at the append, not the deadline
        assert parked(broker, "processor", 0)
    # the produce alone went to a writer (a PUT); the fetch never left the processor
    assert broker.counter("handler", "requests") == handler_before


# at the handler: processor.local.fetch off, the settings of WAITS_AT["writer"]
@pytest.mark.parametrize("where, shared", [("processor", "processor"), ("handler", "writer")],
                         indirect=["shared"], ids=["processor", "handler"], scope="module")
def test_a_fetch_of_several_partitions_waits_for_min_bytes_over_all(served, where):
    """In the processor, or (with the setting off) at the handler: appends
    to its partitions add up to min_bytes; with none, its deadline answers."""
    broker = served
    topic = created_topic(broker.tcp, partitions=3)
    one = encode_message_set([b"x" * 100])
    handler_before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_of(topic, (0, 1, 2), 1, max_wait_ms=20_000, min_bytes=2 * len(one)))
        assert parked(broker, where, 1)
        with broker.client(broker.tcp) as c:
            assert c.produce(topic, 2, one).error_code == 0
            assert waiting(sock)  # one entry is less than min_bytes
            started = time.monotonic()
            assert c.produce(topic, 0, one).error_code == 0
        assert fetched_sets(sock) == (1, [(0, one), (0, b""), (0, one)])
        assert time.monotonic() - started < 2  # at the append, not the deadline
        assert parked(broker, where, 0)
        started = time.monotonic()
        sock.send(fetch_of(topic, (0, 2), 2, offset=len(one), max_wait_ms=400))
        assert fetched_sets(sock) == (2, [(0, b""), (0, b"")])
        assert 0.3 < time.monotonic() - started < 3
    # the produces went to the writer as PUTs
    assert broker.counter("handler", "requests") - handler_before == (
        0 if where == "processor" else 2)


@pytest.mark.parametrize("where", ["processor", "handler"])
def test_a_waiting_fetch_woken_by_one_partition_answers_as_a_fresh_look(make_broker, where):
    """A fetch of several partitions that found nothing, woken by an append
    to one of them: that partition's data cut to fetch.max.bytes, the others
    as they were (an empty one with its log end, an unknown one), read as a
    new FETCH of the same partitions reads them right after."""
    broker = make_broker(**{"fetch.max.bytes": 1024, **(
        {} if where == "processor" else {"processor.local.fetch": "false"})})
    topic = created_topic(broker.tcp, partitions=4)
    before = encode_message_set([b"b" * 50] * 3)
    data = encode_message_set([b"x" * 100] * 16)
    with broker.client(broker.tcp) as c:
        assert c.produce(topic, 3, before).error_code == 0
    parts = (api.FetchPartition(topic, 0, 0, 1 << 20), api.FetchPartition(topic, 1, 0, 1 << 20),
             api.FetchPartition(topic, 9, 0, 1 << 20),
             api.FetchPartition(topic, 3, len(before), 1 << 20))

    def answer(sock: RawSocket) -> list:
        _, response = sock.read_response(api.ApiKey.FETCH)
        return [(p.partition, p.error_code, p.log_end_offset, bytes(p.message_set))
                for p in response.partitions]

    with RawSocket(broker.tcp) as sock:
        sock.send(api.encode_request(api.FetchRequest(20_000, 1, parts), 1))
        assert parked(broker, where, 1)
        with broker.client(broker.tcp) as c:
            assert c.produce(topic, 2, before).error_code == 0  # not one it waits on
            assert waiting(sock, 0.2)
            assert c.produce(topic, 1, data).error_code == 0
        woken = answer(sock)
        assert woken == [(0, 0, 0, b""), (1, 0, len(data), data[:1024]),
                         (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, b""),
                         (3, 0, len(before), b"")]
        sock.send(api.encode_request(api.FetchRequest(0, 1, parts), 2))
        assert answer(sock) == woken
        assert parked(broker, where, 0)


def test_the_bound_counts_the_partitions_waited_on(make_broker):
    broker = make_broker(**{"processor.fetch.max.parked": 3, "num.processors": 1})
    topic = created_topic(broker.tcp, partitions=2)
    data = encode_message_set([b"all"])
    socks = [RawSocket(broker.tcp).__enter__() for _ in range(3)]
    try:
        socks[0].send(fetch_of(topic, (0, 1), 0, max_wait_ms=20_000))
        assert parked(broker, "processor", 1)
        socks[1].send(fetch_of(topic, (0, 1), 1, max_wait_ms=20_000))  # 4 would pass it
        assert parked(broker, "handler", 1)
        socks[2].send(fetch_frame(topic, 0, 2, max_wait_ms=20_000))  # 3 do not
        assert parked(broker, "processor", 2)
        produce(broker, topic, data)  # to partition 0
        assert fetched_sets(socks[0]) == (0, [(0, data), (0, b"")])
        assert fetched_sets(socks[1]) == (1, [(0, data), (0, b"")])
        assert fetched(socks[2]) == (2, 0, data)
        assert parked(broker, "processor", 0) and parked(broker, "handler", 0)
        # answered, they left the bound whole: three partitions wait here again
        socks[0].send(fetch_of(topic, (0, 1), 3, offset=len(data), max_wait_ms=20_000))
        socks[2].send(fetch_frame(topic, len(data), 4, max_wait_ms=20_000))
        assert parked(broker, "processor", 2)
        assert broker.counter("handler", "fetch_parked") == 0
    finally:
        for sock in socks:
            sock.__exit__(None, None, None)


@pytest.mark.parametrize("where", ["processor", "handler"])
def test_a_waiting_fetch_whose_answer_does_not_fit_is_refused_alike(make_broker, where):
    """Its headers past response.max.bytes (one long-named partition named
    300 times): INVALID_REQUEST at its deadline, and the connection closes,
    wherever it waited. (It waits 2 s: long enough to be seen parked on a
    loaded machine.)"""
    broker = make_broker(**{"response.max.bytes": 65536, "processor.fetch.max.partitions": 300,
                            "processor.fetch.max.parked": 300,
                            **({} if where == "processor" else {"processor.local.fetch": "false"})})
    topic = created_topic(broker.tcp, prefix="t" * 200)
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_of(topic, [0] * 300, 5, max_wait_ms=2000, min_bytes=1 << 20))
        assert parked(broker, where, 1)
        sock.assert_error_frame(5, ErrorCode.INVALID_REQUEST)


def test_a_closed_connection_gives_its_partitions_back(parked_2):
    broker = idle(parked_2)
    topic = created_topic(broker.tcp, partitions=2)
    for i in range(3):
        with RawSocket(broker.tcp) as sock:
            sock.send(fetch_of(topic, (0, 1), i, max_wait_ms=60_000))
            assert parked(broker, "processor", 1)
        assert parked(broker, "processor", 0)
    assert broker.counter("handler", "fetch_parked") == 0


@shared_waits_at
def test_min_bytes_and_the_deadline(served, where):
    broker = served
    topic = created_topic(broker.tcp)
    one = encode_message_set([b"x" * 100])
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 1, min_bytes=2 * len(one)))
        produce(broker, topic, one)
        assert waiting(sock)  # one entry is less than min_bytes
        produce(broker, topic, one)
        assert fetched(sock) == (1, 0, one * 2)
        started = time.monotonic()
        sock.send(fetch_frame(topic, 2 * len(one), 2, max_wait_ms=400))
        assert fetched(sock) == (2, 0, b"")  # nothing came: empty at the deadline
        assert 0.3 < time.monotonic() - started < 3


@waits_at
def test_the_wait_is_capped_by_fetch_max_wait(make_broker, where):
    broker = make_broker(**{"fetch.max.wait.ms": 300}, **WAITS_AT[where])
    topic = created_topic(broker.tcp)
    with RawSocket(broker.tcp) as sock:
        started = time.monotonic()
        sock.send(fetch_frame(topic, 0, 1, max_wait_ms=60_000))
        assert fetched(sock) == (1, 0, b"")
        assert 0.2 < time.monotonic() - started < 3


@shared_waits_at
def test_a_waiting_fetch_whose_topic_is_deleted_is_answered(served, where):
    broker = served
    topic = created_topic(broker.tcp)
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 3, max_wait_ms=20_000))
        assert waiting(sock)
        with broker.client(broker.tcp) as c:
            c.delete_topic(topic)
        assert fetched(sock) == (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, b"")


@shared_waits_at
def test_a_waiting_fetch_holds_back_no_later_request(served, where):
    """A PRODUCE sent behind a waiting FETCH on the same connection is taken,
    and brings the data the fetch waits for; the answers come in order."""
    broker = served
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"self-served"])
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 1, max_wait_ms=20_000))
        assert waiting(sock, 0.2)
        started = time.monotonic()
        sock.send(api.encode_request(produce_request(topic, 0, data), 2))
        sock.send(api.encode_request(api.MetadataRequest((topic,)), 3))
        assert fetched(sock) == (1, 0, data)
        correlation_id, response = sock.read_response(api.ApiKey.PRODUCE)
        assert (correlation_id, response.partitions[0].error_code) == (2, 0)
        correlation_id, _ = sock.read_response(api.ApiKey.METADATA)
        assert correlation_id == 3
        assert time.monotonic() - started < 2


def test_fetches_over_the_bound_wait_at_the_handler(parked_2):
    broker = idle(parked_2)
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"all"])
    socks = [RawSocket(broker.tcp).__enter__() for _ in range(4)]
    try:
        for i, sock in enumerate(socks):
            sock.send(fetch_frame(topic, 0, i, max_wait_ms=20_000))
        time.sleep(0.3)
        assert all(waiting(s, 0.05) for s in socks)
        assert broker.counter("processor", "fetch_parked") == 2
        assert broker.counter("handler", "fetch_parked") == 0  # the other two: at the writer
        produce(broker, topic, data)
        assert [fetched(s) for s in socks] == [(i, 0, data) for i in range(4)]
    finally:
        for sock in socks:
            sock.__exit__(None, None, None)


def test_at_the_bound_a_fetch_with_data_is_still_answered_here(make_broker):
    broker = make_broker(**{"processor.fetch.max.parked": 1, "num.processors": 1})
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"there"])
    produce(broker, topic, data)
    handler_before = broker.counter("handler", "requests")
    with RawSocket(broker.tcp) as waiter, RawSocket(broker.tcp) as reader:
        waiter.send(fetch_frame(topic, len(data), 1, max_wait_ms=20_000))
        assert parked(broker, "processor", 1)
        for i in range(5):
            reader.send(fetch_frame(topic, 0, 10 + i))
            assert fetched(reader) == (10 + i, 0, data)
        assert broker.counter("handler", "requests") == handler_before
        assert waiting(waiter, 0.1)


def test_each_waiting_fetch_is_answered_by_its_own_partitions_appends(one_processor):
    """Fetches waiting on different partitions (and twice on one): an append
    answers those of its partition and leaves the others waiting."""
    broker = idle(one_processor)
    topic = created_topic(broker.tcp, partitions=3)
    socks = [RawSocket(broker.tcp).__enter__() for _ in range(4)]
    try:
        for i, (sock, partition) in enumerate(zip(socks, (0, 1, 2, 1))):
            sock.send(fetch_frame(topic, 0, i, max_wait_ms=20_000, partition=partition))
        assert parked(broker, "processor", 4)
        remaining = {0, 1, 2, 3}
        for partition, answered in ((1, {1, 3}), (2, {2}), (0, {0})):
            data = encode_message_set([b"to %d" % partition])
            with broker.client(broker.tcp) as c:
                assert c.produce(topic, partition, data).error_code == 0
            for i in sorted(answered):
                assert fetched(socks[i]) == (i, 0, data)
            remaining -= answered
            assert all(waiting(socks[i], 0.1) for i in remaining)
            assert parked(broker, "processor", len(remaining))
    finally:
        for sock in socks:
            sock.__exit__(None, None, None)


def test_a_closed_connection_leaves_nothing_waiting(one_processor):
    broker = idle(one_processor)
    topic = created_topic(broker.tcp)
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 1, max_wait_ms=60_000))
        assert parked(broker, "processor", 1)
    assert parked(broker, "processor", 0)
    data = encode_message_set([b"later"])
    produce(broker, topic, data)
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 2))
        assert fetched(sock) == (2, 0, data)


@waits_at
def test_a_waiting_fetch_outlives_its_writer(make_broker, where):  # (kills a writer: its own)
    """Killed with the fetch held (at the writer, given back to the handler),
    or not (elsewhere): the next append answers it."""
    broker = make_broker(**WAITS_AT[where])
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"after"])
    writer = broker.workers()["hb-writer-0"]
    with RawSocket(broker.tcp, timeout=30) as sock:
        sock.send(fetch_frame(topic, 0, 4, max_wait_ms=20_000))
        assert waiting(sock)
        os.kill(writer, signal.SIGKILL)
        broker.wait_worker_replaced("hb-writer-0", writer)
        produce(broker, topic, data)
        assert fetched(sock) == (4, 0, data)


@waits_at
def test_a_stopping_broker_answers_waiting_fetches(make_broker, where):  # (stops it: its own)
    broker = make_broker(**WAITS_AT[where])
    topic = created_topic(broker.tcp)
    with RawSocket(broker.tcp, timeout=30) as sock:
        sock.send(fetch_frame(topic, 0, 5, max_wait_ms=60_000))
        assert waiting(sock)
        started = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        assert fetched(sock) == (5, 0, b"")
        assert broker.proc.wait(30) == 0
        assert time.monotonic() - started < 15
