"""Protocol errors that call for a particular reaction from the broker.

Both are :class:`ProtocolError` (the connection must close); their types tell
the network code whether an error frame can still be sent first.
"""

from __future__ import annotations

from hostbroker.errors import ErrorCode, ProtocolError


class HeaderTooShortError(ProtocolError):
    """A request frame too short to hold a correlation id: close without an answer."""


class FrameTooLargeError(ProtocolError):
    """A frame declares a size over the limit: answer ``REQUEST_TOO_LARGE``, then close.

    ``correlation_id`` is the request's, when its bytes had already arrived
    with the size, else ``None``.
    """

    code = ErrorCode.REQUEST_TOO_LARGE

    def __init__(self, size: int, max_frame_bytes: int, correlation_id: int | None = None):
        super().__init__(f"frame of {size} bytes is over the limit of {max_frame_bytes}")
        self.size = size
        self.max_frame_bytes = max_frame_bytes
        self.correlation_id = correlation_id
