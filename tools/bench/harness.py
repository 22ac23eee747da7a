"""What the benchmarks under ``tools/bench/`` share; not a benchmark itself.

Owns: the broker under test (:class:`Broker`: ``hostbroker serve`` on a
free TCP port and a Unix socket, data in a scratch directory, stopped by
PID), a role of a benchmark script in its own process (:class:`Child` on
the orchestrating side; :func:`handshake` and :func:`emit` in the child:
READY, GO, one JSON line), the CPU of processes and of the whole machine
(:func:`cpu_seconds`, :func:`process_kind`, :func:`busy_cpu_seconds`,
:func:`wait_quiet`), ``py-spy`` recording per phase (:class:`Profiler`),
the machine's description (:func:`machine_info`), a broker warmed up
before timing (:func:`warm_up`) and how a report is written
(:func:`output`). The machine's own limits (``dd``, ``sendfile``) are
:mod:`machine_limits`'.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import select
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

MB = 1_000_000
MIB = 1 << 20


class BenchError(Exception):
    """A benchmark could not run as set up: a broker, a child or a check failed."""


# ---------------------------------------------------------------------------
# Child roles: each runs in its own process, says READY on stdout once set up,
# waits for GO on stdin, then times its work and prints one JSON line.

_cpu_at_go = 0.0


def handshake() -> None:
    """In a child: say READY, wait for GO, and start its CPU clock."""
    global _cpu_at_go
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    if sys.stdin.readline().strip() != "GO":
        raise SystemExit("no GO from the benchmark")
    _cpu_at_go = time.process_time()


def emit(result: dict) -> None:
    """In a child: print ``result`` as its one JSON line, with the CPU it used since GO."""
    result["cpu_seconds"] = time.process_time() - _cpu_at_go
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# The orchestrating side.

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Child:
    """A role of the benchmark ``script`` in its own process (``script --role
    ROLE PARAMS``): READY / GO / one JSON line, ended by PID if it hangs."""

    def __init__(self, script: str, role: str, params: dict, workdir: str, timeout: float):
        self.role = role
        self.timeout = timeout
        self.stderr_path = os.path.join(workdir, f"{role}-{time.monotonic_ns()}.err")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, script, "--role", role, json.dumps(params)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=REPO)
        self.pid = self.proc.pid
        self._buf = b""

    def _line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.role} said nothing for {timeout:.0f}s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise BenchError(f"{self.role} exited ({self.proc.wait()}):\n{self.errors()}")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def errors(self) -> str:
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def ready(self) -> None:
        if self._line(120) != "READY":
            raise BenchError(f"{self.role} did not get ready:\n{self.errors()}")

    def go(self) -> None:
        self.proc.stdin.write(b"GO\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        line = self._line(self.timeout)
        self.proc.wait(30)
        return json.loads(line)

    def end(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout, self._stderr):
            try:
                f.close()
            except OSError:
                pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """``hostbroker serve`` in a subprocess, stopped by PID with SIGTERM."""

    def __init__(self, workdir: str, settings: list[str]):
        self.root = workdir
        self.port = free_port()
        self.unix_path = os.path.join(workdir, "hb.sock")
        self.settings = {
            "listeners": f"tcp://127.0.0.1:{self.port},unix://{self.unix_path}",
            "log.dirs": os.path.join(workdir, "logs"),
            "http.listeners": "",  # no hb-http unless asked (its default port is fixed)
        }
        for item in settings:
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"--set wants KEY=VALUE, not {item!r}")
            self.settings[key.strip()] = value.strip()
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(workdir, "broker.log")
        self.worker_pids: dict[str, int] = {}

    def uri(self, kind: str) -> str:
        return f"unix://{self.unix_path}" if kind == "unix" else f"tcp://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        from hostbroker.client.simple import SimpleClient

        args = [sys.executable, "-m", "hostbroker", "serve"]
        for key, value in self.settings.items():
            args += ["--set", f"{key}={value}"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, cwd=self.root, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                for kind in ("unix", "tcp"):
                    with SimpleClient(self.uri(kind), timeout=5) as client:
                        client.metadata()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise BenchError(f"broker not up after {timeout:.0f}s:\n{self.log()}") from None
                time.sleep(0.1)
        self.worker_pids = self.workers()

    def workers(self) -> dict[str, int]:
        """Process name (hb-handler-0, ...) -> PID, the supervisor included."""
        import psutil

        out = {"hb-supervisor": self.proc.pid}
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                out[child.name()] = child.pid
        return out

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM the supervisor by PID; SIGKILL it and its known workers if it hangs."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        code = proc.poll()
        if code is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"broker {proc.pid} still running {timeout:.0f}s after SIGTERM: SIGKILL")
                for pid in self.worker_pids.values():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                code = proc.wait(10)
        self._log.close()
        return code


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    import psutil

    out = {}
    for name, pid in pids.items():
        try:
            t = psutil.Process(pid).cpu_times()
            out[name] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return out


def process_kind(name: str) -> str:
    if name.startswith("hb-") and name[-1].isdigit():
        return name.rsplit("-", 1)[0]
    return name


class Profiler:
    """One ``py-spy record`` per process for one phase; stopped with SIGINT by PID."""

    def __init__(self, outdir: str | None, rate: int):
        self.outdir = outdir
        self.rate = rate
        self.pyspy = None
        if outdir:
            self.pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable),
                                                               "py-spy")
            if not os.access(self.pyspy, os.X_OK):
                raise SystemExit("--profile needs py-spy (pip install py-spy into the venv)")
            os.makedirs(outdir, exist_ok=True)
        self.running: list[subprocess.Popen] = []

    def start(self, phase: str, pids: dict[str, int], max_seconds: float) -> None:
        if not self.outdir:
            return
        for name, pid in pids.items():
            if name in ("hb-supervisor", "hb-acceptor"):
                continue
            out = os.path.join(self.outdir, f"{phase}.{name}.txt")
            self.running.append(subprocess.Popen(
                [self.pyspy, "record", "--pid", str(pid), "--rate", str(self.rate),
                 "--format", "raw", "--idle", "--nonblocking", "--duration",
                 str(int(max_seconds) + 60), "-o", out],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.5)  # let every py-spy attach before the phase starts

    def stop(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGINT)
        for proc in self.running:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.running = []


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all CPUs, not idle or iowait)."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def wait_quiet(max_wait: float, busy_below: float = 0.15) -> float:
    """Wait (up to ``max_wait`` s) for a second in which the machine is mostly idle.

    Returns the busy share (0..1 of all CPUs) of the last second measured. This
    machine is shared: other work (test suites) competes for its two cores.
    """
    deadline = time.monotonic() + max_wait
    ncpu = os.cpu_count() or 1
    while True:
        b0, t0 = busy_cpu_seconds(), time.monotonic()
        time.sleep(1.0)
        share = (busy_cpu_seconds() - b0) / (time.monotonic() - t0) / ncpu
        if share < busy_below or time.monotonic() > deadline:
            return share


def machine_info() -> dict:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(next(x for x in f if x.startswith("MemTotal")).split()[1])
    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO,
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        rev = ""
    return {"nproc": os.cpu_count(), "cpu_model": model, "ram_gib": round(mem_kib / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "git": rev, "loadavg_at_start": os.getloadavg()}


def send_timed(producer, topic: str, messages: int, size: int) -> float:
    """Send ``messages`` values of ``size`` bytes (1,000 distinct ones, made
    before the clock starts) to ``topic`` through ``producer``, flush and close
    it: messages per second from the first send to the flush's return.
    BenchError unless every one was acknowledged."""
    values = [os.urandom(size // 2).hex().encode() for _ in range(1000)]
    send = producer.send
    t0 = time.perf_counter()
    for i in range(messages):
        send(topic, values[i % 1000])
    producer.flush()
    seconds = time.perf_counter() - t0
    acknowledged = producer.stats["acknowledged"]
    producer.close()
    if acknowledged != messages:
        raise BenchError(f"{topic}: {acknowledged} of {messages} acknowledged")
    return messages / seconds


def warm_up(broker: Broker) -> None:
    """A topic of its own produced to and fetched from once, before anything is timed."""
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    with SimpleClient(broker.uri("unix")) as client:
        client.create_topic("bench-warmup", 1)
        ms = encode_message_set([b"x" * 100] * 1000)
        for _ in range(50):
            client.produce("bench-warmup", 0, ms)
        client.fetch("bench-warmup", 0, 0, 4 * MIB)


def output(report: dict, args: argparse.Namespace, print_report) -> None:
    """Write the report where --json-out says, and print it as JSON or as tables."""
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
