"""hb-logdirs' admin: what handlers forward over ``dreq`` (OP_LOCAL_ADMIN), and the
work that follows a change (deletions, reassignment steps, strays, reopens).

Mixin of :class:`~hostbroker.workers.logdirs.worker.LogDirsWorker`. Requests
(json, answered on ``dans`` with the request's token as ``{"error",
"message", "results"}``):

- ``create``: place the replicas (``replication/dirplacement.place_replicas``
  over the live dirs), write the document, create each replica
  (``replica_slots.create_replica``, STOPPED, admin lock held), bump the
  table generation; the next pass makes the first replica lead (epoch 0,
  ISR all).
- ``delete``: the topic goes into ``deleting`` (written), each replica's
  writer is sent OP_REPLICA_STATE with ``delete``; once every one sent has
  answered, the topic leaves the document. A replica on an offline dir is
  a stray when its dir returns, and is deleted then.
- ``alter``: a reassignment (one at a time): ``target`` written, the new
  replicas created as followers with ``replicas`` = old + new; once every
  target dir is in the committed ISR the leadership moves to the first target
  dir in the ISR if the leader leaves; then ``replicas`` = target, ``target``
  dropped; the replicas left over are strays, deleted.
- ``online``: a log dir taken back: its files read by a thread of their own
  (a hung dir answers STORAGE_ERROR after :data:`ONLINE_LOOK_S`, never
  stalling the loop); its id checked (a dir with no id and no partition dir,
  a new disk, gets the next id); when the start was uncertain because of it,
  its state file copy compared (refused when unreadable; refused for good,
  the dir *held*, when newer than the copy this broker started from or of
  another history: the document takes a new history and records the refused
  copy, see ``replication/localstate.py``); OP_DIR_REOPEN to its writer, answered once
  the writer's replacement is READY.
- ``forget``: consent to lose what a missing dir, or one whose copy could not
  be read, may hold: partitions whose ISR names it may elect again; for a
  held dir (its copy refused or of another history), consent to lose its copy:
  its refusal leaves the document and ``online`` takes it back.

A stray (a dir-placed replica the document does not assign) is deleted only
while the document is certain (no dir blocked or held); otherwise it stays
STOPPED, with one line.
"""

from __future__ import annotations

import os
import threading
import time

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.shm import partitions as ptable
from hostbroker.workers import envelopes as env
from hostbroker.workers.logdirs import elect

TP = tuple[str, int]


def _answer(code: int, message: str = "", results=()) -> dict:
    return {"error": int(code), "message": message, "results": [list(r) for r in results]}


ONLINE_LOOK_S = 5.0  # `logdirs online` answers STORAGE_ERROR when the dir takes longer


class _Look:
    """The files ``logdirs online`` reads in the dir taken back, read by a thread
    of its own so that a hung dir never stalls hb-logdirs' loop: its id (a new,
    empty disk gets ``next_id``, written) and its state file copy."""

    def __init__(self, h: int, token: int, path: str, next_id: int, started: float):
        self.h, self.token, self.path, self.next_id = h, token, path, next_id
        self.started = started
        self.answered = False  # answered already (it did not answer in time)
        self.finished = threading.Event()
        self.answer: dict | None = None  # a refusal found while reading
        self.found: int | None = None
        self.fresh = False
        self.copy: tuple = (None, "", True)

    def run(self) -> None:
        from hostbroker.log.dirids import read_dir_id, write_dir_id
        from hostbroker.log.segments import parse_partition_dirname
        from hostbroker.workers.logdirs.statefile import read_copy

        try:
            self.found = read_dir_id(self.path)
            self.fresh = self.found is None
            if self.fresh:
                # (only partition dirs count: mkfs makes lost+found, and dot names are
                # not ours)
                with os.scandir(self.path) as entries:
                    if any(e.is_dir(follow_symlinks=False) and parse_partition_dirname(e.name)
                           for e in entries):
                        self.answer = _answer(ErrorCode.INVALID_REQUEST,
                                              f"log dir {self.path} holds partitions but no "
                                              "log dir id: restart to take it")
                        return
                write_dir_id(self.path, self.next_id)
                self.found = self.next_id
            self.copy = read_copy(self.path)
        except HostbrokerError as e:
            self.answer = _answer(e.code, str(e))
        except OSError as e:
            self.answer = _answer(ErrorCode.STORAGE_ERROR, f"{e.filename}: {e.strerror}")
        finally:
            self.finished.set()


