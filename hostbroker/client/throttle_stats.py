"""How long the brokers held a client's answers for its quota: the
``throttle_time_ms`` of PRODUCE v1 and FETCH v2 answers (docs/security.md,
"Quotas"), gathered per client as Kafka's clients gather theirs.

:class:`ThrottleStats` keeps, over every answer a client received since it
was made, the average and the largest throttle time: Kafka's
``produce-throttle-time-avg`` / ``-max`` (the producer's ``stats``) and
``fetch-throttle-time-avg`` / ``-max`` (the consumers' ``stats``). An answer
not held counts as 0 in the average, as in Kafka. The first answer held is
said once in the client's log at INFO, naming the broker.

:func:`version_refused` turns the error frame of a broker that does not
take these versions (UNSUPPORTED_VERSION) into an error that says so.

Thread safe: a high-level consumer's fetcher threads share one.
"""

from __future__ import annotations

import logging
import threading

from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode


class ThrottleStats:
    """Throttle times of one client's answers of one kind (``produce`` or ``fetch``)."""

    def __init__(self, kind: str, log: logging.Logger):
        self.kind = kind
        self._log = log
        self._lock = threading.Lock()
        self._answers = 0
        self._total_ms = 0
        self._max_ms = 0
        self._said = False

    def record(self, throttle_ms: int, uri: str) -> None:
        """One answer of the broker at ``uri``, held ``throttle_ms``."""
        with self._lock:
            self._answers += 1
            if throttle_ms <= 0:
                return
            self._total_ms += throttle_ms
            if throttle_ms > self._max_ms:
                self._max_ms = throttle_ms
            first, self._said = not self._said, True
        if first:
            self._log.info("the broker at %s held a %s answer %d ms for this client's quota "
                           "(%s-throttle-time-avg and -max in the client's stats)",
                           uri, self.kind.upper(), throttle_ms, self.kind)

    @property
    def answers(self) -> int:
        """Answers recorded so far."""
        return self._answers

    def stats(self) -> dict[str, float]:
        """``{KIND-throttle-time-avg: ms, KIND-throttle-time-max: ms}`` (0 before any answer)."""
        with self._lock:
            average = self._total_ms / self._answers if self._answers else 0.0
            return {f"{self.kind}-throttle-time-avg": round(average, 3),
                    f"{self.kind}-throttle-time-max": self._max_ms}


def version_refused(error: BrokerError, uri: str, what: str) -> BrokerError:
    """``error`` (an error frame's), saying which request version ``uri`` refused
    when its code is UNSUPPORTED_VERSION; else ``error`` itself."""
    if error.code != ErrorCode.UNSUPPORTED_VERSION:
        return error
    return BrokerError(error.code, f"the broker at {uri} does not take {what}, which says "
                                   "how long a quota held the answer; upgrade the broker")


__all__ = ["ThrottleStats", "version_refused"]
