"""Which partition of a topic a message goes to.

The log format has no key field (docs/spec/log-format.md): a message's key is
used here, to choose its partition, and is never sent. A
:class:`Partitioner` maps ``(topic, key bytes or None, number of partitions)``
to a partition index in ``range(num_partitions)``; the index is a position in
the topic's partition list as :mod:`hostbroker.client.cluster` orders it
(broker id, then partition number), which for one broker is the partition
number itself.

:class:`DefaultPartitioner`:

- a key goes to ``stable_hash(key) % num_partitions``, where
  ``stable_hash(key) = zlib.crc32(key)``, the unsigned CRC-32 (IEEE 802.3) of
  the encoded key bytes. Unlike Python's ``hash`` it is the same in every
  process and every run, so one key keeps its partition across producers and
  restarts while the number of partitions stays the same;
- no key: a random partition, kept for the topic ("sticky") until
  :meth:`Partitioner.rotate` is called, which the producer does once a batch
  that used it is sent and when the topic's metadata is refreshed. Batches so
  stay large, and keyless load still spreads over the partitions over time
  (the choice Kafka 0.8's producer made).

A partitioner is called by one thread at a time (the producer's sending
thread in async mode, the caller under the producer's lock in sync mode).
"""

from __future__ import annotations

import random
import zlib


def stable_hash(key: bytes) -> int:
    """``zlib.crc32(key)``: an int in ``[0, 2**32)``, the same in every process and run."""
    return zlib.crc32(key)


class Partitioner:
    """Chooses a partition; subclass and override :meth:`partition`."""

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        """An index in ``range(num_partitions)`` for a message with ``key`` (None: no key)."""
        raise NotImplementedError

    def rotate(self, topic: str) -> None:
        """A batch for ``topic`` went out or its metadata changed; forget any sticky choice."""


class DefaultPartitioner(Partitioner):
    """``stable_hash(key) % num_partitions``; a sticky random partition per topic without a key.

    ``rng`` (a ``random.Random``) may be given to make the keyless choice
    repeatable.
    """

    def __init__(self, rng: random.Random | None = None):
        self._randrange = (rng or random.Random()).randrange
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is not None:
            return zlib.crc32(key) % num_partitions
        chosen = self._sticky.get(topic)
        if chosen is None or chosen >= num_partitions:
            chosen = self._sticky[topic] = self._randrange(num_partitions)
        return chosen

    def rotate(self, topic: str) -> None:
        self._sticky.pop(topic, None)
