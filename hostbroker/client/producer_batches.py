"""The producer's message sets: a batch encoded and compressed, and cut.

Pure (no sockets, no threads, no locks). The sending thread (in sync mode
the caller, under the producer's lock) calls it to build the sets of a
batch; ``send_many`` calls :class:`Encoded` in the caller's thread; the
async queue calls :func:`take_batch` under the producer's lock.

- :func:`encode_batch`: one partition's batch as a message set. Compressed,
  it is one wrapper per run of messages, each within ``message.max.bytes``
  both as sent and as inflated: runs are cut by the plain sizes before
  anything is compressed (a consumer bounds what a wrapper inflates to by
  its ``fetch.message.max.bytes``), and each run is compressed once.
- :func:`split_by_size`: values cut by the bytes their plain entries take.
- :class:`Encoded`: a plain set encoded ahead of the sending thread.
- "Pieces" are a group's values in order, as value lists and Encoded sets:
  :func:`add_piece` and :func:`as_pieces` build them, :func:`cut_batches`
  cuts them into batches of ``batch.size`` messages, :func:`flatten_pieces`
  lists their values.
- :func:`take_batch`: about ``batch.size`` messages off the async queue.
"""

from __future__ import annotations

from hostbroker.log.message import CODEC_NONE, MIN_LENGTH_V1, encode_message_set


# Bytes an entry adds to its payload: length field and v1 header.
ENTRY_OVERHEAD = 4 + MIN_LENGTH_V1


def split_by_size(values: list[bytes], budget: int) -> list[list[bytes]]:
    """``values`` cut into runs whose plain entries take at most ``budget`` bytes each."""
    if sum(map(len, values)) + ENTRY_OVERHEAD * len(values) <= budget:
        return [values]
    pieces = []
    start = size = 0
    for i, value in enumerate(values):
        add = len(value) + ENTRY_OVERHEAD
        if size + add > budget and i > start:
            pieces.append(values[start:i])
            start, size = i, 0
        size += add
    pieces.append(values[start:])
    return pieces


def encode_batch(values: list[bytes], codec: int,
                 max_message_bytes: int) -> tuple[bytes, tuple[tuple[int, int], ...] | None]:
    """One partition's message set for ``values``, and its wrappers.

    Uncompressed: the plain set, wrappers None. Compressed: the values are
    first cut into runs whose plain message set (what a wrapper inflates to,
    known exactly from the value lengths) takes at most ``max_message_bytes``,
    so that a consumer whose fetch.message.max.bytes holds one entry of that
    size accepts every wrapper; each run is compressed once. A run whose
    wrapper's length field still passes ``max_message_bytes`` (data that does
    not compress) is halved until each wrapper fits, and a single message
    that cannot be wrapped within the bound goes as a plain entry. Wrappers
    are ``(message_count, entry_bytes)`` in order, which gives each message
    its offset.
    """
    if codec == CODEC_NONE:
        return encode_message_set(values), None
    runs = split_by_size(values, max_message_bytes)
    if len(runs) == 1:
        return _wrap(values, codec, max_message_bytes)
    data = []
    wrappers: tuple[tuple[int, int], ...] = ()
    for run in runs:
        run_data, run_wrappers = _wrap(run, codec, max_message_bytes)
        data.append(run_data)
        wrappers += run_wrappers
    return b"".join(data), wrappers


def _wrap(values: list[bytes], codec: int,
          max_message_bytes: int) -> tuple[bytes, tuple[tuple[int, int], ...]]:
    """``values`` (whose plain set fits ``max_message_bytes`` unless it is one
    message) as wrappers whose length fields fit it; see encode_batch."""
    if len(values) == 1 and len(values[0]) + ENTRY_OVERHEAD > max_message_bytes:
        data = encode_message_set(values)
        return data, ((1, len(data)),)
    data = encode_message_set(values, codec=codec)
    if len(data) - 4 <= max_message_bytes:
        return data, ((len(values), len(data)),)
    if len(values) == 1:
        data = encode_message_set(values)
        return data, ((1, len(data)),)
    half = len(values) // 2
    first, first_wrappers = _wrap(values[:half], codec, max_message_bytes)
    second, second_wrappers = _wrap(values[half:], codec, max_message_bytes)
    return first + second, first_wrappers + second_wrappers


class Encoded:
    """Values already encoded as one plain message set (by ``send_many``, in the
    caller's thread, so that the sending thread only routes it). ``len()`` is
    the number of messages."""

    __slots__ = ("values", "data")

    def __init__(self, values: list[bytes]):
        self.values = values
        self.data = encode_message_set(values)

    def __len__(self) -> int:
        return len(self.values)


def add_piece(pieces: list, value) -> None:
    """Append a value, a list of values or an Encoded to a group's pieces, in order;
    consecutive values share one list (one message set, one wrapper)."""
    if type(value) is Encoded:
        pieces.append(value)
    elif pieces and type(pieces[-1]) is list:
        if type(value) is list:
            pieces[-1] += value
        else:
            pieces[-1].append(value)
    else:
        pieces.append(list(value) if type(value) is list else [value])


def as_pieces(values: list) -> list:
    """A queued keyless list that may hold Encoded elements, as pieces."""
    pieces: list = []
    for value in values:
        add_piece(pieces, value)
    return pieces


def cut_batches(pieces: list, size: int | None) -> list[list]:
    """``pieces`` (value lists and Encoded sets) cut into batches of about ``size``
    messages; an Encoded set is never cut."""
    if size is None:
        return [pieces]
    batches: list[list] = [[]]
    room = size
    for piece in pieces:
        if type(piece) is Encoded:
            if room <= 0:
                batches.append([])
                room = size
            batches[-1].append(piece)
            room -= len(piece)
            continue
        start = 0
        while start < len(piece):
            if room <= 0:
                batches.append([])
                room = size
            part = piece[start:start + room] if start or len(piece) > room else piece
            batches[-1].append(part)
            room -= len(part)
            start += len(part)
    return batches


def flatten_pieces(pieces: list) -> list[bytes]:
    return [v for piece in pieces for v in (piece.values if type(piece) is Encoded else piece)]


def take_batch(keyless: dict[str, list], chunked: set[str], items: list[tuple],
               limit: int) -> tuple[dict[str, list], list[tuple], set[str], int]:
    """Take about ``limit`` messages out of an async queue, keyed items first.

    The queue is ``keyless`` (topic -> values and Encoded sets, in the order
    sent; ``chunked`` names the topics whose list holds Encoded sets) and
    ``items``; what is taken is removed from them. Returns the taken
    ``(keyless, items, chunked, message count)``. Item lists and Encoded
    sets are taken whole, so the count may pass ``limit`` by less than one of
    them (a send_many piece is at most batch.size messages).
    """
    room = limit
    taken = 0
    for item in items:
        if room <= 0:
            break
        room -= 1 if type(item[3]) is bytes else len(item[3])
        taken += 1
    taken_items = items[:taken]
    del items[:taken]
    taken_keyless: dict[str, list] = {}
    taken_chunked: set[str] = set()
    for topic, values in list(keyless.items()):
        if room <= 0:
            break
        if topic in chunked:
            taken_chunked.add(topic)
            end = 0
            for value in values:
                if room <= 0:
                    break
                room -= 1 if type(value) is bytes else len(value)
                end += 1
        else:
            end = min(room, len(values))
            room -= end
        if end == len(values):
            taken_keyless[topic] = keyless.pop(topic)
            chunked.discard(topic)
        else:
            taken_keyless[topic] = values[:end]
            del values[:end]
    return taken_keyless, taken_items, taken_chunked, limit - room
