import json
import os

import pytest

from hostbroker.errors import ErrorCode, HostbrokerError, StorageError
from hostbroker.log.config import LogConfig
from hostbroker.log.logdir import (CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, TRASH_DIR, LogDir,
                                   format_recovery_points, parse_recovery_points)
from hostbroker.log.recovery import RecoveryStats
from hostbroker.log.message import encode_message_set
from hostbroker.log.segments import MAX_PARTITIONS_PER_TOPIC, MAX_TOPIC_NAME_LENGTH

from .conftest import entries, read_all

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
    assert sorted(os.listdir(path)) == [".lock", TRASH_DIR, CHECKPOINT_FILE]
    assert os.listdir(os.path.join(path, TRASH_DIR)) == []
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
    in_trash = os.path.join(path, TRASH_DIR, "1700000000000-1-0")
    os.makedirs(in_trash)
    with open(os.path.join(in_trash, "00000000000000000000.kafka"), "wb") as f:
        f.write(b"old data")

    logdir = LogDir.open(path, DEFAULTS, clock)
    assert sorted(os.listdir(path)) == [".lock", TRASH_DIR, "keep_me.deleted-5_0",
                                        "not-a-partition", CHECKPOINT_FILE]
    assert os.listdir(os.path.join(path, TRASH_DIR)) == []
    assert list(logdir.partitions) == [("keep_me.deleted-5", 0)]
    logdir.close()


