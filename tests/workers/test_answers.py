"""Table answers (workers/answers.py) where the partition table and the
segment files disagree for a moment: retention deletes a segment's file
before it publishes the log start past it."""

from __future__ import annotations

import itertools
import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.config import LogConfig
from hostbroker.log.segments import partition_dirname, segment_filename
from hostbroker.protocol import api
from hostbroker.shm import table as ptable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.shm.table import PartitionTable
from hostbroker.workers.answers import TableAnswers
from hostbroker.workers.topicview import TopicView

_runs = itertools.count()


@pytest.fixture
def answers(tmp_path):
    token = f"a{os.getpid()}n{next(_runs)}"
    table = PartitionTable.create(region_name(token, "partitions", 0), 4)
    yield TableAnswers(TopicView(table, [str(tmp_path)], LogConfig()), [str(tmp_path)], 0,
                       ((0, "127.0.0.1", 1, ""),), 1 << 20)
    table.close()
    remove_stale(broker_prefix(token))


def test_earliest_is_the_published_log_start_while_retention_is_mid_way(answers, tmp_path):
    part = tmp_path / partition_dirname("ret", 0)
    part.mkdir()
    (part / segment_filename(360)).write_bytes(b"x" * 90)  # 0..270 deleted, not yet published
    answers.table.write(0, state=ptable.ONLINE, name="ret", partition=0, owner=0,
                        start_offset=0, end_offset=450, flushed_offset=450, segment_generation=1)
    answers.table.bump_generation()
    earliest = answers.offsets(api.OffsetsRequest("ret", 0, api.EARLIEST_TIME, 5))
    assert (earliest.error_code, earliest.offsets) == (ErrorCode.NONE, (0,))
    (meta,) = answers.metadata(api.MetadataRequest(("ret",))).topics[0].partitions
    assert (meta.log_start_offset, meta.log_end_offset) == (0, 450)  # the same start
    latest = answers.offsets(api.OffsetsRequest("ret", 0, api.LATEST_TIME, 5))
    assert latest.offsets == (450,)
    # by time: only segments whose files are there
    assert answers.offsets(api.OffsetsRequest("ret", 0, 4_000_000_000_000, 5)).offsets == (
        450, 360)
    assert answers.offsets(api.OffsetsRequest("ret", 0, api.EARLIEST_TIME, 0)).offsets == ()
