"""Replicas across log dirs, the request handler's side (part of ``hb-handler-N``).

Mixed into :class:`~hostbroker.workers.handler.HandlerWorker`; serves what
``hostbroker.protocol.logdirs`` decodes (docs/spec/protocol.md, "Replicas
across log dirs"):

- METADATA v2: version 1's answer (``handler_replication._metadata_v1``),
  each partition with its replicas by log dir id, then this broker's log
  dirs. A partition whose replicas are placed on log dirs takes them from
  its serving slot (``TopicView.slot``): ``leader_dir`` is its leader's dir
  (-1: no online replica leads), ``replica_dirs`` and ``isr_dirs`` the slot's replica ids
  and committed ISR, ``target_dirs`` a reassignment's target as the
  replication state file (``<log dir>/log-dirs-state``) holds it. Any other
  partition is on its own dir alone. The dirs come from the log dir table
  (``shm/logdirs.py``; a dir without an id is listed under -1) and the
  state file, which also names the dirs that are gone (``missing``).
- ALTER_REPLICA_DIRS and LOG_DIR_ADMIN, and the creation (replication factor
  2 or more, ``handler_topics.py``) and deletion of topics placed on log
  dirs: forwarded to ``hb-logdirs`` as an OP_LOCAL_ADMIN on the ``dreq``
  ring and answered when its answer comes back on ``dans`` (a pending
  request, as a writer's or the coordinator's answer is awaited). The
  handler holds ``hb-logdirs``' rings, bell and epoch after the
  coordinator's, at :attr:`LogDirsRequests.logdirs_peer`, so a replaced
  ``hb-logdirs`` fails what it had not answered.

Reads the partition table and the log dir table lock-free and the state
file copies of the online log dirs (never an offline one's: a failed disk
can hang the handler's loop), read again only when a copy changed: the head
of each for its ``seq``, and only the newest whole (hostile input: bounded,
never through a link, decoded by ``replication/localstate.py``). Writes
nothing shared.
"""

from __future__ import annotations

import os
import re
import sys
import time

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log.files import read_file
from hostbroker.protocol import logdirs as lproto
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.api import ApiKey
from hostbroker.replication import localstate
from hostbroker.shm import partitions as ptable
from hostbroker.shm.logdirs import LD_ONLINE, LogDirTable, shown_state
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.topicview import log_dir_table

# (api key, version) of the requests this module answers or forwards
# (CREATE_TOPIC v1 is handler_topics', which forwards a replicated one here)
LOGDIRS_REQUESTS = frozenset(((ApiKey.METADATA, lproto.METADATA_V2),
                              (ApiKey.ALTER_REPLICA_DIRS, lproto.ALTER_REPLICA_DIRS_V0),
                              (ApiKey.LOG_DIR_ADMIN, lproto.LOG_DIR_ADMIN_V0)))
_NO_LOGDIRS = ("replicas across log dirs need a standalone broker with two or more log dirs "
               "(this one has {})")
# an auto-create's answer (asked for, or refused) is given again for this long
# without a look; the next produce after it looks again (and asks again)
_AUTO_CREATE_RESEND_MS = 1000
_AUTO_CREATE_MAX = 1024  # topics being auto-created at once (per handler)
_REFUSAL_LOG_MS = 60_000  # an auto-create refused for its replication factor: one line a minute


def answer_fields(got) -> tuple[ErrorCode, str | None, list]:
    """``(error, message, results)`` of an ``hb-logdirs`` answer (a dict, as
    ``env.decode_json`` gives it, or None when none came), each checked:
    UNKNOWN for what is not an answer, a result that is not ``[topic,
    partition, code]`` left out."""
    if not isinstance(got, dict):
        return ErrorCode.UNKNOWN, "hb-logdirs restarted before it answered", []
    code = got.get("error")
    if type(code) is not int or code not in ErrorCode._value2member_map_:
        return ErrorCode.UNKNOWN, "hb-logdirs gave no valid answer", []
    message = got.get("message")
    if not isinstance(message, str) or not message:
        message = None  # (as a handler's own answers say nothing)
    results = []
    raw = got.get("results")
    for r in raw if isinstance(raw, list) else ():
        if (isinstance(r, list) and len(r) == 3 and isinstance(r[0], str)
                and type(r[1]) is int and -2**31 <= r[1] < 2**31
                and type(r[2]) is int and r[2] in ErrorCode._value2member_map_):
            results.append((r[0], r[1], ErrorCode(r[2])))
    return ErrorCode(code), message, results


