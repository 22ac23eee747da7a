"""The hostile-client fuzz: seeded request generators, byte mutations, and the
exchange of one batch of frames with a real broker, checked for order and
encodability.

Shared by the standing suite (``tests/hostile/``) and the long run
(``tools/fuzz_broker.py``). Everything random comes from ``random.Random``
seeded by :func:`batch_rng` ``(seed, batch)``, so a failing batch is replayed
from those two numbers alone.

What one batch is: a few request frames sent back to back on a new
connection (TCP or Unix), then a METADATA probe, read until the probe's answer.
The broker must answer in order, every answer decoding as the answer to its
request; a request the broker refuses (undecodable, or over a limit) gets an
error frame carrying its correlation id and then the close. Nothing may hang:
the whole exchange ends (EOF) within a deadline.
"""

from __future__ import annotations

import gzip
import random
import socket
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field

from hostbroker.client.connection import parse_uri
from hostbroker.errors import ProtocolError
from hostbroker.log.message import CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set
from hostbroker.protocol import api
from hostbroker.protocol import groups as group_api

_GROUP_KEYS = frozenset(group_api.GroupApiKey)  # served by the broker's group coordinator

DEFAULT_SEED = 20261126
# Settings of a broker the fuzz runs against (all existing settings): long
# polls capped so that no exchange legitimately waits long, topics small.
# Group sessions and rebalances capped the same way: a JOIN_GROUP waits at most
# the rebalance timeout, and the members the fuzz makes expire within 2 s.
FUZZ_BROKER_SETTINGS = {"fetch.max.wait.ms": 1000, "max.partitions.per.topic": 64,
                        "group.max.session.timeout.ms": 2000,
                        "group.max.rebalance.timeout.ms": 1000}
EXCHANGE_TIMEOUT = 10.0  # seconds for one batch to be answered and closed
PROBE_CORRELATION_ID = 0x7FFF_FFF0
# The most bytes one generated frame may have (the broker allows 100 MiB; the
# suite's time budget does not).
MAX_FRAME_BYTES = 6 * 1024 * 1024

INT16_EDGES = (0, 1, -1, 2, -2, 255, 256, 32767, -32768, 32766)
INT32_EDGES = (0, 1, -1, 2, 7, 1000, 65535, 65536, 1 << 20, 2**31 - 1, -(2**31), 2**31 - 2)
INT64_EDGES = (0, 1, -1, -2, 2**63 - 1, -(2**63), 2**32, 1 << 40)
# String lengths around every file-name and wire limit: 255-byte names, the
# 232-249 characters whose derived names overflow 255, int16 string lengths.
LONG_LENGTHS = (200, 232, 240, 249, 250, 255, 256, 4096, 32759, 32766, 32767)
REPEATS = (1000, 2200, 5000, 20000)
CONFIG_KEYS = ("retention.ms", "retention.bytes", "segment.bytes", "flush.messages",
               "flush.ms", "max.message.bytes", "cleanup.policy", "x", "")


# A zlib stream of 1 MiB of zeros (1 KiB): a small bomb inside a wrapper.
_INFLATES_TO_1_MIB = zlib.compress(bytes(1 << 20))


def batch_rng(seed: int, batch: int) -> random.Random:
    """The generator of batch ``batch`` of the run seeded ``seed``."""
    return random.Random(f"hostile:{seed}:{batch}")


@dataclass
class FuzzContext:
    """Names the generators aim at: topics with data, and names never to touch.

    ``protected`` strings (the witness topic and group) are never sent: a
    frame holding one is dropped before it goes out, so the fuzz cannot
    legitimately delete or overwrite what the invariants check.
    """

    topics: list[str]
    partitions: int
    protected: tuple[bytes, ...] = ()
    groups: list[str] = field(default_factory=lambda: ["fz-group", "g", ""])

    def allowed(self, frame: bytes) -> bool:
        return not any(p in frame for p in self.protected)


# Values.


def int16(rng: random.Random) -> int:
    return rng.choice(INT16_EDGES) if rng.random() < 0.5 else rng.randint(-(2**15), 2**15 - 1)


