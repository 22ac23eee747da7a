"""What a client call raises when the broker or the connection says no."""

from __future__ import annotations

from hostbroker import errors
from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.protocol.schema import error_code


class BrokerError(HostbrokerError):
    """The broker answered with an error code.

    Either a whole request failed (an error frame: the broker could not decode
    it and closed the connection; ``topic`` and ``partition`` are None) or one
    partition of an answer carries a non-zero ``error_code``. ``code`` is an
    :class:`ErrorCode`, or a plain int for a code this client does not know.
    """

    def __init__(
        self,
        code: ErrorCode | int,
        message: str = "",
        *,
        topic: str | None = None,
        partition: int | None = None,
    ):
        self.code = error_code(code)
        self.topic = topic
        self.partition = partition
        name = self.code.name if isinstance(self.code, ErrorCode) else f"error code {code}"
        where = f" for {topic}/{partition}" if topic is not None else ""
        super().__init__(f"{name}{where}" + (f": {message}" if message else ""))


class ConnectionClosedError(ConnectionError):
    """The connection is closed: by the broker, by an earlier error, or by ``close()``."""


# Consumers.


class OffsetOutOfRangeError(BrokerError, errors.OffsetOutOfRangeError):
    """A fetch asked for an offset outside the partition's log (OFFSET_OUT_OF_RANGE).

    ``offset`` is the offset asked for; ``log_end_offset`` is the broker's at
    the time (-1 when the answer did not say). Raised by a consumer whose
    ``auto.offset.reset`` is ``none``.
    """

    def __init__(self, topic: str, partition: int, offset: int, log_end_offset: int = -1):
        self.offset = offset
        self.log_end_offset = log_end_offset
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} (log end {log_end_offset})",
            topic=topic,
            partition=partition,
        )


class MessageSizeTooLargeError(errors.MessageTooLargeError):
    """The entry at ``offset`` does not fit in ``fetch.message.max.bytes``.

    The consumer doubled its fetch size up to that limit and still found no
    whole entry: raise the limit (up to the topic's ``max.message.bytes`` + 4)
    to read it.
    """

    def __init__(self, topic: str, partition: int, offset: int, limit: int, needed: int | None):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.limit = limit
        self.needed = needed
        what = f"the entry takes {needed} bytes, over" if needed else "no whole entry within"
        super().__init__(
            f"{topic}/{partition} at offset {offset}: {what} fetch.message.max.bytes = {limit}"
        )


class InvalidEntryError(errors.InvalidMessageError):
    """The entry of ``topic/partition`` at ``offset`` cannot be read.

    Its CRC does not match, its length or magic is wrong, or it is a
    compressed wrapper that does not decompress or inflates past
    ``fetch.message.max.bytes`` (:class:`DecompressedTooLargeError`).
    ``next_offset`` is where the entry ends (-1 when its length cannot be
    trusted): a consumer with ``skip.bad.messages`` resumes there.
    """

    def __init__(self, topic: str, partition: int, offset: int, next_offset: int, reason: str):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.next_offset = next_offset
        self.reason = reason
        super().__init__(f"{topic}/{partition}: bad entry at offset {offset}: {reason}")


class DecompressedTooLargeError(InvalidEntryError):
    """A compressed wrapper inflates past ``fetch.message.max.bytes``; inflating stopped there."""


class ConsumerTimeoutError(HostbrokerError):
    """No message reached a stream within ``consumer.timeout.ms``.

    The stream stays usable: iterate it again to keep waiting.
    """


# Producer errors.


class ProducerError(HostbrokerError):
    """Base of what a :class:`~hostbroker.client.producer.Producer` raises on its own account."""


class QueueFullError(ProducerError):
    """The async producer's queue holds ``queue.size`` messages and the enqueue
    timeout (``queue.enqueue.timeout.ms``) ran out before there was room."""


class RecordTooLargeError(ProducerError):
    """One message is longer than ``message.max.bytes``; refused before it is queued."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class DeliveryFailure:
    """Messages for one partition that ended without an acknowledgement.

    ``partition`` is the logical partition (an index into the topic's
    partitions) or None when none was chosen yet; ``values`` are the encoded
    messages, in the order they were sent; ``error`` is what ended them (a
    :class:`BrokerError` carrying the wire code, or the connection error).
    """

    __slots__ = ("topic", "partition", "values", "error")

    def __init__(self, topic: str, partition: int | None, values, error: BaseException):
        self.topic = topic
        self.partition = partition
        self.values = tuple(values)
        self.error = error

    def __repr__(self) -> str:
        return (f"DeliveryFailure({self.topic!r}, {self.partition!r},"
                f" {len(self.values)} message{'' if len(self.values) == 1 else 's'},"
                f" {self.error!r})")


class DeliveryError(ProducerError):
    """Messages were not delivered: retries ran out or the error was not retriable.

    ``failures`` lists what failed, a :class:`DeliveryFailure` per partition
    and attempt (at most ``max.failures.kept`` of them are kept; ``message_count``
    counts every failed message). ``code`` is the wire code of the first
    failure when it has one, else UNKNOWN.
    """

    def __init__(self, failures, message_count: int | None = None):
        self.failures = list(failures)
        self.message_count = (sum(len(f.values) for f in self.failures)
                              if message_count is None else message_count)
        first = self.failures[0].error if self.failures else None
        code = getattr(first, "code", None)
        where = ""
        if first is not None:
            failed = self.failures[0]
            # no partition: the failure came before one was chosen (the topic's metadata)
            at = failed.topic if failed.partition is None else f"{failed.topic}/{failed.partition}"
            where = f"; first: {at}: {first}"
        count = self.message_count
        super().__init__(f"{count} message{'' if count == 1 else 's'} not delivered{where}",
                         code if isinstance(code, ErrorCode) else None)
