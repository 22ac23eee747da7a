"""Every partition of a stream is read, fairly, whatever queued.max.message.chunks says:
streams over many partitions, idle partitions first, filters over several topics,
and the tools built on streams (``consume --group``, ``mirror``).

One broker serves the module (each test its own topics and groups, ``new_topic()``); the
test of the broker's fetch.max.bytes starts its own, and ``mirror`` its own destination.
"""

from __future__ import annotations

import collections
import re

import pytest

from hostbroker.client import ConsumerConnector, SimpleClient, Whitelist
from hostbroker.log.message import encode_message_set, iter_messages
from tests.integration.cli import hostbroker, lines
from tests.integration.wire_helpers import module_broker, new_topic

FAST = {"topic.refresh.interval.ms": 100, "consumer.timeout.ms": 15000,
        "fetch.wait.max.ms": 50, "auto.offset.reset": "earliest", "auto.commit.enable": False}

served = module_broker()


def fill(uri: str, topic: str, partitions, per_partition: int, *, create: int | None = None):
    """``per_partition`` messages ``topic-p-i`` in each of ``partitions``; the values by partition."""
    wanted = {}
    with SimpleClient(uri) as client:
        if create is not None:
            client.create_topic(topic, create)
        for p in partitions:
            wanted[p] = [f"{topic}-{p}-{i}".encode() for i in range(per_partition)]
            client.produce(topic, p, encode_message_set(wanted[p]))
    return wanted


def take_all(stream, n: int):
    return [next(stream) for _ in range(n)]


def by_partition(messages):
    out = collections.defaultdict(list)
    for m in messages:
        out[(m.topic, m.partition)].append(m.value)
    return out


@pytest.mark.parametrize("partitions, chunks", [(16, 1), (16, 4), (40, 1), (40, 4)])
def test_one_stream_reads_every_partition_exactly_once(served, partitions, chunks):
    topic = new_topic("wide")
    wanted = fill(served.unix, topic, range(partitions), 5, create=partitions)
    config = {**FAST, "queued.max.message.chunks": chunks, "consumer.timeout.ms": 3000}
    with ConsumerConnector(served.unix, config, group_id=topic) as connector:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        got = take_all(stream, 5 * partitions)
        # Nothing more, nothing twice: the stream then times out.
        with pytest.raises(Exception, match="consumer.timeout.ms"):
            next(stream)
    assert by_partition(got) == {(topic, p): v for p, v in wanted.items()}


@pytest.mark.parametrize("chunks", [1, 4])
def test_idle_partitions_first_do_not_hide_the_busy_ones(served, chunks):
    # 40 partitions, data only in the last three: the idle ones come first in
    # every order the consumer could pick.
    topic = new_topic("tail")
    wanted = fill(served.unix, topic, [37, 38, 39], 20, create=40)
    config = {**FAST, "queued.max.message.chunks": chunks, "fetch.size": 64}
    with ConsumerConnector(served.unix, config, group_id=topic) as connector:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        got = take_all(stream, 60)
        # Data arriving later in one more idle partition is found too.
        later = fill(served.unix, topic, [0], 3)
        got += take_all(stream, 3)
    assert by_partition(got) == {(topic, p): v for p, v in {**wanted, **later}.items()}


def test_a_busy_partition_does_not_starve_another(served):
    # Partition 0 holds far more than the rest; one entry or so per chunk. The
    # few messages of partition 7 must come within a bounded number of chunks,
    # not after partition 0 is drained.
    topic = new_topic("busy")
    fill(served.unix, topic, [0], 300, create=8)
    fill(served.unix, topic, [7], 3)
    config = {**FAST, "queued.max.message.chunks": 1, "fetch.size": 40}
    with ConsumerConnector(served.unix, config, group_id=topic) as connector:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        got = take_all(stream, 303)
    order = [m.partition for m in got]
    last_of_7 = max(i for i, p in enumerate(order) if p == 7)
    # Each round takes at most one chunk (here at most 2 entries) of each
    # partition: 3 rounds cover partition 7.
    assert order[:last_of_7].count(0) <= 3 * 2, order[:last_of_7 + 1]
    assert [m.value for m in got if m.partition == 0] == [f"{topic}-0-{i}".encode()
                                                          for i in range(300)]


def test_two_busy_partitions_advance_together(served):
    topic = new_topic("pair")
    fill(served.unix, topic, [0, 1], 200, create=2)
    config = {**FAST, "queued.max.message.chunks": 1, "fetch.size": 40}
    with ConsumerConnector(served.unix, config, group_id=topic) as connector:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        got = take_all(stream, 400)
    # Over any 20 messages in a row both partitions appear (chunks of at most
    # two entries alternate).
    order = [m.partition for m in got]
    for start in range(0, 360, 10):
        window = order[start:start + 20]
        assert 0 in window and 1 in window, (start, window)
    assert by_partition(got) == fill_values(topic, [0, 1], 200)


