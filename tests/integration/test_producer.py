"""The Producer against a real ``hostbroker serve`` (docs/producer.md).

What the producer reports (offsets, partitions, counters, callbacks) is
checked against the log as a plain fetch reads it back. Most tests share one
broker (``num.partitions=3``); the restart, static broker list and full-queue
tests bring their own brokers or a socket that never answers.
"""

from __future__ import annotations

import socket
import threading
import time
import zlib

import pytest

from hostbroker.client import (
    ConsumerConnector,
    DefaultPartitioner,
    DeliveryError,
    Producer,
    ProducerCallbacks,
    ProducerError,
    QueueFullError,
    RecordMetadata,
    SimpleClient,
    SimpleConsumer,
)
from hostbroker.errors import ErrorCode
from hostbroker.log.message import CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, iter_messages
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    created_topic,
    log_end,
    module_broker,
    new_topic,
    read_log,
    uri,
    wait_for,
)

served = module_broker(num_partitions=3, message_max_bytes=20000)


def messages(client: SimpleClient, topic: str, partition: int):
    """``[(offset, payload, codec)]`` of the whole partition."""
    end = log_end(client, topic, partition)
    data = read_log(client, topic, partition, 0, end, max_bytes=1 << 20)
    return [(m.offset, m.payload, m.codec) for m in iter_messages(data, 0)]


def all_payloads(client: SimpleClient, topic: str, partitions: int) -> list[bytes]:
    return [p for part in range(partitions) for _, p, _ in messages(client, topic, part)]


class Trace(ProducerCallbacks):
    """Every callback, in order, and the most requests seen unanswered at once."""

    def __init__(self):
        self.enqueued = 0
        self.sent = []
        self.acknowledged = []
        self.failed = []
        self.unanswered = 0
        self.most_unanswered = 0

    def on_enqueued(self, topic, partition, value):
        self.enqueued += 1

    def on_sent(self, request):
        self.sent.append(request)
        self.unanswered += 1
        self.most_unanswered = max(self.most_unanswered, self.unanswered)

    def on_acknowledged(self, request, results):
        self.unanswered -= 1
        self.acknowledged.append((request, results))

    def on_failed(self, request, error):
        self.failed.append((request, error))


# -- sync ----------------------------------------------------------------------


def test_sync_offsets_are_where_the_log_has_the_messages(uri):
    topic = created_topic(uri, 1)
    with Producer(uri) as producer:
        first = producer.send(topic, b"first")
        many = producer.send_many(topic, [b"a", "béta", b""])
    with Producer(uri, request_required_acks=-1) as producer:
        flushed = producer.send(topic, b"flushed")
    with Producer(uri, request_required_acks=0) as producer:
        assert producer.send(topic, b"unanswered") is None
        assert producer.send_many(topic, [b"x"]) is None
    with SimpleClient(uri) as client:
        # acks=0 has no answer: wait for its two entries (4 + 6 + 10 and
        # 4 + 6 + 1 bytes) after the 17-byte "flushed" entry.
        wait_for(lambda: log_end(client, topic, 0) == flushed.offset + 17 + 20 + 11)
        log = messages(client, topic, 0)
    assert [RecordMetadata(topic, 0, o) for o, _, _ in log[:5]] == [first, *many, flushed]
    assert [p for _, p, _ in log] == [b"first", b"a", "béta".encode(), b"", b"flushed",
                                      b"unanswered", b"x"]


def test_sync_keys_choose_crc32_modulo_partitions(served):
    topic = created_topic(served.unix, 4)
    keys = [f"user-{i}" for i in range(40)]
    with Producer(served.unix) as producer:
        placed = [producer.send(topic, f"value of {k}", key=k) for k in keys]
    assert [md.partition for md in placed] == [zlib.crc32(k.encode()) % 4 for k in keys]
    assert len({md.partition for md in placed}) == 4
    with SimpleClient(served.unix) as client:
        for md, key in zip(placed, keys):
            assert (md.offset, f"value of {key}".encode(), CODEC_NONE) in messages(
                client, topic, md.partition)


