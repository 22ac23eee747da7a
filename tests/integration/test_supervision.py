"""Supervision caused for real: a worker stopped with SIGSTOP under load is
replaced within the heartbeat timeout and its clients are served again; the
same load without it replaces nothing; a SIGKILLed supervisor takes every
worker with it and a new broker takes over the log dirs."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.config import SETTINGS_BY_KEY, Config
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.shm.procs import ProcessBoard, WorkerState
from hostbroker.workers.plan import BrokerPlan
from tests.integration.test_faults import read_all

HEARTBEAT_S = SETTINGS_BY_KEY["worker.heartbeat.timeout.ms"].default / 1000
# the supervisor's tick (0.25 s), SIGABRT to death, the fork and start of the new one
REPLACE_SLACK_S = 2.5


class Client(threading.Thread):
    """One connection doing METADATA + PRODUCE (acks=1) round trips until
    stopped, reconnecting after an error; keeps the time of each answer."""

    def __init__(self, broker, uri: str, topic: str, n: int):
        super().__init__(daemon=True)
        self.broker, self.uri, self.topic, self.n = broker, uri, topic, n
        self.answered: list[float] = []
        self.acked: list[bytes] = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        client = self.broker.client(self.uri, timeout=30)
        i = 0
        while not self.stop.is_set():
            batch = [f"{self.n}-{i}-{j}".encode() * 20 for j in range(20)]
            try:
                client.metadata([self.topic])
                client.produce(self.topic, self.n % 4, encode_message_set(batch))
            except (OSError, BrokerError):
                self.errors += 1
                client.close()
                time.sleep(0.05)
                client = self.broker.client(self.uri, timeout=30)
                continue
            self.acked += batch
            self.answered.append(time.monotonic())
            i += 1
        client.close()


def _start_clients(broker, count: int = 8) -> list[Client]:
    with broker.client() as c:
        c.create_topic("sup", 4)
    clients = [Client(broker, broker.unix if n % 2 else broker.tcp, "sup", n)
               for n in range(count)]
    for t in clients:
        t.start()
    return clients


def _stop_clients(clients: list[Client]) -> None:
    for t in clients:
        t.stop.set()
    for t in clients:
        t.join(30)
        assert not t.is_alive()


@pytest.mark.parametrize("name", ["hb-handler-0", "hb-proc-0", "hb-writer-0", "hb-coordinator"])
def test_a_stopped_worker_is_replaced_within_the_heartbeat_timeout(make_broker, name):
    broker = make_broker()  # worker.heartbeat.timeout.ms at its default
    clients = _start_clients(broker)
    time.sleep(1.0)
    assert all(t.answered for t in clients), "every client was served before the stop"
    victim = broker.workers()[name]
    stopped_at = time.monotonic()
    os.kill(victim, signal.SIGSTOP)
    replacement = broker.wait_worker_replaced(name, victim,
                                              timeout=HEARTBEAT_S + REPLACE_SLACK_S + 5)
    replaced_after = time.monotonic() - stopped_at
    assert replaced_after <= HEARTBEAT_S + REPLACE_SLACK_S, replaced_after
    assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == "zombie"
    # every client is served again: an answer from each after the replacement
    seen = time.monotonic()
    deadline = seen + 10
    while time.monotonic() < deadline and not all(t.answered and t.answered[-1] > seen
                                                   for t in clients):
        time.sleep(0.05)
    late = [t.n for t in clients if not (t.answered and t.answered[-1] > seen)]
    _stop_clients(clients)
    assert not late, f"clients {late} not served within 10 s of the replacement"
    with broker.client() as c:
        stored = set()
        for p in range(4):
            stored.update(read_all(c, "sup", p))
    lost = [m for t in clients for m in t.acked if m not in stored]
    assert not lost, f"{len(lost)} acknowledged messages lost"
    log = broker.log()
    kind = {"hb-handler-0": "handler", "hb-proc-0": "processor", "hb-writer-0": "writer",
            "hb-coordinator": "coordinator"}[name]
    assert f"{kind} 0 (pid {victim}) silent for" in log, log
    assert psutil.Process(replacement).name() == name
    print(f"SIGSTOP of {name} under load: replaced after {replaced_after:.2f} s")


def test_load_without_a_stop_replaces_no_worker(make_broker):
    """Eight connections of produce and metadata, a writer flushing every
    message (acks=-1) and a CPU hog beside the broker on the same cores."""
    broker = make_broker(log_flush_interval_messages=1)
    before = broker.workers()
    board = ProcessBoard.attach(BrokerPlan.from_config(
        Config.build(overrides=[f"log.dirs={broker.settings['log.dirs']}"])).board_name,
        readonly=True)
    oldest_beat_ms = 0.0
    sampling = threading.Event()

    def sample() -> None:  # the largest heartbeat age the supervisor could have seen
        nonlocal oldest_beat_ms
        while not sampling.wait(0.02):
            now = time.monotonic_ns()
            for i in range(board.slot_count):
                if board.state(i) == WorkerState.READY:
                    oldest_beat_ms = max(oldest_beat_ms, (now - board.heartbeat_ns(i)) / 1e6)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    clients = _start_clients(broker)
    hog_stop = threading.Event()

    def hog() -> None:
        deadline = time.monotonic() + 15
        while not hog_stop.is_set() and time.monotonic() < deadline:
            sum(range(10000))

    hogs = [threading.Thread(target=hog, daemon=True) for _ in range(2)]
    for h in hogs:
        h.start()
    flusher = broker.client(timeout=30)
    deadline = time.monotonic() + 8
    n = 0
    while time.monotonic() < deadline:
        big = encode_message_set([os.urandom(1000) for _ in range(500)])
        r = flusher.produce("sup", 0, big, acks=-1)
        assert r.error_code == ErrorCode.NONE
        n += 1
    flusher.close()
    hog_stop.set()
    for h in hogs:
        h.join(20)
    _stop_clients(clients)
    sampling.set()
    sampler.join(10)
    board.close()
    print(f"under load, the oldest heartbeat seen was {oldest_beat_ms:.0f} ms old")
    assert oldest_beat_ms < HEARTBEAT_S * 1000 / 2, "too close to a false replacement"
    assert n > 0 and all(t.answered for t in clients)
    assert broker.workers() == before, broker.log()
    assert "silent for" not in broker.log()
    assert "replacing it" not in broker.log()


def test_sigkill_of_the_supervisor_ends_every_worker(make_broker, tmp_path):
    first = make_broker()
    with first.client() as c:
        c.create_topic("kept", 1)
        payloads = [f"kept-{i}".encode() for i in range(100)]
        assert c.produce("kept", 0, encode_message_set(payloads), acks=-1).error_code == 0
    workers = first.workers()
    assert len(workers) == 7  # a writer, the coordinator, 2 handlers, 2 processors, the acceptor
    procs = [psutil.Process(pid) for pid in workers.values()]
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    killed_at = time.monotonic()
    gone, alive = psutil.wait_procs(procs, timeout=8)
    # reparented to a parent that may not reap: a zombie has ended too
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"still running after the supervisor died: {alive}"
    print(f"every worker gone {time.monotonic() - killed_at:.2f} s after the supervisor's SIGKILL")
    first._log.close()
    first.proc = None
    first_log = first.log()
    assert "supervisor gone; stopping" in first_log

    second = make_broker(root=tmp_path)  # the same log dirs (and the same log file)
    # the orphaned writer drained and wrote its clean-shutdown marker: nothing to recover
    assert "recovered" not in second.log()[len(first_log):], second.log()
    with second.client() as c:
        assert read_all(c, "kept") == payloads
        assert c.produce("kept", 0, encode_message_set([b"more"])).error_code == 0
    assert second.stop() == 0
