"""A fuzz session against one running broker: set-up, batches, periodic checks.

:class:`Session` holds the broker (a :class:`tests.integration.broker.Broker`,
already started with :data:`~tests.hostile.fuzzlib.FUZZ_BROKER_SETTINGS`), the
names the generators aim at, the witness data and the process tree.
:meth:`Session.run` sends batches ``first .. first+count`` of a seed,
alternating TCP and the Unix socket, and checks every invariant each
``check_every`` batches and at the end. The standing suite runs a few hundred
batches; ``tools/fuzz_broker.py`` runs the same for as long as it is given.

:meth:`Session.run_streams` is the fast form (:mod:`tests.hostile.stream`):
``jobs`` client processes, each sending the batches ``first + job + k * jobs``
of the seed in rounds of ``check_every`` inputs all together; between rounds,
with every process idle, the parent checks every invariant as above, and
samples the tree's memory during them.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hostbroker.client.simple import SimpleClient
from hostbroker.log.message import encode_message_set
from tests.hostile import fuzzlib, stream
from tests.hostile.fuzzlib import FuzzContext, Violation, batch_rng
from tests.hostile.invariants import Tree, Witness, prompt_client

DATA_TOPICS = ("fz-data-0", "fz-data-1")
DATA_PARTITIONS = 4


@dataclass
class Failure:
    seed: int
    batch: int  # -1: a periodic check, not one batch
    message: str

    def __str__(self) -> str:
        where = f"batch {self.batch}" if self.batch >= 0 else "periodic check"
        return f"seed {self.seed} {where}: {self.message}"


@dataclass
class Stats:
    batches: int = 0
    requests: int = 0
    answered: int = 0
    error_frames: int = 0
    checks: int = 0
    connections: int = 0
    seconds: float = 0.0
    by_api: Counter = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Session:
    def __init__(self, broker, seed: int):
        self.broker = broker
        self.seed = seed
        self.uris = [broker.unix, broker.tcp]
        self.witness = Witness(broker.unix, seed)
        self.ctx = FuzzContext(list(DATA_TOPICS), DATA_PARTITIONS, self.witness.protected)
        self.tree: Tree | None = None
        self._probes = 0

    def setup(self) -> None:
        """Topics with data for the fuzz to hit, the witness data, the baselines."""
        with SimpleClient(self.broker.unix) as client:
            for topic in DATA_TOPICS:
                client.create_topic(topic, DATA_PARTITIONS)
                for p in range(DATA_PARTITIONS):
                    client.produce(topic, p, encode_message_set(
                        [f"{topic}-{p}-{i}".encode() * 20 for i in range(200)]))
        self.witness.write()
        self.tree = Tree(self.broker.proc.pid)

    def check(self) -> None:
        """Every invariant but the restart: workers, memory, a prompt normal client, the witness."""
        self.tree.check(settle=2.0)
        self._probes += 1
        prompt_client(self.uris, self.witness, f"probe-{self.seed}-{self._probes}".encode())
        self.witness.check()

    def restart_and_check(self) -> None:
        """Stop the broker (SIGTERM), start it again, and find every acknowledged message."""
        self.broker.stop(timeout=30)
        self.broker.start()
        self.witness.check()
        self.tree = Tree(self.broker.proc.pid, peak=self.tree.peak if self.tree else 0)

    def batch(self, index: int, api_key: int | None = None, size: int | None = None,
              stats: Stats | None = None) -> None:
        """Send batch ``index`` of this seed; raise Violation naming seed and batch."""
        rng = batch_rng(self.seed, index)
        frames = fuzzlib.batch_frames(rng, self.ctx, api_key, size)
        uri = self.uris[index % 2]
        try:
            outcome = fuzzlib.exchange(uri, frames)
        except Violation as exc:
            raise Violation(f"seed {self.seed} batch {index} over {uri}: {exc}") from None
        except OSError as exc:
            raise Violation(f"seed {self.seed} batch {index}: cannot talk to the broker over "
                            f"{uri}: {exc!r}") from None
        if stats is not None:
            with stats.lock:
                stats.batches += 1
                stats.requests += len(frames)
                stats.answered += outcome.answered
                stats.error_frames += outcome.error_frames
                for frame in frames:
                    stats.by_api[int.from_bytes(frame[4:6], "big", signed=True)] += 1

    def run(self, first: int, count: int, *, seconds: float | None = None,
            check_every: int = 100, api_key: int | None = None, keep_going: bool = False,
            size: int | None = None, max_requests: int | None = None, jobs: int = 1,
            progress=None) -> Stats:
        """Batches ``first`` .. ``first+count-1`` (or until ``seconds`` or
        ``max_requests`` requests), ``jobs`` at a time on as many connections,
        all invariants checked every ``check_every`` batches and at the end;
        ``progress(stats)`` is called after each check.

        Without ``keep_going`` the first violation is raised; with it, each is
        recorded in the stats (a batch's with its index, a check's with the
        range of batches since the previous one), the tree re-baselined, and
        the run goes on (restarting the broker if it died).
        """
        stats = Stats()
        start = time.monotonic()
        index = checked = first
        pool = ThreadPoolExecutor(jobs) if jobs > 1 else None
        try:
            while (index < first + count
                   and (seconds is None or time.monotonic() - start < seconds)
                   and (max_requests is None or stats.requests < max_requests)):
                step = range(index, min(index + jobs, first + count))
                send = lambda i: self._batch_or_violation(i, api_key, size, stats)  # noqa: E731
                for i, exc in zip(step, pool.map(send, step) if pool else map(send, step)):
                    if exc is not None:
                        if not keep_going:
                            raise exc
                        stats.failures.append(Failure(self.seed, i, str(exc)))
                if any(f.batch in step for f in stats.failures):
                    self._recover()
                index = step.stop
                if index - checked >= check_every:
                    self._check_batches(stats, checked, index, keep_going)
                    checked = index
                    if progress is not None:
                        stats.seconds = time.monotonic() - start
                        progress(stats)
            self._check_batches(stats, checked, index, keep_going)
        finally:
            if pool is not None:
                pool.shutdown()
        stats.seconds = time.monotonic() - start
        return stats

    def _batch_or_violation(self, index, api_key, size, stats) -> Violation | None:
        try:
            self.batch(index, api_key, size, stats)
        except Violation as exc:
            return exc
        return None

    def _check_batches(self, stats: Stats, first: int, end: int, keep_going: bool) -> None:
        stats.checks += 1
        try:
            self.check()
        except Violation as exc:
            exc = Violation(f"after batches {first}..{end - 1} of seed {self.seed}: {exc}")
            if not keep_going:
                raise exc from None
            stats.failures.append(Failure(self.seed, -1, str(exc)))
            self._recover()

    def _recover(self) -> None:
        """After a recorded violation: keep fuzzing what is left, or a restarted broker."""
        if self.broker.proc is None or self.broker.proc.poll() is not None:
            self.broker.proc = None
            self.broker.start()
            self.tree = Tree(self.broker.proc.pid, peak=self.tree.peak if self.tree else 0)
            return
        time.sleep(1.0)  # let a replaced worker come up
        self.tree.rebase()

    def run_streams(self, *, seconds: float, max_requests: int, check_every: int = 50_000,
                    jobs: int = 2, connections: int = 4, first: int = 0, heavy: float = 0.002,
                    framing: float = 0.3, lockstep: float = 0.2, bursts: float = 0.5,
                    keep_going: bool = False,
                    progress=None) -> Stats:
        """Stream and framing batches (:class:`stream.Batches`) from ``jobs``
        processes, ``connections`` at once each, until ``seconds`` or ``max_requests`` inputs; every invariant
        checked after each ``check_every`` inputs and at the end. Without
        ``keep_going`` the first violation is raised; with it, as :meth:`run`."""
        stats = Stats()
        start = time.monotonic()
        batches = stream.Batches(self.seed, self.ctx, stream.Pool.build(self.seed, self.ctx),
                                 self.uris, heavy, framing, lockstep, bursts)
        fork = multiprocessing.get_context("fork")
        pipes, procs = [], []
        for job in range(jobs):
            parent_end, child_end = fork.Pipe()
            proc = fork.Process(target=_stream_job, daemon=True, args=(
                child_end, batches, first + job, jobs, connections))
            proc.start()
            pipes.append(parent_end)
            procs.append(proc)
        try:
            while stats.requests < max_requests and time.monotonic() - start < seconds:
                until = start + seconds
                quota = max(1, min(check_every, max_requests - stats.requests) // jobs)
                for pipe in pipes:
                    pipe.send((quota, until))
                reports = self._collect(pipes)
                low, high = min(r[2] for r in reports), max(r[3] for r in reports)
                broker_gone = False
                for tally, failures, _, _ in reports:
                    tally.add_to(stats)
                    for batch, message, gone in failures:
                        if not keep_going:
                            raise Violation(message)
                        stats.failures.append(Failure(self.seed, batch, message))
                        broker_gone = broker_gone or gone
                if broker_gone:
                    self._recover()
                self._check_batches(stats, low, high, keep_going)
                if progress is not None:
                    stats.seconds = time.monotonic() - start
                    progress(stats)
        finally:
            for pipe in pipes:
                try:
                    pipe.send(None)
                except OSError:
                    pass
            for proc in procs:
                proc.join(5)
                if proc.is_alive():
                    proc.kill()
        stats.seconds = time.monotonic() - start
        return stats

    def _collect(self, pipes) -> list:
        """Every job's report of a round; the tree's memory sampled meanwhile."""
        reports = {}
        while len(reports) < len(pipes):
            for pipe in multiprocessing.connection.wait(
                    [p for p in pipes if p not in reports], timeout=0.5):
                try:
                    report = pipe.recv()
                except EOFError:
                    raise RuntimeError("a fuzz job process died") from None
                if isinstance(report, str):
                    raise RuntimeError(f"a fuzz job failed:\n{report}")
                reports[pipe] = report
            if self.tree is not None:
                try:
                    self.tree.sample()
                except Violation:
                    pass  # the supervisor gone: the check after the round says so
        return [reports[p] for p in pipes]


def _stream_job(pipe, batches: stream.Batches, index: int, jobs: int, connections: int) -> None:
    """One client process: rounds of batches ``index, index + jobs, ...``, each
    round until its input quota or the deadline; reports ``(tally, failures,
    first batch, next batch)``."""
    try:
        while True:
            order = pipe.recv()
            if order is None:
                return
            quota, until = order
            tally, low = stream.Tally(), index
            taken = []

            def indices():
                nonlocal index
                while True:
                    taken.append(index)
                    yield index
                    index += jobs

            failures = batches.run(indices(), tally, concurrency=connections, quota=quota,
                                   until=until)
            index = taken[-1] + jobs if taken else index
            pipe.send((tally, failures, low, index))
    except (EOFError, KeyboardInterrupt):
        return
    except Exception:  # noqa: BLE001 - the parent reports it
        pipe.send(traceback.format_exc())
