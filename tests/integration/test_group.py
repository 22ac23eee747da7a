"""ConsumerConnector against a real broker: streams, committed offsets, filters, shutdown.

Most tests share one module broker (``served``), each with its own topics and groups
(``new_topic()``); the three that stop and start the broker keep their own (``broker``).
"""

import re
import threading

import pytest

from hostbroker.client import (Blacklist, ConsumerConnector, ConsumerTimeoutError, OffsetStorage,
                               MessageAndMetadata, SimpleClient, Whitelist)
from hostbroker.errors import ErrorCode
from hostbroker.log.message import CODEC_GZIP, encode_message_set
from tests.integration.wire_helpers import module_broker, new_topic

FAST = {"topic.refresh.interval.ms": 100, "consumer.timeout.ms": 15000,
        "fetch.wait.max.ms": 50, "auto.offset.reset": "earliest"}

served = module_broker()


def values(prefix, n):
    return [f"{prefix}-{i}".encode() for i in range(n)]


def take(stream, n):
    return [next(stream) for _ in range(n)]


def test_streams_are_fed_by_their_own_partitions(served):
    four = new_topic("four")
    with served.client() as client:
        client.create_topic(four, 4)
        for p in range(4):
            client.produce(four, p, encode_message_set(values(f"p{p}", 5)))
    with ConsumerConnector(served.unix, FAST, group_id=four) as connector:
        streams = connector.create_message_streams({four: 2})[four]
        assert len(streams) == 2
        got = [take(stream, 10) for stream in streams]
    for stream, messages in zip(streams, got):
        assert all(isinstance(m, MessageAndMetadata) for m in messages)
        assert {m.partition for m in messages} == {tp[1] for tp in stream.partitions}
        assert len(stream.partitions) == 2
        for p in {m.partition for m in messages}:
            mine = [m for m in messages if m.partition == p]
            assert [m.value for m in mine] == values(f"p{p}", 5)
            assert all(a.next_offset == b.offset for a, b in zip(mine, mine[1:]))
    assert {tp for s in streams for tp in s.partitions} == {(four, p) for p in range(4)}


def test_resume_from_committed_offsets_across_a_broker_restart(broker):
    # Its own broker: it restarts it.
    with broker.client() as client:
        client.produce("log", 0, encode_message_set(values("a", 6)))
        client.produce("log", 0, encode_message_set(values("z", 4), codec=CODEC_GZIP))
    config = {**FAST, "group.id": "resume", "auto.commit.enable": False}
    connector = ConsumerConnector(broker.unix, config)
    (stream,) = connector.create_message_streams({"log": 1})["log"]
    first = take(stream, 4)
    connector.commit_offsets()
    take(stream, 2)  # handed out, never committed
    connector.shutdown()
    with pytest.raises(StopIteration):
        next(stream)
    assert [m.value for m in first] == values("a", 4)

    broker.stop()
    broker.start()
    with ConsumerConnector(broker.tcp, config) as connector:
        (stream,) = connector.create_message_streams({"log": 1})["log"]
        rest = take(stream, 6)
        assert [m.value for m in rest] == values("a", 6)[4:] + values("z", 4)
        assert rest[0].offset == first[-1].next_offset
        # The wrapper's messages share its offset; the last moves past it.
        assert len({m.offset for m in rest[2:]}) == 1 and rest[-1].next_offset > rest[-1].offset
        connector.commit_offsets()
    with SimpleClient(broker.unix) as client:
        (stored,) = client.offset_fetch("resume", [("log", 0)])
    assert stored.offset == rest[-1].next_offset


