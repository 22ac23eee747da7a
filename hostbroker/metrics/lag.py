"""Consumer group offsets and lag for ``/metrics``, read through the broker.

Owns: :class:`GroupLag`, ``hb-http``'s cache of which groups the broker
knows, how many members each has, and the offsets each committed; and
the one connection it asks them on (a :class:`GroupConnection` to the
broker's first listener, as ``HttpContext.broker_client`` picks it: the
group requests need its decoding). Every request goes the normal route
(a processor, a handler, ``hb-coordinator``), like any client's.

What a refresh asks, at most once per ``http.metrics.lag.interval.ms``
(scrapes in between get the cached reading):

1. LIST_GROUPS (groups with members) and LIST_OFFSET_GROUPS (every group
   with committed offsets, each with the topics it has them on); the
   union, sorted, is cut to ``http.metrics.max.groups`` (the rest counted
   as omitted, and at least one more when LIST_OFFSET_GROUPS' answer was
   ``truncated``: the groups past its cut are not known).
2. DESCRIBE_GROUP of each group with members: its member count, and the
   topics its members were assigned.
3. OFFSET_FETCH of the group's offsets for every partition of the topics
   it has committed offsets on or was assigned, as this scrape's partition
   table has them: a partition a group committed shows at the next refresh.

An OFFSET_FETCH asks at most ``FETCH_MAX_PARTITIONS`` partitions (and half
``request.max.entries``, as its topics count too), so the handler that
decodes it and builds its answer is never busy with one for more than a
few milliseconds: other clients' requests on that handler wait no longer. Every key a
refresh asks counts against ``http.metrics.max.partitions``; the groups
that do not fit count as omitted. A refresh that fails (the broker does not
answer in ``BROKER_TIMEOUT_S``, or answers an error) keeps the previous
reading, says so once on stderr, and is tried again at the next interval.

Lag. :func:`group_lag` is the one place a group's lag is worked out, for
``/metrics`` and the console's group page alike: the partition's high
watermark (its log end when it is not replicated: where consumers stop)
minus the committed offset, never the log end of a replicated partition (a
leader whose followers trail would show lag no consumer can read). A
committed offset past the high watermark (committed ahead of what was
read, or kept across a failover that cut the log back) shows lag 0; the
committed offset itself is shown as it is.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hostbroker.client.coordinator_requests import GroupConnection
from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.protocol import api
from hostbroker.protocol import groups as gp
from hostbroker.protocol.topics_admin import ListOffsetGroupsRequest

FETCH_MAX_PARTITIONS = 1000


def group_lag(high_watermark: int | None, committed: int | None) -> int | None:
    """A group's lag on one partition, in bytes (module docstring):
    ``high_watermark`` - ``committed``, at least 0; None when either is not
    known (None or negative: no committed offset, no replica here)."""
    if high_watermark is None or committed is None or high_watermark < 0 or committed < 0:
        return None
    return max(0, high_watermark - committed)


@dataclass
class LagReading:
    """``members``: group -> member count (0: offsets only); ``offsets``:
    (group, topic, partition) -> committed offset; ``omitted``: groups left out."""

    members: dict[str, int] = field(default_factory=dict)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    omitted: int = 0


class GroupLag:
    """The cached group reading (module docstring). ``uri``: the broker's
    listener; ``clock``: seconds, monotonic (a test's fake)."""

    def __init__(self, uri: str, *, interval_s: float, max_groups: int, max_keys: int,
                 max_entries: int, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.uri = uri
        self.interval_s = interval_s
        self.max_groups = max_groups
        self.max_keys = max_keys
        # an OFFSET_FETCH counts its topics and partitions against request.max.entries;
        # and one of a few thousand partitions would hold its handler for tens of ms
        self.max_entries = max(1, min(max_entries // 2, FETCH_MAX_PARTITIONS))
        self.timeout_s = timeout_s
        self.clock = clock
        self.last = LagReading()
        self.refreshed_at: float | None = None
        self.failing = False
        self.refreshes = 0
        self._conn: GroupConnection | None = None

    def reading(self, topics: dict[str, list[int]]) -> LagReading:
        """The reading, refreshed first when older than the interval.
        ``topics``: topic -> partitions, of this scrape's partition table."""
        now = self.clock()
        if self.refreshed_at is not None and now - self.refreshed_at < self.interval_s:
            return self.last
        self.refreshed_at = now
        try:
            self.last = self.refresh(topics)
            if self.failing:
                print("hostbroker: hb-http: group offsets are read again", file=sys.stderr,
                      flush=True)
            self.failing = False
        except (OSError, HostbrokerError) as e:
            self.close()
            if not self.failing:
                print(f"hostbroker: hb-http: group offsets not read ({type(e).__name__}: "
                      f"{e}); the metrics keep the last reading", file=sys.stderr, flush=True)
            self.failing = True
        return self.last

    # -- one refresh ------------------------------------------------------------------

    def _request(self, request):
        conn = self._conn
        if conn is None or not conn.connected:
            conn = self._conn = GroupConnection(self.uri, timeout=self.timeout_s,
                                                client_id="hb-http-metrics")
            conn.connect()
        return conn.request(request)

    def _groups(self) -> tuple[list[str], set[str], dict[str, tuple[str, ...]], bool]:
        """(every group, sorted; those with members; group -> the topics it has
        committed offsets on; whether the latter's answer was cut)."""
        answer = self._request(gp.ListGroupsRequest())
        if answer.error_code != ErrorCode.NONE:
            raise BrokerError(answer.error_code, "listing groups")
        with_members = set(answer.groups)
        listed = self._request(ListOffsetGroupsRequest())
        if listed.error_code != ErrorCode.NONE:
            raise BrokerError(listed.error_code, "listing the groups with offsets")
        stored = {g.group: g.topics for g in listed.groups}
        return (sorted(with_members | stored.keys()), with_members, stored,
                bool(listed.truncated))

    def refresh(self, topics: dict[str, list[int]]) -> LagReading:
        groups, with_members, stored, truncated = self._groups()
        reading = LagReading()
        kept = groups[:self.max_groups]
        # the groups past a truncated answer's cut are not known: at least one
        reading.omitted = len(groups) - len(kept) + (1 if truncated else 0)
        assigned: dict[str, set[str]] = {}
        for group in kept:
            if group in with_members:
                described = self._request(gp.DescribeGroupRequest(group))
                reading.members[group] = len(described.members)
                assigned[group] = {a.topic for m in described.members for a in m.assignment}
            else:
                reading.members[group] = 0
        budget = self.max_keys
        asked: dict[str, list[tuple[str, int]]] = {}
        for group in kept:
            wanted = sorted((set(stored.get(group, ())) | assigned.get(group, set()))
                            & topics.keys())
            keys = [(t, p) for t in wanted for p in topics[t]]
            if len(keys) > budget:
                break
            budget -= len(keys)
            asked[group] = keys
        for group in kept[len(asked):]:
            del reading.members[group]
        reading.omitted += len(kept) - len(asked)
        for group, keys in asked.items():
            for (topic, partition), offset in self._fetch(group, keys):
                if offset >= 0:
                    reading.offsets[(group, topic, partition)] = offset
        self.refreshes += 1
        return reading

    def _fetch(self, group: str, keys: list[tuple[str, int]]):
        """((topic, partition), offset) for ``keys``, in requests of at most
        ``max_entries`` partitions."""
        for at in range(0, len(keys), self.max_entries):
            chunk = keys[at:at + self.max_entries]
            request = api.OffsetFetchRequest(
                group, tuple(api.OffsetFetchPartition(t, p) for t, p in chunk))
            answer = self._request(request)
            for r in answer.partitions:
                if r.error_code == ErrorCode.NONE:
                    yield (r.topic, r.partition), r.offset

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
