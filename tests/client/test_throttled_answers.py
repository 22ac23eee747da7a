"""The clients' PRODUCE v1 and FETCH v2 answers against a scripted broker:
a quota hold is waited for (not taken for a lost answer and sent again), an
answer of another shape or a refused version is one clear error that is not
retried, and a negative throttle time counts as 0.

The broker's hold is played by the fake sleeping before it answers (the
real thing, under a real quota, is in tests/quota/test_client_throttle.py).
"""

from __future__ import annotations

import time

import pytest

from hostbroker.client import ConsumerConnector, DeliveryError, Producer, SimpleConsumer
from hostbroker.client.group import OffsetStorage, RoundRobinAssignor
from hostbroker.client.throttle_stats import AnswerShapeError, VersionRefusedError
from hostbroker.errors import ErrorCode
from hostbroker.protocol import api, throttled

HOLD_S = 1.2


def _answer(hold_s: float = 0.0, refuse_fetch: bool = False):
    """Topic ``t`` of one partition; a PRODUCE acknowledged at offset 0 and a
    FETCH answered empty, each after ``hold_s``."""
    def answer(header, request):
        if isinstance(request, api.MetadataRequest):
            return api.encode_response(header.correlation_id, api.MetadataResponse(0, (), (
                api.MetadataTopic("t", 0, (api.MetadataPartition(0, 0, 0, 0, 0, None),)),)))
        if isinstance(request, throttled.FetchRequestV2) and refuse_fetch:
            return api.encode_error_frame(header.correlation_id, ErrorCode.UNSUPPORTED_VERSION)
        if isinstance(request, throttled.ProduceRequestV1):
            time.sleep(hold_s)
            return api.encode_response(header.correlation_id, api.ProduceResponse(
                (api.ProducePartitionResult("t", 0, 0, 0, 1),)))
        if isinstance(request, throttled.FetchRequestV2):
            time.sleep(hold_s)
            return api.encode_response(header.correlation_id, api.FetchResponse(
                (api.FetchPartitionResult("t", 0, 0, 0, b""),)))
        # (METADATA v1: this broker is of before replication; the clients ask v0)
        return api.encode_error_frame(header.correlation_id, ErrorCode.UNSUPPORTED_VERSION)
    return answer


def _produces(broker) -> int:
    return sum(isinstance(r, throttled.ProduceRequestV1) for _, r in broker.requests)


def test_a_held_produce_answer_is_waited_for_and_not_sent_again(fake_broker):
    """The answer comes after the request timeout but within quota.max.throttle.ms."""
    broker = fake_broker(_answer(HOLD_S))
    with Producer(broker.uri, producer_type="sync", request_timeout_ms=400,
                  quota_max_throttle_ms=3000) as producer:
        producer.send("t", b"x")
        assert producer.stats["retries"] == 0
    assert _produces(broker) == 1


def test_a_held_first_fetch_answer_is_waited_for(fake_broker):
    """A new connection's first answer: bounded by the setup timeout plus the hold."""
    broker = fake_broker(_answer(HOLD_S))
    with SimpleConsumer(broker.uri, socket_timeout_ms=400,
                        socket_connection_setup_timeout_ms=300, quota_max_throttle_ms=3000,
                        fetch_wait_max_ms=0) as consumer:
        assert len(consumer.fetch("t", 0, 0)) == 0


def test_a_hold_past_quota_max_throttle_ms_is_a_timeout(fake_broker):
    broker = fake_broker(_answer(HOLD_S))
    with SimpleConsumer(broker.uri, socket_timeout_ms=300, quota_max_throttle_ms=100,
                        fetch_wait_max_ms=0) as consumer:
        with pytest.raises(TimeoutError):
            consumer.fetch("t", 0, 0)


def test_a_produce_answer_of_version_0s_shape_is_one_error_and_not_sent_again(fake_broker):
    broker = fake_broker(_answer())
    broker.throttle_field = False
    with pytest.raises(DeliveryError) as caught:
        with Producer(broker.uri, producer_type="sync") as producer:
            producer.send("t", b"x")
    error = caught.value.failures[0].error
    assert isinstance(error, AnswerShapeError)
    assert "answered PRODUCE version 1 in another shape" in str(error)
    assert "\n" not in str(error)
    assert _produces(broker) == 1


def test_a_fetch_answer_of_version_0s_shape_is_one_error(fake_broker):
    broker = fake_broker(_answer())
    broker.throttle_field = False
    with SimpleConsumer(broker.uri, fetch_wait_max_ms=0) as consumer:
        with pytest.raises(AnswerShapeError, match="answered FETCH version 2 in another shape"):
            consumer.fetch("t", 0, 0)


def test_a_negative_throttle_time_keeps_the_answer_and_counts_as_0(fake_broker):
    broker = fake_broker(_answer())
    broker.throttle_ms = -5
    with Producer(broker.uri, producer_type="sync") as producer:
        producer.send("t", b"x")
        stats = producer.stats
    assert stats["acknowledged"] == 1 and stats["retries"] == 0
    assert stats["produce-throttle-time-max"] == 0
    assert _produces(broker) == 1


class _Offsets(OffsetStorage):
    def fetch(self, group, partitions):
        return {tp: 0 for tp in partitions}

    def commit(self, group, offsets):
        pass


def test_a_high_level_consumer_whose_broker_refuses_fetch_v2_raises_it(fake_broker):
    """The fetcher stops on VersionRefusedError; it was the only one, so with
    it the connector's housekeeping stops and every stream raises."""
    broker = fake_broker(_answer(refuse_fetch=True))
    connector = ConsumerConnector(broker.uri, group_id="g", assignor=RoundRobinAssignor(),
                                  offset_storage=_Offsets(), consumer_timeout_ms=5000,
                                  auto_commit_enable=False)
    try:
        (stream,) = connector.create_message_streams({"t": 1})["t"]
        start = time.monotonic()
        with pytest.raises(VersionRefusedError, match="does not take FETCH version 2"):
            next(iter(stream))
        assert time.monotonic() - start < 4
    finally:
        connector.shutdown()
