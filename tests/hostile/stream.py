"""The fast fuzz: pre-built frames resent, mutated and pipelined on long-lived
connections, every answer checked as it comes.

The long run (``tools/fuzz_broker.py``) needs millions of inputs in bounded
time, so it neither builds each request with the generators nor opens a
connection per request. :class:`Pool` builds, once per seed, a set of encoded
frames of every API with :data:`~tests.hostile.fuzzlib.GENERATORS` (the same
hostile values as the suite: names at every limit, edge integers, arrays
repeated thousands of times, damaged message sets). A batch ``(seed, batch)``
then draws from it with ``batch_rng(seed, batch)``, cheaply:

- a *stream* batch is one connection kept open for hundreds to thousands of
  requests, pipelined (at most ``window`` answers outstanding): pool frames
  with a fresh correlation id, byte-mutated pool frames that still decode
  (a broker must answer those; they stay on the connection), and, as the
  batch's last input, sometimes a frame that ends the connection (one that
  does not decode, or holds more entries than ``request.max.entries``), with
  a METADATA probe behind it or not. A stream batch without such a frame ends
  with the probe; the connection is closed by the client once it is answered.
- a *lockstep* batch (``lockstep``, a fifth of the stream batches by
  default) is a stream batch with one answer outstanding at a time: each
  request reaches its processor alone, with nothing of its connection at the
  handler, which is when a processor answers it itself or sends it straight
  to a writer (METADATA, OFFSETS and FETCH answered there, lone PRODUCEs,
  OFFSET_COMMITs, OFFSET_FETCHes and HEARTBEATs to the writers). Pipelined,
  most requests go through the handlers. Half of the lockstep batches
  (``bursts``) send 2-4 requests at once every 5-60 requests: a burst
  behind a request at a writer marks the connection as pipelining, and the
  lone ones after it take it past the handler again
  (``processor.direct.lone.after``).
- a *framing* batch is the suite's exchange (:func:`fuzzlib.exchange`): 1 to
  5 frames, mostly byte-mutated or with a header that does not exist, and the
  probe, on a new connection.

Each answer is checked as it arrives: in order, decoding as the answer to its
request's API, with its correlation id; an error frame only for the next
request owed an answer (or an acks=0 PRODUCE before it), then the close and
nothing after it; no connection owed answers goes ``STALL_SECONDS`` without a
byte. One input is one request frame sent in full to the broker (the probe
included). A violation names the seed and batch; replaying that batch sends
the same bytes again.
"""

from __future__ import annotations

import errno
import random
import selectors
import socket
import struct
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from hostbroker.config import SETTINGS_BY_KEY
from hostbroker.errors import ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol import groups as group_api
from tests.hostile import fuzzlib
from tests.hostile.fuzzlib import (EXCHANGE_TIMEOUT, PROBE_CORRELATION_ID, FuzzContext,
                                   Violation, batch_rng)

MAX_ENTRIES = SETTINGS_BY_KEY["request.max.entries"].default
# A pool frame is "heavy" past this many bytes or entries: the broker's cost
# of it is a thousand times a light one's, so the run draws them rarely.
HEAVY_BYTES = 64 * 1024
WINDOW = 64  # answers outstanding on one stream connection
# The longest a stream may wait for its next answer byte: a topic creation or
# deletion may wait admin.lock.timeout.ms for the admin lock (and its handler
# with it), then answers BROKER_NOT_AVAILABLE; 5 s more for a loaded machine.
STALL_SECONDS = max(EXCHANGE_TIMEOUT, SETTINGS_BY_KEY["admin.lock.timeout.ms"].default / 1000 + 5)
MAX_UNSENT = 1 << 20  # bytes queued for the socket before no more frames are made
_PROBE = api.encode_request(api.MetadataRequest(()), PROBE_CORRELATION_ID, "probe")


def expectation(frame: bytes) -> tuple[str, int | None, int | None]:
    """:func:`fuzzlib.expectation` of a broker with the default ``request.max.entries``."""
    return fuzzlib.expectation(frame, MAX_ENTRIES)


def with_cid(frame: bytes, cid: int) -> bytes:
    return frame[:8] + struct.pack(">i", cid) + frame[12:]


