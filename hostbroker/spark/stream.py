"""The streaming reader of the ``hostbroker`` data source.

Offsets, as Spark checkpoints them, are JSON objects ``{"topic": {"partition":
byte offset}}`` (the partition a string, as JSON keys are): the position
after the last entry each batch took. A restarted query resumes from the
checkpoint exactly where the last committed batch ended. In cluster mode
(``zookeeper.connect``) a partition is named ``"BROKER-PARTITION"`` there
(``{"t": {"1-0": 0, "2-0": 42}}``), and a checkpoint written in the other
mode is refused with one line.

- ``initialOffset``: ``startingOffsets`` (default ``latest``) or
  ``startingTimestamp``, for the partitions that exist when the query starts.
- ``latestOffset(start, limit)``: every partition's log end, or with a
  :class:`ReadMaxBytes` limit (``maxBytesPerTrigger``) at most that many
  bytes in all, shared out by how far each partition is behind and cut at an
  entry boundary found by reading on the driver; a partition behind by at
  least one entry always moves by at least one entry. Partitions and topics
  that appeared since the last batch (``subscribe`` or
  ``subscribePattern``) join, read from their log start.
- ``Trigger.AvailableNow``: the log ends when the query starts are the
  target; no batch goes past them.
- Data loss (a start retention deleted, a partition or topic deleted, a log
  that shrank because its topic was created again) fails the query with
  ``failOnDataLoss`` (default) and is logged and skipped without it. A
  partition the options no longer ask for (a query restarted with another
  ``subscribe``, ``subscribePattern`` or ``assign``) is not read, and keeps
  its offset: asked for again, it goes on from there.
- Cluster mode: ZooKeeper is read at every ``latestOffset``. A broker that
  left (or does not answer) keeps its partitions' offsets and nothing is read
  from it until it is back; one that joined is read from its partitions' log
  start, as a new partition is. A replicated topic's partitions
  (``"-1-P"``) are planned at their leaders of the moment; one whose leader
  does not answer (a failover under way) keeps its offset, and a later batch
  reads it at the new leader from that byte offset.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxBytes,
                                              SupportsTriggerAvailableNow)

from hostbroker.spark.cluster import ClusterPlanner, make_planner
from hostbroker.spark.errors import shallow, shallow_iter
from hostbroker.spark.options import ReadOptions, parse_part, part_name
from hostbroker.spark.planning import (DataLossError, Key, PartitionState, Planner, key_name,
                                       part_of)
from hostbroker.spark.reading import RangePartition, read_partition

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]


class CheckpointError(ValueError):
    """A checkpoint's offsets that this read cannot take (written in the other mode)."""


def to_offsets(positions: Mapping[Key, int]) -> Offsets:
    """{key: offset} as the JSON-ready form Spark checkpoints."""
    out: Offsets = {}
    for key, offset in sorted(positions.items()):
        out.setdefault(key[0], {})[part_name(part_of(key))] = int(offset)
    return out


def from_offsets(offsets: Mapping[str, Mapping[str, int]] | None,
                 cluster: bool = False) -> dict[Key, int]:
    """The checkpointed form back as {key: offset}."""
    out: dict[Key, int] = {}
    for topic, parts in (offsets or {}).items():
        for name, offset in parts.items():
            part = parse_part(name, cluster)
            if part is None:
                raise CheckpointError(
                    f"hostbroker data source: the offsets name {topic}/{name}, a partition "
                    + ("of a read without zookeeper.connect: this checkpoint cannot be resumed "
                       "in cluster mode" if cluster else
                       "of a cluster (BROKER-PARTITION): this checkpoint needs "
                       "zookeeper.connect") + "; start a new checkpoint")
            key = (topic, *part) if isinstance(part, tuple) else (topic, part)
            out[key] = int(offset)
    return out


