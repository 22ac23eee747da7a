"""Replication requests of the request handler (part of ``hb-handler-N``).

Mixed into :class:`~hostbroker.workers.handler.HandlerWorker`; the one
place a handler serves what ``hostbroker.protocol.replication`` decodes
(docs/spec/protocol.md, "Replication"):

- LEADER_AND_ISR (14): refused STALE_CONTROLLER_EPOCH below the highest
  controller epoch seen (the peers table's header, ``shm/peers.py``; the
  answer's last partition, of topic "", carries that epoch), and in
  cluster mode CONTROLLER_NOT_CONFIRMED when ZooKeeper does not name its
  controller and epoch (as the registrar published them there); else
  under the admin lock the epoch and controller are stored, the brokers it
  names go to the peers table, and each partition this broker is a replica
  of and does not hold yet is created (``partition.json`` says
  ``"replicated": true``; its slot is claimed STOPPED with its replicas,
  leader and epoch). Then each partition's owning writer gets an
  OP_REPLICA_STATE (leader, follower or stopped) and the request is answered
  once every writer has.
- STOP_REPLICA (15): the same epoch check; each named replica is stopped, or
  deleted as DELETE_TOPIC deletes (``delete_partitions``), by its writer.
- OFFSET_FOR_LEADER_EPOCH (16): from the partition's
  ``leader-epoch-checkpoint`` (``log/epochs.py``) and the slot's log end;
  a leader's answer only.
- FETCH v1: a consumer's (``replica_id`` -1) is a v0 fetch in v1's answer
  (below the high watermark); a debugging consumer's (-2) the same, served by
  a follower too, below its own view of the high watermark; a follower's
  reads up to the log end but never past the end of the leader epoch that
  holds its offset, tells the leader's
  writer where the follower is (OP_FOLLOWER_POS, which moves the ISR and
  the high watermark), and is parked like any long poll.
- METADATA v1: leaders, epochs, replicas and ISR from the partition table,
  the brokers from the peers table.

A partition with replicas across log dirs is ``hb-logdirs``' alone (its
LEADER_AND_ISR, STOP_REPLICA: INVALID_REQUEST; a follower's FETCH v1:
NOT_LEADER_FOR_PARTITION); METADATA v1 shows it as a plain partition.

Access control is issue 38's: today a LEADER_AND_ISR from any client that
names the current controller and epoch is taken (docs/cluster.md).
"""

from __future__ import annotations

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log.epochs import LeaderEpochCache
from hostbroker.log.segments import fetch_range, validate_topic_name
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.api import ApiKey
from hostbroker.protocol.bodies import MetadataBroker
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.shm.peers import PeersTable
from hostbroker.workers import envelopes as env
from hostbroker.workers.answers import consumer_end
from hostbroker.workers.replica_slots import create_replica

# (api key, version) of every request this module serves
REPLICATION_REQUESTS = frozenset(rproto.REPLICATION_REQUEST_TYPES)
_EPOCH_CACHES_MAX = 4096


