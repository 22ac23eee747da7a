"""Answers built from the partition table alone: METADATA and OFFSETS, and
what a FETCH gets (:func:`fetch_parts`, :func:`fetch_part`,
:func:`fetch_answer_pieces`).

Owns nothing shared: :class:`TableAnswers` reads the partition table
lock-free (through a :class:`~hostbroker.workers.topicview.TopicView`) and
the segment files' mtimes, and builds the answer. Handlers use it for every
such request (METADATA as a packed frame: :meth:`TableAnswers.metadata_frame`);
processors use it for a request of a connection that has none at its handler
(``processor.local.requests``), which saves the request two process
crossings. Both build the same answer from the same table. It keeps
three bounded caches of its own: decoded requests, METADATA answer frames
keyed by what they read from the table, and each topic's packed part of
such a frame with the figures it was packed from. A request for all topics
(or many) reads the table in bulk (``PartitionTable.figures``). A
METADATA frame is packed straight from the table's figures
(:meth:`TableAnswers._encode_metadata`), in the bytes the schema codec would
give: an answer for every topic of a large table holds up the processor's
(or handler's) other connections for that long.

With the authorizer on, a METADATA or OFFSETS answer is built for one
connection's principal (``describe``, whether it may DESCRIBE a topic): a
list of every topic leaves out those it may not describe, and a topic it
names and may not describe is answered TOPIC_AUTHORIZATION_FAILED
(:data:`REFUSED` in the snapshot), whether or not it exists.
"""

from __future__ import annotations

import os
import struct

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log.segments import fetch_range, offsets_before, segment_filename
from hostbroker.protocol import api
from hostbroker.shm import partitions as ptable
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.topicview import TopicView

LOCAL_KEYS = frozenset((api.ApiKey.METADATA, api.ApiKey.OFFSETS))
REFUSED = "refused"  # a METADATA snapshot's topic the principal may not describe

_CORR = struct.Struct(">i")
# Requests seen again are not decoded again (clients repeat the same few), and
# a METADATA answer whose partitions read the same from the table is not built
# and encoded again: only its correlation id changes. Both caches are bounded.
_DECODED_MAX = 256  # entries
_DECODED_FRAME_MAX = 1024  # bytes of a request frame worth keeping
_FRAMES_MAX = 64  # entries
_FRAME_CACHE_MAX = 64 * 1024  # bytes of an answer frame worth keeping
_FRAME_CACHE_PARTITIONS = 1024  # (at 64 bytes each, a log dir of 30, _FRAME_CACHE_MAX)
# A METADATA answer frame is built straight from the table's figures, in the
# layout the schema codec gives MetadataResponse (tests check it byte for
# byte): a partition is (partition i32, error i16, broker id i32, log start
# i64, log end i64, log dir string); a topic (name string, error i16,
# partitions i32 count, ...).
_PARTITION = struct.Struct(">ihiqq")
_TOPIC_TAIL = struct.Struct(">hi")  # error code, partition count
_FRAME_HEAD = struct.Struct(">ii")  # size, correlation id
_COUNT = struct.Struct(">i")
_STRING_HEAD = struct.Struct(">h")
_STRING_MAX = 32767
# Bytes of packed topics kept for the next METADATA answer; the topics are
# known ones (the cache is emptied when the table's generation moves), so at
# most the table's slots.
_TOPICS_CACHE_MAX = 4 << 20
# A METADATA request for this many topics or more (naming them, or naming
# none: every topic) reads every slot of the table at once
# (PartitionTable.figures) rather than its topics' one by one.
_BULK_NAMES = 16


def fetch_answer_pieces(correlation_id: int, parts, max_header_bytes: int) -> list:
    """The pieces of a FETCH answer from ``parts``, (topic, partition, error,
    log end, FilePiece or None) each: header bytes with each partition's data
    between them as a file range, which the processor sends with sendfile.
    Handlers and writers (long polls) build it alike. Raises ValueError when
    a field does not encode or the headers pass ``max_header_bytes``."""
    headers = api.encode_fetch_response_parts(
        correlation_id, [(t, pt, code, leo, piece.length if piece else 0)
                         for t, pt, code, leo, piece in parts])
    if sum(map(len, headers)) > max_header_bytes:
        raise ValueError("fetch answer headers over response.max.bytes")
    pieces: list = [headers[0]]
    for (_, _, _, _, piece), head in zip(parts, headers[1:]):
        if piece is not None:
            pieces.append(piece)
        if head:
            pieces.append(head)
    return pieces


