"""Start ``hostbroker serve`` as a user would, as a subprocess, and talk to it.

Only test code: ports come from the kernel (bind to port 0), data lives in a
pytest tmp dir, and every process started is ended by PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from hostbroker.client.simple import SimpleClient
from tests.ports import free_port, start_moving


class Broker:
    starts = 0  # every start of any Broker in this process (HB_TEST_CPU reports them per test)

    def __init__(self, root, **settings):
        self.root = str(root)
        self.port = free_port()
        self.unix_path = os.path.join(self.root, "hb.sock")
        self.settings = {
            "listeners": self._listeners(),
            "log.dirs": os.path.join(self.root, "logs"),
            "num.processors": 2,
            "num.handlers": 2,
            "ring.bytes": 4 * 1024 * 1024,
            "max.partitions": 4096,
            "shutdown.timeout.ms": 5000,
            "http.listeners": "",  # no hb-http unless a test asks (its default port is fixed)
        }
        self.settings.update({k.replace("_", "."): v for k, v in settings.items()})
        # the port picked here may be bound by another test before the broker binds
        # it: until a first start succeeds, a start that finds it taken moves on
        self._may_move = self.settings["listeners"] == self._listeners()
        self.env: dict[str, str] | None = None  # extra environment for serve
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.root, "broker.log")

    @property
    def tcp(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def unix(self) -> str:
        return f"unix://{self.unix_path}"

    def args(self) -> list[str]:
        args = [sys.executable, "-m", "hostbroker", "serve"]
        for k, v in self.settings.items():
            args += ["--set", f"{k}={v}"]
        return args

    def _listeners(self) -> str:
        return f"tcp://127.0.0.1:{self.port},unix://{self.unix_path}"

    def start(self, timeout: float = 30.0) -> "Broker":
        if not self._may_move:
            self._start(timeout)
            return self

        def move() -> None:
            self._log.close()
            self.port = free_port()
            self.settings["listeners"] = self._listeners()

        start_moving(lambda: self._start(timeout), move, self.log_path,
                     lambda: f"cannot bind tcp://127.0.0.1:{self.port}: Address already in use")
        self._may_move = False
        return self

    def _start(self, timeout: float) -> None:
        Broker.starts += 1
        self._log = open(self.log_path, "ab")
        env = {**os.environ, **self.env} if self.env else None
        self.proc = subprocess.Popen(self.args(), cwd=self.root, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                self._answers()
                return
            except OSError:
                time.sleep(0.05)
        log = self.log()
        self.kill_tree()  # a fixture that fails here never reaches its teardown
        self.proc = None
        raise RuntimeError(f"broker did not come up in {timeout}s:\n{log}")

    def _answers(self) -> None:
        """A METADATA answered on each listener (OSError while it is not up yet)."""
        with SimpleClient(self.unix) as c:
            c.metadata()
        with SimpleClient(self.tcp) as c:
            c.metadata()

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def client(self, uri: str | None = None, **kw) -> SimpleClient:
        return SimpleClient(uri or self.unix, **kw)

    def counter(self, kind: str, name: str) -> int:
        """A process-board counter (``requests``, ...) summed over the workers
        of one kind (``writer``, ``handler``, ``processor``), read as
        ``hostbroker top`` reads it."""
        from hostbroker.config import Config
        from hostbroker.top import KIND_NAMES, attach

        board, table, _ = attach(Config.build(overrides=self._naming()))
        try:
            return sum(row["counters"][name] for row in board.snapshot()
                       if KIND_NAMES.get(row.get("kind")) == kind)
        finally:
            board.close()
            table.close()

    def _naming(self) -> list[str]:
        """The settings the broker's shared memory is named by."""
        return [f"{key}={self.settings[key]}" for key in ("log.dirs", "broker.id")
                if key in self.settings]

    def state(self) -> str:
        """The broker's state on its process board (``starting``, ``running``, ...)."""
        from hostbroker.config import Config
        from hostbroker.top import attach

        board, table, _ = attach(Config.build(overrides=self._naming()))
        try:
            return board.broker_state.name.lower()
        finally:
            board.close()
            table.close()

    def workers(self) -> dict[str, int]:
        """Process name (hb-writer-0, ...) -> pid of every worker: the
        supervisor's descendants, from each one's ``/proc/PID/task/*/children``
        (what psutil's ``children()`` finds by reading every process on the
        machine, at a fiftieth of the cost: tests poll this)."""
        out = {}
        parents = [self.proc.pid]
        while parents:
            for child in _children(parents.pop()):
                try:
                    with open(f"/proc/{child}/comm") as comm:
                        out[comm.read().rstrip("\n")] = child
                except (FileNotFoundError, ProcessLookupError):
                    continue  # gone meanwhile
                parents.append(child)
        return out

    def wait_worker_replaced(self, name: str, old_pid: int, timeout: float = 15.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.workers().get(name)
            if pid and pid != old_pid:
                return pid
            time.sleep(0.05)
        raise AssertionError(f"{name} was not replaced within {timeout}s:\n{self.log()}")

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_tree()
            raise
        self._log.close()
        self.proc = None
        return code

    def finish(self, timeout: float = 20.0) -> None:
        """After a test: stop it (killed with its children when it does not
        stop, or was already killed) and remove what it left behind."""
        if self.proc is not None:
            try:
                self.stop(timeout=timeout)
            except Exception:  # noqa: BLE001 - already failing; leave nothing behind
                self.kill_tree()
        self.remove_leftovers()

    def remove_leftovers(self) -> None:
        """What a broker that was killed leaves behind for its next start on
        these log dirs to remove (its shared memory and its admin lock), removed
        now: for the end of a test that will not start it again. A broker still
        running is left alone."""
        from hostbroker.config import Config
        from hostbroker.shm.adminlock import AdminLock
        from hostbroker.shm.region import remove_stale
        from hostbroker.workers.plan import shm_token

        if self.proc is not None:
            return
        token = shm_token(Config.build(overrides=[
            f"{key}={self.settings[key]}" for key in ("log.dirs", "broker.id")
            if key in self.settings]))
        remove_stale("/" + token + "-")
        AdminLock.remove_stale(token)

    def kill_tree(self) -> None:
        """SIGKILL the supervisor and every worker at once (a host-level crash of the broker)."""
        if self.proc is None:
            return
        # Stopped first, all of them: a worker that outlived the supervisor by a
        # moment would see it die and drain, maybe writing the clean-shutdown
        # marker a crash never leaves. Stopped, it cannot; then all are killed.
        try:
            procs = [psutil.Process(self.proc.pid)]
            procs[0].send_signal(signal.SIGSTOP)  # spawns nothing more
            procs += procs[0].children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for p in procs:
                try:
                    p.send_signal(sig)
                except psutil.NoSuchProcess:
                    pass
        self.proc.wait(10)
        psutil.wait_procs(procs, timeout=10)
        self._log.close()
        self.proc = None


def _children(pid: int) -> list[int]:
    """The pids of a process's children (none when it is gone)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as children:
                out += [int(word) for word in children.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def serve_args(tmp_path, settings: dict) -> list[str]:
    """``serve`` and its options for a broker under ``tmp_path`` (a Unix
    listener only) with ``settings``: for a start that is expected to refuse."""
    args = ["serve", "--set", f"log.dirs={tmp_path}/logs",
            "--set", f"listeners=unix://{tmp_path}/s", "--set", "http.listeners="]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    return args


def serve_unprivileged(tmp_path, settings: dict, setup: str = "") -> subprocess.CompletedProcess:
    """``hostbroker serve`` by its real start path (``hostbroker.cli.main``), its
    effective user dropped to nobody after the imports (and after ``setup``, a
    line of Python): for what a broker without root's rights refuses. Data
    would go under ``tmp_path``."""
    args = serve_args(tmp_path, settings)
    code = (
        "import os, resource, sys\n"
        "import hostbroker.cli, hostbroker.workers.supervisor, hostbroker.config\n"
        "hostbroker.cli.build_parser()  # what it imports as it goes, imported now\n"
        f"{setup}\n"
        "os.setegid(65534); os.seteuid(65534)\n"
        f"sys.exit(hostbroker.cli.main({args!r}))\n")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
