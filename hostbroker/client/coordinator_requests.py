"""Requests of a consumer group member (and of tools) to its broker's group coordinator.

:class:`CoordinatorClient` sends JOIN_GROUP, SYNC_GROUP, HEARTBEAT,
LEAVE_GROUP, DESCRIBE_GROUP, LIST_GROUPS and the fenced OFFSET_COMMIT v1 of
docs/spec/groups.md, one at a
time over a connection of its own (the first broker of a list that answers,
opened again on the next call after an error). Each call returns the
answer's error code (and its data) rather than raising for the group errors
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS...): the
member's life cycle decides what they mean. An error frame (a broker that
does not serve groups answers UNSUPPORTED_VERSION) raises
:class:`~hostbroker.client.errors.BrokerError`, a lost connection
``ConnectionError`` / ``OSError``.

The JOIN_GROUP is a long poll: the broker holds its answer until the
rebalance completes, up to the rebalance wait, so its answer is waited for
the connection's timeout plus ``rebalance_timeout_ms``.

:class:`GroupConnection` is the :class:`~hostbroker.client.connection.BrokerConnection`
that decodes the answers of the group APIs (api keys 8 to 11).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hostbroker.client.connection import BrokerConnection, connect_first
from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol import groups as gp

__all__ = ["CoordinatorClient", "GroupConnection", "Joined"]

_GROUP_KEYS = frozenset(int(key) for key in gp.GroupApiKey)


class GroupConnection(BrokerConnection):
    """A connection that also decodes the answers of JOIN/SYNC/HEARTBEAT/LEAVE_GROUP."""

    def send_waiting(self, request: Any, broker_wait: float) -> int:
        """Send ``request``, whose answer the broker may hold ``broker_wait`` seconds."""
        correlation_id = self.send(request)
        self._pending[-1] = self._pending[-1]._replace(broker_wait=broker_wait)
        return correlation_id

    def receive(self, api_key: int | None = None) -> Any:
        self._socket()
        if not self._pending or int(self._pending[0].api_key) not in _GROUP_KEYS:
            return super().receive(api_key)
        expected = self._pending.popleft()
        wait = self.timeout if self._answered else min(self.timeout, self.setup_timeout)
        try:
            frame = self._read_frame(wait + expected.broker_wait, expected)
            self._answered = True
            # A HEARTBEAT or LEAVE_GROUP answer has an error frame's size and layout:
            # decoded as the answer, its code is what the broker said either way.
            if api.is_error_frame(frame) and expected.api_key not in gp.SHORT_ANSWER_KEYS:
                correlation_id, code = api.decode_error_frame(frame)
                raise BrokerError(
                    code, f"request {correlation_id} refused, connection closed by the broker")
            correlation_id, response = gp.decode_group_response(expected.api_key, 0, frame)
            if (expected.api_key in gp.SHORT_ANSWER_KEYS
                    and response.error_code in gp.ERROR_FRAME_ONLY_CODES):
                self.close()  # an error frame: the broker closed the connection
            if correlation_id != expected.correlation_id:
                raise ProtocolError(f"answer carries correlation id {correlation_id}, "
                                    f"expected {expected.correlation_id}")
        except BaseException:
            self.close()
            raise
        return response


class Joined:
    """A JOIN_GROUP answer: ``error_code``, ``generation``, ``member_id``, ``members``."""

    __slots__ = ("error_code", "generation", "member_id", "members")

    def __init__(self, response: gp.JoinGroupResponse):
        self.error_code = response.error_code
        self.generation = response.generation
        self.member_id = response.member_id
        self.members = tuple(response.members)

    def __repr__(self) -> str:
        return (f"<Joined {ErrorCode(self.error_code).name} generation {self.generation} "
                f"as {self.member_id!r} of {len(self.members)}>")


class CoordinatorClient:
    """One member's requests to the coordinator over ``uris`` (the first that answers).

    ``timeout`` bounds connecting and each answer (plus the rebalance wait for a join).
    Not thread safe: each thread of a member has a client of its own.
    """

    def __init__(self, uris: Sequence[str], *, timeout: float, client_id: str,
                 setup_timeout: float | None = None, tls: Mapping[str, Any] | None = None):
        self.uris = list(uris)
        self.tls = tls  # the ssl.* settings of ssl:// URIs
        self.timeout = timeout
        self.setup_timeout = timeout if setup_timeout is None else setup_timeout
        self.client_id = client_id
        self._connection: GroupConnection | None = None

    def _get(self) -> GroupConnection:
        connection = self._connection
        if connection is not None and connection.connected:
            return connection
        self._connection = connect_first(self.uris, lambda uri: GroupConnection(
            uri, timeout=self.timeout, client_id=self.client_id,
            setup_timeout=self.setup_timeout, tls=self.tls))
        return self._connection

    def _call(self, request: Any, broker_wait: float = 0.0) -> Any:
        connection = self._get()
        connection.send_waiting(request, broker_wait)
        return connection.receive()

    def join_group(self, group: str, member_id: str, subscription: Mapping[str, int], *,
                   session_timeout_ms: int, rebalance_timeout_ms: int) -> Joined:
        """Join (``member_id`` "" for a new member) with ``{topic: streams}``; waits for
        the rebalance to complete."""
        topics = tuple(gp.SubscribedTopic(topic, n) for topic, n in sorted(subscription.items()))
        request = gp.JoinGroupRequest(group, session_timeout_ms, rebalance_timeout_ms,
                                      member_id, topics)
        return Joined(self._call(request, rebalance_timeout_ms / 1000))

    def sync_group(self, group: str, generation: int,
                   member_id: str) -> tuple[int, dict[str, dict[int, tuple[int, ...]]]]:
        """``(error_code, {topic: {stream: partitions}})`` of ``generation``."""
        response = self._call(gp.SyncGroupRequest(group, generation, member_id))
        assignment: dict[str, dict[int, tuple[int, ...]]] = {}
        for entry in response.assignment:
            assignment.setdefault(entry.topic, {})[entry.stream] = tuple(entry.partitions)
        return response.error_code, assignment

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        return self._call(gp.HeartbeatRequest(group, generation, member_id)).error_code

    def leave_group(self, group: str, member_id: str) -> int:
        return self._call(gp.LeaveGroupRequest(group, member_id)).error_code

    def describe_group(self, group: str) -> gp.DescribeGroupResponse:
        """What the broker holds for ``group``: phase, generation, members and streams."""
        return self._call(gp.DescribeGroupRequest(group))

    def list_groups(self) -> tuple[str, ...]:
        """The groups with members on the broker, sorted."""
        response = self._call(gp.ListGroupsRequest())
        if response.error_code != ErrorCode.NONE:
            raise BrokerError(response.error_code, "listing groups")
        return tuple(response.groups)

    def commit(self, group: str, generation: int, member_id: str,
               offsets: Iterable[tuple[str, int, int, str | None]]) -> dict[tuple[str, int], int]:
        """OFFSET_COMMIT v1 of ``(topic, partition, offset, metadata)``s as member
        ``member_id`` of ``generation``: the error code of each partition."""
        entries = tuple(api.OffsetCommitPartition(*entry) for entry in offsets)
        request = gp.OffsetCommitRequestV1(group, generation, member_id, entries)
        response = self._call(request)
        return {(r.topic, r.partition): r.error_code for r in response.partitions}

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
