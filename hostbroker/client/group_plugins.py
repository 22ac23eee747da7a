"""Where a high-level consumer's group plugs in: which topics a filter
subscription takes (:class:`TopicFilter`: :class:`Whitelist`,
:class:`Blacklist`), which partitions feed which stream
(:class:`PartitionAssignor`, :class:`RoundRobinAssignor`) and where the
group's offsets live between runs (:class:`OffsetStorage`,
:class:`BrokerOffsetStorage`). :mod:`hostbroker.client.group` (the
ConsumerConnector) uses them and exports them.
"""

from __future__ import annotations

import abc
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hostbroker.client.consumer import FETCH_SETTINGS, _Connector
from hostbroker.client.errors import BrokerError
from hostbroker.client.settings import broker_uris, resolve
from hostbroker.client.streams import TopicPartition
from hostbroker.errors import ConfigError, ErrorCode
from hostbroker.protocol import api

INTERNAL_TOPIC_PREFIX = "__"


# Topic filters.


class TopicFilter:
    """Which topics a filter subscription takes; ``regex`` must match a whole name."""

    def __init__(self, regex: str):
        try:
            self.pattern = re.compile(regex)
        except re.error as exc:
            raise ConfigError(f"topic filter {regex!r}: {exc}") from None
        self.regex = regex

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"

    def matches(self, topic: str) -> bool:
        raise NotImplementedError


class Whitelist(TopicFilter):
    """Topics whose whole name matches ``regex`` (never internal ``__`` topics)."""

    def matches(self, topic: str) -> bool:
        return (not topic.startswith(INTERNAL_TOPIC_PREFIX)
                and self.pattern.fullmatch(topic) is not None)


class Blacklist(TopicFilter):
    """Topics whose whole name does not match ``regex`` (never internal ``__`` topics)."""

    def matches(self, topic: str) -> bool:
        return (not topic.startswith(INTERNAL_TOPIC_PREFIX)
                and self.pattern.fullmatch(topic) is None)


# Assignment and offset storage: where a coordinated group plugs in.


class PartitionAssignor(abc.ABC):
    """Decides which partitions feed which stream."""

    @abc.abstractmethod
    def assign(self, partitions: Mapping[str, Sequence[int]],
               streams: int) -> list[list[TopicPartition]]:
        """For ``topic -> partitions`` this consumer may read, the partitions of each of
        ``streams`` streams (a list per stream; a partition in at most one)."""


class RoundRobinAssignor(PartitionAssignor):
    """Standalone: every partition, sorted, dealt to the streams in turn."""

    def assign(self, partitions: Mapping[str, Sequence[int]],
               streams: int) -> list[list[TopicPartition]]:
        out: list[list[TopicPartition]] = [[] for _ in range(streams)]
        every = sorted((topic, p) for topic, ps in partitions.items() for p in ps)
        for i, tp in enumerate(every):
            out[i % streams].append(tp)
        return out


class OffsetStorage(abc.ABC):
    """Where a group's consumed offsets live between runs. Must be thread safe."""

    @abc.abstractmethod
    def fetch(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The stored offset of each partition; -1 where the group has none."""

    @abc.abstractmethod
    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Store ``offsets``; raises if any is not stored."""

    def close(self) -> None:
        """Release connections; the storage is not used afterwards."""


class BrokerOffsetStorage(OffsetStorage):
    """Offsets kept by the broker (OFFSET_COMMIT / OFFSET_FETCH), over a connection of its own."""

    def __init__(self, bootstrap: str | Sequence[str] | None = None,
                 config: Mapping[str, Any] | None = None, **options: Any):
        settings = resolve(FETCH_SETTINGS, config, options)
        self._connector = _Connector(broker_uris(bootstrap, settings), settings)
        self._lock = threading.Lock()

    def _request(self, request: api.Request) -> Any:
        with self._lock:
            return self._connector.request(request)

    def fetch(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        asked = tuple(api.OffsetFetchPartition(t, p) for t, p in partitions)
        if not asked:
            return {}
        out: dict[TopicPartition, int] = {}
        for result in self._request(api.OffsetFetchRequest(group, asked)).partitions:
            if result.error_code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                raise BrokerError(result.error_code, topic=result.topic,
                                  partition=result.partition)
            out[(result.topic, result.partition)] = result.offset
        return out

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        entries = tuple(api.OffsetCommitPartition(t, p, o, None)
                        for (t, p), o in sorted(offsets.items()))
        if not entries:
            return
        for result in self._request(api.OffsetCommitRequest(group, entries)).partitions:
            if result.error_code != ErrorCode.NONE:
                raise BrokerError(result.error_code, topic=result.topic,
                                  partition=result.partition)

    def close(self) -> None:
        with self._lock:
            self._connector.close()
