"""Hostile input against the per-API and per-partition stats (shm/stats.py):
a frame's api key indexes the API stats, so keys outside 0..31 (negative,
just past, the largest) must count nowhere, never write outside a key's
words, and leave every process serving; a frame too large still counts as
one request of its key with an error; readers attach read-only."""

from __future__ import annotations

import struct
import time

import pytest

from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.protocol.api import ApiKey
from hostbroker.shm import stats
from hostbroker.workers.plan import BrokerPlan
from hostbroker.workers.stats_record import attach_stats
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, stop_or_kill


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("stats")).start()
    yield broker
    stop_or_kill(broker)


def _reader(broker):
    config = Config.build(overrides=[f"{k}={broker.settings[k]}" for k in (
        "log.dirs", "num.processors", "num.handlers", "max.partitions")])
    plan = BrokerPlan.from_config(config)
    return attach_stats(plan, plan.workers())


def _snapshot(apis) -> dict:
    return stats.merge_api(a.snapshot() for a in apis)


def _frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, 2) + b"hb" + body
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("api_key", [-1, -32768, 32, 99, 32767])
def test_a_key_outside_the_stats_counts_nowhere(served, api_key):
    workers = served.workers()
    partitions, apis = _reader(served)
    try:
        before = _snapshot(apis)
        raw_before = [bytes(a.region.buf) for a in apis]
        with RawSocket(served.unix) as sock:
            sock.send(_frame(api_key, 0, 77))
            sock.assert_error_frame(77, ErrorCode.UNSUPPORTED_VERSION)
        with served.client() as c:  # every process still serves
            c.metadata()
        time.sleep(0.1)
        after = _snapshot(apis)
        assert set(after) <= set(before) | {ApiKey.METADATA}
        for key in set(after) - {ApiKey.METADATA}:
            assert after[key] == before[key]
        # nothing written past the 32 keys' words (header and tail untouched)
        for raw, a in zip(raw_before, apis):
            now = bytes(a.region.buf)
            assert now[:stats.HEADER_BYTES] == raw[:stats.HEADER_BYTES]
            assert now[a.region_size():] == raw[a.region_size():]
    finally:
        for handle in partitions + apis:
            handle.close()
    assert served.workers() == workers


def test_a_frame_over_the_limit_counts_as_one_request_with_an_error(served):
    partitions, apis = _reader(served)
    try:
        before = _snapshot(apis).get(ApiKey.OFFSETS, (0, 0, 0, ()))
        limit = 100 * 1024 * 1024  # socket.request.max.bytes
        with RawSocket(served.unix) as sock:
            sock.send(struct.pack(">ihhi", limit + 1, ApiKey.OFFSETS, 0, 5))
            sock.assert_error_frame(5, ErrorCode.REQUEST_TOO_LARGE)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            after = _snapshot(apis).get(ApiKey.OFFSETS, (0, 0, 0, ()))
            if after[:2] == (before[0] + 1, before[1] + 1):
                break
            time.sleep(0.02)
        assert after[:2] == (before[0] + 1, before[1] + 1)
    finally:
        for handle in partitions + apis:
            handle.close()


def test_readers_cannot_write(served):
    partitions, apis = _reader(served)
    try:
        assert partitions and apis
        with pytest.raises(TypeError):
            partitions[0].words[0] = 1
        with pytest.raises(TypeError):
            apis[0].error(ApiKey.PRODUCE)
    finally:
        for handle in partitions + apis:
            handle.close()
