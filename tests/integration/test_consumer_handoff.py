"""The high-level consumer hands messages out a batch at a time (hostbroker/client/streams.py,
``KafkaStream``): what it commits, holds back from the interval commit, and stops handing out
on a rebalance or a shutdown is still exact to the message, mid-batch and across batches.

Real ``hostbroker serve``, ``ConsumerConnector`` members of the broker's group coordinator;
topics of a few thousand small messages, so one fetched chunk holds several batches
(:data:`~hostbroker.client.streams.BATCH` messages each).

One broker serves the whole module: no test stops or reconfigures it, and each test has
its own topic and group (``new_topic()``).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from hostbroker.client import ConsumerConnector, ConsumerTimeoutError, SimpleClient
from hostbroker.client.streams import BATCH
from hostbroker.log.message import encode_message_set
from tests.integration.wire_helpers import module_broker, new_topic

MESSAGES = 1000  # one fetched chunk: 4 batches

served = module_broker()


def fill(uri: str, topic: str, partitions: int, messages: int) -> dict[int, list[int]]:
    """``messages`` per partition (values ``b"p:i"``); each message's next_offset, per partition."""
    ends: dict[int, list[int]] = {}
    with SimpleClient(uri) as client:
        client.create_topic(topic, partitions)
        for p in range(partitions):
            values = [f"{p}:{i}".encode() for i in range(messages)]
            base = client.produce(topic, p, encode_message_set(values)).base_offset
            ends[p] = []
            offset = base
            for value in values:
                offset += len(encode_message_set([value]))
                ends[p].append(offset)
    return ends


def committed(uri: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    with SimpleClient(uri) as client:
        return [r.offset for r in client.offset_fetch(group, [(topic, p)
                                                              for p in range(partitions)])]


def connector(uri: str, group: str, **options) -> ConsumerConnector:
    options = {"auto_offset_reset": "earliest", "consumer_timeout_ms": 15000,
               "fetch_wait_max_ms": 50, **options}
    return ConsumerConnector(uri, group_id=group, **options)


@pytest.mark.parametrize("handed", [1, BATCH - 1, BATCH, BATCH + 1, 3 * BATCH + 7, MESSAGES])
def test_a_commit_stores_exactly_the_messages_handed_out(served, handed):
    topic, group = new_topic("handoff"), new_topic("handoff-g")
    ends = fill(served.unix, topic, 1, MESSAGES)
    c = connector(served.unix, group, auto_commit_enable=False)
    (stream,) = c.create_message_streams({topic: 1})[topic]
    got = [next(stream) for _ in range(handed)]
    assert [m.value for m in got] == [f"0:{i}".encode() for i in range(handed)]
    assert [m.next_offset for m in got] == ends[0][:handed]
    assert c.positions() == {(topic, 0): ends[0][handed - 1]}
    c.commit_offsets()
    assert committed(served.unix, group, topic) == [ends[0][handed - 1]]
    c.shutdown()
    if handed < MESSAGES:  # the group resumes with the next message, none skipped or repeated
        with connector(served.unix, group, auto_commit_enable=False) as again:
            (stream,) = again.create_message_streams({topic: 1})[topic]
            assert next(stream).value == f"0:{handed}".encode()


def test_for_loops_and_next_share_one_position(served):
    topic, group = new_topic("handoff"), new_topic("handoff-g")
    fill(served.unix, topic, 1, MESSAGES)
    with connector(served.unix, group, auto_commit_enable=False, consumer_timeout_ms=2000) as c:
        (stream,) = c.create_message_streams({topic: 1})[topic]
        seen = []
        for m in stream:
            seen.append(m)
            if len(seen) == BATCH - 3:
                break
        seen.append(next(stream))
        for m in stream:  # a loop started again goes on where the last one stopped
            seen.append(m)
            if len(seen) == 2 * BATCH + 5:
                break
        seen += [next(stream) for _ in range(10)]
        with pytest.raises(ConsumerTimeoutError):  # after the last message: wait, time out
            for m in stream:
                seen.append(m)
        assert [m.value for m in seen] == [f"0:{i}".encode() for i in range(MESSAGES)]


@pytest.mark.parametrize("handed", [BATCH - 1, BATCH, BATCH + 1, MESSAGES])
def test_the_interval_commit_stores_what_the_reader_moved_past(served, handed):
    topic, group = new_topic("handoff"), new_topic("handoff-g")
    ends = fill(served.unix, topic, 1, MESSAGES)
    with connector(served.unix, group, auto_commit_interval_ms=20, consumer_timeout_ms=500) as c:
        (stream,) = c.create_message_streams({topic: 1})[topic]
        for _ in range(handed):
            held = next(stream)  # the last one is in the reader's hands
        assert held.next_offset == ends[0][handed - 1]
        moved = ends[0][handed - 2]
        deadline = time.monotonic() + 15
        while committed(served.unix, group, topic) != [moved]:
            assert time.monotonic() < deadline, committed(served.unix, group, topic)
            time.sleep(0.02)
        time.sleep(0.2)  # several more interval commits: still not the held message
        assert committed(served.unix, group, topic) == [moved]
        if handed == MESSAGES:  # asking for more moves past the last one
            with pytest.raises(ConsumerTimeoutError):
                next(stream)
        else:
            next(stream)
        deadline = time.monotonic() + 15
        while committed(served.unix, group, topic) != [held.next_offset]:
            assert time.monotonic() < deadline, committed(served.unix, group, topic)
            time.sleep(0.02)


def test_shutdown_mid_batch_commits_what_was_handed_out_and_hands_out_no_more(served):
    topic, group = new_topic("handoff"), new_topic("handoff-g")
    ends = fill(served.unix, topic, 1, MESSAGES)
    c = connector(served.unix, group)
    (stream,) = c.create_message_streams({topic: 1})[topic]
    for _ in range(BATCH + 10):
        next(stream)
    c.shutdown()
    with pytest.raises(StopIteration):  # the rest of the chunk is not handed out
        next(stream)
    assert list(stream) == []
    assert committed(served.unix, group, topic) == [ends[0][BATCH + 9]]


def test_shutdown_from_another_thread_stops_a_for_loop_mid_batch(served):
    topic, group = new_topic("handoff"), new_topic("handoff-g")
    ends = fill(served.unix, topic, 1, MESSAGES)
    c = connector(served.unix, group)
    (stream,) = c.create_message_streams({topic: 1})[topic]
    seen = []
    for m in stream:
        seen.append(m)
        if len(seen) == 5:
            stopper = threading.Thread(target=c.shutdown)
            stopper.start()
            stopper.join()
    assert len(seen) == 5  # nothing more after shutdown() returned
    assert committed(served.unix, group, topic) == [ends[0][4]]


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, list]] = []
        self.changed = threading.Event()

    def on_partitions_revoked(self, keys):
        self.events.append(("revoked", sorted(keys)))

    def on_partitions_assigned(self, keys):
        self.events.append(("assigned", sorted(keys)))
        self.changed.set()


