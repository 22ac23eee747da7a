"""The request handler process, ``hb-handler-N`` (``num.handlers`` of them).

Owns: decoding and answering requests; long-poll fetches it has parked;
produce, delete and offset requests it has forwarded to writers and not yet
answered. All requests of one connection come to the same handler, which is
what keeps their answers in order.

Reads: request rings from every processor; result rings from every writer;
the partition table (lock-free) and segment directory listings to turn a fetch
into file ranges. Writes: response rings to every processor; append rings to
every writer. Under the admin lock it creates topics (partition directories via
the log package, and their table slots) and marks topics for deletion; the
owning writers take it from there.

Per request:

- PRODUCE: validate each partition's message set (every entry's CRC; wrappers
  are not decompressed), forward it to the partition's writer, answer when
  every writer has (acks 1 / -1); acks 0 gets no answer.
- FETCH: compute ``(segment file, position, length)`` per partition from the
  table and answer with those ranges; the processor sends them with sendfile.
  If fewer than ``min_bytes`` are there, park it until a writer rings (new
  data) or ``max_wait_ms`` passes.
- OFFSETS, METADATA: from the table and the segment files' mtimes.
- CREATE_TOPIC / DELETE_TOPIC, OFFSET_COMMIT / OFFSET_FETCH: as above.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
from collections.abc import Callable, Sequence

from hostbroker.errors import ConfigError, ErrorCode, HostbrokerError, InvalidTopicError
from hostbroker.log import message as logmsg
from hostbroker.log.config import LogConfig
from hostbroker.log.partition import PartitionLog
from hostbroker.log.segments import (fetch_range, offsets_before, parse_segment_filename,
                                     partition_dirname, segment_filename, validate_topic_name)
from hostbroker.protocol import api
from hostbroker.protocol.api import ApiKey
from hostbroker.shm import procs
from hostbroker.shm import table as ptable
from hostbroker.shm.table import AdminLock, PartitionTable
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import Worker, now_ms

_IDLE_TIMEOUT_S = 1.0
_MAX_BROKEN = 100_000


class TopicView:
    """This handler's cached picture of the partition table: topic -> slots.

    Rebuilt whenever the table's generation moves (a topic was created or
    deleted); per-slot offsets are always read fresh from the table.
    """

    def __init__(self, table: PartitionTable, log_dirs: Sequence[str], defaults: LogConfig):
        self.table = table
        self.log_dirs = log_dirs
        self.defaults = defaults
        self.generation = -1
        self.topics: dict[str, list[int | None]] = {}
        self._configs: dict[tuple[int, str], LogConfig] = {}
        self._segments: dict[int, tuple[int, list[int]]] = {}

    def refresh(self) -> None:
        gen = self.table.generation
        if gen == self.generation:
            return
        topics: dict[str, dict[int, int]] = {}
        for i, s in self.table.scan():
            if s.state in (ptable.ONLINE, ptable.OFFLINE, ptable.CREATING):
                topics.setdefault(s.name, {})[s.partition] = i
        self.topics = {t: [parts.get(p) for p in range(max(parts) + 1)]
                       for t, parts in topics.items()}
        self.generation = gen
        # a slot freed and taken by another topic must not keep the old one's data
        self._configs.clear()
        self._segments.clear()

    def slot(self, topic: str, partition: int) -> int | None:
        slots = self.topics.get(topic)
        if slots is None or not 0 <= partition < len(slots):
            return None
        return slots[partition]

    def partition_path(self, s) -> str:
        return os.path.join(self.log_dirs[s.owner], partition_dirname(s.name, s.partition))

    def config(self, slot: int, s) -> LogConfig:
        key = (slot, s.name)
        cfg = self._configs.get(key)
        if cfg is None:
            try:
                with open(os.path.join(self.partition_path(s), "partition.json")) as f:
                    overrides = json.load(f).get("config", {})
                cfg = self.defaults.with_overrides(overrides)
            except (OSError, ValueError, HostbrokerError):
                cfg = self.defaults
            self._configs[key] = cfg
        return cfg

    def segment_bases(self, slot: int, s) -> list[int]:
        """Sorted base offsets of the slot's segments, listed again when the
        writer bumps the segment generation (roll, retention, truncation)."""
        cached = self._segments.get(slot)
        if cached is not None and cached[0] == s.segment_generation:
            return cached[1]
        bases = []
        for name in os.listdir(self.partition_path(s)):
            base = parse_segment_filename(name)
            if base is not None and base <= s.end_offset:
                bases.append(base)
        bases.sort()
        # keep only the segments that hold the log as published (drop ones deleted
        # meanwhile by retention, whose bases fall below the start offset)
        bases = [b for b in bases if b >= s.start_offset] or [s.start_offset]
        if bases[0] > s.start_offset:
            bases.insert(0, s.start_offset)
        self._segments[slot] = (s.segment_generation, bases)
        return bases


@dataclasses.dataclass(slots=True, eq=False)
class _Pending:
    """A request waiting for writers' answers; ``respond(pending, failed=False)``
    answers the client once ``remaining`` reaches zero or a writer is replaced."""

    processor: int
    conn_id: int
    seq: int | None  # None: acks=0, nobody to answer
    correlation_id: int
    api_key: int
    results: list
    respond: Callable
    remaining: int = 0
    writers: set[int] = dataclasses.field(default_factory=set)
    token: int = 0


@dataclasses.dataclass(slots=True, eq=False)
class _ParkedFetch:
    """A long-poll fetch waiting for ``min_bytes`` or its deadline."""

    processor: int
    conn_id: int
    seq: int
    correlation_id: int
    request: object
    deadline_ms: int


class HandlerWorker(Worker):
    kind = "handler"
    process_name = "hb-handler"

    def init_process(self) -> None:
        super().init_process()
        plan = self.plan
        self.defaults = self.config.log_defaults()
        self.table = PartitionTable.attach(plan.table_name)
        self.lock = AdminLock.attach(plan.admin_lock_key,
                                     self.config["admin.lock.timeout.ms"] / 1000)
        self.view = TopicView(self.table, plan.log_dirs, self.defaults)
        self.requests = [self.receiver("req", p, self.index) for p in range(plan.num_processors)]
        self.results = [self.receiver("res", w, self.index) for w in range(plan.num_writers)]
        self.responses = [self.sender("resp", self.index, p) for p in range(plan.num_processors)]
        self.appends = [self.sender("app", self.index, w) for w in range(plan.num_writers)]
        self.processor_bells = [plan.doorbell("processor", p) for p in range(plan.num_processors)]
        self.writer_bells = [plan.doorbell("writer", w) for w in range(plan.num_writers)]
        self.tokens = itertools.count(1)
        self.pending: dict[int, _Pending] = {}
        self.parked: list[_ParkedFetch] = []
        self.writer_epochs = [self._epoch("writer", w) for w in range(plan.num_writers)]
        self.brokers = self._broker_list()
        self.broker_id = self.config["broker.id"]
        self.auto_create = self.config["auto.create.topics.enable"]
        self.dirty_processors: set[int] = set()
        self.dirty_writers: set[int] = set()
        self.draining = False
        self.broken: dict[int, None] = {}  # connections closing after a protocol error
        self.board.set_state(self.slot, procs.WORKER_READY)

    def _epoch(self, kind: str, index: int) -> int:
        return self.board.epoch(self.plan.board_slot(kind, index))

    def _broker_list(self):
        host, port, unix = "", -1, ""
        for uri, sock in self.plan.listeners:
            if uri.startswith("tcp://") and port == -1:
                host, port = sock.getsockname()[:2]
            elif uri.startswith("unix://") and not unix:
                unix = sock.getsockname()
        return ((self.config["broker.id"], host, port, unix),)

    # -- loop --------------------------------------------------------------
    def run(self) -> None:
        self.serve_rings()
        for parked in self.parked:
            self._answer_fetch(parked.processor, parked.conn_id, parked.seq,
                               parked.correlation_id, parked.request, force=True)
        self.parked = []
        self._flush_senders()

    def _timeout(self) -> float:
        if any(s.pending() for s in self.responses) or any(s.pending() for s in self.appends):
            return 0.005
        if not self.parked:
            return _IDLE_TIMEOUT_S
        soonest = min(p.deadline_ms for p in self.parked)
        return min(_IDLE_TIMEOUT_S, max(0.0, (soonest - now_ms()) / 1000))

    def _cycle(self) -> None:
        self._check_writer_epochs()
        if not self.draining and self.board.broker_state == procs.BROKER_DRAINING:
            # the broker is stopping: no more waiting, answer long polls with what is there
            self.draining = True
        self._take_results()
        for p, receiver in enumerate(self.requests):
            for m in receiver.poll():
                self._on_request(p, m)
                # pass work on at once, so writers and processors run alongside us
                # instead of waiting for the whole batch
                self._flush_senders()
                self._take_results()
            # appends refer to ring memory: copy what the rings could not take yet
            for w in self.dirty_writers:
                self.appends[w].own()
            if receiver.done():
                self.processor_bells[p].ring()
        if self.parked:
            self._recheck_parked()
        self._flush_senders()
        self.board.set(self.slot, procs.FETCH_PARKED, len(self.parked))

    def _take_results(self) -> None:
        for w, receiver in enumerate(self.results):
            for m in receiver.poll():
                self._on_result(m)
            if receiver.done():
                self.writer_bells[w].ring()

    def _flush_senders(self) -> None:
        for w in list(self.dirty_writers):
            if self.appends[w].pump():
                self.dirty_writers.discard(w)
            self.writer_bells[w].ring()
        for p in list(self.dirty_processors):
            if self.responses[p].pump():
                self.dirty_processors.discard(p)
            self.processor_bells[p].ring()

    def _respond(self, processor: int, conn_id: int, seq: int, pieces, flags: int = 0) -> None:
        self.responses[processor].send(*env.encode_response(conn_id, seq, flags, pieces))
        self.dirty_processors.add(processor)

    def _check_writer_epochs(self) -> None:
        for w in range(self.plan.num_writers):
            epoch = self._epoch("writer", w)
            if epoch != self.writer_epochs[w]:
                self.writer_epochs[w] = epoch
                for token, pending in list(self.pending.items()):
                    if w in pending.writers:
                        del self.pending[token]
                        pending.respond(pending, failed=True)

    # -- requests ----------------------------------------------------------
    def _on_request(self, p: int, m) -> None:
        conn_id, seq, flags = env.REQ_HEADER.unpack_from(m, 0)
        if flags & env.REQ_CLOSED:
            self.parked = [x for x in self.parked if x.conn_id != conn_id]
            self.broken.pop(conn_id, None)
            return
        if conn_id in self.broken:
            return  # pipelined behind a protocol error: the connection is closing, run nothing
        self.count(procs.REQUESTS)
        frame = m[env.REQ_HEADER.size:]
        try:
            header, request = api.decode_request(frame)
        except api.HeaderTooShortError:
            self._break(conn_id)
            self._respond(p, conn_id, seq, [], env.RESP_CLOSE_NOW)
            return
        except HostbrokerError as e:
            self._break(conn_id)
            corr = api.peek_correlation_id(frame)
            self._respond(p, conn_id, seq, [api.encode_error_frame(corr or 0, e.code)],
                          env.RESP_CLOSE_AFTER)
            return
        no_response = bool(flags & env.REQ_NO_RESPONSE)
        corr = header.correlation_id
        try:
            key = header.api_key
            if key == ApiKey.PRODUCE:
                self._produce(p, conn_id, seq, corr, request, no_response)
            elif key == ApiKey.FETCH:
                self._fetch(p, conn_id, seq, corr, request)
            elif key == ApiKey.OFFSETS:
                self._reply(p, conn_id, seq, corr, self._offsets(request))
            elif key == ApiKey.METADATA:
                self._reply(p, conn_id, seq, corr, self._metadata(request))
            elif key == ApiKey.CREATE_TOPIC:
                self._reply(p, conn_id, seq, corr, self._create_topic(request))
            elif key == ApiKey.DELETE_TOPIC:
                self._delete_topic(p, conn_id, seq, corr, request)
            elif key == ApiKey.OFFSET_COMMIT:
                self._offset_commit(p, conn_id, seq, corr, request)
            elif key == ApiKey.OFFSET_FETCH:
                self._offset_fetch(p, conn_id, seq, corr, request)
        except HostbrokerError as e:
            # a request we decoded but cannot serve at all: say so and close
            self._break(conn_id)
            self._respond(p, conn_id, seq, [api.encode_error_frame(corr, e.code)],
                          env.RESP_CLOSE_AFTER)

    def _break(self, conn_id: int) -> None:
        """Remember a connection that sent something undecodable (until the
        processor says it closed; bounded in case that notice is lost)."""
        self.count(procs.ERRORS)
        self.broken[conn_id] = None
        if len(self.broken) > _MAX_BROKEN:
            del self.broken[next(iter(self.broken))]

    def _reply(self, p, conn_id, seq, corr, response) -> None:
        self._respond(p, conn_id, seq, [api.encode_response(corr, response)])

    # -- topics ------------------------------------------------------------
    @contextlib.contextmanager
    def _admin(self):
        """The admin lock, or BROKER_NOT_AVAILABLE when another process holds it too long."""
        try:
            self.lock.acquire()
        except TimeoutError as e:
            raise HostbrokerError(f"topic admin busy: {e}", ErrorCode.BROKER_NOT_AVAILABLE) from e
        try:
            yield
        finally:
            self.lock.release()

    def _create_topic_locked(self, topic: str, partitions: int, overrides: dict[str, str]) -> None:
        """Create a topic's partitions, each on the log dir holding the fewest.
        Caller holds the admin lock and has checked the topic does not exist."""
        counts = [0] * self.plan.num_writers
        offline = set()
        for _, s in self.table.scan():
            counts[s.owner] += 1
            if s.state == ptable.OFFLINE:
                offline.add(s.owner)
        usable = [w for w in range(self.plan.num_writers) if w not in offline]
        if not usable:
            raise HostbrokerError("every log dir is offline", ErrorCode.STORAGE_ERROR)
        created = []
        try:
            for partition in range(partitions):
                w = min(usable, key=lambda i: (counts[i], i))
                slot = self.table.find_free()
                if slot is None:
                    raise HostbrokerError("partition table full: raise max.partitions",
                                          ErrorCode.INVALID_REQUEST)
                plog = PartitionLog.create(self.plan.log_dirs[w], topic, partition, partitions,
                                           overrides, self.defaults, now_ms)
                plog.close()
                self.table.write(slot, state=ptable.ONLINE, name=topic, partition=partition,
                                 owner=w, start_offset=0, end_offset=0, flushed_offset=0,
                                 segment_generation=1)
                created.append(slot)
                counts[w] += 1
        except OSError as e:
            for slot in created:
                self.table.write(slot, state=ptable.DELETING)
            raise HostbrokerError(f"cannot create partition: {e}", ErrorCode.STORAGE_ERROR) from e
        finally:
            self.table.bump_generation()
            self.view.refresh()

    def _topic_exists_locked(self, topic: str) -> bool:
        return any(s.name == topic and s.state != ptable.FREE for _, s in self.table.scan())

    def _create_topic(self, request) -> api.AdminResponse:
        topic = request.topic
        try:
            validate_topic_name(topic)
        except InvalidTopicError as e:
            return api.AdminResponse(ErrorCode.INVALID_TOPIC, str(e))
        limit = self.config["max.partitions.per.topic"]
        if not 1 <= request.partitions <= limit:
            return api.AdminResponse(ErrorCode.INVALID_REQUEST,
                                     f"partitions must be between 1 and {limit}")
        overrides = {entry.key: entry.value for entry in request.configs}
        if len(overrides) != len(request.configs):
            return api.AdminResponse(ErrorCode.INVALID_CONFIG, "a config key is given twice")
        try:
            self.defaults.with_overrides(overrides)
        except ConfigError as e:
            return api.AdminResponse(ErrorCode.INVALID_CONFIG, str(e))
        try:
            with self._admin():
                if self._topic_exists_locked(topic):
                    return api.AdminResponse(ErrorCode.TOPIC_ALREADY_EXISTS,
                                             f"topic {topic} already exists")
                self._create_topic_locked(topic, request.partitions, overrides)
        except HostbrokerError as e:
            return api.AdminResponse(e.code, str(e))
        return api.AdminResponse(ErrorCode.NONE, None)

    def _auto_create(self, topic: str) -> ErrorCode:
        try:
            validate_topic_name(topic)
        except InvalidTopicError:
            return ErrorCode.INVALID_TOPIC
        try:
            with self._admin():
                if not self._topic_exists_locked(topic):
                    self._create_topic_locked(topic, self.config["num.partitions"], {})
        except HostbrokerError as e:
            return e.code
        self.view.refresh()
        return ErrorCode.NONE

    def _delete_topic(self, p, conn_id, seq, corr, request) -> None:
        topic = request.topic
        try:
            with self._admin():
                slots = [(i, s) for i, s in self.table.scan()
                         if s.name == topic and s.state != ptable.FREE]
                for i, _ in slots:
                    self.table.write(i, state=ptable.DELETING)
                self.table.bump_generation()
        except HostbrokerError as e:
            self._reply(p, conn_id, seq, corr, api.AdminResponse(e.code, str(e)))
            return
        if not slots:
            self._reply(p, conn_id, seq, corr, api.AdminResponse(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}"))
            return
        self.view.refresh()
        # long polls on the deleted topic are answered now (with UNKNOWN_TOPIC_OR_PARTITION)
        waiting = []
        for x in self.parked:
            if any(part.topic == topic for part in x.request.partitions):
                self._answer_fetch(x.processor, x.conn_id, x.seq, x.correlation_id, x.request,
                                   force=True)
            else:
                waiting.append(x)
        self.parked = waiting

        def respond(pending: _Pending, failed: bool = False) -> None:
            errors = [r.get("message", "delete failed") for r in pending.results if r["error"]]
            if failed:
                errors.append("a writer restarted while deleting")
            code = ErrorCode.NONE if not errors else ErrorCode.STORAGE_ERROR
            self._reply(pending.processor, pending.conn_id, pending.seq,
                        pending.correlation_id,
                        api.AdminResponse(code, "; ".join(errors) if errors else None))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.DELETE_TOPIC, [], respond)
        for i, s in slots:
            self._to_writer(pending, s.owner, *env.encode_json(
                env.OP_DELETE, pending.token,
                {"slot": i, "topic": s.name, "partition": s.partition}))

    # -- produce -------------------------------------------------------------
    def _new_pending(self, p, conn_id, seq, corr, key, results, respond) -> _Pending:
        pending = _Pending(p, conn_id, seq, corr, key, results, respond)
        token = next(self.tokens)
        pending.token = token
        self.pending[token] = pending
        return pending

    def _to_writer(self, pending: _Pending, writer: int, *parts) -> None:
        pending.remaining += 1
        pending.writers.add(writer)
        self.appends[writer].send(*parts)
        self.dirty_writers.add(writer)

    def _produce(self, p, conn_id, seq, corr, request, no_response: bool) -> None:
        results = [[part.topic, part.partition, ErrorCode.NONE, -1, -1]
                   for part in request.partitions]

        def respond(pending: _Pending, failed: bool = False) -> None:
            if pending.seq is None:
                return  # acks=0
            for r in pending.results:
                if failed and r[2] == ErrorCode.NONE and r[3] == -1:
                    r[2] = ErrorCode.UNKNOWN
            body = api.ProduceResponse(tuple(api.ProducePartitionResult(*r)
                                             for r in pending.results))
            self._reply(pending.processor, pending.conn_id, pending.seq,
                        pending.correlation_id, body)

        pending = self._new_pending(p, conn_id, None if no_response else seq, corr,
                                    ApiKey.PRODUCE, results, respond)
        acks = request.acks
        if acks not in (-1, 0, 1):
            for r in results:
                r[2] = ErrorCode.INVALID_REQUEST
        else:
            deadline = now_ms() + max(0, request.timeout_ms)
            for index, part in enumerate(request.partitions):
                code = self._route_append(pending, index, part, acks, deadline)
                if code:
                    results[index][2] = code
        if acks == 0:
            # fire and forget: the writer sends no result and the client expects no answer
            del self.pending[pending.token]
        elif pending.remaining == 0:
            del self.pending[pending.token]
            respond(pending)

    def _route_append(self, pending: _Pending, index: int, part, acks: int, deadline: int):
        topic = part.topic
        self.view.refresh()
        if topic not in self.view.topics:
            if not self.auto_create:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            code = self._auto_create(topic)
            if code:
                return code
        slot = self.view.slot(topic, part.partition)
        if slot is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        s = self.table.read(slot)
        if s.state == ptable.OFFLINE:
            return ErrorCode.STORAGE_ERROR
        if s.state not in (ptable.ONLINE, ptable.CREATING):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        cfg = self.view.config(slot, s)
        data = part.message_set
        try:
            count = logmsg.validate_message_set(data, cfg.max_message_bytes)
        except HostbrokerError as e:
            self.count(procs.ERRORS)
            return e.code
        if count == 0:
            pending.results[index][3] = pending.results[index][4] = s.end_offset
            return ErrorCode.NONE
        self._to_writer(pending, s.owner, *env.encode_append(
            pending.token, slot, index, acks, count, deadline, data))
        return ErrorCode.NONE

    def _on_result(self, m) -> None:
        op, token = env.decode_op(m)
        pending = self.pending.get(token)
        if pending is None:
            return
        if op == env.OP_APPEND:
            _, _, index, error, base, end = env.APPEND_RESULT.unpack_from(m, 0)
            r = pending.results[index]
            r[2], r[3], r[4] = error, base, end
        else:
            pending.results.append(env.decode_json(m))
        pending.remaining -= 1
        if pending.remaining <= 0:
            del self.pending[token]
            pending.respond(pending)

    # -- fetch ---------------------------------------------------------------
    def _fetch(self, p, conn_id, seq, corr, request) -> None:
        if not self._answer_fetch(p, conn_id, seq, corr, request, force=self.draining):
            return
        max_wait = min(max(0, request.max_wait_ms), self.config["fetch.max.wait.ms"])
        if len(self.parked) >= self.config["fetch.max.parked"]:
            self._answer_fetch(p, conn_id, seq, corr, request, force=True)
            return
        self.parked.append(_ParkedFetch(p, conn_id, seq, corr, request, now_ms() + max_wait))

    def _fetch_parts(self, request):
        """Per partition (topic, partition, error, log_end_offset, FilePiece | None)."""
        self.view.refresh()
        out = []
        total = 0
        for part in request.partitions:
            piece = None
            leo = -1
            code = ErrorCode.NONE
            slot = self.view.slot(part.topic, part.partition)
            if part.max_bytes <= 0:
                code = ErrorCode.INVALID_FETCH_SIZE
            elif slot is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                s = self.table.read(slot)
                if s.state == ptable.OFFLINE:
                    code = ErrorCode.STORAGE_ERROR
                elif s.state not in (ptable.ONLINE, ptable.CREATING):
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    leo = s.end_offset
                    try:
                        bases = self.view.segment_bases(slot, s)
                        found = fetch_range(bases, s.end_offset, part.offset, part.max_bytes)
                    except HostbrokerError as e:
                        code = e.code
                    except OSError:
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    else:
                        if found is not None and found[2] > 0:
                            index, position, length = found
                            piece = env.FilePiece(
                                os.path.join(self.view.partition_path(s),
                                             segment_filename(bases[index])),
                                position, length)
                            total += length
            out.append((part.topic, part.partition, code, leo, piece))
        return total, out

    def _answer_fetch(self, p, conn_id, seq, corr, request, force: bool) -> bool:
        """Answer the fetch if it may be answered now; returns True if it must wait."""
        total, parts = self._fetch_parts(request)
        if not force and total < request.min_bytes and request.max_wait_ms > 0:
            return True
        headers = api.encode_fetch_response_parts(
            corr, [(t, pt, code, leo, piece.length if piece else 0)
                   for t, pt, code, leo, piece in parts])
        pieces: list = [headers[0]]
        for (_, _, _, _, piece), head in zip(parts, headers[1:]):
            if piece is not None:
                pieces.append(piece)
            if head:
                pieces.append(head)
        self.count(procs.BYTES_OUT, total)
        self._respond(p, conn_id, seq, pieces)
        return False

    def _recheck_parked(self) -> None:
        now = now_ms()
        still = []
        for x in self.parked:
            if self._answer_fetch(x.processor, x.conn_id, x.seq, x.correlation_id, x.request,
                                  force=self.draining or now >= x.deadline_ms):
                still.append(x)
        self.parked = still

    # -- offsets and metadata -------------------------------------------------
    def _offsets(self, request) -> api.OffsetsResponse:
        self.view.refresh()
        slot = self.view.slot(request.topic, request.partition)
        if slot is None:
            return api.OffsetsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())
        s = self.table.read(slot)
        if s.state == ptable.OFFLINE:
            return api.OffsetsResponse(ErrorCode.STORAGE_ERROR, ())
        if request.max_offsets < 0:
            return api.OffsetsResponse(ErrorCode.INVALID_REQUEST, ())
        path = self.view.partition_path(s)
        segments = []
        for base in self.view.segment_bases(slot, s):
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

    def _metadata(self, request) -> api.MetadataResponse:
        self.view.refresh()
        names = list(request.topics) or sorted(self.view.topics)
        topics = []
        for name in names:
            slots = self.view.topics.get(name)
            if slots is None:
                topics.append(api.MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()))
                continue
            parts = []
            for partition, slot in enumerate(slots):
                if slot is None:
                    continue
                s = self.table.read(slot)
                code = ErrorCode.STORAGE_ERROR if s.state == ptable.OFFLINE else ErrorCode.NONE
                parts.append(api.MetadataPartition(partition, code, self.broker_id,
                                                   s.start_offset, s.end_offset,
                                                   self.plan.log_dirs[s.owner]))
            topics.append(api.MetadataTopic(name, ErrorCode.NONE, tuple(parts)))
        brokers = tuple(api.MetadataBroker(*b) for b in self.brokers)
        return api.MetadataResponse(self.broker_id, brokers, tuple(topics))

    # -- consumer offsets ----------------------------------------------------
    def _offset_commit(self, p, conn_id, seq, corr, request) -> None:
        entries = [[request.group, part.topic, part.partition, part.offset, part.metadata]
                   for part in request.partitions]

        def respond(pending: _Pending, failed: bool = False) -> None:
            code = ErrorCode.UNKNOWN if failed else ErrorCode(pending.results[0]["error"])
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        api.OffsetCommitResponse(tuple(
                            api.OffsetCommitPartitionResult(e[1], e[2], code)
                            for e in entries)))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.OFFSET_COMMIT, [], respond)
        self._to_writer(pending, 0, *env.encode_json(
            env.OP_OFFSETS, pending.token, {"op": "commit", "entries": entries}))

    def _offset_fetch(self, p, conn_id, seq, corr, request) -> None:
        keys = [[request.group, part.topic, part.partition] for part in request.partitions]

        def respond(pending: _Pending, failed: bool = False) -> None:
            result = {} if failed else pending.results[0]
            code = ErrorCode.UNKNOWN if failed else ErrorCode(result["error"])
            offsets = result.get("offsets") or [[-1, ""]] * len(keys)
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        api.OffsetFetchResponse(tuple(
                            api.OffsetFetchPartitionResult(k[1], k[2], o[0], o[1], code)
                            for k, o in zip(keys, offsets))))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.OFFSET_FETCH, [], respond)
        self._to_writer(pending, 0, *env.encode_json(
            env.OP_OFFSETS, pending.token, {"op": "fetch", "keys": keys}))