def fetch_parts(view: TopicView, partitions, budget: int,
                reads: list | None = None, refused=frozenset()) -> tuple[int, list]:
    """What a FETCH of ``partitions`` (each with ``topic``, ``partition``,
    ``offset`` and ``max_bytes``) gets from the log as the partition table
    publishes it: ``(bytes of data, [(topic, partition, error, log end,
    FilePiece or None)])``, the parts as :func:`fetch_answer_pieces` takes
    them. Handlers and processors find it alike.

    The data of all partitions together is at most ``budget``
    (``fetch.max.bytes``): each partition gets at most what the ones before
    it left (in request order), and once nothing is left the rest get empty
    sets (their errors are still checked). With ``reads``, each partition's
    ``(slot, what the table said of it)`` is appended to it, as
    :func:`fetch_part` gives them. A partition of a topic in ``refused``
    (the principal may not READ it) is answered TOPIC_AUTHORIZATION_FAILED
    and not looked up."""
    view.refresh()
    out = []
    total = 0
    for part in partitions:
        if refused and part.topic in refused:
            found, slot, seen = ((part.topic, part.partition,
                                  ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, None), None, None)
        else:
            found, slot, seen = fetch_part(view, part, budget - total)
        piece = found[4]
        if piece is not None:
            total += piece.length
        out.append(found)
        if reads is not None:
            reads.append((slot, seen))
    return total, out


def fetch_must_wait(parts, total: int, min_bytes: int) -> bool:
    """Whether a long-poll fetch that found ``parts`` (as :func:`fetch_parts`
    gives them, ``total`` bytes of data) waits for more: below ``min_bytes``,
    with a partition that may yet give data (one without an error). Handlers
    and processors tell it alike."""
    return total < min_bytes and any(code == ErrorCode.NONE for _, _, code, _, _ in parts)


def fetch_part(view: TopicView, part, left: int) -> tuple[tuple, int | None, object]:
    """One partition of :func:`fetch_parts` (``view`` refreshed), with at most
    ``left`` bytes of data (none at all when ``left`` is 0 or less): its part,
    and the slot it was read from and what the table said of it then (before
    the log was looked at), None and None for a partition not in the table."""
    piece = None
    leo = -1
    code = ErrorCode.NONE
    slot = view.slot(part.topic, part.partition)
    s = None
    if part.max_bytes <= 0:
        code = ErrorCode.INVALID_FETCH_SIZE
    elif slot is None:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    else:
        s = view.table.read(slot)
        if s.state == ptable.OFFLINE:
            code = ErrorCode.STORAGE_ERROR
        elif s.state not in (ptable.ONLINE, ptable.CREATING):
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            code, leo = consumer_end(s)
        if code == ErrorCode.NONE and s is not None:
            try:
                bases = view.segment_bases(slot, s)
                if leo < part.offset <= s.end_offset:
                    # past the high watermark but in the log: nothing yet (a new
                    # leader's watermark may trail the one a consumer read below)
                    found = None
                else:
                    found = fetch_range(bases, s.end_offset, part.offset, max(1, min(
                        part.max_bytes, max(left, 1), leo - part.offset)))
                if left <= 0:
                    found = None
            except HostbrokerError as e:
                code = e.code
            except OSError:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                if found is not None and found[2] > 0 and part.offset < leo:
                    index, position, length = found
                    piece = env.FilePiece(view.segment_path(slot, s, bases[index]),
                                          position, length)
    return (part.topic, part.partition, code, leo, piece), slot, s


def consumer_end(s, any_replica: bool = False) -> tuple[int, int]:
    """``(error, end)`` of what a consumer may read of the partition slot
    ``s`` (ONLINE or CREATING): all of an unreplicated log, below the high
    watermark of a replicated partition this broker leads, and nothing
    (NOT_LEADER_FOR_PARTITION, -1) of one it follows or has stopped. With
    ``any_replica`` (a FETCH v1 of the debugging consumer, replica id -2) a
    follower serves too, below its own view of the high watermark. The
    one place fetches (handlers, processors) and OFFSETS take it; METADATA
    gives every replica's ``readable_end``."""
    role = s.role
    if role == ptable.ROLE_PLAIN:
        return ErrorCode.NONE, s.end_offset
    if role != ptable.ROLE_LEADER and not (any_replica and role == ptable.ROLE_FOLLOWER):
        return ErrorCode.NOT_LEADER_FOR_PARTITION, -1
    return ErrorCode.NONE, s.readable_end


