"""Broker settings: every key declared once, with type, default and meaning.

``SETTINGS`` is the single declaration. ``hostbroker serve --help``, the table
in ``docs/configuration.md`` (``python -m hostbroker.config``) and validation
all come from it. A :class:`Config` is built from a TOML file plus
``--set key=value`` overrides (later wins) and refuses, with one line naming
the key, an unknown key or a value of the wrong type or range.

Checks that need the machine (log dirs usable, listeners bindable) are done by
the supervisor at start; this module does no I/O beyond reading the TOML file.
"""

from __future__ import annotations

import dataclasses
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hostbroker.errors import ConfigError
from hostbroker.listeners import parse_listener
from hostbroker.settings_http import HTTP_LIST_CHECKS, HTTP_SETTINGS
from hostbroker.settings_logdirs import LOGDIRS_SETTINGS
from hostbroker.settings_security import SECURITY_CHECKS, SECURITY_SETTINGS
from hostbroker.settings_tls import TLS_SETTINGS
from hostbroker.zkconnect import parse_connect


@dataclasses.dataclass(frozen=True)
class Setting:
    key: str
    type: type
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns a problem or None
    kind: str = "scalar"  # "scalar" or "list" (comma-separated string or TOML array)
    empty_ok: bool = False  # a list that may name nothing (http.listeners: no HTTP listener)


def _at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def _between(lo: int, hi: int) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def _minus_one_or_at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v == -1 or v >= n else f"must be -1 or at least {n}"


def _power_of_two_at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: (None if v >= n and v & (v - 1) == 0
                      else f"must be a power of two, at least {n}")


def _listeners_problem(value: str) -> str | None:
    for uri in split_list(value):
        try:
            parse_listener(uri)
        except ValueError as e:
            return str(e)
    return None


def _zookeeper_connect_problem(value: str) -> str | None:
    if not value.strip():
        return None
    try:
        parse_connect(value)
    except ConfigError as e:
        return str(e).removeprefix("zookeeper.connect: ")
    return None


def parse_umask(value: str) -> int:
    """The mask of a ``log.umask`` value: 1 to 4 octal digits ("027", "0o027")."""
    digits = value.strip().removeprefix("0o")
    if not 1 <= len(digits) <= 4 or any(c not in "01234567" for c in digits) \
            or int(digits, 8) > 0o777:
        raise ValueError(f"{value!r} is not an octal file mode mask (000 to 777)")
    return int(digits, 8)


def _umask_problem(value: str) -> str | None:
    try:
        mask = parse_umask(value)
    except ValueError as e:
        return str(e)
    # the broker's own processes must still read and write what they create
    return "must leave the owner read, write and search (0o700 clear)" if mask & 0o700 else None


def _advertised_problem(value: str) -> str | None:
    return _listeners_problem(value) if value.strip() else None


