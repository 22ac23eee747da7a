"""Which bytes a read takes: partitions, offset ranges, and their split into input partitions.

Runs on the driver and talks to the brokers through the client library; no
Spark here. A :class:`Range` is one byte range ``[start, end)`` of one
partition, both ends entry boundaries, read by one Spark task. Ranges larger
than ``maxBytesPerPartition`` are split at segment starts (OFFSETS returns
them) and, inside a segment, at an entry start found by reading the bytes in
between (:meth:`Planner.boundary_before`), never in the middle of an entry.

Offsets given by time map to segment boundaries: :meth:`Planner.offset_at`
is the start of the first segment last written after the time, so every
message written after it is included and consecutive time windows tile the
log without overlap (docs/spark.md, "Ranges by time").

A :class:`Planner` asks one broker (or a failover list of brokers that hold
the same topics); a replicated topic's partitions that broker holds no
replica of are found through the consumer's leader map (METADATA v1 of the
list), their offsets asked of their leaders. In cluster mode ``hostbroker.spark.cluster`` runs one per
live broker, made with ``broker=ID``: its partitions, ranges and keys then
carry that broker id. A read's partitions are keyed ``(topic, partition)``
standalone and ``(topic, broker, partition)`` in cluster mode (:func:`key_of`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from hostbroker.client.consumer import EARLIEST as EARLIEST_TIME
from hostbroker.client.consumer import LATEST as LATEST_TIME
from hostbroker.client.consumer import SimpleConsumer
from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode
from hostbroker.spark.options import EARLIEST, LATEST, Part, ReadOptions, part_name

log = logging.getLogger(__name__)

# Far enough in the future that OFFSETS lists every segment start and the log end.
_ALL_SEGMENTS_TIME = 2**62
_MAX_SEGMENTS = 1_000_000
# Bytes read per fetch while looking for an entry boundary on the driver.
_WALK_FETCH_BYTES = 8 * 1024 * 1024


class DataLossError(RuntimeError):
    """Part of a requested range is gone (retention) or the log no longer reaches it."""


class PlanningError(RuntimeError):
    """A read that cannot be planned: a topic or partition missing or offline, bad offsets."""


Key = tuple  # (topic, partition), or (topic, broker, partition) in cluster mode


def key_of(topic: str, partition: int, broker: int | None = None) -> Key:
    return (topic, partition) if broker is None else (topic, broker, partition)


def part_of(key: Key) -> Part:
    """The key's partition as the options name it: a number, or (broker, partition)."""
    return key[1] if len(key) == 2 else (key[1], key[2])


def key_name(key: Key) -> str:
    """``topic/0``, or ``topic/1-0`` for broker 1's partition 0."""
    return f"{key[0]}/{part_name(part_of(key))}"


class _Keyed:
    """The key and name of a partition that has ``topic``, ``partition`` and ``broker``."""

    @property
    def key(self) -> Key:
        return key_of(self.topic, self.partition, self.broker)

    @property
    def name(self) -> str:
        return key_name(self.key)


@dataclass(frozen=True)
class Range(_Keyed):
    """Bytes ``[start, end)`` of ``topic/partition`` on the brokers ``uris`` (of broker
    ``broker`` of a cluster, or None standalone)."""

    uris: tuple[str, ...]
    topic: str
    partition: int
    start: int
    end: int
    broker: int | None = None

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PartitionState(_Keyed):
    """A partition as its broker's METADATA described it. ``leader_end``: a replicated
    partition's log end at its leader (``log_end`` is its high watermark), None when
    not known or not replicated."""

    topic: str
    partition: int
    log_start: int
    log_end: int
    error_code: int
    broker: int | None = None
    leader_end: int | None = None


def _where(topic: str, partition: int, broker: int | None = None) -> str:
    return key_name(key_of(topic, partition, broker))


