import json
import os

import pytest

from hostbroker.errors import ErrorCode, HostbrokerError, StorageError
from hostbroker.log.config import LogConfig
from hostbroker.log.logdir import CLEAN_SHUTDOWN_FILE, LogDir
from hostbroker.log.message import encode_message_set

from .conftest import read_all

DEFAULTS = LogConfig(segment_bytes=300)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "logs")


def test_open_creates_the_dir_and_locks_it(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    assert os.path.isdir(path) and logdir.partitions == {}
    with pytest.raises(StorageError, match="in use by another broker.*\\.lock"):
        LogDir.open(path, DEFAULTS, clock)
    logdir.close()
    LogDir.open(path, DEFAULTS, clock).close()


def test_unusable_dir(tmp_path, clock):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StorageError, match="unusable") as info:
        LogDir.open(str(blocker / "logs"), DEFAULTS, clock)
    assert "\n" not in str(info.value)
    with pytest.raises(StorageError, match="unusable"):
        LogDir.open(str(blocker), DEFAULTS, clock)


def test_partitions_survive_a_clean_restart(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    a = logdir.create_partition("a", 0, 2, {"flush.ms": "5"})
    logdir.create_partition("a", 1, 2)
    b = logdir.create_partition("b.x_y", 0, 1)
    a.append(encode_message_set([b"one", b"two"]), 2)
    b.append(encode_message_set([b"three"]), 1)
    logdir.close()
    assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))

    logdir = LogDir.open(path, DEFAULTS, clock)
    assert not logdir.recovered
    assert not os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
    assert sorted(logdir.partitions) == [("a", 0), ("a", 1), ("b.x_y", 0)]
    a = logdir.partitions[("a", 0)]
    assert a.config.flush_ms == 5 and a.num_partitions == 2
    assert [m.payload for m in read_all(a)] == [b"one", b"two"]
    assert [m.payload for m in read_all(logdir.partitions[("b.x_y", 0)])] == [b"three"]
    logdir.close()


def test_create_existing_and_delete_unknown(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition("a", 0, 1)
    with pytest.raises(HostbrokerError) as info:
        logdir.create_partition("a", 0, 1)
    assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(HostbrokerError) as info:
        logdir.delete_partition("nope", 0)
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    logdir.close()


def test_delete_partition(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition("a", 0, 1).append(encode_message_set([b"x"]), 1)
    logdir.delete_partition("a", 0)
    assert logdir.partitions == {}
    assert sorted(os.listdir(path)) == [".lock"]
    logdir.close()
    assert LogDir.open(path, DEFAULTS, clock).partitions == {}


def test_open_finishes_interrupted_deletes_and_creates(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition("keep_me.deleted-5", 0, 1)
    logdir.close()
    half_deleted = os.path.join(path, "gone_0.deleted-1700000000000")
    os.makedirs(half_deleted)
    with open(os.path.join(half_deleted, "00000000000000000000.kafka"), "wb") as f:
        f.write(b"old data")
    half_created = os.path.join(path, "new_0")
    os.makedirs(half_created)
    open(os.path.join(half_created, "partition.json.tmp"), "wb").close()
    os.makedirs(os.path.join(path, "not-a-partition"))

    logdir = LogDir.open(path, DEFAULTS, clock)
    assert sorted(os.listdir(path)) == [".lock", "keep_me.deleted-5_0", "not-a-partition"]
    assert list(logdir.partitions) == [("keep_me.deleted-5", 0)]
    logdir.close()


def test_segments_without_partition_file_refuse_to_open(path, clock):
    orphan = os.path.join(path, "orphan_0")
    os.makedirs(orphan)
    open(os.path.join(orphan, "00000000000000000000.kafka"), "wb").close()
    with pytest.raises(StorageError, match="orphan_0"):
        LogDir.open(path, DEFAULTS, clock)
    # The lock was released on the way out.
    os.unlink(os.path.join(orphan, "00000000000000000000.kafka"))
    LogDir.open(path, DEFAULTS, clock).close()


def append_garbage(log, data: bytes) -> None:
    with open(log.segment_path(log.segment_bases[-1]), "ab") as segment:
        segment.write(data)


def test_clean_marker_skips_recovery(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    log = logdir.create_partition("t", 0, 1)
    log.append(encode_message_set([b"kept"]), 1)
    logdir.close()
    append_garbage(log, b"\x00" * 16)  # after the marker: a clean open does not look

    logdir = LogDir.open(path, DEFAULTS, clock)
    assert logdir.partitions[("t", 0)].log_end_offset == 14 + 16
    logdir.close(clean=False)
    assert not os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))

    logdir = LogDir.open(path, DEFAULTS, clock)
    assert logdir.recovered
    log = logdir.partitions[("t", 0)]
    assert log.log_end_offset == 14
    assert [m.payload for m in read_all(log)] == [b"kept"]
    logdir.close()


def test_partition_file_is_the_topic_config(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition("t", 3, 8, {"retention.ms": "-1", "segment.bytes": "0100"})
    logdir.close()
    with open(os.path.join(path, "t_3", "partition.json")) as meta:
        assert json.load(meta) == {"topic": "t", "partition": 3, "partitions": 8,
                                   "config": {"retention.ms": "-1", "segment.bytes": "100"}}
    logdir = LogDir.open(path, LogConfig(flush_ms=9), clock)
    config = logdir.partitions[("t", 3)].config
    assert config == LogConfig(flush_ms=9, retention_ms=-1, segment_bytes=100)
    logdir.close()