def int32(rng: random.Random, small: int = 8) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.randint(0, small)
    return rng.choice(INT32_EDGES) if r < 0.8 else rng.randint(-(2**31), 2**31 - 1)


def int64(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.randint(0, 4096)
    return rng.choice(INT64_EDGES) if r < 0.8 else rng.randint(-(2**63), 2**63 - 1)


def long_text(rng: random.Random) -> str:
    """A string whose UTF-8 is one of LONG_LENGTHS bytes (or as near as the characters allow)."""
    length = rng.choice(LONG_LENGTHS)
    char = rng.choice(["a", "z", "é", "日", "-", "."])
    text = char * (length // len(char.encode()))
    return text[:32767] if len(text.encode()) <= 32767 else char * (32767 // len(char.encode()))


def name(rng: random.Random, ctx: FuzzContext) -> str:
    r = rng.random()
    if r < 0.45 and ctx.topics:
        return rng.choice(ctx.topics)
    if r < 0.6:
        return f"fz-{rng.randrange(64)}"
    if r < 0.75:
        return long_text(rng)
    return rng.choice(["", ".", "..", "a/b", "../x", "\x00", "__consumer_offsets", "__x",
                       "t" * 249 + ".deleted-1", "日本", "\udcff".encode(errors="surrogatepass")
                       .decode(errors="replace"), "x" * rng.randint(1, 40), "CON", " "])


def nullable(rng: random.Random, ctx: FuzzContext) -> str | None:
    return None if rng.random() < 0.1 else name(rng, ctx)


def count(rng: random.Random) -> int:
    """How many entries a repeated field gets: mostly few, sometimes thousands."""
    r = rng.random()
    if r < 0.85:
        return rng.randint(0, 4)
    if r < 0.95:
        return rng.randint(5, 200)
    return rng.choice(REPEATS)


def message_set(rng: random.Random) -> bytes:
    """A valid, damaged or hostile message set."""
    payloads = [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(0, 5))]
    kind = rng.randrange(10)
    if kind <= 3:
        return encode_message_set(payloads)
    if kind == 4:
        return encode_message_set(payloads or [b"x"], codec=rng.choice([CODEC_GZIP, CODEC_SNAPPY]))
    if kind == 5:  # a wrapper whose payload does not inflate, or inflates to garbage
        inner = rng.choice([rng.randbytes(32), gzip.compress(rng.randbytes(64)),
                            _INFLATES_TO_1_MIB])
        return encode_message(inner, codec=rng.choice([CODEC_GZIP, CODEC_SNAPPY]))
    valid = bytearray(encode_message_set(payloads or [b"payload"]))
    if kind == 6:  # one byte changed (CRC, length, magic or attributes)
        valid[rng.randrange(len(valid))] ^= rng.randint(1, 255)
    elif kind == 7:  # an entry claiming a huge or negative length
        valid[0:4] = struct.pack(">i", rng.choice([2**31 - 1, -1, 0, 5, 1 << 30, 1_000_001]))
    elif kind == 8:  # cut mid-entry
        del valid[rng.randrange(len(valid)):]
    else:
        return rng.randbytes(rng.randint(0, 100))
    return bytes(valid)


# Requests.


def _repeat(rng: random.Random, make) -> tuple:
    n = count(rng)
    if n > 200:  # repeated thousands of times: one entry over and over
        one = make()
        return (one,) * n
    return tuple(make() for _ in range(n))


def _partition(rng: random.Random, ctx: FuzzContext) -> int:
    return rng.randrange(ctx.partitions) if rng.random() < 0.7 else int32(rng)


def produce(rng, ctx):
    acks = rng.choice([1, 1, -1, 0, 0]) if rng.random() < 0.8 else int16(rng)
    entries = _repeat(rng, lambda: api.ProducePartition(name(rng, ctx), _partition(rng, ctx),
                                                        message_set(rng)))
    return api.ProduceRequest(acks, rng.choice([0, 100, 1000, 5000]), entries)


def fetch(rng, ctx):
    max_bytes = lambda: rng.choice([0, 1, 100, 4096, 1 << 20, 2**31 - 1, -1]) \
        if rng.random() < 0.7 else int32(rng)  # noqa: E731
    entries = _repeat(rng, lambda: api.FetchPartition(name(rng, ctx), _partition(rng, ctx),
                                                      int64(rng), max_bytes()))
    max_wait = rng.choice([0, 0, 10, 100]) if rng.random() < 0.9 else int32(rng)
    return api.FetchRequest(max_wait, int32(rng, 1024), entries)


def offsets(rng, ctx):
    time_ = rng.choice([-1, -2, 0, 4_000_000_000_000]) if rng.random() < 0.6 else int64(rng)
    return api.OffsetsRequest(name(rng, ctx), _partition(rng, ctx), time_, int32(rng, 16))


def metadata(rng, ctx):
    return api.MetadataRequest(_repeat(rng, lambda: name(rng, ctx)))


def create_topic(rng, ctx):
    configs = tuple(api.TopicConfigEntry(rng.choice(CONFIG_KEYS) if rng.random() < 0.7
                                         else name(rng, ctx),
                                         rng.choice(["1", "-1", "0", "abc", "1" * 40, ""])
                                         if rng.random() < 0.7 else long_text(rng))
                    for _ in range(count(rng) if rng.random() < 0.3 else rng.randint(0, 2)))
    partitions = rng.choice([1, 1, 2, 4, 0, -1, 64, 65, 2**31 - 1]) if rng.random() < 0.9 \
        else int32(rng)
    topic = f"fz-{rng.randrange(64)}" if rng.random() < 0.5 else name(rng, ctx)
    return api.CreateTopicRequest(topic, partitions, configs)


def delete_topic(rng, ctx):
    topic = f"fz-{rng.randrange(64)}" if rng.random() < 0.5 else name(rng, ctx)
    return api.DeleteTopicRequest(topic)


def _group(rng, ctx) -> str:
    return rng.choice(ctx.groups) if rng.random() < 0.7 else name(rng, ctx)


def offset_commit(rng, ctx):
    metadata_ = lambda: (None if rng.random() < 0.2 else  # noqa: E731
                         "m" * rng.choice([0, 10, 4096, 32767]))
    entries = _repeat(rng, lambda: api.OffsetCommitPartition(
        name(rng, ctx), _partition(rng, ctx), int64(rng), metadata_()))
    return api.OffsetCommitRequest(_group(rng, ctx), entries)


def offset_fetch(rng, ctx):
    entries = _repeat(rng, lambda: api.OffsetFetchPartition(name(rng, ctx), _partition(rng, ctx)))
    return api.OffsetFetchRequest(_group(rng, ctx), entries)


# The group APIs (and OFFSET_COMMIT version 1). Member ids are the broker's to
# give (client id, "-", 32 hex digits): a generated one is a guess, so these
# mostly reach the refusals; tests/hostile/test_groups.py takes real members
# through the rest.


def _member(rng, ctx, allow_empty: bool = False) -> str:
    r = rng.random()
    if allow_empty and r < 0.6:
        return ""
    if r < 0.75:
        return f"fuzz-{rng.randbytes(16).hex()}"
    return name(rng, ctx)


def _generation(rng) -> int:
    return rng.randint(0, 3) if rng.random() < 0.7 else int32(rng)


def _timeout_ms(rng) -> int:
    r = rng.random()
    if r < 0.6:
        return rng.choice([500, 1000, 2000])
    return rng.choice([0, -1, 1, 499, 2001, 300_000, 2**31 - 1]) if r < 0.8 else int32(rng)


def join_group(rng, ctx):
    def subscribed():
        streams = rng.randint(1, 4) if rng.random() < 0.8 else \
            rng.choice([0, -1, 1024, 1025, 2**31 - 1])
        return group_api.SubscribedTopic(name(rng, ctx), streams)

    topics = _repeat(rng, subscribed) if rng.random() < 0.5 else \
        tuple(subscribed() for _ in range(rng.randint(1, 3)))
    return group_api.JoinGroupRequest(_group(rng, ctx), _timeout_ms(rng), _timeout_ms(rng),
                                      _member(rng, ctx, allow_empty=True), topics)


def sync_group(rng, ctx):
    return group_api.SyncGroupRequest(_group(rng, ctx), _generation(rng), _member(rng, ctx))


def heartbeat(rng, ctx):
    return group_api.HeartbeatRequest(_group(rng, ctx), _generation(rng), _member(rng, ctx))


def leave_group(rng, ctx):
    return group_api.LeaveGroupRequest(_group(rng, ctx), _member(rng, ctx))


def describe_group(rng, ctx):
    return group_api.DescribeGroupRequest(_group(rng, ctx))


def list_groups(rng, ctx):
    return group_api.ListGroupsRequest()


def offset_commit_v1(rng, ctx):
    """A fenced commit (version 1) half the time, else version 0."""
    if rng.random() < 0.5:
        return offset_commit(rng, ctx)
    plain = offset_commit(rng, ctx)
    outside = rng.random() < 0.4
    return group_api.OffsetCommitRequestV1(
        plain.group, group_api.NO_GENERATION if outside else _generation(rng),
        "" if outside and rng.random() < 0.8 else _member(rng, ctx), plain.partitions)


GENERATORS = {
    api.ApiKey.PRODUCE: produce,
    api.ApiKey.FETCH: fetch,
    api.ApiKey.OFFSETS: offsets,
    api.ApiKey.METADATA: metadata,
    api.ApiKey.CREATE_TOPIC: create_topic,
    api.ApiKey.DELETE_TOPIC: delete_topic,
    api.ApiKey.OFFSET_COMMIT: offset_commit_v1,
    api.ApiKey.OFFSET_FETCH: offset_fetch,
    group_api.GroupApiKey.JOIN_GROUP: join_group,
    group_api.GroupApiKey.SYNC_GROUP: sync_group,
    group_api.GroupApiKey.HEARTBEAT: heartbeat,
    group_api.GroupApiKey.LEAVE_GROUP: leave_group,
    group_api.GroupApiKey.DESCRIBE_GROUP: describe_group,
    group_api.GroupApiKey.LIST_GROUPS: list_groups,
}


def encode(request: api.Request, correlation_id: int, client_id: str | None = "fuzz") -> bytes:
    """The frame of ``request``; a value that does not fit its wire type is cut to fit."""
    try:
        return api.encode_request(request, correlation_id, client_id)
    except ValueError:  # cannot be put on the wire at all: an all-topics METADATA instead
        return api.encode_request(api.MetadataRequest(()), correlation_id, client_id)


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """A frame (size prefix included) with a few body bytes changed; the size is made right again."""
    body = bytearray(frame[4:])
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        at = rng.randrange(max(len(body), 1))
        if kind == 0 and body:
            body[at] ^= rng.randint(1, 255)
        elif kind == 1:
            del body[at:at + rng.randint(1, 8)]
        elif kind == 2:
            body[at:at] = rng.randbytes(rng.randint(1, 8))
        elif kind == 3:
            body[at:at + 4] = struct.pack(">i", rng.choice(INT32_EDGES + (-2, 255)))
        else:
            body[at:at + 2] = struct.pack(">h", rng.choice(INT16_EDGES))
    return struct.pack(">i", len(body)) + bytes(body)


def request_frame(rng: random.Random, ctx: FuzzContext, correlation_id: int,
                  api_key: int | None = None) -> bytes:
    """One generated request frame: well-formed with hostile values, or byte-mutated."""
    key = api_key if api_key is not None else rng.choice(list(GENERATORS))
    frame = encode(GENERATORS[key](rng, ctx), correlation_id,
                   rng.choice(["fuzz", "", None, long_text(rng)]) if rng.random() < 0.1 else "fuzz")
    if rng.random() < 0.25:
        frame = mutate(rng, frame)
    if rng.random() < 0.03:  # header fields themselves: unknown keys, versions, another
        # API's key on this body
        frame = struct.pack(">i", len(frame) - 4) + struct.pack(
            ">hh", rng.choice([-1, 14, 99, 32767, key, rng.choice(list(GENERATORS))]),
            rng.choice([0, 1, 2, -1])) + frame[8:]
    if len(frame) > MAX_FRAME_BYTES:
        frame = encode(api.MetadataRequest(()), correlation_id)
    return frame


def batch_frames(rng: random.Random, ctx: FuzzContext, api_key: int | None = None,
                 size: int | None = None) -> list[bytes]:
    """The request frames of one batch (without the probe), protected names left out."""
    frames = []
    for i in range(size if size is not None else rng.choice([1, 1, 2, 3, 5])):
        frame = request_frame(rng, ctx, rng.randrange(1 << 20) * 16 + i, api_key)
        if ctx.allowed(frame):
            frames.append(frame)
    return frames


# The exchange.


class Violation(AssertionError):
    """An invariant broken; the message says which and how to reproduce it."""


def expectation(frame: bytes, max_entries: int | None = None) -> tuple[str, int | None, int | None]:
    """What the broker must do with ``frame`` (size prefix included), its
    arrays limited to ``max_entries`` items (the broker's ``request.max.entries``).

    ``("answer", cid, api_key)``: a response (or, over a limit, an error frame
    and the close); ``("none", cid, 0)``: an acks=0 PRODUCE, no answer unless
    an error frame and the close; ``("error", cid, None)``: undecodable, an
    error frame and the close; ``("silent", None, None)``: no correlation id,
    the close alone.
    """
    body = frame[4:]
    cid = api.peek_correlation_id(body)
    if cid is None:
        return "silent", None, None
    try:
        header, request = group_api.decode_any_request(body, max_entries)
    except ProtocolError:
        return "error", cid, None
    if header.api_key in _GROUP_KEYS:
        return "answer", cid, header.api_key
    if header.api_key == api.ApiKey.PRODUCE and request.acks == 0:
        return "none", cid, 0
    return "answer", cid, header.api_key


@dataclass
class Outcome:
    answered: int  # responses received
    error_frames: int
    closed_early: bool  # the broker closed before answering the probe (after an error frame)
    seconds: float


class _Scan:
    """Walks the whole frames of a growing answer stream once each, against
    the expectations ``owed`` of the requests sent (to tell an error frame
    from a 6-byte answer)."""

    def __init__(self, owed: list) -> None:
        self.at = 0
        self.owed = owed
        self.next = 0  # the first expectation not yet answered
        self.probe = False
        self.error = False

    def feed(self, data: bytearray) -> None:
        while len(data) - self.at >= 4:
            (size,) = struct.unpack_from(">i", data, self.at)
            if size < 0 or self.at + 4 + size > len(data):
                return
            frame = bytes(data[self.at + 4:self.at + 4 + size])
            if is_refusal(frame, self.owed[self.next:]):
                self.error = True
            else:
                while self.next < len(self.owed) and self.owed[self.next][0] == "none":
                    self.next += 1
                self.next += 1
            self.probe = size >= 4 and struct.unpack_from(">i", frame)[0] == PROBE_CORRELATION_ID
            self.at += 4 + size


def _read_all(sock: socket.socket, timeout: float, owed: list) -> tuple[bytes, bool]:
    """What the broker sends until it has answered the probe or closed the
    connection, and whether the close was a reset (TCP RST); ``owed`` holds
    the expectations of the frames sent, the probe's last.

    After an error frame the close must follow (within the deadline too).
    """
    deadline = time.monotonic() + timeout
    data = bytearray()
    scan = _Scan(owed)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Violation(f"no answer to the probe and no close within {timeout}s "
                            f"({len(data)} bytes received, error frame: {scan.error})")
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return bytes(data), True
        except socket.timeout:
            continue
        if not chunk:
            return bytes(data), False
        data += chunk
        scan.feed(data)
        if scan.probe and not scan.error:
            return bytes(data), False


def split_frames(data: bytes) -> list[bytes]:
    frames, at = [], 0
    while at < len(data):
        if len(data) - at < 4:
            raise Violation(f"a partial size prefix at the end of the answers ({len(data) - at} bytes)")
        (size,) = struct.unpack_from(">i", data, at)
        if size < 0 or at + 4 + size > len(data):
            raise Violation(f"an answer frame of {size} bytes cut off at the close")
        frames.append(data[at + 4:at + 4 + size])
        at += 4 + size
    return frames


def is_refusal(frame: bytes, owed) -> bool:
    """Whether an answer ``frame`` is an error frame, given the expectations
    still ``owed`` in order (those of acks=0 PRODUCEs included).

    A 6-byte frame is an error frame unless it carries the correlation id of
    a HEARTBEAT or LEAVE_GROUP owed next: then it is that request's answer,
    but for the codes only an error frame carries (docs/spec/groups.md).
    """
    if not api.is_error_frame(frame):
        return False
    cid, code = api.decode_error_frame(frame)
    for kind, want, key in owed:
        if kind == "none" and want != cid:
            continue  # no answer owed; an error frame may still name it
        return not (kind == "answer" and want == cid and key in group_api.SHORT_ANSWER_KEYS
                    and code not in group_api.ERROR_FRAME_ONLY_CODES)
    return True


def check_answer(expected: tuple[str, int | None, int | None], frame: bytes) -> None:
    """Raise Violation unless ``frame`` is the answer owed to the request ``expected`` of."""
    kind, cid, api_key = expected
    if kind != "answer":
        raise Violation(f"request cid {cid} ({kind}) was answered instead of refused")
    try:
        if api_key in _GROUP_KEYS:
            got_cid, _ = group_api.decode_group_response(api_key, 0, frame)
        else:
            got_cid, _ = api.decode_response(api_key, frame)
    except ProtocolError as exc:
        raise Violation(f"the answer to api {api_key} (cid {cid}) does not decode: {exc}")
    if got_cid != cid:
        raise Violation(f"answer for cid {got_cid} where cid {cid} ({api_key}) was next")


def check_answers(sent: list[bytes], received: list[bytes]) -> Outcome:
    """Match answers to requests in order (see the module docstring); raise Violation."""
    pending = [expectation(f) for f in sent]
    at, answered, errors = 0, 0, 0
    for index, frame in enumerate(received):
        if is_refusal(frame, pending[at:]):
            cid, code = api.decode_error_frame(frame)
            while at < len(pending) and pending[at][0] == "none" and pending[at][1] != cid:
                at += 1
            if at == len(pending) or pending[at][1] != cid:
                raise Violation(f"error frame {code} for correlation id {cid}, "
                                f"expected one for {pending[at:at + 1]}")
            if index != len(received) - 1:
                raise Violation(f"{len(received) - index - 1} answers after an error frame")
            return Outcome(answered, errors + 1, True, 0.0)
        while at < len(pending) and pending[at][0] == "none":
            at += 1
        if at == len(pending):
            raise Violation(f"an answer with nothing left to answer: {frame[:16]!r}")
        check_answer(pending[at], frame)
        answered += 1
        at += 1
    rest = [p for p in pending[at:] if p[0] != "none"]
    if rest and rest[0][0] != "silent":
        raise Violation(f"closed without an answer or error frame for {rest[0]} "
                        f"({len(rest)} requests unanswered)")
    return Outcome(answered, errors, bool(rest), 0.0)


def connect(uri: str, timeout: float = 5.0) -> socket.socket:
    family, address = parse_uri(uri)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(address)
    return sock


def exchange(uri: str, frames: list[bytes], timeout: float = EXCHANGE_TIMEOUT) -> Outcome:
    """Send ``frames`` and a METADATA probe on a new connection; check the answers up to the probe's.

    A thread sends while this one reads, so a broker that stops reading a
    client which does not read its answers cannot deadlock the exchange.
    """
    probe = api.encode_request(api.MetadataRequest(()), PROBE_CORRELATION_ID, "probe")
    sent = [*frames, probe]
    start = time.monotonic()
    with connect(uri) as sock:
        sender = threading.Thread(target=_send, args=(sock, b"".join(sent)), daemon=True)
        sender.start()
        data, reset = _read_all(sock, timeout, [expectation(f) for f in sent])
    sender.join(timeout)
    try:
        outcome = check_answers(sent, split_frames(data))
    except Violation as exc:
        if reset:  # a close with unread bytes: the kernel may have dropped what was sent
            raise Violation(f"{exc}; the connection was reset (RST), not closed") from None
        raise
    outcome.seconds = time.monotonic() - start
    return outcome


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # closed after an error frame while still sending: the reader sees what came
