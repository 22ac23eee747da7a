"""An in-process request handler over real shared tables, for the handler's
side of replicas across log dirs (``handler_logdirs.py``, ``topicview.py``).

The partition table, the log dir table and the admin lock are real (named
shared memory and a System V semaphore, removed at the end). The rings are
recorders: the processor's response ring keeps each answer, the rings to the
writers, the coordinator and ``hb-logdirs`` keep each envelope sent. What
``hb-logdirs`` answers is handed to the handler as the envelope it would put
on the ``dans`` ring (:meth:`Rig.answer`).
"""

from __future__ import annotations

import itertools
import os
import types

from hostbroker.config import Config
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from hostbroker.shm import partitions as ptable
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.logdirs import LogDirTable
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers import envelopes as env
from hostbroker.workers.answers import TableAnswers
from hostbroker.workers.handler import HandlerWorker
from hostbroker.workers.topicview import TopicView

_runs = itertools.count()
BROKER_ID = 4


class Responses:
    """Stands in for a response ring: keeps (seq, flags, frames) of each answer."""

    def __init__(self):
        self.answers = []

    def send(self, *parts):
        _, seq, flags, pieces, _ = env.decode_response(b"".join(parts))
        self.answers.append((seq, flags, [bytes(p) for p in pieces]))

    def pump(self):
        return True

    def pending(self):
        return False


class Sent:
    """Stands in for a ring to a writer, the coordinator or hb-logdirs: keeps
    each envelope sent, whole."""

    def __init__(self, kind: str):
        self.kind = kind
        self.sent: list[bytes] = []

    def send(self, *parts):
        self.sent.append(b"".join(bytes(p) for p in parts))

    def pump(self):
        return True

    def pending(self):
        return False

    def own(self):
        pass

    def json(self) -> list[tuple[int, int, dict]]:
        """``(op, token, document)`` of each json envelope sent."""
        out = []
        for m in self.sent:
            op, token = env.decode_op(m)
            out.append((op, token, env.decode_json(memoryview(m))))
        return out


class _Bell:
    def ring(self):
        pass

    def wake(self):
        pass


def make_table(token: str, slots: int = 16) -> PartitionTable:
    return PartitionTable.create(region_name(token, "partitions", 0), slots)


def claim(table: PartitionTable, slot: int, topic: str, partition: int, owner: int,
          replicas, role=ptable.ROLE_FOLLOWER, leader=-1, epoch=0, state=ptable.ONLINE,
          isr=None, end=0, hw=0) -> None:
    """Slot ``slot`` as a dir-placed replica (``replicas``: log dir ids), as
    hb-logdirs claims it and its writer then takes its role."""
    table.claim_replica(slot, list(replicas), leader=leader, leader_epoch=epoch,
                        role=ptable.ROLE_STOPPED, placement=ptable.PLACEMENT_LOG_DIRS,
                        state=ptable.ONLINE, name=topic, partition=partition, owner=owner,
                        start_offset=0, end_offset=0, flushed_offset=0, segment_generation=1)
    table.write(slot, role=role, state=state, end_offset=end, high_watermark=hw,
                isr=ptable.isr_bits(replicas, replicas if isr is None else isr))


class Rig:
    """A handler of a standalone broker with ``len(dir_ids)`` log dirs
    (``dir_ids[w]`` is writer ``w``'s id, -1 unknown)."""

    def __init__(self, tmp_path, dir_ids, cluster: bool = False, **settings):
        self.token = f"hr{os.getpid()}n{next(_runs)}"
        self.dirs = []
        for w in range(len(dir_ids)):
            d = tmp_path / f"d{w}"
            d.mkdir(parents=True)
            self.dirs.append(str(d))
        values = {"log.dirs": ",".join(self.dirs), "broker.id": BROKER_ID}
        if cluster:
            values["zookeeper.connect"] = "127.0.0.1:1"
        values.update({k.replace("_", "."): v for k, v in settings.items()})
        self.config = Config.build(values)
        self.table = make_table(self.token)
        self.lock = AdminLock.create(self.token, timeout=2.0)
        self.logdirs_name = region_name(self.token, "logdirs", 0)
        self.logdirs = LogDirTable.create(self.logdirs_name, dir_ids)
        n = len(dir_ids)
        plan = types.SimpleNamespace(num_writers=n, log_dirs=self.dirs,
                                     logdirs=n >= 2 and not cluster, dir_ids=list(dir_ids),
                                     logdirs_name=self.logdirs_name,
                                     board_slot=lambda kind, index: 0)
        h = HandlerWorker.__new__(HandlerWorker)
        h.index, h.epoch = 0, 1  # (its name: hb-handler-0)
        h.plan, h.config = plan, self.config
        h.table, h.lock = self.table, self.lock
        h.defaults = self.config.log_defaults()
        h.view = TopicView(self.table, self.dirs, h.defaults)
        h.answers = TableAnswers(h.view, self.dirs, BROKER_ID, ((BROKER_ID, "", -1, ""),),
                                 1 << 20)
        h.max_entries, h.max_response_bytes = 10000, 1 << 20
        h.broken, h.pending, h.parked = {}, {}, []
        h.wait_ns = 0
        h.responses, h.dirty_processors = [Responses()], set()
        h.requests = []
        h.count = lambda *args: None
        h.tokens = itertools.count(1)
        h.appends = [Sent("app") for _ in range(n)] + [Sent("capp")]
        h.results = [None] * (n + 1)
        h.writer_bells = [_Bell() for _ in range(n + 1)]
        h.peer_slots = list(range(n + 1))
        h.dirty_writers = set()
        h.holds, h.refs_sent = {}, [0] * n
        h.auto_create = True
        h.direct_answers, h.ring_append_min = False, 0
        h.draining, h.writer_polls = False, False
        h.sender = lambda kind, producer, consumer: Sent(kind)
        h.receiver = lambda kind, producer, consumer: None
        h.waker = lambda kind, index: _Bell()
        h.peers, h.isr_commits = None, None
        h.broker_id, h.cluster_mode, h.epoch_caches = BROKER_ID, cluster, {}
        h.replicated_names = types.SimpleNamespace(replicated=lambda t: False) if cluster else None
        h._init_logdirs()
        self.h = h

    def close(self) -> None:
        self.table.close()
        self.logdirs.close()
        self.lock.remove()
        remove_stale(broker_prefix(self.token))

    # -- driving it ------------------------------------------------------------
    def request(self, body, corr: int = 1, seq: int = 0, version: int | None = None) -> None:
        frame = rproto.encode_request(body, corr, "t", version)[4:]
        self.h._on_request(0, memoryview(env.REQ_HEADER.pack(7, seq, 0, 0) + frame))

    def answered(self) -> list[tuple[int, int, bytes]]:
        """``(seq, flags, frame without its size)`` of each answer so far, taken."""
        out = [(seq, flags, b"".join(frames)[4:])
               for seq, flags, frames in self.h.responses[0].answers]
        self.h.responses[0].answers.clear()
        return out

    def only_answer(self, cls=None):
        ((_, flags, frame),) = self.answered()
        if api.is_error_frame(frame):
            return api.decode_error_frame(frame)
        return rproto.decode_response(frame, cls)[1] if cls else frame

    @property
    def to_logdirs(self) -> Sent:
        return self.h.appends[self.h.logdirs_peer]

    def answer(self, token: int, doc: dict) -> None:
        """What hb-logdirs puts on the ``dans`` ring for the request ``token``."""
        self.h._on_result(memoryview(b"".join(
            bytes(p) for p in env.encode_json(env.OP_LOCAL_ADMIN, token, doc))))
