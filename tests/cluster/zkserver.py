"""A real ZooKeeper for tests and benchmarks: Debian's ``ZooKeeperServerMain`` on loopback.

Only test and benchmark code. :class:`ZooKeeperServer` writes a ``zoo.cfg``
(a free loopback port, a data directory of its own, a short tick so that
session timeouts can be short), starts the server in the foreground as a
subprocess and waits until ``srvr`` answers (well under a second once the
JVM is up); a first start that finds its port taken meanwhile (another test
bound it) moves to another port. ``stop()`` ends it by PID; ``start()`` again serves the same
data, which is how tests make an outage. ``suspend()`` / ``resume()``
(SIGSTOP / SIGCONT) freeze it without closing its sockets.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import psutil

from tests.ports import free_port, start_moving

JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar")
JAVA_DIR = "/usr/share/java"
# A test's ZooKeeper holds a few hundred small nodes for a minute or two: the client
# compiler alone and the serial collector start it with less CPU than the server
# defaults (C2's compiler threads, G1's), which the tests beside it need more.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def four_letters(port: int, word: str = "srvr", timeout: float = 1.0) -> str:
    """The answer to a four-letter command, or "" when nothing answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(word.encode())
            chunks = []
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One standalone ZooKeeper on ``127.0.0.1:port`` with its data under ``root``."""

    def __init__(self, root: str, port: int | None = None, tick_ms: int = 200):
        self.root = str(root)
        self.port = port or free_port()
        self.data_dir = os.path.join(self.root, "zk-data")
        self.config = os.path.join(self.root, "zoo.cfg")
        self.log_path = os.path.join(self.root, "zookeeper.log")
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen | None = None
        # a port picked here may be taken by another test between the pick and the
        # JVM's bind: until the first start succeeds, another one is picked then
        self._may_move = port is None

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` string of this server."""
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(f"tickTime={self.tick_ms}\n"
                    f"dataDir={self.data_dir}\n"
                    f"clientPort={self.port}\n"
                    "clientPortAddress=127.0.0.1\n"
                    # session timeouts may be as short as 2 ticks
                    f"minSessionTimeout={2 * self.tick_ms}\n"
                    "maxClientCnxns=0\n"
                    "admin.enableServer=false\n"
                    "4lw.commands.whitelist=*\n")

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        if not self._may_move:
            self._start(timeout)
            return self

        def move() -> None:
            self.port = free_port()

        start_moving(lambda: self._start(timeout), move, self.log_path,
                     lambda: "java.net.BindException: Address already in use")
        self._may_move = False
        return self

    def _start(self, timeout: float) -> None:
        self._write_config()
        classpath = ":".join(os.path.join(JAVA_DIR, jar) for jar in JARS)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", *JVM_OPTIONS, "-cp", classpath,
                 "org.apache.zookeeper.server.ZooKeeperServerMain", self.config],
                cwd=self.root, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        # answered, and by this server: another worker's ZooKeeper may have bound the
        # port first, and would answer while this one fails to bind and exits
        while not (self._listens() and "Zookeeper version" in four_letters(self.port)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not answer in {timeout} s: {self.log_tail()}")
            time.sleep(0.05)

    def _listens(self) -> bool:
        """This server's own process listens on its port."""
        try:
            conns = psutil.Process(self.proc.pid).net_connections(kind="tcp")
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port
                   for c in conns)

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def suspend(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self, timeout: float = 10.0) -> None:
        """End the server by PID (SIGTERM, then SIGKILL)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
