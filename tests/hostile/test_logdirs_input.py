"""Standing cases: hostile input to replicas across log dirs (issue 36).

Whoever can reach a listener sends METADATA v2, CREATE_TOPIC v1,
ALTER_REPLICA_DIRS and LOG_DIR_ADMIN with any bytes; whoever can write a log
dir leaves any ``log-dir-id`` and any ``log-dirs-state``. Each is refused with
one line naming what is wrong, quickly and reading a bounded amount, never
by another exception and never by following a link. Real files.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from hostbroker.errors import ErrorCode, ProtocolError, StorageError
from hostbroker.log.dirids import assign_dir_ids, read_dir_id
from hostbroker.protocol import replication as rp
from hostbroker.replication.localstate import STATE_MAX_BYTES, decode_state
from tests.protocol.wire import array, i16, i32, request_frame, string


def hostile_frames():
    ids = lambda *v: array(*map(i32, v))  # noqa: E731
    return [
        ("a replication factor of 32767", request_frame(4, 1, "h", string("t") + i32(1)
                                                        + array() + i16(32767), api_version=1)),
        ("nine dirs for one partition", request_frame(17, 1, "h", array(
            string("t") + i32(0) + ids(*range(1, 10))))),
        ("a dir count of 2^31-1", request_frame(17, 1, "h", array(
            string("t") + i32(0) + i32(2**31 - 1)))),
        ("a partition named 50000 times", request_frame(17, 1, "h", array(
            *[string("t") + i32(0) + ids(1)] * 50_000))),
        ("a dir id of -7", request_frame(17, 1, "h", array(string("t") + i32(0) + ids(-7)))),
        ("a log dir action of 9", request_frame(18, 1, "h", b"\x09" + string("/d") + i32(-1))),
        ("an online path with a NUL", request_frame(18, 1, "h", b"\x00" + string("/srv\0/d")
                                                    + i32(-1))),
        ("a forget of dir 0", request_frame(18, 1, "h", b"\x01" + string(None) + i32(0))),
    ]


def test_hostile_logdirs_requests_are_refused_whole_and_quickly():
    for what, frame in hostile_frames():
        started = time.thread_time()  # the decode's own CPU, whatever else runs
        with pytest.raises(ProtocolError) as info:
            rp.decode_any_request(frame, max_entries=100_000)
        assert info.value.code == ErrorCode.INVALID_REQUEST, what
        assert "\n" not in str(info.value) and len(str(info.value)) < 300, what
        assert time.thread_time() - started < 1, what


def test_a_hostile_state_file_is_refused_in_one_line(tmp_path):
    cases = {
        "garbage": os.urandom(100_000),
        "nested a million deep": b"[" * 1_000_000 + b"]" * 1_000_000,
        "a number of 100000 digits": b'{"seq": ' + b"9" * 100_000 + b"}",
        "a partition of a million replicas": json.dumps({
            "version": 1, "seq": 1, "online": [1], "dirs": {}, "deleting": [],
            "topics": {"t": {"config": {}, "partitions": {"0": {
                "replicas": list(range(1, 1_000_001)), "leader": 1, "leader_epoch": 0,
                "isr": [1], "version": 0}}}}}).encode(),
        "a topic named ..": json.dumps({
            "version": 1, "seq": 1, "online": [], "dirs": {}, "deleting": [],
            "topics": {"..": {"config": {}, "partitions": {}}}}).encode(),
        "over the limit": b" " * (STATE_MAX_BYTES + 1),
    }
    path = str(tmp_path / "log-dirs-state")
    for what, raw in cases.items():
        started = time.monotonic()
        with pytest.raises(StorageError) as info:
            decode_state(raw, path)
        assert str(info.value).startswith(path) and "\n" not in str(info.value), what
        assert len(str(info.value)) < 300, what
        assert time.monotonic() - started < 2, what


def test_a_hostile_id_file_is_read_bounded_and_never_followed(tmp_path):
    huge = tmp_path / "huge"
    huge.mkdir()
    with open(huge / "log-dir-id", "wb") as f:
        f.truncate(1 << 36)  # a sparse 64 GiB: read 33 bytes of it, not all
    linked = tmp_path / "linked"
    linked.mkdir()
    (tmp_path / "elsewhere").write_bytes(b"5\n")
    os.symlink(tmp_path / "elsewhere", linked / "log-dir-id")
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "log-dir-id")  # a FIFO must not hang the reader
    for d in (huge, linked, fifo):
        started = time.monotonic()
        with pytest.raises(StorageError) as info:
            read_dir_id(str(d))
        assert "\n" not in str(info.value)
        assert time.monotonic() - started < 1
    lines = []
    # at start each of them is one offline dir, one line each; nothing written through
    assert assign_dir_ids([str(huge), str(linked), str(fifo)], set(),
                          report=lines.append) == [None, None, None]
    assert len(lines) == 3
    assert (tmp_path / "elsewhere").read_bytes() == b"5\n"
