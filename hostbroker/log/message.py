"""Message entries and message sets: the byte format of docs/spec/log-format.md.

One format serves producer, broker and consumer, so a message set moves from
socket to page cache to socket without being re-encoded. This module only
turns payloads into entries and checks or reads entries back; it keeps no
state and does no I/O, so any process may call it.

Layout of an entry (big-endian)::

    length:int32  magic:int8=0  crc:uint32  payload              (v0)
    length:int32  magic:int8=1  attributes:int8  crc:uint32  payload   (v1)

``crc`` is the CRC-32 of the payload (IEEE 802.3, the value ``zlib.crc32``
gives), computed here by zlib-ng's ``crc32`` (:data:`crc32`): the same values,
with the carry-less multiply instructions of the CPU, about 3.5 times faster
on 10 KiB than the system zlib and twice as fast on 100 bytes. Attribute bits
0-1 are the codec. A v1
entry with a codec is a *wrapper* whose payload, decompressed, is a message set
of uncompressed entries.

:func:`validate_message_set` runs on every produce request in the broker's
handlers and :func:`iter_messages` on every message a consumer reads. Both,
and :func:`count_entries`, take the common case, a run of equal-length
uncompressed v1 entries (what a producer sends), a few hundred entries at a
time with one ``struct`` unpack and per-entry work done only in C; then one
entry at a time in a tight loop; and leave everything else to one careful entry
parser, which also words every error.
"""

from __future__ import annotations

import functools
import gzip
import struct
import zlib
from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import NamedTuple

import snappy
from zlib_ng.zlib_ng import crc32

from hostbroker.errors import HostbrokerError, InvalidMessageError, MessageTooLargeError

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy"}

DEFAULT_MAX_MESSAGE_BYTES = 1_000_000

# Smallest legal `length` of each magic: header after the length field, no payload.
MIN_LENGTH_V0 = 5
MIN_LENGTH_V1 = 6
LENGTH_SIZE = 4

# No inner limit applies to entries inside a wrapper: only the wrapper itself is
# bound by max.message.bytes (the broker never sees inside it).
_UNLIMITED = 2**31 - 1

_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_HEADER_V0 = struct.Struct(">iBI")
_HEADER_V1 = struct.Struct(">iBBI")
_V1_HEADER_SIZE = _HEADER_V1.size  # 10: the payload of a v1 entry starts here
# Any attributes byte above this (read unsigned) sets codec 3 or a reserved bit.
_MAX_ATTRIBUTES = CODEC_SNAPPY
# The hot loop reads magic and attributes as one uint16: a v1 entry with an
# allowed codec lies in [0x0100, 0x0102], so one chained comparison checks both.
_FAST_HEADER = struct.Struct(">iHI")
_V1_PLAIN = 0x0100
_V1_HIGHEST = 0x0100 | _MAX_ATTRIBUTES
_PEEK = struct.Struct(">iH")  # length and magic+attributes of the entry a run starts with

# Runs: producers send sets of equal-sized plain v1 entries, so the hot paths
# first try to take the next entries as one run of equal length, unpacked by one
# struct call. A run is 2**k entries (at most _RUN_MAX, at least _RUN_MIN) so a
# few Structs per length serve every set.
_RUN_MAX = 256
_RUN_MIN = 4
_RUN_MAX_BYTES = 256 * 1024  # payloads copied by one unpack
# Unpacking a run copies its payloads. A reader copies them anyway, but a check
# only wants their CRCs: past a few KiB the copy costs more than the per-entry
# loop's own work that a run saves (measured: 2 KiB entries checked ~15 %
# faster in runs, 4 KiB ~5 %, 6 KiB and up slower). Bounds on `length`.
_CHECK_RUN_MAX_LENGTH = 4096
_READ_RUN_MAX_LENGTH = _RUN_MAX_BYTES // _RUN_MIN
# Where no run starts (sets of mixed sizes, v0 entries, big entries), a try
# costs a call and a few unpacks: after a failed try the next one waits this
# many bytes, growing up to the maximum while tries keep failing.
_RETRY_BYTES = 1024
_RETRY_GROWTH = 4
_RETRY_MAX_BYTES = 256 * 1024