def test_a_rebalance_mid_batch_hands_no_message_out_twice(served):
    """A reads part of a chunk and holds; B joins and takes one of its two partitions.
    A hands out nothing more of the partition it gave up, commits what it handed out of
    it, and B starts right there: every message once, across both members."""
    topic, group = new_topic("handoff"), new_topic("handoff-g")
    messages = 2000
    fill(served.unix, topic, 2, messages)
    settings = {"session_timeout_ms": 6000, "rebalance_timeout_ms": 6000,
                "auto_commit_interval_ms": 60000, "consumer_timeout_ms": 2000}
    recorder_a = Recorder()
    a = connector(served.unix, group, rebalance_listener=recorder_a, **settings)
    b = None
    try:
        (stream_a,) = a.create_message_streams({topic: 1})[topic]
        seen_a = [next(stream_a) for _ in range(BATCH + 50)]
        recorder_a.changed.clear()
        b = connector(served.unix, group, **settings)
        (stream_b,) = b.create_message_streams({topic: 1})[topic]
        assert recorder_a.changed.wait(20), recorder_a.events
        (kept,) = [p for _, p in recorder_a.events[-1][1]]
        (given,) = {0, 1} - {kept}
        seen_b = []
        for stream, seen in ((stream_a, seen_a), (stream_b, seen_b)):
            with pytest.raises(ConsumerTimeoutError):
                while True:
                    seen.append(next(stream))
        after = seen_a[BATCH + 50:]
        assert {m.partition for m in after} <= {kept}
        assert {m.partition for m in seen_b} == {given}
        everything = [(m.partition, m.offset) for m in seen_a + seen_b]
        assert len(everything) == len(set(everything)) == 2 * messages
    finally:
        a.shutdown()
        if b is not None:
            b.shutdown()


def test_a_for_loop_over_a_stream_runs_no_connector_code_per_message(served):
    """The hand-out is C code: per batch, not per message, does the connector's
    Python run (the per-message bookkeeping that made it slower than SimpleConsumer)."""
    topic, group = new_topic("handoff"), new_topic("handoff-g")
    fill(served.unix, topic, 1, 5000)
    with connector(served.unix, group, auto_commit_enable=False) as c:
        (stream,) = c.create_message_streams({topic: 1})[topic]
        next(stream)  # the first chunk is in
        calls = 0
        own = {"streams.py", "group.py", "group_assignments.py", "group_coordinator.py",
               "coordinator_requests.py"}
        main = threading.current_thread()

        def profile(frame, event, arg):
            nonlocal calls
            # Calls of functions, not generators resumed (the loop's own, and decoding's).
            if (event == "call" and threading.current_thread() is main
                    and not frame.f_code.co_flags & 0x20
                    and os.path.basename(frame.f_code.co_filename) in own
                    and "hostbroker" in frame.f_code.co_filename):
                calls += 1

        n = 0
        sys.setprofile(profile)
        try:
            for _ in stream:
                n += 1
                if n == 4000:
                    break
        finally:
            sys.setprofile(None)
        assert calls < n / 50, f"{calls} calls of the connector's code for {n} messages"