@dataclass
class Pool:
    """Encoded frames (correlation id 0) of every API, built from ``seed`` alone."""

    light: list[bytes]
    heavy: list[bytes]

    @classmethod
    def build(cls, seed: int, ctx: FuzzContext, per_api: int = 48) -> "Pool":
        rng = random.Random(f"pool:{seed}")
        light, heavy = [], []
        for key in fuzzlib.GENERATORS:
            for _ in range(per_api):
                frame = fuzzlib.request_frame(rng, ctx, 0, key)
                if not ctx.allowed(frame) or expectation(frame)[0] not in ("answer", "none"):
                    continue
                big = len(frame) > HEAVY_BYTES or _entries(frame) > 200
                (heavy if big else light).append(frame)
        return cls(light, heavy)


def _entries(frame: bytes) -> int:
    """How many array entries a decodable frame holds (a bound is enough)."""
    try:
        group_api.decode_any_request(frame[4:], 200)
    except ProtocolError:
        return 201
    return 0


@dataclass
class Tally:
    """What one process sent and got, added up over its batches."""

    batches: int = 0
    requests: int = 0  # inputs: frames sent in full
    answered: int = 0
    error_frames: int = 0
    connections: int = 0
    by_api: Counter = field(default_factory=Counter)

    def add_to(self, totals) -> None:
        """Add these counts to ``totals`` (anything with the same fields)."""
        for name in ("batches", "requests", "answered", "error_frames", "connections"):
            setattr(totals, name, getattr(totals, name) + getattr(self, name))
        totals.by_api.update(self.by_api)


def plan(rng: random.Random, pool: Pool, heavy: float, length: int):
    """The frames of a stream batch, made as they are needed: ``(frame, expectation)``.

    ``length`` inputs that keep the connection, then either the probe or (half
    the time) a frame that ends it, with the probe behind it or not.
    """
    for cid in range(length):
        source = pool.heavy if rng.random() < heavy and pool.heavy else pool.light
        frame = with_cid(rng.choice(source), cid)
        if rng.random() < 0.2:
            frame = fuzzlib.mutate(rng, frame)
            expected = expectation(frame)
            if expected[0] in ("answer", "none"):
                yield frame, expected
            continue
        key = struct.unpack_from(">h", frame, 4)[0]
        acks = api.peek_produce_acks(frame[4:]) if key == api.ApiKey.PRODUCE else None
        yield frame, ("none" if acks == 0 else "answer", cid, key)
    probe = _PROBE, ("answer", PROBE_CORRELATION_ID, api.ApiKey.METADATA)
    if rng.random() < 0.5:
        for _ in range(50):
            frame = fuzzlib.mutate(rng, with_cid(rng.choice(pool.light), length))
            expected = expectation(frame)
            if expected[0] not in ("answer", "none"):
                yield frame, expected
                if rng.random() < 0.7:
                    return
                break
    yield probe


@dataclass(frozen=True)
class Lockstep:
    """How a lockstep batch sends: one answer outstanding at a time, but for
    ``burst`` requests sent at once at every ``every``th (0: never)."""

    every: int = 0
    burst: int = 1


