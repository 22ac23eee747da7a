"""A processor that waits for a PUT's answer by looking for it a while
before it sleeps (``processor.put.spin.us``): that it catches the writer's
answers that way, and that once the answers are in (a client gone
meanwhile included) it sleeps between requests again."""

from __future__ import annotations

import os
import signal
import time

import psutil

from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.wire_helpers import (
    RawSocket,
    created_topic,
    produce_request,
    read_log,
    wait_for,
)


def frame(topic: str, data: bytes, correlation_id: int) -> bytes:
    return api.encode_request(produce_request(topic, 0, data), correlation_id)


def answer(sock: RawSocket) -> tuple[int, int, int]:
    correlation_id, response = sock.read_response(api.ApiKey.PRODUCE)
    [p] = response.partitions
    return correlation_id, p.error_code, p.base_offset


def lone_produces(broker, topic: str, data: bytes, count: int) -> None:
    with RawSocket(broker.tcp) as sock:
        for i in range(count):
            time.sleep(0.03)  # the writer back asleep: each one a PUT
            sock.send(frame(topic, data, i))
            assert answer(sock) == (i, 0, i * len(data))


def test_the_processor_catches_put_answers_while_it_looks(make_broker, tmp_path):
    data = encode_message_set([b"s" * 100] * 1000)
    hits, puts = {}, {}
    for spin in (0, 50_000):
        root = tmp_path / str(spin)
        root.mkdir()
        broker = make_broker(root=root, **{"num.processors": 1, "processor.put.spin.us": spin})
        topic = created_topic(broker.tcp)
        before = broker.counter("processor", "spin_hits")
        handled = broker.counter("handler", "requests")
        lone_produces(broker, topic, data, 20)
        puts[spin] = 20 - (broker.counter("handler", "requests") - handled)
        time.sleep(1.5)  # spin hits reach the board with the heartbeat
        hits[spin] = broker.counter("processor", "spin_hits") - before
        with broker.client(broker.tcp) as client:
            assert read_log(client, topic, 0, 0, 20 * len(data), max_bytes=4 << 20) == data * 20
    assert hits[0] == 0
    # PUTs (lone ones that found their writer asleep) answered while their
    # processor looked; not all: an answer that comes before the processor's
    # round is over needs no looking (on a busy machine, about half)
    assert puts[50_000] >= 5, puts
    assert hits[50_000] >= 3, (hits, puts)


def test_the_looking_ends_with_the_answer_even_for_a_client_gone_meanwhile(make_broker):
    broker = make_broker(**{"num.processors": 1, "processor.put.spin.us": 100_000})
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"c" * 40])
    workers = broker.workers()
    writer, processor = workers["hb-writer-0"], psutil.Process(workers["hb-proc-0"])
    with RawSocket(broker.tcp) as sock:
        sock.send(frame(topic, data, 0))
        assert answer(sock) == (0, 0, 0)
        time.sleep(0.3)  # asleep again: the next one is a PUT
        os.kill(writer, signal.SIGSTOP)
        try:
            sock.send(frame(topic, data, 1))
            time.sleep(0.2)
        finally:
            sock.sock.close()  # gone with its PUT out
            time.sleep(0.2)
            os.kill(writer, signal.SIGCONT)
    # the writer answers a connection that is gone; between requests the
    # processor sleeps again (were it still waiting for that answer, it would
    # look for it 100 ms before each sleep: all of the second below)
    assert wait_for(lambda: broker.counter("writer", "requests") >= 2, timeout=10)
    time.sleep(0.5)
    with broker.client(broker.tcp) as client:
        before = sum(processor.cpu_times()[:2])
        for _ in range(100):
            client.metadata()
            time.sleep(0.01)
        used = sum(processor.cpu_times()[:2]) - before
    assert used < 0.5, f"the processor used {used:.2f} s of CPU over 100 requests 10 ms apart"
    with RawSocket(broker.tcp) as sock:  # and goes on serving
        sock.send(frame(topic, data, 2))
        assert answer(sock) == (2, 0, 2 * len(data))
