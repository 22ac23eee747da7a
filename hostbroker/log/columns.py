"""A message set decoded into columns: offsets, next offsets and values as lists.

Pure, like ``hostbroker.log.message`` whose rules it applies (same checks,
same errors, same offset rule for compressed wrappers): for readers that
build column-oriented data (Arrow record batches for Spark) and would
otherwise pay for one Message tuple per message. Runs of equal-length plain
v1 entries (what producers send) cost no Python work per message: their
offsets are ``range`` objects extended in C and their payloads come from one
``struct`` unpack, with the CRCs compared by ``map`` (see message.py); any
other entry goes through a tight loop or, for wrappers and odd entries, the
careful entry parser.
"""

from __future__ import annotations

from hostbroker.log.message import (_FAST_HEADER, _RETRY_BYTES, _RETRY_GROWTH, _RETRY_MAX_BYTES,
                                    _RUN_MIN, _V1_HEADER_SIZE, _V1_PLAIN, _READ_RUN_MAX_LENGTH,
                                    CODEC_NONE, DEFAULT_MAX_MESSAGE_BYTES, _UNLIMITED, _byte_view,
                                    _decompress, _inner_messages, _parse_entry, _plain_run, crc32)


class Columns:
    """Growing columns of messages: ``offsets`` and ``values`` (lists), and
    ``value_bytes``, the total length of the values. Rows are contiguous: each
    message's next offset is the next row's offset, the last one's what
    :func:`decode_into` returns (the log format's offset rule, wrappers included)."""

    __slots__ = ("offsets", "values", "value_bytes")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.values: list[bytes] = []
        self.value_bytes = 0

    def __len__(self) -> int:
        return len(self.values)


def decode_into(columns: Columns, buf, base_offset: int, *, end: int | None = None,
                check_crc: bool = True, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                max_inflated_bytes: int = _UNLIMITED) -> int:
    """Append the messages of the whole entries of ``buf`` (read at ``base_offset``)
    that start before ``end`` (a log offset; default: all) to ``columns``.

    Returns the log offset after the last entry taken (``base_offset`` plus the
    bytes consumed). Stops silently at a trailing partial entry. A bad entry
    raises as :func:`hostbroker.log.message.iter_messages` does, after every
    message before it was appended; the caller decides what to do with the
    columns then.
    """
    data = buf if type(buf) is bytes else bytes(_byte_view(buf))
    size = len(data)
    if end is not None and end - base_offset < size:
        size = max(0, end - base_offset)  # entries starting before `end` end by it too
        data = data[:size] if size < len(data) else data
    last_header = size - _V1_HEADER_SIZE
    unpack = _FAST_HEADER.unpack_from
    offsets = columns.offsets
    values = columns.values
    run_max_length = min(_READ_RUN_MAX_LENGTH, max_message_bytes)
    value_bytes = 0
    pos = 0
    retry = 0
    wait = _RETRY_BYTES
    try:
        while True:
            if pos >= retry:
                good, entry, flat = _plain_run(data, pos, size, run_max_length, check_crc)
                if good:
                    first = base_offset + pos
                    last = first + good * entry
                    offsets.extend(range(first, last, entry))
                    values.extend(flat[3:4 * good:4])
                    value_bytes += good * (entry - _V1_HEADER_SIZE)
                    pos += good * entry
                if good >= _RUN_MIN:
                    wait = _RETRY_BYTES
                    continue
                retry, wait = pos + wait, min(_RETRY_GROWTH * wait, _RETRY_MAX_BYTES)
                stop = retry if retry < last_header else last_header
            while pos <= stop:
                length, magic_attributes, crc = unpack(data, pos)
                start = pos + _V1_HEADER_SIZE
                stop_at = pos + 4 + length
                if (magic_attributes == _V1_PLAIN and length <= max_message_bytes
                        and start <= stop_at <= size):
                    payload = data[start:stop_at]
                    if not check_crc or crc32(payload) == crc:
                        offsets.append(base_offset + pos)
                        values.append(payload)
                        value_bytes += stop_at - start
                        pos = stop_at
                        continue
                break
            else:
                if pos <= last_header:
                    continue
            parsed = _parse_entry(data, pos, size, max_message_bytes, check_crc, base_offset)
            if parsed is None:
                return base_offset + pos
            stop_at, magic, codec, start = parsed
            offset = base_offset + pos
            if codec == CODEC_NONE:
                offsets.append(offset)
                values.append(data[start:stop_at])
                value_bytes += stop_at - start
            else:
                inner = _decompress(codec, data[start:stop_at], offset, max_inflated_bytes)
                for message in _inner_messages(inner, offset, base_offset + stop_at, codec,
                                               check_crc):
                    offsets.append(message[0])
                    values.append(message[2])
                    value_bytes += len(message[2])
            pos = stop_at
    finally:
        columns.value_bytes += value_bytes
