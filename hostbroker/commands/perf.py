"""``hostbroker perf produce`` / ``perf consume``: throughput and latency, measured end to end.

``perf produce`` sends ``--messages`` messages of ``--size`` bytes through
:class:`~hostbroker.client.Producer`, in ``--processes`` processes (started
with ``spawn``, each with its own producer and an equal share of the
messages, the first ones taking the remainder). Every PRODUCE request's
latency is the time from its send to its acknowledgement
(``SentRequest.acked_at - sent_at``, reported by
``ProducerCallbacks.on_acknowledged``); with ``--acks 0`` nothing is
acknowledged and no latency is reported.

``perf consume`` reads ``--messages`` messages of a topic from the log start
of each partition through :class:`~hostbroker.client.SimpleConsumer`, its
partitions dealt out over ``--processes`` processes; every FETCH round trip
is timed. The processes share one count, so together they read exactly the
number asked for.

Both print: messages, payload bytes, elapsed seconds (from the first
process's start to the last one's end, all on the host's monotonic clock),
records/s, MB/s where **MB is 10^6 bytes of payload** (entry headers and
compression not counted), the number of requests and their latency
percentiles p50, p99, p99.9 and the maximum, in milliseconds (nearest rank:
the smallest latency that at least p % of requests did not exceed). With
``--json`` the same as one JSON document.

Cluster mode (``--zookeeper`` instead of ``--bootstrap``): ``perf produce``'s
producers find the brokers and the topic's sorted ``(broker_id,
partition)`` pairs in ZooKeeper and spread the messages over all of them;
``perf consume`` reads every pair of the topic's live brokers, the pairs
dealt out over the processes (a process fetches each broker's pairs over a
connection of its own, one broker after the other, every FETCH timed). A
replicated topic's global partitions are dealt out instead, each fetched
from its leader (following it as it moves).

Arguments are bounded (see ``LIMITS``); anything outside is refused with one
line before a process starts. So is a ``perf produce --size`` whose message
would be over ``message.max.bytes`` (the producer's setting, by default the
broker's default of 1,000,000 bytes with the entry header; raise it with
``--property message.max.bytes=N`` up to the broker's), which every message
would otherwise fail.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import multiprocessing
import random
import string
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TextIO

from hostbroker.commands import (
    DEFAULT_BOOTSTRAP,
    check_bootstrap,
    check_topic,
    describe_error,
    key_values,
)
from hostbroker.exits import EXIT_BROKER, EXIT_OK, CommandError, usage_error
from hostbroker.client.throttle_stats import ThrottleStats
from hostbroker.client.tls import set_tls_defaults, tls_defaults
from hostbroker.cluster.zk import ZooKeeperUnavailable
from hostbroker.errors import HostbrokerError

MB = 10**6
PERCENTILES = (50.0, 99.0, 99.9)

LIMITS = {
    "messages": (1, 10**10),
    "size": (0, 100 * MB),
    "processes": (1, 64),
    "batch_size": (1, 10**6),
    "fetch_size": (1, 2**31 - 1),
    "timeout_ms": (1, 24 * 3600 * 1000),
}


def check_limits(**values) -> None:
    """Refuse any value outside LIMITS with one line naming the option."""
    for name, value in values.items():
        if value is None:
            continue
        lowest, highest = LIMITS[name]
        if not lowest <= value <= highest:
            raise usage_error(f"--{name.replace('_', '-')} must be between {lowest:,} and "
                              f"{highest:,}, not {value:,}")


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of ascending ``sorted_values`` (not empty).

    The smallest value that at least ``p`` % of the values do not exceed:
    the value at rank ``ceil(p / 100 * n)`` (1-based), and the smallest
    value for ``p = 0``.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside 0..100")
    # Exact: in floats 99.9 / 100 * 1000 is a hair above 999 and would round up a rank.
    rank = max(1, math.ceil(Fraction(repr(p)) * len(sorted_values) / 100))
    return sorted_values[rank - 1]


def shares(total: int, parts: int) -> list[int]:
    """``total`` split in ``parts`` near-equal shares, the first ones larger."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


