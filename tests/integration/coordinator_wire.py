"""Raw group requests to a real broker, for tests/integration/test_coordinator_wire.py.

:class:`GroupWire` is one connection that sends JOIN_GROUP, SYNC_GROUP,
HEARTBEAT, LEAVE_GROUP, DESCRIBE_GROUP, LIST_GROUPS and OFFSET_COMMIT v0/v1
frames built with the codecs of :mod:`hostbroker.protocol.groups` and reads
their answers; a join can be sent now and its answer read later (it waits for
the rebalance). :func:`poll` waits for a condition instead of sleeping.
"""

from __future__ import annotations

import itertools
import time

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