class Replication:
    """Mixin of :class:`HandlerWorker`: the replication requests."""

    tls_answers = None  # METADATA v0 of ssl:// clients (handler.py), None without such a listener

    def _init_replication(self) -> None:
        name = getattr(self.plan, "peers_name", None)
        self.peers: PeersTable | None = None
        if name:
            self.peers = PeersTable.attach(name)
        name = getattr(self.plan, "isr_commits_name", None)
        self.isr_commits = ptable.IsrCommitTable.attach(name) if name else None
        self.broker_id = self.config["broker.id"]
        self.cluster_mode = bool(self.config["zookeeper.connect"].strip())
        # slot -> ((topic, partition, epoch_start, leader_epoch), cache): a partition's
        # leader-epoch-checkpoint as last loaded
        self.epoch_caches: dict[int, tuple] = {}

    def _replication_request(self, p, conn_id, seq, corr, header, request) -> None:
        key = header.api_key
        if key == ApiKey.LEADER_AND_ISR:
            self._leader_and_isr(p, conn_id, seq, corr, request)
        elif key == ApiKey.STOP_REPLICA:
            self._stop_replica(p, conn_id, seq, corr, request)
        elif key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            self._reply(p, conn_id, seq, corr, self._offset_for_leader_epoch(request))
        elif key == ApiKey.FETCH:
            if request.from_follower:
                self._report_positions(request)
            self._fetch(p, conn_id, seq, corr, request)  # (handler_fetch answers by version)
        elif key == ApiKey.METADATA:
            self._reply(p, conn_id, seq, corr,
                        self._metadata_v1(request, self._describes(p, conn_id),
                                          self._over_tls(p, conn_id)))

    # -- the controller's requests ----------------------------------------------
    def _take_controller_epoch(self, controller_id: int, controller_epoch: int) -> ErrorCode:
        """Take the controller's epoch (admin lock held): STALE_CONTROLLER_EPOCH
        below the highest seen, REPLICA_NOT_AVAILABLE on a broker with no
        replication; in cluster mode CONTROLLER_NOT_CONFIRMED unless ZooKeeper
        (as this broker's registrar published it, ``shm/peers.py``) names this
        controller: an epoch above ``/controller_epoch``, or at it from another
        broker than ``/controller``, changes nothing (and asks the registrar to
        read ZooKeeper again). Else NONE and the epoch is the highest."""
        peers = self.peers
        if peers is None:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if controller_epoch < peers.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if self.cluster_mode:
            zk = peers.zk_controller
            if zk is None or controller_epoch > zk[0] or (
                    controller_epoch == zk[0] and controller_id != zk[1]):
                peers.note_unconfirmed()
                return ErrorCode.CONTROLLER_NOT_CONFIRMED
        peers.set_controller_epoch(controller_epoch)
        peers.set_controller_id(controller_id)
        return ErrorCode.NONE

    def _refused(self, code: ErrorCode, results: list) -> tuple:
        """The partitions of a controller request refused whole; a stale one's end
        with ``("", highest controller epoch seen)`` (docs/spec/protocol.md)."""
        parts = [rproto.PartitionError(t, pt, code) for t, pt, _ in results]
        if code == ErrorCode.STALE_CONTROLLER_EPOCH:
            parts.append(rproto.PartitionError("", self.peers.controller_epoch, code))
        return tuple(parts)

    def _controller_answer(self, p, conn_id, seq, corr, key, cls, results: list,
                           states: list) -> None:
        """Send each ``(index, slot, owner, state)`` of ``states`` to its writer
        as an OP_REPLICA_STATE; answer ``cls(error, partitions)`` once every
        writer has (``results[index]`` is a ``[topic, partition, error]``). A
        writer that took a changed topic config says so: the table's generation
        is then bumped, so every handler reads the partitions' configs again."""
        left = [len(states)]
        altered = [False]

        def finish() -> None:
            if altered[0]:
                try:
                    with self._admin():
                        self.table.bump_generation()
                except HostbrokerError:
                    self.bump_owed = True  # the admin lock is busy: retried every loop turn
            self._reply(p, conn_id, seq, corr, cls(ErrorCode.NONE, tuple(
                rproto.PartitionError(*r) for r in results)))

        def done(index: int):
            def respond(pending, failed: bool = False) -> None:
                got = pending.results[-1] if pending.results else {}
                code = got.get("error", ErrorCode.UNKNOWN) if isinstance(got, dict) else None
                altered[0] = altered[0] or (isinstance(got, dict) and got.get("altered") is True)
                if failed or not isinstance(code, int) or code not in ErrorCode._value2member_map_:
                    code = ErrorCode.UNKNOWN
                results[index][2] = code
                left[0] -= 1
                if left[0] == 0:
                    finish()
            return respond

        if not states:
            finish()
            return
        for index, slot, owner, state in states:
            pending = self._new_pending(p, conn_id, seq, corr, key, [], done(index))
            self._to_writer(pending, owner, *env.encode_replica_state(pending.token, state))

    def _leader_and_isr(self, p, conn_id, seq, corr, request) -> None:
        results = [[x.topic, x.partition, ErrorCode.NONE] for x in request.partitions]
        configs: dict[str, dict[str, str]] = {
            entry.topic: {c.key: c.value for c in entry.configs}
            for entry in request.topic_configs}
        states = []
        with self._admin():
            code = self._take_controller_epoch(request.controller_id, request.controller_epoch)
            if code:
                self._reply(p, conn_id, seq, corr, rproto.LeaderAndIsrResponse(
                    code, self._refused(code, results)))
                return
            refused = self.peers.put_all(
                (b.broker_id, b.host or "", b.port, b.unix_path or "",
                 getattr(b, "ssl_host", None) or "", getattr(b, "ssl_port", -1))
                for b in request.brokers)
            if refused:
                self.count(procs.ERRORS, refused)  # (a full table: those brokers stay unknown)
            self.view.refresh()
            counts: list = [None]  # partitions per log dir, once one is created
            for index, part in enumerate(request.partitions):
                code, slot = self._replica_slot(part, configs, counts)
                if code:
                    results[index][2] = code
                    continue
                if slot is None:
                    continue  # not a replica here: nothing to do
                s = self.table.read(slot)
                role = ("leader" if part.leader == self.broker_id
                        else "stopped" if part.leader == rproto.NO_LEADER else "follower")
                states.append((index, slot, s.owner, {
                    "slot": slot, "topic": part.topic, "partition": part.partition,
                    "role": role, "leader": part.leader, "leader_epoch": part.leader_epoch,
                    "isr": list(part.isr), "isr_version": part.zk_version,
                    "replicas": list(part.replicas), "delete": False,
                    # the topic's whole config; None (not in the request): keep the replica's
                    "config": configs.get(part.topic)}))
            if counts[0] is not None:
                self.table.bump_generation()
                self.view.refresh()
        self._controller_answer(p, conn_id, seq, corr, ApiKey.LEADER_AND_ISR,
                                rproto.LeaderAndIsrResponse, results, states)

    def _replica_slot(self, part, configs: dict, counts_box: list) -> tuple[ErrorCode, int | None]:
        """The slot of a LEADER_AND_ISR partition, created (admin lock held) if
        this broker is among its replicas and has none; ``(error, None)`` when
        it cannot be, ``(NONE, None)`` when this broker is no replica of it.
        ``counts_box[0]``: partitions per log dir, once a partition was created."""
        if self.broker_id not in part.replicas:
            return ErrorCode.NONE, None
        try:
            validate_topic_name(part.topic)
        except HostbrokerError:
            return ErrorCode.INVALID_TOPIC, None
        if part.partition >= self.config["max.partitions.per.topic"]:
            return ErrorCode.INVALID_REQUEST, None
        if len(part.replicas) > ptable.MAX_REPLICAS:
            return ErrorCode.INVALID_REQUEST, None
        slot = self.view.slot(part.topic, part.partition)
        if slot is not None:
            if slot in self.view.dirs_placed:
                return ErrorCode.INVALID_REQUEST, None  # hb-logdirs' alone (docs/storage.md)
            s = self.table.read(slot)
            if s.state == ptable.OFFLINE:
                return ErrorCode.STORAGE_ERROR, None
            if s.role == ptable.ROLE_PLAIN:
                # an unreplicated topic of that name holds it: it is not made a replica
                return ErrorCode.INVALID_REQUEST, None
            if s.state != ptable.ONLINE:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            return ErrorCode.NONE, slot
        overrides = configs.get(part.topic) or {}
        try:
            self.defaults.with_overrides(overrides)
        except HostbrokerError:
            return ErrorCode.INVALID_CONFIG, None
        if counts_box[0] is None:
            counts = [0] * self.plan.num_writers
            for _, s in self.table.scan():
                counts[s.owner] += 1
            counts_box[0] = counts
        counts = counts_box[0]
        offline = self.table.offline_log_dirs()
        usable = [w for w in range(self.plan.num_writers) if w not in offline]
        if not usable:
            return ErrorCode.STORAGE_ERROR, None
        w = min(usable, key=lambda i: (counts[i], i))
        try:
            slot = create_replica(self.table, self.isr_commits, self.plan.log_dirs[w], w,
                                  part.topic, part.partition, part.replicas, overrides,
                                  self.defaults, leader=part.leader,
                                  leader_epoch=part.leader_epoch)
        except HostbrokerError as e:
            return e.code, None
        counts[w] += 1
        return ErrorCode.NONE, slot

    def _stop_replica(self, p, conn_id, seq, corr, request) -> None:
        results = [[x.topic, x.partition, ErrorCode.NONE] for x in request.partitions]
        states = []
        with self._admin():
            code = self._take_controller_epoch(request.controller_id, request.controller_epoch)
            if code:
                self._reply(p, conn_id, seq, corr, rproto.StopReplicaResponse(
                    code, self._refused(code, results)))
                return
            self.view.refresh()
            for index, part in enumerate(request.partitions):
                slot = self.view.slot(part.topic, part.partition)
                if slot is None:
                    continue  # none here: stopped (or deleted) already
                s = self.table.read(slot)
                if s.role == ptable.ROLE_PLAIN or slot in self.view.dirs_placed:
                    results[index][2] = ErrorCode.INVALID_REQUEST  # not a replica, or hb-logdirs'
                    continue
                states.append((index, slot, s.owner, {
                    "slot": slot, "topic": s.name, "partition": s.partition,
                    "role": "stopped", "leader": -1, "leader_epoch": s.leader_epoch,
                    "isr": list(s.isr_ids), "isr_version": s.isr_version,
                    "replicas": list(s.replicas), "delete": bool(request.delete_partitions),
                    "config": None}))
        self._controller_answer(p, conn_id, seq, corr, ApiKey.STOP_REPLICA,
                                rproto.StopReplicaResponse, results, states)

    # -- leader epochs ------------------------------------------------------
    def _epochs(self, slot: int, s) -> LeaderEpochCache:
        """The partition's leader-epoch-checkpoint, loaded again when its
        leadership moved; raises HostbrokerError / OSError / ValueError for
        a file that cannot be read or is not one."""
        key = (s.name, s.partition, s.epoch_start, s.leader_epoch)
        cached = self.epoch_caches.get(slot)
        if cached is not None and cached[0] == key:
            return cached[1]
        cache = LeaderEpochCache.load(self.view.partition_path(s))
        if len(self.epoch_caches) >= _EPOCH_CACHES_MAX:
            self.epoch_caches.clear()
        self.epoch_caches[slot] = (key, cache)
        return cache

    def _leader_slot(self, topic: str, partition: int, leader_epoch: int = -1):
        """``(error, slot, record)`` of a partition this broker leads, its
        ``leader_epoch`` (unless -1) checked against the slot's."""
        slot = self.view.slot(topic, partition)
        if slot is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, None
        s = self.table.read(slot)
        if s.state == ptable.OFFLINE:
            return ErrorCode.STORAGE_ERROR, None, None
        if s.state not in (ptable.ONLINE, ptable.CREATING):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, None
        if s.role != ptable.ROLE_LEADER:
            return ErrorCode.NOT_LEADER_FOR_PARTITION, None, None
        if leader_epoch != rproto.NO_EPOCH:
            if leader_epoch < s.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, None, None
            if leader_epoch > s.leader_epoch:
                return ErrorCode.NOT_LEADER_FOR_PARTITION, None, None
        return ErrorCode.NONE, slot, s

    def _offset_for_leader_epoch(self, request) -> rproto.OffsetForLeaderEpochResponse:
        self.view.refresh()
        out = []
        for part in request.partitions:
            code, slot, s = self._leader_slot(part.topic, part.partition)
            epoch, end = -1, -1
            if not code:
                try:
                    epoch, end = self._epochs(slot, s).end_offset_for(part.leader_epoch,
                                                                      s.end_offset)
                except (HostbrokerError, OSError, ValueError):
                    code = ErrorCode.STORAGE_ERROR
            out.append(rproto.OffsetForLeaderEpochResult(part.topic, part.partition, code,
                                                         epoch, end))
        return rproto.OffsetForLeaderEpochResponse(tuple(out))

    # -- FETCH v1 -------------------------------------------------------------
    def _fetch_v1_parts(self, request, budget: int) -> tuple[int, list]:
        """``(bytes of data, [(topic, partition, error, high watermark, log
        end, data epoch, FilePiece or None)])`` of a FETCH v1."""
        view = self.view
        view.refresh()
        follower = request.from_follower
        debug = request.replica_id == rproto.DEBUG_REPLICA_ID
        total = 0
        out = []
        for part in request.partitions:
            found = (self._follower_part(part, request.replica_id, budget - total) if follower
                     else self._consumer_part(part, budget - total, debug))
            if found[6] is not None:
                total += found[6].length
            out.append(found)
        return total, out

    def _consumer_part(self, part, left: int, debug: bool = False) -> tuple:
        code, slot, s = ErrorCode.NONE, self.view.slot(part.topic, part.partition), None
        hw = -1
        if part.max_bytes <= 0:
            return part.topic, part.partition, ErrorCode.INVALID_FETCH_SIZE, -1, -1, -1, None
        if slot is None:
            return (part.topic, part.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    -1, -1, -1, None)
        s = self.table.read(slot)
        if s.state == ptable.OFFLINE:
            return part.topic, part.partition, ErrorCode.STORAGE_ERROR, -1, -1, -1, None
        if s.state not in (ptable.ONLINE, ptable.CREATING):
            return (part.topic, part.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    -1, -1, -1, None)
        code, hw = consumer_end(s, any_replica=debug)
        if not code and s.role != ptable.ROLE_PLAIN and part.leader_epoch != rproto.NO_EPOCH:
            if part.leader_epoch < s.leader_epoch:
                code = ErrorCode.FENCED_LEADER_EPOCH
            elif part.leader_epoch > s.leader_epoch:
                code = ErrorCode.NOT_LEADER_FOR_PARTITION
        if code:
            return part.topic, part.partition, code, -1, -1, -1, None
        code, piece = self._range(slot, s, part.offset, min(part.max_bytes, left), hw,
                                  s.end_offset)
        return part.topic, part.partition, code, hw, hw, -1, piece

    def _follower_checked(self, part, replica_id: int):
        """``(error, slot, record)`` of a partition a follower fetches: one this
        broker leads, in the epoch the follower names (unless -1), of which
        ``replica_id`` is a replica other than this broker."""
        code, slot, s = self._leader_slot(part.topic, part.partition, part.leader_epoch)
        if not code and slot in self.view.dirs_placed:
            code = ErrorCode.NOT_LEADER_FOR_PARTITION  # (its followers copy the files)
        elif not code and (replica_id == self.broker_id or replica_id not in s.replicas):
            code = ErrorCode.REPLICA_NOT_AVAILABLE  # only a replica of it may move its watermark
        return code, slot, s

    def _report_positions(self, request) -> None:
        """Tell the leader's writer where a follower is, once per FETCH when it
        comes (not when a parked one is looked at again): it holds everything
        below its fetch offset (OP_FOLLOWER_POS; the writer moves the ISR and
        the high watermark). Only a fetch that names the leader epoch counts: a
        follower that names none has not shown that it cut its log where it
        parted from ours, so its offset says nothing of what it holds."""
        self.view.refresh()
        for part in request.partitions:
            if part.leader_epoch == rproto.NO_EPOCH:
                continue
            code, slot, s = self._follower_checked(part, request.replica_id)
            if not code and s.start_offset <= part.offset <= s.end_offset:
                self.appends[s.owner].send(env.encode_follower_pos(env.FollowerPos(
                    slot, part.topic, part.partition, request.replica_id, s.leader_epoch,
                    part.offset)))
                self.dirty_writers.add(s.owner)

    def _follower_part(self, part, replica_id: int, left: int) -> tuple:
        topic, partition = part.topic, part.partition
        if part.max_bytes <= 0:
            return topic, partition, ErrorCode.INVALID_FETCH_SIZE, -1, -1, -1, None
        code, slot, s = self._follower_checked(part, replica_id)
        if code:
            return topic, partition, code, -1, -1, -1, None
        hw, leo = s.readable_end, s.end_offset
        # never past the end of the epoch that wrote ``offset``
        data_epoch, end = s.leader_epoch, leo
        if part.offset < s.epoch_start:
            try:
                data_epoch, end = self._epochs(slot, s).epoch_at(part.offset, leo)
            except (HostbrokerError, OSError, ValueError):
                return topic, partition, ErrorCode.STORAGE_ERROR, hw, leo, -1, None
            if end is None or end < 0 or end > leo:
                end = leo
        code, piece = self._range(slot, s, part.offset, min(part.max_bytes, left), end, leo)
        return topic, partition, code, hw, leo, data_epoch if piece else -1, piece

    def _range(self, slot: int, s, offset: int, max_bytes: int, end: int,
               log_end: int) -> tuple[ErrorCode, env.FilePiece | None]:
        """The file range of at most ``max_bytes`` (none when 0 or less) from
        ``offset``, ending at ``end`` (at most the log end ``log_end``): an
        offset in ``[end, log_end]`` gets nothing yet, one outside the log
        OFFSET_OUT_OF_RANGE."""
        view = self.view
        try:
            bases = view.segment_bases(slot, s)
            if end <= offset <= log_end:
                if not bases or offset < bases[0]:
                    fetch_range(bases, log_end, offset, 1)  # (raises: before the start)
                return ErrorCode.NONE, None
            index, position, length = fetch_range(bases, log_end, offset,
                                                  max(1, min(max_bytes, end - offset)))
        except HostbrokerError as e:
            return e.code, None
        except OSError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        if max_bytes <= 0 or length <= 0:
            return ErrorCode.NONE, None
        return ErrorCode.NONE, env.FilePiece(view.segment_path(slot, s, bases[index]),
                                             position, length)

    def _answer_fetch_v1(self, p, conn_id, seq, corr, request, force: bool) -> bool:
        """Answer a FETCH v1 if it may be answered now; True if it must wait."""
        total, parts = self._fetch_v1_parts(request, self.config["fetch.max.bytes"])
        if (not force and request.max_wait_ms > 0 and total < request.min_bytes
                and any(part[2] == ErrorCode.NONE for part in parts)):
            return True
        try:
            headers = rproto.encode_fetch_v1_response_parts(
                corr, [(*part[:6], part[6].length if part[6] else 0) for part in parts])
            if sum(map(len, headers)) > self.max_response_bytes:
                raise ValueError("fetch answer headers over response.max.bytes")
        except ValueError:
            self._fail(p, conn_id, seq, corr, ErrorCode.INVALID_REQUEST)
            return False
        pieces: list = [headers[0]]
        for part, head in zip(parts, headers[1:]):
            if part[6] is not None:
                pieces.append(part[6])
            if head:
                pieces.append(head)
        self.count(procs.BYTES_OUT, total)
        slot = self.view.slot
        error = self.stats.fetched(parts, [(None if part[2] else slot(part[0], part[1]), None)
                                           for part in parts], 6)
        self._respond(p, conn_id, seq, pieces, env.RESP_FETCH_V1, error)
        return False

    # -- METADATA ---------------------------------------------------------------
    def _over_tls(self, p: int, conn_id: int) -> bool:
        """Whether the connection came to an ``ssl://`` listener."""
        if self.tls_answers is None:
            return False  # (this broker has none)
        known = self.identities[p].get(conn_id)
        return known is not None and known.identity.tls

    def _metadata_answers(self, p: int, conn_id: int):
        """The METADATA v0 answers for the connection's listener: its ``ssl://``
        clients are sent to this broker's ``ssl://`` listener, the others to
        its tcp:// and unix:// ones (docs/spec/protocol.md)."""
        if self._over_tls(p, conn_id):
            return self.tls_answers
        return self.answers

    def _metadata_v1(self, request, describe=None, tls: bool = False
                     ) -> rproto.MetadataResponseV1:
        """Raises INVALID_REQUEST as soon as the answer grows past
        ``response.max.bytes`` (as version 0 does). ``describe`` (the
        authorizer on): whether the principal may describe a topic; a named
        topic it may not is answered TOPIC_AUTHORIZATION_FAILED with no
        partitions, a listing of every topic leaves it out (as version 0).
        ``tls``: a client of an ``ssl://`` listener, given every broker's
        ``ssl://`` host and port; any other client their tcp:// host and port
        and Unix path. The peers table holds every kind a broker registered
        (a LEADER_AND_ISR of version 1 names them all): a broker known without
        a listener of the client's kind is left out, and a partition it leads
        is answered LEADER_NOT_AVAILABLE with leader -1 (as Kafka answers)."""
        view = self.view
        view.refresh()
        answers = self.tls_answers if tls and self.tls_answers is not None else self.answers
        peers = self.peers.all() if self.peers is not None else []
        me = answers.brokers[0]
        brokers, unreachable = [me], set()
        for x in peers:
            if x.broker_id == self.broker_id:
                continue
            if tls:
                broker = (MetadataBroker(x.broker_id, x.ssl_host, x.ssl_port, None)
                          if x.ssl_host and 0 < x.ssl_port else None)
            else:
                broker = (MetadataBroker(x.broker_id, x.host or None, x.port, x.unix or None)
                          if (x.host and 0 < x.port) or x.unix else None)
            if broker is None:
                unreachable.add(x.broker_id)
            else:
                brokers.append(broker)
        controller = self.peers.controller_id if self.peers is not None else -1
        names = tuple(dict.fromkeys(request.topics))
        if not names:
            names = tuple(filter(describe, sorted(view.topics)) if describe is not None
                          else sorted(view.topics))
        size = 0
        topics = []
        for name in names:
            slots = view.topics.get(name)
            size += 2 + len(name.encode("utf-8", "replace")) + 6
            if describe is not None and not describe(name):
                topics.append(rproto.MetadataTopicV1(
                    name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, ()))
                continue
            if slots is None:
                topics.append(rproto.MetadataTopicV1(
                    name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()))
                continue
            parts = []
            for partition, slot in enumerate(slots):
                if slot is None:
                    continue
                placed = slot in view.dirs_placed
                if placed:
                    slot = view.slot(name, partition)  # (its leader's, as it is now)
                s = self.table.read(slot)
                code = ErrorCode.STORAGE_ERROR if s.state == ptable.OFFLINE else ErrorCode.NONE
                log_dir = answers.log_dirs[s.owner]
                if placed or s.role == ptable.ROLE_PLAIN:
                    # replicas across log dirs too: one partition of this broker
                    leader = (-1 if placed and s.role != ptable.ROLE_LEADER else self.broker_id)
                    part = rproto.MetadataPartitionV1(
                        partition, code, leader, s.leader_epoch if placed else -1,
                        (self.broker_id,), (self.broker_id,), s.start_offset, s.readable_end,
                        log_dir)
                else:
                    leader = s.leader
                    if leader in unreachable and code == ErrorCode.NONE:
                        leader, code = -1, ErrorCode.LEADER_NOT_AVAILABLE
                    part = rproto.MetadataPartitionV1(
                        partition, code, leader, s.leader_epoch, s.replicas, s.isr_ids,
                        s.start_offset, s.readable_end, log_dir)
                parts.append(part)
                size += 46 + 4 * (len(part.replicas) + len(part.isr)) + len(log_dir.encode())
                if size > self.max_response_bytes:
                    raise HostbrokerError("METADATA answer over response.max.bytes",
                                          ErrorCode.INVALID_REQUEST)
            topics.append(rproto.MetadataTopicV1(name, ErrorCode.NONE, tuple(parts)))
        return rproto.MetadataResponseV1(self.broker_id, controller, tuple(brokers),
                                         tuple(topics))