def test_auto_commit_on_shutdown_and_latest_for_a_new_group(served):
    auto, late = new_topic("auto"), new_topic("late")
    with served.client() as client:
        client.produce(auto, 0, encode_message_set(values("old", 3)))
    with ConsumerConnector(served.unix, {**FAST, "auto.offset.reset": "latest"},
                           group_id=late) as connector:
        (stream,) = connector.create_message_streams({auto: 1})[auto]
        with served.client() as client:
            client.produce(auto, 0, encode_message_set(values("new", 2)))
        assert [m.value for m in take(stream, 2)] == values("new", 2)
    # Shutdown committed what was handed out: nothing is read twice.
    with ConsumerConnector(served.unix, {**FAST, "consumer.timeout.ms": 300},
                           group_id=late) as connector:
        (stream,) = connector.create_message_streams({auto: 1})[auto]
        with pytest.raises(ConsumerTimeoutError, match="consumer.timeout.ms = 300"):
            next(stream)
        with served.client() as client:
            client.produce(auto, 0, encode_message_set([b"after"]))
        # A timeout leaves the stream usable.
        assert next(stream).value == b"after"


def test_filter_picks_up_a_topic_created_later(served):
    # The shared broker holds other tests' topics: the blacklist must list those as
    # well (the partitions listed at the start, plus this test's "other").
    feed, other = new_topic("feed"), new_topic("other")
    feeds = re.escape(feed) + r"\..*"
    with served.client() as client:
        before = {(t.topic, p.partition) for t in client.metadata().topics
                  for p in t.partitions}
        client.produce(f"{feed}.a", 0, encode_message_set([b"a0"]))
        client.produce(other, 0, encode_message_set([b"x"]))
        # "__" names are the broker's: refused, so no filter ever sees one (the
        # filters' own exclusion of them is in tests/client/test_consumer_pure.py)
        refused = client.produce("__internal", 0, encode_message_set([b"i"]), raise_on_error=False)
        assert refused.error_code == ErrorCode.INVALID_TOPIC
    with ConsumerConnector(served.unix, FAST, group_id=f"{feed}.filter") as connector:
        (stream,) = connector.create_message_streams_by_filter(Whitelist(feeds), 1)
        assert next(stream).value == b"a0"
        with served.client() as client:
            client.create_topic(f"{feed}.b", 2)
            client.produce(f"{feed}.b", 1, encode_message_set([b"b1"]))
        m = next(stream)
        assert (m.topic, m.partition, m.value) == (f"{feed}.b", 1, b"b1")
        assert sorted(stream.partitions) == [(f"{feed}.a", 0), (f"{feed}.b", 0), (f"{feed}.b", 1)]
    with ConsumerConnector(served.unix, FAST, group_id=f"{feed}.black") as connector:
        streams = connector.create_message_streams_by_filter(Blacklist(feeds), 2)
        assert sorted(tp for s in streams for tp in s.partitions) == sorted(before | {(other, 0)})


def test_shutdown_ends_a_stream_waiting_forever(served):
    quiet = new_topic("quiet")
    with served.client() as client:
        client.create_topic(quiet, 1)
    connector = ConsumerConnector(served.unix, {**FAST, "consumer.timeout.ms": -1},
                                  group_id=quiet)
    (stream,) = connector.create_message_streams({quiet: 1})[quiet]
    seen = []
    reader = threading.Thread(target=lambda: seen.extend(stream))
    reader.start()
    connector.shutdown()
    reader.join(30)
    assert not reader.is_alive() and seen == []
    connector.shutdown()  # twice is fine
    with pytest.raises(RuntimeError, match="shut down"):
        connector.create_message_streams({quiet: 1})


def test_queues_stay_bounded_when_nobody_reads(served):
    big = new_topic("big")
    with served.client() as client:
        for i in range(20):
            client.produce(big, 0, encode_message_set(values(f"b{i}", 50)))
    config = {**FAST, "queued.max.message.chunks": 2, "fetch.size": 512}
    with ConsumerConnector(served.unix, config, group_id=big) as connector:
        (stream,) = connector.create_message_streams({big: 1})[big]
        pause = threading.Event()
        for _ in range(200):  # until the fetcher has filled the queue
            if stream.room() == 0:
                break
            pause.wait(0.05)
        pause.wait(0.3)  # and it stays full: the fetcher waits for room
        assert stream.room() == 0 and stream._queue.qsize() == 2
        got = take(stream, 1000)
    assert [m.value for m in got] == [v for i in range(20) for v in values(f"b{i}", 50)]


