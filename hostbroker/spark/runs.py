"""Runs of equal-length plain entries decoded by Arrow compute, with no Python work per message.

A fetch of what producers send is mostly one long run of uncompressed v1
entries of one length S (docs/spec/log-format.md). Viewed as an Arrow
``fixed_size_binary(S)`` array over the fetched bytes (no copy), every check
and every column is one vectorised call over the run:

- the 6 header bytes (length, magic 1, attributes 0) of every entry compared
  with the first entry's, to find where the run ends;
- the payloads: bytes ``[10, S)`` of each entry, cast to ``binary`` (one copy);
- the CRCs: the stored ones are bytes ``[6, 10)`` of each entry; the computed
  ones come from zlib-ng's ``crc32`` over the payload buffer, mapped in C, and
  are compared as one packed byte string (the only per-message work);
- offsets: ``base + S * i``.

:func:`take_run` returns the columns of the run at the start of a buffer, or
None when there is none worth it; the entries after it (and any run with a
bad CRC from the bad entry on) are left to ``hostbroker.log.columns``, which
says exactly what is wrong.
"""

from __future__ import annotations

import functools
import struct

import pyarrow as pa
import pyarrow.compute as pc
from zlib_ng.zlib_ng import crc32

_PEEK = struct.Struct(">iH")
_V1_PLAIN = 0x0100
_HEADER = 10  # length, magic, attributes, crc
MIN_RUN = 64  # shorter runs cost more in Arrow calls than the general decoder
_CHUNK = 512  # payloads per struct unpack
_iota = pa.array(range(65536), pa.int64())


def _indexes(n: int) -> pa.Array:
    global _iota
    if len(_iota) < n:
        _iota = pa.array(range(max(n, 2 * len(_iota))), pa.int64())
    return _iota.slice(0, n)


@functools.lru_cache(maxsize=128)
def _payloads_struct(length: int, count: int) -> struct.Struct:
    """``count`` payloads of ``length`` bytes, one after the other, as bytes objects."""
    return struct.Struct(f"{length}s" * count)


def _crcs(buffer, length: int, n: int) -> bytes:
    """The CRC-32s of the ``n`` payloads of ``length`` bytes in ``buffer``, packed
    big-endian as entries store them. Payloads come out of one ``struct`` unpack per
    power-of-two chunk (a few cached Structs per length); the CRCs are mapped in C."""
    crcs: list[int] = []
    pos = 0
    left = n
    while left:
        count = min(_CHUNK, 1 << (left.bit_length() - 1))
        crcs.extend(map(crc32, _payloads_struct(length, count).unpack_from(buffer, pos)))
        pos += count * length
        left -= count
    return struct.pack(f">{n}I", *crcs)


def _crc_mismatch(payloads: pa.Array, stored: bytes, n: int, length: int) -> int:
    """The index of the first entry whose CRC is wrong, or ``n``."""
    computed = _crcs(payloads.buffers()[2], length, n)  # a fresh array: offset 0
    if computed == stored:
        return n
    for i in range(n):
        if computed[4 * i:4 * i + 4] != stored[4 * i:4 * i + 4]:
            return i
    return n


def take_run(data: bytes, base: int, limit: int, max_length: int, check_crc: bool
             ) -> tuple[pa.Array, pa.Array, int] | None:
    """(offsets, values, bytes taken) of the run of equal-length plain v1 entries at the
    start of ``data[:limit]`` (read at log offset ``base``), or None for no run of
    at least :data:`MIN_RUN` entries."""
    if limit < _PEEK.size:
        return None
    length, kind = _PEEK.unpack_from(data, 0)
    if kind != _V1_PLAIN or not 7 <= length <= max_length:  # empty payloads: the general way
        return None
    size = 4 + length
    n = limit // size
    if n < MIN_RUN:
        return None
    entries = pa.FixedSizeBinaryArray.from_buffers(pa.binary(size), n,
                                                   [None, pa.py_buffer(data)])
    heads = pc.binary_slice(entries, 0, 6)
    same = pc.equal(heads, pa.scalar(data[:6], pa.binary(6)))
    first_other = pc.index(same, False).as_py()
    if first_other >= 0:
        n = first_other
        if n < MIN_RUN:
            return None
        entries = entries.slice(0, n)
    payload_length = length - 6
    values = pc.binary_slice(entries, _HEADER, size).cast(pa.binary())
    if check_crc:
        stored = pc.binary_slice(entries, 6, _HEADER)
        good = _crc_mismatch(values, stored.buffers()[1].to_pybytes()[:4 * n], n,
                             payload_length)
        if good < n:
            if good < MIN_RUN:
                return None
            n = good
            values = values.slice(0, n)
    offsets = pc.add(pc.multiply(_indexes(n), size), base)
    return offsets, values, n * size
