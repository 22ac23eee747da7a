"""PRODUCEs pipelined with a DELETE_TOPIC of their topic right behind them.

Over real sockets, one connection and several, round after round (the topic
deleted, then created again under the same name, so into the slot just
freed): every request is answered, in order, within a bound; no worker is
replaced; a produce to the deleted topic gets success or
UNKNOWN_TOPIC_OR_PARTITION (docs/storage.md, "Deleting a partition with
appends in flight"), or success after auto-creating it again when the delete
overtook it from another connection; acks=-2 gets INVALID_REQUEST and writes nothing; and
every success on a topic that stays is readable at the offsets it was given.
"""

from __future__ import annotations

import time

import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.protocol.api import ApiKey
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    RawSocket,
    log_end,
    module_broker,
    new_topic,
    read_log,
    uri,
)

served = module_broker()

ROUNDS = 6
PRODUCES = 12  # per connection and round
ACKS = (-1, 1, -1, -2)  # taken in turn; -2 is invalid
PARTITIONS = 2
TIMEOUT_MS = 10_000  # the produces' own; the broker must answer well before
ROUND_BOUND_S = 30.0


def produce_frame(corr: int, acks: int, parts) -> bytes:
    request = api.ProduceRequest(acks, TIMEOUT_MS, tuple(
        api.ProducePartition(topic, partition, data) for topic, partition, data in parts))
    return api.encode_request(request, corr, "race")


def read_answer(sock: RawSocket, api_key: int, corr: int) -> api.Response:
    frame = sock.read_frame()
    assert not api.is_error_frame(frame), f"error frame in place of the answer to {corr}"
    got, body = api.decode_response(api_key, frame)
    assert got == corr, f"answer to {got} where {corr} was due: out of order"
    return body


def race_round(socks: list[RawSocket], victim: str, survivor: str, round_: int,
               acked: dict[int, dict[int, bytes]]) -> None:
    """One round: on every connection PRODUCES produces naming a partition of
    ``victim`` and one of ``survivor``, then a DELETE_TOPIC of ``victim``
    behind them on the last connection, then a METADATA on each; check every
    answer and record the survivor's acknowledged sets in ``acked``."""
    expected: list[list[tuple]] = []  # per connection: (corr, api_key, acks, parts)
    corr = round_ * 10_000
    for c, sock in enumerate(socks):
        due, frames = [], []
        for i in range(PRODUCES):
            corr += 1
            acks, partition = ACKS[i % len(ACKS)], i % PARTITIONS
            parts = [(topic, partition, encode_message_set(
                [f"{topic}/{round_}/{c}/{i}/{k}".encode() * (k + 1) for k in range(3)]))
                for topic in (victim, survivor)]
            frames.append(produce_frame(corr, acks, parts))
            due.append((corr, ApiKey.PRODUCE, acks, parts))
        if c == len(socks) - 1:
            corr += 1
            frames.append(api.encode_request(api.DeleteTopicRequest(victim), corr, "race"))
            due.append((corr, ApiKey.DELETE_TOPIC, None, None))
        sock.send(b"".join(frames))
        expected.append(due)
    for c, sock in enumerate(socks):  # a probe behind everything on every connection
        corr += 1
        sock.send(api.encode_request(api.MetadataRequest(), corr, "race"))
        expected[c].append((corr, ApiKey.METADATA, None, None))

    start = time.monotonic()
    for sock, due in zip(socks, expected):
        for corr, api_key, acks, parts in due:
            body = read_answer(sock, api_key, corr)
            if api_key == ApiKey.DELETE_TOPIC:
                assert body.error_code == ErrorCode.NONE, body
            elif api_key == ApiKey.PRODUCE:
                check_produce(body, acks, parts, victim, acked)
    elapsed = time.monotonic() - start
    assert elapsed < ROUND_BOUND_S, f"round {round_} took {elapsed:.1f}s to answer"


def check_produce(body, acks, parts, victim, acked) -> None:
    sizes = {(t, p): data for t, p, data in parts}
    assert {(r.topic, r.partition) for r in body.partitions} == set(sizes)
    for r in body.partitions:
        data = sizes[(r.topic, r.partition)]
        if acks == -2:
            assert (r.error_code, r.base_offset) == (ErrorCode.INVALID_REQUEST, -1), r
        elif r.topic == victim and r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            assert (r.base_offset, r.log_end_offset) == (-1, -1), r
        else:
            assert r.error_code == ErrorCode.NONE, r
            assert r.log_end_offset - r.base_offset == len(data), r
            if r.topic != victim:
                acked[r.partition][r.base_offset] = data


def check_survivor(client: SimpleClient, survivor: str, acked: dict[int, dict[int, bytes]]):
    """Exactly the acknowledged sets, each at its offset: nothing lost, nothing extra."""
    for partition, sets in acked.items():
        end = log_end(client, survivor, partition)
        assert end == sum(map(len, sets.values())), "the log holds more than was acknowledged"
        data = read_log(client, survivor, partition, 0, end, max_bytes=64 << 10)
        for base, expected in sets.items():
            assert data[base:base + len(expected)] == expected, (partition, base)


@pytest.mark.parametrize("connections", [1, 3])
def test_produces_with_a_delete_of_their_topic_behind_them_are_all_answered(
        served, uri, connections):
    workers = served.workers()
    victim, survivor = new_topic("victim"), new_topic("survivor")
    acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    socks = [RawSocket(uri, timeout=ROUND_BOUND_S) for _ in range(connections)]
    try:
        with SimpleClient(uri) as client:
            client.create_topic(survivor, PARTITIONS)
            for round_ in range(ROUNDS):
                # a produce the delete overtook (on another connection) may have
                # created it again (auto.create.topics.enable): start afresh
                client.delete_topic(victim, raise_on_error=False)
                client.create_topic(victim, PARTITIONS)
                # created again into the slots just freed: nothing of the last one shows
                assert [log_end(client, victim, p) for p in range(PARTITIONS)] == [0, 0]
                race_round(socks, victim, survivor, round_, acked)
                check_survivor(client, survivor, acked)
            # the last incarnation's slots serve acks=-1 as a new partition should
            client.delete_topic(victim, raise_on_error=False)
            client.create_topic(victim, PARTITIONS)
            data = encode_message_set([b"after the races"])
            for partition in range(PARTITIONS):
                result = client.produce(victim, partition, data, acks=-1)
                assert (result.base_offset, result.log_end_offset) == (0, len(data))
                assert read_log(client, victim, partition, 0, len(data)) == data
            client.delete_topic(victim)
    finally:
        for sock in socks:
            sock.sock.close()
    assert served.workers() == workers, "a worker was replaced"
    assert "Traceback" not in served.log()
