"""How a producer turns the values (and keys) it is given into message bytes.

An :class:`Encoder` has one method, ``encode(value) -> bytes``. The producer
calls it on every value and every key that is not None, in the caller's
thread, before the message is queued, so a value that cannot be encoded is
refused at once with the encoder's error. The payload a consumer reads is
exactly the bytes returned.

:class:`DefaultEncoder` passes ``bytes`` through untouched, copies
``bytearray`` and ``memoryview`` into ``bytes`` (a queued message must not
change under the producer), encodes ``str`` as UTF-8 and refuses anything
else with a TypeError naming the type.
"""

from __future__ import annotations

from typing import Any


class Encoder:
    """Turns a value or a key into bytes; subclass and override :meth:`encode`."""

    def encode(self, value: Any) -> bytes:
        raise NotImplementedError


class DefaultEncoder(Encoder):
    """bytes as they are, bytearray/memoryview copied, str as UTF-8; TypeError otherwise."""

    def encode(self, value: Any) -> bytes:
        if type(value) is bytes:
            return value
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise TypeError(
            f"cannot encode a {type(value).__name__} as message bytes:"
            " give bytes or str, or a producer encoder"
        )