class Admin:
    """Mixin: the OP_LOCAL_ADMIN service (see the module docstring)."""

    def init_admin(self) -> None:
        self.defaults = self.config.log_defaults()
        self.deletions: dict[str, set] = {}  # topic -> slots told to delete, not answered yet
        self.reopening: dict[int, tuple] = {}  # writer -> (handler, token, path, epoch sent)
        # (slot, topic, p) -> the writer epoch it was told to delete in
        self.strays_told: dict[tuple, int] = {}
        self.lost_tried: dict[tuple, int] = {}  # (t, p, dir) -> writer epoch of the last try
        self.looking: dict[int, _Look] = {}  # writer -> `logdirs online` reading its dir

    # -- requests ------------------------------------------------------------
    def _take_requests(self) -> None:
        for h, receiver in enumerate(self.requests):
            if not receiver.has_unread():
                continue
            for m in receiver.poll():
                op, token = env.decode_op(m)
                if op != env.OP_LOCAL_ADMIN:
                    continue
                try:
                    request = env.decode_json(m)
                    answer = self.admin_request(h, token, request)
                except HostbrokerError as e:
                    answer = _answer(e.code, str(e))
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    answer = _answer(ErrorCode.INVALID_REQUEST, f"bad admin request: {e}")
                except OSError as e:
                    answer = _answer(ErrorCode.STORAGE_ERROR, f"{e.filename}: {e.strerror}")
                if answer is not None:
                    self.reply(h, token, answer)
            if receiver.done():
                self.handler_bells[h].ring()

    def _not_written(self) -> dict:
        """The answer to a change whose state file write failed (undone)."""
        if self.write_problem:  # past a limit: the request's fault, not a disk's
            return _answer(ErrorCode.INVALID_REQUEST, f"refused: {self.write_problem}")
        return _answer(ErrorCode.STORAGE_ERROR, "cannot write the log dirs' state file")

    def reply(self, h: int, token: int, answer: dict) -> None:
        self.answers[h].send(*env.encode_json(env.OP_LOCAL_ADMIN, token, answer))

    def admin_request(self, h: int, token: int, request: dict) -> dict | None:
        """The answer, or None when it comes later (``online``)."""
        op = request["op"]
        if self.frozen:
            return _answer(ErrorCode.STORAGE_ERROR, "no log dir holds a readable state file")
        if op == "create":
            return self._create(str(request["topic"]), int(request["partitions"]),
                                int(request["rf"]), dict(request.get("config") or {}))
        if op == "delete":
            return self._delete(str(request["topic"]))
        if op == "alter":
            return self._alter(request["partitions"])
        if op == "online":
            return self._online(h, token, str(request["path"]))
        if op == "forget":
            return self._forget(int(request["dir_id"]))
        return _answer(ErrorCode.INVALID_REQUEST, f"no admin op {op!r}")

    # -- create ------------------------------------------------------------------
    def _exists(self, topic: str) -> bool:
        return topic in self.doc.configs or any(
            s.name == topic and s.state != ptable.FREE for _, s in self.table.scan())

    def _create(self, topic: str, partitions: int, rf: int, config: dict) -> dict:
        from hostbroker.log.segments import validate_topic_name
        from hostbroker.replication.dirplacement import place_replicas

        validate_topic_name(topic)
        if rf == -1:
            rf = self.config["default.replication.factor"]
        if not 1 <= rf <= ptable.MAX_REPLICAS:
            return _answer(ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"replication factor {rf} must be 1 to {ptable.MAX_REPLICAS}")
        limit = self.config["max.partitions.per.topic"]
        if not 1 <= partitions <= limit:
            return _answer(ErrorCode.INVALID_REQUEST, f"partitions must be between 1 and {limit}")
        config = {str(k): str(v) for k, v in config.items()}
        try:
            log_config = self.defaults.with_overrides(config)
        except HostbrokerError as e:
            return _answer(ErrorCode.INVALID_CONFIG, str(e))
        if log_config.min_insync_replicas > rf:
            return _answer(ErrorCode.INVALID_CONFIG,
                           f"min.insync.replicas {log_config.min_insync_replicas} is more than "
                           f"the replication factor {rf}")
        if self._exists(topic):
            return _answer(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic} already exists")
        live = self.live_dirs(time.monotonic())
        loads = self._loads(live)
        try:
            placed = place_replicas(loads, list(range(partitions)), rf)
        except ValueError as e:
            return _answer(ErrorCode.INVALID_REPLICATION_FACTOR, str(e))
        self.doc.configs[topic] = config
        for p, replicas in placed.items():
            self.doc.parts[(topic, p)] = self.new_part(replicas)
        if not self.write_doc():
            del self.doc.configs[topic]
            for p in placed:
                del self.doc.parts[(topic, p)]
            answer = self._not_written()
            if not self.write_problem:  # (a dir that took the write must not keep a copy naming it)
                self.write_doc()
            return answer
        results, failed = self._create_replicas(topic, placed, config)
        if failed:
            self.say(f"topic {topic}: {failed}; it is deleted")
            self._delete(topic)
            # (no results: a plain topic of that name came first)
            return _answer(ErrorCode.STORAGE_ERROR if results
                           else ErrorCode.TOPIC_ALREADY_EXISTS, failed)
        return _answer(ErrorCode.NONE, "", results)

    def _loads(self, live: set[int]) -> dict:
        """``DirLoad`` of each configured dir from the partition table (usable: in
        ``live``)."""
        from hostbroker.replication.dirplacement import DirLoad

        ids = self.dirtable.ids()
        every = set(ids.values()) | live
        replicas = {d: 0 for d in every}
        leaders = {d: 0 for d in every}
        size = {d: 0 for d in every}
        for _, s in self.table.scan():
            d = ids.get(s.owner)
            if d not in replicas or s.state == ptable.FREE:
                continue
            replicas[d] += 1
            size[d] += max(0, s.end_offset - s.start_offset)
            if s.role == ptable.ROLE_LEADER or s.role == ptable.ROLE_PLAIN:
                leaders[d] += 1
        return {d: DirLoad(replicas[d], leaders[d], size[d], self.device_of(d), d in live)
                for d in every}

    def _create_replicas(self, topic: str, placed: dict, config: dict,
                         only: dict | None = None) -> tuple[list, str]:
        """Create the replicas of ``placed`` ({p: dirs}; ``only``: {p: the dirs to
        create}) under the admin lock; (results, the first failure or "")."""
        from hostbroker.workers.replica_slots import PLACEMENT_LOG_DIRS, create_replica

        results, failed = [], ""
        with self.lock:
            if only is None and any(s.name == topic and s.state != ptable.FREE
                                    and s.placement != PLACEMENT_LOG_DIRS
                                    for _, s in self.table.scan()):
                # a handler created a plain topic of that name since the check
                return [], f"topic {topic} already exists"
            for p, replicas in sorted(placed.items()):
                code = ErrorCode.NONE
                part = self.doc.parts[(topic, p)]
                for d in (only.get(p, []) if only is not None else replicas):
                    index = self.dirtable.index_of(d)
                    try:
                        if index is None:
                            raise HostbrokerError(f"log dir id {d} is not configured",
                                                  ErrorCode.STORAGE_ERROR)
                        create_replica(self.table, self.commits, self.plan.log_dirs[index], index,
                                       topic, p, part.replicas, config, self.defaults,
                                       PLACEMENT_LOG_DIRS, leader=part.leader,
                                       leader_epoch=part.leader_epoch)
                    except HostbrokerError as e:
                        code = e.code
                        failed = failed or f"{topic}-{p} on log dir id {d}: {e}"
                results.append((topic, p, code))
            self.table.bump_generation()
        self._scan()
        return results, failed

    # -- delete ------------------------------------------------------------------
    def _delete(self, topic: str) -> dict:
        if topic not in self.doc.configs:
            return _answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}")
        if topic not in self.doc.deleting:
            self.doc.deleting.append(topic)
            if not self.write_doc():
                self.doc.deleting.remove(topic)
                return self._not_written()
        self._send_deletes(topic)
        return _answer(ErrorCode.NONE, "", [(topic, p, ErrorCode.NONE)
                                            for p, _ in self.doc.topic_parts(topic)])

    def _send_deletes(self, topic: str) -> None:
        told = self.deletions.setdefault(topic, set())
        for (t, p), slots in self.slots.items():
            if t == topic:
                for d, slot in slots.items():
                    if slot not in told and self._tell_delete(t, p, d, slot,
                                                              ("delete", topic, slot)):
                        told.add(slot)

    def _tell_delete(self, topic: str, p: int, d: int, slot: int, what: tuple) -> bool:
        w = self.dirtable.index_of(d)
        if w is None or w in self.table.offline_log_dirs() or not self.writer_ready(w):
            return False
        token = self.token(what)
        self.to_writers[w].send(*env.encode_replica_state(token, {
            "slot": slot, "topic": topic, "partition": p, "delete": True}))
        self.strays_told[(slot, topic, p)] = self.writer_epochs[w]
        return True

    def admin_answered(self, what: tuple, error: int, answer: dict) -> None:
        kind = what[0]
        if kind == "delete":  # (an error too: what is left is a stray, deleted later)
            told = self.deletions.get(what[1])
            if told is not None:
                told.discard(what[2])
        elif kind == "reopen":
            w = what[1]
            waiting = self.reopening.get(w)
            if waiting is not None and error == ErrorCode.NONE:
                # answered at all: the writer was not offline (an offline one exits)
                del self.reopening[w]
                self.reply(waiting[0], waiting[1],
                           _answer(ErrorCode.NONE, f"log dir {waiting[2]} is online"))

    # -- online, forget -------------------------------------------------------
    def _online(self, h: int, token: int, path: str) -> dict | None:
        """Take a log dir back: its files are read by a thread (the dir may hang),
        and :meth:`admin_round` goes on once it answers (or answers for it after
        :data:`ONLINE_LOOK_S`)."""
        wanted = os.path.abspath(path)
        if wanted not in self.plan.log_dirs:
            return _answer(ErrorCode.LOG_DIR_NOT_FOUND, f"log dir {path} is not configured")
        w = self.plan.log_dirs.index(wanted)
        done = self._online_done(w, wanted)
        if done is not None:
            return done
        if w in self.looking:
            return _answer(ErrorCode.STORAGE_ERROR,
                           f"log dir {wanted} is still being read (it did not answer)")
        known = self.doc.known_ids() | set(self.dirtable.ids().values()) \
            | {look.next_id for look in self.looking.values()}
        look = _Look(h, token, wanted, max(known | {0}) + 1, time.monotonic())
        self.looking[w] = look
        threading.Thread(target=look.run, name=f"logdirs-online-{w}", daemon=True).start()
        return None

    def _online_done(self, w: int, wanted: str) -> dict | None:
        """The answer when there is nothing to do, else None."""
        if w not in self.table.offline_log_dirs() and self.dirtable.dir_id(w) != -1 \
                and w not in self.unidentified:
            return _answer(ErrorCode.NONE, f"log dir {wanted} is online")
        if w in self.reopening:
            return _answer(ErrorCode.INVALID_REQUEST, f"log dir {wanted} is being reopened")
        return None

    def _online_looked(self, w: int, look: _Look) -> dict | None:
        """Go on with ``logdirs online`` once the dir's files were read."""
        from hostbroker.shm.logdirs import LD_REOPENING

        wanted = look.path
        if look.answer is not None:
            return look.answer
        done = self._online_done(w, wanted)
        if done is not None:
            return done
        found, fresh = look.found, look.fresh
        expected = self.dirtable.dir_id(w)
        if not fresh and expected != -1 and found != expected:
            return _answer(ErrorCode.INVALID_REQUEST,
                           f"log dir {wanted} holds id {found}, this broker had id {expected} "
                           "there: restart to take it")
        if expected == -1 or fresh:  # (a new disk in place of a dead one: a new id)
            holder = self.dirtable.index_of(found)
            if holder is not None and holder != w:
                return _answer(ErrorCode.INVALID_REQUEST,
                               f"log dir {wanted} holds id {found}, which "
                               f"{self.plan.log_dirs[holder]} holds too (a copied dir?)")
        if found in self.held:  # its copy is not of this lineage: the operator decides
            return _answer(ErrorCode.INVALID_REQUEST, self.held[found])
        if found in self.blocked:
            # it was online at the last change the copies saw: its copy may be newer
            copy, why, _ = look.copy
            if copy is None:
                return _answer(ErrorCode.STORAGE_ERROR,
                               f"log dir {wanted} (id {found}) was online at the last change "
                               f"and holds no readable state file ({why or 'none'}): it may "
                               "have held a newer one; `hostbroker logdirs forget "
                               f"--log-dir-id {found}` consents to losing it")
            if copy.seq > self.start_seq or (
                    copy.history and self.doc.history and copy.history != self.doc.history):
                return self._refuse(found, wanted, copy)
        if expected == -1 or fresh:
            self.dirtable.set_id(w, found)
        self.writers.set_dir(found, wanted)
        self.doc.dirs[found] = wanted
        self.blocked.discard(found)  # (its copy is not newer: it holds replicas like any other)
        self.unidentified.discard(w)
        self.dirtable.set_state(w, LD_REOPENING)
        self.reopening[w] = (look.h, look.token, wanted, self.writer_epochs[w])
        self.to_writers[w].send(*env.encode_dir_reopen(self.token(("reopen", w)), found))
        return None

    def _refuse(self, found: int, path: str, copy) -> dict:
        """Refuse the copy of dir ``found`` for good: this broker goes on without it,
        so its document takes a new history, records the refused copy and goes past
        its seq (durable), and the dir is held until ``logdirs forget``."""
        from hostbroker.replication.localstate import new_history

        why = (f"holds a newer state file (seq {copy.seq}) than the one this broker "
               f"started from (seq {self.start_seq})" if copy.seq > self.start_seq else
               f"its state file (seq {copy.seq}) is of another history")
        self.doc.refused[found] = (copy.seq, copy.history)
        self.doc.history = new_history()
        self.doc.seq = max(self.doc.seq, copy.seq)
        self.held[found] = self.held_line(found, path, why)
        self.say(self.held[found])
        if not self.write_doc():
            self.say("the refusal is not durable yet: it is written with the next change")
        return _answer(ErrorCode.INVALID_REQUEST, self.held[found])

    def _online_round(self, now: float) -> None:
        for w, look in list(self.looking.items()):
            if look.finished.is_set():
                del self.looking[w]
                if not look.answered:
                    answer = self._online_looked(w, look)
                    if answer is not None:
                        self.reply(look.h, look.token, answer)
            elif not look.answered and now - look.started >= ONLINE_LOOK_S:
                look.answered = True  # (kept: the dir is refused until the read returns)
                self.reply(look.h, look.token, _answer(
                    ErrorCode.STORAGE_ERROR,
                    f"log dir {look.path} did not answer in {ONLINE_LOOK_S:g} s (a hung disk?)"))

    def _forget(self, dir_id: int) -> dict:
        index = self.dirtable.index_of(dir_id)
        if index is not None and index not in self.table.offline_log_dirs() \
                and index not in self.unidentified:
            return _answer(ErrorCode.INVALID_REQUEST, f"log dir id {dir_id} is online")
        if dir_id not in self.blocked and dir_id not in self.doc.known_ids():
            return _answer(ErrorCode.LOG_DIR_NOT_FOUND, f"no log dir id {dir_id} is known")
        refused = self.doc.refused.pop(dir_id, None)
        self.doc.dirs.pop(dir_id, None)
        if not self.write_doc():
            if refused is not None:
                self.doc.refused[dir_id] = refused
            return self._not_written()
        self.blocked.discard(dir_id)
        self.held.pop(dir_id, None)  # (`logdirs online` takes it back, its copy overwritten)
        self.say(f"log dir id {dir_id} forgotten: partitions whose ISR named it elect again")
        return _answer(ErrorCode.NONE, f"log dir id {dir_id} forgotten")

    # -- alter ---------------------------------------------------------------------
    def _alter(self, partitions) -> dict:
        if self.doc.moving():
            return _answer(ErrorCode.INVALID_REQUEST, "a reassignment is in progress")
        live = self.live_dirs(time.monotonic())
        moves: dict[TP, list[int]] = {}
        results = []
        for topic, p, dirs in partitions:
            tp = (str(topic), int(p))
            dirs = [int(d) for d in dirs]
            part = self.doc.parts.get(tp)
            if part is None or tp[0] in self.doc.deleting:
                results.append((tp[0], tp[1], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            elif tp in moves or not 1 <= len(dirs) <= ptable.MAX_REPLICAS \
                    or len(set(dirs)) != len(dirs):
                results.append((tp[0], tp[1], ErrorCode.INVALID_REQUEST))
            elif any(d not in live for d in dirs) or \
                    len(set(part.replicas) | set(dirs)) > ptable.MAX_REPLICAS:
                results.append((tp[0], tp[1], ErrorCode.LOG_DIR_NOT_FOUND
                                if any(self.dirtable.index_of(d) is None for d in dirs)
                                else ErrorCode.INVALID_REPLICATION_FACTOR))
            else:
                moves[tp] = dirs
                results.append((tp[0], tp[1], ErrorCode.NONE))
        if any(code for _, _, code in results):
            return _answer(ErrorCode.INVALID_REQUEST, "no partition moved: see each one's error",
                           results)
        added: dict[TP, list[int]] = {}
        for tp, dirs in moves.items():
            part = self.doc.parts[tp]
            if dirs == part.replicas:
                continue
            added[tp] = [d for d in dirs if d not in part.replicas]
            part.target = dirs
            part.replicas = part.replicas + added[tp]
            part.version += 1
        if not self.write_doc():
            return self._not_written()
        for (topic, p), dirs in added.items():
            if dirs:
                _, failed = self._create_replicas(topic, {p: self.doc.parts[(topic, p)].replicas},
                                                  self.doc.configs.get(topic, {}), {p: dirs})
                if failed:
                    self.say(f"reassignment: {failed}")
        return _answer(ErrorCode.NONE, "", results)

    def _advance_moves(self, live: set[int]) -> None:
        """Steps 3 and 4 of each reassignment under way."""
        changed = False
        for tp, part in self.doc.parts.items():
            if not part.target:
                continue
            new = elect.moved_leader(part.replicas, part.target, part.leader, part.leader_epoch,
                                     part.isr, live)
            if new is not None:
                part.leader, part.leader_epoch = new.leader, new.leader_epoch
                part.version += 1
                self.moved = changed = True
            elif part.leader in part.target and all(d in part.isr for d in part.target):
                part.replicas = list(part.target)
                part.isr = [d for d in part.isr if d in part.target]
                part.target = []
                part.version += 1
                changed = True
        if changed:
            self.write_doc()

    # -- each round -------------------------------------------------------------
    def admin_round(self, now: float) -> None:
        self._online_round(now)
        for w, (h, token, path, epoch) in list(self.reopening.items()):
            if self.writer_epochs[w] != epoch and self.writer_ready(w):
                del self.reopening[w]
                if w in self.table.offline_log_dirs():
                    self.reply(h, token, _answer(ErrorCode.STORAGE_ERROR,
                                                 f"log dir {path} is still unusable"))
                else:
                    self.reply(h, token, _answer(ErrorCode.NONE, f"log dir {path} is online"))
        if self.frozen:
            return
        live = self.live_dirs(now)
        if self.doc.moving():
            self._advance_moves(live)
        for topic, tokens in list(self.deletions.items()):
            if not tokens:
                del self.deletions[topic]
                self._drop_topic(topic)
        self._strays_and_lost(live)

    def _drop_topic(self, topic: str) -> None:
        self.doc.configs.pop(topic, None)
        for tp in [tp for tp in self.doc.parts if tp[0] == topic]:
            del self.doc.parts[tp]
        if topic in self.doc.deleting:
            self.doc.deleting.remove(topic)
        self.write_doc()
        with self.lock:
            self.table.bump_generation()

    def _strays_and_lost(self, live: set[int]) -> None:
        """Delete the replicas the document does not assign (only while it is certain),
        and give an empty replica back to an assigned live dir that lost its partition
        dir, once the ISR no longer names it."""
        for (topic, p), slots in self.slots.items():
            part = self.doc.parts.get((topic, p))
            assigned = part is not None and topic not in self.doc.deleting
            for d, slot in slots.items():
                if assigned and (d in part.replicas or d in part.target):
                    continue
                if slot in self.deletions.get(topic, ()):
                    continue  # told already
                w = self.dirtable.index_of(d)
                told = (slot, topic, p)
                if w is None or self.strays_told.get(told) == self.writer_epochs[w]:
                    continue
                if self.blocked or self.held:
                    if told not in self.strays_told:
                        self.say(f"{topic}-{p} on log dir id {d} is not assigned; it stays "
                                 "stopped while the state file is uncertain")
                        self.strays_told[told] = -1
                    continue
                self._tell_delete(topic, p, d, slot, ("stray", topic, slot))
        for tp, part in self.doc.parts.items():
            if tp[0] in self.doc.deleting:
                continue
            slots = self.slots.get(tp, {})
            for d in part.replicas:
                if d not in live or d in slots or d in part.isr:
                    continue
                w = self.dirtable.index_of(d)
                key = (tp[0], tp[1], d)
                if w is None or self.lost_tried.get(key) == self.writer_epochs[w]:
                    continue
                self.lost_tried[key] = self.writer_epochs[w]
                _, failed = self._create_replicas(tp[0], {tp[1]: part.replicas},
                                                  self.doc.configs.get(tp[0], {}), {tp[1]: [d]})
                if failed:
                    self.say(f"cannot give back a lost replica: {failed}")