class _Stream:
    """One pipelined connection: sends the plan, checks each answer on arrival."""

    def __init__(self, sock: socket.socket, frames, tally: Tally, window: int):
        self.sock = sock
        self.frames = frames
        self.tally = tally
        self.window = window
        self.every, self.burst = 0, 1  # a lockstep stream's bursts (Lockstep)
        self.count = 0  # frames queued
        self.out = bytearray()
        self.ends: deque[tuple[int, int]] = deque()  # (stream offset where a frame ends, api key)
        self.written = 0
        self.queued = 0
        self.pending: deque[tuple[str, int | None, int | None]] = deque()
        self.owed = 0  # pending entries owed an answer
        self.inbuf = bytearray()
        self.error_seen = False
        self.exhausted = False
        self.reset = False
        self.batch, self.where = -1, ""
        self.fd, self.last, self.events = sock.fileno(), time.monotonic(), selectors.EVENT_READ

    def fill(self) -> None:
        while (not self.exhausted and not self.error_seen and len(self.out) < MAX_UNSENT
               and self.owed < (self.burst if self.every and self.count % self.every < self.burst
                                else self.window)):
            try:
                frame, expected = next(self.frames)
            except StopIteration:
                self.exhausted = True
                return
            self.out += frame
            self.count += 1
            self.queued += len(frame)
            self.ends.append((self.queued, struct.unpack_from(">h", frame, 4)[0]
                              if len(frame) >= 6 else -1))
            self.pending.append(expected)
            self.owed += expected[0] != "none"

    def send(self) -> None:
        try:
            n = self.sock.send(self.out)
        except BlockingIOError:
            return
        except OSError:  # closed by the broker: what it sent is read and judged
            self.out.clear()
            self.exhausted = True
            return
        del self.out[:n]
        self.written += n
        while self.ends and self.ends[0][0] <= self.written:
            self.tally.requests += 1
            self.tally.by_api[self.ends.popleft()[1]] += 1

    def receive(self) -> bool:
        """Read and check what came; False at the close."""
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return True
        except ConnectionResetError:
            self.reset = True
            return False
        if not chunk:
            return False
        self.inbuf += chunk
        at = 0
        view = memoryview(self.inbuf)
        try:
            while len(self.inbuf) - at >= 4:
                (size,) = struct.unpack_from(">i", self.inbuf, at)
                if size < 0:
                    raise Violation(f"an answer frame with size {size}")
                if at + 4 + size > len(self.inbuf):
                    break
                self.check(bytes(view[at + 4:at + 4 + size]))
                at += 4 + size
        finally:
            view.release()
        del self.inbuf[:at]
        return True

    def check(self, frame: bytes) -> None:
        if self.error_seen:
            raise Violation(f"an answer after an error frame: {frame[:16]!r}")
        pending = self.pending
        if fuzzlib.is_refusal(frame, pending):
            cid, code = api.decode_error_frame(frame)
            while pending and pending[0][0] == "none" and pending[0][1] != cid:
                pending.popleft()
            if not pending or pending[0][1] != cid:
                raise Violation(f"error frame {code} for correlation id {cid}, "
                                f"expected one for {list(pending)[:1]}")
            self.error_seen = True
            self.tally.error_frames += 1
            return
        while pending and pending[0][0] == "none":
            pending.popleft()
        if not pending:
            raise Violation(f"an answer with nothing left to answer: {frame[:16]!r}")
        fuzzlib.check_answer(pending.popleft(), frame)
        self.owed -= 1
        self.tally.answered += 1

    def done(self) -> bool:
        """The probe answered and nothing more owed: the client may close."""
        return self.exhausted and not self.out and not self.pending and not self.error_seen

    def closed(self) -> None:
        """The broker closed the connection: was that allowed?"""
        if self.inbuf:
            raise Violation(f"an answer frame cut off at the close ({len(self.inbuf)} bytes "
                            f"of it came)")
        if self.error_seen:
            return
        rest = [p for p in self.pending if p[0] != "none"]
        if rest and rest[0][0] != "silent":
            note = "; the connection was reset (RST), not closed" if self.reset else ""
            raise Violation(f"closed without an answer or error frame for {rest[0]} "
                            f"({len(rest)} requests unanswered){note}")


class BrokerGone(Violation):
    """The broker does not accept connections: no use sending more."""


def framing_frames(rng: random.Random, ctx: FuzzContext, pool: Pool) -> list[bytes]:
    """1 to 5 pool frames, most byte-mutated or with a header that does not exist."""
    frames = []
    for i in range(rng.choice([1, 1, 2, 3, 5])):
        key = rng.randrange(1 << 20) * 16 + i
        frame = with_cid(rng.choice(pool.light), key)
        if rng.random() < 0.7:
            frame = fuzzlib.mutate(rng, frame)
        if rng.random() < 0.1:
            frame = struct.pack(">i", len(frame) - 4) + struct.pack(
                ">hh", rng.choice([-1, 8, 9, 11, 12, 32767, 0]), rng.choice([0, 1, -1])) + frame[8:]
        if ctx.allowed(frame):
            frames.append(frame)
    return frames