_GZIP_LEVEL = 6  # zlib's default trade-off; 9 costs much more CPU for little gain


class Message(NamedTuple):
    """One message as a reader sees it.

    ``offset`` is the byte position of the entry it came from; ``next_offset``
    is where a consumer resumes after processing it (docs/spec/log-format.md, "Offsets").
    ``codec`` is the codec of that entry (a wrapper's codec for the messages
    inside it); ``magic`` is the message's own magic byte.
    """

    offset: int
    next_offset: int
    payload: bytes
    codec: int
    magic: int


# Building the tuple directly skips the generated __new__, which costs more
# than the rest of reading a small message.
_new_message = tuple.__new__


def _check_codec(codec: int) -> None:
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown codec {codec!r}")


def encode_message(payload: bytes, *, codec: int = CODEC_NONE, magic: int = 1) -> bytes:
    """Return one whole entry (length prefix included) carrying ``payload``.

    ``codec`` only sets the attribute bits; the caller compresses. v0 entries
    have no attributes, so ``magic=0`` allows only ``CODEC_NONE``.
    Raises ValueError for an unknown codec or magic.
    """
    _check_codec(codec)
    crc = crc32(payload)
    if magic == 1:
        return _HEADER_V1.pack(len(payload) + MIN_LENGTH_V1, 1, codec, crc) + payload
    if magic == 0:
        if codec != CODEC_NONE:
            raise ValueError("a v0 entry has no attributes and cannot be compressed")
        return _HEADER_V0.pack(len(payload) + MIN_LENGTH_V0, 0, crc) + payload
    raise ValueError(f"unknown magic {magic!r}")


def _encode_plain(payloads: Iterable[bytes]) -> bytes:
    # Measured: header packing plus one b"".join beats pack_into a preallocated
    # bytearray, which needs a first pass over the payloads for the size.
    pack = _HEADER_V1.pack
    parts: list[bytes] = []
    append = parts.append
    for payload in payloads:
        append(pack(len(payload) + MIN_LENGTH_V1, 1, CODEC_NONE, crc32(payload)))
        append(payload)
    return b"".join(parts)


def encode_message_set(payloads: Iterable[bytes], *, codec: int = CODEC_NONE) -> bytes:
    """Encode ``payloads`` as a message set of v1 entries.

    With ``CODEC_NONE`` the set is the plain concatenation of the entries. With
    gzip or snappy it is ONE wrapper entry whose payload is the compressed set
    of uncompressed entries. No payloads give the empty set. Encoding 1000
    payloads of 100 B uncompressed takes about 0.16 ms (~165 ns a message, a
    quarter of it crc32).
    """
    _check_codec(codec)
    inner = _encode_plain(payloads)
    if codec == CODEC_NONE or not inner:
        return inner
    if codec == CODEC_GZIP:
        compressed = gzip.compress(inner, compresslevel=_GZIP_LEVEL, mtime=0)
    else:
        compressed = snappy.compress(inner)
    return encode_message(compressed, codec=codec)


def _byte_view(buf) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _parse_entry(view, pos: int, end_of_buf: int, max_message_bytes: int,
                 check_crc: bool, origin: int = 0) -> tuple[int, int, int, int] | None:
    """Check the entry at ``pos``; return (entry end, magic, codec, payload start).

    Returns None when the bytes up to ``end_of_buf`` hold only part of the
    entry. Raises InvalidMessageError / MessageTooLargeError for an entry that
    breaks a rule; messages name the byte position ``origin + pos``.
    """
    where = origin + pos
    if end_of_buf - pos < LENGTH_SIZE:
        return None
    (length,) = _LENGTH.unpack_from(view, pos)
    if length < MIN_LENGTH_V0:
        raise InvalidMessageError(f"entry at byte {where}: length {length} is below the minimum")
    if length > max_message_bytes:
        raise MessageTooLargeError(
            f"entry at byte {where}: length {length} exceeds the maximum of {max_message_bytes}")
    end = pos + LENGTH_SIZE + length
    if end > end_of_buf:
        return None
    magic = view[pos + 4]
    if magic == 1:
        if length < MIN_LENGTH_V1:
            raise InvalidMessageError(f"entry at byte {where}: length {length} is too short for magic 1")
        codec = view[pos + 5]
        if codec > _MAX_ATTRIBUTES:
            raise InvalidMessageError(
                f"entry at byte {where}: attributes 0x{codec:02x} use a reserved codec or bit")
        crc_at = pos + 6
    elif magic == 0:
        codec = CODEC_NONE
        crc_at = pos + 5
    else:
        signed = magic - 256 if magic > 127 else magic
        raise InvalidMessageError(f"entry at byte {where}: unknown magic {signed}")
    start = crc_at + 4
    if check_crc:
        (stored,) = _CRC.unpack_from(view, crc_at)
        actual = crc32(view[start:end])
        if stored != actual:
            raise InvalidMessageError(
                f"entry at byte {where}: CRC mismatch (stored 0x{stored:08x}, payload 0x{actual:08x})")
    return end, magic, codec, start


