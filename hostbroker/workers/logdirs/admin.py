"""hb-logdirs' admin: what handlers forward over ``dreq`` (OP_LOCAL_ADMIN), and the
work that follows a change (deletions, reassignment steps, strays, reopens).

Mixin of :class:`~hostbroker.workers.logdirs.worker.LogDirsWorker`. Requests
(json, answered on ``dans`` with the request's token as ``{"error",
"message", "results"}``):

- ``create``: checked, placed and its replicas made a few per round
  (:mod:`.creation`); the topic written into the document once they all are,
  then answered; the next pass makes the first replica lead (epoch 0, ISR
  all).
- ``delete``: the topic goes into ``deleting`` (written), each replica's
  writer is sent OP_REPLICA_STATE with ``delete``; once every one sent has
  answered, the topic leaves the document. A replica on an offline dir is
  a stray when its dir returns, and is deleted then.
- ``alter``: a reassignment (one at a time): ``target`` written, the new
  replicas created as followers with ``replicas`` = old + new (as a lost
  replica is given back, :mod:`.creation`); once every
  target dir is in the committed ISR the leadership moves to the first target
  dir in the ISR if the leader leaves; then ``replicas`` = target, ``target``
  dropped; the replicas left over are strays, deleted.
- ``alter_topic``: ALTER_TOPIC of a dir-placed topic (:mod:`.topic_changes`):
  its config changed in the document (sent to each replica with its state),
  its new partitions made as a creation's.
- ``online``: a log dir taken back: its files read by a thread of their own
  (a hung dir answers STORAGE_ERROR after :data:`ONLINE_LOOK_S`, never
  stalling the loop); its id checked (a dir with no id and no partition dir,
  a new disk, gets the next id); when the start was uncertain because of it,
  its state file copy compared (refused when unreadable; refused for good,
  the dir *held*, when newer than the copy this broker started from or of
  another history: the document takes a new history and records the refused
  copy, see ``replication/localstate.py``); OP_DIR_REOPEN to its writer, answered once
  the writer's replacement is READY (an error while the dir is still
  unusable), or after ``logdirs.online.wait.ms``.
- ``forget``: consent to lose what a missing dir, or one whose copy could not
  be read, may hold: partitions whose ISR names it may elect again; for a
  held dir (its copy refused or of another history), consent to lose its copy:
  its refusal leaves the document and ``online`` takes it back.

Every change is durable before it applies: when the state file write fails,
the document is put back as it was (a request is answered STORAGE_ERROR).

A stray (a dir-placed replica the document does not assign) is deleted only
while the document is certain (no dir blocked or held); otherwise it stays
STOPPED, with one line.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.shm import partitions as ptable
from hostbroker.workers import envelopes as env
from hostbroker.workers.logdirs import elect
from hostbroker.workers.logdirs.creation import Creations
from hostbroker.workers.logdirs.creation import answer as _answer
from hostbroker.workers.logdirs.topic_changes import TopicChanges

TP = tuple[str, int]


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


class Admin(TopicChanges, Creations):
    """Mixin: the OP_LOCAL_ADMIN service (see the module docstring)."""

    def init_admin(self) -> None:
        self.defaults = self.config.log_defaults()
        self.deletions: dict[str, set] = {}  # topic -> slots told to delete, not answered yet
        # writer -> (handler, token, path, its epoch when sent, when sent)
        self.reopening: dict[int, tuple] = {}
        # (slot, topic, p) -> the writer epoch it was told to delete in
        self.strays_told: dict[tuple, int] = {}
        self.looking: dict[int, _Look] = {}  # writer -> `logdirs online` reading its dir
        self.online_wait_s = self.config["logdirs.online.wait.ms"] / 1000
        self.init_creations()

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
        """The answer, or None when it comes later (``online``, a long ``create``)."""
        op = request["op"]
        if self.frozen:
            return _answer(ErrorCode.STORAGE_ERROR, "no log dir holds a readable state file")
        if op == "create":
            return self._create(str(request["topic"]), int(request["partitions"]),
                                int(request["rf"]), dict(request.get("config") or {}), h, token)
        if op == "delete":
            return self._delete(str(request["topic"]))
        if op == "alter":
            return self._alter(request["partitions"])
        if op == "alter_topic":  # ALTER_TOPIC (topic_changes.py)
            return self._alter_topic(h, token, request)
        if op == "online":
            return self._online(h, token, str(request["path"]))
        if op == "forget":
            return self._forget(int(request["dir_id"]))
        return _answer(ErrorCode.INVALID_REQUEST, f"no admin op {op!r}")

    # -- delete ------------------------------------------------------------------
    def _delete(self, topic: str) -> dict:
        if topic not in self.doc.configs:
            return _answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}")
        if topic not in self.doc.deleting:
            self.doc.deleting.append(topic)
            if not self.write_doc():
                self.doc.deleting.remove(topic)
                self.write_back()
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
            if waiting is None or (error == ErrorCode.NONE and answer.get("reopening")):
                return  # it exits: answered once its replacement is READY (_reopen_round)
            del self.reopening[w]
            if error == ErrorCode.NONE:  # it was not offline: nothing to reopen
                self.reply(waiting[0], waiting[1],
                           _answer(ErrorCode.NONE, f"log dir {waiting[2]} is online"))
            else:
                self.reply(waiting[0], waiting[1], _answer(
                    error, f"log dir {waiting[2]}: {answer.get('message') or 'not reopened'}"))

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
        self.reopening[w] = (look.h, look.token, wanted, self.writer_epochs[w], time.monotonic())
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
        path = self.doc.dirs.pop(dir_id, None)
        if not self.write_doc():  # not durable: nothing forgotten
            if refused is not None:
                self.doc.refused[dir_id] = refused
            if path is not None:
                self.doc.dirs[dir_id] = path
            self.write_back()
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
        old = self._entries(moves)
        for tp, dirs in moves.items():
            part = self.doc.parts[tp]
            if dirs == part.replicas:
                continue
            part.target = dirs
            part.replicas = part.replicas + [d for d in dirs if d not in part.replicas]
            part.version += 1
        if not self.write_doc():  # not durable: nothing moves
            self._restore(old)
            self.write_back()
            return self._not_written()
        # the new replicas are made as lost ones are given back: a few per round
        self._give_back(live, time.monotonic() + self.create_round_s)
        return _answer(ErrorCode.NONE, "", results)

    def _entries(self, tps) -> dict:
        """Copies of the document entries of ``tps``, for :meth:`_restore`."""
        return {tp: dataclasses.replace(
            part, replicas=list(part.replicas), isr=list(part.isr), target=list(part.target))
            for tp, part in ((tp, self.doc.parts[tp]) for tp in tps)}

    def _restore(self, old: dict) -> None:
        """Put back, in place, the entries :meth:`_entries` copied (a write failed)."""
        for tp, saved in old.items():
            part = self.doc.parts[tp]
            for field in dataclasses.fields(saved):
                setattr(part, field.name, getattr(saved, field.name))

    def _advance_moves(self, live: set[int]) -> None:
        """Steps 3 and 4 of each reassignment under way, applied once written."""
        old = self._entries([tp for tp, part in self.doc.parts.items() if part.target])
        moved = False
        for tp in old:
            part = self.doc.parts[tp]
            new = elect.moved_leader(part.replicas, part.target, part.leader, part.leader_epoch,
                                     part.isr, live)
            if new is not None:
                part.leader, part.leader_epoch = new.leader, new.leader_epoch
                part.version += 1
                moved = True
            elif part.leader in part.target and all(d in part.isr for d in part.target):
                part.replicas = list(part.target)
                part.isr = [d for d in part.isr if d in part.target]
                part.target = []
                part.version += 1
        if any(self.doc.parts[tp] != part for tp, part in old.items()):
            if not self.write_doc():  # tried again next round
                self._restore(old)
                self.write_back()
            elif moved:
                self.moved = True

    # -- each round -------------------------------------------------------------
    def _reopen_round(self, now: float) -> None:
        """Answer ``logdirs online`` once the reopened dir's writer is back: its
        replacement READY, the dir usable or not; or, past
        ``logdirs.online.wait.ms``, that it is not back yet."""
        for w, (h, token, path, epoch, since) in list(self.reopening.items()):
            if self.writer_epochs[w] != epoch and self.writer_ready(w):
                del self.reopening[w]
                self._update_dirtable()  # (the tool reads the dir's state next)
                if w in self.table.offline_log_dirs():
                    self.reply(h, token, _answer(ErrorCode.STORAGE_ERROR,
                                                 f"log dir {path} is still unusable (see the "
                                                 "broker's log)"))
                else:
                    self.reply(h, token, _answer(ErrorCode.NONE, f"log dir {path} is online"))
            elif now - since >= self.online_wait_s:
                del self.reopening[w]
                self.reply(h, token, _answer(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"log dir {path}: its writer is not back after "
                    f"{self.online_wait_s * 1000:g} ms (logdirs.online.wait.ms); "
                    "`hostbroker logdirs list` shows when the dir is online"))

    def admin_round(self, now: float) -> None:
        self._online_round(now)
        self._reopen_round(now)
        if self.frozen:
            return
        deadline = time.monotonic() + self.create_round_s  # (replicas made this round)
        self._creations_round(deadline)
        live = self.live_dirs(now)
        if self.doc.moving():
            self._advance_moves(live)
        for topic, tokens in list(self.deletions.items()):
            if not tokens:
                del self.deletions[topic]
                self._drop_topic(topic)
        self._strays(live)
        self._give_back(live, deadline)

    def _drop_topic(self, topic: str) -> None:
        """The end of a deletion: the topic leaves the document once written."""
        config = self.doc.configs.pop(topic, None)
        parts = {tp: self.doc.parts.pop(tp) for tp in [tp for tp in self.doc.parts
                                                         if tp[0] == topic]}
        deleting = list(self.doc.deleting)
        if topic in self.doc.deleting:
            self.doc.deleting.remove(topic)
        if not self.write_doc():  # not durable: kept, and dropped again next round
            if config is not None:
                self.doc.configs[topic] = config
            self.doc.parts.update(parts)
            self.doc.deleting = deleting
            self.deletions[topic] = set()
            self.write_back()
            return
        self.bump_generation_soon()

    def _strays(self, live: set[int]) -> None:
        """Delete the replicas the document does not assign (only while it is certain;
        not those of a topic being created)."""
        for (topic, p), slots in self.slots.items():
            if topic in self.creating:
                continue
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
