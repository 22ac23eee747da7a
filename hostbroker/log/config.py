"""Per-topic log configuration: how a partition rolls, flushes and expires.

A :class:`LogConfig` is an immutable value. The broker builds one from its
``log.*`` defaults; a topic may override any field with the topic keys of
docs/spec/protocol.md ("CREATE_TOPIC"), whose string values are persisted with each
partition (``partition.json``) and parsed here. Pure: no I/O.

Bounds (inclusive), checked on every construction:

=====================  ==============================  =========================
key                    field                           allowed
=====================  ==============================  =========================
``segment.bytes``      ``segment_bytes``               64 .. 2**31-1
``retention.ms``       ``retention_ms``                -1 (unlimited) or 0 .. 2**63-1
``retention.bytes``    ``retention_bytes``             -1 (unlimited) or 0 .. 2**63-1
``flush.messages``     ``flush_messages``              1 .. 2**63-1
``flush.ms``           ``flush_ms``                    1 .. 2**63-1
``max.message.bytes``  ``max_message_bytes``           6 .. 2**31-1
``min.insync.replicas``  ``min_insync_replicas``       1 .. 8
=====================  ==============================  =========================

``segment.bytes`` may be tiny so tests can roll segments quickly; its upper
bound keeps every position inside a segment within a signed 32-bit range.
``max.message.bytes`` bounds an entry's ``length`` field, which is an int32 and
at least 6 for a v1 entry. ``min.insync.replicas`` matters only for a
replicated topic (an acks=-1 produce is refused NOT_ENOUGH_REPLICAS while the
ISR is smaller); 8 is the most replicas a partition can have
(``MAX_REPLICAS``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from hostbroker.errors import ConfigError
from hostbroker.log.message import DEFAULT_MAX_MESSAGE_BYTES, MIN_LENGTH_V1

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_UNLIMITED = -1

TOPIC_CONFIG_KEYS: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "max.message.bytes": "max_message_bytes",
    "min.insync.replicas": "min_insync_replicas",
}
_KEY_OF_FIELD = {field: key for key, field in TOPIC_CONFIG_KEYS.items()}

# field -> (lowest, highest, whether -1 means unlimited)
_BOUNDS: dict[str, tuple[int, int, bool]] = {
    "segment_bytes": (64, _INT32_MAX, False),
    "retention_ms": (0, _INT64_MAX, True),
    "retention_bytes": (0, _INT64_MAX, True),
    "flush_messages": (1, _INT64_MAX, False),
    "flush_ms": (1, _INT64_MAX, False),
    "max_message_bytes": (MIN_LENGTH_V1, _INT32_MAX, False),
    "min_insync_replicas": (1, 8, False),  # 8: shm.partitions.MAX_REPLICAS
}

# more digits cannot be in range (and int() refuses over 4300 of them)
_INTEGER = re.compile(r"-?[0-9]{1,19}")
# the longest value string a topic key takes, surrounding spaces included
# (docs/spec/protocol.md "CREATE_TOPIC"): nothing longer is kept or passed on
MAX_VALUE_CHARS = 64


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Settings of one partition's log; see the module docstring for bounds."""

    segment_bytes: int = 1024 * 1024 * 1024
    retention_ms: int = 168 * 60 * 60 * 1000
    retention_bytes: int = _UNLIMITED
    flush_messages: int = 10_000
    flush_ms: int = 1000
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    min_insync_replicas: int = 1
    # broker-wide only (log.preallocate.bytes), not a topic key: how far past
    # its end an active segment reserves disk space (hostbroker.log.prealloc)
    preallocate_bytes: int = 0

    def __post_init__(self) -> None:
        if type(self.preallocate_bytes) is not int or not 0 <= self.preallocate_bytes <= _INT32_MAX:
            raise ConfigError(f"log.preallocate.bytes: {self.preallocate_bytes!r} is outside "
                              f"0..{_INT32_MAX}")
        for field, (lowest, highest, unlimited) in _BOUNDS.items():
            value = getattr(self, field)
            key = _KEY_OF_FIELD[field]
            if type(value) is not int:
                raise ConfigError(f"{key}: expected an integer, got {value!r}")
            if unlimited and value == _UNLIMITED:
                continue
            if not lowest <= value <= highest:
                extra = " or -1 for unlimited" if unlimited else ""
                raise ConfigError(f"{key}: {value} is outside {lowest}..{highest}{extra}")

    def with_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        """Return a copy with topic keys (``"segment.bytes"``...) set from strings.

        Raises ConfigError naming the key for an unknown key, a value longer
        than ``MAX_VALUE_CHARS``, one that is not a decimal integer (spaces
        around it allowed), or a value out of bounds.
        """
        changes: dict[str, int] = {}
        for key, raw in overrides.items():
            field = TOPIC_CONFIG_KEYS.get(key)
            if field is None:
                raise ConfigError(f"{key}: unknown topic config key")
            if isinstance(raw, int) and not isinstance(raw, bool):
                raw = str(raw)
            if isinstance(raw, str) and len(raw) > MAX_VALUE_CHARS:
                raise ConfigError(f"{key}: a value of {len(raw)} characters (at most "
                                  f"{MAX_VALUE_CHARS})")
            if not isinstance(raw, str) or not _INTEGER.fullmatch(raw.strip()):
                raise ConfigError(f"{key}: expected an integer, got {raw!r}")
            changes[field] = int(raw)
        return dataclasses.replace(self, **changes)

    def to_overrides(self, base: LogConfig | None = None) -> dict[str, str]:
        """Return the topic keys whose values differ from ``base`` (default: LogConfig())."""
        base = base if base is not None else LogConfig()
        return {
            key: str(getattr(self, field))
            for key, field in TOPIC_CONFIG_KEYS.items()
            if getattr(self, field) != getattr(base, field)
        }

    def overrides_of(self, keys) -> dict[str, str]:
        """Return the given topic keys with this config's values, as strings."""
        return {key: str(getattr(self, TOPIC_CONFIG_KEYS[key])) for key in keys}
