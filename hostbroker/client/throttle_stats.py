"""How long the brokers held a client's answers for its quota: the
``throttle_time_ms`` of PRODUCE v1 and FETCH v2 answers (docs/security.md,
"Quotas"), gathered per client, and the errors of a broker that does not
answer these versions as it should.

:class:`ThrottleStats` keeps the average and the largest throttle time as
Kafka's clients keep ``produce-throttle-time-avg`` / ``-max`` (the producer's
``stats``) and ``fetch-throttle-time-avg`` / ``-max`` (the consumers'
``stats``): over two samples of :data:`SAMPLE_S` seconds each, so a quota
episode leaves them within a minute (a sample is dropped once it began two
sample lengths ago). An answer not held counts as 0 in the average, as in
Kafka, and so does a negative throttle time (a broker's bug, not a reason to
throw an acknowledgement away). Its lifetime totals (:meth:`ThrottleStats.totals`)
are what a report over a whole run adds up. The first answer held is said
once in the client's log at INFO, naming the broker.

:func:`version_refused` turns the error frame of a broker that does not
take these versions (UNSUPPORTED_VERSION) into :class:`VersionRefusedError`,
and :func:`decode_throttled` an answer that does not decode as these
versions into :class:`AnswerShapeError`: neither is cured by asking again.

Thread safe: a high-level consumer's fetcher threads share one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api, throttled

# Kafka's metrics.sample.window.ms and metrics.num.samples defaults.
SAMPLE_S = 30.0
SAMPLES = 2

_VERSION_NAMES = {throttled.ProduceResponseV1: "PRODUCE version 1",
                  throttled.FetchResponseV2: "FETCH version 2"}


class VersionRefusedError(BrokerError):
    """The broker answered UNSUPPORTED_VERSION: it does not take the request's version."""


class AnswerShapeError(ProtocolError):
    """The broker's answer to PRODUCE v1 or FETCH v2 does not decode as that
    version (too short, too long, bad fields). The request was whole and the
    broker acted on it: asking again would only repeat it (a produce would be
    written twice)."""


class ThrottleStats:
    """Throttle times of one client's answers of one kind (``produce`` or ``fetch``)."""

    def __init__(self, kind: str, log: logging.Logger,
                 clock: Callable[[], float] = time.monotonic):
        self.kind = kind
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        # the samples, oldest first: [start, total ms, answers, max ms]
        self._samples: list[list[Any]] = []
        self._answers = 0
        self._total_ms = 0
        self._max_ms = 0
        self._said = False

    def record(self, throttle_ms: int, uri: str) -> None:
        """One answer of the broker at ``uri``, held ``throttle_ms`` (negative: 0)."""
        throttle_ms = max(throttle_ms, 0)
        now = self._clock()
        with self._lock:
            if not self._samples or now - self._samples[-1][0] >= SAMPLE_S:
                self._samples = self._samples[-(SAMPLES - 1):] + [[now, 0, 0, 0]]
            sample = self._samples[-1]
            sample[2] += 1
            self._answers += 1
            if throttle_ms == 0:
                return
            sample[1] += throttle_ms
            sample[3] = max(sample[3], throttle_ms)
            self._total_ms += throttle_ms
            self._max_ms = max(self._max_ms, throttle_ms)
            first, self._said = not self._said, True
        if first:
            self._log.info("the broker at %s held a %s answer %d ms for this client's quota "
                           "(%s-throttle-time-avg and -max in the client's stats)",
                           uri, self.kind.upper(), throttle_ms, self.kind)

    @property
    def answers(self) -> int:
        """Answers recorded since the client was made."""
        return self._answers

    def totals(self) -> tuple[int, int, int]:
        """``(answers, total ms, max ms)`` since the client was made."""
        with self._lock:
            return self._answers, self._total_ms, self._max_ms

    def stats(self) -> dict[str, float]:
        """``{KIND-throttle-time-avg: ms, KIND-throttle-time-max: ms}`` over the
        samples of the last minute at most (0 without any)."""
        now = self._clock()
        with self._lock:
            live = [s for s in self._samples if now - s[0] < SAMPLE_S * SAMPLES]
            answers = sum(s[2] for s in live)
            average = sum(s[1] for s in live) / answers if answers else 0.0
            return {f"{self.kind}-throttle-time-avg": round(average, 3),
                    f"{self.kind}-throttle-time-max": max((s[3] for s in live), default=0)}


def version_refused(error: BrokerError, uri: str, what: str) -> BrokerError:
    """``error`` (an error frame's) as a VersionRefusedError saying which request
    version ``uri`` refused when its code is UNSUPPORTED_VERSION; else ``error`` itself."""
    if error.code != ErrorCode.UNSUPPORTED_VERSION:
        return error
    return VersionRefusedError(error.code, f"the broker at {uri} does not take {what}, which "
                                           "says how long a quota held the answer; upgrade "
                                           "the broker")


def decode_throttled(frame: Any, cls: type, uri: str) -> tuple[int, Any]:
    """``(correlation_id, body)`` of a PRODUCE v1 or FETCH v2 answer frame
    (``cls``: its answer class); AnswerShapeError in one line if it does not
    decode as that version. The throttle time is not checked here
    (:meth:`ThrottleStats.record` takes a negative one as 0)."""
    try:
        return api.decode_response_as(cls, frame)
    except ProtocolError as exc:
        raise AnswerShapeError(f"the broker at {uri} answered {_VERSION_NAMES[cls]} in another "
                               f"shape ({exc}); not asked again, as the broker acted on "
                               "the request") from None


__all__ = ["AnswerShapeError", "SAMPLES", "SAMPLE_S", "ThrottleStats", "VersionRefusedError",
           "decode_throttled", "version_refused"]
