"""A client connection as a processor holds it, and the memory of its buffers.

Owned by the processor process (``processor.py``) that adopted the
connection; no socket I/O here: the processor reads and writes, this module
keeps the books.

Receive side: ``buf`` holds, in its first ``end`` bytes, frames not yet sent
to the handler (normally the start of one incomplete frame). It grows with
the bytes that came, to at most twice them and never past what the frame at
its start needs, so a header claiming 100 MiB costs nothing until the bytes
come; when the frame is sent the buffer goes back to :class:`Buffers`. A
large frame may instead be received straight into its ring record
(``claim``, ``claim_have``, ``claim_put``; ``processor_claims.py``), ``buf``
empty meanwhile.

Answer side: every request has a place (``seq``) in the connection's order.
Answers may come early; :meth:`Connection.order` moves them to ``out`` in
order, each followed by :data:`END`, and :data:`CLOSE` where the connection
is to close. An answer counts as outstanding until its END is written.

Who: ``identity`` (None until known, and not read until then), the
authorizer's decisions kept for it at one ACL generation (``allowed``);
the processor's ``processor_access.py`` keeps them.

Ending: when the processor reaches CLOSE it does not close at once; the
connection *lingers* (``linger_until``, ``linger_left``): EOF sent, nothing
held, its further bytes read and dropped until the client closes or a bound
is reached (``connection.linger.ms``, ``connection.linger.max.bytes``).
"""

from __future__ import annotations

import collections
import ctypes
import socket
import struct

from hostbroker.workers import envelopes as env
from hostbroker.workers.access import KeptDecisions
from hostbroker.workers.sendfiles import release_held

RECV_CHUNK = 256 * 1024  # the processor's receive buffer
DIRECT_AT = 64 * 1024  # a frame this far in is read straight into its own buffer
SPARE_MAX = 2 * 1024 * 1024  # largest buffer kept for the next large frame
TRIM_AFTER = 16 * 1024 * 1024  # bytes of buffers freed before malloc_trim
END = object()  # in Connection.out: the answer before it is completely written
CLOSE = None  # in Connection.out: close the connection here

_SIZE = struct.Struct(">i")
_MIN_FRAME = 8  # api_key, api_version, correlation_id


class Buffers:
    """Connection buffers of one processor: one spare of a useful size kept for
    the next large frame (page faults on a fresh buffer cost more than reusing
    one), and freed memory handed back to the kernel.

    Freed buffers stay resident in glibc's heap (it raises its mmap threshold
    after a large buffer is freed, so later ones come from the heap too);
    ``malloc_trim`` returns the free pages of every arena, once enough was
    freed. Elsewhere than glibc it is a no-op.
    """

    def __init__(self):
        self.spare: bytearray | None = None
        self.freed = 0
        try:
            self._malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            self._malloc_trim = None

    def take(self, size: int) -> bytearray:
        spare = self.spare
        if spare is not None and size >= RECV_CHUNK and len(spare) >= size:
            self.spare = None
            return spare
        return bytearray(size)

    def release(self, buf: bytearray | None) -> None:
        if buf is None:
            return
        if RECV_CHUNK <= len(buf) <= SPARE_MAX and (
                self.spare is None or len(self.spare) < len(buf)):
            buf, self.spare = self.spare, buf
            if buf is None:
                return
        self.freed += len(buf)

    def freed_bytes(self, n: int) -> None:
        """Count memory freed elsewhere (answers of a closed connection)."""
        self.freed += n

    def trim(self) -> None:
        if self.freed >= TRIM_AFTER and self._malloc_trim is not None:
            self._malloc_trim(0)
            self.freed = 0


def memory_bytes(pieces) -> int:
    """Bytes an answer holds in memory (file pieces are sent from the file)."""
    if len(pieces) == 1 and type(pieces[0]) is bytes:
        return len(pieces[0])  # (most answers: one frame)
    return sum(len(p) for p in pieces if not isinstance(p, env.FilePiece))