@dataclass
class WorkerResult:
    """What one process measured; ``latencies`` in seconds, one per request."""

    messages: int = 0
    payload_bytes: int = 0
    started: float = 0.0
    ended: float = 0.0
    latencies: list[float] = field(default_factory=list)
    failed: int = 0
    error: str | None = None
    # how long the broker held the answers for a quota (ms): the sum over
    # ``answers`` answers, and the longest
    answers: int = 0
    throttle_total_ms: int = 0
    throttle_max_ms: int = 0

    def held(self, throttle: ThrottleStats) -> None:
        """Add a client's throttle times over its whole run."""
        answers, total_ms, max_ms = throttle.totals()
        self.answers += answers
        self.throttle_total_ms += total_ms
        self.throttle_max_ms = max(self.throttle_max_ms, max_ms)


def summarize(kind: str, results: Iterable[WorkerResult], **settings) -> dict:
    """Merge the processes' results into one report (the ``--json`` document)."""
    results = list(results)
    latencies = sorted(lat for r in results for lat in r.latencies)
    messages = sum(r.messages for r in results)
    payload = sum(r.payload_bytes for r in results)
    elapsed = max(r.ended for r in results) - min(r.started for r in results)
    rate = (lambda n: n / elapsed) if elapsed > 0 else (lambda n: 0.0)
    report = {
        "test": kind,
        **settings,
        "messages": messages,
        "payload_bytes": payload,
        "elapsed_s": round(elapsed, 6),
        "records_per_s": round(rate(messages), 1),
        "mb_per_s": round(rate(payload) / MB, 3),
        "requests": len(latencies),
        "latency_ms": None,
        "failed": sum(r.failed for r in results),
        "throttle_time_ms": _throttle(results),
    }
    if latencies:
        report["latency_ms"] = {
            **{f"p{p:g}": round(percentile(latencies, p) * 1000, 3) for p in PERCENTILES},
            "max": round(latencies[-1] * 1000, 3),
        }
    errors = [r.error for r in results if r.error]
    if errors:
        report["error"] = errors[0]
    return report


def _throttle(results: list[WorkerResult]) -> dict:
    """The processes' throttle times as one: the average over all their answers,
    and the longest."""
    answers = sum(r.answers for r in results)
    total = sum(r.throttle_total_ms for r in results)
    return {"avg": round(total / answers, 3) if answers else 0.0,
            "max": max((r.throttle_max_ms for r in results), default=0)}


def format_report(report: dict) -> str:
    lines = [
        f"messages: {report['messages']:,}  payload: {report['payload_bytes']:,} bytes  "
        f"elapsed: {report['elapsed_s']:.3f} s",
        f"records/s: {report['records_per_s']:,.1f}  MB/s: {report['mb_per_s']:.3f} "
        "(MB = 10^6 bytes of payload)",
    ]
    latency = report["latency_ms"]
    what = "request" if report["test"] == "produce" else "fetch"
    if latency:
        lines.append(f"{what} latency ms over {report['requests']:,} requests: "
                     + "  ".join(f"{k} {v:.3f}" for k, v in latency.items()))
    else:
        # An int from --acks, a string from --property request.required.acks=0.
        acks_zero = str(report.get("settings", {}).get("request.required.acks")) == "0"
        why = "acks=0: the broker does not answer" if acks_zero else "no request was answered"
        lines.append(f"{what} latency: none measured ({why})")
    held = report.get("throttle_time_ms")
    if held and held["max"]:
        lines.append(f"{what} throttle time ms (held by the broker for a quota): "
                     f"avg {held['avg']:.3f}  max {held['max']}")
    if report["failed"]:
        lines.append(f"failed: {report['failed']:,} messages")
    return "\n".join(lines)


_START_TIMEOUT = 60  # seconds for every worker process to reach the start line

# A spawned worker gets the shared objects (a Barrier, a Value) once, at start:
# they cannot travel with each task.
_inherited: tuple = ()


def _inherit(tls: dict, *shared) -> None:
    global _inherited
    _inherited = shared
    set_tls_defaults(tls)  # the parent's --command-config (client/tls.py)


