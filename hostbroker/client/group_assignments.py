"""What a consumer connector does with partitions its group gives and takes, in both
coordinated modes (ZooKeeper, :mod:`hostbroker.client.group_cluster`; the broker's group
coordinator, :mod:`hostbroker.client.group_coordinator`).

- :class:`Assignments` and :class:`Progress`: the connector's ``_owned`` and ``_done``
  when a group decides its partitions, so that nothing fetched or read during an earlier
  assignment of a partition is handed out or committed in a later one;
- :func:`give_up`: the steps of giving partitions up (stop handing them out, tell the
  rebalance listener, commit what was handed out of them);
- :class:`GroupConnector`: what the group's two sides use of the connector they serve.
  The connector (``hostbroker.client.group``) makes a side and hands itself in; the
  sides know it only through this protocol, so nothing here or in them imports it.

A partition's key is whatever the mode names it by: ``(topic, partition)`` with the
coordinator, a ``PartitionKey`` (which also names the broker) with ZooKeeper.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Hashable, Mapping
from typing import Any, Protocol

from hostbroker.client.group_plugins import OffsetStorage, TopicFilter
from hostbroker.client.streams import KafkaStream, StreamsOwner

log = logging.getLogger(__name__)


class GroupConnector(StreamsOwner, Protocol):
    """What the group's sides (and :func:`give_up`) use of the connector, beyond what
    its streams and fetchers use: its group, subscription (``_topic_streams``: per
    topic its streams; or ``_filter``), offsets (``offset_storage``, ``_committed``,
    ``positions``, ``_commit``, ``_auto_commit``) and rebalance listener (``_notify``).
    """

    group: str
    offset_storage: OffsetStorage
    _uris: list[str]
    _topic_streams: dict[str, list[KafkaStream]]
    _filter: TopicFilter | None
    _committed: dict
    _own_storage: bool
    _coordinated: bool
    _next_commit: float

    def _fetch_config(self) -> dict[str, Any]: ...
    def _notify(self, method: str, partitions: list) -> None: ...
    def _auto_commit(self, now: float) -> None: ...
    def positions(self) -> dict: ...
    def _commit(self, offsets: Mapping, owned_only: bool = True) -> None: ...


class Assignments(dict):
    """The connector's ``_owned`` in a group: partition -> stream, where ``get``
    answers only for the very key object of the partition's current assignment.

    Each assignment gives its fetcher a key object of its own, and the fetcher tags
    every chunk with it; a stream hands a chunk out only if ``get(tag)`` is itself. So a
    chunk fetched during an earlier assignment of the partition (still queued in the
    stream, or delivered by a round in flight when it was given up) is dropped, also
    when the partition came back to the same stream since and is read again from the
    group's committed offset.
    """

    def __init__(self) -> None:
        super().__init__()
        self._keys: dict[Hashable, Hashable] = {}  # each key -> its current object

    def __setitem__(self, key: Hashable, stream: KafkaStream) -> None:
        super().__setitem__(key, stream)
        self._keys[key] = key

    def __delitem__(self, key: Hashable) -> None:
        super().__delitem__(key)
        del self._keys[key]

    def pop(self, key: Hashable, *default: Any) -> Any:
        self._keys.pop(key, None)
        return super().pop(key, *default)

    def get(self, key: Hashable, default: Any = None) -> Any:
        if self._keys.get(key) is not key:
            return default
        return super().get(key, default)


class Progress(dict):
    """The connector's ``_done`` in a group: what the readers moved past, recorded
    only for a message of its partition's current assignment (see :class:`Assignments`):
    a reader that held a message while its partition was given up, and perhaps taken
    again from the group's offsets, does not put that old position back for the
    interval commit."""

    def __init__(self, owned: Assignments):
        super().__init__()
        self._owned = owned

    def __setitem__(self, key: Hashable, offset: int) -> None:
        if self._owned.get(key) is not None:
            super().__setitem__(key, offset)


def give_up(connector: GroupConnector, keys: Collection[Hashable], commit: bool) -> None:
    """``keys`` are not the connector's any more (their fetchers were told to stop):
    the streams drop what is queued of them, the rebalance listener hears
    ``on_partitions_revoked``, then (with ``commit`` and ``auto.commit.enable``) what
    was handed out of them is committed; a failed commit is logged (the next owner
    reads again what was not stored)."""
    c = connector
    gone = set(keys)
    streams = {}
    for key in keys:
        stream = c._owned.pop(key, None)
        if stream is not None:
            streams[id(stream)] = stream
            if key in stream.partitions:
                stream.partitions.remove(key)
    for stream in streams.values():
        stream.release(gone)
    c._notify("on_partitions_revoked", list(keys))
    if commit and c.settings["auto.commit.enable"]:
        handed = c.positions()
        try:
            c._commit({k: handed[k] for k in keys if k in handed}, owned_only=False)
        except Exception as exc:  # noqa: BLE001 - the next owner re-reads what was not stored
            log.warning("consumer group %s: commit before giving up partitions failed: %s",
                        c.group, exc)
    for key in keys:
        c._done.pop(key, None)
        c._committed.pop(key, None)