class Planner:
    """Answers a read's planning questions from the brokers of ``opts.bootstrap``;
    ``broker``: the id of the cluster's broker they are (checked in its METADATA)."""

    def __init__(self, opts: ReadOptions, broker: int | None = None):
        self.opts = opts
        self.broker = broker
        config = {**opts.client, "auto.offset.reset": "none"}
        self.consumer = SimpleConsumer(list(opts.bootstrap), config)

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- partitions ----------------------------------------------------------
    def partitions(self, *, must_exist: bool) -> dict[Key, PartitionState]:
        """Every partition the read takes, by key.

        With ``must_exist`` (batch reads, and ``assign`` always) a subscribed
        topic or assigned partition that does not exist fails; otherwise it is
        simply not there yet (a stream picks it up when it appears).
        """
        opts = self.opts
        names = tuple(opts.subscribe or opts.assign or ())
        metadata = self.consumer.metadata(names if opts.pattern is None else ())
        if self.broker is not None and metadata.broker_id != self.broker:
            raise PlanningError(f"{self._brokers()} is registered in ZooKeeper as broker "
                                f"{self.broker}, but broker {metadata.broker_id} answers there")
        found: dict[Key, PartitionState] = {}
        present = set()
        for topic in metadata.topics:
            if not opts.wants(topic.topic):
                continue
            if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if topic.error_code != ErrorCode.NONE:
                raise PlanningError(f"topic {topic.topic}: {_code_name(topic.error_code)}")
            present.add(topic.topic)
            wanted = None if opts.assign is None else set(opts.assign[topic.topic])
            for p in topic.partitions:
                if wanted is not None and p.partition not in wanted:
                    continue
                state = PartitionState(topic.topic, p.partition, p.log_start_offset,
                                       p.log_end_offset, p.error_code, self.broker)
                found[state.key] = state
        if self.broker is None:
            self._replicated_partitions(names, present, found)
        if must_exist or opts.assign is not None:
            for topic in names:
                if topic not in present:
                    raise PlanningError(f"topic {topic} does not exist on {self._brokers()}")
            for topic, parts in (opts.assign or {}).items():
                for p in parts:
                    if key_of(topic, p, self.broker) not in found:
                        raise PlanningError(f"partition {_where(topic, p, self.broker)} does "
                                            f"not exist on {self._brokers()}")
        for state in found.values():
            if state.error_code != ErrorCode.NONE:
                raise PlanningError(f"partition {state.name} is "
                                    f"unreadable: {_code_name(state.error_code)}")
        return dict(sorted(found.items()))

    def _replicated_partitions(self, names, present: set, found: dict,
                               away: set | None = None) -> None:
        """Add the partitions of replicated topics that the broker answering METADATA
        holds no replica of (it names only its own): every global partition, its log
        start and end (the high watermark) asked of its leader. A topic no broker of
        the list holds, or found only by a pattern, is not looked up. With ``away``
        a partition whose leader does not answer (a failover under way) goes there
        instead of failing the read."""
        opts = self.opts
        for topic in dict.fromkeys([*names, *sorted(present)]):
            if not opts.wants(topic):
                continue
            try:
                leaders = self.consumer.leaders.get(topic)
            except OSError:
                if away is not None:
                    raise  # no broker answers: the caller keeps the partitions it had
                continue
            except Exception:  # noqa: BLE001 - no broker answers METADATA v1: version 0 said
                continue
            if leaders is None or not leaders.partitions:
                continue
            present.add(topic)
            wanted = None if opts.assign is None else set(opts.assign.get(topic, ()))
            for leader in leaders.partitions:
                p = leader.partition
                if (wanted is not None and p not in wanted) or key_of(topic, p) in found:
                    continue
                try:
                    start = self._offsets(topic, p, EARLIEST_TIME, 1)
                    end = self._offsets(topic, p, LATEST_TIME, 1)
                except (PlanningError, OSError) as exc:
                    if away is None:
                        raise
                    log.warning("%s: %s; read when its leader answers", _where(topic, p), exc)
                    away.add(key_of(topic, p))
                    continue
                hw = end[0] if end else 0
                state = PartitionState(topic, p, start[0] if start else 0, hw,
                                       ErrorCode.NONE, None, self._leader_end(topic, p, hw))
                found[state.key] = state

    def _leader_end(self, topic: str, partition: int, hw: int) -> int | None:
        """The log end of ``topic/partition``'s leader; None when it does not answer."""
        try:
            return self.consumer.leader_log_end(topic, partition, hw)
        except (BrokerError, OSError) as exc:
            log.info("%s: its leader's log end unknown: %s", _where(topic, partition), exc)
            return None

    def _brokers(self) -> str:
        return ", ".join(self.opts.bootstrap)

    # -- offsets -------------------------------------------------------------
    def segment_starts(self, topic: str, partition: int) -> list[int]:
        """Every segment's first offset and the log end, ascending."""
        offsets = self._offsets(topic, partition, _ALL_SEGMENTS_TIME, _MAX_SEGMENTS)
        return sorted(set(offsets))

    def _offsets(self, topic: str, partition: int, time: int, count: int) -> list[int]:
        try:
            return self.consumer.offsets_before(topic, partition, time, count)
        except BrokerError as exc:
            raise PlanningError(f"OFFSETS of {_where(topic, partition, self.broker)}: "
                                f"{exc}") from None

    def offset_at(self, topic: str, partition: int, time: int) -> int:
        """The start of the first segment of ``topic/partition`` last written after ``time``
        (the log end when none was)."""
        before = self._offsets(topic, partition, time, 1)
        starts = self.segment_starts(topic, partition)
        if not before:
            return starts[0]
        later = [s for s in starts if s > before[0]]
        return later[0] if later else starts[-1]

    def resolve(self, states: Mapping[Key, PartitionState], which: str) -> dict[Key, int]:
        """The starting (``which="start"``) or ending offset of every partition in ``states``."""
        opts = self.opts
        spec = opts.starting if which == "start" else opts.ending
        when = opts.starting_timestamp if which == "start" else opts.ending_timestamp
        default = EARLIEST if which == "start" else LATEST
        out = {}
        for key, state in states.items():
            topic, partition = state.topic, state.partition
            if when is not None:
                out[key] = self.offset_at(topic, partition, when)
                continue
            if isinstance(spec, str):
                offset = EARLIEST if spec == "earliest" else LATEST
            else:
                offset = spec.get(topic, {}).get(partition, default)
            if offset == EARLIEST:
                offset = state.log_start
            elif offset == LATEST:
                offset = state.log_end
            out[key] = offset
        return out

    def check_start(self, state: PartitionState, start: int) -> int:
        """``start`` if the log still holds it; else the log start (failOnDataLoss false,
        logged) or DataLossError. A replicated partition's high watermark may be below
        ``start`` after a failover (a new leader learns its followers' positions at
        their next fetches): up to the leader's log end that is "not moved yet", and
        ``start`` stands."""
        if state.log_start <= start <= state.log_end:
            return start
        where = state.name
        if state.leader_end is not None and state.log_end < start <= state.leader_end:
            log.info("%s: the high watermark %d is below offset %d (a new leader, within "
                     "its log end %d): nothing to read yet", where, state.log_end, start,
                     state.leader_end)
            return start
        if start < state.log_start:
            what = (f"{where}: bytes [{start}, {state.log_start}) were deleted by retention "
                    f"before they were read")
        else:
            what = (f"{where}: offset {start} is past the log end {state.log_end} "
                    f"(the topic was deleted and created again?)")
        if self.opts.fail_on_data_loss:
            raise DataLossError(what + " (failOnDataLoss is true)")
        log.warning("%s; reading from the log start %d (failOnDataLoss is false)",
                    what, state.log_start)
        return state.log_start

    # -- splitting -----------------------------------------------------------
    def boundary_before(self, topic: str, partition: int, start: int, limit: int,
                        end: int) -> int:
        """The last entry start in ``(start, min(start + limit, end)]`` found by reading
        from ``start`` (an entry start); at least the end of the entry at ``start``."""
        goal = min(start + limit, end)
        pos = start
        while pos < goal:
            # The consumer grows a fetch that holds no whole entry to hold one.
            fetched = self.consumer.fetch(topic, partition, pos,
                                          min(goal - pos, _WALK_FETCH_BYTES))
            whole = fetched.next_offset - pos
            if whole <= 0:
                raise PlanningError(f"{_where(topic, partition, self.broker)}: the log ends "
                                    f"at {pos}, before the planned end {end}")
            if pos + whole > goal:
                # The next entry does not fit: cut before it, or it is a range of its own.
                return pos if pos > start else pos + whole
            pos += whole
        return pos

    def split(self, rng: Range, max_bytes: int | None) -> list[Range]:
        """``rng`` as ranges of at most ``max_bytes`` (one entry may be larger)."""
        if max_bytes is None or rng.size <= max_bytes:
            return [rng] if rng.size > 0 else []
        starts = [s for s in self.segment_starts(rng.topic, rng.partition)
                  if rng.start < s < rng.end]
        out = []
        pos = rng.start
        while pos < rng.end:
            reachable = [s for s in starts if pos < s <= pos + max_bytes]
            if rng.end - pos <= max_bytes:
                cut = rng.end
            elif reachable:
                cut = reachable[-1]
            else:
                cut = self.boundary_before(rng.topic, rng.partition, pos, max_bytes, rng.end)
            out.append(dataclasses.replace(rng, start=pos, end=cut))
            pos = cut
        return out

    # -- by key (what the readers use; the cluster planner answers the same) --
    def boundary(self, key: Key, start: int, limit: int, end: int) -> int:
        """:meth:`boundary_before` of the partition ``key``."""
        return self.boundary_before(key[0], key[-1], start, limit, end)

    def range_for(self, key: Key, start: int, end: int) -> Range:
        return Range(self.opts.bootstrap, key[0], key[-1], start, end, self.broker)

    def absent(self, key: Key) -> bool:
        """Whether ``key``'s broker is away (left the cluster, or did not answer): never
        for one broker, which a read needs."""
        return False

    def plan(self) -> list[Range]:
        """A batch read's ranges, split by ``maxBytesPerPartition``."""
        return plan(self)


def plan(planner) -> list[Range]:
    """The ranges of a batch read, from a :class:`Planner` or a cluster's planner (the
    same questions): every partition from its start to its end, split by
    ``maxBytesPerPartition``."""
    states = planner.partitions(must_exist=True)
    starts = planner.resolve(states, "start")
    ends = planner.resolve(states, "end")
    ranges = []
    for key, state in states.items():
        start = planner.check_start(state, starts[key])
        end = ends[key]
        where = state.name
        if end > state.log_end:
            raise PlanningError(f"endingOffsets {where}: {end} is past the log end "
                                f"{state.log_end}")
        if end < start:
            raise PlanningError(f"{where}: the ending offset {end} is before the "
                                f"starting offset {start}")
        ranges.extend(planner.split(planner.range_for(key, start, end),
                                    planner.opts.max_bytes_per_partition))
    return ranges


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"