def share_bytes(lags: Mapping[Any, int], budget: int) -> dict[Any, int]:
    """``budget`` bytes shared out in proportion to ``lags`` (each share at most its lag)."""
    total = sum(lags.values())
    if total <= budget:
        return dict(lags)
    return {key: lag * budget // total for key, lag in lags.items()}


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of byte ranges; see the module docstring."""

    def __init__(self, opts: ReadOptions):
        self.opts = opts
        self._planner: Planner | ClusterPlanner | None = None
        self._target: dict[Key, int] | None = None  # Trigger.AvailableNow

    def __getstate__(self) -> dict[str, Any]:
        # Tasks need only the options; the planner's connection stays on the driver.
        return {"opts": self.opts, "_planner": None, "_target": None}

    @property
    def planner(self) -> Planner | ClusterPlanner:
        if self._planner is None:
            self._planner = make_planner(self.opts)
        return self._planner

    def _states(self) -> dict[Key, PartitionState]:
        return self.planner.partitions(must_exist=False)

    def _positions(self, offsets: Offsets) -> dict[Key, int]:
        return from_offsets(offsets, self.opts.cluster)

    # -- offsets -------------------------------------------------------------
    @shallow
    def initialOffset(self) -> Offsets:
        states = self._states()
        starts = self.planner.resolve(states, "start")
        return to_offsets({key: self.planner.check_start(states[key], offset)
                           for key, offset in starts.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    @shallow
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {key: state.log_end for key, state in self._states().items()}

    @shallow
    def reportLatestOffset(self) -> Offsets:
        return to_offsets({key: state.log_end for key, state in self._states().items()})

    def _gone(self, key: Key) -> None:
        what = f"{key_name(key)} no longer exists (its topic was deleted?)"
        if self.opts.fail_on_data_loss:
            raise DataLossError(what + " (failOnDataLoss is true)")
        log.warning("%s; it is dropped from the query (failOnDataLoss is false)", what)

    def _subscribed(self, key: Key) -> bool:
        """Whether the options still ask for ``key`` (a restart may change them)."""
        topic = key[0]
        assign = self.opts.assign
        return self.opts.wants(topic) and (assign is None or part_of(key) in assign[topic])

    def _kept(self, key: Key) -> bool:
        """Whether ``key`` is not read now but keeps its offset: no longer subscribed to,
        or on a broker of the cluster that is away."""
        return not self._subscribed(key) or self.planner.absent(key)

    @shallow
    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        states = self._states()
        begin = self._positions(start)
        for key in begin:
            if key in states:
                continue
            if not self._subscribed(key):
                log.info("%s is no longer subscribed to (the options changed): not "
                         "read, its offset kept", key_name(key))
            elif self.planner.absent(key):
                log.info("%s: its broker is not in the cluster now: not read, its offset "
                         "kept", key_name(key))
            else:
                self._gone(key)
        ends = {key: state.log_end for key, state in states.items()}
        if self._target is not None:
            ends = {key: min(end, self._target[key])
                    for key, end in ends.items() if key in self._target}
        froms = {}
        for key, end in ends.items():
            # A partition new since the last batch is read from its log start.
            at = begin.get(key, states[key].log_start)
            if at > states[key].log_end:
                at = self.planner.check_start(states[key], at)  # fails, or log start
            froms[key] = at
        if isinstance(limit, ReadMaxBytes):
            lags = {key: max(0, ends[key] - froms[key]) for key in ends}
            shares = share_bytes(lags, limit.max_bytes)
            for key, share in shares.items():
                if share < lags[key]:
                    ends[key] = self.planner.boundary(key, froms[key], max(share, 1),
                                                      ends[key])
        # A partition that has not moved keeps its place in the offsets.
        out = {key: max(end, froms[key]) if key in begin else end for key, end in ends.items()}
        for key, at in begin.items():
            # Unchanged: partitions beyond the AvailableNow target's, those no longer
            # subscribed to (subscribed again, they go on from here), and those of a
            # broker that is away (back, it goes on from here).
            if key not in out and (key in states or self._kept(key)):
                out[key] = at
        return to_offsets(out)

    # -- batches -------------------------------------------------------------
    @shallow
    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin = self._positions(start)
        finish = self._positions(end)
        states = None
        ranges = []
        for key, stop in finish.items():
            at = begin.get(key)
            if at is None or at > stop:
                if states is None:
                    states = self._states()
                state = states.get(key)
                if state is None:
                    continue
                if at is None:
                    at = min(state.log_start, stop)  # new since the last batch
                elif state.log_end >= at:
                    # The first batch run again after a restart: Spark asks initialOffset
                    # anew, and `latest` has moved past the end this batch was given.
                    # Nothing of this partition is in the batch; the next starts at `stop`.
                    continue
                else:
                    # The log shrank (its topic created again): fail, or its log start.
                    at = min(self.planner.check_start(state, at), stop)
            if at >= stop:
                continue
            rng = self.planner.range_for(key, at, stop)
            ranges.extend(self.planner.split(rng, self.opts.max_bytes_per_partition))
        return [RangePartition(rng) for rng in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return shallow_iter(read_partition(partition, self.opts))

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
