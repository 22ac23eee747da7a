"""The range assignment of a consumer group (docs/spec/zookeeper.md, "Consumer group rebalance").

Pure: every consumer of a group computes the same answer from the same
ZooKeeper picture, so no consumer needs to tell another what it takes.
For each topic, the partitions ``(broker_id, partition)`` are sorted (so a
broker's partitions stay together; a replicated topic's are
``(REPLICATED, p)``, so in the order of their global numbers) and so are the consumer streams
``(consumer_id, stream_index)`` subscribed to it; stream ``i`` of ``n`` owns
a contiguous range of the sorted partitions: ``len(P) // n`` each, and one
more for each of the first ``len(P) % n`` streams. Streams beyond the
number of partitions own nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

P = TypeVar("P")
S = TypeVar("S")

Stream = tuple[str, int]  # (consumer_id, stream_index)
Pair = tuple[int, int]  # (broker_id, partition)


def ranges(partitions: int, streams: int) -> list[range]:
    """The indexes into the sorted partitions that each of ``streams`` sorted streams owns."""
    if streams < 1:
        return []
    size, extra = divmod(partitions, streams)
    out = []
    start = 0
    for i in range(streams):
        end = start + size + (1 if i < extra else 0)
        out.append(range(start, end))
        start = end
    return out


def assign(partitions: Sequence[P], streams: Sequence[S]) -> dict[S, list[P]]:
    """Each stream (all of them, sorted) and the sorted partitions it owns (maybe none)."""
    ordered = sorted(partitions)
    names = sorted(streams)
    return {stream: ordered[r.start:r.stop]
            for stream, r in zip(names, ranges(len(ordered), len(names)))}


def group_streams(members: Mapping[str, Mapping[str, int]], topic: str) -> list[Stream]:
    """The streams of every member subscribed to ``topic`` (``members``: consumer_id ->
    {topic: number_of_streams}), sorted."""
    return sorted((consumer, i) for consumer, topics in members.items()
                  for i in range(topics.get(topic, 0)))


def assign_group(topics: Mapping[str, Sequence[Pair]],
                 members: Mapping[str, Mapping[str, int]]) -> dict[str, dict[Stream, list[Pair]]]:
    """For each topic of ``topics`` (-> its partitions), every subscribed stream and its pairs."""
    return {topic: assign(pairs, group_streams(members, topic))
            for topic, pairs in topics.items()}
