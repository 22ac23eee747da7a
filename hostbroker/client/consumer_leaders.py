"""The SimpleConsumer's connections: the broker list's, and one to the leader of each
replicated partition it was sent away from.

:class:`_Connector` is one lazily opened connection to the first broker of a
list that answers. :class:`LeaderRouting` (a part of
:class:`~hostbroker.client.consumer.SimpleConsumer`) keeps, per partition of
a replicated topic that a broker of the list does not lead, the URI of its
leader and a connector to it, from the consumer's
:class:`~hostbroker.client.leaders.LeaderMap` (METADATA version 1 of the
list's brokers). Leader trouble (NOT_LEADER_FOR_PARTITION,
LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, REPLICA_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION from a broker without a replica, a connection
lost) sends the partition to a fresh lookup, after
``refresh.leader.backoff.ms`` on a second try in a row, at most
``refresh.leader.max.retries`` times (docs/consumer.md).

Owned by the consumer's thread, as the consumer is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from hostbroker.client.connection import BrokerConnection, connect_first
from hostbroker.client.errors import BrokerError, OffsetOutOfRangeError
from hostbroker.client.leaders import LEADER_CODES, LeaderMap, MetadataLeaders
from hostbroker.client.settings import Settings
from hostbroker.errors import ErrorCode
from hostbroker.protocol import api

log = logging.getLogger("hostbroker.client.consumer")

# Answers after which a partition may be led elsewhere (a broker that holds no
# replica of a replicated partition does not know it).
_FOLLOW_CODES = LEADER_CODES | {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def _leader_trouble(error: BaseException) -> bool:
    if isinstance(error, OffsetOutOfRangeError):
        return False
    if isinstance(error, BrokerError):
        return error.code in _FOLLOW_CODES
    return isinstance(error, OSError)

class _Connector:
    """One lazily opened connection to the first broker of a list that answers."""

    def __init__(self, uris: list[str], settings: Settings):
        self.uris = uris
        self.timeout = settings["socket.timeout.ms"] / 1000
        self.setup_timeout = settings["socket.connection.setup.timeout.ms"] / 1000
        self.client_id = settings["client.id"]
        self.tls = settings  # (its ssl.* settings, for ssl:// URIs)
        self.quota_hold = settings["quota.max.throttle.ms"] / 1000
        self.connection: BrokerConnection | None = None

    @property
    def connected(self) -> bool:
        return self.connection is not None and self.connection.connected

    def get(self) -> BrokerConnection:
        connection = self.connection
        if connection is not None and connection.connected:
            return connection
        # Sets are copied out of each answer before the next is read.
        self.connection = connect_first(self.uris, lambda uri: BrokerConnection(
            uri, timeout=self.timeout, client_id=self.client_id, reuse_buffer=True,
            setup_timeout=self.setup_timeout, tls=self.tls, quota_hold=self.quota_hold))
        return self.connection

    def request(self, request: api.Request) -> Any:
        """Send ``request`` and wait for its answer; once more on a new connection when
        one opened earlier turns out dead (a broker restarted since: its first use
        fails). Only for requests that may be repeated."""
        reused = self.connected
        try:
            return self.get().request(request)
        except ConnectionError:  # ConnectionClosedError included; the connection is closed
            if not reused:
                raise
        return self.get().request(request)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


class LeaderRouting:
    """Which connection each partition is fetched on (see the module docstring).
    Expects ``send_fetch`` and ``receive_fetch`` of the consumer it is part of."""

    def _init_routing(self, uris: list[str], settings: Settings) -> None:
        self._connector = _Connector(uris, settings)
        self.leaders = LeaderMap(MetadataLeaders(uris, self._ask_leaders),
                                 retry_backoff_ms=settings["refresh.leader.backoff.ms"],
                                 max_retries=0)
        self.leader_backoff = settings["refresh.leader.backoff.ms"] / 1000
        self.leader_retries: int = settings["refresh.leader.max.retries"]
        # Replicated partitions found led elsewhere than the default connection:
        # (topic, partition) -> the leader's URI, and a connector per leader.
        self._led: dict[tuple[str, int], str] = {}
        self._leader_connectors: dict[str, _Connector] = {}

    def _close_connections(self) -> None:
        self._connector.close()
        for connector in self._leader_connectors.values():
            connector.close()

    # -- leaders of replicated partitions ------------------------------------------

    def _ask_leaders(self, uri: str, topics: tuple[str, ...]):
        from hostbroker.protocol.replication import MetadataRequestV1

        with BrokerConnection(uri, timeout=self._connector.timeout,
                              setup_timeout=self._connector.setup_timeout,
                              client_id=self._connector.client_id,
                              tls=self._connector.tls) as connection:
            return connection.request(MetadataRequestV1(topics))

    def _connector_for(self, topic: str, partition: int) -> _Connector:
        uri = self._led.get((topic, partition)) if self._led else None
        if uri is None:
            return self._connector
        connector = self._leader_connectors.get(uri)
        if connector is None:
            connector = self._leader_connectors[uri] = _Connector([uri], self.settings)
        return connector

    def _follow(self, topic: str, partition: int, tries: int,
                max_tries: int | None = None) -> bool:
        """After leader trouble with ``topic/partition``: look its leader up again
        (waiting ``refresh.leader.backoff.ms`` first on a second try in a row).
        False when it is not a replicated partition or tries ran out (past
        ``max_tries``, default ``refresh.leader.max.retries``): the caller
        raises what it had."""
        if tries > (self.leader_retries if max_tries is None else max_tries):
            return False
        if tries > 1:
            time.sleep(self.leader_backoff)
        self.leaders.invalidate(topic)
        try:
            found = self.leaders.leader(topic, partition)
        except BrokerError as exc:
            if exc.code == ErrorCode.LEADER_NOT_AVAILABLE:
                found = ("wait", "")  # being elected: the next try looks again
            else:
                return False
        except Exception:  # noqa: BLE001 - no broker told: what the caller had stands
            if (topic, partition) not in self._led:
                return False
            found = ("wait", "")
        if found is None:
            self._led.pop((topic, partition), None)
            return False
        if found[0] != "wait":
            old = self._led.get((topic, partition))
            self._led[(topic, partition)] = found[1]
            if old is not None and old != found[1] and old in self._leader_connectors:
                self._leader_connectors[old].close()  # may be dead: a fresh one next time
            log.info("%s/%s: fetching from its leader, broker %s at %s", topic, partition,
                     found[0], found[1])
        return True

    def follow_leader(self, topic: str, partition: int, error: BaseException,
                      tries: int) -> bool:
        """For a caller that fetches with :meth:`send_fetch` / :meth:`receive_fetch` (one
        partition a FETCH): whether ``error``, its ``tries``-th in a row, is leader
        trouble of a replicated partition whose leader was looked up again (then
        fetch again: a one-partition FETCH goes to the partition's leader). False:
        raise it."""
        return _leader_trouble(error) and self._follow(topic, partition, tries)

    def _on_leader(self, topic: str, partition: int, call: Callable[[_Connector], Any]) -> Any:
        """``call(connector)`` on the connection to ``topic/partition``'s leader, following
        it while it moves (see the module docstring)."""
        tries = 0
        while True:
            try:
                return call(self._connector_for(topic, partition))
            except (BrokerError, OSError) as exc:
                if not _leader_trouble(exc):
                    raise
                tries += 1
                if not self._follow(topic, partition, tries):
                    raise

    def leader_log_end(self, topic: str, partition: int, offset: int) -> int:
        """The log end of ``topic/partition``'s leader (FETCH version 1 as a consumer,
        at ``offset``, nothing read): above its high watermark while the leader has
        not yet learned its followers' positions (just after a failover)."""
        from hostbroker.protocol.replication import FetchPartitionV1, FetchRequestV1

        def ask(connector: _Connector) -> int:
            request = FetchRequestV1(-1, 0, 0, (FetchPartitionV1(topic, partition, -1,
                                                                 offset, 1),))
            (result,) = connector.request(request).partitions
            if result.error_code != ErrorCode.NONE:
                raise BrokerError(result.error_code, topic=topic, partition=partition)
            return result.log_end_offset
        return self._on_leader(topic, partition, ask)

    def _default_for(self, parts: Sequence[api.FetchPartition]) -> _Connector:
        if len(parts) == 1 and self._led:
            return self._connector_for(parts[0].topic, parts[0].partition)
        return self._connector

    def _fetch_routed(self, parts: tuple[api.FetchPartition, ...], max_tries: int) -> list[Any]:
        out: list[Any] = [None] * len(parts)
        todo = list(range(len(parts)))
        tries = 0
        while todo:
            groups: dict[int, tuple[_Connector, list[int]]] = {}
            for i in todo:
                connector = self._connector_for(parts[i].topic, parts[i].partition)
                groups.setdefault(id(connector), (connector, []))[1].append(i)
            for connector, indices in groups.values():
                asked = tuple(parts[i] for i in indices)
                try:
                    got = self._fetch_on(connector, asked)
                except OSError as exc:
                    if connector is self._connector and not any(
                            self.leaders.cached(p.topic) is not None for p in asked):
                        raise  # the broker list's connection, no replicated partition on it
                    got = [exc] * len(asked)  # a leader may have died: looked up again below
                for i, result in zip(indices, got):
                    out[i] = result
            troubled = [i for i in todo if isinstance(out[i], Exception)
                        and _leader_trouble(out[i])]
            tries += 1
            todo = []
            for topic, partition in dict.fromkeys((parts[i].topic, parts[i].partition)
                                                  for i in troubled):
                if self._follow(topic, partition, tries, max_tries):
                    todo += [i for i in troubled if (parts[i].topic, parts[i].partition)
                             == (topic, partition)]
        return out

    def _fetch_on(self, connector: _Connector, parts: tuple[api.FetchPartition, ...]) -> list:
        """One FETCH of ``parts`` on ``connector``: a set or an error per partition."""
        reused = connector.connected
        try:
            self.send_fetch(parts, connector)
            return self.receive_fetch(parts, raise_on_error=False, connector=connector)
        except ConnectionError:
            if not reused:
                raise
        # As _Connector.request: a fetch may be repeated.
        self.send_fetch(parts, connector)
        return self.receive_fetch(parts, raise_on_error=False, connector=connector)
