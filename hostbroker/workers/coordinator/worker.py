"""The loop of ``hb-coordinator`` (what it owns, reads and writes: the
package docstring).

Each pass takes what the handlers sent on the ``capp`` rings (group
requests answered now, or a JOIN_GROUP when its rebalance completes;
commits answered when their sync returns) and the GROUP_PUTs on the
``cput`` rings, in ring order; hands the commits written in the pass to the
flusher thread in one fdatasync; lets the group state expire sessions and
rebalance waits, answer the joins it completed and save itself
(:meth:`GroupHost.tick`); then sends the results to the handlers and wakes
those asleep. The loop sleeps until a ring or the flusher rings its
doorbell, or the groups' next deadline.

One request never ends the process: one that fails unexpectedly is answered
UNKNOWN and logged with its traceback. A stop answers the commits written
and not yet synced (synced here, the flusher stopped) before the process
exits.
"""

from __future__ import annotations

import sys
import time
import traceback

from hostbroker.errors import ErrorCode
from hostbroker.log.offsetstore import OffsetStore
from hostbroker.shm import procs
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.topicnames import ReplicatedNames
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import Worker
from hostbroker.workers.coordinator.group_puts import GroupPuts
from hostbroker.workers.coordinator.groups import GroupHost
from hostbroker.workers.coordinator.offsets import OffsetsHost
from hostbroker.workers.flusher import Flusher
from hostbroker.workers.stats_record import Recorder

_IDLE_TIMEOUT_S = 1.0


class CoordinatorWorker(GroupPuts, Worker):
    kind = "coordinator"
    process_name = "hb-coordinator"

    @property
    def name(self) -> str:
        return self.process_name  # one per broker

    def init_process(self) -> None:
        super().init_process()
        plan, config = self.plan, self.config
        self.path = plan.log_dirs[0]
        self.table = PartitionTable.attach(plan.table_name, readonly=True)
        self.receivers = [self.receiver("capp", h, 0) for h in range(plan.num_handlers)]
        self.senders = [self.sender("cres", 0, h) for h in range(plan.num_handlers)]
        self.handler_bells = [self.waker("handler", h) for h in range(plan.num_handlers)]
        self.puts = [self.receiver("cput", p, 0) for p in range(plan.num_processors)]
        self.answer_rings = [self.sender("cans", 0, p) for p in range(plan.num_processors)]
        self.processor_bells = [self.waker("processor", p) for p in range(plan.num_processors)]
        self.max_response_bytes = config["response.max.bytes"]
        self.stats = Recorder(plan, self.kind, self.index)  # errors of its GROUP_PUT answers
        self.flusher = Flusher(self.doorbell)
        self.groups = GroupHost(config, self.table, self.path, config["broker.id"],
                                replacement=self.epoch > 1, name=self.name,
                                names=ReplicatedNames.attach(plan.replicated_names_name,
                                                             readonly=True))
        self.offsets = OffsetsHost(OffsetStore.open(
            self.path, record_max_bytes=config["offsets.record.max.bytes"],
            compact_min_bytes=config["offsets.compact.min.bytes"],
            compact_ratio=config["offsets.compact.ratio"]), self.groups, self.flusher)
        self.flusher.start()
        self.board.set_state(self.slot, procs.WORKER_READY)

    # -- the loop ----------------------------------------------------------
    def run(self) -> None:
        self.serve_rings()
        self.flusher.stop()
        self._synced()
        self._send_offsets(self.offsets.settle())
        self.offsets.close()
        self.groups.close()
        self._pump()
        # leave a moment for handlers and processors to take the last answers
        deadline = time.monotonic() + 1
        while self._unsent() and time.monotonic() < deadline:
            self._pump()
            time.sleep(0.01)

    def _unsent(self) -> bool:
        return any(s.pending() for s in self.senders) or any(
            s.pending() for s in self.answer_rings)

    def _timeout(self) -> float:
        if self._unsent():
            return 0.01
        groups_s = self.groups.timeout_s()
        return _IDLE_TIMEOUT_S if groups_s is None else min(_IDLE_TIMEOUT_S, groups_s + 0.001)

    def _cycle(self) -> None:
        self._synced()
        results: list[list] = [[] for _ in self.senders]
        for h, receiver in enumerate(self.receivers):
            if not receiver.has_unread():
                continue  # nothing taken since its last done(): nothing to free either
            for m in receiver.poll():
                self._request(h, m, results[h])
            if receiver.done():
                self.handler_bells[h].ring()  # it waits for space: always ring
        for p, receiver in enumerate(self.puts):
            if not receiver.has_unread():
                continue
            for m in receiver.poll():
                if m[0] == env.OP_GROUP_PUT:
                    self._group_put(m)
            if receiver.done():
                self.processor_bells[p].ring()  # it waits for space: always ring
        self.offsets.start_sync()  # every commit of this pass in one fdatasync
        for h, token, result in self.groups.tick():
            results[h].append(env.encode_json(env.OP_GROUP, token, result))
        for h, out in enumerate(results):
            for parts in out:
                self.senders[h].send(*parts)
        self._pump()

    def _request(self, h: int, m, out: list) -> None:
        """One op from handler ``h``: its result into ``out`` now, or later (a
        join waiting for its rebalance, a commit waiting for its sync)."""
        op, token = env.decode_op(m)
        if op not in (env.OP_GROUP, env.OP_OFFSETS):
            return
        try:
            request = env.decode_json(m)
            if op == env.OP_GROUP:
                result = self.groups.handle(h, token, request)
            else:
                result = self.offsets.handle(h, token, request)
        except Exception:  # noqa: BLE001 - one request must never end the coordinator
            print(f"hostbroker: {self.name}: a request from handler {h} failed unexpectedly; "
                  "answered UNKNOWN", file=sys.stderr, flush=True)
            traceback.print_exc()
            self.count(procs.ERRORS)
            result = {"error": int(ErrorCode.UNKNOWN)}
        self.count(procs.REQUESTS)
        if result is not None:
            out.append(env.encode_json(op, token, result))

    def _offsets(self, h: int | None, token, request: dict) -> dict | None:
        """An OFFSET_COMMIT or OFFSET_FETCH: its result now, or None (``offsets.py``)."""
        return self.offsets.handle(h, token, request)

    def _synced(self) -> None:
        """Answer what the syncs the flusher finished settle."""
        finished = self.flusher.done
        while not finished.empty():  # (only this thread takes from it)
            _, host, _, error = finished.get_nowait()
            self._send_offsets(host.synced(error))

    def _send_offsets(self, answers: list[tuple]) -> None:
        """Commits a sync saved and the fetches that waited for them, to their
        handlers, or (GROUP_PUTs, handler None) to their processors."""
        for h, token, result in answers:
            if h is None:
                self._answer_group_put(*token, result)
            else:
                self.senders[h].send(*env.encode_json(env.OP_OFFSETS, token, result))

    def _pump(self) -> None:
        """Move queued results into the rings and wake the handlers and
        processors they are for."""
        for h, sender in enumerate(self.senders):
            if sender.pending():
                sender.pump()
                self.handler_bells[h].wake()
        for p, sender in enumerate(self.answer_rings):
            if sender.pending():
                sender.pump()
                self.processor_bells[p].wake()
