"""What the producer's request path decides with and reports through: which
errors are worth another try (:func:`retriable`, :data:`RETRIABLE_CODES`),
a set of messages on its way (:class:`PendingSet`), a request as sent
(:class:`SentRequest`) and the hooks at each stage (:class:`ProducerCallbacks`).

Data and decisions only, no I/O: :mod:`hostbroker.client.producer_requests`
(the Dispatcher) acts on them.
"""

from __future__ import annotations

import dataclasses
import itertools

from hostbroker.client.cluster import PartitionRef
from hostbroker.client.errors import BrokerError
from hostbroker.client.leaders import LEADER_CODES
from hostbroker.client.producer_batches import ENTRY_OVERHEAD
from hostbroker.client.throttle_stats import AnswerShapeError
from hostbroker.errors import ErrorCode, ProtocolError

# Wire errors worth another try: the broker or the partition may come back,
# metadata may have changed. Anything else (INVALID_MESSAGE, MESSAGE_TOO_LARGE,
# INVALID_REQUEST, INVALID_TOPIC, NOT_AUTHORIZED, REQUEST_TOO_LARGE, ...) says
# the same bytes will be refused again.
RETRIABLE_CODES = frozenset({
    ErrorCode.UNKNOWN,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.STORAGE_ERROR,
    ErrorCode.BROKER_NOT_AVAILABLE,
    # replicated topics: the leader moved or is being elected, or the ISR is
    # (for now) smaller than min.insync.replicas
    ErrorCode.NOT_LEADER_FOR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
})
# Errors after which the partition may live elsewhere: ask the brokers again.
_REFRESH_CODES = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.STORAGE_ERROR,
    ErrorCode.BROKER_NOT_AVAILABLE,
}) | LEADER_CODES


def retriable(error: BaseException) -> bool:
    """True for errors a retry may overcome: a lost or refused connection, a
    timeout, an answer that did not decode (but not a PRODUCE v1 answer of
    another shape: the broker wrote the sets), a wire code in RETRIABLE_CODES."""
    if isinstance(error, AnswerShapeError):
        return False
    if isinstance(error, BrokerError):
        return error.code in RETRIABLE_CODES
    return isinstance(error, (OSError, ProtocolError))


def calls_for_refresh(error: BaseException) -> bool:
    """Whether after ``error`` the partition may live elsewhere: ask the brokers again."""
    if isinstance(error, BrokerError):
        return error.code in _REFRESH_CODES
    return isinstance(error, (OSError, ProtocolError))


@dataclasses.dataclass(frozen=True, slots=True)
class SentRequest:
    """One PRODUCE request as sent; ``partitions`` holds
    ``(topic, partition, message_count, byte_count)`` per partition."""

    correlation_id: int
    broker: str
    partitions: tuple[tuple[str, int, int, int], ...]
    message_count: int
    byte_count: int
    acks: int
    sent_at: float
    acked_at: float | None = None


class ProducerCallbacks:
    """Hooks at each stage of the pipeline; subclass and override what you need.

    ``on_enqueued`` runs in the thread that called ``send`` (``partition`` is
    the one given, or None when the partitioner chooses later); the others
    run in the sending thread (the caller's in sync mode). An exception raised
    by a hook in the async sending thread stops the producer: what is
    outstanding is failed, and later calls raise ProducerError.
    """

    def on_enqueued(self, topic: str, partition: int | None, value: bytes) -> None:
        pass

    def on_sent(self, request: SentRequest) -> None:
        pass

    def on_acknowledged(self, request: SentRequest, results) -> None:
        """The broker answered ``request``; ``results`` are its ProducePartitionResults
        (a partition with a non-zero error code is also reported to on_failed or retried)."""

    def on_failed(self, request: SentRequest | None, error: Exception) -> None:
        """Messages failed for good; ``error`` is a DeliveryError with one DeliveryFailure,
        caused by the wire or connection error. ``request`` is the last request that
        carried them, None when they were never sent."""


class PendingSet:
    """Messages for one partition, encoded once, sent until acknowledged or failed.

    ``slot`` is the logical partition (None while the topic's partitions are
    unknown: then ``items`` keeps the queued items to partition later).
    ``pinned`` sets (a key or an explicit partition) keep their slot on retry
    while the topic's partition list is the one they were ``placed`` with;
    after it changed they are placed again from their ``origins`` (per value,
    the ``(key, partition)`` it was sent with): a key is hashed into the new
    list, an explicit partition follows the ``(broker, partition)`` pair it
    was sent to.
    """

    __slots__ = ("topic", "slot", "pinned", "values", "data", "wrappers", "items", "seq",
                 "attempts", "retry_at", "ref", "request", "base_offset", "error", "origins",
                 "placed")

    def __init__(self, topic, slot, pinned, values, data, wrappers, seq, attempts=0, items=None,
                 origins=None):
        self.topic = topic
        self.slot = slot
        self.pinned = pinned
        self.values = values
        self.data = data
        self.wrappers = wrappers
        self.items = items
        self.seq = seq
        self.attempts = attempts
        self.retry_at = 0.0
        self.ref: PartitionRef | None = None
        self.request: SentRequest | None = None
        self.base_offset = -1
        self.error: BaseException | None = None
        self.origins: list[tuple[bytes | None, int | None]] | None = origins
        self.placed: tuple[PartitionRef, ...] | None = None

    def offsets(self) -> list[int]:
        base = self.base_offset
        if self.wrappers is None:
            sizes = [len(v) + ENTRY_OVERHEAD for v in self.values]
            return list(itertools.accumulate(sizes[:-1], initial=base))
        offsets = []
        for count, size in self.wrappers:
            offsets += [base] * count
            base += size
        return offsets