class Connection:
    __slots__ = ("sock", "fd", "conn_id", "handler", "buf", "end", "next_seq", "send_seq",
                 "written", "at_handler", "queued", "ready", "out", "out_pos", "closing",
                 "reading", "writing", "active", "frame_started", "lingering", "linger_until",
                 "linger_left", "pinned", "at_writer", "writer", "writer_seq", "writer_put",
                 "pipelining", "lone", "behind", "claim", "claim_have", "claim_put", "spilled_seq",
                 "large_next", "watched", "started", "tls", "identity", "decisions",
                 "quota")

    def __init__(self, sock: socket.socket, conn_id: int, handler: int, now: float):
        self.sock = sock
        self.fd = sock.fileno()
        self.conn_id = conn_id
        self.handler = handler
        self.buf: bytearray | None = None  # holds frames not sent to the handler yet...
        self.end = 0  # ...in its first ``end`` bytes
        self.next_seq = 0  # place of the next request in the connection's order
        self.send_seq = 0  # place of the next answer to queue for writing
        self.written = 0  # answers completely written
        self.at_handler = 0  # requests sent to the handler and not answered by it
        self.at_writer = 0  # 1 while a PUT (GROUP_PUT) of it is at a writer (the coordinator)...
        self.writer = -1  # ...that one...
        self.writer_seq = -1  # ...its place in the order...
        self.writer_put: tuple = ()  # ...and (correlation id, its answer should that writer die)
        self.pipelining = False  # it sent more while one was out: no more PUTs or GROUP_PUTs...
        self.lone = 0  # ...until this many in a row came alone (processor.direct.lone.after)
        self.behind = False  # the frame coming in began before an earlier answer came back
        # a large frame received straight into its request-ring record (buf empty
        # meanwhile): the record's frame bytes, and how many have come...
        self.claim: memoryview | None = None
        self.claim_have = 0
        self.claim_put: tuple | None = None  # ...or its message set into a put ring record
        self.spilled_seq = -1  # the frame (next_seq) whose claim was given back
        self.large_next = False  # its last frame was large: read the next one's header alone
        self.queued = 0  # bytes of answers held here (early or not yet written)
        self.ready: dict[int, tuple[list, int]] = {}
        self.out: collections.deque = collections.deque()
        self.out_pos = 0
        self.closing = False  # stop reading; close once queued answers are out
        self.reading = True
        self.writing = False
        self.watched = 0  # what epoll watches its socket for (processor_conns; 0: nothing)
        self.active = now  # last time a byte moved either way
        self.frame_started = 0.0  # when buf began to hold an incomplete frame
        self.lingering = False  # EOF sent: only reading and dropping until the close...
        self.linger_until = 0.0  # ...at this time at the latest...
        self.linger_left = 0  # ...or after this many more bytes
        self.pinned = False  # the answer at the head of out has its files open (sendfiles.py)
        # place -> (api key, monotonic ns its frame came): the processor's API stats
        # (requests and latency) count each when its answer is handed over
        self.started: dict[int, tuple[int, int]] = {}
        self.tls = None  # an ssl:// connection's handshake state (workers/tls.py), else None
        self.identity = None
        # who it is (None until known: not read till then; processor_access.py),
        # and the authorizer's decisions for it at one ACL generation
        self.decisions = KeptDecisions()  # (None: an identity refused everything)
        self.quota = None  # a throttle.Metered while a quota applies to its principal

    @property
    def outstanding(self) -> int:
        """Requests read and not completely answered."""
        return self.next_seq - self.written

    def release(self, buffers: Buffers) -> None:
        """Give up everything held: the frames not sent and the answers not written."""
        buffers.release(self.buf)
        buffers.freed_bytes(self.queued)
        self.buf = None
        self.end = 0
        self.queued = 0
        self.ready.clear()
        self.started.clear()
        release_held(self.out)
        self.out.clear()
        self.pinned = False
        self.out_pos = 0

    def linger(self, until: float, max_bytes: int, buffers: Buffers) -> None:
        """Its last answer is written and EOF sent: hold nothing more, read only
        to drop what still comes, until ``until`` or ``max_bytes`` more bytes."""
        self.release(buffers)
        self.closing = True
        self.lingering = True
        self.linger_until = until
        self.linger_left = max_bytes
        self.reading = True
        self.writing = False

    # -- receive buffer --------------------------------------------------------
    def frame_need(self, max_frame: int) -> int:
        """Bytes the frame at the start of ``buf`` takes in all (0: not known yet,
        or a size the processor refuses)."""
        if self.end < _SIZE.size:
            return 0
        size = _SIZE.unpack_from(self.buf, 0)[0]
        return _SIZE.size + size if _MIN_FRAME <= size <= max_frame else 0

    def reserve(self, n: int, need: int, buffers: Buffers) -> None:
        """Room for ``n`` more bytes in ``buf``: it grows with what came (at most
        twice that, and never past the ``need`` of its frame, when known)."""
        buf, end = self.buf, self.end
        if buf is not None and len(buf) >= end + n:
            return
        size = max(end + n, 2 * end)
        if need:
            size = max(end + n, min(size, need))
        grown = buffers.take(size)
        if end:
            grown[:end] = memoryview(buf)[:end]
        buffers.release(buf)
        self.buf = grown

    def append(self, data, need: int, buffers: Buffers) -> None:
        self.reserve(len(data), need, buffers)
        self.buf[self.end:self.end + len(data)] = data
        self.end += len(data)

    def consumed(self, used: int, buffers: Buffers) -> None:
        """The first ``used`` bytes went to the handler: keep the rest at the
        front, in a smaller buffer when it is much smaller than this one."""
        left = self.end - used
        buf = self.buf
        if not left:
            buffers.release(buf)
            self.buf = None
        elif len(buf) <= max(2 * left, RECV_CHUNK):
            with memoryview(buf) as view:
                view[:left] = view[used:self.end]
        else:
            self.buf = bytearray(memoryview(buf)[used:self.end])
            buffers.release(buf)
        self.end = left

    # -- answers ---------------------------------------------------------------
    def order(self, seq: int, pieces: list, flags: int) -> None:
        """Take the answer for place ``seq``; move every answer whose turn has
        come to ``out``."""
        self.queued += memory_bytes(pieces)
        out = self.out
        if seq == self.send_seq and not self.ready and not flags:
            self.send_seq += 1  # its turn, and none waiting behind it
            out.extend(pieces)
            out.append(END)
            return
        self.ready[seq] = (pieces, flags)
        while self.send_seq in self.ready:
            pieces, flags = self.ready.pop(self.send_seq)
            self.send_seq += 1
            if flags & env.RESP_CLOSE_NOW:
                out.append(CLOSE)
                break
            out.extend(pieces)
            out.append(END)
            if flags & env.RESP_CLOSE_AFTER:
                out.append(CLOSE)
                break