def broker_list(plan, broker_id: int, tls: bool = False, advertised: str = "") -> tuple | None:
    """This broker as METADATA names it: (id, TCP host, TCP port, Unix path),
    as its registration names it (``registry.advertised_info``: the first
    listener of each kind of ``advertised.listeners``, else of the bound ones,
    a wildcard host this host's name), -1 / "" where there is none; with
    ``tls`` (the answer to a client of an ``ssl://`` listener) its ``ssl://``
    host and port and no Unix path, None when it has no such listener. So a
    client is given the same address for this broker by every broker."""
    from hostbroker.cluster.registry import advertised_info

    info = advertised_info(broker_id, advertised, plan.listeners)
    if tls:
        if not (info.ssl_host and info.ssl_port):
            return None
        return ((broker_id, info.ssl_host, info.ssl_port, ""),)
    host, port = (info.host, info.port) if info.host and info.port else ("", -1)
    return ((broker_id, host, port, info.unix or ""),)


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
        # the answer's start (broker id and brokers) and each log dir as
        # encoded, once
        empty = api.encode_response(0, api.MetadataResponse(broker_id, self.brokers, ()))
        self._head = empty[8:-_COUNT.size]
        self._dirs = [_STRING_HEAD.pack(len(d.encode())) + d.encode() for d in self.log_dirs]
        self._decoded: dict[bytes, tuple] = {}  # frame but its correlation id -> (key, request)
        self._frames: dict[tuple, bytes] = {}  # (names, generation, partitions) -> answer frame
        # each known topic's part of an answer as last packed, with what it was
        # packed from: a topic whose partitions read the same is not packed again
        self._topics: dict[str, tuple[tuple, bytes]] = {}
        self._topics_generation = -1
        self._topics_bytes = 0
        # whether the last answer built carries an error code (an unknown topic
        # or partition): the API stats' errors (workers/stats_record.py)
        self.error = False

    def answer_frame(self, frame, max_entries: int, describe=None) -> tuple[list, int]:
        """``(pieces, flags)`` answering a METADATA or OFFSETS request frame
        (no size prefix) as a handler would: the answer and 0; an error frame
        and ``RESP_CLOSE_AFTER`` for a request that does not decode, that
        breaks a limit, or whose answer cannot be encoded within
        ``response.max.bytes``; nothing and ``RESP_CLOSE_NOW`` for a header
        too short to answer."""
        try:
            key, corr, request = self._decode(frame, max_entries)
        except api.HeaderTooShortError:
            return [], env.RESP_CLOSE_NOW
        except HostbrokerError as e:
            corr = api.peek_correlation_id(frame)
            return [api.encode_error_frame(corr or 0, e.code)], env.RESP_CLOSE_AFTER
        try:
            if key == api.ApiKey.METADATA:
                answer, failed = self.metadata_frame(corr, request, describe)
            else:
                response = self.offsets(request, describe)
                self.error = bool(response.error_code)
                answer, failed = api.encode_answer(corr, response, self.max_response_bytes)
        except HostbrokerError as e:
            return [api.encode_error_frame(corr, e.code)], env.RESP_CLOSE_AFTER
        if failed:
            return [api.encode_error_frame(corr, ErrorCode.INVALID_REQUEST)], env.RESP_CLOSE_AFTER
        return [answer], 0

    def _decode(self, frame, max_entries: int) -> tuple[int, int, object]:
        """(api key, correlation id, request) of a request frame."""
        small = len(frame) <= _DECODED_FRAME_MAX
        if small:
            key = bytes(frame[:4]) + bytes(frame[8:])
            hit = self._decoded.get(key)
            if hit is not None:
                return hit[0], _CORR.unpack_from(frame, 4)[0], hit[1]
        header, request = api.decode_request(frame, max_entries)
        if small:
            if len(self._decoded) >= _DECODED_MAX:
                self._decoded.clear()
            self._decoded[key] = (header.api_key, request)
        return header.api_key, header.correlation_id, request

    def metadata_frame(self, corr: int, request, describe=None) -> tuple[bytes, bool]:
        """The METADATA answer frame, as ``api.encode_answer`` gives it; the
        one built last for the same topics, read the same from the table, with
        this correlation id; ``(frame, True)`` with an error frame for one over
        ``response.max.bytes`` that was packed whole, and raises
        INVALID_REQUEST for one found over it while packing, as
        :meth:`metadata` does. Answers of many partitions are not looked up
        (nor kept): keying them costs a good part of packing them, and their
        topics' packed bytes are kept anyway."""
        names, snapshot = self._snapshot(request, describe)
        # (an unknown topic, or one refused)
        self.error = None in snapshot.values() or REFUSED in snapshot.values()
        key = None
        if sum(map(len, filter(None, snapshot.values()))) <= _FRAME_CACHE_PARTITIONS:
            key = (names, self.view.generation, tuple(snapshot.values()))
            cached = self._frames.get(key)
            if cached is not None:
                return cached[:4] + _CORR.pack(corr) + cached[8:], False
        frame = self._encode_metadata(corr, names, snapshot)
        if frame is None:  # a name the direct way leaves to the schema codec
            frame, failed = api.encode_answer(corr, self._build(names, snapshot),
                                              self.max_response_bytes)
        else:
            failed = len(frame) > self.max_response_bytes
            if failed:
                frame = api.encode_error_frame(corr, ErrorCode.INVALID_REQUEST)
        if key is not None and not failed and len(frame) <= _FRAME_CACHE_MAX:
            if len(self._frames) >= _FRAMES_MAX:
                self._frames.clear()
            self._frames[key] = frame
        return frame, failed

    def _encode_metadata(self, corr: int, names: tuple, snapshot: dict) -> bytes | None:
        """The METADATA answer frame of ``snapshot``, packed straight from
        its figures: the bytes ``api.encode_answer`` gives the answer
        :meth:`_build` makes, at a fifth of the cost (0.5-1.1 µs a partition
        against 2.7-5.8: a processor answers every connection of its own
        only after it). A known topic whose partitions read as they did when
        it was last packed is not packed again (bounded by
        ``_TOPICS_CACHE_MAX`` bytes, emptied when topics come or go): under
        produce load most topics of a large table hold still. Raises as
        :meth:`_build` does past
        ``response.max.bytes``; None for what it cannot pack (a name that is
        not valid UTF-8 of at most 32,767 bytes, a figure past its wire
        type), which the schema codec then refuses as before."""
        encoded: dict[str, bytes] = {}  # each name built once
        pieces = []
        size = 0
        pack, dirs, broker_id = _PARTITION.pack, self._dirs, self.broker_id
        offline = ptable.OFFLINE
        if self._topics_generation != self.view.generation:
            self._topics.clear()
            self._topics_generation, self._topics_bytes = self.view.generation, 0
        packed = self._topics
        for name in names:
            topic = encoded.get(name)
            parts_read = snapshot[name]
            if topic is None:
                last = packed.get(name)
                if last is not None and last[0] == parts_read:
                    topic = encoded[name] = last[1]
            if topic is None:
                try:
                    raw = name.encode("utf-8")
                except UnicodeError:
                    return None
                if len(raw) > _STRING_MAX:
                    return None
                if parts_read is None or parts_read is REFUSED:
                    tail = _TOPIC_TAIL.pack(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                            if parts_read is None
                                            else ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0)
                    topic = _STRING_HEAD.pack(len(raw)) + raw + tail
                else:
                    try:
                        parts = [pack(partition,
                                      ErrorCode.STORAGE_ERROR if read[0] == offline
                                      else ErrorCode.NONE,
                                      broker_id if len(read) == 4 else read[4],
                                      read[1], read[2]) + dirs[read[3]]
                                 for partition, read in enumerate(parts_read)
                                 if read is not None]
                    except struct.error:
                        return None
                    topic = b"".join([_STRING_HEAD.pack(len(raw)), raw,
                                      _TOPIC_TAIL.pack(ErrorCode.NONE, len(parts)), *parts])
                    if name in packed or self._topics_bytes + len(topic) <= _TOPICS_CACHE_MAX:
                        prev = packed.get(name)
                        self._topics_bytes += len(topic) - (len(prev[1]) if prev else 0)
                        packed[name] = (parts_read, topic)
                encoded[name] = topic
            size += len(topic)
            if size > self.max_response_bytes:
                raise HostbrokerError("METADATA answer over response.max.bytes",
                                      ErrorCode.INVALID_REQUEST)
            pieces.append(topic)
        body = b"".join([self._head, _COUNT.pack(len(pieces)), *pieces])
        return _FRAME_HEAD.pack(len(body) + _CORR.size, corr) + body

    def offsets(self, request, describe=None) -> api.OffsetsResponse:
        if describe is not None and not describe(request.topic):
            return api.OffsetsResponse(ErrorCode.TOPIC_AUTHORIZATION_FAILED, ())
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
        code, end = consumer_end(s)  # a replicated log's end is its high watermark
        if code:
            return api.OffsetsResponse(code, ())
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
            if base > end:
                break  # past the high watermark
            try:
                mtime = int(os.stat(os.path.join(path, segment_filename(base))).st_mtime * 1000)
            except FileNotFoundError:
                continue  # deleted by retention just now
            segments.append((base, mtime))
        if not segments:
            segments = [(s.start_offset, now_ms())]
        offsets = offsets_before(segments, end, now_ms(), request.time,
                                 request.max_offsets)
        return api.OffsetsResponse(ErrorCode.NONE, tuple(offsets))

    def metadata(self, request, describe=None) -> api.MetadataResponse:
        """Raises INVALID_REQUEST (an error frame) as soon as the answer grows
        past ``response.max.bytes``, before building the rest: a topic of many
        partitions named many times would otherwise amplify a small request."""
        return self._build(*self._snapshot(request, describe))

    def _snapshot(self, request, describe=None) -> tuple[tuple, dict]:
        """The topic names a METADATA request asks about (all, for none), and
        what the answer takes from the table for each name, once: None for an
        unknown topic, :data:`REFUSED` for one ``describe`` refuses, else per
        partition (state, log start, log end, log dir index) or None for a
        partition number with no slot. Every topic, with ``describe``: those
        it allows."""
        view = self.view
        view.refresh()
        names = tuple(request.topics)
        if not names:
            names = tuple(sorted(view.topics) if describe is None
                          else filter(describe, sorted(view.topics)))
        snapshot: dict[str, tuple | None] = {}
        read = self.table.read
        replicated = view.replicated
        placed, broker_id, leader_role = view.dirs_placed, self.broker_id, ptable.ROLE_LEADER

        def one(slot: int) -> tuple:
            s = read(slot)
            if slot in placed and (s.state != ptable.ONLINE or s.role != leader_role):
                served = view.slot(s.name, s.partition)  # (the serving slot, chosen again)
                s = s if served is None else read(served)
            if slot in replicated:
                # a replicated partition: its leader, and its log up to the high
                # watermark; one with replicas across log dirs is this broker's
                # while one of them leads (its leader field is a log dir id)
                leader = s.leader if slot not in placed else (
                    broker_id if s.role == leader_role else -1)
                return s.state, s.start_offset, s.readable_end, s.owner, leader
            return s.state, s.start_offset, s.end_offset, s.owner

        if len(names) >= _BULK_NAMES:
            # every slot at once: a tenth of the cost of reading them one by one
            bulk = self.table.figures().__getitem__
            if replicated:
                def figure(slot: int) -> tuple:
                    return one(slot) if slot in replicated else bulk(slot)
            else:
                figure = bulk
        else:
            figure = one

        for name in names:
            if name in snapshot:
                continue
            if describe is not None and not describe(name):
                snapshot[name] = REFUSED
                continue
            slots = view.topics.get(name)
            if slots is None:
                snapshot[name] = None
            elif None in slots:
                snapshot[name] = tuple(None if slot is None else figure(slot) for slot in slots)
            else:
                snapshot[name] = tuple(map(figure, slots))
        return names, snapshot

    def _build(self, names: tuple, snapshot: dict) -> api.MetadataResponse:
        described: dict[str, tuple[api.MetadataTopic, int]] = {}  # each name built once
        topics = []
        size = 0
        for name in names:
            if name not in described:
                described[name] = self._describe_topic(name, snapshot[name])
            topic, topic_size = described[name]
            size += topic_size
            if size > self.max_response_bytes:
                raise HostbrokerError("METADATA answer over response.max.bytes",
                                      ErrorCode.INVALID_REQUEST)
            topics.append(topic)
        return api.MetadataResponse(self.broker_id, self.brokers, tuple(topics))

    def _describe_topic(self, name: str, parts_read) -> tuple[api.MetadataTopic, int]:
        """A topic's METADATA entry and its encoded size."""
        size = 2 + len(name.encode("utf-8", "replace")) + 2 + 4
        if parts_read is None:
            return api.MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()), size
        if parts_read is REFUSED:
            return api.MetadataTopic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, ()), size
        parts = []
        for partition, read in enumerate(parts_read):
            if read is None:
                continue
            state, start, end, owner = read[:4]
            code = ErrorCode.STORAGE_ERROR if state == ptable.OFFLINE else ErrorCode.NONE
            leader = self.broker_id if len(read) == 4 else read[4]
            parts.append(api.MetadataPartition(partition, code, leader, start, end,
                                               self.log_dirs[owner]))
            size += 4 + 2 + 4 + 8 + 8 + 2 + self.dir_bytes[owner]
        return api.MetadataTopic(name, ErrorCode.NONE, tuple(parts)), size
