"""A flush handed to another thread: flush_begin / flush_end."""

import os
import threading

from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog

SMALL = LogConfig(segment_bytes=4096, flush_messages=3, flush_ms=1000)


def make(tmp_path, clock):
    return PartitionLog.create(str(tmp_path), "events", 0, 1, {}, SMALL, clock)


def test_flush_offset_moves_only_at_flush_end(tmp_path, clock):
    log = make(tmp_path, clock)
    assert log.flush_begin() is None  # nothing to flush
    log.append(encode_message_set([b"a", b"b", b"c"]), 3)
    assert log.flush_due(clock())
    fd, offset = log.flush_begin()
    assert offset == log.log_end_offset
    assert not log.flush_due(clock())  # the policy counts again from here
    assert log.flushed_offset == 0  # not durable yet
    log.append(encode_message_set([b"d"]), 1)  # appends go on meanwhile
    threading.Thread(target=lambda: (os.fdatasync(fd), os.close(fd))).run()
    log.flush_end(offset)
    assert log.flushed_offset == offset < log.log_end_offset
    assert log.unflushed_messages == 1
    log.close()


def test_a_roll_during_a_flush_neither_closes_its_fd_nor_moves_back(tmp_path, clock):
    log = make(tmp_path, clock)
    log.append(encode_message_set([b"x" * 1000] * 3), 3)
    fd, offset = log.flush_begin()
    log.append(encode_message_set([b"z"]), 1)  # lands after the flush's offset
    log.append(encode_message_set([b"y" * 1000] * 3), 3)  # rolls: syncs the old segment
    assert len(log.segment_bases) == 2
    roll_point = log.flushed_offset
    assert roll_point > offset
    os.fdatasync(fd)  # still a valid descriptor of the first segment
    os.close(fd)
    log.flush_end(offset)
    assert log.flushed_offset == roll_point  # an older flush never lowers it
    log.close()
