"""One request can never end a handler.

Driven on a real handler's request path with a real partition table; only the
response ring is a stand-in that records what the handler sends. The partition
deleted between the table read and the directory listing is caused for real
(its directory is gone); the unexpected failure inside a request is a fault
that cannot be caused for real, so it is injected.
"""

from __future__ import annotations

import itertools
import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.config import LogConfig
from hostbroker.protocol import api
from hostbroker.shm import partitions as ptable
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers import envelopes as env
from hostbroker.workers.answers import TableAnswers
from hostbroker.workers.handler import HandlerWorker
from hostbroker.workers.topicview import TopicView

_runs = itertools.count()


class Recorder:
    """Stands in for a response ring: keeps (seq, flags, frames) of each answer."""

    def __init__(self):
        self.answers = []

    def send(self, *parts):
        _, seq, flags, pieces, _ = env.decode_response(b"".join(parts))
        self.answers.append((seq, flags, [bytes(p) for p in pieces]))


@pytest.fixture
def handler(tmp_path):
    token = f"h{os.getpid()}n{next(_runs)}"
    table = PartitionTable.create(region_name(token, "partitions", 0), 8)
    h = HandlerWorker.__new__(HandlerWorker)
    h.index = 0
    h.table = table
    h.view = TopicView(table, [str(tmp_path)], LogConfig())
    h.max_entries, h.max_response_bytes = 10000, 1 << 20
    h.answers = TableAnswers(h.view, [str(tmp_path)], 0, ((0, "", -1, ""),), 1 << 20)
    h.broken, h.pending, h.parked = {}, {}, []
    h.wait_ns = 0
    h.responses, h.dirty_processors = [Recorder()], set()
    h.count = lambda *args: None
    yield h
    table.close()
    remove_stale(broker_prefix(token))


def request(h: HandlerWorker, seq: int, req, corr: int) -> None:
    frame = api.encode_request(req, corr, "t")[4:]  # the ring carries frames without their size
    h._on_request(0, memoryview(env.REQ_HEADER.pack(7, seq, 0, 0) + frame))


def test_offsets_of_a_partition_whose_directory_is_gone_answers_unknown(handler):
    # in the table, but its directory was removed (a delete racing the request)
    handler.table.write(1, state=ptable.ONLINE, name="gone", partition=0, owner=0,
                        start_offset=0, end_offset=0, flushed_offset=0, segment_generation=1)
    request(handler, 0, api.OffsetsRequest("gone", 0, -2, 10), corr=5)
    (seq, flags, (frame,)), = handler.responses[0].answers
    corr, response = api.decode_response(api.ApiKey.OFFSETS, frame[4:])
    assert (seq, flags, corr) == (0, 0, 5)
    assert response.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_an_unexpected_failure_answers_that_request_unknown_and_the_next_is_served(handler, capsys):
    def broken_refresh():
        raise RuntimeError("injected")

    real_refresh = handler.view.refresh
    handler.view.refresh = broken_refresh
    request(handler, 0, api.MetadataRequest(()), corr=11)
    handler.view.refresh = real_refresh
    (seq, flags, (frame,)), = handler.responses[0].answers
    assert (seq, flags) == (0, env.RESP_CLOSE_AFTER)
    assert api.decode_error_frame(frame[4:]) == (11, ErrorCode.UNKNOWN)
    err = capsys.readouterr().err
    assert "METADATA failed unexpectedly" in err and "RuntimeError: injected" in err
    # that connection is closing; another connection's request is served as usual
    frame = api.encode_request(api.OffsetsRequest("none", 0, -1, 1), 12, "t")[4:]
    handler._on_request(0, memoryview(env.REQ_HEADER.pack(8, 0, 0, 0) + frame))
    seq, flags, (frame,) = handler.responses[0].answers[1]
    corr, response = api.decode_response(api.ApiKey.OFFSETS, frame[4:])
    assert (flags, corr, response.error_code) == (0, 12, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
