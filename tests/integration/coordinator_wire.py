"""Raw group requests to a real broker, for tests/integration/test_coordinator_wire.py.

:class:`GroupWire` is one connection that sends JOIN_GROUP, SYNC_GROUP,
HEARTBEAT, LEAVE_GROUP, DESCRIBE_GROUP, LIST_GROUPS and OFFSET_COMMIT v0/v1
frames built with the codecs of :mod:`hostbroker.protocol.groups` and reads
their answers; a join can be sent now and its answer read later (it waits for
the rebalance). :func:`poll` waits for a condition instead of sleeping.
:class:`Member` runs one member's life in a thread (join, sync, heartbeat,
rejoin) and :func:`settled` says when members agree on one generation that
owns every partition once.
"""

from __future__ import annotations

import itertools
import threading
import time

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol import groups as gp
from tests.integration.wire_helpers import RawSocket

_corr = itertools.count(1)


def poll(condition, timeout: float = 10.0, interval: float = 0.02):
    """Call ``condition`` until it returns something true; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: last {value!r}")
        time.sleep(interval)


class GroupWire(RawSocket):
    """A connection speaking the group APIs; every call sends one request."""

    def __init__(self, uri: str, client_id: str = "c", timeout: float = 20.0):
        super().__init__(uri, timeout)
        self.client_id = client_id

    def request(self, body) -> int:
        corr = next(_corr)
        self.send(api.encode_request(body, corr, self.client_id))
        return corr

    def answer(self, body_type):
        frame = self.read_frame()
        if api.is_error_frame(frame) and body_type not in (gp.HeartbeatRequest,
                                                           gp.LeaveGroupRequest):
            raise AssertionError(f"error frame {frame!r}")
        _, response = gp.decode_group_response(body_type.API_KEY, body_type.API_VERSION, frame)
        return response

    def call(self, body):
        self.request(body)
        return self.answer(type(body))

    # -- one request each ------------------------------------------------------
    def send_join(self, group: str, topics: dict[str, int], member_id: str = "",
                  session_ms: int = 3000, rebalance_ms: int = 3000) -> int:
        return self.request(gp.JoinGroupRequest(
            group, session_ms, rebalance_ms, member_id,
            tuple(gp.SubscribedTopic(t, n) for t, n in topics.items())))

    def join_answer(self) -> gp.JoinGroupResponse:
        return self.answer(gp.JoinGroupRequest)

    def join(self, group: str, topics: dict[str, int], member_id: str = "", **kw):
        self.send_join(group, topics, member_id, **kw)
        return self.join_answer()

    def sync(self, group: str, generation: int, member_id: str) -> gp.SyncGroupResponse:
        return self.call(gp.SyncGroupRequest(group, generation, member_id))

    def heartbeat(self, group: str, generation: int, member_id: str):
        return self.call(gp.HeartbeatRequest(group, generation, member_id)).error_code

    def leave(self, group: str, member_id: str):
        return self.call(gp.LeaveGroupRequest(group, member_id)).error_code

    def describe(self, group: str) -> gp.DescribeGroupResponse:
        return self.call(gp.DescribeGroupRequest(group))

    def list_groups(self) -> tuple[str, ...]:
        return self.call(gp.ListGroupsRequest()).groups

    def commit(self, group: str, entries, generation: int | None = None, member_id: str = ""):
        """OFFSET_COMMIT v0 (``generation`` None) or v1; the per-entry codes."""
        parts = tuple(api.OffsetCommitPartition(t, p, o, "") for t, p, o in entries)
        if generation is None:
            self.request(api.OffsetCommitRequest(group, parts))
            _, response = api.decode_response(api.ApiKey.OFFSET_COMMIT, self.read_frame())
        else:
            self.request(gp.OffsetCommitRequestV1(group, generation, member_id, parts))
            response = self.answer(gp.OffsetCommitRequestV1)
        return [r.error_code for r in response.partitions]

    def fetch_offsets(self, group: str, entries):
        self.request(api.OffsetFetchRequest(group, tuple(
            api.OffsetFetchPartition(t, p) for t, p in entries)))
        _, response = api.decode_response(api.ApiKey.OFFSET_FETCH, self.read_frame())
        return [r.offset for r in response.partitions]


def assignment(sync: gp.SyncGroupResponse) -> dict[tuple[str, int], tuple[int, ...]]:
    """``{(topic, stream): partitions}`` of a SYNC_GROUP answer."""
    return {(a.topic, a.stream): tuple(a.partitions) for a in sync.assignment}


class Member(threading.Thread):
    """A group member in a thread of its own, following docs/spec/groups.md:
    join, sync, heartbeat every ``beat_s``; rejoin on REBALANCE_IN_PROGRESS or
    ILLEGAL_GENERATION (with its member id), on UNKNOWN_MEMBER_ID as new; on a
    closed connection or BROKER_NOT_AVAILABLE connect again and rejoin with
    the member id it has. ``state`` is ``(generation, member_id, assignment)``
    of its last successful sync."""

    def __init__(self, uri: str, group: str, topics: dict[str, int], client_id: str = "m",
                 session_ms: int = 1000, rebalance_ms: int = 1000, beat_s: float = 0.05):
        super().__init__(daemon=True)
        self.uri, self.group, self.topics, self.client_id = uri, group, topics, client_id
        self.session_ms, self.rebalance_ms, self.beat_s = session_ms, rebalance_ms, beat_s
        self.member_id = ""
        self.state: tuple[int, str, dict] | None = None
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                with GroupWire(self.uri, self.client_id) as wire:
                    self._session(wire)
            except (OSError, ConnectionError, AssertionError) as e:
                self.errors.append(repr(e))
                self.state = None
                time.sleep(self.beat_s)
        if self.member_id:
            try:
                with GroupWire(self.uri, self.client_id) as wire:
                    wire.leave(self.group, self.member_id)
            except (OSError, ConnectionError, AssertionError):
                pass

    def _session(self, wire: GroupWire) -> None:
        while not self.stopping.is_set():
            joined = wire.join(self.group, self.topics, self.member_id,
                               session_ms=self.session_ms, rebalance_ms=self.rebalance_ms)
            if joined.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if joined.error_code != ErrorCode.NONE:
                time.sleep(self.beat_s)
                continue
            self.member_id, generation = joined.member_id, joined.generation
            synced = wire.sync(self.group, generation, self.member_id)
            if synced.error_code != ErrorCode.NONE:
                continue
            self.state = (generation, self.member_id, assignment(synced))
            while not self.stopping.is_set():
                time.sleep(self.beat_s)
                code = wire.heartbeat(self.group, generation, self.member_id)
                if code != ErrorCode.NONE:
                    self.state = None
                    if code == ErrorCode.UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                    break

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def settled(members: list[Member], partitions: dict[str, int]):
    """The members' common generation when all are synced in one and their
    streams own every partition of ``partitions`` exactly once; else None."""
    states = [m.state for m in members]
    if any(s is None for s in states) or len({s[0] for s in states}) != 1:
        return None
    owned = [(topic, p) for s in states for (topic, _), parts in s[2].items() for p in parts]
    expected = [(t, p) for t, n in partitions.items() for p in range(n)]
    return states[0][0] if sorted(owned) == sorted(expected) else None