def test_segments_without_partition_file_take_only_that_partition_offline(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition("fine", 0, 1).append(encode_message_set([b"ok"]), 1)
    logdir.close()
    orphan = os.path.join(path, "orphan_0")
    os.makedirs(orphan)
    open(os.path.join(orphan, "00000000000000000000.kafka"), "wb").close()
    logdir = LogDir.open(path, DEFAULTS, clock)
    assert list(logdir.partitions) == [("fine", 0)]
    assert list(logdir.offline) == [("orphan", 0)]
    assert "orphan_0 holds segments but no partition.json" in logdir.offline[("orphan", 0)]
    assert os.path.exists(os.path.join(orphan, "00000000000000000000.kafka"))
    logdir.close()


def append_garbage(log, data: bytes) -> None:
    with open(log.segment_path(log.segment_bases[-1]), "ab") as segment:
        segment.write(data)


def test_clean_marker_skips_recovery(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    log = logdir.create_partition("t", 0, 1)
    log.append(encode_message_set([b"kept"]), 1)
    logdir.close()
    append_garbage(log, b"\x00" * 16)  # after the marker: only the tail is checked

    logdir = LogDir.open(path, DEFAULTS, clock)
    assert not logdir.recovered and logdir.recovery_stats == RecoveryStats()
    assert logdir.partitions[("t", 0)].log_end_offset == 14
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


# ------------------------------------------------------- recovery checkpoint

def read_checkpoint(path) -> bytes:
    with open(os.path.join(path, CHECKPOINT_FILE), "rb") as checkpoint:
        return checkpoint.read()


def test_checkpoint_records_flushed_offsets(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    a = logdir.create_partition("a", 0, 2)
    rolled = logdir.create_partition("a", 1, 2)
    logdir.create_partition("b.x-y_z", 7, 8)
    a.append(entries(2), 2)
    a.flush()
    a.append(entries(1), 1)                # appended, not flushed
    rolled.append(entries(3), 3)
    rolled.append(entries(1), 1)           # the roll at 300 synced the first segment
    assert (a.flushed_offset, rolled.flushed_offset) == (200, 300)

    assert logdir.checkpoint_recovery_points()
    data = read_checkpoint(path)
    assert data == b"0\n3\na 0 200\na 1 300\nb.x-y_z 7 0\n"
    assert parse_recovery_points(data) == {("a", 0): 200, ("a", 1): 300, ("b.x-y_z", 7): 0}
    assert parse_recovery_points(format_recovery_points({})) == {}

    # Nothing flushed since: no write at all.
    inode = os.stat(os.path.join(path, CHECKPOINT_FILE)).st_ino
    assert not logdir.checkpoint_recovery_points()
    assert os.stat(os.path.join(path, CHECKPOINT_FILE)).st_ino == inode

    a.flush()
    logdir.delete_partition("b.x-y_z", 7)
    assert logdir.checkpoint_recovery_points()
    assert read_checkpoint(path) == b"0\n2\na 0 300\na 1 300\n"
    assert CHECKPOINT_FILE + ".tmp" not in os.listdir(path)

    logdir.close()                          # flushes, then checkpoints
    assert read_checkpoint(path) == b"0\n2\na 0 300\na 1 400\n"
    with pytest.raises(StorageError, match="closed"):
        logdir.checkpoint_recovery_points()

    logdir = LogDir.open(path, DEFAULTS, clock)
    assert not logdir.recovered and logdir.recovery_stats == RecoveryStats()
    logdir.close()


def test_checkpoint_after_a_recovery(path, clock):
    logdir = LogDir.open(path, DEFAULTS, clock)
    log = logdir.create_partition("t", 0, 1)
    log.append(entries(4), 4)
    logdir.close(clean=False)
    assert read_checkpoint(path) == b"0\n0\n"   # written by the first open, an empty dir

    logdir = LogDir.open(path, DEFAULTS, clock)
    # The recovered log is synced and recorded, so a crash while starting up
    # does not scan it again.
    assert logdir.partitions[("t", 0)].flushed_offset == 400
    assert read_checkpoint(path) == b"0\n1\nt 0 400\n"
    assert not logdir.checkpoint_recovery_points()
    logdir.close(clean=False)


@pytest.mark.parametrize("data", [
    b"",
    b"0\n",
    b"1\n1\nt 0 300\n",                 # another version
    b"0\n2\nt 0 300\n",                 # count does not match
    b"0\n1\nt 0 300",                   # last line cut off
    b"0\n1\nt 0 -300\n",
    b"0\n1\nt 0 3e2\n",
    b"0\n1\nt  0 300\n",
    b"0\n1\nt 0 300 7\n",
    b"0\n1\nno/such/topic 0 300\n",
    b"0\n2\nt 0 300\nt 0 300\n",        # a partition twice
    b"\x00" * 4096,                     # a block the file size got before its data
    b"\xff\xfe0\n1\nt 0 300\n",
])
def test_parse_rejects_garbled_checkpoints(data):
    with pytest.raises(ValueError):
        parse_recovery_points(data)


# -- damage found at open: only the damaged partition goes offline ------------

def _partition_file(content: bytes):
    def damage(partition_path: str) -> None:
        with open(os.path.join(partition_path, "partition.json"), "wb") as meta:
            meta.write(content)
    return damage


def _meta(**fields) -> bytes:
    meta = {"topic": "hurt", "partition": 0, "partitions": 1, "config": {}, **fields}
    return json.dumps(meta).encode()


def _segment_made_a_directory(partition_path: str) -> None:
    segment = os.path.join(partition_path, "00000000000000000000.kafka")
    os.unlink(segment)
    os.mkdir(segment)


def _dir_made_a_file(partition_path: str) -> None:
    for name in os.listdir(partition_path):
        os.unlink(os.path.join(partition_path, name))
    os.rmdir(partition_path)
    with open(partition_path, "wb") as f:
        f.write(b"not a partition")


DAMAGE = {
    "invalid JSON": (_partition_file(b"{not json"), "not a valid partition file"),
    "a JSON list": (_partition_file(b"[1,2,3]"), "expected a JSON object, found list"),
    "empty": (_partition_file(b""), "not a valid partition file"),
    "missing keys": (_partition_file(b'{"topic": "hurt"}'), "no config, partition, partitions"),
    "partition as a string": (_partition_file(_meta(partition="0")), "partition '0' of 1"),
    "partition past the count": (_partition_file(_meta(partition=0, partitions=0)), "of 0"),
    "a boolean count": (_partition_file(_meta(partitions=True)), "partition 0 of True"),
    "config of numbers": (_partition_file(_meta(config={"flush.ms": 5})), "object of strings"),
    "an unknown config key": (_partition_file(_meta(config={"colour": "red"})),
                              "unknown topic config key"),
    "an out-of-bounds config": (_partition_file(_meta(config={"segment.bytes": "1"})),
                                "segment.bytes: 1 is outside"),
    "an invalid topic name": (_partition_file(_meta(topic="a/b")), "invalid topic name"),
    "another partition": (_partition_file(_meta(topic="fine")), "names partition fine-0"),
    "huge": (_partition_file(b" " * (65 * 1024)), "longer than 65536 bytes"),
    "not UTF-8": (_partition_file(b"\xff\xfe"), "not a valid partition file"),
    "nested too deeply": (_partition_file(b"[" * 60000), "nested too deeply"),
    "a directory for the file": (lambda p: (os.unlink(os.path.join(p, "partition.json")),
                                            os.mkdir(os.path.join(p, "partition.json"))),
                                 "Is a directory"),
    "a segment that is a directory": (_segment_made_a_directory, "is not a regular file"),
    "a file for the dir": (_dir_made_a_file, "is not a directory"),
}


@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crashed"])
def test_a_damaged_partition_goes_offline_alone(path, clock, caplog, kind, clean):
    damage, reason = DAMAGE[kind]
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition("fine", 0, 1).append(encode_message_set([b"ok"]), 1)
    logdir.create_partition("hurt", 0, 1).append(encode_message_set([b"lost?"]), 1)
    logdir.close(clean=clean)
    hurt = os.path.join(path, "hurt_0")
    damage(hurt)
    before = {name: os.path.getsize(os.path.join(hurt, name)) for name in os.listdir(hurt)} \
        if os.path.isdir(hurt) else None

    logdir = LogDir.open(path, DEFAULTS, clock)
    assert list(logdir.partitions) == [("fine", 0)]
    assert [m.payload for m in read_all(logdir.partitions[("fine", 0)])] == [b"ok"]
    assert list(logdir.offline) == [("hurt", 0)]
    assert reason in logdir.offline[("hurt", 0)] and "\n" not in logdir.offline[("hurt", 0)]
    lines = [r.getMessage() for r in caplog.records if "hurt" in r.getMessage()]
    assert len(lines) == 1 and "partition hurt-0 is offline" in lines[0] and reason in lines[0]
    # left as it is, for whoever repairs it
    if before is not None:
        assert {n: os.path.getsize(os.path.join(hurt, n)) for n in os.listdir(hurt)} == before
    # and it can be deleted all the same
    logdir.delete_partition("hurt", 0)
    assert logdir.offline == {} and not os.path.lexists(hurt)
    logdir.close()


def test_a_partition_of_the_longest_name_and_number_is_created_and_deleted(path, clock):
    topic = "t" * MAX_TOPIC_NAME_LENGTH
    last = MAX_PARTITIONS_PER_TOPIC - 1
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition(topic, last, MAX_PARTITIONS_PER_TOPIC)
    assert len(f"{topic}_{last}") == 255 and os.path.isdir(os.path.join(path, f"{topic}_{last}"))
    logdir.close()
    logdir = LogDir.open(path, DEFAULTS, clock)
    assert list(logdir.partitions) == [(topic, last)]
    logdir.delete_partition(topic, last)
    assert sorted(os.listdir(path)) == [".lock", TRASH_DIR, CHECKPOINT_FILE]
    logdir.close()


def test_a_delete_the_file_system_refuses_can_be_retried(path, clock, immutable):
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition("stuck", 0, 1).append(encode_message_set([b"x"]), 1)
    logdir.create_partition("other", 0, 1)
    immutable(path)
    with pytest.raises(StorageError, match="cannot delete .*stuck_0: Operation not permitted"):
        logdir.delete_partition("stuck", 0)
    assert list(logdir.partitions) == [("other", 0)]  # closed and forgotten
    immutable.clear(path)
    logdir.delete_partition("stuck", 0)
    assert not os.path.exists(os.path.join(path, "stuck_0"))
    with pytest.raises(HostbrokerError) as info:
        logdir.delete_partition("stuck", 0)
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    logdir.close()


def test_what_cannot_leave_the_trash_stays_there_and_open_goes_on(path, clock, immutable,
                                                                  caplog):
    logdir = LogDir.open(path, DEFAULTS, clock)
    logdir.create_partition("t", 0, 1)
    logdir.close()
    with open(os.path.join(path, TRASH_DIR + "-not"), "wb"):
        pass  # not the trash: left alone
    os.makedirs(os.path.join(path, TRASH_DIR))
    with open(os.path.join(path, TRASH_DIR, "a-file"), "wb"):
        pass  # not what a delete leaves, removed all the same
    stuck = os.path.join(path, TRASH_DIR, "1-1-1")
    os.makedirs(stuck)
    open(os.path.join(stuck, "00000000000000000000.kafka"), "wb").close()
    immutable(stuck)
    logdir = LogDir.open(path, DEFAULTS, clock)
    assert list(logdir.partitions) == [("t", 0)]
    assert os.listdir(os.path.join(path, TRASH_DIR)) == ["1-1-1"]
    assert os.path.exists(os.path.join(path, TRASH_DIR + "-not"))
    assert [r.getMessage() for r in caplog.records if "cannot remove it yet" in r.getMessage()]
    logdir.close()