def test_group_id_is_required_and_settings_are_checked():
    with pytest.raises(Exception, match="group.id: required"):
        ConsumerConnector("tcp://127.0.0.1:1")
    with pytest.raises(Exception, match="auto.offset.reset: must be one of earliest, latest"):
        ConsumerConnector("tcp://127.0.0.1:1", group_id="g", auto_offset_reset="none")
    with pytest.raises(Exception, match="topic filter"):
        Whitelist("(")


class DictOffsetStorage(OffsetStorage):
    """Offsets in a dict: the smallest storage the interface allows."""

    def __init__(self, stored):
        self.stored = dict(stored)
        self.lock = threading.Lock()

    def fetch(self, group, partitions):
        with self.lock:
            return {tp: self.stored.get((group, tp), -1) for tp in partitions}

    def commit(self, group, offsets):
        with self.lock:
            self.stored.update({(group, tp): o for tp, o in offsets.items()})


def test_stored_offsets_out_of_range_reset_and_storage_plugs_in(served):
    pair, g = new_topic("pair"), new_topic("g")
    with served.client() as client:
        client.create_topic(pair, 2)
        for p in range(2):
            client.produce(pair, p, encode_message_set(values(f"p{p}", 3)))
    storage = DictOffsetStorage({(g, (pair, 0)): 10**9, (g, (pair, 1)): 0})
    config = {**FAST, "num.consumer.fetchers": 2, "auto.offset.reset": "earliest"}
    with ConsumerConnector(served.unix, config, group_id=g, offset_storage=storage) as connector:
        (stream,) = connector.create_message_streams({pair: 1})[pair]
        got = take(stream, 6)
        assert sorted(m.value for m in got) == sorted(values("p0", 3) + values("p1", 3))
        assert [len(f.positions) for f in connector._fetchers] == [1, 1]
    # shutdown committed through the storage given, not the broker.
    ends = {m.partition: m.next_offset for m in got}
    assert storage.stored == {(g, (pair, p)): ends[p] for p in range(2)}
    with SimpleClient(served.unix) as client:
        assert [r.offset for r in client.offset_fetch(g, [(pair, 0), (pair, 1)])] == [-1, -1]


class RefusingOffsetStorage(DictOffsetStorage):
    def __init__(self, stored, refused):
        super().__init__(stored)
        self.refused = refused

    def fetch(self, group, partitions):
        partitions = list(partitions)
        if any(topic == self.refused for topic, _ in partitions):
            raise LookupError(f"no offsets for {self.refused}")
        return super().fetch(group, partitions)


def test_a_fetcher_that_cannot_go_on_makes_its_streams_raise(served):
    w = new_topic("w")
    refused = f"{w}.refused"
    with served.client() as client:
        client.produce(f"{w}.ok", 0, encode_message_set([b"ok"]))
    storage = RefusingOffsetStorage({}, refused)
    with ConsumerConnector(served.unix, FAST, group_id=w, offset_storage=storage) as connector:
        (stream,) = connector.create_message_streams_by_filter(Whitelist(re.escape(w) + r"\..*"))
        assert next(stream).value == b"ok"
        with served.client() as client:
            client.produce(refused, 0, encode_message_set([b"never"]))
        with pytest.raises(LookupError, match=re.escape(f"no offsets for {refused}")):
            next(stream)


def test_fetching_resumes_after_the_broker_restarts(broker):
    # Its own broker: it restarts it.
    with broker.client() as client:
        client.produce("r", 0, encode_message_set([b"before"]))
    config = {**FAST, "retry.backoff.ms": 50, "consumer.timeout.ms": 60000}
    with ConsumerConnector(broker.unix, config, group_id="restart") as connector:
        (stream,) = connector.create_message_streams({"r": 1})["r"]
        assert next(stream).value == b"before"
        broker.stop()
        broker.start()
        with broker.client() as client:
            client.produce("r", 0, encode_message_set([b"after"]))
        assert next(stream).value == b"after"