def test_partitions_left_out_of_a_full_answer_come_first_next(make_broker):
    # Its own broker, for a broker-wide setting. The broker's fetch.max.bytes holds
    # about 4 of the 16 partitions' sets per answer; the others get empty sets. Each
    # must still come within a few rounds.
    broker = make_broker(fetch_max_bytes=4096)
    wanted = fill(broker.unix, "cut", range(16), 100, create=16)
    config = {**FAST, "queued.max.message.chunks": 1, "fetch.size": 1024}
    with ConsumerConnector(broker.unix, config, group_id="cut") as connector:
        (stream,) = connector.create_message_streams({"cut": 1})["cut"]
        got = take_all(stream, 1600)
    assert by_partition(got) == {("cut", p): v for p, v in wanted.items()}
    # A chunk holds ~1 KiB (~70 messages): all 16 partitions start within the
    # first 16 chunks' worth, each after at most 4 rounds of 4.
    first_seen = {}
    for i, m in enumerate(got):
        first_seen.setdefault(m.partition, i)
    assert max(first_seen.values()) < 16 * 80, sorted(first_seen.values())


def test_an_unread_stream_over_many_partitions_stays_bounded(served):
    # Nobody reads: the fetcher stops once the queue is full; one answer may add a
    # chunk per partition, so at most chunks - 1 + partitions, never more.
    import threading

    topic = new_topic("held")
    fill(served.unix, topic, range(16), 200, create=16)
    config = {**FAST, "queued.max.message.chunks": 2, "fetch.size": 256}
    with ConsumerConnector(served.unix, config, group_id=topic) as connector:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        pause = threading.Event()
        for _ in range(200):
            if stream.room() <= 0:
                break
            pause.wait(0.05)
        pause.wait(0.5)  # and it stays there: no fetch while the queue is full
        held = stream._queue.qsize()
        assert 2 <= held <= 2 - 1 + 16
        pause.wait(0.3)
        assert stream._queue.qsize() == held
        got = take_all(stream, 16 * 200)
    assert by_partition(got) == fill_values(topic, range(16), 200)


def fill_values(topic, partitions, n):
    return {(topic, p): [f"{topic}-{p}-{i}".encode() for i in range(n)] for p in partitions}


@pytest.mark.parametrize("chunks", [1, 4])
def test_a_filter_stream_reads_every_topic(served, chunks):
    prefix = new_topic("f")  # the shared broker's other topics do not match the filter
    wanted = {}
    for t in range(6):
        topic = f"{prefix}.{t}"
        for p, values in fill(served.unix, topic, range(3), 4, create=3).items():
            wanted[(topic, p)] = values
    config = {**FAST, "queued.max.message.chunks": chunks}
    with ConsumerConnector(served.unix, config, group_id=prefix) as connector:
        (stream,) = connector.create_message_streams_by_filter(
            Whitelist(re.escape(prefix) + r"\..*"))
        got = take_all(stream, 6 * 3 * 4)
    assert by_partition(got) == wanted


def test_consume_group_prints_every_partition(served):
    topic = new_topic("t8")
    wanted = fill(served.unix, topic, range(8), 10, create=8)
    args = ("consume", "--bootstrap", served.tcp, "--topic", topic, "--group", topic)
    first = hostbroker(*args, "--from-beginning", "--max-messages", "80", "--timeout-ms", "20000")
    assert first.returncode == 0, first.stderr
    assert sorted(lines(first)) == sorted(v.decode() for vs in wanted.values() for v in vs)
    again = hostbroker(*args, "--timeout-ms", "300")
    assert again.returncode == 0 and lines(again) == []


def test_mirror_copies_every_topic_of_one_stream(served, make_broker):
    # The source is the shared broker (the filter matches only this test's topics);
    # the destination is a broker of its own, whose topics the mirror makes.
    source = served
    destination = make_broker()
    prefix = new_topic("m")
    wanted = {}
    for t in range(5):
        wanted[f"{prefix}.{t}"] = fill(source.unix, f"{prefix}.{t}", range(2), 6, create=2)
    result = hostbroker("mirror", "--from", source.unix, "--to", destination.unix,
                        "--topics", re.escape(prefix) + r"\..*", "--max-messages", "60",
                        "--timeout-ms", "20000",
                        "--consumer-property", "queued.max.message.chunks=1")
    assert result.returncode == 0, result.stderr
    with SimpleClient(destination.unix) as client:
        for topic, partitions in wanted.items():
            for p, values in partitions.items():
                part = client.fetch(topic, p, 0, 1 << 20)
                assert [m.payload for m in iter_messages(part.message_set, 0)] == values