SETTINGS: tuple[Setting, ...] = (
    Setting("broker.id", int, 0, "This broker's id, unique in a cluster.", _between(0, 2**31 - 1)),
    Setting("listeners", str, "tcp://127.0.0.1:9092,unix://./data/hostbroker.sock",
            "TCP and/or Unix sockets to serve: tcp://HOST:PORT (port 0-65535, IPv6 host in "
            "brackets), ssl://HOST:PORT (TCP with TLS: the ssl.* settings), unix://PATH (its "
            "directory must exist).",
            _listeners_problem, kind="list"),
    Setting("log.dirs", str, "./data/logs",
            "Log dirs, normally one per disk; one writer process each.", kind="list"),
    Setting("num.processors", int, 2, "Network processor processes.", _between(1, 256)),
    Setting("num.handlers", int, 2, "Request handler processes.", _between(1, 256)),
    Setting("num.partitions", int, 1, "Partitions of an auto-created topic.", _between(1, 100000)),
    Setting("auto.create.topics.enable", bool, True,
            "Create an unknown topic on its first produce."),
    Setting("log.segment.bytes", int, 1073741824, "Roll a new segment past this size.",
            _between(64, 2**31 - 1)),
    Setting("log.retention.hours", int, 168, "Delete segments older than this.",
            _minus_one_or_at_least(0)),
    Setting("log.retention.bytes", int, -1,
            "Delete the oldest segments while a partition is larger (-1: unlimited).",
            _minus_one_or_at_least(0)),
    Setting("log.retention.check.interval.ms", int, 300000, "How often retention runs.",
            _at_least(1)),
    Setting("log.flush.interval.messages", int, 10000,
            "fdatasync a partition after this many messages.", _at_least(1)),
    Setting("log.flush.interval.ms", int, 1000,
            "fdatasync a partition's unflushed data at least this often.", _at_least(1)),
    Setting("log.flush.offset.checkpoint.interval.ms", int, 60000,
            "How often each writer records flushed offsets, so crash recovery scans only "
            "what came after.", _at_least(1)),
    Setting("log.preallocate.bytes", int, 64 * 1024 * 1024,
            "Disk space an active segment reserves past its end (fallocate, keeping the "
            "file size), as much as it holds up to this much, so appends do not allocate "
            "blocks; given back when the segment rolls or the broker stops. 0 turns it off.",
            _between(0, 2**31 - 1)),
    Setting("message.max.bytes", int, 1000000, "Largest entry (length field) accepted.",
            _between(6, 2**31 - 1)),
    Setting("socket.request.max.bytes", int, 104857600, "Largest request frame accepted.",
            _between(64, 2**31 - 1)),
    Setting("max.connections", int, 10000,
            "Connections beyond this are closed at once.", _at_least(1)),
    # Cluster mode (docs/cluster.md): a broker registers itself in ZooKeeper.
    Setting("zookeeper.connect", str, "",
            "host:port[,host:port...][/chroot] of the cluster's ZooKeeper; empty = standalone.",
            _zookeeper_connect_problem),
    Setting("zookeeper.session.timeout.ms", int, 6000,
            "ZooKeeper session timeout of the broker's registration (hb-registrar): its "
            "nodes disappear this long after the broker is gone.", _between(400, 600000)),
    Setting("zookeeper.connection.timeout.ms", int, 6000,
            "How long the broker waits at start for a ZooKeeper server to answer; none "
            "answering refuses the start.", _between(1, 600000)),
    Setting("zookeeper.topics.recheck.ms", int, 20,
            "Shortest time between two reads of /brokers/topics that produces auto-creating "
            "an unknown topic ask of hb-registrar (a plain topic is made only after a read "
            "that began once the produce came, so never under a replicated topic's name).",
            _between(0, 60000)),
    Setting("advertised.listeners", str, "",
            "Listeners registered in ZooKeeper for clients (the first tcp:// and the first "
            "unix:// one); empty = the bound listeners (a tcp wildcard host advertises this "
            "host's name, port 0 the port bound).", _advertised_problem),
    # Replication: the controller (docs/cluster.md, "Replicated topics").
    Setting("unclean.leader.election.enable", bool, False,
            "Whether the controller may make a replica outside the ISR leader when no ISR "
            "member is live (messages acknowledged by the old ISR may be lost).", None),
    Setting("controller.socket.timeout.ms", int, 30000,
            "How long the controller waits to connect to a broker, send it a LEADER_AND_ISR "
            "or STOP_REPLICA, and read the answer, before reconnecting and sending again.",
            _between(1, 2**31 - 1)),
    Setting("controller.deletions.per.pass", int, 100,
            "Most topic deletions the controller starts in one look at "
            "/admin/delete_topics; the others wait for the next look (every 2 s).",
            _between(1, 1 << 20)),
    Setting("controlled.shutdown.enable", bool, True,
            "On SIGTERM the broker asks the controller to move its leaderships to other ISR "
            "members before it stops (producers see no error).", None),
    Setting("controlled.shutdown.timeout.ms", int, 10000,
            "Longest wait of a stopping broker for the controller to move its leaderships; "
            "past it the broker stops anyway.", _between(0, 2**31 - 1)),
    # Followers (hb-replica, docs/architecture.md "Followers"): fetching from leaders.
    Setting("replica.fetch.max.bytes", int, 1048576,
            "Message-set bytes a follower asks of each partition in one FETCH from its "
            "leader (more for a partition whose next entry is larger, up to "
            "socket.request.max.bytes).", _between(1024, 2**30)),
    Setting("replica.fetch.response.max.bytes", int, 10485760,
            "Most bytes one FETCH of a follower may bring back from its leader, all "
            "partitions together: partitions past it wait for the next FETCH (one "
            "partition always goes, with its replica.fetch.max.bytes); an answer "
            "announcing more than its request can bring is refused before it is read.",
            _between(1024, 2**30)),
    Setting("replica.fetch.wait.max.ms", int, 500,
            "Longest a follower's FETCH waits at its leader for new data (long poll).",
            _between(1, 600000)),
    Setting("replica.fetch.min.bytes", int, 1,
            "Bytes a follower's FETCH waits for at its leader before it is answered (at "
            "least 1: an idle follower must not ask again and again).", _between(1, 2**30)),
    Setting("replica.socket.timeout.ms", int, 30000,
            "A leader that has not answered a follower's request this long after its "
            "long-poll wait (or not accepted its connection this long) is disconnected; "
            "the follower connects again after replica.fetch.backoff.ms.", _at_least(1)),
    Setting("replica.fetch.backoff.ms", int, 1000,
            "How long a follower waits before it tries a partition (or a leader) again "
            "after an error (at least 10: a leader that refuses at once must not make "
            "the follower spin).", _between(10, 600000)),
    # Limits and sizes of this implementation (all enforced).
    Setting("max.in.flight.requests.per.connection", int, 1000,
            "A processor stops reading a connection with this many requests not completely "
            "answered (an answer counts until its last byte is written).",
            _at_least(1)),
    Setting("max.partitions", int, 65536,
            "Slots in the shared partition table: the most partitions this broker holds.",
            _between(1, 1 << 24)),
    Setting("max.partitions.per.topic", int, 10000,
            "Most partitions one topic may have (at most 100000: partition dir names of "
            "249-character topics must fit 255 bytes).", _between(1, 100000)),
    Setting("ring.bytes", int, 16 * 1024 * 1024,
            "Capacity of each shared-memory ring between two workers.",
            _power_of_two_at_least(65536)),
    Setting("fetch.max.wait.ms", int, 300000,
            "Longest long-poll a FETCH may ask for (max_wait_ms is capped to it).", _at_least(0)),
    Setting("fetch.max.parked", int, 10000,
            "Most long-poll fetches one handler or one writer (fetch.writer.polls) holds; "
            "past it a writer gives them back to the handler, and a handler answers them at "
            "once.",
            _at_least(0)),
    Setting("segment.fd.cache.size", int, 256,
            "Open segment files each processor keeps for sendfile.", _at_least(1)),
    Setting("admin.lock.timeout.ms", int, 10000,
            "How long topic creation or deletion waits for the admin lock before "
            "answering BROKER_NOT_AVAILABLE.", _at_least(1)),
    Setting("worker.heartbeat.timeout.ms", int, 3000,
            "A worker whose heartbeat (a thread, beating 8 times per timeout) is silent "
            "this long, stopped or frozen, is aborted and replaced.", _at_least(100)),
    Setting("worker.spin.us", int, 0,
            "After a loop round that had work, a processor, handler or writer keeps looking "
            "for more this many microseconds before it sleeps on its doorbell: no wake-up "
            "when work follows quickly, at the cost of a busy core meanwhile. 0 never spins, "
            "the right choice when workers outnumber the cores (see docs/benchmarks-history.md).",
            _between(0, 100000)),
    Setting("processor.put.spin.us", int, 0,
            "A processor with a lone PRODUCE at a writer (processor.direct.produce), whose "
            "answer is on its way, keeps looking for it this many microseconds before it "
            "sleeps: the writer need not wake it. 0 never spins.", _between(0, 100000)),
    Setting("cpu.wakeup.latency.us", int, -1,
            "While the broker runs it holds a PM QoS request (/dev/cpu_dma_latency) that idle "
            "CPUs take only idle states they leave within this many microseconds: a request "
            "crosses several processes, and each crossing that finds an idle CPU waits for "
            "it to wake. 0 keeps idle CPUs polling (the fastest wake-ups; idle cores stay "
            "busy). -1 leaves the machine as it is. Machine-wide; needs root (the broker "
            "refuses to start without it); docs/benchmarks-history.md measures it. It works through "
            "the kernel's `cpuidle` driver: on a machine without one "
            "(`/sys/devices/system/cpu/cpuidle/current_driver` says `none`, as on some VMs) "
            "idle CPUs halt whatever the request says, and only the kernel's own options "
            "change that (`cpuidle_haltpoll.force=1` on a KVM guest, or `idle=poll`, on its "
            "command line); the broker says so in one line at start.",
            _between(-1, 2_000_000_000)),
    Setting("cpu.realtime.priority", int, 0,
            "Above 0, the broker puts itself and every worker under the real-time SCHED_RR "
            "policy at this priority (1-99) before it starts them: a process of it that wakes "
            "takes a CPU from ordinary processes at once, which keeps the tail of latency low "
            "on a machine that other work keeps busy. 0 leaves the scheduling as started (a "
            "unit's CPUSchedulingPolicy= or chrt may set it). Needs root, CAP_SYS_NICE or a "
            "real-time priority limit (the broker refuses to start without it); under any "
            "real-time policy the spin settings must be 0. docs/benchmarks-history.md measures it.",
            _between(0, 99)),
    Setting("processor.local.requests", bool, True,
            "Processors answer METADATA and OFFSETS themselves, from the partition table, "
            "for a connection with no request at its handler: two process crossings fewer "
            "for each. false sends every request to the connection's handler."),
    Setting("produce.direct.answers", bool, True,
            "A PRODUCE of one partition with acks=1 is answered by the partition's writer "
            "straight to the client's processor, once its data is in the log: one process "
            "crossing fewer. false: every PRODUCE answer comes from the handler."),
    Setting("processor.direct.produce", bool, True,
            "A lone PRODUCE (one partition, acks=1, nothing else of its connection in flight "
            "or behind it, the partition's writer idle or the request small: "
            "processor.direct.produce.busy.max.bytes) goes from the processor straight to "
            "the writer, which checks it as a handler would and answers it: two process "
            "crossings fewer. false: every PRODUCE goes through the connection's handler."),
    Setting("processor.direct.groups", bool, True,
            "An OFFSET_COMMIT, OFFSET_FETCH or HEARTBEAT from a connection with no request "
            "at its handler goes from the processor straight to hb-coordinator, which holds "
            "the offsets and the groups and answers it: two process crossings fewer. false: "
            "through the connection's handler."),
    Setting("processor.direct.groups.max.partitions", int, 64,
            "Most partitions an OFFSET_COMMIT or OFFSET_FETCH may name to go straight to "
            "hb-coordinator (processor.direct.groups); one naming more goes through the "
            "handler. A "
            "processor holds its other connections while it decodes and checks one.",
            _at_least(1)),
    Setting("processor.direct.lone.after", int, 8,
            "A connection that sent more while a request of it was at a writer past the "
            "handler (processor.direct.produce, processor.direct.groups) is pipelining: its "
            "requests go through the handler, where a PUT would stall its pipeline. It may go "
            "past the handler again once this many of its requests in a row reached the "
            "handler with nothing else of it in flight (it waits for each answer again). "
            "0: never again for that connection.", _at_least(0)),
    Setting("processor.direct.produce.busy.max.bytes", int, 4096,
            "A lone PRODUCE frame of at most this many bytes goes straight to its writer "
            "(processor.direct.produce) even while that writer is busy: checking so small a "
            "set costs the writer less than the handler's crossing costs the request, and "
            "that detour is where a busy moment sends a message's latency up "
            "(docs/benchmarks-history.md). A larger one meets a busy writer through the handlers, "
            "which check large sets side by side. 0: only to an idle writer.",
            _between(0, 1 << 20)),
    Setting("processor.direct.produce.max.bytes", int, 256 * 1024,
            "A lone PRODUCE whose first bytes show it may go straight to the writer "
            "(processor.direct.produce) is received into the writer's put ring as it arrives, "
            "whatever its size. One that cannot be told so early (its writer busy then) is "
            "gathered in the processor and decided when whole if at most this large; a larger "
            "one takes the handler's way, received into the request ring as it arrives: "
            "gathering and copying it would cost more than the process crossing a PUT saves "
            "(docs/benchmarks-history.md).", _at_least(0)),
    Setting("processor.local.fetch", bool, True,
            "A FETCH of at most processor.fetch.max.partitions partitions from a connection "
            "with no request at its handler is answered by its processor, from the partition "
            "table; one that must wait for data waits there, answered when writers' appends "
            "bring min_bytes or at its deadline: no other process takes part. false: every "
            "FETCH goes to the connection's handler."),
    Setting("processor.fetch.max.partitions", int, 64,
            "Most partitions a FETCH may name to be answered by its processor "
            "(processor.local.fetch); one naming more goes to the handler. A processor "
            "holds its other connections while it looks a FETCH's partitions up "
            "(docs/benchmarks-history.md measures it per partition). 1: only one-partition FETCHes.",
            _at_least(1)),
    Setting("processor.fetch.copy.max.bytes", int, 32768,
            "A FETCH answer whose data is at most this many bytes, all its partitions "
            "together, is read into memory and sent with its headers in one write; a larger "
            "one is sent with sendfile, a call per partition. Each connection holds at most "
            "one such answer in memory while it is written. 0: always sendfile.",
            _between(0, 1 << 20)),
    Setting("processor.fetch.max.parked", int, 256,
            "Most partitions the FETCHes one processor holds waiting for data wait on, "
            "together (processor.local.fetch); a FETCH that would pass it goes to the "
            "handler, which leaves one of a single partition at its writer "
            "(fetch.writer.polls). Each append anywhere costs a processor that holds some "
            "one partition-table read per partition they wait on.",
            _at_least(0)),
    Setting("fetch.writer.polls", bool, True,
            "A long-poll FETCH of one partition waits at that partition's writer, which "
            "answers it to the client's processor as soon as an append brings the data: one "
            "process crossing fewer between a produce and the fetch that returns it. false: "
            "the handlers hold every long poll."),
    Setting("processor.ring.receive", bool, True,
            "A request frame of 64 KiB or more is received straight into its record in the "
            "handler's request ring as its bytes arrive, not gathered in the connection's "
            "buffer first: one copy fewer. Another frame bound for the same ring meanwhile "
            "moves what came of it to the connection's buffer, so nobody waits behind a "
            "slow sender. false gathers it first unless all of its rest is already waiting "
            "in the socket."),
    Setting("produce.ring.append.min.bytes", int, 65536,
            "A message set of at least this many bytes in a PRODUCE is appended by its writer "
            "straight from the request ring it arrived in (the handler holds that space until "
            "the writer has appended it) instead of being copied into the writer's ring. "
            "0 copies every message set.", _at_least(0)),
    Setting("worker.boot.timeout.ms", int, 600000,
            "How long a worker may take to start (writers recover their logs first).",
            _at_least(100)),
    Setting("shutdown.timeout.ms", int, 30000,
            "How long a graceful shutdown waits for in-flight work.", _at_least(0)),
    # Connection limits (processor, acceptor).
    Setting("connection.linger.ms", int, 1000,
            "After the error frame (or the close with no answer) that ends a connection, the "
            "broker sends EOF and reads and drops what the client still sends, for at most "
            "this long, before it closes (a close with unread bytes is a TCP reset, which can "
            "destroy the error frame on its way); 0 closes at once.", _at_least(0)),
    Setting("connection.linger.max.bytes", int, 16777216,
            "Most bytes read and dropped from a connection ending after an error frame (see "
            "connection.linger.ms); past them it closes at once.", _at_least(0)),
    Setting("connections.max.idle.ms", int, 600000,
            "A connection that moves no byte this long, with no request at its handler, is "
            "closed.", _at_least(1)),
    Setting("socket.request.read.timeout.ms", int, 30000,
            "A request frame whose first bytes came must be complete this long after "
            "(counted while the broker reads the connection), or the connection is closed.",
            _at_least(1)),
    Setting("connection.max.queued.bytes", int, 4194304,
            "A processor stops reading a connection while this many bytes of its answers "
            "wait to be written (an answer counts until its last byte is out).", _at_least(1)),
    Setting("connection.max.handler.requests", int, 32,
            "Requests of one connection its handler holds at once (in the request ring or "
            "being served); more wait unread, so one connection's burst cannot delay the "
            "others.", _at_least(1)),
    # Request limits (handler).
    Setting("request.max.entries", int, 10000,
            "Most array entries (partitions, topics, topic configs) in one request, all arrays "
            "together; more is answered with an INVALID_REQUEST error frame and the connection "
            "closes, before the entries are decoded.", _between(1, 2**31 - 1)),
    Setting("fetch.max.bytes", int, 52428800,
            "Most message-set bytes in one FETCH answer, all partitions together: each "
            "partition gets at most what is left of it, partitions past it get empty sets.",
            _between(1024, 2**30)),
    Setting("response.max.bytes", int, 104857600,
            "Largest answer a handler builds in memory (FETCH data sent from files not "
            "counted); a request whose answer would be larger is answered with an "
            "INVALID_REQUEST error frame and the connection closes.", _between(65536, 2**30)),
    Setting("offset.metadata.max.bytes", int, 4096,
            "Longest metadata (UTF-8 bytes) of one OFFSET_COMMIT entry; a longer one is "
            "refused with INVALID_REQUEST for that partition.", _between(0, 32767)),
    # Offsets store limits (hb-coordinator).
    Setting("offsets.record.max.bytes", int, 67108864,
            "Largest record of the consumer offsets store (one OFFSET_COMMIT request); a "
            "larger commit is refused with INVALID_REQUEST, never written.",
            _between(1024, 2**30)),
    Setting("offsets.compact.min.bytes", int, 16777216,
            "The consumer offsets store is not compacted while smaller than this.",
            _at_least(0)),
    Setting("offsets.compact.ratio", int, 4,
            "Compact the consumer offsets store when its file is this many times the size "
            "of its live offsets (and over offsets.compact.min.bytes).", _at_least(2)),
    Setting("offsets.list.max.pages", int, 16,
            "Pages of hb-coordinator's group list (one ring message each) one "
            "LIST_OFFSET_GROUPS filtered by the authorizer walks at most; past them the "
            "answer holds what the pages walked showed, truncated 1.", _between(1, 1000000)),
    # Consumer group coordinator (hb-coordinator; docs/spec/groups.md).
    Setting("group.max.members", int, 1000,
            "Members of one group; a JOIN_GROUP of one more is answered GROUP_TOO_LARGE.",
            _between(1, 1000000)),
    Setting("group.max.groups", int, 10000,
            "Groups with members on the broker; a JOIN_GROUP of one more is answered "
            "TOO_MANY_GROUPS.", _between(1, 10000000)),
    Setting("group.min.session.timeout.ms", int, 500,
            "Shortest session timeout a JOIN_GROUP may ask (else INVALID_SESSION_TIMEOUT).",
            _between(1, 2**31 - 1)),
    Setting("group.max.session.timeout.ms", int, 300000,
            "Longest session timeout a JOIN_GROUP may ask (else INVALID_SESSION_TIMEOUT).",
            _between(1, 2**31 - 1)),
    Setting("group.max.rebalance.timeout.ms", int, 10000,
            "Longest a rebalance waits for the members to rejoin; a member's "
            "rebalance_timeout_ms is capped to it, so a member that stalls mid-rebalance "
            "holds its group at most this long.", _between(1, 2**31 - 1)),
    Setting("group.max.topics.per.member", int, 1000,
            "Topics one member subscribes to; more is answered INVALID_REQUEST.",
            _between(1, 1000000)),
    Setting("group.max.streams", int, 10000,
            "Streams of one group: the stream counts of every topic of every member's "
            "subscription, added up. A JOIN_GROUP whose own subscription has more is "
            "answered INVALID_REQUEST, one that would take its group past it "
            "GROUP_TOO_LARGE. It bounds a rebalance's work, a SYNC_GROUP or DESCRIBE_GROUP "
            "answer and the group's record in the state file.", _between(1, 1000000)),
    Setting("group.rebalance.burst", int, 3,
            "Rebalances a group may start back to back; past them it starts at most one "
            "each group.rebalance.min.interval.ms (the changes meanwhile wait for it), so "
            "join and leave churn cannot keep a group from settling.", _between(1, 1000)),
    Setting("group.rebalance.min.interval.ms", int, 2000,
            "Once a group has used its group.rebalance.burst, the least time between the "
            "starts of two of its rebalances (0: no limit).", _between(0, 2**31 - 1)),
    Setting("group.max.parked.joins", int, 10000,
            "JOIN_GROUP requests one handler holds while their rebalance waits; one more is "
            "answered BROKER_NOT_AVAILABLE at once (join again later).", _between(1, 10000000)),
    # Replication (cluster mode): the leader's writer.
    Setting("min.insync.replicas", int, 1,
            "Replicas (the leader included) that must be in a replicated partition's ISR "
            "for an acks=-1 produce to be appended; fewer: NOT_ENOUGH_REPLICAS, nothing "
            "appended. Also a topic config.", _between(1, 8)),
    Setting("replica.lag.time.max.ms", int, 10000,
            "A follower that has not fetched up to the leader's log end for this long "
            "leaves the ISR (and rejoins once caught up).", _between(1, 2**31 - 1)),
    Setting("replica.lag.max.bytes", int, 4194304,
            "A follower whose fetch position is more than this many bytes behind the "
            "leader's log end leaves the ISR at once, however recently it fetched "
            "(-1: no byte bound, only replica.lag.time.max.ms).", _minus_one_or_at_least(1)),
    # Storage and start-up.
    Setting("log.umask", str, "027",
            "File mode creation mask (octal) the supervisor sets before it creates anything, "
            "so every worker inherits it: files are created 0666 and dirs 0777 less this "
            "(027: segments, offsets and group state 0640, dirs 0750, nothing for other "
            "users). Unix listener sockets are 0660 whatever it is.", _umask_problem),
    # Supervision and service.
    Setting("worker.stall.timeout.ms", int, 60000,
            "A worker whose main loop has not come round this long (stuck in one piece of "
            "work) stops beating and is replaced after worker.heartbeat.timeout.ms more.",
            _at_least(100)),
    *(Setting(k, t, d, doc, _between(lo, hi)) for k, t, d, doc, lo, hi in LOGDIRS_SETTINGS),
    *(Setting(k, t, d, doc, HTTP_LIST_CHECKS[k], kind="list", empty_ok=True)
      if k in HTTP_LIST_CHECKS else Setting(k, t, d, doc, bounds and _between(*bounds))
      for k, t, d, doc, bounds in HTTP_SETTINGS),
    *(Setting(k, t, d, doc, SECURITY_CHECKS.get(k) or (bounds and _between(*bounds)))
      for k, t, d, doc, bounds in SECURITY_SETTINGS),
    *(Setting(k, t, d, doc, check) for k, t, d, doc, check in TLS_SETTINGS),
)