class LogDirsRequests:
    """Mixin of :class:`HandlerWorker`: replicas across log dirs."""

    def _init_logdirs(self) -> None:
        """The log dir table, and ``hb-logdirs``' rings, bell and epoch after
        the coordinator's (call once the writers' and coordinator's are set)."""
        plan = self.plan
        # (None: none planned, ids then come from the plan)
        self.logdirs_table: LogDirTable | None = log_dir_table(plan)
        self.view.logdirs = self.logdirs_table
        self.logdirs_peer: int | None = None
        if plan.logdirs:
            self.logdirs_peer = len(self.appends)
            self.appends.append(self.sender("dreq", self.index, 0))
            self.results.append(self.receiver("dans", 0, self.index))
            self.writer_bells.append(self.waker("logdirs", 0))
            self.peer_slots.append(plan.board_slot("logdirs", 0))
        cluster = bool(self.config["zookeeper.connect"].strip())
        self.default_rf = 1 if cluster else self.config["default.replication.factor"]
        # topic -> (when, answer) of its last auto-create look, oldest first
        self.auto_creating: dict[str, tuple[int, ErrorCode]] = {}
        self.rf_refusal_logged = -_REFUSAL_LOG_MS
        self._state_seen: tuple | None = None  # what the state file copies were when read
        self._state = None  # the newest state as last read (localstate.LocalState)

    def _logdirs_request(self, p, conn_id, seq, corr, header, request) -> None:
        key = header.api_key
        if key == ApiKey.METADATA:
            self._reply(p, conn_id, seq, corr,
                        self._metadata_v2(request, self._describes(p, conn_id),
                                          self._over_tls(p, conn_id)))
        elif key == ApiKey.ALTER_REPLICA_DIRS:
            self._alter_replica_dirs(p, conn_id, seq, corr, request)
        elif key == ApiKey.LOG_DIR_ADMIN:
            self._log_dir_admin(p, conn_id, seq, corr, request)

    # -- forwarding to hb-logdirs -------------------------------------------------
    def _no_logdirs(self) -> str:
        return _NO_LOGDIRS.format(
            "ZooKeeper" if self.config["zookeeper.connect"].strip()
            else f"{self.plan.num_writers} log dir" + "s" * (self.plan.num_writers != 1))

    def _to_logdirs(self, p, conn_id, seq, corr, key: int, doc: dict, answer) -> None:
        """Send ``doc`` to ``hb-logdirs`` (OP_LOCAL_ADMIN) and reply with
        ``answer(error, message, results)`` once it has answered (or UNKNOWN
        if it was replaced before)."""
        def respond(pending, failed: bool = False) -> None:
            got = pending.results[-1] if pending.results and not failed else None
            self._reply(pending.processor, pending.conn_id, pending.seq,
                        pending.correlation_id, answer(*answer_fields(got)))

        pending = self._new_pending(p, conn_id, seq, corr, key, [], respond)
        self._to_writer(pending, self.logdirs_peer,
                        *env.encode_local_admin(pending.token, doc))

    def _alter_replica_dirs(self, p, conn_id, seq, corr, request) -> None:
        def answer(code, message, results):
            codes = {(t, pt): c for t, pt, c in results}
            return lproto.AlterReplicaDirsResponse(code, message, tuple(
                rproto.PartitionError(x.topic, x.partition, codes.get(
                    (x.topic, x.partition), code or ErrorCode.UNKNOWN))
                for x in request.partitions))

        if self.logdirs_peer is None:
            self._reply(p, conn_id, seq, corr, answer(
                ErrorCode.INVALID_REQUEST, self._no_logdirs(), []))
            return
        doc = {"op": "alter", "partitions": [[x.topic, x.partition, list(x.dir_ids)]
                                             for x in request.partitions]}
        self._to_logdirs(p, conn_id, seq, corr, ApiKey.ALTER_REPLICA_DIRS, doc, answer)

    def _log_dir_admin(self, p, conn_id, seq, corr, request) -> None:
        def answer(code, message, _results):
            return lproto.LogDirAdminResponse(code, message)

        if self.logdirs_peer is None:
            self._reply(p, conn_id, seq, corr, answer(
                ErrorCode.INVALID_REQUEST, self._no_logdirs(), []))
            return
        if request.action == lproto.ACTION_ONLINE:
            doc = {"op": "online", "path": request.path}
        else:
            doc = {"op": "forget", "dir_id": request.dir_id}
        self._to_logdirs(p, conn_id, seq, corr, ApiKey.LOG_DIR_ADMIN, doc, answer)

    # -- creation and deletion ------------------------------------------------
    def _usable_dirs(self) -> list[int]:
        """Writer indices of the log dirs a new replica may go to: online in
        the log dir table (an id known) and not flagged offline by their writer."""
        offline = self.table.offline_log_dirs()
        table = self.logdirs_table
        return [w for w in range(self.plan.num_writers) if w not in offline and (
            table is None or (table.state(w) == LD_ONLINE and table.dir_id(w) > 0))]

    def _create_replicated(self, p, conn_id, seq, corr, topic: str, partitions: int, rf: int,
                           overrides: dict, answer) -> None:
        """Create ``topic`` with ``rf`` (2 or more) replicas per partition
        through ``hb-logdirs`` (the caller checked the name, the count and the
        config, and that the topic does not exist)."""
        if self.logdirs_peer is None:
            self._reply(p, conn_id, seq, corr, answer(
                ErrorCode.INVALID_REPLICATION_FACTOR, self._rf_refusal(rf)))
            return
        doc = {"op": "create", "topic": topic, "partitions": partitions, "rf": rf,
               "config": overrides}
        self._to_logdirs(p, conn_id, seq, corr, ApiKey.CREATE_TOPIC, doc,
                         lambda code, message, _results: answer(code, message))

    def _rf_refusal(self, rf: int) -> str:
        usable = self._usable_dirs()
        down = self.plan.num_writers - len(usable)
        return (f"replication factor {rf} needs {rf} usable log dirs; the broker has "
                f"{len(usable)}" + (f" ({down} offline)" if down else ""))

    def _auto_create_answered(self, topic: str) -> ErrorCode | None:
        """What a produce to the unknown ``topic`` is answered without a look
        (``default.replication.factor`` 2 or more): the answer of its last look
        while under :data:`_AUTO_CREATE_RESEND_MS` old, so that a produce of
        many entries for one new topic takes the admin lock and scans the
        partition table once, not once per entry (a refusal for too few
        usable dirs only while they are still too few); LEADER_NOT_AVAILABLE while
        :data:`_AUTO_CREATE_MAX` other topics are being asked for; None: look
        (:meth:`_auto_create_replicated`)."""
        now = time.monotonic_ns() // 1_000_000  # (the wall clock may step back)
        creating = self.auto_creating
        while creating:  # (oldest first: drop the answers too old to give)
            oldest = next(iter(creating))
            if now - creating[oldest][0] < _AUTO_CREATE_RESEND_MS:
                break
            del creating[oldest]
        found = creating.get(topic)
        if found is not None:
            if (found[1] != ErrorCode.INVALID_REPLICATION_FACTOR or self.logdirs_peer is None
                    or self.default_rf > len(self._usable_dirs())):
                return found[1]
            del creating[topic]  # (refused, and the dirs are back since: look again)
            return None
        if len(creating) >= _AUTO_CREATE_MAX:
            return ErrorCode.LEADER_NOT_AVAILABLE  # (retriable: asked for in a while)
        return None

    def _auto_create_replicated(self, topic: str) -> ErrorCode:
        """A produce to the unknown ``topic`` with ``default.replication.factor``
        2 or more (the caller holds the admin lock and found no such topic):
        ask ``hb-logdirs`` to create it and answer LEADER_NOT_AVAILABLE, which
        the producer retries; INVALID_REPLICATION_FACTOR while too few log dirs
        are usable. The answer is remembered (:meth:`_auto_create_answered`):
        a topic not there yet is asked for again at most once per
        :data:`_AUTO_CREATE_RESEND_MS`."""
        rf = self.default_rf
        now = now_ms()
        if self.logdirs_peer is None or rf > len(self._usable_dirs()):
            if now - self.rf_refusal_logged >= _REFUSAL_LOG_MS:
                self.rf_refusal_logged = now
                print(f"hostbroker: {self.name}: topic {topic} not created: "
                      f"{self._rf_refusal(rf)} (default.replication.factor)",
                      file=sys.stderr, flush=True)
            code = ErrorCode.INVALID_REPLICATION_FACTOR
        else:
            # nobody waits for its answer (no pending under its token): the
            # producer's retries find the topic once it is there
            w = self.logdirs_peer
            self.appends[w].send(*env.encode_local_admin(next(self.tokens), {
                "op": "create", "topic": topic, "partitions": self.config["num.partitions"],
                "rf": rf, "config": {}}))
            self.dirty_writers.add(w)
            code = ErrorCode.LEADER_NOT_AVAILABLE
        self.auto_creating.pop(topic, None)
        self.auto_creating[topic] = (time.monotonic_ns() // 1_000_000, code)
        return code

    def _delete_replicated(self, p, conn_id, seq, corr, topic: str, answer) -> None:
        """Delete ``topic``, whose replicas are placed on log dirs, through
        ``hb-logdirs``; ``answer(error, message)`` once it has."""
        self._to_logdirs(p, conn_id, seq, corr, ApiKey.DELETE_TOPIC,
                         {"op": "delete", "topic": topic},
                         lambda code, message, _results: answer(code, message))

    # -- METADATA v2 --------------------------------------------------------------
    def _dir_ids(self) -> list[int]:
        """Each writer's log dir id (-1: unknown)."""
        table = self.logdirs_table
        if table is not None:
            return [table.dir_id(w) for w in range(self.plan.num_writers)]
        ids = list(getattr(self.plan, "dir_ids", None) or ())
        return (ids + [-1] * self.plan.num_writers)[:self.plan.num_writers]

    def _metadata_v2(self, request, describe=None, tls: bool = False) -> lproto.MetadataResponseV2:
        """Raises INVALID_REQUEST as soon as the answer grows past
        ``response.max.bytes`` (as versions 0 and 1 do)."""
        v1 = self._metadata_v1(request, describe, tls)  # (its topics filtered as v1's)
        view = self.view
        ids = self._dir_ids()
        state = self._replication_state()
        size = 0
        topics = []
        for topic in v1.topics:
            parts = []
            for part in topic.partitions:
                slot = view.slot(topic.topic, part.partition)
                s = self.table.read(slot) if slot is not None else None
                if s is None or s.name != topic.topic or s.partition != part.partition:
                    dirs = (-1, (), (), ())  # (freed meanwhile)
                elif slot in view.dirs_placed:
                    replicas = s.replicas
                    # (an offline slot that led leads no more: with no replica
                    # online, the serving slot is any one of them)
                    leader = (s.leader if s.role == ptable.ROLE_LEADER and s.leader in replicas
                              and s.state == ptable.ONLINE else -1)
                    dirs = (leader, replicas, s.isr_ids,
                            _target(state, topic.topic, part.partition))
                else:
                    own = ids[s.owner] if 0 <= s.owner < len(ids) else -1
                    dirs = (own, (own,), (own,), ()) if own > 0 else (-1, (), (), ())
                parts.append(lproto.MetadataPartitionV2(
                    part.partition, part.error_code, part.leader, part.leader_epoch,
                    part.replicas, part.isr, part.log_start_offset, part.high_watermark,
                    part.log_dir, *dirs))
                size += 4 + 4 * (len(dirs[1]) + len(dirs[2]) + len(dirs[3])) + 12
            topics.append(lproto.MetadataTopicV2(topic.topic, topic.error_code, tuple(parts)))
        log_dirs = self._log_dirs_listed(ids, state)
        size += sum(7 + len((d.path or "").encode()) for d in log_dirs)
        if size > self.max_response_bytes:
            raise HostbrokerError("METADATA answer over response.max.bytes",
                                  ErrorCode.INVALID_REQUEST)
        return lproto.MetadataResponseV2(v1.broker_id, v1.controller_id, v1.brokers,
                                         tuple(topics), tuple(log_dirs))

    def _log_dirs_listed(self, ids: list[int], state) -> list:
        """METADATA v2's log dirs: each configured one, online or offline
        (``shm/logdirs.shown_state``: offline while its writer flags it), under
        its id or -1 for one without (every dir of a one-dir or cluster
        broker), then each id the state file names that no configured dir
        holds now (``missing``, at the path it was last seen at)."""
        table = self.logdirs_table
        offline = self.table.offline_log_dirs()
        out = []
        for w, dir_id in enumerate(ids):
            held = table.state(w) if table is not None else LD_ONLINE
            up = shown_state(held, w in offline) == LD_ONLINE
            out.append(lproto.MetadataLogDir(dir_id if dir_id > 0 else lproto.NO_DIR,
                                             self.plan.log_dirs[w],
                                             lproto.DIR_ONLINE if up else lproto.DIR_OFFLINE))
        known = set(ids)
        for dir_id, path in _state_dirs(state):
            if dir_id not in known:
                known.add(dir_id)
                out.append(lproto.MetadataLogDir(dir_id, path, lproto.DIR_MISSING))
        return out

    def _replication_state(self):
        """The newest replication state of the online log dirs' copies, read
        again only when a copy changed (None: none readable, or none kept).

        Only dirs online in the log dir table and not flagged offline by their
        writer are looked at: a failed disk can hang a stat, and this runs in
        the handler's loop. Of the copies, only the newest is decoded (the
        highest ``seq``, read from the head of each file; see
        :func:`peek_seq`), and the next one only if that one does not
        decode."""
        if self.logdirs_peer is None:
            return None
        table = self.logdirs_table
        offline = self.table.offline_log_dirs()
        seen = []
        paths = {}
        for w, dir_id in enumerate(self._dir_ids()):
            if dir_id <= 0 or w in offline or (
                    table is not None and table.state(w) != LD_ONLINE):
                continue
            path = os.path.join(self.plan.log_dirs[w], localstate.STATE_FILE)
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                continue
            seen.append((dir_id, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
            paths[dir_id] = path
        seen_key = tuple(seen)
        if seen_key != self._state_seen:
            self._state_seen = seen_key
            self._state = _read_newest(paths, localstate.StateLimits.of(self.config))
        return self._state


# where encode_state puts ``seq`` (its keys sorted, no spaces): after the
# ``online`` list and before ``topics``; a file name or a path in the document
# cannot hold this text, as JSON escapes every quote in a string
_SEQ_AT = re.compile(rb',"online":\[[0-9,]*\],"seq":([0-9]{1,19}),"topics":')
PEEK_BYTES = 65536  # how much of a copy is read to find its seq


def peek_seq(path: str) -> int:
    """The ``seq`` of the state file copy at ``path`` as its first
    :data:`PEEK_BYTES` bytes give it, without decoding the copy (which may be
    up to 64 MiB); -1 when not found there (a damaged copy, or one whose
    ``deleting`` list is that long). Raises OSError as ``read_file``."""
    found = _SEQ_AT.search(read_file(path, PEEK_BYTES - 1))
    return int(found.group(1)) if found else -1


def _read_newest(paths: dict[int, str], limits: localstate.StateLimits):
    """The state in the newest of the copies (log dir id -> path) that reads
    and decodes under the broker's ``limits``, None if none does: the copies
    are tried by their ``seq``
    (:func:`peek_seq`), highest first, so one decode serves unless the
    newest copy is damaged."""
    ranked = []
    for dir_id, path in paths.items():
        try:
            ranked.append((peek_seq(path), dir_id, path))
        except OSError:
            continue  # (gone or damaged: another copy serves)
    for _, _, path in sorted(ranked, reverse=True):
        try:
            raw = read_file(path, limits.max_bytes)
            return localstate.decode_state(raw, path, limits)  # (refuses one too long)
        except (OSError, HostbrokerError):
            continue  # (a damaged copy: hb-logdirs says so; another serves)
    return None


def _target(state: localstate.LocalState | None, topic: str, partition: int) -> tuple:
    """The reassignment target of a partition in ``state`` (() for none)."""
    found = state.partition(topic, partition) if state is not None else None
    return found.target if found is not None else ()


def _state_dirs(state: localstate.LocalState | None) -> list[tuple[int, str | None]]:
    """``(dir id, path it was last seen at, or None)`` of every dir ``state`` knows."""
    if state is None:
        return []
    return sorted((dir_id, state.dirs.get(dir_id)) for dir_id in state.known_ids())