def test_unknown_topic_is_created_by_its_first_message_then_learned(served):
    topic = new_topic()
    keys = [f"k{i}" for i in range(30)]
    with Producer(served.tcp) as producer:
        first = producer.send(topic, b"creates the topic", key="k-first")
        placed = [producer.send(topic, b"v", key=k) for k in keys]
    assert first == RecordMetadata(topic, 0, 0)  # partition 0 of the first broker
    # then the broker's num.partitions (3) is known and keys spread by hash
    assert [md.partition for md in placed] == [zlib.crc32(k.encode()) % 3 for k in keys]


def test_broker_refusal_is_raised_at_once_and_not_retried(served):
    topic = created_topic(served.unix, 1, {"max.message.bytes": "1000"})
    trace = Trace()
    with Producer(served.unix, callbacks=trace, retry_backoff_ms=10) as producer:
        with pytest.raises(DeliveryError) as info:
            producer.send(topic, b"x" * 2000)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert info.value.failures[0].values == (b"x" * 2000,)
        assert producer.stats["retries"] == 0 and producer.stats["failed"] == 1
        assert producer.send(topic, b"small").offset == 0  # the producer goes on
    (request, error), = trace.failed
    assert request.partitions == ((topic, 0, 1, 2010),)
    assert error.failures[0].error.code == ErrorCode.MESSAGE_TOO_LARGE


def test_requests_split_at_max_request_bytes(served):
    topic = created_topic(served.unix, 1)
    values = [b"%04d" % i + b"." * 96 for i in range(50)]  # 110-byte entries
    with Producer(served.unix, message_max_bytes=1000, max_request_bytes=1500) as producer:
        placed = producer.send_many(topic, values)
        assert producer.stats["requests"] > 3
    assert [md.offset for md in placed] == list(range(0, 50 * 110, 110))
    with SimpleClient(served.unix) as client:
        assert [p for _, p, _ in messages(client, topic, 0)] == values


# -- async ---------------------------------------------------------------------


@pytest.mark.parametrize("codec, expected", [("gzip", CODEC_GZIP), ("snappy", CODEC_SNAPPY)])
def test_async_compressed_batches_read_back(served, codec, expected):
    topic = created_topic(served.unix, 1)
    values = [b"event %d " % i * 4 for i in range(1000)]
    with Producer(served.unix, producer_type="async", compression_codec=codec,
                  batch_size=250) as producer:
        for value in values[:500]:
            producer.send(topic, value)
        producer.send_many(topic, values[500:])
    with SimpleClient(served.unix) as client:
        log = messages(client, topic, 0)
    assert [p for _, p, _ in log] == values
    assert {c for _, _, c in log} == {expected}
    wrappers = sorted({o for o, _, _ in log})
    assert 4 <= len(wrappers) <= 8  # one wrapper per batch of about 250


def test_async_callbacks_stages_and_in_flight_bound(served):
    topic = created_topic(served.tcp, 3)
    trace = Trace()
    values = [b"%05d" % i for i in range(600)]
    # Small requests (about 90 messages) so that there are many to pipeline.
    with Producer(served.tcp, producer_type="async", batch_size=20, queue_time=10000,
                  message_max_bytes=1000, max_request_bytes=1500,
                  max_in_flight_requests_per_connection=2, callbacks=trace) as producer:
        for i in range(0, 600, 60):
            producer.send_many(topic, values[i:i + 60], key=str(i))
        producer.flush()
        stats = producer.stats
    assert trace.enqueued == 600 and trace.failed == []
    assert stats["enqueued"] == stats["sent"] == stats["acknowledged"] == 600
    assert stats["requests"] == len(trace.sent) == len(trace.acknowledged) >= 6
    assert trace.most_unanswered <= 2
    assert sum(r.message_count for r in trace.sent) == 600
    for request, results in trace.acknowledged:
        assert request.acked_at >= request.sent_at and request.broker == served.tcp
        assert all(r.error_code == ErrorCode.NONE for r in results)
        assert {(t, p) for t, p, _, _ in request.partitions} == {
            (r.topic, r.partition) for r in results}
    with SimpleClient(served.tcp) as client:
        assert sorted(all_payloads(client, topic, 3)) == values