SETTINGS_BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else "must be one of " + ", ".join(choices)


def at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def between(lo: int, hi: int) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def coerce(setting: Setting, value: Any) -> Any:
    """Turn a TOML value or a ``--set`` string into the setting's type."""
    key = setting.key
    if setting.kind == "list":
        if isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{key}: expected a list of strings")
            return ",".join(value)
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if setting.type is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if setting.type is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip(), 10)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _flatten(table: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """TOML ``[log] dirs = ...`` and ``"log.dirs" = ...`` both name ``log.dirs``."""
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in SETTINGS_BY_KEY:
            yield from _flatten(v, key + ".")
        else:
            yield key, v


class Config:
    """Validated settings. ``config["log.dirs"]`` and typed accessors."""

    def __init__(self, values: Mapping[str, Any]):
        self._values = dict(values)

    @classmethod
    def build(cls, file_values: Mapping[str, Any] | None = None,
              overrides: Iterable[str] = ()) -> "Config":
        values = {s.key: s.default for s in SETTINGS}
        for key, raw in _flatten(file_values or {}):
            values[key] = cls._checked(key, raw)
        for item in overrides:
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep:
                raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
            values[key] = cls._checked(key, raw)
        return cls(values)

    @classmethod
    def load(cls, path: str | None, overrides: Iterable[str] = ()) -> "Config":
        file_values: dict[str, Any] = {}
        if path:
            try:
                with open(path, "rb") as f:
                    file_values = tomllib.load(f)
            except OSError as e:
                raise ConfigError(f"config file {path}: {e.strerror}") from None
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"config file {path}: {e}") from None
        return cls.build(file_values, overrides)

    @staticmethod
    def _checked(key: str, raw: Any) -> Any:
        setting = SETTINGS_BY_KEY.get(key)
        if setting is None:
            raise ConfigError(f"{key}: unknown configuration key")
        return checked(setting, raw)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def log_dirs(self) -> list[str]:
        return split_list(self["log.dirs"])

    @property
    def listeners(self) -> list[str]:
        return split_list(self["listeners"])

    @property
    def http_listeners(self) -> list[str]:
        return split_list(self["http.listeners"])

    def log_defaults(self):
        """The broker-wide defaults of every topic's log config."""
        from hostbroker.log.config import LogConfig

        hours = self["log.retention.hours"]
        return LogConfig(
            segment_bytes=self["log.segment.bytes"],
            retention_ms=-1 if hours == -1 else hours * 3600 * 1000,
            retention_bytes=self["log.retention.bytes"],
            flush_messages=self["log.flush.interval.messages"],
            flush_ms=self["log.flush.interval.ms"],
            max_message_bytes=self["message.max.bytes"],
            min_insync_replicas=self["min.insync.replicas"],
            preallocate_bytes=self["log.preallocate.bytes"],
        )


