"""What a client call raises when the broker or the connection says no."""

from __future__ import annotations

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