def test_async_keyless_batches_go_to_one_partition_each(served):
    topic = created_topic(served.unix, 3)
    with Producer(served.unix, producer_type="async", batch_size=100,
                  queue_time=60000) as producer:
        for i in range(3000):
            producer.send(topic, b"%d" % i)
        producer.flush()
    with SimpleClient(served.unix) as client:
        per_partition = [len(messages(client, topic, p)) for p in range(3)]
    assert sum(per_partition) == 3000
    assert all(n % 100 == 0 for n in per_partition)  # whole batches
    assert sum(1 for n in per_partition if n) >= 2  # a new random choice per batch (30)


def test_async_queue_gathers_while_every_slot_waits_for_an_answer(served):
    """While the one request allowed in flight is unanswered, the queue fills;
    the next take is every whole batch queued, in one request, not a few
    batches per request (each request then waited for an answer of its own)."""
    topic = created_topic(served.tcp, 3)
    queued = threading.Event()

    class HoldFirst(Trace):
        def on_sent(self, request):
            super().on_sent(request)
            if len(self.sent) == 1:  # the first request is out: let the rest queue
                queued.wait(30)

    trace = HoldFirst()
    values = [b"%05d" % i for i in range(2000)]
    with Producer(served.tcp, producer_type="async", batch_size=10, queue_time=60000,
                  max_in_flight_requests_per_connection=1, request_required_acks=-1,
                  callbacks=trace) as producer:
        for value in values:
            producer.send(topic, value)
        queued.set()
        producer.flush()
        stats = producer.stats
    assert trace.failed == [] and stats["acknowledged"] == 2000
    assert trace.most_unanswered == 1
    # The first request took what was queued when the thread woke, the second
    # everything else (before: 8 batches, 80 messages, per request: 25 and more).
    assert stats["requests"] <= 3, [r.message_count for r in trace.sent]
    with SimpleClient(served.tcp) as client:
        got = [messages(client, topic, p) for p in range(3)]
    assert sorted(p for part in got for _, p, _ in part) == values
    for part in got:  # each partition in the order sent, in whole batches
        assert [p for _, p, _ in part] == sorted(p for _, p, _ in part)
        assert len(part) % 10 == 0


# -- a queue that cannot drain -------------------------------------------------------


