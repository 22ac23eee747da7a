"""The requests a :class:`~hostbroker.workers.replication.fetcher.LeaderLink`
makes of its leader and what their answers mean (a part of
:mod:`hostbroker.workers.replication.fetcher`, which owns the connection:
its socket, TLS, frames and deadlines).

One request at the leader at a time: OFFSET_FOR_LEADER_EPOCH for the
partitions about to be cut (:mod:`.truncation`), else OFFSETS (earliest) for
a partition whose log ends below the leader's log start, else one FETCH v1 for
every partition ready to fetch. One FETCH asks for at most
``replica.fetch.response.max.bytes`` over its partitions (:meth:`LinkRequests._fit`):
each partition's ``replica.fetch.max.bytes`` is shared out (never below
``MIN_SHARE``; a partition whose next entry is larger asks for all of it),
and partitions that still do not fit wait for the next FETCH. An answer is
hostile until checked: an error frame (:class:`Refused`), a correlation id out
of order, bytes that do not decode or values out of range raise
:class:`~hostbroker.errors.ProtocolError`, and the link closes its
connection; what a partition's good answer asks for (append, truncate,
restart at the leader's log start, back off) is told to the worker's
:class:`~hostbroker.workers.replication.fetcher.Sink`.

:class:`LinkRequests` is a mixin of ``LeaderLink`` and uses its settings,
follows, sink and send buffer.
"""

from __future__ import annotations

import struct

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.log.message import count_entries
from hostbroker.protocol import api
from hostbroker.protocol import replication as proto
from hostbroker.workers.replication.follows import Follow, Stage

_ANSWER_SLACK = 64  # size prefix, correlation id, array counts
_PART_SLACK = 48  # a partition's fixed fields in an answer, besides its topic name
_LENGTH = struct.Struct(">i")
MIN_SHARE = 4096  # the least a partition asks for when the response budget is shared out
MAX_OFFSET = 2**63 - 1

FETCH = "fetch"
EPOCHS = "epochs"
START = "start"  # OFFSETS (earliest) of one partition


class Refused(ProtocolError):
    """The leader answered an error frame: it will not serve the request."""