def test_retries_while_the_broker_is_down_back_off_exponentially(broker, caplog):
    # Its own broker: it stops it and starts it again.
    import time

    with broker.client() as client:
        client.produce("down", 0, encode_message_set([b"before"]))
    config = {**FAST, "retry.backoff.ms": 50, "retry.backoff.max.ms": 400,
              "consumer.timeout.ms": 60000}
    with ConsumerConnector(broker.unix, config, group_id="down") as connector:
        (stream,) = connector.create_message_streams({"down": 1})["down"]
        assert next(stream).value == b"before"
        with caplog.at_level("WARNING", logger="hostbroker.client.streams"):
            broker.stop()
            time.sleep(3)  # about 8 lines at a fixed 50 ms would be 60
            delays = [float(m) for m in re.findall(r"retrying in ([0-9.]+) s", caplog.text)]
            broker.start()
            with broker.client() as client:
                client.produce("down", 0, encode_message_set([b"after"]))
            assert next(stream).value == b"after"
    assert 3 <= len(delays) <= 12, delays
    assert delays[:4] == [0.05, 0.1, 0.2, 0.4], delays
    assert set(delays[4:]) <= {0.4}, delays


def test_the_interval_commit_stores_only_what_a_stream_moved_past(served):
    tick = new_topic("tick")
    with served.client() as client:
        client.produce(tick, 0, encode_message_set(values("t", 5)))
    config = {**FAST, "auto.commit.interval.ms": 50}
    connector = ConsumerConnector(served.unix, config, group_id=tick)
    try:
        (stream,) = connector.create_message_streams({tick: 1})[tick]
        got = take(stream, 3)  # the third is in our hands, not moved past
        pause = threading.Event()
        with served.client() as client:
            for _ in range(200):
                (stored,) = client.offset_fetch(tick, [(tick, 0)])
                if stored.offset != -1:
                    break
                pause.wait(0.05)
            pause.wait(0.2)  # later interval commits store the same
            (stored,) = client.offset_fetch(tick, [(tick, 0)])
        assert stored.offset == got[1].next_offset
        assert connector.positions() == {(tick, 0): got[2].next_offset}
    finally:
        connector.shutdown()
    with SimpleClient(served.unix) as client:
        assert client.offset_fetch(tick, [(tick, 0)])[0].offset == got[2].next_offset


def test_two_fetchers_feeding_one_stream_neither_fail_nor_starve(served):
    # Both fetchers feed the one stream, and every chunk taken wakes both: both
    # may fill its one free place at once, which must not stop either of them;
    # one partition reaching its end (long polls) must not starve the other.
    shared = new_topic("shared")
    with served.client() as client:
        client.create_topic(shared, 2)
        for p in range(2):
            for i in range(30):
                client.produce(shared, p, encode_message_set(values(f"p{p}-{i}", 2)))
    config = {**FAST, "num.consumer.fetchers": 2, "queued.max.message.chunks": 1,
              "fetch.size": 64}
    with ConsumerConnector(served.unix, config, group_id=shared) as connector:
        (stream,) = connector.create_message_streams({shared: 1})[shared]
        got = take(stream, 120)
    for p in range(2):
        mine = [m.value for m in got if m.partition == p]
        assert mine == [v for i in range(30) for v in values(f"p{p}-{i}", 2)]


def test_a_subscription_refused_at_the_start_leaves_no_connection_open(served):
    refused = new_topic("w") + ".refused"
    with served.client() as client:
        client.produce(refused, 0, encode_message_set([b"never"]))
    connector = ConsumerConnector(served.unix, FAST, group_id=refused,
                                  offset_storage=RefusingOffsetStorage({}, refused))
    with pytest.raises(LookupError, match=re.escape(f"no offsets for {refused}")):
        connector.create_message_streams({refused: 1})
    connector.shutdown()
    assert not any(f.consumer._connector.connected for f in connector._fetchers)