@pytest.fixture
def silent_uri():
    """A listening TCP socket that accepts (in the kernel's backlog) and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"


def silent_producer(uri_, request_timeout_ms=1500, **options):
    return Producer(uri_, producer_type="async", batch_size=10, queue_size=10,
                    queue_time=60000, request_timeout_ms=request_timeout_ms,
                    message_send_max_retries=0, **options)


def fill(producer, limit=100):
    """Send until the queue refuses; return how many it took, checking its bound throughout."""
    for sent in range(limit):
        try:
            producer.send("t", b"m%d" % sent)
        except QueueFullError:
            return sent
        finally:
            assert producer.stats["queued"] <= 10
    raise AssertionError(f"the queue took {limit} messages")


def test_full_queue_raises_at_once(silent_uri):
    producer = silent_producer(silent_uri, queue_enqueue_timeout_ms=0)
    # One batch of 10 went to the sending thread (stuck waiting for metadata), 10 wait.
    taken = fill(producer)
    assert 10 <= taken <= 20 and producer.stats["queued"] == 10
    with pytest.raises(QueueFullError, match="queue.size 10"):
        producer.send_many("t", [b"more"])
    # Nothing answers: the metadata request times out, every message fails, none is lost.
    with pytest.raises(DeliveryError) as info:
        producer.close()
    assert info.value.message_count == taken
    assert isinstance(info.value.failures[0].error, OSError)


def test_full_queue_waits_then_raises(silent_uri):
    # The first batch's metadata request must not time out (and make room) meanwhile.
    producer = silent_producer(silent_uri, request_timeout_ms=3000,
                               queue_enqueue_timeout_ms=300)
    taken = fill(producer)
    assert 10 <= taken <= 20
    started = time.monotonic()
    with pytest.raises(QueueFullError, match="queue.enqueue.timeout.ms 300"):
        producer.send("t", b"one more")
    assert time.monotonic() - started >= 0.3  # it waited the configured time first
    with pytest.raises(DeliveryError):
        producer.close()


def test_full_queue_blocks_until_there_is_room(silent_uri):
    trace = Trace()
    # Room comes only when the first batch's metadata request times out: long
    # enough that a loaded machine does not get there before the checks below.
    producer = silent_producer(silent_uri, request_timeout_ms=3000, callbacks=trace)
    for i in range(10):
        producer.send("t", b"first batch %d" % i)
    wait_for(lambda: producer.stats["queued"] == 0)  # the thread took the batch
    for i in range(10):
        producer.send("t", b"queued %d" % i)
    assert producer.stats["queued"] == 10
    blocked = threading.Thread(target=producer.send, args=("t", b"the eleventh"))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive() and producer.stats["queued"] == 10
    # The first batch fails when its metadata request times out; the thread
    # takes the next ten, which makes room.
    blocked.join(30)
    assert not blocked.is_alive()
    with pytest.raises(DeliveryError) as info:
        producer.close()
    assert info.value.message_count == 21 and len(trace.failed) >= 2
    assert producer.stats["failed"] == 21 and producer.stats["acknowledged"] == 0


def bytes_producer(uri_, batch_size=10, queue_size=10, **options):
    """queue.bytes 1000 (message.max.bytes 1000 with it), batches of 10 messages: three
    values of 300 bytes fill the bytes, not the batch."""
    return Producer(uri_, producer_type="async", batch_size=batch_size, queue_size=queue_size,
                    queue_time=60000, message_max_bytes=1000, max_request_bytes=1500,
                    queue_bytes=1000, message_send_max_retries=0, **options)


def test_queue_bytes_full_raises_at_once_naming_it(silent_uri):
    # A first batch keeps the thread waiting on a metadata request that is never
    # answered, so that it cannot make room while the checks below run.
    producer = bytes_producer(silent_uri, queue_enqueue_timeout_ms=0, request_timeout_ms=3000)
    for i in range(10):
        producer.send("t", b"m%d" % i)
    wait_for(lambda: producer.stats["queued"] == 0)
    for i in range(3):
        producer.send("t", b"%03d" % i + b"v" * 297)
    with pytest.raises(QueueFullError,
                       match=r"900 of queue.bytes 1000 bytes waiting, 301 more sent"):
        producer.send("t", b"k" * 300, key=b"k")  # a key counts too
    with pytest.raises(QueueFullError, match="queue.bytes 1000"):
        producer.send_many("t", [b"v" * 300])
    assert producer.stats["queued"] == 3  # refused ones were not queued
    # What was accepted is outstanding (failed by the thread once its request
    # times out), not lost.
    with pytest.raises(TimeoutError, match="13 messages still outstanding"):
        producer.close(timeout=0.1)


def test_queue_bytes_blocks_until_the_thread_takes(silent_uri):
    # The thread's first take waits on a metadata request that is never
    # answered: the queue cannot drain until it times out.
    producer = bytes_producer(silent_uri, request_timeout_ms=3000)
    producer.send("t", b"the first message")
    producer.send("t", b"v" * 994)  # no room: the thread takes the first at once
    wait_for(lambda: producer.stats["queued"] == 1)
    blocked = threading.Thread(target=producer.send, args=("t", b"one byte too many"))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive() and producer.stats["queued"] == 1
    # The metadata request times out and fails the first message; the thread
    # takes the 994 bytes, which frees them, and the blocked send goes in.
    blocked.join(30)
    assert not blocked.is_alive()
    with pytest.raises(TimeoutError, match="2 messages still outstanding"):
        producer.close(timeout=0.1)


def test_send_many_past_queue_bytes_is_cut_and_delivered(served):
    topic = new_topic("qbytes")
    values = [b"%03d" % i + b"v" * 297 for i in range(25)]
    trace = Trace()
    with bytes_producer(served.tcp, batch_size=50, queue_size=50, callbacks=trace) as producer:
        started = time.monotonic()
        producer.send_many(topic, values)  # 7500 bytes through a queue of 1000
        producer.send_many(topic, values[:5], key=b"key")
        producer.flush()
        # Each piece that found no room was taken at once, not after queue.time.
        assert time.monotonic() - started < 30
    assert trace.failed == [] and producer.stats["acknowledged"] == 30
    # Requests of at most max.request.bytes, each carrying at most queue.bytes of values.
    assert len(trace.sent) >= 8
    with SimpleClient(served.unix) as client:
        payloads = all_payloads(client, topic, 3)
    assert sorted(payloads) == sorted(values + values[:5])


# -- brokers that go away ----------------------------------------------------------------


@pytest.mark.parametrize("acks, crash", [(1, False), (-1, True)], ids=["acks1-stop", "acks-1-kill"])
def test_retries_across_a_broker_restart_lose_nothing(make_broker, acks, crash):
    broker = make_broker()
    topic = created_topic(broker.unix, 1)
    values = [b"message %05d" % i for i in range(2000)]
    broker_down = threading.Event()
    producer = Producer(broker.unix, producer_type="async", request_required_acks=acks,
                        batch_size=50, queue_size=500, queue_time=5,
                        message_send_max_retries=1000, retry_backoff_ms=50,
                        request_timeout_ms=5000)

    def send_all():
        for value in values[:1000]:
            producer.send(topic, value)
        broker_down.wait(60)
        for value in values[1000:]:  # while the broker is down: queued, retried, blocked
            producer.send(topic, value)

    sender = threading.Thread(target=send_all)
    sender.start()
    assert wait_for(lambda: producer.stats["acknowledged"] >= 500, timeout=30)
    if crash:
        broker.kill_tree()
    else:
        broker.stop()
    broker_down.set()
    wait_for(lambda: producer.stats["retries"] > 0, timeout=10)
    broker.start()
    sender.join(60)
    assert not sender.is_alive()
    producer.flush(60)  # raises DeliveryError if any message failed
    stats = producer.stats
    producer.close()
    assert stats["acknowledged"] == stats["enqueued"] == 2000 and stats["failed"] == 0
    assert stats["retries"] > 0
    with SimpleClient(broker.unix) as client:
        log = [p for _, p, _ in messages(client, topic, 0)]
    assert set(log) == set(values)  # at least once: a retried batch may be there twice
    assert log[:1000] == values[:1000] or len(log) > 2000


def test_static_broker_list_unites_the_brokers_partitions(make_broker, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = make_broker(root=tmp_path / "a", broker_id=1)
    b = make_broker(root=tmp_path / "b", broker_id=2)
    topic = new_topic()
    for broker, partitions in ((a, 2), (b, 1)):
        with SimpleClient(broker.unix) as client:
            client.create_topic(topic, partitions)
    keys = [f"key-{i}" for i in range(60)]
    # broker id, then partition: (1, 0), (1, 1), (2, 0); listed in the other order
    where = [(a, 0), (a, 1), (b, 0)]
    with Producer([b.tcp, a.unix]) as producer:
        placed = [producer.send(topic, k, key=k) for k in keys]
    for key, md in zip(keys, placed):
        broker, partition = where[zlib.crc32(key.encode()) % 3]
        assert md.partition == partition
        with SimpleClient(broker.unix) as client:
            assert (md.offset, key.encode(), CODEC_NONE) in messages(client, topic, partition)
    counts = {}
    for broker, partition in where:
        with SimpleClient(broker.unix) as client:
            counts[(broker.root, partition)] = len(messages(client, topic, partition))
    assert sum(counts.values()) == 60 and all(counts.values())


def test_close_with_a_timeout_fails_what_is_left(silent_uri):
    trace = Trace()
    producer = Producer(silent_uri, producer_type="async", batch_size=5, queue_size=50,
                        queue_time=60000, request_timeout_ms=2000, callbacks=trace)
    producer.send_many("t", [b"m%d" % i for i in range(12)])
    with pytest.raises(TimeoutError, match="12 messages still outstanding"):
        producer.close(timeout=0.2)
    with pytest.raises(Exception, match="closed"):
        producer.send("t", b"late")
    # The sending thread gives up on its own and reports every message.
    assert wait_for(lambda: sum(len(e.failures[0].values) for _, e in trace.failed) == 12,
                    timeout=30)
    assert producer.stats["failed"] == 12
    producer.close()  # idempotent


def test_async_acks_zero_is_done_once_written(served):
    topic = created_topic(served.unix, 1)
    trace = Trace()
    with Producer(served.unix, producer_type="async", request_required_acks=0,
                  batch_size=50, callbacks=trace) as producer:
        producer.send_many(topic, [b"%03d" % i for i in range(200)])
        producer.flush()
        stats = producer.stats
    assert stats["sent"] == 200 and stats["acknowledged"] == 0 and stats["failed"] == 0
    assert trace.acknowledged == [] and all(r.acks == 0 for r in trace.sent)
    with SimpleClient(served.unix) as client:
        assert wait_for(lambda: log_end(client, topic, 0) == 200 * 13)


def test_unknown_topic_without_auto_create_fails_after_its_retries(make_broker):
    broker = make_broker(auto_create_topics_enable="false")
    with Producer(broker.unix, message_send_max_retries=2, retry_backoff_ms=10) as producer:
        with pytest.raises(DeliveryError) as info:
            producer.send("never-created", b"x", key="k")
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert producer.stats["retries"] == 2 and producer.stats["requests"] == 3


def test_partition_the_topic_does_not_have_fails_without_a_request(served):
    topic = created_topic(served.unix, 2)
    with Producer(served.unix) as producer:
        assert producer.send(topic, b"ok", partition=1).partition == 1
        with pytest.raises(DeliveryError) as info:
            producer.send(topic, b"nowhere", partition=2)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert producer.stats["requests"] == 1 and producer.stats["retries"] == 0


def test_error_frame_fails_its_request_and_the_connection_is_reopened(make_broker):
    broker = make_broker(socket_request_max_bytes=65536)
    topic = created_topic(broker.unix, 1)
    with Producer(broker.unix, message_send_max_retries=5) as producer:
        with pytest.raises(DeliveryError) as info:
            producer.send_many(topic, [b"x" * 1000] * 100)  # one request of ~100 KB
        assert info.value.code == ErrorCode.REQUEST_TOO_LARGE
        assert producer.stats["retries"] == 0
        assert producer.send(topic, b"after").offset == 0


def test_sync_call_broken_by_a_callback_leaves_nothing_for_the_next(served):
    topic = created_topic(served.unix, 1)

    class Fails(ProducerCallbacks):
        armed = True

        def on_sent(self, request):
            if self.armed:
                self.armed = False
                raise RuntimeError("tracing failed")

    with Producer(served.unix, callbacks=Fails()) as producer:
        with pytest.raises(RuntimeError, match="tracing failed"):
            producer.send(topic, b"first")
        second = producer.send_many(topic, [b"second", b"third"])
    # "first" was written before the callback raised; whether the broker
    # appended it before the connection closed is its race. Either way its
    # answer is not taken for the next call's: the offsets are the log's.
    # It may land even after the next call was answered: the log is read once
    # its end has held still for a while.
    with SimpleClient(served.unix) as client:
        ends = [log_end(client, topic, 0)]

        def settled() -> bool:
            time.sleep(0.3)
            ends.append(log_end(client, topic, 0))
            return ends[-1] == ends[-2]

        assert wait_for(settled), ends
        logged = {payload: offset for offset, payload, _ in messages(client, topic, 0)}
    assert set(logged) <= {b"first", b"second", b"third"}
    assert second == [RecordMetadata(topic, 0, logged[b"second"]),
                      RecordMetadata(topic, 0, logged[b"third"])]


def test_async_callback_that_raises_stops_the_producer(served):
    topic = created_topic(served.unix, 1)

    class Fails(ProducerCallbacks):
        def on_acknowledged(self, request, results):
            raise RuntimeError("monitoring failed")

    producer = Producer(served.unix, producer_type="async", batch_size=10, callbacks=Fails())
    producer.send_many(topic, [b"m"] * 30)
    with pytest.raises(ProducerError, match="sending thread stopped") as info:
        producer.flush(30)
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(ProducerError, match="sending thread stopped"):
        producer.send(topic, b"later")
    assert producer.stats["acknowledged"] + producer.stats["failed"] == 30
    with pytest.raises(ProducerError):
        producer.close()


def test_close_that_times_out_still_closes_the_connections(served):
    topic = created_topic(served.unix, 1)
    gate = threading.Event()
    gate.set()

    class Gated(DefaultPartitioner):
        def partition(self, topic_, key, num_partitions):
            gate.wait()
            return super().partition(topic_, key, num_partitions)

    trace = Trace()
    producer = Producer(served.unix, producer_type="async", batch_size=1,
                        partitioner=Gated(), callbacks=trace)
    producer.send(topic, b"first")
    producer.flush(30)  # the connections are open now
    gate.clear()
    producer.send(topic, b"held")  # the sending thread waits in the partitioner
    with pytest.raises(TimeoutError, match="1 message still outstanding"):
        producer.close(timeout=0.2)
    gate.set()
    producer._thread.join(30)
    assert not producer._thread.is_alive()
    assert [list(e.failures[0].values) for _, e in trace.failed] == [[b"held"]]
    dispatcher = producer._dispatcher
    assert dispatcher.connections and not any(
        c.connected for c in dispatcher.connections.values())
    assert not any(c.connection.connected for c in dispatcher.cluster._clients.values())


def test_async_callback_that_flushes_stops_the_producer_instead_of_hanging(served):
    topic = created_topic(served.unix, 1)

    class Flushes(ProducerCallbacks):
        def on_sent(self, request):
            producer.flush()  # would wait for the very thread running it

    producer = Producer(served.unix, producer_type="async", batch_size=1, callbacks=Flushes())
    producer.send(topic, b"m")
    with pytest.raises(DeliveryError, match="1 message not delivered"):
        producer.flush(20)
    with pytest.raises(ProducerError, match="sending thread stopped") as info:
        producer.close()
    assert "would wait for that thread" in str(info.value.__cause__)


@pytest.mark.parametrize("producer_type", ["sync", "async"])
def test_compressed_batch_of_large_messages_reads_back_with_default_consumers(broker,
                                                                               producer_type):
    # 200 messages of 100 KiB that gzip to almost nothing: every wrapper must
    # still inflate within what a consumer with default settings accepts.
    topic = created_topic(broker.unix, 1)
    values = [i.to_bytes(4, "big") + bytes(100 * 1024 - 4) for i in range(200)]
    with Producer(broker.unix, producer_type=producer_type,
                  compression_codec="gzip") as producer:
        producer.send_many(topic, values)
        producer.flush(60)
        assert producer.stats["acknowledged"] == 200
    with SimpleClient(broker.unix) as client:
        end = log_end(client, topic, 0)
        logged = read_log(client, topic, 0, 0, end, max_bytes=1 << 20)
    assert end < len(values) * 1024  # it did compress
    inflated = list(iter_messages(logged, 0, max_inflated_bytes=1_000_000))
    assert [(m.payload, m.codec) for m in inflated] == [(v, CODEC_GZIP) for v in values]
    assert len({m.offset for m in inflated}) == 23  # wrappers of 9 messages (and one of 2)
    with SimpleConsumer(broker.unix) as consumer:
        got = [v for _, _, v in consumer.messages(topic, 0, 0, stop_at_end=True)]
    assert got == values
    config = {"auto.offset.reset": "earliest", "consumer.timeout.ms": 15000,
              "auto.commit.enable": False}
    with ConsumerConnector(broker.unix, config, group_id="large") as connector:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        assert [next(stream).value for _ in range(200)] == values