def _with_inherited(target, args: tuple) -> WorkerResult:
    return target(*args, *_inherited)


def _failing_as_result(work):
    """Decorate a worker: our errors and the socket's end it with ``error`` set, not raised
    (a spawned process's exception may not survive the trip back)."""
    @functools.wraps(work)
    def worker(*args) -> WorkerResult:
        result = WorkerResult()
        try:
            return work(result, *args)
        except (HostbrokerError, OSError, ZooKeeperUnavailable) as exc:
            result.error = describe_error(exc, args[0])[0]
            result.ended = result.ended or time.monotonic()
            result.started = result.started or result.ended
            return result

    return worker


def _run_workers(target, jobs: list[tuple], with_count: bool = False) -> list[WorkerResult]:
    """``target(*job, [count,] barrier)`` for each job: in one spawned process per job.

    A single job runs here. ``count`` (when asked for) is a counter all jobs
    share; ``barrier`` makes the processes start their timed work together.
    """
    if len(jobs) == 1:
        return [target(*jobs[0], *(([0],) if with_count else ()), None)]
    context = multiprocessing.get_context("spawn")
    shared = ((context.Value("q", 0),) if with_count else ()) + (context.Barrier(len(jobs)),)
    with context.Pool(len(jobs), initializer=_inherit,
                      initargs=(tls_defaults(), *shared)) as pool:
        return pool.starmap(_with_inherited, [(target, job) for job in jobs])


def _start_together(barrier) -> None:
    if barrier is not None:
        try:
            barrier.wait(timeout=_START_TIMEOUT)
        except threading.BrokenBarrierError:
            # A TimeoutError (an OSError) ends the worker with its error line.
            raise TimeoutError(
                f"the perf processes did not all start within {_START_TIMEOUT} s") from None


def _report(kind: str, results: list[WorkerResult], as_json: bool, out: TextIO,
            err: TextIO, **settings) -> int:
    report = summarize(kind, results, **settings)
    print(json.dumps(report) if as_json else format_report(report), file=out)
    if report.get("error"):
        print(f"hostbroker perf {kind}: {report['error']}", file=err)
        return EXIT_BROKER
    return EXIT_OK


# -- produce ---------------------------------------------------------------


def payload_of(size: int, seed: int = 0) -> bytes:
    """``size`` random ASCII letters: the same payload for every message of a run.

    Letters rather than random bytes, so that compression has something to
    do (about 5.7 bits of entropy a byte), as with text or JSON payloads.
    """
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters, k=size)).encode()


@_failing_as_result
def produce_worker(result: WorkerResult, bootstrap: str, topic: str, count: int, size: int,
                   config: dict, barrier) -> WorkerResult:
    """One process's part of ``perf produce``: ``count`` messages, timed, into ``result``."""
    from hostbroker.client import DeliveryError, Producer, ProducerCallbacks
    from hostbroker.commands.console import first_failure

    latencies = result.latencies

    class Timing(ProducerCallbacks):
        def on_acknowledged(self, request, results) -> None:
            latencies.append(request.acked_at - request.sent_at)

    value = payload_of(size)
    producer = Producer(bootstrap, config, callbacks=Timing())
    _start_together(barrier)
    result.started = time.monotonic()
    try:
        send = producer.send
        for _ in range(count):
            try:
                send(topic, value)
            except DeliveryError as exc:  # sync mode
                result.failed += exc.message_count
                result.error = result.error or first_failure(exc)
        try:
            producer.close()
        except DeliveryError as exc:
            result.failed += exc.message_count
            result.error = result.error or first_failure(exc)
    finally:
        result.ended = time.monotonic()
        result.held(producer.throttle)
    result.messages = count - result.failed
    result.payload_bytes = result.messages * size
    return result


