"""PRODUCE answers a writer sends straight to the processor
(``produce.direct.answers``): a one-partition acks=1 PRODUCE is answered by
its writer once the data is in the log, every other one by the handler; in
the connection's order either way, and exactly once when the writer dies.

The two tests on a default broker that neither stop nor kill anything share one
module broker (``served``), with topics of their own and the writers' answer count
read relative to the test's start; the who-answers cases (settings of their own)
and the writer-killing test keep their own broker."""

import os
import signal
import threading
import time

import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.protocol import api
from tests.integration.wire_helpers import RawSocket, module_broker, new_topic

# one default broker for the tests that share one (see the module docstring)
served = module_broker()


def _direct_answers(broker) -> int:
    """PRODUCE answers the writers sent to processors themselves."""
    return broker.counter("writer", "requests")


@pytest.mark.parametrize("direct", [True, False])
def test_who_answers_a_produce(make_broker, direct):
    # its own broker: each case has settings no other test uses
    # through the handler (PUTs past it: test_puts.py)
    broker = make_broker(**{"produce.direct.answers": str(direct).lower(),
                            "processor.direct.produce": "false"})
    data = encode_message_set([b"d" * 30] * 4)
    with broker.client(broker.tcp) as c:
        c.create_topic("two", 2)
        answers = [c.produce("two", 0, data) for _ in range(25)]  # acks=1, one partition
        assert [(a.base_offset, a.log_end_offset) for a in answers] == [
            (i * len(data), (i + 1) * len(data)) for i in range(25)]
        assert _direct_answers(broker) == (25 if direct else 0)
        # two partitions, or acks=-1, or acks=0: the handler answers
        both = c.request(api.ProduceRequest(1, 10000, (
            api.ProducePartition("two", 0, data), api.ProducePartition("two", 1, data))))
        assert [(p.partition, p.error_code, p.base_offset) for p in both.partitions] == [
            (0, 0, 25 * len(data)), (1, 0, 0)]
        synced = c.request(api.ProduceRequest(-1, 10000, (api.ProducePartition("two", 1, data),)))
        assert synced.partitions[0].base_offset == len(data)
        assert c.request(api.ProduceRequest(0, 10000, (api.ProducePartition("two", 1, data),))) \
            is None
        assert _direct_answers(broker) == (25 if direct else 0)
        # one the handler cannot route (no such partition) it answers itself
        gone = c.request(api.ProduceRequest(1, 10000, (api.ProducePartition("two", 7, data),)))
        assert gone.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _direct_answers(broker) == (25 if direct else 0)


def test_an_answered_produce_is_in_the_log(served):
    """The writer answers after it published the log end: a fetch right after
    the answer, on another connection, finds the data."""
    broker = served
    seen = new_topic("seen")
    answered = _direct_answers(broker)  # the shared broker's writers answered these before
    with broker.client(broker.unix) as producer, broker.client(broker.tcp) as reader:
        producer.create_topic(seen, 1)
        for i in range(200):
            data = encode_message_set([str(i).encode()])
            answer = producer.produce(seen, 0, data)
            fetched = reader.fetch(seen, 0, answer.base_offset, 1024)
            assert bytes(fetched.message_set) == data, i
        assert _direct_answers(broker) - answered == 200


def test_pipelined_answers_from_writer_handler_and_processor_keep_their_order(served):
    broker = served
    mix = new_topic("mix")
    with broker.client() as c:
        c.create_topic(mix, 2)
    one = encode_message_set([b"m"])
    kinds = []
    frames = []
    for i in range(150):
        kind = ("direct", "two", "metadata", "fetch", "quiet")[i % 5]
        if kind == "direct":
            req = api.ProduceRequest(1, 10000, (api.ProducePartition(mix, 0, one),))
        elif kind == "two":
            req = api.ProduceRequest(1, 10000, (api.ProducePartition(mix, 0, one),
                                                api.ProducePartition(mix, 1, one)))
        elif kind == "metadata":
            req = api.MetadataRequest((mix,))
        elif kind == "fetch":
            req = api.FetchRequest(0, 0, (api.FetchPartition(mix, 0, 0, 1 << 20),))
        else:
            req = api.ProduceRequest(0, 10000, (api.ProducePartition(mix, 1, one),))
        frames.append(api.encode_request(req, i))
        kinds.append(kind)
    with RawSocket(broker.tcp) as raw:
        raw.send(b"".join(frames))
        ends = []
        for i, kind in enumerate(kinds):
            if kind == "quiet":
                continue  # acks=0: no answer
            key = {"direct": api.ApiKey.PRODUCE, "two": api.ApiKey.PRODUCE,
                   "metadata": api.ApiKey.METADATA, "fetch": api.ApiKey.FETCH}[kind]
            corr, answer = raw.read_response(key)
            assert corr == i
            if kind in ("direct", "two"):
                assert all(p.error_code == 0 for p in answer.partitions)
                ends.append(answer.partitions[0].log_end_offset)
        # partition 0 took one entry per produce, in the order sent
        entry = len(one)
        assert ends == [entry * (n + 1) for n in range(len(ends))]
    with broker.client() as c:
        assert len(list(iter_messages(c.fetch(mix, 0, 0, 1 << 20).message_set, 0))) == len(ends)


# its own broker: it SIGKILLs a writer
def test_a_writer_killed_under_direct_produce_answers_every_request_once(broker):
    """Clients produce one-partition acks=1 sets while the writer is SIGKILLed
    and replaced. Every request gets one answer, in order on its connection
    (success, or an error for what the dead writer never answered); every
    success is in the log after the replacement; the broker goes on."""
    with broker.client() as c:
        c.create_topic("crash", 4)
    stop = threading.Event()
    outcomes: dict[int, list] = {p: [] for p in range(4)}
    failures: list[BaseException] = []

    def produce(partition: int) -> None:
        try:  # one connection throughout: it is never closed on us
            with SimpleClient(broker.tcp, timeout=20) as client:
                i = 0
                while not stop.is_set():
                    data = encode_message_set([f"{partition}-{i}".encode()])
                    answer = client.request(api.ProduceRequest(
                        1, 10000, (api.ProducePartition("crash", partition, data),)))
                    part = answer.partitions[0]
                    outcomes[partition].append((data, part.error_code, part.base_offset))
                    i += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    writer = broker.workers()["hb-writer-0"]
    os.kill(writer, signal.SIGKILL)
    broker.wait_worker_replaced("hb-writer-0", writer)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(30)
    assert not failures, failures
    with broker.client() as c:
        for partition, results in outcomes.items():
            acked = [(data, base) for data, code, base in results if code == 0]
            assert len(acked) > 10, (partition, results[-3:])
            log = {m.offset: m.payload for m in iter_messages(
                c.fetch("crash", partition, 0, 1 << 24).message_set, 0)}
            for data, base in acked:
                (m,) = iter_messages(data, base)
                assert log.get(base) == m.payload, (partition, base)
            # offsets of successes only grow: no answer came twice or out of order
            bases = [base for _, base in acked]
            assert bases == sorted(set(bases))
        assert c.produce("crash", 0, encode_message_set([b"after"])).error_code == 0