@dataclass
class Batches:
    """What the batches of one seed draw from, and how: the pool, the names,
    the sockets, the share of heavy frames and of framing batches."""

    seed: int
    ctx: FuzzContext
    pool: Pool
    uris: list[str]
    heavy: float = 0.002
    framing: float = 0.3
    lockstep: float = 0.2
    bursts: float = 0.5

    def frames(self, batch: int):
        """``(uri, frames, lockstep)`` of batch ``batch``: its socket, its
        ``(frame, expectation)`` and, for a lockstep batch, its
        :class:`Lockstep` (else None)."""
        rng = batch_rng(self.seed, batch)
        uri = rng.choice(self.uris)
        if rng.random() < self.framing:
            sent = framing_frames(rng, self.ctx, self.pool) + [_PROBE]
            return uri, iter([(frame, expectation(frame)) for frame in sent]), None
        lockstep = None
        if rng.random() < self.lockstep:
            lockstep = (Lockstep(rng.randint(5, 60), rng.randint(2, 4))
                        if rng.random() < self.bursts else Lockstep())
        return uri, plan(rng, self.pool, self.heavy, rng.randint(100, 3000)), lockstep

    def open(self, batch: int, tally: Tally, window: int) -> _Stream:
        uri, frames, lockstep = self.frames(batch)
        where = f"seed {self.seed} batch {batch} over {uri}"
        try:
            sock = fuzzlib.connect(uri)
        except OSError as exc:
            kind = BrokerGone if exc.errno in (errno.ECONNREFUSED, errno.ENOENT) else Violation
            raise kind(f"{where}: cannot connect: {exc!r}") from None
        sock.setblocking(False)
        tally.connections += 1
        stream = _Stream(sock, frames, tally, window if lockstep is None else 1)
        if lockstep is not None:
            stream.every, stream.burst = lockstep.every, lockstep.burst
        stream.batch, stream.where = batch, where
        return stream

    def run(self, indices, tally: Tally, *, concurrency: int = 4, quota: int | None = None,
            until: float | None = None, window: int = WINDOW,
            timeout: float = STALL_SECONDS) -> list[tuple[int, str, bool]]:
        """Batches from ``indices``, ``concurrency`` connections at once, until
        ``quota`` inputs or ``until`` (monotonic); returns the violations as
        ``(batch, message, broker gone)``, each ending its batch only."""
        failures: list[tuple[int, str, bool]] = []
        indices = iter(indices)
        selector = selectors.DefaultSelector()
        active: dict[int, _Stream] = {}
        starting = True

        def finish(stream: _Stream, exc: Violation | None = None) -> None:
            selector.unregister(stream.sock)
            stream.sock.close()
            del active[stream.fd]
            tally.batches += 1
            if exc is not None:
                failures.append((stream.batch, f"{stream.where}: {exc}",
                                 isinstance(exc, BrokerGone)))

        try:
            while True:
                while (starting and len(active) < concurrency
                       and (quota is None or tally.requests < quota)
                       and (until is None or time.monotonic() < until)):
                    batch = next(indices, None)
                    if batch is None:
                        starting = False
                        break
                    try:
                        stream = self.open(batch, tally, window)
                    except Violation as exc:
                        tally.batches += 1
                        failures.append((batch, str(exc), isinstance(exc, BrokerGone)))
                        starting = not isinstance(exc, BrokerGone)
                        continue
                    active[stream.fd] = stream
                    selector.register(stream.sock, selectors.EVENT_READ, stream)
                if quota is not None and tally.requests >= quota or \
                        until is not None and time.monotonic() >= until:
                    starting = False
                if not active:
                    return failures
                for stream in list(active.values()):
                    stream.fill()
                    if stream.done():
                        finish(stream)
                        continue
                    events = selectors.EVENT_READ | (selectors.EVENT_WRITE if stream.out else 0)
                    if events != stream.events:
                        selector.modify(stream.sock, events, stream)
                        stream.events = events
                now = time.monotonic()
                for key, mask in selector.select(0.5):
                    stream = key.data
                    try:
                        if mask & selectors.EVENT_WRITE:
                            stream.send()
                        if mask & selectors.EVENT_READ:
                            stream.last = now
                            if not stream.receive():
                                stream.closed()
                                finish(stream)
                    except Violation as exc:
                        finish(stream, exc)
                for stream in list(active.values()):
                    if now - stream.last > timeout:
                        finish(stream, Violation(
                            f"nothing received for {timeout}s with {stream.owed} answers owed "
                            f"(error frame seen: {stream.error_seen})"))
        finally:
            for stream in active.values():
                stream.sock.close()
            selector.close()
