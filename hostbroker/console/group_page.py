"""The console's group page: ``GET /api/group?group=&offset=&limit=&sort=&topic=``.

Called by :meth:`hostbroker.console.api.Console.group`. What a page asks
the broker, in order, every request bounded by what is left of the page's
deadline (:data:`PAGE_DEADLINE_S`; past it the page is a 504):

1. DESCRIBE_GROUP: the group's members and their assignments.
2. LIST_OFFSET_GROUPS of this group alone: the topics it has committed
   offsets on. A group with neither members nor such topics is a 404 here,
   after these two small requests.
3. OFFSET_FETCH of the partitions of those topics only (``topic=``: of that
   one), in requests of :data:`OFFSET_FETCH_CHUNK`; the partition list is
   the console's cached METADATA (:meth:`Console.metadata`).
4. METADATA v1 of the topics that have rows: their high watermarks of now,
   which the lag is worked out against (:func:`hostbroker.metrics.lag.group_lag`,
   as ``/metrics`` does).

A row is a partition the group has a committed offset on or a member owns.
Rows are sorted by topic and partition, or with ``sort=lag`` by lag,
largest first (rows without a lag last), then paged.
"""

from __future__ import annotations

from hostbroker.console.answers import (FILTER_MAX, answer, broker_refused, group_parameter, page_of,
                                    topic_name)
from hostbroker.errors import ErrorCode
from hostbroker.metrics.lag import group_lag
from hostbroker.web.router import HttpError

OFFSET_FETCH_CHUNK = 1000  # partitions one OFFSET_FETCH asks for
PAGE_DEADLINE_S = 5.0  # what one group page may take, all its broker requests together
SORTS = ("", "lag")


class _Deadline:
    """The page's deadline: each request over the console's broker connection
    waits at most what is left of it; a request past it is a 504. (DESCRIBE_GROUP,
    the page's first request, goes over the group connection, which waits
    ``BROKER_TIMEOUT_S`` at most: no more than the whole deadline.)"""

    def __init__(self, console, seconds: float):
        self.console = console
        self.seconds = seconds
        self.at = console._clock() + seconds

    def left(self, what: str) -> float:
        left = self.at - self.console._clock()
        if left <= 0:
            raise HttpError(504, f"{what}: the page took longer than {self.seconds:g} s")
        return left

    def run(self, what: str, read):
        """``read()``, its broker connection's waits cut to what is left."""
        left = self.left(what)
        connection = self.console.context.broker_client().connection
        saved = connection.timeout
        connection.timeout = min(saved, left)
        try:
            return read()
        except HttpError as exc:
            if exc.status == 502:
                self.left(what)  # a wait cut short by the deadline is the deadline's
            raise
        finally:
            connection.timeout = saved

    def ask(self, what: str, work):
        """``work(client)`` as :meth:`Console.ask` runs it, within the deadline."""
        return self.run(what, lambda: self.console.ask(what, work))


def _query(request) -> tuple[str, str | None]:
    """(sort, topic) of the page's query; 400 naming a bad one."""
    sort = request.query.get("sort", "")
    if sort not in SORTS:
        raise HttpError(400, f"sort must be lag (or absent), not {sort[:40]!r}")
    topic = request.query.get("topic", "")
    return sort, (topic_name(topic) if topic else None)


def _high_watermarks(deadline: _Deadline, topics: list[str]
                     ) -> dict[tuple[str, int], int | None]:
    """(topic, partition) -> where consumers stop, of ``topics`` (not empty),
    read now with METADATA v1: the high watermark of a replicated partition,
    the log end of one that is not; None where this broker holds no replica
    (a cluster's)."""
    metadata = deadline.ask("reading the high watermarks", lambda c: c.metadata_v1(topics))
    return {(t.topic, p.partition): p.high_watermark if p.high_watermark >= 0 else None
            for t in metadata.topics for p in t.partitions}


