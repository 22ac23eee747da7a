"""Answers built from the partition table alone: METADATA and OFFSETS.

Owns nothing shared: :class:`TableAnswers` reads the partition table
lock-free (through a :class:`~hostbroker.workers.topicview.TopicView`) and
the segment files' mtimes, and builds the answer. Handlers use it for every
such request; processors use it for a request of a connection that has none
at its handler (``processor.local.requests``), which saves the request two
process crossings. Both build the same answer from the same table.
"""

from __future__ import annotations

import os

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log.segments import offsets_before, segment_filename
from hostbroker.protocol import api
from hostbroker.shm import table as ptable
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.topicview import TopicView

LOCAL_KEYS = frozenset((api.ApiKey.METADATA, api.ApiKey.OFFSETS))


def broker_list(plan, broker_id: int) -> tuple:
    """This broker as METADATA names it: (id, TCP host, TCP port, Unix path),
    from the first listener of each kind (-1 / "" where there is none)."""
    host, port, unix = "", -1, ""
    for uri, sock in plan.listeners:
        if uri.startswith("tcp://") and port == -1:
            host, port = sock.getsockname()[:2]
        elif uri.startswith("unix://") and not unix:
            unix = sock.getsockname()
    return ((broker_id, host, port, unix),)


class TableAnswers:
    """METADATA and OFFSETS answers of one process."""

    def __init__(self, view: TopicView, log_dirs, broker_id: int, brokers: tuple,
                 max_response_bytes: int):
        self.view = view
        self.table = view.table
        self.log_dirs = list(log_dirs)
        self.dir_bytes = [len(d.encode()) for d in self.log_dirs]
        self.broker_id = broker_id
        self.brokers = tuple(api.MetadataBroker(*b) for b in brokers)
        self.max_response_bytes = max_response_bytes

    def answer(self, key: int, request):
        return self.metadata(request) if key == api.ApiKey.METADATA else self.offsets(request)

    def answer_frame(self, frame, max_entries: int) -> tuple[list, int]:
        """``(pieces, flags)`` answering a METADATA or OFFSETS request frame
        (no size prefix) as a handler would: the answer and 0; an error frame
        and ``RESP_CLOSE_AFTER`` for a request that does not decode, that
        breaks a limit, or whose answer cannot be encoded within
        ``response.max.bytes``; nothing and ``RESP_CLOSE_NOW`` for a header
        too short to answer."""
        try:
            header, request = api.decode_request(frame, max_entries)
        except api.HeaderTooShortError:
            return [], env.RESP_CLOSE_NOW
        except HostbrokerError as e:
            corr = api.peek_correlation_id(frame)
            return [api.encode_error_frame(corr or 0, e.code)], env.RESP_CLOSE_AFTER
        corr = header.correlation_id
        try:
            answer, failed = api.encode_answer(corr, self.answer(header.api_key, request),
                                               self.max_response_bytes)
        except HostbrokerError as e:
            return [api.encode_error_frame(corr, e.code)], env.RESP_CLOSE_AFTER
        if failed:
            return [api.encode_error_frame(corr, ErrorCode.INVALID_REQUEST)], env.RESP_CLOSE_AFTER
        return [answer], 0

    def offsets(self, request) -> api.OffsetsResponse:
        view = self.view
        view.refresh()
        slot = view.slot(request.topic, request.partition)
        if slot is None:
            return api.OffsetsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())
        s = self.table.read(slot)
        if s.state == ptable.OFFLINE:
            return api.OffsetsResponse(ErrorCode.STORAGE_ERROR, ())
        if request.max_offsets < 0:
            return api.OffsetsResponse(ErrorCode.INVALID_REQUEST, ())
        path = view.partition_path(s)
        segments = []
        try:
            bases = view.segment_bases(slot, s)
        except OSError:
            # deleted between the table read and the listing
            return api.OffsetsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())
        if request.time == api.EARLIEST_TIME:
            # the published log start, the one METADATA gives: retention deletes a
            # segment's file a moment before it publishes the start past it, so
            # the first file found can be ahead of it
            return api.OffsetsResponse(ErrorCode.NONE, (s.start_offset,)[:request.max_offsets])
        for base in bases:
            try:
                mtime = int(os.stat(os.path.join(path, segment_filename(base))).st_mtime * 1000)
            except FileNotFoundError:
                continue  # deleted by retention just now
            segments.append((base, mtime))
        if not segments:
            segments = [(s.start_offset, now_ms())]
        offsets = offsets_before(segments, s.end_offset, now_ms(), request.time,
                                 request.max_offsets)
        return api.OffsetsResponse(ErrorCode.NONE, tuple(offsets))

    def metadata(self, request) -> api.MetadataResponse:
        """Raises INVALID_REQUEST (an error frame) as soon as the answer grows
        past ``response.max.bytes``, before building the rest: a topic of many
        partitions named many times would otherwise amplify a small request."""
        self.view.refresh()
        names = list(request.topics) or sorted(self.view.topics)
        described: dict[str, tuple[api.MetadataTopic, int]] = {}  # each name built once
        topics = []
        size = 0
        for name in names:
            if name not in described:
                described[name] = self._describe_topic(name)
            topic, topic_size = described[name]
            size += topic_size
            if size > self.max_response_bytes:
                raise HostbrokerError("METADATA answer over response.max.bytes",
                                      ErrorCode.INVALID_REQUEST)
            topics.append(topic)
        return api.MetadataResponse(self.broker_id, self.brokers, tuple(topics))

    def _describe_topic(self, name: str) -> tuple[api.MetadataTopic, int]:
        """A topic's METADATA entry and its encoded size."""
        size = 2 + len(name.encode("utf-8", "replace")) + 2 + 4
        slots = self.view.topics.get(name)
        if slots is None:
            return api.MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()), size
        parts = []
        for partition, slot in enumerate(slots):
            if slot is None:
                continue
            s = self.table.read(slot)
            code = ErrorCode.STORAGE_ERROR if s.state == ptable.OFFLINE else ErrorCode.NONE
            parts.append(api.MetadataPartition(partition, code, self.broker_id,
                                               s.start_offset, s.end_offset,
                                               self.log_dirs[s.owner]))
            size += 4 + 2 + 4 + 8 + 8 + 2 + self.dir_bytes[s.owner]
        return api.MetadataTopic(name, ErrorCode.NONE, tuple(parts)), size
