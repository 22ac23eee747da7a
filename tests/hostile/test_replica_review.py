"""Holes a review of replication found, closed: each case here failed before
its fix. A broker of its own (standalone: replicated partitions are made by
LEADER_AND_ISR from a client, as a controller would send it), so the
controller epochs raised here do not touch the package's fuzz session.

- an empty PRODUCE to a replica that does not lead is refused
  NOT_LEADER_FOR_PARTITION as a non-empty one is (it was answered NONE with
  the follower's log end), on the handler's way and on a processor's lone PUT.
"""

from __future__ import annotations

import itertools

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, new_topic, produce_request, stop_or_kill

ME = 0  # the broker's broker.id
_epochs = itertools.count(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("review")).start()
    yield b
    stop_or_kill(b)


def ask(broker, body, cls, correlation_id: int = 5):
    with RawSocket(broker.tcp) as sock:
        sock.send(rproto.encode_request(body, correlation_id, "hostile"))
        corr, answer = rproto.decode_response(sock.read_frame(), cls)
    assert corr == correlation_id
    return answer


def follower_of_99(broker) -> str:
    """A new replicated topic whose partition 0 this broker follows (leader 99)."""
    topic = new_topic("follow")
    answer = ask(broker, rproto.LeaderAndIsrRequest(99, next(_epochs), (
        rproto.LeaderAndIsrPartition(topic, 0, 99, 1, (99, ME), 0, (99, ME)),), (), ()),
        rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]
    return topic


@pytest.mark.parametrize("acks", [1, -1])
def test_an_empty_produce_to_a_follower_is_not_led(broker, acks):
    topic = follower_of_99(broker)
    for data in (b"", encode_message_set([b"x"])):
        with RawSocket(broker.tcp) as sock:
            # acks=1 alone on its connection: a lone PUT; acks=-1: the handler's way
            sock.send(api.encode_request(produce_request(topic, 0, data, acks=acks), 7))
            corr, answer = sock.read_response(api.ApiKey.PRODUCE)
            assert corr == 7
            assert [(p.error_code, p.base_offset) for p in answer.partitions] == [
                (ErrorCode.NOT_LEADER_FOR_PARTITION, -1)], (data, acks)