def _committed(deadline: _Deadline, name: str, keys: list[tuple[str, int]]
               ) -> dict[tuple[str, int], int]:
    committed = {}
    for at in range(0, len(keys), OFFSET_FETCH_CHUNK):
        chunk = keys[at:at + OFFSET_FETCH_CHUNK]
        results = deadline.ask(f"reading the offsets of group {name[:FILTER_MAX]}",
                               lambda c: c.offset_fetch(name, chunk, raise_on_error=False))
        committed.update({(r.topic, r.partition): r.offset for r in results
                          if r.error_code == ErrorCode.NONE and r.offset >= 0})
    return committed


def _stored_topics(deadline: _Deadline, name: str) -> tuple[set[str], bool]:
    """The topics ``name`` has committed offsets on (LIST_OFFSET_GROUPS of it
    alone), and whether the broker cut the list short."""
    what = f"listing the topics of group {name[:FILTER_MAX]}"
    listed = deadline.ask(what, lambda c: c.list_offset_groups([name]))
    if listed.error_code != ErrorCode.NONE:
        raise broker_refused(listed.error_code, None, what)
    return set(listed.topics_of(name)), bool(listed.truncated)


def _sorted(rows: list[dict], sort: str) -> list[dict]:
    if sort == "lag":  # largest first; rows without a lag last
        return sorted(rows, key=lambda r: (r["lag"] is None, -(r["lag"] or 0),
                                           r["topic"], r["partition"]))
    return rows


def group_page(console, request):
    """The group page's answer (module docstring)."""
    from hostbroker.protocol.groups import MAX_GROUP_ID_BYTES

    name = group_parameter(request, MAX_GROUP_ID_BYTES)
    offset, limit, _ = page_of(request, console.page_max)
    sort, only = _query(request)
    deadline = _Deadline(console, PAGE_DEADLINE_S)
    what = f"describing group {name[:FILTER_MAX]}"
    deadline.left(what)
    state = console.ask_groups(what, lambda c: c.describe_group(name))
    if state.error_code != ErrorCode.NONE:
        raise broker_refused(state.error_code, None, what)
    members = list(state.members)
    stored, truncated = _stored_topics(deadline, name)
    if not members and not stored:
        raise HttpError(404, f"no group {name[:FILTER_MAX]}: no members and no committed "
                             "offsets")
    owners = {(a.topic, p): f"{m.member_id}-{a.stream}"
              for m in members for a in m.assignment for p in a.partitions}
    topics = stored | {t for t, _ in owners}
    if only is not None:
        topics &= {only}
    partitions = {t.topic: sorted(p.partition for p in t.partitions)
                  for t in deadline.run("reading the topics", console.metadata).topics
                  if t.topic in topics}
    keys = [(t, p) for t in sorted(stored & partitions.keys()) for p in partitions[t]]
    committed = _committed(deadline, name, keys)
    known = {(t, p) for t, ps in partitions.items() for p in ps}
    shown_keys = sorted(set(committed) | (set(owners) & known))
    shown_topics = sorted({t for t, _ in shown_keys})
    ends = _high_watermarks(deadline, shown_topics) if shown_topics else {}
    rows = []
    total_lag = 0
    for key in shown_keys:
        done, end = committed.get(key), ends.get(key)
        lag = group_lag(end, done)
        total_lag += lag or 0
        rows.append({"topic": key[0], "partition": key[1], "owner": owners.get(key),
                     "committed": done, "high_watermark": end, "lag": lag})
    rows = _sorted(rows, sort)
    return answer({
        "group": name, "phase": state.phase if members else None,
        "generation": state.generation if members else None,
        "members": [{"member_id": m.member_id, "client_id": m.client_id,
                     "session_timeout_ms": m.session_timeout_ms,
                     "assignment": [{"topic": a.topic, "stream": a.stream,
                                     "partitions": list(a.partitions)}
                                    for a in m.assignment]} for m in members],
        "total": len(rows), "offset": offset, "limit": limit, "sort": sort or None,
        "topic": only, "topics_truncated": truncated, "total_lag": total_lag,
        "partitions": rows[offset:offset + limit]})