def produce(topic: str, *, messages: int, size: int, batch_size: int | None = None,
            acks: int | None = None, compression: str | None = None, processes: int = 1,
            producer_type: str = "async", properties: Iterable[str] = (),
            as_json: bool = False, bootstrap: str = DEFAULT_BOOTSTRAP,
            zookeeper: str | None = None, out: TextIO = sys.stdout,
            err: TextIO = sys.stderr) -> int:
    """Run ``perf produce`` (module docstring); 1 when any message failed."""
    check_topic(topic)
    check_limits(messages=messages, size=size, processes=processes, batch_size=batch_size)
    if processes > messages:
        raise usage_error(f"--processes ({processes}) must not exceed --messages ({messages})")
    from hostbroker.commands.console import make_producer, producer_config

    config = producer_config(properties, {
        "producer.type": producer_type,
        "request.required.acks": acks,
        "compression.codec": compression,
        "batch.size": batch_size,
    }, {"client.id": "hostbroker-perf"})
    _check_message_size(size, config)
    make_producer(config, bootstrap, zookeeper).close()  # refuse bad settings here
    if zookeeper is not None:
        bootstrap, config = None, {**config, "zookeeper.connect": zookeeper}
    jobs = [(bootstrap, topic, share, size, config) for share in shares(messages, processes)]
    results = _run_workers(produce_worker, jobs)
    return _report("produce", results, as_json, out, err, processes=processes, size=size,
                   settings=config)


def _check_message_size(size: int, config: dict) -> None:
    """Refuse a ``--size`` whose entries ``message.max.bytes`` would not take."""
    from hostbroker.client import PRODUCER_SETTINGS
    from hostbroker.client.settings import resolve
    from hostbroker.log.message import MIN_LENGTH_V1

    limit = resolve(PRODUCER_SETTINGS, config)["message.max.bytes"]
    if size + MIN_LENGTH_V1 > limit:
        raise usage_error(
            f"--size {size:,} is over message.max.bytes = {limit:,} (at most "
            f"{limit - MIN_LENGTH_V1:,} bytes of payload; raise it with --property "
            f"message.max.bytes=N, up to the broker's)")


# -- consume ---------------------------------------------------------------


@_failing_as_result
def consume_worker(result: WorkerResult, where: str, sources: list[tuple[str, list[int]]],
                   topic: str, wanted: int, fetch_size: int | None, timeout_ms: int,
                   config: dict, taken, barrier) -> WorkerResult:
    """One process's part of ``perf consume``: fetch its partitions until ``taken`` reaches
    ``wanted``.

    ``sources`` are ``(broker URI, partitions)``, fetched in turn, each broker
    over a connection of its own (standalone: one broker); ``where`` names
    them in an error. ``taken`` is the shared count (a lock-guarded
    ``multiprocessing.Value``, or a one-element list for a single process).
    A worker whose partitions have nothing new for ``timeout_ms`` stops; the
    report says if the total fell short.
    """
    from hostbroker.client import EARLIEST, SimpleConsumer

    with contextlib.ExitStack() as stack:
        consumers = [stack.enter_context(SimpleConsumer(uri, config)) for uri, _ in sources]
        _start_together(barrier)
        result.started = last_data = time.monotonic()
        positions = [{p: consumer.offsets_before(topic, p, EARLIEST)[0] for p in partitions}
                     for consumer, (_, partitions) in zip(consumers, sources)]
        turn = 0
        while any(positions):
            consumer, mine = consumers[turn], positions[turn]
            turn = (turn + 1) % len(consumers)
            if not mine:
                continue
            before = time.monotonic()
            sets = consumer.multifetch([(topic, p, o, fetch_size) for p, o in mine.items()])
            now = time.monotonic()
            result.latencies.append(now - before)
            got = 0
            size = 0
            for fetched in sets:
                for _, _, value in fetched:
                    got += 1
                    size += len(value)
                mine[fetched.partition] = fetched.next_offset
            if got:
                last_data = now
                room = _take(taken, wanted, got)
                if room < got:
                    # Count only what the shared total still wanted; the rest of the
                    # last sets is read but not reported.
                    size = size * room // got
                    got = room
                result.messages += got
                result.payload_bytes += size
            if _remaining(taken, wanted) <= 0:
                break
            if now - last_data > timeout_ms / 1000:
                break
        result.ended = time.monotonic()
        for consumer in consumers:
            result.held(consumer.throttle)
    return result