class LinkRequests:
    """A link's requests and their answers; see the module doc."""

    def _next_correlation(self) -> int:
        self.correlation = (self.correlation + 1) & 0x7FFFFFFF
        return self.correlation

    def _send(self, frame: bytes, kind: str, follows: list[Follow], bound: int,
              wait_s: float, now: float) -> None:
        """``frame`` carries :attr:`correlation`; ``bound``: the largest answer it can bring."""
        self.bound = bound
        self.inflight = (self.correlation, kind, {f.key: f for f in follows},
                         now + wait_s + self.settings.timeout_s)
        self.out += frame
        self.requests += 1
        self._write(now)

    def _send_epochs(self, follows: list[Follow], now: float) -> None:
        body = proto.OffsetForLeaderEpochRequest(
            replica_id=self.settings.broker_id,
            partitions=tuple(proto.OffsetForLeaderEpochPartition(
                topic=f.topic, partition=f.partition, leader_epoch=f.truncation.asked)
                for f in follows))
        bound = _ANSWER_SLACK + sum(_PART_SLACK + len(f.topic.encode()) for f in follows)
        for f in follows:
            f.stage = Stage.ASKING
        self._send(proto.encode_request(body, self._next_correlation(), self.client_id),
                   EPOCHS, follows, bound, 0, now)

    def _send_start(self, follow: Follow, now: float) -> None:
        body = api.OffsetsRequest(follow.topic, follow.partition, api.EARLIEST_TIME, 1)
        follow.stage = Stage.ASKING_START
        self._send(api.encode_request(body, self._next_correlation(), self.client_id),
                   START, [follow], _ANSWER_SLACK + 8, 0, now)

    def _send_fetch(self, follows: list[Follow], now: float,
                    wait_cap_ms: int | None = None) -> None:
        s = self.settings
        wait_ms = s.wait_ms if wait_cap_ms is None else min(s.wait_ms, wait_cap_ms)
        parts = []
        bound = _ANSWER_SLACK
        follows = self._fit(follows)
        for f in follows:
            max_bytes = self.asked[f.key]
            parts.append(proto.FetchPartitionV1(topic=f.topic, partition=f.partition,
                                                leader_epoch=f.leader_epoch, offset=f.offset,
                                                max_bytes=max_bytes))
            bound += _PART_SLACK + len(f.topic.encode()) + max_bytes
            f.stage = Stage.FETCHING
        body = proto.FetchRequestV1(replica_id=s.broker_id, max_wait_ms=wait_ms,
                                    min_bytes=s.min_bytes, partitions=tuple(parts))
        self._send(proto.encode_request(body, self._next_correlation(), self.client_id),
                   FETCH, follows, bound, wait_ms / 1000, now)

    def _fit(self, follows: list[Follow]) -> list[Follow]:
        """The partitions of ``follows`` the next FETCH asks for, and in
        :attr:`asked` how much of each: together at most
        ``replica.fetch.response.max.bytes`` (the first always goes). Each
        partition's ``replica.fetch.max.bytes`` is shared out (never below
        ``MIN_SHARE``; one whose next entry is larger asks for all of it);
        those that still do not fit go in a later FETCH, which starts where
        this one stopped. So the answer's size is bounded before it is read."""
        s = self.settings
        start = self.rotation % len(follows)
        shared = [f for f in follows if not f.max_bytes]
        left = s.response_max - _ANSWER_SLACK - sum(
            _PART_SLACK + len(f.topic.encode()) + f.max_bytes for f in follows)
        share = min(s.max_bytes, max(MIN_SHARE, left // max(1, len(shared))))
        self.asked.clear()
        bound = _ANSWER_SLACK
        sent = []
        for f in follows[start:] + follows[:start]:
            max_bytes = f.max_bytes or share
            more = _PART_SLACK + len(f.topic.encode()) + max_bytes
            if sent and bound + more > s.response_max:
                continue
            bound += more
            sent.append(f)
            self.asked[f.key] = max_bytes
        self.rotation = start + len(sent)
        return sent

    # -- answers ----------------------------------------------------------
    def _answer(self, frame: bytes, now: float) -> None:
        if self.inflight is None:
            raise ProtocolError("an answer to no request")
        correlation, kind, asked, _ = self.inflight
        if api.is_error_frame(frame):
            _, code = api.decode_error_frame(frame)
            raise Refused(f"{_name(code)} ({code})")
        cls = proto.FetchResponseV1 if kind == FETCH else proto.OffsetForLeaderEpochResponse
        try:
            if kind == START:
                got, body = api.decode_response_as(api.OffsetsResponse, frame)
            else:
                got, body = proto.decode_response(frame, cls)
        except ProtocolError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever bytes decode to: never trusted
            raise ProtocolError(f"an answer that does not decode ({e})") from None
        if got != correlation:
            raise ProtocolError(f"correlation id {got}, not {correlation}")
        self.inflight = None
        self.said = False  # the leader answers: say the next failure again
        if kind == START:
            for follow in asked.values():
                if not follow.dropped:
                    self._start_answered(follow, body)
            return
        results = body.partitions
        if kind == FETCH:
            for r in results:
                follow = asked.pop((r.topic, r.partition), None)
                if follow is not None and not follow.dropped:
                    self._fetched(follow, r, now)
        else:
            for r in results:
                follow = asked.pop((r.topic, r.partition), None)
                if follow is not None and not follow.dropped:
                    self._epoch_answered(follow, r)
        for follow in asked.values():  # asked and not answered
            if not follow.dropped and follow.stage in (Stage.ASKING, Stage.FETCHING):
                follow.stage = Stage.EPOCH if follow.stage is Stage.ASKING else Stage.FETCH

    def _epoch_answered(self, follow: Follow, r) -> None:
        if follow.stage is not Stage.ASKING or follow.truncation is None:
            return
        if r.error_code != ErrorCode.NONE:
            self.sink.failed(follow, f"OFFSET_FOR_LEADER_EPOCH: {_name(r.error_code)}")
            return
        step = follow.truncation.answer(r.leader_epoch, r.end_offset)
        if step.ask is not None:
            follow.stage = Stage.EPOCH  # asked again in the next request
        else:
            self.sink.truncate(follow, step.cut)

    def _start_answered(self, follow: Follow, body) -> None:
        """The leader's log start: the log restarts there only when it is past
        our log end and at most the log end the leader stated; else back off."""
        if follow.stage is not Stage.ASKING_START:
            return
        if body.error_code != ErrorCode.NONE or len(body.offsets) != 1:
            why = _name(body.error_code) if body.error_code else f"{len(body.offsets)} offsets"
            self.sink.failed(follow, f"OFFSETS (log start): {why}")
            return
        start = body.offsets[0]
        if not follow.offset < start <= follow.leader_end:
            self.sink.failed(follow, f"FETCH at {follow.offset}: OFFSET_OUT_OF_RANGE (the "
                                     f"leader's log starts at {start}, ends at "
                                     f"{follow.leader_end})")
            return
        self.sink.restart(follow, start)

    def _fetched(self, follow: Follow, r, now: float) -> None:
        if follow.stage is not Stage.FETCHING:
            return
        if (r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and not follow.restarted
                and follow.offset < r.log_end_offset <= MAX_OFFSET):
            # the leader's log goes on past ours: does it start past our end too?
            follow.leader_end = r.log_end_offset
            follow.stage = Stage.START
            return
        if r.error_code != ErrorCode.NONE:
            self.sink.failed(follow, f"FETCH at {follow.offset}: {_name(r.error_code)}")
            return
        data = r.message_set
        hw = r.high_watermark
        if not 0 <= hw <= MAX_OFFSET:
            self.sink.failed(follow, f"FETCH: high watermark {hw} out of range")
            return
        if data and not 0 <= r.data_epoch <= follow.leader_epoch:
            self.sink.failed(follow, f"FETCH: data epoch {r.data_epoch} is not one of leader "
                                     f"epoch {follow.leader_epoch} or before")
            return
        _, whole = count_entries(data)
        if whole:
            follow.max_bytes = 0
            self.sink.append(follow, r.data_epoch, hw, data[:whole])
            return
        if len(data) >= 4:
            # no whole entry: the first is larger than what was asked (ask for all
            # of it next time), or the answer's byte budget ran out before it
            need = _LENGTH.unpack_from(data)[0] + 4
            if need > self.asked.get(follow.key, follow.max_bytes or self.settings.max_bytes):
                if not 4 < need <= self.settings.largest_fetch:
                    self.sink.failed(follow, f"FETCH at {follow.offset}: an entry of {need} "
                                             "bytes that cannot be fetched whole")
                    return
                follow.max_bytes = need
        follow.stage = Stage.FETCH
        if hw > follow.hw_sent:  # no data, but the leader's high watermark moved
            self.sink.append(follow, proto.NO_EPOCH, hw, b"")


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
