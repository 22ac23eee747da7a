"""One group as a plain JSON-able record, and the checks a record passes to be loaded.

:func:`group_record` gives what :mod:`hostbroker.coordinator.store` writes
for a group (docs/spec/groups.md, "The state file"); :func:`group_of_record`
builds the group back from a record read from outside (a file another
process wrote, or anyone else), so it trusts nothing: every field's type,
every string's length, every number's range and the broker's limits
(:class:`~hostbroker.coordinator.model.Limits`) are checked as a JOIN_GROUP's
are, and the first problem raises :class:`RecordError` naming it. A record
that passes builds a group the state machine could have built itself.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hostbroker.coordinator.model import Group, GroupPhase, Limits, Member
from hostbroker.errors import HostbrokerError
from hostbroker.protocol.groups import (
    MAX_GROUP_ID_BYTES,
    MAX_MEMBER_ID_BYTES,
    MAX_STREAMS_PER_TOPIC,
    MAX_TOPIC_BYTES,
)

MAX_CLIENT_ID_BYTES = 255  # a client id is clipped to it on join
MAX_INT32 = 2**31 - 1

_GROUP_KEYS = {"type", "group", "phase", "generation", "rebalance_deadline", "deferred_at",
               "generation_members", "counts", "assignment", "members"}
_MEMBER_KEYS = {"member_id", "client_id", "session_timeout_ms", "rebalance_timeout_ms",
                "subscription", "last_heartbeat", "joined"}


class RecordError(HostbrokerError):
    """A group record that cannot be loaded; the message names the first problem."""


def clip_utf8(text: str, limit: int = MAX_CLIENT_ID_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, on a character boundary."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def group_record(g: Group) -> dict:
    """``g`` as a JSON-able record (see the module docstring)."""
    return {"type": "group", "group": g.name, "phase": g.phase.value,
            "generation": g.generation, "rebalance_deadline": g.rebalance_deadline,
            "deferred_at": g.deferred_at,
            "generation_members": list(g.generation_members),
            "counts": dict(g.counts), "assignment": g.assignment,
            "members": [{"member_id": m.member_id, "client_id": m.client_id,
                         "session_timeout_ms": m.session_timeout_ms,
                         "rebalance_timeout_ms": m.rebalance_timeout_ms,
                         "subscription": dict(m.subscription),
                         "last_heartbeat": m.last_heartbeat, "joined": m.joined}
                        for m in g.members.values()]}


# -- checks ------------------------------------------------------------------
def _fail(what: str) -> None:
    raise RecordError(what)


def _dict(value: Any, what: str, keys: set[str] | None = None) -> Mapping:
    if not isinstance(value, dict):
        _fail(f"{what} is not an object")
    if keys is not None and value.keys() != keys:
        _fail(f"{what} has keys {sorted(map(str, value))[:8]}, not {sorted(keys)}")
    return value


def _list(value: Any, what: str, most: int) -> list:
    if not isinstance(value, list):
        _fail(f"{what} is not a list")
    if len(value) > most:
        _fail(f"{what} has {len(value)} entries, more than {most}")
    return value


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        _fail(f"{what} is not an integer from {lo} to {hi}")
    return value


def _time(value: Any, what: str) -> float:
    try:  # an integer too big for a float raises OverflowError
        finite = type(value) in (int, float) and math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        _fail(f"{what} is not a finite number")
    return float(value)


def _text(value: Any, what: str, most: int, least: int = 1) -> str:
    if not isinstance(value, str):
        _fail(f"{what} is not a string")
    try:
        n = len(value.encode("utf-8", "surrogatepass"))
    except UnicodeEncodeError:
        n = -1
    if not least <= n <= most:
        _fail(f"{what} is not {least} to {most} UTF-8 bytes")
    return value


def _subscription(value: Any, what: str, limits: Limits) -> dict[str, int]:
    sub = _dict(value, what)
    if not 1 <= len(sub) <= limits.max_topics_per_member:
        _fail(f"{what} has {len(sub)} topics, not 1 to {limits.max_topics_per_member}")
    for topic, streams in sub.items():
        _text(topic, f"{what}'s topic", MAX_TOPIC_BYTES)
        _int(streams, f"{what}'s streams", 1, MAX_STREAMS_PER_TOPIC)
    return dict(sub)


def group_of_record(record: Any, limits: Limits, now: float, keep_times: bool = False) -> Group:
    """The group ``record`` holds, checked against ``limits``; every member's
    session restarts at ``now`` (heartbeats the writer of the record saw
    after it are not in it) and a wait is cut to end at most the longest
    rebalance wait after ``now``; ``keep_times`` keeps the record's times as
    they are instead (a copy within one process). Raises
    :class:`RecordError` on the first problem."""
    r = _dict(record, "the record", _GROUP_KEYS)
    if r["type"] != "group":
        _fail("the record's type is not 'group'")
    name = _text(r["group"], "the group's name", MAX_GROUP_ID_BYTES)
    what = f"group {name[:64]!r}"
    phases = {p.value: p for p in (GroupPhase.PREPARING_REBALANCE, GroupPhase.STABLE)}
    if not isinstance(r["phase"], str) or r["phase"] not in phases:
        _fail(f"{what}: phase is not one of {sorted(phases)}")
    phase = phases[r["phase"]]
    generation = _int(r["generation"], f"{what}: generation", 0, MAX_INT32)
    latest = math.inf if keep_times else now + limits.max_rebalance_timeout_ms
    deadline = deferred = None
    if phase is GroupPhase.PREPARING_REBALANCE:
        deadline = min(_time(r["rebalance_deadline"], f"{what}: rebalance_deadline"), latest)
        if r["deferred_at"] is not None:
            _fail(f"{what}: a rebalance both waits and is deferred")
    else:
        if r["rebalance_deadline"] is not None:
            _fail(f"{what}: a STABLE group has a rebalance_deadline")
        if r["deferred_at"] is not None:
            deferred = min(_time(r["deferred_at"], f"{what}: deferred_at"), latest)
    g = Group(name, phase, generation, rebalance_deadline=deadline, deferred_at=deferred)

    raw_members = _list(r["members"], f"{what}: members", limits.max_members)
    if not raw_members:
        _fail(f"{what}: no members (an empty group is never kept)")
    for raw in raw_members:
        m = _dict(raw, f"{what}: a member", _MEMBER_KEYS)
        member_id = _text(m["member_id"], f"{what}: a member id", MAX_MEMBER_ID_BYTES)
        if member_id in g.members:
            _fail(f"{what}: member {member_id[:64]!r} twice")
        mw = f"{what}: member {member_id[:64]!r}"
        session = _int(m["session_timeout_ms"], f"{mw}: session_timeout_ms",
                       limits.min_session_timeout_ms, limits.max_session_timeout_ms)
        rebalance = _int(m["rebalance_timeout_ms"], f"{mw}: rebalance_timeout_ms",
                         1, limits.max_rebalance_timeout_ms)
        beat = _time(m["last_heartbeat"], f"{mw}: last_heartbeat")
        if type(m["joined"]) is not bool:
            _fail(f"{mw}: joined is not true or false")
        if m["joined"] and phase is GroupPhase.STABLE and deferred is None:
            _fail(f"{mw}: waits in a join of a STABLE group with no rebalance to come")
        g.members[member_id] = Member(
            member_id, _text(m["client_id"], f"{mw}: client_id", MAX_CLIENT_ID_BYTES, 0),
            session, rebalance, _subscription(m["subscription"], f"{mw}: subscription", limits),
            beat if keep_times else now, m["joined"])
    g.streams = sum(sum(m.subscription.values()) for m in g.members.values())
    if g.streams > limits.max_streams:
        _fail(f"{what}: {g.streams} streams, more than {limits.max_streams}")

    ids = _list(r["generation_members"], f"{what}: generation_members", limits.max_members)
    for member_id in ids:
        _text(member_id, f"{what}: a generation member", MAX_MEMBER_ID_BYTES)
    if ids != sorted(set(ids)):
        _fail(f"{what}: generation_members is not sorted and unique")
    g.generation_members = tuple(ids)

    counts = _dict(r["counts"], f"{what}: counts")
    if len(counts) > limits.max_streams:
        _fail(f"{what}: counts of {len(counts)} topics, more than {limits.max_streams}")
    for topic, count in counts.items():
        _text(topic, f"{what}: a counted topic", MAX_TOPIC_BYTES)
        _int(count, f"{what}: a partition count", 0, limits.max_partitions)
    g.counts = dict(counts)

    assignment = _dict(r["assignment"], f"{what}: assignment")
    owned = 0
    for member_id, topics in assignment.items():
        if member_id not in g.members:
            _fail(f"{what}: an assignment of a member it does not have")
        for topic, streams in _dict(topics, f"{what}: an assignment").items():
            if topic not in g.counts:
                _fail(f"{what}: an assignment of a topic it did not count")
            for stream in _list(streams, f"{what}: an assignment's streams",
                                MAX_STREAMS_PER_TOPIC):
                for p in _list(stream, f"{what}: a stream's partitions", g.counts[topic]):
                    _int(p, f"{what}: a partition", 0, g.counts[topic] - 1)
                owned += len(stream)
    if owned > limits.max_partitions:
        _fail(f"{what}: {owned} partitions assigned, more than {limits.max_partitions}")
    g.assignment = {mid: {t: [list(s) for s in streams] for t, streams in topics.items()}
                    for mid, topics in assignment.items()}
    return g
