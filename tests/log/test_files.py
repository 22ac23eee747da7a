"""Files of a log dir: nothing is opened through a link, temp files are created
anew, state files of any content or shape lose only their own state
(``hostbroker/log/files.py``, ``logdir.py``, ``offsetstore.py``, ``partition.py``)."""

from __future__ import annotations

import json
import os
import stat
import struct
import zlib

import pytest

from hostbroker.log import files
from hostbroker.log.config import LogConfig
from hostbroker.log.logdir import CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, LOCK_FILE, LogDir
from hostbroker.log.message import encode_message_set
from hostbroker.log.offsetstore import COMPACT_SUFFIX, FILENAME, OffsetStore
from hostbroker.log.partition import PartitionLog
from hostbroker.log.partition_file import PARTITION_FILE
from tests.log.conftest import read_all

DEFAULTS = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0)
PRECIOUS = b"precious: must stay as it is\n"


def is_regular(path: str) -> bool:
    """A regular file itself at ``path`` (a link to one is not)."""
    return os.path.lexists(path) and stat.S_ISREG(os.lstat(path).st_mode)


@pytest.fixture
def victim(tmp_path):
    """A file outside every log dir that a planted link points to."""
    made = []

    def make(name: str = "victim") -> str:
        path = str(tmp_path / "outside" / name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(PRECIOUS)
        made.append(path)
        return path

    yield make
    for path in made:
        with open(path, "rb") as f:
            assert f.read() == PRECIOUS, f"{path} was written through a link"


def test_open_file_refuses_links_fifos_and_directories(tmp_path, victim):
    link = str(tmp_path / "link")
    os.symlink(victim(), link)
    with pytest.raises(OSError) as raised:
        files.open_file(link, os.O_WRONLY | os.O_APPEND)
    assert files.describe(raised.value) == "is a symbolic link (not followed)"
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    with pytest.raises(files.NotAFileError, match="is a FIFO"):
        files.open_file(fifo, os.O_RDONLY)  # and does not hang waiting for a writer
    with pytest.raises(IsADirectoryError):
        files.read_file(str(tmp_path), 10)


def test_an_atomic_write_never_writes_through_a_planted_tmp_link(tmp_path, victim):
    path = str(tmp_path / "state")
    os.symlink(victim(), path + ".tmp")
    files.write_file_atomically(path, b"new")
    assert open(path, "rb").read() == b"new"
    assert not os.path.lexists(path + ".tmp")


def test_an_atomic_write_replaces_a_link_or_directory_at_the_file_itself(tmp_path, victim):
    path = str(tmp_path / "state")
    os.symlink(victim(), path)
    files.write_file_atomically(path, b"one")
    assert stat.S_ISREG(os.lstat(path).st_mode)
    os.unlink(path)
    os.makedirs(os.path.join(path, "inside"))
    files.write_file_atomically(path, b"two")
    assert open(path, "rb").read() == b"two"


def test_files_are_created_as_the_umask_says(tmp_path):
    old = os.umask(0o027)
    try:
        logdir = LogDir.open(str(tmp_path / "logs"), DEFAULTS)
        log = logdir.create_partition("t", 0, 1)
        log.append(encode_message_set([b"x"]), 1)
        logdir.close()
        store = OffsetStore.open(str(tmp_path / "logs"))
        store.commit([("g", "t", 0, 1, None)])
        store.compact()
        store.close()
    finally:
        os.umask(old)
    for root, dirs, names in os.walk(tmp_path / "logs"):
        for name in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o750, name
        for name in names:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o640, name


# -- the log dir's state files ------------------------------------------------

NESTED = b"[" * 100_000 + b"]" * 100_000


def plant(path: str, damage: str, victim) -> None:
    """Put ``damage`` where the file ``path`` is (or would be)."""
    files.remove_any(path)
    if damage == "directory":
        os.makedirs(os.path.join(path, "sub"))
    elif damage == "link":
        os.symlink(victim(os.path.basename(path)), path)
    elif damage == "dangling link":
        os.symlink(path + ".nowhere", path)
    elif damage == "fifo":
        os.mkfifo(path)
    elif damage == "huge":
        with open(path, "wb") as f:
            f.truncate(3 << 30)  # sparse: 3 GiB of zeros
    else:
        content = {"garbage": os.urandom(4096), "json list": b"[1]",
                   "json shapes": b'{"topic": [1], "partition": {}, "partitions": "x"}',
                   "nested": NESTED}[damage]
        with open(path, "wb") as f:
            f.write(content)


DAMAGES = ["garbage", "json list", "json shapes", "nested", "huge", "directory", "link",
           "dangling link", "fifo"]


def filled(path: str, clean: bool) -> LogDir:
    logdir = LogDir.open(path, DEFAULTS)
    for topic in ("a", "b"):
        log = logdir.create_partition(topic, 0, 1)
        log.append(encode_message_set([topic.encode() * 10] * 5), 5)
    logdir.close(clean=clean)
    return logdir


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("name", [CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, LOCK_FILE,
                                  CHECKPOINT_FILE + ".tmp", CLEAN_SHUTDOWN_FILE + ".tmp"])
def test_a_bad_log_dir_state_file_loses_at_most_its_own_state(tmp_path, victim, name, damage):
    path = str(tmp_path / "logs")
    filled(path, clean=True)
    plant(os.path.join(path, name), damage, victim)
    logdir = LogDir.open(path, DEFAULTS)
    assert sorted(logdir.partitions) == [("a", 0), ("b", 0)] and not logdir.offline
    assert [m.payload for m in read_all(logdir.partitions[("b", 0)])] == [b"b" * 10] * 5
    logdir.partitions[("a", 0)].append(encode_message_set([b"more"]), 1)
    logdir.close()
    for state in (CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, LOCK_FILE):
        assert is_regular(os.path.join(path, state)), state
    again = LogDir.open(path, DEFAULTS)  # and the next start is clean again
    assert not again.recovered
    assert read_all(again.partitions[("a", 0)])[-1].payload == b"more"
    again.close()


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_bad_partition_file_takes_only_its_partition_offline(tmp_path, victim, damage):
    path = str(tmp_path / "logs")
    filled(path, clean=False)
    plant(os.path.join(path, "a_0", PARTITION_FILE), damage, victim)
    logdir = LogDir.open(path, DEFAULTS)
    assert list(logdir.partitions) == [("b", 0)]
    reason = logdir.offline[("a", 0)]
    assert "\n" not in reason and PARTITION_FILE in reason
    if damage == "link":
        assert "symbolic link" in reason
    logdir.close()


def test_a_link_to_a_valid_partition_file_is_not_read(tmp_path):
    path = str(tmp_path / "logs")
    filled(path, clean=True)
    meta = os.path.join(path, "a_0", PARTITION_FILE)
    outside = str(tmp_path / "partition.json")
    os.rename(meta, outside)
    os.symlink(outside, meta)
    logdir = LogDir.open(path, DEFAULTS)
    assert "symbolic link" in logdir.offline[("a", 0)]
    logdir.close()


@pytest.mark.parametrize("what", ["segment", "partition dir"])
def test_a_linked_segment_or_partition_dir_is_not_followed(tmp_path, victim, what):
    path = str(tmp_path / "logs")
    filled(path, clean=True)
    if what == "segment":
        segment = os.path.join(path, "a_0", "00000000000000000000.kafka")
        os.unlink(segment)
        os.symlink(victim(), segment)
    else:
        outside = str(tmp_path / "outside-dir")
        os.rename(os.path.join(path, "a_0"), outside)
        os.symlink(outside, os.path.join(path, "a_0"))
    logdir = LogDir.open(path, DEFAULTS)
    assert list(logdir.partitions) == [("b", 0)]
    assert "symbolic link" in logdir.offline[("a", 0)]
    logdir.close()


def test_a_link_in_place_of_the_trash_is_not_moved_into(tmp_path, caplog):
    path = str(tmp_path / "logs")
    filled(path, clean=True)
    outside = tmp_path / "outside-trash"
    outside.mkdir()
    os.symlink(outside, os.path.join(path, ".trash"))
    logdir = LogDir.open(path, DEFAULTS)
    said = [r.getMessage() for r in caplog.records if ".trash" in r.getMessage()]
    assert said == [f"{path}: .trash is a symbolic link, not a directory; removed"]
    assert not os.path.lexists(os.path.join(path, ".trash"))
    logdir.delete_partition("a", 0)
    logdir.close()
    assert list(outside.iterdir()) == []
    assert not os.path.exists(os.path.join(path, "a_0"))


# -- the consumer offsets store -------------------------------------------------

def record(payload: bytes) -> bytes:
    return struct.pack(">iI", len(payload), zlib.crc32(payload)) + payload


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_bad_offsets_store_starts_empty_or_keeps_what_is_valid(tmp_path, victim, damage):
    path = str(tmp_path)
    store = OffsetStore.open(path)
    store.commit([("g", "t", 0, 42, "m")])
    store.close()
    plant(os.path.join(path, FILENAME + COMPACT_SUFFIX), "link", victim)
    plant(os.path.join(path, FILENAME), damage, victim)
    store = OffsetStore.open(path)
    assert store.fetch("g", "t", 0) == (-1, "")
    store.commit([("g", "t", 0, 7, None)])
    store.compact()  # through the planted .compact's place too
    store.close()
    assert is_regular(os.path.join(path, FILENAME))
    assert OffsetStore.open(path).fetch("g", "t", 0) == (7, None)


@pytest.mark.parametrize("payload", [
    b"[1]", b'{"a": 1}', b"[[1, 2, 3, 4, 5]]", b'[["g", "t", 0, 1e400, null]]',
    b'[["g", "t", 0, 1, {"x": 1}]]', b'[["g", "t", true, 1, null]]',
    b'[["g", "t", 0, 99999999999999999999999, null]]', NESTED, b"\xff\xfe"])
def test_a_record_of_the_wrong_shape_ends_the_replay(tmp_path, payload):
    good = record(json.dumps([["g", "t", 0, 5, None]]).encode())
    with open(tmp_path / FILENAME, "wb") as f:
        f.write(good + record(payload) + good)
    store = OffsetStore.open(str(tmp_path))
    assert store.fetch("g", "t", 0) == (5, None)
    assert os.path.getsize(tmp_path / FILENAME) == len(good)  # the rest is cut off
    store.close()


def test_others_may_write(tmp_path):
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    assert files.writable_by_others(str(base / "logs")) is None
    os.chmod(base, 0o777)
    assert "may be written by users other than its owner (mode 0777)" in \
        files.writable_by_others(str(base / "logs"))
    os.chmod(base, 0o1777)  # sticky, like /tmp: others cannot swap what is ours
    assert files.writable_by_others(str(base / "logs")) is None
    (base / "logs").mkdir()
    os.chmod(base / "logs", 0o1770)  # the log dir itself: no sharing at all
    assert files.writable_by_others(str(base / "logs")) is not None
    os.chmod(base / "logs", 0o750)
    if os.geteuid() != 0:
        return  # what follows makes files of another user
    # a link of another user's in the sticky dir: they may point it anywhere later
    (tmp_path / "real").mkdir(mode=0o755)
    os.symlink(tmp_path / "real", base / "theirs")
    os.lchown(base / "theirs", 65534, 65534)
    assert files.writable_by_others(str(base / "theirs" / "logs")) == \
        f"{base / 'theirs'} is a symbolic link owned by uid 65534"
    os.lchown(base / "theirs", 0, 0)
    assert files.writable_by_others(str(base / "theirs" / "logs")) is None
    os.chown(base / "logs", 65534, 65534)
    assert "owned by uid 65534" in files.writable_by_others(str(base / "logs"))
    os.symlink(base / "logs", tmp_path / "via-link")
    assert "owned by uid 65534" in files.writable_by_others(str(tmp_path / "via-link"))


@pytest.mark.parametrize("what", ["link", "directory"])
def test_a_roll_replaces_what_is_in_the_new_segments_way(tmp_path, victim, what):
    config = LogConfig(segment_bytes=64, preallocate_bytes=0)
    plog = PartitionLog.create(str(tmp_path), "t", 0, 1, {}, config)
    first = encode_message_set([b"x" * 20])
    _, end = plog.append(first, 1)
    in_the_way = plog.segment_path(end)
    if what == "link":
        os.symlink(victim(), in_the_way)
    else:
        os.makedirs(os.path.join(in_the_way, "inside"))
    plog.append(encode_message_set([b"y" * 60]), 1)  # past segment.bytes: a roll
    assert plog.segment_bases == [0, end]
    assert stat.S_ISREG(os.lstat(in_the_way).st_mode)
    plog.close()
