"""The request handler process, ``hb-handler-N`` (``num.handlers`` of them).

Owns: decoding and answering requests; long-poll fetches it has parked;
produce, delete and offset requests it has forwarded to writers and not yet
answered. All requests of one connection come to the same handler, which is
what keeps their answers in order.

Reads: request rings from every processor; result rings from every writer
and from the coordinator; the partition table (lock-free) and segment
directory listings to turn a fetch into file ranges. Writes: response rings
to every processor; append rings to every writer, and the ``capp`` ring to
the coordinator, which the handler treats as one more writer (its rings,
bell and epoch come after the writers', at ``plan.coordinator_peer``).
Under the admin lock it creates topics (partition directories via the log
package, and their table slots) and marks topics for deletion; the owning
writers take it from there.

Per request:

- PRODUCE (but a lone one, which its processor sends its writer past us,
  ``processor.direct.produce``): validate each partition's message set
  (every entry's CRC; wrappers are not decompressed), forward it to the
  partition's writer, answer when every writer has (acks 1 / -1); acks 0
  gets no answer. A set of ``produce.ring.append.min.bytes`` or more is not
  copied: the writer is told where it lies in our request ring
  (APPEND_REF), and we hold those bytes there until it says it has appended
  them (REF_DONE, ``_unhold``). A PRODUCE of one partition with acks=1 goes
  as an APPEND_DIRECT: its writer answers the
  processor itself and tells us (``produce.direct.answers``); we answer it
  only if the writer could not, or died first.
- FETCH: compute ``(segment file, position, length)`` per partition from the
  table and answer with those ranges; the processor sends them with sendfile.
  If fewer than ``min_bytes`` are there, park it until a writer rings (new
  data) or ``max_wait_ms`` passes.
- OFFSETS, METADATA: from the table and the segment files' mtimes
  (``answers.py``; processors answer them too, for a connection with no
  request at its handler).
- CREATE_TOPIC / DELETE_TOPIC, OFFSET_COMMIT / OFFSET_FETCH: as above.
- ALTER_TOPIC, LIST_OFFSET_GROUPS, DESCRIBE_TOPIC_CONFIGS (changing a topic,
  the groups with stored offsets, topics' config overrides): ``handler_alter.py``.
- LEADER_AND_ISR, STOP_REPLICA, OFFSET_FOR_LEADER_EPOCH, FETCH v1 and
  METADATA v1 (replication, cluster mode): ``handler_replication.py``; a
  FETCH v1 is parked and rechecked with the v0 ones.
- METADATA v2, ALTER_REPLICA_DIRS, LOG_DIR_ADMIN (replicas across log dirs, with
  ``hb-logdirs`` as one more peer after the coordinator): ``handler_logdirs.py``.
- CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, ALTER_QUOTAS, DESCRIBE_QUOTAS (access
  control admin, under the admin lock): ``handler_acls.py``.
- WHOAMI: the identity the connection's processor told (``REQ_PRINCIPAL``);
  with ``authorizer.enable``, every request is checked before its route
  (``handler_access.py``).
- JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, DESCRIBE_GROUP, LIST_GROUPS
  (docs/spec/groups.md): forwarded to ``hb-coordinator``, which holds the
  group state; a join waits there for its rebalance while the connection's
  later requests go on (their answers are held back only by the
  connection's order). OFFSET_COMMIT carries the committer's generation and
  member id to the coordinator, which fences it before storing.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time
import traceback
from collections.abc import Callable

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log import message as logmsg
from hostbroker.protocol import api
from hostbroker.protocol import groups as gproto
from hostbroker.protocol import replication as rproto
from hostbroker.protocol import throttled
from hostbroker.protocol.api import ApiKey
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.partitions import PartitionTable
from hostbroker.workers import envelopes as env
from hostbroker.workers.access import open_access
from hostbroker.workers.answers import TableAnswers, broker_list
from hostbroker.workers.base import Worker, now_ms
from hostbroker.workers.handler_access import NOTHING, HandlerAccess
from hostbroker.workers.handler_acls import ACCESS_ADMIN_KEYS, AccessAdmin
from hostbroker.workers.handler_alter import TopicAlter
from hostbroker.workers.handler_fetch import Fetching
from hostbroker.workers.handler_logdirs import LOGDIRS_REQUESTS, LogDirsRequests
from hostbroker.workers.handler_offsets import ConsumerOffsets
from hostbroker.workers.handler_replication import REPLICATION_REQUESTS, Replication
from hostbroker.workers.handler_topics import TopicAdmin
from hostbroker.workers.stats_record import FRAME_KEY, UNRECORDED, Recorder, answer_has_error
from hostbroker.workers.topicview import TopicView

_IDLE_TIMEOUT_S = 1.0
_GROUP_KEYS = frozenset(gproto.GroupApiKey)
_MAX_BROKEN = 100_000


@dataclasses.dataclass(slots=True, eq=False)
class _Pending:
    """A request waiting for writers' answers; ``respond(pending, failed=False)``
    answers the client once ``remaining`` reaches zero or a writer is replaced."""

    processor: int
    conn_id: int
    seq: int  # the request's place in its connection's order
    correlation_id: int
    api_key: int
    results: list
    respond: Callable
    remaining: int = 0
    writers: set[int] = dataclasses.field(default_factory=set)
    token: int = 0


class HandlerWorker(TopicAdmin, TopicAlter, Fetching, Replication, LogDirsRequests,
                    ConsumerOffsets, AccessAdmin, HandlerAccess, Worker):
    kind = "handler"
    process_name = "hb-handler"
    stats = UNRECORDED  # (init_process attaches this process's own)
    answering = -1  # the api key of the request being answered (init_process)

    def init_process(self) -> None:
        super().init_process()
        plan = self.plan
        self.defaults = self.config.log_defaults()
        self.table = PartitionTable.attach(plan.table_name)
        self.lock = AdminLock.attach(plan.admin_lock_key,
                                     self.config["admin.lock.timeout.ms"] / 1000)
        self.view = TopicView(self.table, plan.log_dirs, self.defaults)
        self.access = open_access(plan, self.config)  # ACLs and quotas (docs/security.md)
        self._init_access()  # identities and decisions (handler_access.py)
        self.refused = NOTHING  # topics the request being answered may not touch
        self.requests = [self.receiver("req", p, self.index) for p in range(plan.num_processors)]
        # the writers' rings, bells and epochs, then the coordinator's (plan.coordinator_peer)
        self.coordinator = plan.coordinator_peer
        self.results = ([self.receiver("res", w, self.index) for w in range(plan.num_writers)]
                        + [self.receiver("cres", 0, self.index)])
        self.responses = [self.sender("resp", self.index, p) for p in range(plan.num_processors)]
        self.appends = ([self.sender("app", self.index, w) for w in range(plan.num_writers)]
                        + [self.sender("capp", self.index, 0)])
        self.processor_bells = [self.waker("processor", p) for p in range(plan.num_processors)]
        self.writer_bells = ([self.waker("writer", w) for w in range(plan.num_writers)]
                             + [self.waker("coordinator", 0)])
        self.peer_slots = ([plan.board_slot("writer", w) for w in range(plan.num_writers)]
                           + [plan.board_slot("coordinator", 0)])
        self._init_logdirs()  # hb-logdirs' rings, bell and epoch after the coordinator's
        # the writers' appended-message counters when this round began: a parked
        # fetch may be answerable once they move (see _has_input)
        self.writer_slots = [plan.board_slot("writer", w) for w in range(plan.num_writers)]
        self.appended_seen = -1
        self.rechecked_appended = -1  # appended_seen when parked fetches were last rechecked
        self.rechecked_ms = 0
        # tokens of each epoch apart: results a writer still sends for the
        # handler this one replaces are never taken for this one's
        self.tokens = itertools.count((self.epoch << 40) + 1)
        self.parked_joins: set[int] = set()  # tokens of joins waiting for their rebalance
        self.max_parked_joins = self.config["group.max.parked.joins"]
        self.pending: dict[int, _Pending] = {}
        self.parked: list = []  # handler_fetch._ParkedFetch
        self.writer_epochs = [self.board.epoch(slot) for slot in self.peer_slots]
        self.answers = TableAnswers(self.view, plan.log_dirs, self.config["broker.id"],
                                    broker_list(plan, self.config["broker.id"],
                                                advertised=self.config["advertised.listeners"]),
                                    self.config["response.max.bytes"])
        tls_brokers = broker_list(plan, self.config["broker.id"], tls=True,
                                  advertised=self.config["advertised.listeners"])
        self.tls_answers = None if tls_brokers is None else TableAnswers(
            self.view, plan.log_dirs, self.config["broker.id"], tls_brokers,
            self.config["response.max.bytes"])  # (METADATA of ssl:// clients)
        self.auto_create = self.config["auto.create.topics.enable"]
        self.max_entries = self.config["request.max.entries"]
        self.max_response_bytes = self.config["response.max.bytes"]
        self.direct_answers = self.config["produce.direct.answers"]
        self.writer_polls = self.config["fetch.writer.polls"]
        self.ring_append_min = self.config["produce.ring.append.min.bytes"]
        # request-ring bytes held for writers: (token, index) -> (processor, position,
        # writer, how many APPEND_REFs had gone to that writer with this one)
        self.holds: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        self.refs_sent = [0] * plan.num_writers
        self.unheld: set[int] = set()  # processors whose request ring has space to free
        self.dirty_processors: set[int] = set()
        self.dirty_writers: set[int] = set()
        self.draining = False
        self.broken: dict[int, None] = {}  # connections closing after a protocol error
        self._init_replication()
        self._init_topic_names()
        self.stats = Recorder(plan, self.kind, self.index)
        # the api key of the request being answered, for the API stats' errors:
        # set as each request is taken, and before each waiting one is answered
        self.answering = -1
        self.board.set_state(self.slot, procs.WORKER_READY)

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

    def _appended(self) -> int:
        """Messages the writers have appended and high watermark moves (their
        board counters, summed)."""
        board = self.board
        return sum(board.get(slot, c) for slot in self.writer_slots for c in procs.LOG_MOVES)

    def _has_input(self) -> bool:
        """Records in an input ring, or, with fetches parked, appends since this
        round began: a writer rings a handler after appending only while it
        sleeps (it stores its counter before it looks at our flag, and we set
        the flag before we look at its counter, so one of us sees the other)."""
        if super()._has_input():
            return True
        return bool(self.parked) and self._appended() != self.appended_seen

    def _cycle(self) -> None:
        self.appended_seen = self._appended()  # before any fetch of this round looks at the log
        self._check_writer_epochs()
        self._retry_owed_bump()  # a config change's generation bump the lock refused
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
                self.processor_bells[p].ring()  # it waits for space: always ring
        if self.parked and self._parked_due():
            self._recheck_parked()
        for p in self.unheld:
            # writers are done with what they appended from these rings
            if self.requests[p].done():
                self.processor_bells[p].ring()
        self.unheld.clear()
        self._flush_senders()
        self.board.set(self.slot, procs.FETCH_PARKED, len(self.parked))

    def _take_results(self) -> None:
        for w, receiver in enumerate(self.results):
            if not receiver.has_unread():
                continue  # nothing taken since its last done(): nothing to free either
            for m in receiver.poll():
                self._on_result(m)
            if receiver.done():
                self.writer_bells[w].ring()  # it waits for space: always ring

    def _flush_senders(self) -> None:
        for w in list(self.dirty_writers):
            if self.appends[w].pump():
                self.dirty_writers.discard(w)
            self.writer_bells[w].wake()
        for p in list(self.dirty_processors):
            if self.responses[p].pump():
                self.dirty_processors.discard(p)
            self.processor_bells[p].wake()

    def _respond(self, processor: int, conn_id: int, seq: int, pieces, flags: int = 0,
                 error: bool = False) -> None:
        """Send an answer; ``error``: it carries an error code (an error frame,
        ``flags`` closing, counts as one), for the API stats."""
        if error or flags & (env.RESP_CLOSE_AFTER | env.RESP_CLOSE_NOW):
            self.stats.error(self.answering)
        self.responses[processor].send(*env.encode_response(conn_id, seq, flags, pieces,
                                                            time.monotonic_ns()))
        self.dirty_processors.add(processor)

    def _check_writer_epochs(self) -> None:
        """A writer or the coordinator replaced: fail what waited on it."""
        for w, slot in enumerate(self.peer_slots):
            epoch = self.board.epoch(slot)
            if epoch != self.writer_epochs[w]:
                self.writer_epochs[w] = epoch
                # what the dead writer did answer is in our result rings: take it
                # first, so only what it never answered is failed here
                self._take_results()
                if any(held[2] == w for held in self.holds.values()):
                    # Bytes held for it: the ones it or the supervisor's reset of
                    # its ring dropped are freed when this mark comes back through
                    # its replacement (REF_SYNC); those sent after the reset are
                    # the replacement's, freed by its REF_DONEs.
                    self.appends[w].send(env.REF_SYNC.pack(env.OP_REF_SYNC, w, self.refs_sent[w]))
                    self.dirty_writers.add(w)
                for token, pending in list(self.pending.items()):
                    if w in pending.writers:
                        del self.pending[token]
                        self.answering = pending.api_key
                        pending.respond(pending, failed=True)

    # -- requests ----------------------------------------------------------
    def _on_request(self, p: int, m) -> None:
        conn_id, seq, flags, stamp_ns = env.REQ_HEADER.unpack_from(m, 0)
        if flags & env.REQ_PRINCIPAL:
            # (not a request: its time in the ring is not the requests' wait)
            self._on_principal(p, conn_id, m)
            return
        if stamp_ns:
            self.wait_ns += time.monotonic_ns() - stamp_ns
        if flags & env.REQ_CLOSED:
            self._forget_principal(p, conn_id)
            self.parked = [x for x in self.parked if x.conn_id != conn_id]
            self.broken.pop(conn_id, None)
            self._drop_joins(conn_id)
            return
        if conn_id in self.broken:
            return  # pipelined behind a protocol error: the connection is closing, run nothing
        self.count(procs.REQUESTS)
        frame = m[env.REQ_HEADER.size:]
        self.answering = FRAME_KEY.unpack_from(frame)[0] if len(frame) >= FRAME_KEY.size else -1
        try:
            header, request = rproto.decode_any_request(frame, self.max_entries)
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
        corr = header.correlation_id
        try:
            key = header.api_key
            if self.enforcing:  # (handler_access.py)
                refused = self._authorize(p, conn_id, seq, corr, request)
                if refused is None:
                    return  # refused, and answered
                self.refused = refused
            if (key, header.api_version) in LOGDIRS_REQUESTS:
                # METADATA v2, ALTER_REPLICA_DIRS, LOG_DIR_ADMIN (handler_logdirs.py)
                self._logdirs_request(p, conn_id, seq, corr, header, request)
            elif (key, header.api_version) in REPLICATION_REQUESTS:
                # LEADER_AND_ISR, STOP_REPLICA, OFFSET_FOR_LEADER_EPOCH, FETCH v1,
                # METADATA v1 (handler_replication.py)
                self._replication_request(p, conn_id, seq, corr, header, request)
            elif key == ApiKey.PRODUCE:
                self._produce(p, conn_id, seq, corr, request)
            elif key == ApiKey.FETCH:
                self._fetch(p, conn_id, seq, corr, request)
            elif key == ApiKey.METADATA:
                answers = self._metadata_answers(p, conn_id)
                frame, failed = answers.metadata_frame(corr, request,
                                                       self._describes(p, conn_id))
                if failed:
                    self._fail(p, conn_id, seq, corr, ErrorCode.INVALID_REQUEST)
                else:
                    self._respond(p, conn_id, seq, [frame], error=answers.error)
            elif key == ApiKey.OFFSETS:
                self._reply(p, conn_id, seq, corr,
                            self.answers.offsets(request, self._describes(p, conn_id)))
            elif key == ApiKey.CREATE_TOPIC:
                self._create_topic(p, conn_id, seq, corr, request)
            elif key == ApiKey.DELETE_TOPIC:
                self._delete_topic(p, conn_id, seq, corr, request)
            elif key == ApiKey.OFFSET_COMMIT:
                self._offset_commit(p, conn_id, seq, corr, request)
            elif key == ApiKey.OFFSET_FETCH:
                self._offset_fetch(p, conn_id, seq, corr, request)
            elif key in _GROUP_KEYS:
                self._group_request(p, conn_id, seq, corr, header, request)
            elif key in (ApiKey.ALTER_TOPIC, ApiKey.LIST_OFFSET_GROUPS,
                         ApiKey.DESCRIBE_TOPIC_CONFIGS):
                self._topics_admin_request(p, conn_id, seq, corr, key, request)
            elif key in ACCESS_ADMIN_KEYS:  # keys 22-26 (handler_acls.py)
                self._access_request(p, conn_id, seq, corr, key, request)
            elif key == ApiKey.WHOAMI:
                self._whoami(p, conn_id, seq, corr)
        except HostbrokerError as e:
            # a request we decoded but cannot serve at all: say so and close
            self._forget(conn_id, seq)
            self._fail(p, conn_id, seq, corr, e.code)
        except Exception:  # noqa: BLE001 - one request must never end the handler
            # A bug that one request can reach would otherwise end the handler and
            # every connection it serves. Answer that request UNKNOWN (in order, then
            # close), drop what it left waiting, and show why once in the log.
            self._forget(conn_id, seq)
            self._fail(p, conn_id, seq, corr, ErrorCode.UNKNOWN)
            self.count(procs.ERRORS)
            key_name = (ApiKey(key) if key in ApiKey._value2member_map_
                        else gproto.GroupApiKey(key)).name
            print(f"hostbroker: {self.name}: request {key_name} "
                  f"failed unexpectedly; answered UNKNOWN", file=sys.stderr, flush=True)
            traceback.print_exc()

    def _forget(self, conn_id: int, seq: int) -> None:
        """Drop writer results and parked fetches a failed request left behind,
        so it is answered once (by its error frame)."""
        for token, pending in list(self.pending.items()):
            if pending.conn_id == conn_id and pending.seq == seq:
                del self.pending[token]  # bytes held for its writers stay held until they are done
        self.parked = [x for x in self.parked if not (x.conn_id == conn_id and x.seq == seq)]

    def _break(self, conn_id: int) -> None:
        """Remember a connection that sent something undecodable (until the
        processor says it closed; bounded in case that notice is lost)."""
        self.count(procs.ERRORS)
        self.broken[conn_id] = None
        if len(self.broken) > _MAX_BROKEN:
            del self.broken[next(iter(self.broken))]

    def _reply(self, p, conn_id, seq, corr, response, error: bool | None = None) -> None:
        """Answer with ``response``; one that cannot be encoded or is over
        ``response.max.bytes`` becomes an error frame and the connection closes.
        ``error``: whether it carries an error code, when the builder knows
        (else :func:`answer_has_error` looks)."""
        frame, failed = api.encode_answer(corr, response, self.max_response_bytes)
        if failed:
            self._fail(p, conn_id, seq, corr, ErrorCode.INVALID_REQUEST)
            return
        self._respond(p, conn_id, seq, [frame],
                      error=answer_has_error(response) if error is None else error)

    def _fail(self, p, conn_id, seq, corr, code: ErrorCode) -> None:
        """Answer with an error frame, then close the connection (in order)."""
        self._break(conn_id)
        self._respond(p, conn_id, seq, [api.encode_error_frame(corr, code)], env.RESP_CLOSE_AFTER)

    # -- produce -------------------------------------------------------------
    def _new_pending(self, p, conn_id, seq, corr, key, results, respond) -> _Pending:
        pending = _Pending(p, conn_id, seq, corr, key, results, respond)
        token = next(self.tokens)
        pending.token = token
        self.pending[token] = pending
        return pending

    def _unhold(self, key: tuple[int, int]) -> None:
        """Give back the request-ring bytes held for the writer of one
        APPEND_REF, ``(token, index)`` (freed at the end of this round, once
        every polled view is done with)."""
        held = self.holds.pop(key, None)
        if held is not None:
            p, pos, _, _ = held
            self.requests[p].unhold(pos)
            self.unheld.add(p)

    def _to_writer(self, pending: _Pending, writer: int, *parts) -> None:
        pending.remaining += 1
        pending.writers.add(writer)
        self.appends[writer].send(*parts)
        self.dirty_writers.add(writer)

    def _produce(self, p, conn_id, seq, corr, request) -> None:
        results = [[part.topic, part.partition, ErrorCode.NONE, -1, -1]
                   for part in request.partitions]

        def respond(pending: _Pending, failed: bool = False) -> None:
            for r in pending.results:
                if failed and r[2] == ErrorCode.NONE and r[3] == -1:
                    r[2] = ErrorCode.UNKNOWN
            body = answer_type(tuple(api.ProducePartitionResult(*r)
                                     for r in pending.results))
            self._reply(pending.processor, pending.conn_id, pending.seq,
                        pending.correlation_id, body,
                        error=any(r[2] for r in pending.results))

        # version 1 carries the throttle time its processor writes in (protocol/throttled.py)
        v1 = type(request) is throttled.ProduceRequestV1
        answer_type = throttled.ProduceResponseV1 if v1 else api.ProduceResponse
        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.PRODUCE, results, respond)
        acks = request.acks
        if acks not in (-1, 0, 1):
            for r in results:
                r[2] = ErrorCode.INVALID_REQUEST
        else:
            deadline = now_ms() + max(0, request.timeout_ms)
            # one partition, acks=1: its writer answers the processor itself
            direct = (env.Direct(p, conn_id, seq, corr) if self.direct_answers and acks == 1
                      and len(request.partitions) == 1 and not v1 else None)
            refused = self.refused  # topics the principal may not WRITE (handler_access.py)
            for index, part in enumerate(request.partitions):
                if refused and part.topic in refused:
                    results[index][2] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                code = self._route_append(pending, index, part, acks, deadline, direct)
                if code:
                    results[index][2] = code
        if acks == 0:
            # fire and forget: the writer sends no result and the client expects no
            # answer; an empty one gives the request's place in the order back
            del self.pending[pending.token]
            self._respond(p, conn_id, seq, [])
        elif pending.remaining == 0:
            del self.pending[pending.token]
            respond(pending)

    def _route_append(self, pending: _Pending, index: int, part, acks: int, deadline: int,
                      direct: env.Direct | None = None):
        topic = part.topic
        self.view.refresh()
        if topic not in self.view.topics:
            if not self.auto_create:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if not self._may_create(topic):  # CREATE on the cluster or the topic
                return ErrorCode.TOPIC_AUTHORIZATION_FAILED
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
            if s.role not in (ptable.ROLE_PLAIN, ptable.ROLE_LEADER):
                return ErrorCode.NOT_LEADER_FOR_PARTITION  # as a non-empty set is answered
            pending.results[index][3] = pending.results[index][4] = s.end_offset
            return ErrorCode.NONE
        ref = None
        if 0 < self.ring_append_min <= data.nbytes:
            # large: the writer appends it from the request ring, no copy here
            held = self.requests[pending.processor].hold(data)
            if held is not None:
                offset, pos = held
                self.refs_sent[s.owner] += 1
                self.holds[(pending.token, index)] = (pending.processor, pos, s.owner,
                                                      self.refs_sent[s.owner])
                ref = env.Ref(pending.processor, offset, data.nbytes, self.epoch)
        self._to_writer(pending, s.owner, *env.encode_append(
            pending.token, slot, s.name, s.partition, index, acks, count, deadline, data,
            time.monotonic_ns(), direct, ref))
        return ErrorCode.NONE

    def _on_result(self, m) -> None:
        op, token = env.decode_op(m)
        if op == env.OP_REF_DONE:
            self._unhold((token, env.REF_DONE.unpack_from(m, 0)[2]))
            return
        if op == env.OP_REF_SYNC:
            # every APPEND_REF sent to writer ``token`` before the mark is done
            # with: appended by it, or dropped with the writer that died
            _, w, sent = env.REF_SYNC.unpack_from(m, 0)
            for key, held in list(self.holds.items()):
                if held[2] == w and held[3] <= sent:
                    self._unhold(key)
            return
        pending = self.pending.get(token)
        if pending is None:
            return
        if op == env.OP_APPEND_DIRECT or op == env.OP_POLL_DONE:
            del self.pending[token]  # the writer answered the processor itself
            return
        self.answering = pending.api_key
        if op == env.OP_POLL_BACK:
            del self.pending[token]
            pending.respond(pending)  # answered or parked here after all
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
