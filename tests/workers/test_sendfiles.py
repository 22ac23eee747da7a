"""An answer's files are pinned before its first byte: a segment removed
before that turns into an error code for its partition, never a cut-off frame;
one removed after that is still sent whole. An answer whose data is small
(``copy_max``) is read into memory then, and sent as the same bytes."""

import collections
import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.workers import envelopes as env
from hostbroker.workers.sendfiles import HeldPiece, SegmentFiles, pin_answer, release_held

END, CLOSE = object(), None


def fetch_answer(parts):
    """``out`` as the processor holds it: header chunks and file pieces alternating."""
    heads = api.encode_fetch_response_parts(
        7, [(t, p, ErrorCode.NONE, 100, piece.length) for t, p, piece in parts])
    out = collections.deque([heads[0]])
    for (_, _, piece), head in zip(parts, heads[1:]):
        out.append(piece)
        if head:
            out.append(head)
    out.append(END)
    return out


def wire_bytes(out):
    """What the processor would write, reading held pieces from their files."""
    data = b""
    for piece in out:
        if piece is END:
            break
        if isinstance(piece, HeldPiece):
            data += os.pread(piece.fd, piece.length, piece.position)
        else:
            data += piece
    return data


def segment(dirpath, data):
    os.makedirs(dirpath, exist_ok=True)
    path = os.path.join(dirpath, "00000000000000000000.kafka")
    with open(path, "wb") as f:
        f.write(data)
    return path


# pinned as sendfile pieces, or read into memory (their 90 bytes within copy_max)
copy_maxes = pytest.mark.parametrize("copy_max", [0, 90])


@copy_maxes
def test_gone_files_become_error_codes_and_the_frame_stays_whole(tmp_path, copy_max):
    kept = segment(tmp_path / "a_0", b"k" * 50)
    retained = segment(tmp_path / "a_1", b"r" * 30)
    deleted = segment(tmp_path / "b_0", b"d" * 40)
    out = fetch_answer([("a", 0, env.FilePiece(kept, 10, 20)),
                        ("a", 1, env.FilePiece(retained, 0, 30)),
                        ("b", 0, env.FilePiece(deleted, 0, 40))])
    os.unlink(retained)  # retention: the partition dir is still there
    os.unlink(deleted)
    os.rmdir(tmp_path / "b_0")  # the topic is gone
    files = SegmentFiles(limit=4)
    assert pin_answer(out, files, (END, CLOSE), copy_max) == (20 if copy_max else 0)
    frame = wire_bytes(out)
    (size,) = api._SIZE.unpack_from(frame, 0)
    assert size == len(frame) - 4
    corr, response = api.decode_response(api.ApiKey.FETCH, frame[4:])
    assert corr == 7
    got = [(p.topic, p.partition, p.error_code, bytes(p.message_set)) for p in response.partitions]
    assert got == [("a", 0, ErrorCode.NONE, b"k" * 20),
                   ("a", 1, ErrorCode.OFFSET_OUT_OF_RANGE, b""),
                   ("b", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, b"")]
    release_held(out)
    files.close()


def test_a_pinned_file_is_sent_whole_after_it_is_unlinked(tmp_path):
    path = segment(tmp_path / "t_0", b"x" * 64)
    out = fetch_answer([("t", 0, env.FilePiece(path, 0, 64))])
    files = SegmentFiles(limit=1)
    pin_answer(out, files, (END, CLOSE))
    os.unlink(path)
    files.sweep()  # the cache lets go of the deleted file; the answer keeps its own
    corr, response = api.decode_response(api.ApiKey.FETCH, wire_bytes(out)[4:])
    assert bytes(response.partitions[0].message_set) == b"x" * 64
    (held,) = [p for p in out if isinstance(p, HeldPiece)]
    release_held(out)
    try:
        os.fstat(held.fd)
    except OSError:
        pass
    else:
        raise AssertionError("release_held left the answer's file open")
    files.close()


@copy_maxes
def test_a_path_that_now_holds_a_shorter_file_is_out_of_range(tmp_path, copy_max):
    """The topic deleted and created again: a new, shorter segment at the same path."""
    path = segment(tmp_path / "t_0", b"o" * 100)
    out = fetch_answer([("t", 0, env.FilePiece(path, 40, 60))])
    os.unlink(path)
    segment(tmp_path / "t_0", b"n" * 10)
    files = SegmentFiles(limit=1)
    pin_answer(out, files, (END, CLOSE), copy_max)
    frame = wire_bytes(out)
    assert api._SIZE.unpack_from(frame, 0)[0] == len(frame) - 4
    corr, response = api.decode_response(api.ApiKey.FETCH, frame[4:])
    (part,) = response.partitions
    assert (part.error_code, bytes(part.message_set)) == (ErrorCode.OFFSET_OUT_OF_RANGE, b"")
    assert not [p for p in out if isinstance(p, HeldPiece)]
    files.close()


def test_a_small_answer_is_read_into_one_buffer_and_a_large_one_is_not(tmp_path):
    """Within copy_max, all its partitions together: one bytes piece, the same
    bytes the file pieces would send, and only the head answer; past it,
    every piece held for sendfile."""
    a = segment(tmp_path / "a_0", bytes(range(100)))
    b = segment(tmp_path / "a_1", b"b" * 100)
    parts = [("a", 0, env.FilePiece(a, 5, 40)), ("a", 1, env.FilePiece(b, 0, 50))]
    files = SegmentFiles(limit=4)
    sent = fetch_answer(parts)
    assert pin_answer(sent, files, (END, CLOSE), 89) == 0
    assert len([p for p in sent if isinstance(p, HeldPiece)]) == 2
    expected = wire_bytes(sent)
    release_held(sent)
    copied = fetch_answer(parts)
    behind = fetch_answer(parts)
    copied.extend(behind)
    assert pin_answer(copied, files, (END, CLOSE), 90) == 90
    assert copied[0] == expected and copied[1] is END
    assert list(copied)[2:] == list(behind)  # the next answer is left as it was
    os.unlink(a)  # read already: what was pinned is sent
    assert wire_bytes(copied) == expected
    files.close()


@pytest.mark.parametrize("copy_max", [0, 1 << 20])
def test_a_fifo_or_a_link_at_a_segment_path_is_an_error_code_never_a_hang(tmp_path, copy_max):
    victim = tmp_path / "victim"
    victim.write_bytes(b"v" * 100)
    fifo, link = str(tmp_path / "fifo.log"), str(tmp_path / "link.log")
    os.mkfifo(fifo)
    os.symlink(victim, link)
    out = fetch_answer([("t", 0, env.FilePiece(fifo, 0, 10)),
                        ("t", 1, env.FilePiece(link, 0, 10))])
    pin_answer(out, SegmentFiles(8), (END, CLOSE), copy_max)
    assert not any(isinstance(p, (env.FilePiece, HeldPiece)) for p in out)
