"""The segment files a processor sends FETCH data from (part of ``hb-proc-N``).

Owns: the processor's cache of open segment files (:class:`SegmentFiles`) and
the pinning of an answer's files before its first byte is written
(:func:`pin_answer`), or of their bytes: an answer whose data is small
(``processor.fetch.copy.max.bytes`` at most, all its partitions together)
is read into memory then and sent with its headers in one buffer. A
``sendfile`` per partition and a send per header cost a consumer that
waits for each message, or fetches a few small partitions, more in system
calls than copying their bytes does (docs/benchmarks-history.md, thirteenth round).

Why pin: a handler builds a FETCH answer as header bytes and ``(segment path,
position, length)`` pieces; the processor sends it later, after the answers
before it on the connection. By then a DELETE_TOPIC (or retention) may have
removed the segment. Once any byte of an answer is on the wire its sizes are
promised, so every file of the answer is opened (a descriptor of its own,
which outlives an unlink) *before* its first byte goes out. A piece whose file
is already gone (or holds less than the answer promises: its topic deleted
and created again, a new segment at the same path) is dropped and its
partition answers an error code with an empty set (the header patched, the frame's size lowered): the answer stays
whole and in order, never cut off. Descriptors held: the file pieces of the
one answer being written per connection (at most ``request.max.entries``).
"""

from __future__ import annotations

import collections
import os
from typing import NamedTuple

from hostbroker.errors import ErrorCode
from hostbroker.log import files as log_files
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from hostbroker.workers import envelopes as env


class FetchV1Head(bytes):
    """The first header chunk of a FETCH v1 answer (the handler's
    ``RESP_FETCH_V1``): a piece dropped from it is patched in v1's layout."""

    __slots__ = ()


class HeldPiece(NamedTuple):
    """A FETCH answer's file piece, its file open on ``fd`` (owned by the answer)."""

    fd: int
    position: int
    length: int


class SegmentFiles:
    """Open segment files for sendfile, validated by inode so a path that was
    deleted and created again never serves the old file."""

    def __init__(self, limit: int):
        self.limit = limit
        self.files: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()

    def open(self, path: str) -> int:
        cached = self.files.get(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if cached is None:
                raise
            # deleted (retention) after the answer was computed: a reader that holds
            # the segment open finishes its read from it
            return cached[0]
        if cached is not None:
            if cached[1] == st.st_ino:
                self.files.move_to_end(path)
                return cached[0]
            os.close(cached[0])
            del self.files[path]
        # never through a link, and a FIFO planted at the path does not block the loop
        fd = log_files.open_file(path, os.O_RDONLY)
        self.files[path] = (fd, st.st_ino)
        while len(self.files) > self.limit:
            _, (old, _) = self.files.popitem(last=False)
            os.close(old)
        return fd

    def sweep(self) -> None:
        """Close files that no longer exist (retention), so their space is freed."""
        for path, (fd, ino) in list(self.files.items()):
            try:
                if os.stat(path).st_ino == ino:
                    continue
            except FileNotFoundError:
                pass
            os.close(fd)
            del self.files[path]

    def close(self) -> None:
        for fd, _ in self.files.values():
            os.close(fd)
        self.files.clear()


def pin_answer(out: collections.deque, files: SegmentFiles, end_marks,
               copy_max: int = 0) -> int:
    """Open every file piece of the answer at the head of ``out`` (up to the
    first item in ``end_marks``) as a :class:`HeldPiece`, or, when they hold
    at most ``copy_max`` bytes together, read them into memory and join the
    answer into one buffer; drop those whose file is gone, patching the
    answer to say so for their partitions. Returns the bytes read into
    memory (the connection holds them until they are written)."""
    removed = 0
    files_bytes = 0
    end = 0
    for piece in out:
        if piece in end_marks:  # (by identity: no piece, bytes or file, equals a mark)
            break
        if type(piece) is env.FilePiece:
            files_bytes += piece.length
        end += 1
    copy = 0 < files_bytes <= copy_max
    emptied = (rproto.fetch_v1_part_emptied if out and type(out[0]) is FetchV1Head
               else api.fetch_part_emptied)
    i = 0
    while i < end:
        piece = out[i]
        if type(piece) is env.FilePiece:
            try:
                out[i] = _read(files, piece) if copy else _held(files, piece)
            except OSError as e:
                code = _gone_code(piece.path, e)
                out[i - 1] = emptied(out[i - 1], piece.length, code)
                del out[i]
                end -= 1
                removed += piece.length
                files_bytes -= piece.length
                continue
        i += 1
    if removed:
        out[0] = api.frame_shrunk(out[0], removed)
    if not copy:
        return 0
    whole = b"".join([out.popleft() for _ in range(end)])
    out.appendleft(whole)
    return files_bytes


class _ShorterError(OSError):
    """The file at the path holds less than the answer promises: the partition
    was deleted and created again (a new segment at the same path), or cut."""


def _held(files: SegmentFiles, piece: env.FilePiece) -> HeldPiece:
    fd = os.dup(files.open(piece.path))
    try:
        if os.fstat(fd).st_size < piece.position + piece.length:
            raise _ShorterError(f"{piece.path} is shorter than its answer")
    except OSError:
        os.close(fd)
        raise
    return HeldPiece(fd, piece.position, piece.length)


def _read(files: SegmentFiles, piece: env.FilePiece) -> bytes:
    data = os.pread(files.open(piece.path), piece.length, piece.position)
    if len(data) < piece.length:
        raise _ShorterError(f"{piece.path} is shorter than its answer")
    return data


def _gone_code(path: str, e: OSError) -> ErrorCode:
    if isinstance(e, _ShorterError):
        return ErrorCode.OFFSET_OUT_OF_RANGE  # the log the answer was read from is gone
    if not isinstance(e, FileNotFoundError):
        return ErrorCode.STORAGE_ERROR
    if os.path.isdir(os.path.dirname(path)):
        return ErrorCode.OFFSET_OUT_OF_RANGE  # retention removed the segment
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # its topic was deleted


def release_held(pieces) -> None:
    """Close the descriptors of held pieces not written (a connection closing)."""
    for piece in pieces:
        if isinstance(piece, HeldPiece):
            os.close(piece.fd)