def _pairs(topic: str, bootstrap: str, zookeeper: str | None,
           config: dict) -> list[tuple[str, int]]:
    """``topic``'s partitions as (broker URI, partition): of the one broker, or the sorted
    (broker_id, partition) pairs of the live brokers registered in ``zookeeper``."""
    from hostbroker.commands.console import check_zookeeper, topic_partitions, zookeeper_session

    if zookeeper is None:
        from hostbroker.client import SimpleConsumer

        with SimpleConsumer(check_bootstrap(bootstrap), config) as consumer:
            return [(bootstrap, p) for p in topic_partitions(consumer, topic)]
    from hostbroker.client.leaders import ZooKeeperLeaders
    from hostbroker.cluster.discovery import read_snapshot
    from hostbroker.commands.brokers import broker_uri

    with zookeeper_session(check_zookeeper(zookeeper)) as client:
        snapshot = read_snapshot(client)
        replicated = ZooKeeperLeaders(client, lambda: snapshot.brokers).read([topic])[topic]
    if replicated is not None and snapshot.brokers:
        # Its global partitions, each fetched from its leader: a process's consumer is
        # given every live replica and follows each leader (LeaderRouting).
        live = [broker_uri(snapshot.brokers[b]) for p in replicated.partitions
                for b in p.replicas if b in snapshot.brokers]
        if not live:
            raise CommandError(f"no live replica of topic {topic} in ZooKeeper at {zookeeper}")
        every = ",".join(dict.fromkeys(live))
        return [(every, p.partition) for p in replicated.partitions]
    if not snapshot.brokers:
        raise CommandError(f"no live broker is registered in ZooKeeper at {zookeeper}")
    if not snapshot.partitions(topic):
        raise CommandError(f"no live broker registered topic {topic} in ZooKeeper at {zookeeper}")
    uris = {b: broker_uri(info) for b, info in snapshot.brokers.items()}
    return [(uris[b], p) for b, p in snapshot.partitions(topic)]


def _take(taken, wanted: int, n: int) -> int:
    """Add up to ``n`` to the shared count without passing ``wanted``; return how many."""
    if isinstance(taken, list):
        room = min(n, wanted - taken[0])
        taken[0] += max(room, 0)
        return max(room, 0)
    with taken.get_lock():
        room = max(min(n, wanted - taken.value), 0)
        taken.value += room
        return room


def _remaining(taken, wanted: int) -> int:
    return wanted - (taken[0] if isinstance(taken, list) else taken.value)


def consume(topic: str, *, messages: int, fetch_size: int | None = None, processes: int = 1,
            timeout_ms: int = 10000, properties: Iterable[str] = (), as_json: bool = False,
            bootstrap: str = DEFAULT_BOOTSTRAP, zookeeper: str | None = None,
            out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run ``perf consume`` (module docstring); 1 when the topic ran dry first."""
    check_topic(topic)
    check_limits(messages=messages, processes=processes, fetch_size=fetch_size,
                 timeout_ms=timeout_ms)
    config = key_values("--property", properties)
    config.setdefault("client.id", "hostbroker-perf")
    config.setdefault("auto.offset.reset", "earliest")
    pairs = _pairs(topic, bootstrap, zookeeper, config)
    if not pairs:
        raise CommandError(f"topic {topic} has no partitions")
    if processes > len(pairs):
        raise usage_error(f"--processes ({processes}) must not exceed the topic's "
                          f"{len(pairs)} partitions")
    jobs = []
    for i in range(processes):
        sources: dict[str, list[int]] = {}
        for uri, partition in pairs[i::processes]:
            sources.setdefault(uri, []).append(partition)
        jobs.append((",".join(sources), list(sources.items()), topic, messages, fetch_size,
                     timeout_ms, config))
    results = _run_workers(consume_worker, jobs, with_count=True)
    consumed = sum(r.messages for r in results)
    if consumed < messages and not any(r.error for r in results):
        results[0].error = (f"only {consumed:,} of {messages:,} messages: nothing new for "
                            f"{timeout_ms} ms")
    return _report("consume", results, as_json, out, err, processes=processes,
                   settings=config)
