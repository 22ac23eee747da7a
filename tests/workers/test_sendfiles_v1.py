"""A FETCH v1 answer (replication) whose file is gone by the time its
processor pins it: patched in v1's layout (the handler marks it
``RESP_FETCH_V1``; the processor holds its first chunk as a ``FetchV1Head``)."""

from __future__ import annotations

import collections
import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.protocol import replication as rproto
from hostbroker.workers import envelopes as env
from hostbroker.workers.sendfiles import FetchV1Head, SegmentFiles, pin_answer, release_held
from tests.workers.test_sendfiles import CLOSE, END, segment, wire_bytes


def fetch_v1_answer(parts):
    heads = rproto.encode_fetch_v1_response_parts(
        9, [(t, p, ErrorCode.NONE, 80, 100, 4, piece.length) for t, p, piece in parts])
    out = collections.deque([FetchV1Head(heads[0])])
    for (_, _, piece), head in zip(parts, heads[1:]):
        out.append(piece)
        if head:
            out.append(head)
    out.append(END)
    return out


@pytest.mark.parametrize("copy_max", [0, 90])
@pytest.mark.parametrize("count", [1, 2])
def test_a_gone_file_of_a_v1_answer_is_an_error_code_in_v1_layout(tmp_path, copy_max, count):
    kept = segment(tmp_path / "a_0", b"k" * 50)
    deleted = segment(tmp_path / "b_0", b"d" * 40)
    parts = [("b", 0, env.FilePiece(deleted, 0, 40)), ("a", 0, env.FilePiece(kept, 10, 20))]
    out = fetch_v1_answer(parts[:count])
    os.unlink(deleted)
    os.rmdir(tmp_path / "b_0")
    files = SegmentFiles(limit=4)
    pin_answer(out, files, (END, CLOSE), copy_max)
    frame = wire_bytes(out)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    corr, response = rproto.decode_response(frame[4:], rproto.FetchResponseV1)
    assert corr == 9
    got = [(p.topic, p.error_code, p.high_watermark, p.log_end_offset, p.data_epoch,
            bytes(p.message_set)) for p in response.partitions]
    assert got == [("b", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 80, 100, -1, b""),
                   ("a", ErrorCode.NONE, 80, 100, 4, b"k" * 20)][:count]
    release_held(out)
    files.close()