def checked(setting: Setting, raw: Any) -> Any:
    """``raw`` (a TOML value, a keyword argument or a ``KEY=VALUE`` string) as
    the setting's type, or ConfigError naming the key and the problem."""
    key = setting.key
    value = coerce(setting, raw)
    if setting.check is not None:
        problem = setting.check(value)
        if problem:
            raise ConfigError(f"{key}: {problem} (got {value!r})")
    if setting.kind == "list" and not setting.empty_ok and not split_list(value):
        raise ConfigError(f"{key}: must name at least one entry")
    return value


def split_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def help_text(settings: Iterable[Setting] = SETTINGS) -> str:
    """The settings as a plain-text list, for ``--help``."""
    lines = []
    for s in settings:
        lines.append(f"  {s.key} (default {s.default!r})\n      {s.doc}")
    return "\n".join(lines)


def markdown_table(settings: Iterable[Setting] = SETTINGS) -> str:
    """The settings as a Markdown table (the broker's: docs/configuration.md)."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for s in settings:
        typename = "list" if s.kind == "list" else s.type.__name__
        default = str(s.default).lower() if s.type is bool else s.default
        rows.append(f"| `{s.key}` | {typename} | `{default}` | {s.doc} |")
    return "\n".join(rows)


def _main(argv: list[str]) -> int:
    """Print the broker's table, or with ``MODULE:ATTRIBUTE`` that tuple of Settings's
    (a client's: ``hostbroker.client.producer:PRODUCER_SETTINGS``)."""
    if not argv:
        print(markdown_table())
        return 0
    if len(argv) != 1 or ":" not in argv[0]:
        print("usage: python -m hostbroker.config [MODULE:ATTRIBUTE]", file=sys.stderr)
        return 2
    import importlib

    module, _, attribute = argv[0].partition(":")
    print(markdown_table(getattr(importlib.import_module(module), attribute)))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