@functools.lru_cache(maxsize=64)
def _plain_run_struct(length: int, n: int) -> struct.Struct:
    """``n`` v1 entries of ``length`` as one flat tuple of (length, magic+attributes, crc, payload) * n."""
    return struct.Struct(">" + f"iHI{length - MIN_LENGTH_V1}s" * n)


@functools.lru_cache(maxsize=64)
def _length_run_struct(length: int, n: int) -> struct.Struct:
    """The length fields of ``n`` entries of ``length``; the rest is skipped, not copied."""
    return struct.Struct(">" + f"i{length}x" * n)


def _run_size(fits: int) -> int:
    """Entries to unpack as a run when ``fits`` more of that size are in the buffer; 0 for none."""
    if fits < _RUN_MIN:
        return 0
    return 1 << (min(fits, _RUN_MAX).bit_length() - 1)


_NO_RUN = (0, 0, ())


def _plain_run(view, pos: int, size: int, max_length: int,
               check_crc: bool) -> tuple[int, int, tuple]:
    """Take the run of equal-length plain v1 entries at ``pos`` in one unpack.

    Returns (good, entry size, flat): ``flat`` holds (length, magic+attributes,
    crc, payload) for each entry unpacked, and the first ``good`` of them are
    whole plain v1 entries of the first one's length (at most ``max_length``)
    with correct CRCs (checked only when ``check_crc``). good is 0 when no run
    starts at ``pos``. Whatever follows the good ones is left to the caller's
    next try and per-entry loop, which accept it or say exactly what is wrong.
    """
    if size - pos < _PEEK.size:
        return _NO_RUN
    length, kind = _PEEK.unpack_from(view, pos)
    if kind != _V1_PLAIN or not MIN_LENGTH_V1 <= length <= max_length:
        return _NO_RUN
    entry = LENGTH_SIZE + length
    n = _run_size(min((size - pos) // entry, _RUN_MAX_BYTES // entry))
    # Cheap peeks before copying n payloads: sets of mixed sizes stop at the
    # second entry, and a run shorter than n is cut to the power of two it fills.
    if not n or _LENGTH.unpack_from(view, pos + entry)[0] != length:
        return _NO_RUN
    while _LENGTH.unpack_from(view, pos + (n - 1) * entry)[0] != length:
        n >>= 1
        if n < _RUN_MIN:
            return _NO_RUN
    flat = _plain_run_struct(length, n).unpack_from(view, pos)
    lengths = flat[0::4]
    kinds = flat[1::4]
    payloads = flat[3::4]
    if lengths.count(length) == n and kinds.count(_V1_PLAIN) == n:
        if not check_crc or list(map(crc32, payloads)) == list(flat[2::4]):
            return n, entry, flat
    crcs = flat[2::4]
    good = 0
    while (good < n and lengths[good] == length and kinds[good] == _V1_PLAIN
           and (not check_crc or crc32(payloads[good]) == crcs[good])):
        good += 1
    return good, entry, flat


def _length_run(view, pos: int, size: int) -> tuple[int, int]:
    """Like :func:`_plain_run` for length fields only: (good, entry size)."""
    if size - pos < LENGTH_SIZE:
        return 0, 0
    (length,) = _LENGTH.unpack_from(view, pos)
    if length < MIN_LENGTH_V0:
        return 0, 0
    entry = LENGTH_SIZE + length
    n = _run_size((size - pos) // entry)
    if not n or _LENGTH.unpack_from(view, pos + entry)[0] != length:
        return 0, 0
    lengths = _length_run_struct(length, n).unpack_from(view, pos)
    if lengths.count(length) == n:
        return n, entry
    good = 0
    while lengths[good] == length:
        good += 1
    return good, entry


def _walk(buf, max_message_bytes: int, strict: bool) -> tuple[int, int]:
    """Check entries from the start of ``buf``; return (bytes of whole valid entries, count).

    ``strict`` raises at the first invalid or partial entry; otherwise the walk
    stops there. Runs of equal-length plain entries go through
    :func:`_plain_run`. Where a try finds no run (mixed sizes, v0 or big
    entries, a bad entry), the per-entry loop goes on up to ``retry``, the
    next try, which moves further away after each failed one. That loop takes
    the common case (a whole v1 entry with a correct CRC) with every name a
    local and as few operations as we could manage; anything else (v0 entries,
    the last few bytes, errors) goes through :func:`_parse_entry`, which also
    says what is wrong.
    """
    view = _byte_view(buf)
    size = len(view)
    last_header = size - _V1_HEADER_SIZE
    unpack = _FAST_HEADER.unpack_from
    run_max_length = min(_CHECK_RUN_MAX_LENGTH, max_message_bytes)
    pos = 0
    count = 0
    retry = 0  # where the next run may start
    wait = _RETRY_BYTES
    while True:
        if pos >= retry:
            good, entry, _ = _plain_run(view, pos, size, run_max_length, True)
            pos += good * entry
            count += good
            if good >= _RUN_MIN:
                wait = _RETRY_BYTES
                continue  # try the next run at once, or the entry that broke this one
            retry, wait = pos + wait, min(_RETRY_GROWTH * wait, _RETRY_MAX_BYTES)
            stop = retry if retry < last_header else last_header
        while pos <= stop:
            length, magic_attributes, crc = unpack(view, pos)
            start = pos + _V1_HEADER_SIZE
            pos += 4 + length
            if (_V1_PLAIN <= magic_attributes <= _V1_HIGHEST and length <= max_message_bytes
                    and start <= pos <= size and crc32(view[start:pos]) == crc):
                count += 1
            else:
                pos = start - _V1_HEADER_SIZE
                break
        else:
            if pos <= last_header:
                continue
        if pos >= size:
            return pos, count
        try:
            parsed = _parse_entry(view, pos, size, max_message_bytes, True)
        except HostbrokerError:
            if strict:
                raise
            return pos, count
        if parsed is None:
            if strict:
                raise InvalidMessageError(
                    f"entry at byte {pos}: partial entry ({size - pos} bytes left in the set)")
            return pos, count
        pos = parsed[0]
        count += 1


def validate_message_set(buf, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
    """Check every top-level entry of a produced message set; return how many there are.

    Rules are those of docs/spec/log-format.md: length at least 5 (v0) / 6 (v1), magic 0
    or 1, reserved attribute bits zero, CRC of the payload, and no partial entry
    at the end. Wrappers are checked by their CRC only, never decompressed.
    ``buf`` may be bytes, bytearray or memoryview (e.g. a slice of shared
    memory); it is not copied as a whole, only the payloads of runs of entries
    up to 4 KiB, by at most 256 KiB at a time.

    Raises MessageTooLargeError for an entry longer than ``max_message_bytes``
    and InvalidMessageError for any other problem, naming the byte position.

    Cost, measured with timeit on the 2-vCPU reference machine (1000 x 100 B
    entries, best of several runs): about 120 ns per 100-byte v1 entry in runs
    of equal length (0.12 ms for 1000): crc32 of the payload (~45 ns) and the
    run's unpack, which copies the payloads out (~60 ns an entry). Entries
    taken one at a time (mixed sizes, v0, wrappers) cost ~280 ns: crc32, the
    header unpack and the memoryview slice handed to crc32. 10 KiB entries
    are checked one at a time, ~0.6 us each, 0.24 us of it crc32.
    """
    return _walk(buf, max_message_bytes, True)[1]


def scan_valid_prefix(buf, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> tuple[int, int]:
    """Return (byte length, entry count) of the longest prefix of whole valid entries.

    Stops at the first invalid or partial entry without raising; used by
    recovery and dump tools to find where a log stops being valid.
    """
    return _walk(buf, max_message_bytes, False)


def count_entries(buf) -> tuple[int, int]:
    """Return (whole entries, bytes they span) by walking length fields only.

    No CRC or header check: for a reader that wants to know how much of a
    fetched set is whole. Stops at a partial entry or a length below the
    minimum. Runs of equal-length entries (any magic or size) are walked by
    one unpack of their length fields: about 20 ns per 100-byte entry, 75 ns
    per 10 KiB entry (the lengths are no longer small cached ints); other
    entries ~150 ns each.
    """
    view = _byte_view(buf)
    size = len(view)
    last_length = size - LENGTH_SIZE
    unpack = _LENGTH.unpack_from
    pos = 0
    count = 0
    retry = 0
    wait = _RETRY_BYTES
    while True:
        if pos >= retry:
            good, entry = _length_run(view, pos, size)
            pos += good * entry
            count += good
            if good >= _RUN_MIN:
                wait = _RETRY_BYTES
                continue  # try the next run at once, or the entry that broke this one
            retry, wait = pos + wait, min(_RETRY_GROWTH * wait, _RETRY_MAX_BYTES)
            stop = retry if retry < last_length else last_length
        while pos <= stop:
            (length,) = unpack(view, pos)
            end = pos + 4 + length
            if length < MIN_LENGTH_V0 or end > size:
                return count, pos
            pos = end
            count += 1
        if pos > last_length:
            return count, pos


def _snappy_length(data: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    length = shift = 0
    for byte in data[:5]:
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return length
        shift += 7
    raise ValueError("no uncompressed length at the start")


def _gunzip(data: bytes, limit: int) -> bytes:
    """``gzip.decompress`` that stops once the output passes ``limit`` bytes."""
    members = []
    size = 0
    while data:
        inflater = zlib.decompressobj(31)
        member = inflater.decompress(data, limit + 1 - size)
        size += len(member)
        if size > limit:
            raise OverflowError
        if not inflater.eof:
            raise EOFError("compressed data ended before the end-of-stream marker")
        members.append(member)
        data = inflater.unused_data.lstrip(b"\x00")  # members may be padded with zeros
    return members[0] if len(members) == 1 else b"".join(members)


def _decompress(codec: int, data: bytes, where: int, limit: int = _UNLIMITED) -> bytes:
    """The inflated payload of a wrapper; MessageTooLargeError past ``limit`` bytes, which
    are never produced (gzip inflates incrementally, snappy's declared length is checked
    first)."""
    name = CODEC_NAMES[codec]
    try:
        if codec == CODEC_GZIP:
            return _gunzip(data, limit)
        if _snappy_length(data) > limit:
            raise OverflowError
        return snappy.decompress(data)
    except OverflowError:
        raise MessageTooLargeError(
            f"entry at byte {where}: {name} payload inflates past {limit} bytes") from None
    except (ValueError, EOFError, zlib.error, snappy.UncompressError) as exc:
        raise InvalidMessageError(
            f"entry at byte {where}: {name} payload does not decompress: "
            f"{exc or type(exc).__name__}") from None


def _inner_messages(inner: bytes, wrapper_offset: int, wrapper_end: int, codec: int,
                    check_crc: bool) -> list[Message]:
    size = len(inner)
    found: list[tuple[int, int, int]] = []  # (payload start, end, magic)
    pos = 0
    while pos < size:
        parsed = _parse_entry(inner, pos, size, _UNLIMITED, check_crc)
        if parsed is None:
            raise InvalidMessageError(
                f"entry at byte {wrapper_offset}: partial entry at byte {pos} of the decompressed set")
        end, magic, inner_codec, start = parsed
        if inner_codec != CODEC_NONE:
            raise InvalidMessageError(
                f"entry at byte {wrapper_offset}: compressed entry inside a compressed wrapper")
        found.append((start, end, magic))
        pos = end
    if not found:
        # A reader committing next_offset could never move past an empty wrapper.
        raise InvalidMessageError(f"entry at byte {wrapper_offset}: compressed wrapper holds no messages")
    last = len(found) - 1
    return [
        _new_message(Message, (wrapper_offset, wrapper_end if i == last else wrapper_offset,
                               inner[start:end], codec, magic))
        for i, (start, end, magic) in enumerate(found)
    ]


def iter_messages(buf, base_offset: int, *, check_crc: bool = True,
                  max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                  max_inflated_bytes: int = _UNLIMITED) -> Iterator[Message]:
    """Yield the messages of a set read from the log at offset ``base_offset``.

    Stops silently at a trailing partial entry (a fetch cut at max_bytes).
    Compressed wrappers are opened and their messages yielded with the offset
    rule of docs/spec/log-format.md: each has the wrapper's offset, and ``next_offset`` is
    the wrapper's offset for all but the last, the wrapper's end for the last.
    Raises InvalidMessageError (MessageTooLargeError for an over-long entry) at
    the first whole entry that breaks a rule; the CRC is checked only when
    ``check_crc``. A compressed wrapper whose payload would inflate past
    ``max_inflated_bytes`` raises MessageTooLargeError without inflating more
    than that. A ``buf`` that is not ``bytes`` is copied once, which is
    cheaper than copying each payload out of a memoryview.

    Runs of equal-length uncompressed v1 entries are unpacked, CRC-checked and
    turned into messages a run at a time (at most 256 entries or 256 KiB of
    payloads, all checked before the first of them is yielded; an error is
    still raised only after every message before the bad entry). Measured as
    ``list(iter_messages(...))`` on the reference machine: about 280 ns per
    100-byte message with CRCs (~220 ns without), against ~460 ns (~380 ns)
    one entry at a time; ~2.9 us per 10 KiB message, mostly the copy.
    """
    data = buf if type(buf) is bytes else bytes(_byte_view(buf))
    size = len(data)
    last_header = size - _V1_HEADER_SIZE
    unpack = _FAST_HEADER.unpack_from
    new = _new_message
    run_max_length = min(_READ_RUN_MAX_LENGTH, max_message_bytes)
    pos = 0
    retry = 0
    wait = _RETRY_BYTES
    while True:
        if pos >= retry:
            good, entry, flat = _plain_run(data, pos, size, run_max_length, check_crc)
            if good:
                offset = base_offset + pos
                end = offset + good * entry
                yield from map(new, repeat(Message, good),
                               zip(range(offset, end, entry), range(offset + entry, end + entry, entry),
                                   flat[3::4], repeat(CODEC_NONE), repeat(1)))
                pos += good * entry
            if good >= _RUN_MIN:
                wait = _RETRY_BYTES
                continue  # try the next run at once, or the entry that broke this one
            retry, wait = pos + wait, min(_RETRY_GROWTH * wait, _RETRY_MAX_BYTES)
            stop = retry if retry < last_header else last_header
        # Common case first: a whole, uncompressed v1 entry. Its payload slice
        # serves both the CRC and the message.
        while pos <= stop:
            length, magic_attributes, crc = unpack(data, pos)
            start = pos + _V1_HEADER_SIZE
            end = pos + 4 + length
            if magic_attributes == _V1_PLAIN and length <= max_message_bytes and start <= end <= size:
                payload = data[start:end]
                if not check_crc or crc32(payload) == crc:
                    yield new(Message, (base_offset + pos, base_offset + end, payload, CODEC_NONE, 1))
                    pos = end
                    continue
            break
        else:
            if pos <= last_header:
                continue
        parsed = _parse_entry(data, pos, size, max_message_bytes, check_crc, base_offset)
        if parsed is None:
            return
        end, magic, codec, start = parsed
        offset = base_offset + pos
        if codec == CODEC_NONE:
            yield Message(offset, base_offset + end, data[start:end], codec, magic)
        else:
            inner = _decompress(codec, data[start:end], offset, max_inflated_bytes)
            yield from _inner_messages(inner, offset, base_offset + end, codec, check_crc)
        pos = end
