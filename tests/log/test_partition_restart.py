"""A follower's log restarted at its leader's log start (``PartitionLog.restart_at``),
and a replica's topic config kept current in partition.json (``set_overrides``).

A writer SIGKILLed in the middle of a restart cannot be stopped at a chosen
step for real, so the steps' states on disk are laid out here as the restart
leaves them (the new empty segment made, the old ones going oldest first) and
opened as a replaced writer opens them: each is the old log or the new one.
"""

from __future__ import annotations

import json
import os

import pytest

from hostbroker.errors import ConfigError, OffsetOutOfRangeError
from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog
from hostbroker.log.partition_file import PARTITION_FILE
from hostbroker.log.segments import segment_filename

SMALL = LogConfig(segment_bytes=120)


def filled(tmp_path, clock, sets: int = 6) -> tuple[PartitionLog, bytes]:
    log = PartitionLog.create(str(tmp_path), "r", 0, 1, {}, SMALL, clock, replicated=True)
    data = b""
    for i in range(sets):
        data += encode_message_set([b"x%d" % i * 40])
        log.append(encode_message_set([b"x%d" % i * 40]), 1)
    assert len(log.segment_bases) > 2
    return log, data


def names(log: PartitionLog) -> list[str]:
    return sorted(n for n in os.listdir(log.path) if n.endswith(".kafka"))


def test_a_restart_empties_the_log_and_starts_it_at_the_offset(tmp_path, clock):
    log, data = filled(tmp_path, clock)
    start = len(data) + 1000
    log.restart_at(start)
    assert (log.log_start_offset, log.log_end_offset, log.flushed_offset) == (start,) * 3
    assert names(log) == [segment_filename(start)]
    after = encode_message_set([b"after"])
    assert log.append(after, 1) == (start, start + len(after))
    log.close()
    again = PartitionLog.open(log.path, SMALL, clock, recover=True)
    assert (again.log_start_offset, again.log_end_offset) == (start, start + len(after))
    again.close()


def test_a_restart_never_moves_a_log_back(tmp_path, clock):
    log, data = filled(tmp_path, clock)
    for offset in (0, len(data) - 1, len(data), 2**63):
        with pytest.raises(OffsetOutOfRangeError):
            log.restart_at(offset)
    assert log.log_end_offset == len(data)
    assert len(names(log)) == len(log.segment_bases) > 2


@pytest.mark.parametrize("removed", [0, 1, 2])
def test_a_crash_in_the_middle_leaves_the_old_log(tmp_path, clock, removed):
    """The new segment made and ``removed`` old segments gone (oldest first),
    then the writer killed: recovery cuts the new segment away (the old ones'
    sizes do not reach its base), and the old log remains from its first
    segment left, as retention would leave it."""
    log, data = filled(tmp_path, clock)
    bases = log.segment_bases
    log.close()
    start = len(data) + 500
    open(os.path.join(log.path, segment_filename(start)), "wb").close()
    for base in bases[:removed]:
        os.unlink(os.path.join(log.path, segment_filename(base)))
    again = PartitionLog.open(log.path, SMALL, clock, recover=True, recovery_point=len(data))
    assert (again.log_start_offset, again.log_end_offset) == (bases[removed], len(data))
    assert segment_filename(start) not in names(again)
    again.close()


def test_a_crash_after_the_last_old_segment_went_leaves_the_new_log(tmp_path, clock):
    log, data = filled(tmp_path, clock)
    bases = log.segment_bases
    log.close()
    start = len(data) + 500
    open(os.path.join(log.path, segment_filename(start)), "wb").close()
    for base in bases:
        os.unlink(os.path.join(log.path, segment_filename(base)))
    again = PartitionLog.open(log.path, SMALL, clock, recover=True, recovery_point=len(data))
    assert (again.log_start_offset, again.log_end_offset) == (start, start)
    again.close()


def test_set_overrides_is_kept_in_partition_json(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "r", 0, 1, {"min.insync.replicas": "2"},
                              LogConfig(), clock, replicated=True)
    assert log.set_overrides({"min.insync.replicas": "3"}) is True
    assert log.set_overrides({"min.insync.replicas": "3"}) is False
    assert log.config.min_insync_replicas == 3
    with pytest.raises(ConfigError):
        log.set_overrides({"min.insync.replicas": "9"})
    assert log.config.min_insync_replicas == 3
    log.close()
    with open(os.path.join(log.path, PARTITION_FILE)) as f:
        meta = json.load(f)
    assert meta["config"] == {"min.insync.replicas": "3"} and meta["replicated"] is True
    assert PartitionLog.open(log.path, LogConfig(), clock).config.min_insync_replicas == 3
