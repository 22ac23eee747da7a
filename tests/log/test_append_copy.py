"""A dir-placed follower's copy of its leader's segment bytes
(``PartitionLog.append_copy``), file to file across two file systems (the
leader on tmpfs, the follower on the disk under the test's tmp dir), and
partition.json's ``placement``."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest

from hostbroker.errors import StorageError
from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import CopySourceError, PartitionLog
from hostbroker.log.partition_file import format_partition_file, read_partition_record
from hostbroker.log.segments import list_segment_bases, segment_filename

SHM = "/dev/shm"


@pytest.fixture
def leader_dir():
    """A log dir on tmpfs: another file system than the test's tmp dir."""
    if not os.path.isdir(SHM):
        pytest.skip("no /dev/shm")
    path = os.path.join(SHM, f"hb-copy-{uuid.uuid4().hex}")
    os.mkdir(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _pair(leader_dir, tmp_path, clock, **config):
    defaults = LogConfig(**config) if config else LogConfig()
    leader = PartitionLog.create(leader_dir, "r", 0, 1, {}, defaults, clock, replicated=True,
                                 placement="log_dirs")
    follower = PartitionLog.create(str(tmp_path), "r", 0, 1, {}, defaults, clock,
                                   replicated=True, placement="log_dirs")
    return leader, follower


def _copy_all(leader, follower):
    """What the follower's round does: segment by segment, up to the leader's end."""
    bases = list_segment_bases(leader.path, leader.log_start_offset, leader.log_end_offset)
    while follower.log_end_offset < leader.log_end_offset:
        leo = follower.log_end_offset
        i = max(b for b in range(len(bases)) if bases[b] <= leo)
        end = bases[i + 1] if i + 1 < len(bases) else leader.log_end_offset
        fd = os.open(leader.segment_path(bases[i]), os.O_RDONLY)
        try:
            follower.append_copy(fd, leo - bases[i], end - leo, new_segment=leo == bases[i])
        finally:
            os.close(fd)


def _files(log):
    return {name: open(os.path.join(log.path, name), "rb").read()
            for name in sorted(os.listdir(log.path)) if name.endswith(".kafka")}


def test_a_copy_across_file_systems_matches_the_leader_segment_for_segment(
        leader_dir, tmp_path, clock):
    assert os.stat(leader_dir).st_dev != os.stat(tmp_path).st_dev
    leader, follower = _pair(leader_dir, tmp_path, clock, segment_bytes=1024)
    for i in range(30):
        leader.append(encode_message_set([b"%03d" % i * 20]), 1)
    leader.flush()
    assert len(leader.segment_bases) > 2
    _copy_all(leader, follower)
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.segment_bases == leader.segment_bases
    assert _files(follower) == _files(leader)
    follower.flush()
    follower.close()
    leader.close()
    # and it opens again as a whole, checked log
    again = PartitionLog.open(follower.path, LogConfig(segment_bytes=1024), clock, recover=True)
    assert again.log_end_offset == leader.log_end_offset and again.placement == "log_dirs"
    again.close()


def test_a_copy_goes_on_in_the_active_segment_past_its_size(leader_dir, tmp_path, clock):
    """Only the leader's segments start segments here, so the files match."""
    leader, follower = _pair(leader_dir, tmp_path, clock, segment_bytes=1024)
    data = encode_message_set([b"x" * 2000])
    leader.append(data, 1)
    leader.append(data, 1)
    fd = os.open(leader.segment_path(leader.segment_bases[0]), os.O_RDONLY)
    try:
        assert follower.append_copy(fd, 0, len(data), new_segment=True) == (0, len(data))
    finally:
        os.close(fd)
    _copy_all(leader, follower)
    assert follower.segment_bases == leader.segment_bases == [0, len(data)]
    assert _files(follower) == _files(leader)
    follower.close()
    leader.close()


def test_a_short_source_is_the_sources_fault_and_leaves_nothing(leader_dir, tmp_path, clock):
    leader, follower = _pair(leader_dir, tmp_path, clock)
    data = encode_message_set([b"y" * 100, b"z" * 100])
    leader.append(data, 2)
    fd = os.open(leader.segment_path(0), os.O_RDONLY)
    try:
        with pytest.raises(CopySourceError, match="short"):
            follower.append_copy(fd, 0, len(data) + 50, new_segment=True)
        assert follower.log_end_offset == 0
        assert os.path.getsize(follower.segment_path(0)) == 0
        assert follower.append_copy(fd, 0, len(data), new_segment=True) == (0, len(data))
    finally:
        os.close(fd)
    assert _files(follower) == _files(leader)
    follower.close()
    leader.close()


def test_an_unreadable_source_is_not_our_dirs_fault(tmp_path, clock):
    follower = PartitionLog.create(str(tmp_path), "r", 0, 1, {}, LogConfig(), clock,
                                   replicated=True, placement="log_dirs")
    d = os.open(str(tmp_path), os.O_RDONLY)  # a directory: sendfile and pread fail on it
    try:
        with pytest.raises(CopySourceError):
            follower.append_copy(d, 0, 10, new_segment=False)
    finally:
        os.close(d)
    assert follower.log_end_offset == 0
    follower.close()
    with pytest.raises(StorageError, match="closed"):
        follower.append_copy(0, 0, 10, new_segment=False)


def test_a_truncation_after_a_copy_keeps_copying_in_place(leader_dir, tmp_path, clock):
    leader, follower = _pair(leader_dir, tmp_path, clock)
    one = encode_message_set([b"a" * 50])
    for _ in range(3):
        leader.append(one, 1)
    _copy_all(leader, follower)
    follower.truncate_to(len(one))
    _copy_all(leader, follower)
    assert _files(follower) == _files(leader)
    follower.close()
    leader.close()


# -- partition.json's placement ----------------------------------------------

def test_the_placement_is_recorded_and_read_back_as_hostile_input(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "r", 0, 1, {}, LogConfig(), clock,
                              replicated=True, placement="log_dirs")
    log.set_overrides({"min.insync.replicas": "2"})  # rewritten: the placement stays
    log.close()
    assert read_partition_record(log.path)[4:] == (True, "log_dirs")
    meta_path = os.path.join(log.path, "partition.json")
    meta = json.load(open(meta_path))
    for bad, replicated in (("brokers", True), (1, True), ("log_dirs", False)):
        meta.update(placement=bad, replicated=replicated)
        with open(meta_path, "w") as f:
            json.dump(meta, f)
        with pytest.raises(StorageError, match="placement"):
            read_partition_record(log.path)
    with pytest.raises(ValueError, match="placement"):
        format_partition_file("r", 0, 1, {}, False, "log_dirs")
    plain = PartitionLog.create(str(tmp_path), "p", 0, 1, {}, LogConfig(), clock)
    assert plain.placement is None and "placement" not in open(
        os.path.join(plain.path, "partition.json")).read()
    plain.close()


def test_segment_bases_are_listed_as_published(tmp_path):
    for base in (0, 100, 250, 400):
        open(tmp_path / segment_filename(base), "w").close()
    open(tmp_path / "partition.json", "w").close()
    assert list_segment_bases(str(tmp_path), 0, 300) == [0, 100, 250]
    assert list_segment_bases(str(tmp_path), 120, 500) == [120, 250, 400]
    assert list_segment_bases(str(tmp_path), 100, 100) == [100]
