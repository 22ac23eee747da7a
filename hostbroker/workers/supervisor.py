"""The supervisor process, ``hb-supervisor``: the only process that spawns.

Owns: the configuration; all shared memory (it creates every ring, the
partition table, the process board and the admin lock, and is the only one to
unlink them, at shutdown and again at the next start after a crash); the
listening sockets (bound here so a bind failure stops the start with one
line); the doorbells and hand-off socket pairs the workers inherit; the CPU
wake-up latency request (``cpu.wakeup.latency.us``, :mod:`hostbroker.cpulatency`),
held from the start until the workers are gone; the scheduling policy every
worker inherits (``cpu.realtime.priority``, :mod:`hostbroker.cpusched`); and
the workers themselves.

Start: take the real-time policy and the CPU wake-up latency request if asked
to (refusing to spin under a real-time policy), set the umask (``log.umask``),
build the TLS server context of ``ssl://`` listeners (``workers/tls.py``: a bad
certificate or key refuses the start in one line), check the log dirs (as root: none that others may write) and the unix
listeners' directories (changing nothing), create the log dirs, take the
broker lock, give each log dir its id, bind the listeners (not listening yet: a connection is
refused), take this run's shared-memory lease and remove what dead runs left
there, create shared memory, fork the writers (each recovers its log dir) and
the coordinator (``hb-coordinator``: the consumer groups and offsets) and wait
until they are ready, in cluster mode the follower fetcher (``hb-replica``), with
two or more log dirs standalone the local controller (``hb-logdirs``),
then the handlers and the processors, and in cluster
mode (``zookeeper.connect``) the registrar, ready once it has registered the
broker in ZooKeeper (a ``broker.id`` held by a live broker refuses the start);
only then listen and fork the acceptor, so a broker that is refused never
accepts a connection; then, with ``http.listeners`` set, listen on those and
fork ``hb-http`` (its admin token was read with the other checks, a bad
token file refusing the start in one line); then tell systemd ``READY=1``.
While waiting,
``EXTEND_TIMEOUT_USEC`` every 5 s keeps systemd's start timeout from ending a
long log recovery. A start that cannot succeed here exits
``ExitStatus.REFUSED`` (78) with one line (a worker that exits
``EXIT_REFUSED`` has said it itself: ZooKeeper does not answer, the broker
id is taken).

Loop: signal handlers only queue the signal (``signal.set_wakeup_fd``); the
loop reaps children with ``waitpid(WNOHANG)`` and replaces any that died
(after resetting the rings it consumed and bumping its epoch on the board, so
its peers fail what was in flight with it), aborts workers whose heartbeat is
older than ``worker.heartbeat.timeout.ms`` (SIGABRT with SIGCONT, so a stopped
one takes it; SIGKILL a second later), and pings the systemd watchdog. A
worker that exits with ``EXIT_BOOT_FAILED`` halts the broker instead of being
respawned forever; a writer that exits ``EXIT_REOPEN`` (told to open its
offline log dir afresh) is replaced without a word. The reaping, the exit
codes, the replacement and the heartbeat watch are
:mod:`hostbroker.workers.respawn`'s (mixed in). Workers need no word from
us if we die: each asked the kernel for SIGTERM on our death right after its
fork (``die_with_parent``).

Stop (SIGTERM/SIGINT): first hb-http (no page is left half-asked), then the
registrar (its ZooKeeper session closes, so the registrations go before the
listeners close), then in data-flow order,
each group finishing its in-flight work first: acceptor, processors (answer
what they have), handlers, the follower fetcher (nothing it fetched is
appended after the writers stop), the coordinator (syncs and answers the commits it
holds), writers (flush, clean-shutdown marker); then
remove shared memory and Unix socket files, and exit 0.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import sys
import time

from hostbroker import cpulatency, cpusched, systemd
from hostbroker.cluster import zkread
from hostbroker.config import Config, parse_umask
from hostbroker.errors import ConfigError, ExitStatus
from hostbroker.security.requests import start_warnings
from hostbroker.shm import procs
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.logdirs import LogDirTable
from hostbroker.shm.doorbell import Doorbell
from hostbroker.shm.partitions import IsrCommitTable, PartitionTable
from hostbroker.shm.procs import ProcessBoard
from hostbroker.shm.region import (SharedRegion, release_lease, remove_stale, sweep_dead_runs,
                                   take_lease)
from hostbroker.shm.peers import MAX_PEERS, PeersTable
from hostbroker.shm.stats import ApiStats, PartitionStats
from hostbroker.shm.ring import Ring
from hostbroker.shm.topicnames import ReplicatedNames
from hostbroker.web.auth import AdminTokenError, load_admin_token
from hostbroker.workers import tls
from hostbroker.workers.access import publish_at_start
from hostbroker.workers.throttle import make_quota_counters
from hostbroker.workers.acceptor import AcceptorWorker
from hostbroker.workers.coordinator import CoordinatorWorker
from hostbroker.workers.base import child_main, die_with_parent, set_process_name
from hostbroker.workers.handler import HandlerWorker
from hostbroker.workers.http.worker import HttpWorker
from hostbroker.workers.logdirs import LogDirsWorker
from hostbroker.workers.plan import BrokerPlan
from hostbroker.workers.processor import ProcessorWorker
from hostbroker.workers.registrar import RegistrarWorker
from hostbroker.workers.replication import ReplicaWorker
from hostbroker.workers.respawn import Respawn
from hostbroker.workers.startup import (StartError, StoppedWhileStarting, bind_http_listener,
                                       bind_listener, check_log_dir, check_overlap,
                                       check_unix_listener_dir, claim_broker_lock,
                                       listen_http, make_log_dir, resolve_dir_ids)
from hostbroker.workers.writer import WriterWorker

WORKER_CLASSES = {"writer": WriterWorker, "handler": HandlerWorker,
                  "processor": ProcessorWorker, "acceptor": AcceptorWorker,
                  "registrar": RegistrarWorker, "coordinator": CoordinatorWorker,
                  "replica": ReplicaWorker, "logdirs": LogDirsWorker, "http": HttpWorker}
KIND_CODES = procs.KIND_CODES
# hb-http first (its pages ask the broker, which must still answer), then the
# registrar: the registrations go before the listeners close
STOP_ORDER = ("http", "registrar", "acceptor", "processor", "handler", "replica", "logdirs",
              "coordinator", "writer")
_TICK_S = 0.25
_EXTEND_EVERY_S = 5.0  # while starting or stopping: tell systemd to wait 3 times that


class Supervisor(Respawn):
    def __init__(self, config: Config):
        self.config = config
        self.plan = BrokerPlan.from_config(config)
        self.children: dict[int, tuple[str, int]] = {}  # pid -> (kind, index)
        self.pids: dict[tuple[str, int], int] = {}
        self.started_at: dict[tuple[str, int], float] = {}
        # a replacement hb-http that could not boot: its failures in a row, and
        # (index, when) it is tried again (respawn._http_boot_failed)
        self.http_boot_failures = 0
        self.http_retry_at: tuple[int, float] | None = None
        self.epochs: dict[tuple[str, int], int] = {}
        self.kill_sent: dict[int, tuple[int, float]] = {}
        self.regions: list[SharedRegion] = []
        self.stopping = False
        self.exit_code = 0
        self.signals: list[int] = []
        self._next_extend = 0.0  # monotonic time of the next EXTEND_TIMEOUT_USEC

    # -- start ---------------------------------------------------------------
    def prepare(self) -> None:
        """Everything that can fail with a one-line reason, before any fork."""
        plan = self.plan
        config = self.config
        try:  # TLS between brokers: what it needs, and who the others see this one as
            self.inter_broker_principal = tls.check_inter_broker(config)
        except tls.TlsConfigError as e:
            raise StartError(str(e)) from None
        self._take_cpu_policy()  # (says the start warnings)
        if config["cpu.wakeup.latency.us"] >= 0:
            try:
                self.cpu_latency_fd = cpulatency.hold(config["cpu.wakeup.latency.us"])
            except cpulatency.CpuLatencyError as e:
                raise StartError(f"cpu.wakeup.latency.us: {e}") from None
            why = cpulatency.no_effect()
            if why is not None:
                print(f"hostbroker: cpu.wakeup.latency.us: {why}", file=sys.stderr, flush=True)
        # before anything is created, so every worker inherits it (files 0666, dirs 0777 less it)
        os.umask(parse_umask(config["log.umask"]))
        if plan.http:
            try:
                plan.http_admin_token = load_admin_token(config)
            except AdminTokenError as e:
                raise StartError(str(e)) from None
        if any(uri.startswith("ssl://") for uri in config.listeners):
            try:
                plan.tls = tls.server_context(config)  # a bad certificate or key: one line
            except tls.TlsConfigError as e:
                raise StartError(str(e)) from None
        if len(set(plan.log_dirs)) != len(plan.log_dirs):
            raise StartError("log.dirs: a log dir is listed twice")
        for path in plan.log_dirs:
            check_log_dir(path)
        for uri in config.listeners:
            check_unix_listener_dir(uri, plan.log_dirs)
        for path in plan.log_dirs:
            make_log_dir(path)
        # Before anything named after this broker is touched: the shared memory
        # of a broker running on these log dirs has the very same names.
        self.lock_fd = claim_broker_lock(plan.log_dirs[0])
        resolve_dir_ids(plan)
        for uri in config.listeners:
            plan.listeners.append((uri, bind_listener(uri)))
        for uri in config.http_listeners:
            plan.http_listeners.append((uri, bind_http_listener(uri)))
        check_overlap([("listeners", uri, sock) for uri, sock in plan.listeners]
                      + [("http.listeners", uri, sock) for uri, sock in plan.http_listeners])
        for uri, sock in plan.http_listeners:
            listen_http(uri, sock)
        # A stop asked for while the shared memory is made comes once it is all
        # listed, so that the stop removes every piece of it (cleanup()).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._make_shared_memory()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _make_shared_memory(self) -> None:
        """This run's lease, the sweep of dead runs, then every segment, the admin
        lock, the doorbells and the hand-off pairs the workers inherit."""
        plan = self.plan
        config = self.config
        try:
            self.lease_fd = take_lease(plan.token)
        except (OSError, TimeoutError) as e:
            raise StartError(f"shared memory: cannot take this broker's lease: {e}") from None
        try:
            remove_stale(plan.shm_prefix)  # our own crashed run's
            AdminLock.remove_stale(plan.token)
        except OSError as e:  # someone else's object under our name
            raise StartError(f"shared memory: cannot remove what this broker's last run "
                             f"left: {e}") from None
        # and those of any broker run that is gone (killed whole, never restarted)
        sweep_dead_runs(AdminLock.remove_stale, _report_unswept)
        for kind, producer, consumer in plan.ring_pairs():
            capacity = plan.ring_bytes(kind)
            region = SharedRegion.create(plan.ring_name(kind, producer, consumer),
                                         Ring.region_size(capacity))
            self.regions.append(region)
            Ring.create(region, capacity)
        region = SharedRegion.create(plan.table_name,
                                     PartitionTable.region_size(config["max.partitions"]))
        self.regions.append(region)
        self.table = PartitionTable.create(region, config["max.partitions"])
        region = SharedRegion.create(plan.board_name, ProcessBoard.region_size(plan.worker_count))
        self.regions.append(region)
        self.board = ProcessBoard.create(region, plan.worker_count)
        self.board.set_supervisor(os.getpid())
        self._make_stats_tables()
        # (standalone too: a standalone broker takes LEADER_AND_ISR by hand, as tests do)
        self._make_replication_tables()
        self.regions.append(publish_at_start(plan.access_name, plan.log_dirs[0], config))
        self.regions.append(make_quota_counters(plan, config))
        self.admin_lock = AdminLock.create(plan.token)
        plan.admin_lock_key = self.admin_lock.key
        for kind, index in plan.workers():
            plan.doorbells[(kind, index)] = Doorbell()
        for _ in range(plan.num_processors):
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            a.set_inheritable(True)
            b.set_inheritable(True)
            plan.handoff.append((a, b))

    def _make_stats_tables(self) -> None:
        """Each recording worker's partition and API counters (``shm/stats.py``),
        kept across its restarts."""
        plan = self.plan
        rows = self.config["max.partitions"]
        for kind, index in plan.stats_workers():
            region = SharedRegion.create(plan.stats_name(kind, index),
                                         PartitionStats.region_size(rows))
            self.regions.append(region)
            PartitionStats.create(region, rows)
        for kind, index in plan.api_stats_workers():
            region = SharedRegion.create(plan.api_stats_name(kind, index), ApiStats.region_size())
            self.regions.append(region)
            ApiStats.create(region)

    def _make_replication_tables(self) -> None:
        """In every mode: the peers table (brokers the controller named, and its
        epoch), the ISR commits (one slot per partition slot) and the
        replicated topic names (``zookeeper.max.children`` of them), the log dir
        table (``plan.dir_ids``); unlinked with the rest of our shared memory."""
        plan = self.plan
        slots = self.config["max.partitions"]
        for cls, name, count in ((PeersTable, plan.peers_name, MAX_PEERS),
                                 (IsrCommitTable, plan.isr_commits_name, slots)):
            region = SharedRegion.create(name, cls.region_size(count))
            self.regions.append(region)
            cls.create(region, count)
        capacity = zkread.DEFAULT.children  # the most topics the registrar reads
        region = SharedRegion.create(plan.replicated_names_name,
                                     ReplicatedNames.region_size(capacity))
        self.regions.append(region)
        ReplicatedNames.create(region, capacity)
        region = SharedRegion.create(plan.logdirs_name, LogDirTable.region_size(len(plan.dir_ids)))
        self.regions.append(region)
        self.logdir_table = LogDirTable.create(region, plan.dir_ids)

    def _take_cpu_policy(self) -> None:
        """``cpu.realtime.priority``: SCHED_RR for this process, and so for every
        worker it forks. Under a real-time policy (given here or by whoever
        started the broker) no worker may spin: a spinning real-time process
        keeps ordinary ones off its CPU."""
        config = self.config
        priority = config["cpu.realtime.priority"]
        started = cpusched.realtime_policy()
        # the configuration is checked before anything is taken
        spinning = [key for key in ("worker.spin.us", "processor.put.spin.us") if config[key]]
        if spinning and (priority or started):
            policy = "SCHED_RR" if priority else started[0]
            raise ConfigError(f"{spinning[0]}: must be 0 under a real-time scheduling policy "
                              f"(this broker runs under {policy}): a spinning real-time "
                              "worker keeps every ordinary process off its CPU")
        if priority:
            try:
                cpusched.use_round_robin(priority)
            except cpusched.CpuSchedError as e:
                raise StartError(f"cpu.realtime.priority: {e}") from None
        self.realtime = cpusched.realtime_policy()
        for line in start_warnings(config, self.inter_broker_principal) + \
                tls.inter_broker_warnings(config, self.inter_broker_principal):
            print(f"hostbroker: warning: {line}", file=sys.stderr, flush=True)
        if self.realtime is not None and not cpusched.throttled():
            print(f"hostbroker: warning: {self.realtime[0]} with kernel.sched_rt_runtime_us=-1:"
                  " nothing keeps a busy worker from holding a CPU", file=sys.stderr, flush=True)

    def start(self) -> None:
        set_process_name("hb-supervisor")
        self._install_signals()
        self.board.set_broker_state(procs.BROKER_STARTING)
        systemd.notify("STATUS=recovering logs")
        for group in (("writer", "coordinator"), ("replica", "logdirs"), ("handler", "processor"),
                      ("registrar",), ("acceptor",), ("http",)):
            if group == ("acceptor",):  # broker.id is ours: connections may come
                for uri, sock in self.plan.listeners:
                    try:
                        sock.listen(1024)
                    except OSError as e:
                        raise StartError(f"listeners: cannot listen on {uri}: "
                                         f"{e.strerror}") from None
            for kind, index in self.plan.workers():
                if kind in group:
                    self.spawn(kind, index)
            self._wait_ready(group)
        self.board.set_broker_state(procs.BROKER_RUNNING)
        self.serving_since = time.monotonic()
        systemd.notify("READY=1\nSTATUS=serving")
        held = self.config["cpu.wakeup.latency.us"]
        http = self.config.http_listeners
        print(f"hostbroker: serving {', '.join(self.config.listeners)}; "
              f"log dirs {', '.join(self.plan.log_dirs)}"
              + (f"; HTTP on {', '.join(http)}" if http else "")
              + (f"; CPU wake-up latency held at {held} µs" if held >= 0 else "")
              + (f"; real-time {self.realtime[0]} priority {self.realtime[1]}"
                 if self.realtime else ""),
              file=sys.stderr, flush=True)

    def _wait_ready(self, kinds) -> None:
        deadline = time.monotonic() + self.config["worker.boot.timeout.ms"] / 1000
        while True:
            self._reap()
            if self.stopping:
                if not self.refused and self.halt_reason is None:
                    raise StoppedWhileStarting("stopped while starting")  # asked to
                # a refusal a worker has already said needs no second line
                raise StartError("" if self.refused else self.halt_reason)
            waiting = [(k, i) for (k, i) in self.pids if k in kinds and
                       self.board.state(self.plan.board_slot(k, i)) != procs.WORKER_READY]
            if not waiting:
                return
            self._extend_timeout(f"starting: waiting for {waiting[0][0]} {waiting[0][1]}"
                                 + (" (recovering its log dir)" if waiting[0][0] == "writer"
                                    else ""))
            if time.monotonic() > deadline:
                raise StartError(f"{waiting[0][0]} {waiting[0][1]} did not start within "
                                 "worker.boot.timeout.ms")
            self._handle_signals()
            time.sleep(0.01)

    halt_reason: str | None = None
    serving_since: float | None = None  # monotonic time the broker said it was serving
    killed = False  # a worker did not stop in time at shutdown
    refused = False  # a worker exited EXIT_REFUSED, having said why
    cpu_latency_fd: int | None = None  # holds cpu.wakeup.latency.us (hostbroker.cpulatency)
    lease_fd: int | None = None  # this run's shared-memory lease (hostbroker.shm.region)
    realtime: tuple[str, int] | None = None  # the real-time policy the broker runs under

    def _extend_timeout(self, status: str) -> None:
        """While starting or stopping (log recovery can outlast systemd's 90 s): ask
        systemd for 3 x _EXTEND_EVERY_S more, every _EXTEND_EVERY_S; ping its
        watchdog too. Bounded by worker.boot.timeout.ms and shutdown.timeout.ms."""
        now = time.monotonic()
        if now < self._next_extend:
            return
        self._next_extend = now + _EXTEND_EVERY_S
        usec = int(3 * _EXTEND_EVERY_S * 1_000_000)
        watchdog = "\nWATCHDOG=1" if systemd.watchdog_interval_s() else ""
        systemd.notify(f"EXTEND_TIMEOUT_USEC={usec}\nSTATUS={status}{watchdog}")

    def spawn(self, kind: str, index: int) -> int:
        key = (kind, index)
        epoch = self.epochs.get(key, 0) + 1
        self.epochs[key] = epoch
        slot = self.plan.board_slot(kind, index)
        self.board.set_worker(slot, KIND_CODES[kind], index, 0, epoch)
        worker = WORKER_CLASSES[kind](self.plan, index, epoch)
        pid = os.fork()
        if pid == 0:
            die_with_parent(worker.supervisor_pid)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            child_main(worker)
        # only the pid: the child may already have said READY, which must stand
        self.board.write(slot, pid=pid)
        self.children[pid] = key
        self.pids[key] = pid
        self.started_at[key] = time.monotonic()
        return pid

    # -- signals ---------------------------------------------------------------
    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self._wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, self._queue_signal)

    def _queue_signal(self, signum, frame) -> None:
        self.signals.append(signum)

    def _handle_signals(self) -> None:
        while self.signals:
            sig = self.signals.pop(0)
            if sig in (signal.SIGTERM, signal.SIGINT):
                self.stopping = True

    # -- loop ------------------------------------------------------------------
    def run(self) -> int:
        watchdog = systemd.watchdog_interval_s()
        next_ping = time.monotonic()
        tick = min(_TICK_S, watchdog) if watchdog else _TICK_S
        while not self.stopping:
            try:
                select.select([self._wake_r], [], [], tick)
            except InterruptedError:
                pass
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            self._handle_signals()
            self._reap()
            if self.stopping:
                break
            self._check_heartbeats()
            self._retry_http()  # a replacement hb-http that could not boot
            if watchdog and time.monotonic() >= next_ping:
                systemd.notify("WATCHDOG=1")
                next_ping = time.monotonic() + watchdog
        return self.shutdown()

    # -- stop ------------------------------------------------------------------
    def shutdown(self) -> int:
        self.stopping = True
        systemd.notify("STOPPING=1\nSTATUS=draining")
        if getattr(self, "board", None) is not None:
            self.board.set_broker_state(procs.BROKER_DRAINING)
            for bell in self.plan.doorbells.values():
                bell.ring()
        grace = self.config["shutdown.timeout.ms"] / 1000 + 5
        for kind in STOP_ORDER:
            group = [(k, i) for (k, i) in list(self.pids) if k == kind]
            for key in group:
                self._signal(self.pids[key], signal.SIGTERM)
            deadline = time.monotonic() + grace
            while any(key in self.pids for key in group):
                self._extend_timeout(f"stopping: waiting for the {kind}s")
                self._reap()
                if time.monotonic() > deadline:
                    for key in group:
                        if key in self.pids:
                            print(f"hostbroker: {key[0]} {key[1]} did not stop; killing it",
                                  file=sys.stderr, flush=True)
                            self.killed = True
                            self._signal(self.pids[key], signal.SIGKILL)
                    deadline = time.monotonic() + 5
                time.sleep(0.01)
        self.cleanup()
        if self.halt_reason:
            print(f"hostbroker: {self.halt_reason}", file=sys.stderr, flush=True)
        elif self.serving_since is not None and not self.killed and not self.exit_code:
            served = _duration(time.monotonic() - self.serving_since)
            print(f"hostbroker: stopped cleanly after serving for {served}",
                  file=sys.stderr, flush=True)
        return self.exit_code

    def cleanup(self) -> None:
        """Remove what this broker made outside its log dirs."""
        for uri, sock in self.plan.listeners:
            if uri.startswith("unix://"):
                try:
                    os.unlink(sock.getsockname())
                except OSError:
                    pass
            sock.close()
        self.plan.listeners.clear()
        for _, sock in self.plan.http_listeners:
            sock.close()
        self.plan.http_listeners.clear()
        for region in self.regions:
            try:
                region.unlink()
            except Exception:  # noqa: BLE001 - best effort; the next start removes leftovers
                pass
        self.regions.clear()
        lock = getattr(self, "admin_lock", None)
        if lock is not None:
            lock.remove()
            self.admin_lock = None
        if self.lease_fd is not None:  # last: our shared memory is gone
            # The token is ours (lease and broker lock held): also a segment or
            # lock whose making failed between its creation and its listing above.
            try:
                remove_stale(self.plan.shm_prefix)
                AdminLock.remove_stale(self.plan.token)
            except OSError:
                pass  # best effort, as above
            release_lease(self.plan.token, self.lease_fd)
            self.lease_fd = None
        if self.cpu_latency_fd is not None:  # the request goes with the last holder
            os.close(self.cpu_latency_fd)
            self.cpu_latency_fd = None


def _report_unswept(token: str, reason: str) -> None:
    print(f"hostbroker: shared memory: cannot remove what the dead broker run {token} "
          f"left ({reason}); left as it is", file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    """``"4.2 s"``, ``"12 min 5 s"``, ``"3 h 7 min"``: how long a broker served."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    return f"{minutes // 60} h {minutes % 60} min"


def serve(config: Config) -> int:
    """Run the broker in the foreground until SIGTERM/SIGINT; return the exit code."""
    # until start() queues them, SIGTERM stops a start as Ctrl-C does (cleaning up)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    supervisor = Supervisor(config)
    try:
        try:
            supervisor.prepare()
            supervisor.start()
        except KeyboardInterrupt:
            # Ctrl-C before start() queues signals: a stop asked for, as after it
            raise StoppedWhileStarting("stopped while starting") from None
    except (StartError, ConfigError) as e:
        if str(e):
            print(f"hostbroker: {e}", file=sys.stderr, flush=True)
        supervisor.stopping = True
        code = supervisor.shutdown()
        if isinstance(e, StoppedWhileStarting):
            return code
        return ExitStatus.USAGE if isinstance(e, ConfigError) else ExitStatus.REFUSED
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
        print(f"hostbroker: shared memory already exists: {e}", file=sys.stderr, flush=True)
        supervisor.cleanup()
        return ExitStatus.REFUSED
    return supervisor.run()
