"""The high watermark checkpoint of a log dir: ``replication-offset-checkpoint``.

Owns: the file that records, for every replica of a replicated topic in a log
dir, its high watermark (the offset below which every in-sync replica held
its data), so that a broker that restarts keeps serving consumers up to there
at once instead of from 0 (docs/storage.md, "Replicas"). Pure file format and
I/O; the writer of the log dir writes it with its recovery checkpoint and at
shutdown. The format is the recovery checkpoint's (``logdir.py``)::

    0                      version
    2                      how many partitions follow
    orders 0 1048576       topic, partition, high watermark
    orders 1 524288

A missing file is no partition; a file that is unreadable, garbled or too long
is ignored with one line: every high watermark starts at 0 (consumers wait
for the ISR to be caught up again; nothing is lost, the log is untouched).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from hostbroker.log.files import describe, read_file, write_file_atomically
from hostbroker.log.logdir import (MAX_CHECKPOINT_BYTES, PartitionKey, format_recovery_points,
                                   parse_recovery_points)

log = logging.getLogger(__name__)

HW_CHECKPOINT_FILE = "replication-offset-checkpoint"


def read_high_watermarks(log_dir: str) -> tuple[dict[PartitionKey, int], str | None]:
    """The high watermarks recorded in ``log_dir``, and the one-line problem
    when the file was there but could not be used (then: none)."""
    path = os.path.join(log_dir, HW_CHECKPOINT_FILE)
    try:
        data = read_file(path, MAX_CHECKPOINT_BYTES)
        if len(data) > MAX_CHECKPOINT_BYTES:
            raise ValueError(f"longer than {MAX_CHECKPOINT_BYTES} bytes")
        return parse_recovery_points(data), None
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        problem = describe(exc)
    except (ValueError, UnicodeDecodeError) as exc:
        problem = str(exc)
    return {}, f"ignoring {path} ({problem}); every high watermark starts at 0"


def format_high_watermarks(marks: Mapping[PartitionKey, int]) -> bytes:
    return format_recovery_points(marks)


def write_high_watermarks(log_dir: str, data: bytes) -> None:
    """Replace the file atomically with ``data`` (:func:`format_high_watermarks`).
    Raises OSError when the disk fails."""
    write_file_atomically(os.path.join(log_dir, HW_CHECKPOINT_FILE), data)
