"""A thin client with one method per API, for tools, tests and benchmarks.

:class:`SimpleClient` sends one request at a time over one
:class:`BrokerConnection` and returns the protocol's own result dataclasses.
A partition answered with a non-zero error code raises :class:`BrokerError`
unless the call says ``raise_on_error=False``, in which case the caller reads
``error_code`` itself. Message sets go in and come out as opaque bytes (build
and parse them with ``hostbroker.log.message``).

The connection opens on the first request, not in the constructor, and is
opened again on the next request after an error closed it. Producers,
consumers and anything that pipelines build on :class:`BrokerConnection`
directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hostbroker.client.connection import DEFAULT_CLIENT_ID, DEFAULT_TIMEOUT, BrokerConnection
from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api, logdirs, replication, throttled, topics_admin
from hostbroker.protocol.primitives import Buffer

DEFAULT_PRODUCE_TIMEOUT_MS = 10_000


def _only(results: tuple[Any, ...], topic: str, partition: int) -> Any:
    """The single result of a one-partition request, checked to be the one asked for."""
    if len(results) != 1 or (results[0].topic, results[0].partition) != (topic, partition):
        raise ProtocolError(f"the answer for {topic}/{partition} holds {results!r}")
    return results[0]


class SimpleClient:
    """Blocking calls, one request in flight, over ``uri`` (see ``parse_uri``)."""

    def __init__(
        self,
        uri: str,
        client_id: str = DEFAULT_CLIENT_ID,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        tls: Mapping[str, Any] | None = None,
    ):
        # tls: the ssl.* client settings of an ssl:// uri (BrokerConnection)
        self.connection = BrokerConnection(uri, timeout=timeout, client_id=client_id, tls=tls)
        # how long the broker held the last PRODUCE v1 or FETCH v2 answer for a
        # quota (ms; None until one came)
        self.throttle_time_ms: int | None = None

    def __repr__(self) -> str:
        return f"<SimpleClient {self.connection!r}>"

    def __enter__(self) -> SimpleClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.connection.close()

    def request(self, request: api.Request) -> api.Response | None:
        """Send any request and return its decoded answer, connecting first if needed."""
        if not self.connection.connected:
            self.connection.connect()
        return self.connection.request(request)

    def _partition_results(self, request: api.Request, raise_on_error: bool) -> tuple[Any, ...]:
        """The per-partition results of an answer, raising for the first error if asked."""
        response = self.request(request)
        results = response.partitions
        if hasattr(response, "throttle_time_ms"):
            self.throttle_time_ms = response.throttle_time_ms
        if raise_on_error:
            for result in results:
                if result.error_code != ErrorCode.NONE:
                    raise BrokerError(
                        result.error_code, topic=result.topic, partition=result.partition
                    )
        return results

    # PRODUCE

    def produce(
        self,
        topic: str,
        partition: int,
        message_set: Buffer,
        acks: int = 1,
        timeout_ms: int = DEFAULT_PRODUCE_TIMEOUT_MS,
        *,
        raise_on_error: bool = True,
        version: int = 0,
    ) -> api.ProducePartitionResult | None:
        """Append ``message_set`` to one partition; None for acks=0 (no answer)."""
        results = self.produce_many(
            [(topic, partition, message_set)], acks, timeout_ms, raise_on_error=raise_on_error,
            version=version,
        )
        return None if results is None else _only(results, topic, partition)

    def produce_many(
        self,
        partitions: Iterable[tuple[str, int, Buffer]],
        acks: int = 1,
        timeout_ms: int = DEFAULT_PRODUCE_TIMEOUT_MS,
        *,
        raise_on_error: bool = True,
        version: int = 0,
    ) -> tuple[api.ProducePartitionResult, ...] | None:
        """Append to several partitions in one request: ``(topic, partition, message_set)``s.
        ``version`` 1: the answer says how long a quota held it (:attr:`throttle_time_ms`)."""
        request = (throttled.ProduceRequestV1 if version == throttled.PRODUCE_V1
                   else api.ProduceRequest)(
            acks, timeout_ms, tuple(api.ProducePartition(*p) for p in partitions)
        )
        if acks == 0:
            self.request(request)
            return None
        return self._partition_results(request, raise_on_error)

    # FETCH

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        *,
        raise_on_error: bool = True,
        version: int = 0,
    ) -> api.FetchPartitionResult:
        """Up to ``max_bytes`` of the log from ``offset``; the set may end with a partial entry."""
        results = self.fetch_many(
            [(topic, partition, offset, max_bytes)], max_wait_ms, min_bytes,
            raise_on_error=raise_on_error, version=version,
        )
        return _only(results, topic, partition)

    def fetch_many(
        self,
        partitions: Iterable[tuple[str, int, int, int]],
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        *,
        raise_on_error: bool = True,
        version: int = 0,
    ) -> tuple[api.FetchPartitionResult, ...]:
        """Fetch ``(topic, partition, offset, max_bytes)``s in one (possibly long-poll) request.
        ``version`` 2: the answer says how long a quota held it (:attr:`throttle_time_ms`)."""
        request = (throttled.FetchRequestV2 if version == throttled.FETCH_V2
                   else api.FetchRequest)(
            max_wait_ms, min_bytes, tuple(api.FetchPartition(*p) for p in partitions)
        )
        return self._partition_results(request, raise_on_error)

    # OFFSETS

    def offsets(
        self,
        topic: str,
        partition: int,
        time: int = api.LATEST_TIME,
        max_offsets: int = 1,
        *,
        raise_on_error: bool = True,
    ) -> tuple[int, ...]:
        """Offsets at or before ``time`` (ms since the epoch, LATEST_TIME or EARLIEST_TIME)."""
        response = self.request(api.OffsetsRequest(topic, partition, time, max_offsets))
        if raise_on_error and response.error_code != ErrorCode.NONE:
            raise BrokerError(response.error_code, topic=topic, partition=partition)
        return response.offsets

    # METADATA

    def metadata(self, topics: Iterable[str] = ()) -> api.MetadataResponse:
        """Brokers and topics (all topics when ``topics`` is empty); errors stay in the answer."""
        return self.request(api.MetadataRequest(tuple(topics)))

    def metadata_v1(self, topics: Iterable[str] = ()) -> replication.MetadataResponseV1:
        """METADATA version 1: the controller, the live brokers and, per partition, its
        leader, leader epoch, replicas, ISR, log start and high watermark."""
        return self.request(replication.MetadataRequestV1(tuple(topics)))

    def metadata_v2(self, topics: Iterable[str] = ()) -> logdirs.MetadataResponseV2:
        """METADATA version 2: version 1's answer with, per partition, the log dirs of
        its leader, replicas, ISR and reassignment target, and the broker's log dirs
        (id, path, state). A broker without it refuses the request (BrokerError
        UNSUPPORTED_VERSION, connection closed)."""
        return self.request(logdirs.MetadataRequestV2(tuple(topics)))

    # CREATE_TOPIC / DELETE_TOPIC

    def create_topic(
        self,
        topic: str,
        partitions: int,
        configs: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        *,
        replication_factor: int | None = None,
        raise_on_error: bool = True,
    ) -> api.AdminResponse:
        """CREATE_TOPIC; with a ``replication_factor`` (-1: the broker's
        ``default.replication.factor``), version 1, whose replicas a standalone
        broker places on distinct log dirs."""
        if isinstance(configs, Mapping):
            configs = configs.items()
        entries = tuple(api.TopicConfigEntry(key, value) for key, value in configs or ())
        if replication_factor is not None:
            return self._admin(logdirs.CreateTopicRequestV1(topic, partitions, entries,
                                                            replication_factor), raise_on_error)
        return self._admin(api.CreateTopicRequest(topic, partitions, entries), raise_on_error)

    def delete_topic(self, topic: str, *, raise_on_error: bool = True) -> api.AdminResponse:
        return self._admin(api.DeleteTopicRequest(topic), raise_on_error)

    # ALTER_REPLICA_DIRS / LOG_DIR_ADMIN (a standalone broker's replicas across log dirs)

    def alter_replica_dirs(
        self, partitions: Iterable[tuple[str, int, Iterable[int]]]
    ) -> logdirs.AlterReplicaDirsResponse:
        """Start moving ``(topic, partition, [log dir ids])``s, the first dir the
        preferred leader; the answer's errors (whole and per partition) are the
        caller's to read."""
        return self.request(logdirs.AlterReplicaDirsRequest(tuple(
            logdirs.AlterReplicaDirsPartition(topic, partition, tuple(dirs))
            for topic, partition, dirs in partitions)))

    def log_dir_admin(self, action: int, path: str | None = None,
                      dir_id: int = logdirs.NO_DIR) -> logdirs.LogDirAdminResponse:
        """LOG_DIR_ADMIN: bring the log dir at ``path`` online (``ACTION_ONLINE``), or
        forget ``dir_id`` (``ACTION_FORGET``); the answer's error is the caller's to read."""
        return self.request(logdirs.LogDirAdminRequest(action, path, dir_id))

    # ALTER_TOPIC / LIST_OFFSET_GROUPS

    def alter_topic(
        self,
        topic: str,
        *,
        partitions: int | None = None,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Iterable[str] = (),
        validate_only: bool = False,
        raise_on_error: bool = True,
    ) -> api.AdminResponse:
        """ALTER_TOPIC: grow ``topic`` to ``partitions`` (None: unchanged), set
        and delete config overrides. The broker checks the request whole
        before anything changes (``validate_only``: those checks alone); a
        failure part-way is answered naming the partitions that missed the
        change, and sending the same change again completes it."""
        entries = tuple(api.TopicConfigEntry(k, v) for k, v in (set_configs or {}).items())
        request = topics_admin.AlterTopicRequest(
            topic, topics_admin.PARTITIONS_UNCHANGED if partitions is None else partitions,
            entries, tuple(delete_configs), 1 if validate_only else 0)
        return self._admin(request, raise_on_error)

    def list_offset_groups(self, groups: Iterable[str] = ()
                           ) -> topics_admin.ListOffsetGroupsResponse:
        """LIST_OFFSET_GROUPS: the groups of ``groups`` (empty: every group)
        the broker's offsets store holds, sorted, each with the topics it has
        committed offsets on; its ``error_code`` and ``truncated`` are the
        caller's to read."""
        return self.request(topics_admin.ListOffsetGroupsRequest(tuple(groups)))

    def describe_topic_configs(self, topics: Iterable[str] = ()
                               ) -> tuple[topics_admin.TopicConfigs, ...]:
        """DESCRIBE_TOPIC_CONFIGS: each topic's config overrides (every topic
        when ``topics`` is empty); each topic's error is the caller's to read."""
        return self.request(topics_admin.DescribeTopicConfigsRequest(tuple(topics))).topics

    def _admin(self, request: api.Request, raise_on_error: bool) -> api.AdminResponse:
        response = self.request(request)
        if raise_on_error and response.error_code != ErrorCode.NONE:
            raise BrokerError(response.error_code, response.error_message or "")
        return response

    # OFFSET_COMMIT / OFFSET_FETCH

    def offset_commit(
        self,
        group: str,
        offsets: Iterable[tuple[str, int, int, str | None]],
        *,
        raise_on_error: bool = True,
    ) -> tuple[api.OffsetCommitPartitionResult, ...]:
        """Store ``(topic, partition, offset, metadata)``s as the group's consumer offsets."""
        request = api.OffsetCommitRequest(
            group, tuple(api.OffsetCommitPartition(*entry) for entry in offsets)
        )
        return self._partition_results(request, raise_on_error)

    def offset_fetch(
        self,
        group: str,
        partitions: Iterable[tuple[str, int]],
        *,
        raise_on_error: bool = True,
    ) -> tuple[api.OffsetFetchPartitionResult, ...]:
        """The group's stored offsets (-1 where it never committed) for ``(topic, partition)``s."""
        request = api.OffsetFetchRequest(
            group, tuple(api.OffsetFetchPartition(*entry) for entry in partitions)
        )
        return self._partition_results(request, raise_on_error)
