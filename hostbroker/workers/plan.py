"""What the supervisor sets up before it forks, and every worker inherits.

A :class:`BrokerPlan` names all shared memory (rings, the partition table, the
process board, the admin lock) and holds the file descriptors that children
inherit across ``fork``: bound listening sockets, the acceptor-to-processor
hand-off socket pairs and one doorbell (eventfd) per worker. It plans one
``hb-coordinator`` (the consumer group coordinator and the offsets store,
:mod:`hostbroker.workers.coordinator`) and, in cluster mode
(``zookeeper.connect`` set), the ``hb-registrar``, which uses no ring, and the
``hb-replica`` follower fetcher (:mod:`hostbroker.workers.replication`), with
the replication tables it shares with handlers, writers and the registrar
(:attr:`BrokerPlan.peers_name`, :attr:`BrokerPlan.isr_commits_name`). It is
built in the supervisor and read by workers; no worker changes it.

Rings are single-producer single-consumer, one per ordered pair of workers
that talk:

=========  =========================  ===================================
kind       producer -> consumer       carries
=========  =========================  ===================================
``req``    processor -> handler       request frames
``resp``   handler -> processor       answers (bytes and file ranges)
``app``    handler -> writer          appends, deletes, long polls
``res``    writer -> handler          their results
``ans``    writer -> processor        answers of one-partition acks=1 PRODUCEs
``put``    processor -> writer        lone PRODUCEs, past the handler
``capp``   handler -> coordinator     group requests, offset commits and fetches
``cres``   coordinator -> handler     their results
``cans``   coordinator -> processor   answers of GROUP_PUTs
``cput``   processor -> coordinator   lone commits, offset fetches, heartbeats
``rapp``   replica -> writer          a follower's appends and truncations
``rres``   writer -> replica          their results
``dctl``   logdirs -> writer          replica states and reopens of a log dir
``dres``   writer -> logdirs          their results
``dreq``   handler -> logdirs         topic admin of dir-placed replicas
``dans``   logdirs -> handler         its answers
=========  =========================  ===================================

The coordinator's four kinds are a writer's four with the coordinator in the
writer's place, carrying the same envelopes; handlers and processors hold
them after their writers' rings, at index :attr:`BrokerPlan.coordinator_peer`
(``num_writers``), so what they do for a writer (send, take results, fail
what was in flight when its epoch moves) they do for the coordinator.

The ``rapp`` and ``rres`` rings exist in cluster mode only (one pair per
writer, with the one ``hb-replica`` at index 0).

The ``dctl``, ``dres``, ``dreq`` and ``dans`` rings exist only on a standalone
broker with two or more log dirs (:attr:`BrokerPlan.logdirs`), with the one
``hb-logdirs`` (:mod:`hostbroker.workers.logdirs`) at index 0: it keeps the
replicas that a topic places on several log dirs of this broker.

With ``http.listeners`` set, one ``hb-http`` (:mod:`hostbroker.workers.http`,
:attr:`BrokerPlan.http`) serves them: it uses no ring (a request it needs
goes to the broker's own listener like a client's) and inherits the HTTP
listening sockets bound here (:attr:`BrokerPlan.http_listeners`) and the
admin token read at start (:attr:`BrokerPlan.http_admin_token`).

The ``ans``, ``cans``, ``rres``, ``dres`` and ``dans`` rings carry only small answers; they are
``ANSWER_RING_BYTES`` (or ``ring.bytes`` when that is smaller). The ``put``
and ``cput`` rings carry one request of a connection at a time; they are
``PUT_RING_BYTES`` (or ``ring.bytes``), so a lone PRODUCE of up to a quarter
of that goes past the handler. The others are ``ring.bytes``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket

from hostbroker.config import Config

KINDS = ("writer", "coordinator", "handler", "processor", "acceptor", "registrar", "replica",
         "logdirs", "http")
RING_KINDS = ("req", "resp", "app", "res", "ans", "put", "capp", "cres", "cans", "cput",
              "rapp", "rres", "dctl", "dres", "dreq", "dans")
ANSWER_KINDS = ("ans", "cans", "rres", "dres", "dans")
# who keeps counters in shm/stats.py: partition stats where partition data is
# appended or sent, API stats where answers are built (hb-logdirs' answers
# are relayed, and counted, by the handler that asked)
PARTITION_STATS_KINDS = ("writer", "handler", "processor")
API_STATS_KINDS = ("writer", "coordinator", "handler", "processor")
ANSWER_RING_BYTES = 1024 * 1024
PUT_RING_BYTES = 4 * 1024 * 1024
_CONSUMER_KIND = {"req": "handler", "resp": "processor", "app": "writer", "res": "handler",
                  "ans": "processor", "put": "writer", "capp": "coordinator", "cres": "handler",
                  "cans": "processor", "cput": "coordinator", "rapp": "writer",
                  "rres": "replica", "dctl": "writer", "dres": "logdirs", "dreq": "logdirs",
                  "dans": "handler"}


def shm_token(config: Config) -> str:
    """A name prefix stable across restarts of the same broker, so a start after
    a crash finds and removes what the crashed run left in /dev/shm."""
    seed = f"{config['broker.id']}:{os.path.abspath(config.log_dirs[0])}"
    return "hb-" + hashlib.sha1(seed.encode()).hexdigest()[:10]


@dataclasses.dataclass
class BrokerPlan:
    config: Config
    token: str
    num_writers: int
    num_handlers: int
    num_processors: int
    log_dirs: list[str]
    listeners: list[tuple[str, socket.socket]] = dataclasses.field(default_factory=list)
    # handoff[p] = (acceptor's end, processor p's end), SOCK_SEQPACKET
    handoff: list[tuple[socket.socket, socket.socket]] = dataclasses.field(default_factory=list)
    doorbells: dict[tuple[str, int], object] = dataclasses.field(default_factory=dict)
    admin_lock_key: int = 0
    registrar: bool = False  # cluster mode: one hb-registrar holds the ZooKeeper session
    replica: bool = False  # cluster mode: one hb-replica fetches for the follower partitions
    # standalone with >= 2 log dirs: one hb-logdirs keeps the replicas placed on log dirs
    logdirs: bool = False
    # log dir id per writer index (-1: unknown, that dir starts offline); set in the
    # supervisor's prepare (startup.resolve_dir_ids), copied into the LogDirTable, which
    # is what workers read (an id can be given to a new disk while the broker runs)
    dir_ids: list[int] = dataclasses.field(default_factory=list)
    # st_dev per writer index, taken with dir_ids (-1: unknown); hb-logdirs' placement
    # prefers distinct devices and never stats a dir in its loop
    dir_devices: list[int] = dataclasses.field(default_factory=list)
    http: bool = False  # http.listeners set: one hb-http serves them
    # the bound HTTP listening sockets (the supervisor's prepare), inherited by hb-http
    http_listeners: list[tuple[str, socket.socket]] = dataclasses.field(default_factory=list)
    # the console's admin token (http.admin.token.file, read at start), None when
    # disabled; never in the plan's repr, so no log of the plan shows it
    http_admin_token: bytes | None = dataclasses.field(default=None, repr=False)
    # the server SSLContext of the ssl:// listeners (workers/tls.py), built by the
    # supervisor's prepare before any fork; None without such a listener
    tls: object | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_config(cls, config: Config) -> "BrokerPlan":
        log_dirs = [os.path.abspath(d) for d in config.log_dirs]
        cluster = bool(config["zookeeper.connect"].strip())
        return cls(config=config, token=shm_token(config), num_writers=len(log_dirs),
                   num_handlers=config["num.handlers"],
                   num_processors=config["num.processors"], log_dirs=log_dirs,
                   registrar=cluster, replica=cluster,
                   logdirs=not cluster and len(log_dirs) >= 2,
                   http=bool(config.http_listeners))

    # -- names -------------------------------------------------------------
    @property
    def shm_prefix(self) -> str:
        return "/" + self.token + "-"

    def ring_name(self, kind: str, producer: int, consumer: int) -> str:
        return f"{self.shm_prefix}{kind}-{producer}-{consumer}"

    @property
    def table_name(self) -> str:
        return self.shm_prefix + "partitions"

    @property
    def board_name(self) -> str:
        return self.shm_prefix + "board"

    @property
    def peers_name(self) -> str:
        """The brokers this one has heard of from the controller (``shm/peers.py``)."""
        return self.shm_prefix + "peers"

    @property
    def isr_commits_name(self) -> str:
        """The ISRs the registrar wrote to ZooKeeper, per partition slot (``shm/partitions.py``)."""
        return self.shm_prefix + "isrcommits"

    @property
    def replicated_names_name(self) -> str:
        """The cluster's replicated topic names (``shm/topicnames.py``)."""
        return self.shm_prefix + "replnames"

    @property
    def access_name(self) -> str:
        """The ACLs and quotas every process reads (``shm/published.py``)."""
        return self.shm_prefix + "access"

    @property
    def quotas_name(self) -> str:
        """What each principal with a quota did lately, per processor (``shm/quotas.py``)."""
        return self.shm_prefix + "quotas"

    @property
    def logdirs_name(self) -> str:
        """The state of each log dir, by writer index (``shm/logdirs.py``)."""
        return self.shm_prefix + "logdirs"

    def stats_name(self, kind: str, index: int) -> str:
        """Worker ``kind`` ``index``'s partition stats (``shm/stats.py``)."""
        return f"{self.shm_prefix}pstats-{kind}-{index}"

    def api_stats_name(self, kind: str, index: int) -> str:
        """Worker ``kind`` ``index``'s API stats (``shm/stats.py``)."""
        return f"{self.shm_prefix}astats-{kind}-{index}"

    def stats_workers(self) -> list[tuple[str, int]]:
        """(kind, index) of every worker that keeps partition stats."""
        return [w for w in self.workers() if w[0] in PARTITION_STATS_KINDS]

    def api_stats_workers(self) -> list[tuple[str, int]]:
        """(kind, index) of every worker that keeps API stats."""
        return [w for w in self.workers() if w[0] in API_STATS_KINDS]

    def ring_pairs(self):
        """Every (kind, producer, consumer) ring of this broker."""
        for p in range(self.num_processors):
            for h in range(self.num_handlers):
                yield "req", p, h
                yield "resp", h, p
        for h in range(self.num_handlers):
            for w in range(self.num_writers):
                yield "app", h, w
                yield "res", w, h
        for w in range(self.num_writers):
            for p in range(self.num_processors):
                yield "ans", w, p
                yield "put", p, w
        for h in range(self.num_handlers):
            yield "capp", h, 0
            yield "cres", 0, h
        for p in range(self.num_processors):
            yield "cans", 0, p
            yield "cput", p, 0
        if self.replica:
            for w in range(self.num_writers):
                yield "rapp", 0, w
                yield "rres", w, 0
        if self.logdirs:
            for w in range(self.num_writers):
                yield "dctl", 0, w
                yield "dres", w, 0
            for h in range(self.num_handlers):
                yield "dreq", h, 0
                yield "dans", 0, h

    def ring_bytes(self, kind: str) -> int:
        """Data bytes of a ring of ``kind`` (a power of two, as ``ring.bytes`` is)."""
        size = self.config["ring.bytes"]
        if kind in ANSWER_KINDS:
            return min(size, ANSWER_RING_BYTES)
        return min(size, PUT_RING_BYTES) if kind in ("put", "cput") else size

    @property
    def coordinator_peer(self) -> int:
        """Where handlers and processors keep the coordinator's rings, bell and
        epoch: right after their writers' (see the module docstring)."""
        return self.num_writers

    def rings_consumed_by(self, kind: str, index: int):
        """The rings a worker reads (reset when that worker is replaced)."""
        for rkind, producer, consumer in self.ring_pairs():
            if _CONSUMER_KIND[rkind] == kind and consumer == index:
                yield rkind, producer, consumer

    # -- process board slots ----------------------------------------------
    @property
    def worker_count(self) -> int:
        return (self.num_writers + self.num_handlers + self.num_processors + 2 + self.registrar
                + self.replica + self.logdirs + self.http)

    def board_slot(self, kind: str, index: int) -> int:
        if kind == "writer":
            return index
        if kind == "handler":
            return self.num_writers + index
        if kind == "processor":
            return self.num_writers + self.num_handlers + index
        if kind == "coordinator":
            return self.num_writers + self.num_handlers + self.num_processors + 1
        if kind == "registrar":
            return self.num_writers + self.num_handlers + self.num_processors + 2
        if kind == "replica":  # after the registrar's slot when there is one
            return self.num_writers + self.num_handlers + self.num_processors + 2 + self.registrar
        if kind == "logdirs":  # after the registrar's and the replica's (never planned with it)
            return (self.num_writers + self.num_handlers + self.num_processors + 2
                    + self.registrar + self.replica)
        if kind == "http":  # last
            return (self.num_writers + self.num_handlers + self.num_processors + 2
                    + self.registrar + self.replica + self.logdirs)
        return self.num_writers + self.num_handlers + self.num_processors

    def workers(self):
        """(kind, index) of every worker, in start order."""
        for w in range(self.num_writers):
            yield "writer", w
        yield "coordinator", 0
        if self.replica:
            yield "replica", 0
        if self.logdirs:
            yield "logdirs", 0
        for h in range(self.num_handlers):
            yield "handler", h
        for p in range(self.num_processors):
            yield "processor", p
        yield "acceptor", 0
        if self.registrar:
            yield "registrar", 0
        if self.http:
            yield "http", 0

    def doorbell(self, kind: str, index: int):
        return self.doorbells[(kind, index)]

    def handler_for(self, conn_id: int) -> int:
        """All requests of one connection go to one handler (keeps their order)."""
        return (conn_id * 0x9E3779B1 >> 7) % self.num_handlers
