"""``hostbroker load``: topics copied into files by a Spark streaming query, exactly once.

The loader owns the Spark side of the command: the output directory's
rules, the streaming query, its progress on the terminal and the summary.

The query reads every partition of the topics matching a regex with the
``hostbroker`` stream reader and writes them with Spark's file sink,
partitioned by topic (``PATH/topic=NAME/``), under ``Trigger.AvailableNow``:
everything the brokers hold when it starts, in as many micro-batches as the
read limit asks, then it ends. Its checkpoint is ``PATH/_checkpoint`` (the
byte offsets each batch read up to) and the file sink keeps its own log in
``PATH/_spark_metadata`` (the files each batch committed). Together they
make the copy exactly once: a batch killed half way is read again from the
same offsets on the next run, and the files it left are not in the sink's
log, so a reader going through Spark (``spark.read.parquet(PATH)``) never
sees them. The next run on the same PATH starts where the last one ended.

With ``zookeeper`` (``--zookeeper``) the read is the source's cluster mode:
every (broker, partition) of the live brokers, the files gain a ``broker``
column and the checkpoint names partitions ``BROKER-PARTITION``; the mode is
kept with the checkpoint, and resuming a load in the other mode is refused.

:func:`check_output` decides, before the JVM starts, whether PATH is a new
output, a load to resume or something to refuse; :func:`run` builds the
query, reports progress (one line on stderr per second in which batches
ended) and returns a :class:`Summary`. A failure of the query becomes a
:class:`~hostbroker.exits.CommandError` with one line (:func:`one_line`),
status 2 for an option the source refused, else 1; never a Java trace.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO

from hostbroker.exits import EXIT_BROKER, EXIT_USAGE, CommandError, plural, usage_error
from hostbroker.spark.options import FORMAT, TLS_OPTIONS, redacted_repr

FORMATS = ("parquet", "orc", "json")
CHECKPOINT = "_checkpoint"
SINK_LOG = "_spark_metadata"
SETTINGS = "hostbroker-load.json"  # in the checkpoint: what the load was started with
# How often the query's progress is looked at, and the fewest seconds between two lines.
_POLL_SECONDS = 0.25
_LINE_SECONDS = 1.0


@dataclass(frozen=True)
class LoadJob:
    """What to load: the source, the topics, where to, and how."""

    bootstrap: str | None
    topics: str  # a regex matched against whole topic names
    path: str
    fmt: str = "parquet"
    master: str = "local[*]"
    from_time: int | None = None  # ms since the epoch: a fresh output from this time on
    fail_on_data_loss: bool = True
    max_bytes_per_trigger: int | None = None
    properties: Mapping[str, str] = field(default_factory=dict)  # consumer settings
    zookeeper: str | None = None  # cluster mode: the brokers registered there, not bootstrap
    # the ssl.* client settings of ssl:// brokers (--command-config), under properties
    tls: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return redacted_repr(self)

    def source_options(self) -> dict[str, str]:
        """The options of the ``hostbroker`` stream reader, in their documented spelling."""
        brokers = ({"zookeeper.connect": self.zookeeper} if self.zookeeper is not None
                   else {"bootstrap": self.bootstrap})
        options = {**brokers, "subscribePattern": self.topics,
                   "failOnDataLoss": str(self.fail_on_data_loss).lower()}
        if self.from_time is None:
            options["startingOffsets"] = "earliest"
        else:
            options["startingTimestamp"] = str(self.from_time)
        if self.max_bytes_per_trigger is not None:
            options["maxBytesPerTrigger"] = str(self.max_bytes_per_trigger)
        options.update(self.tls)
        for key, value in self.properties.items():
            # (the ssl.* settings are options of their own, for the tasks too)
            options[key if key in TLS_OPTIONS else f"hostbroker.{key}"] = value
        return options


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date or date-time (UTC unless it says)."""
    value = text.strip()
    if re.fullmatch(r"\d+", value):
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{text!r} is neither milliseconds since the epoch nor an ISO-8601 "
                         "date or date-time (2026-11-26, 2026-11-26T08:00:00+01:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    millis = int(moment.timestamp() * 1000)
    if millis < 0:
        raise ValueError(f"{text!r} is before 1970")
    return millis


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def _settings_file(path: str) -> str:
    return os.path.join(_local(path), CHECKPOINT, SETTINGS)


def check_output(path: str, from_time: int | None, cluster: bool = False
                 ) -> tuple[bool, int | None]:
    """Whether ``path`` holds a load to resume, and the ``from_time`` the load runs with.

    A load started with ``--from-time`` keeps it in its checkpoint
    (:func:`keep_settings`): the first batch's start is not checkpointed, so
    a rerun of that batch must start from the same time. Resuming, the stored
    time is used; a different one is refused, as is a file or a directory
    holding anything but a load's output (usage errors, status 2), and a load
    made in the other mode (``cluster``: with ``--zookeeper``; its checkpoint
    names partitions otherwise). Only local paths are checked; a URI
    (``hdfs://...``) is taken as a new output.
    """
    if not _is_local(path):
        return False, from_time
    local = _local(path)
    if not os.path.exists(local):
        return False, from_time
    if not os.path.isdir(local):
        raise usage_error(f"--to {path}: not a directory")
    if os.path.isdir(os.path.join(local, CHECKPOINT)):
        stored, stored_cluster = _stored(path)
        if stored_cluster != cluster:
            made, given = (("--zookeeper", "--bootstrap") if stored_cluster
                           else ("--bootstrap", "--zookeeper"))
            raise usage_error(f"--to {path}: holds a load made with {made}, which cannot be "
                              f"resumed with {given} (its checkpoint names partitions in the "
                              "other mode's way); give a new --to")
        if from_time is not None and from_time != stored:
            began = "its log starts" if stored is None else f"--from-time {stored}"
            raise usage_error(f"--from-time needs a fresh output, and {path} already holds a "
                              f"load (from {began}); give a new --to")
        return True, stored
    entries = set(os.listdir(local))
    sink_log = os.path.join(local, SINK_LOG)
    if SINK_LOG in entries and not os.listdir(sink_log):
        entries.discard(SINK_LOG)  # a run that stopped before its first batch
    if entries:
        raise usage_error(f"--to {path}: holds files but no {CHECKPOINT}, so it is not a "
                          "load's output; give a new or empty directory")
    return False, from_time


def _stored(path: str) -> tuple[int | None, bool]:
    """The ``from_time`` and mode (cluster or not) a load was started with; a load
    that kept neither (made before they were kept) started at its log starts, standalone."""
    try:
        with open(_settings_file(path), encoding="utf-8") as f:
            settings = json.load(f)
        value, cluster = settings.get("from_time"), settings.get("cluster", False)
    except FileNotFoundError:
        return None, False
    except (OSError, ValueError, AttributeError) as exc:
        raise usage_error(f"--to {path}: {CHECKPOINT}/{SETTINGS} cannot be read: {exc}") from None
    return (value if isinstance(value, int) else None), cluster is True


def keep_settings(job: LoadJob) -> None:
    """Write the load's ``from_time`` and mode into a new output's checkpoint (local paths)."""
    if not _is_local(job.path):
        return
    target = _settings_file(job.path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    temporary = target + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump({"from_time": job.from_time, "cluster": job.zookeeper is not None}, f)
    os.replace(temporary, target)


def output_dir(path: str) -> str:
    """``path`` as Spark should see it (local paths made absolute)."""
    return os.path.abspath(_local(path)) if _is_local(path) else path


# Errors of the query, reduced to one line.

_OPTION_LINE = re.compile(r"hostbroker data source: option [^\n]*")
_PY_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception|Failed)): (.+)$")
_JAVA_PREFIX = re.compile(r"^(?:[\w$]+\.)+[\w$]+(?:Exception|Error): ")
_ERROR_CLASS = re.compile(r"^\[[A-Z_.]+\]\s*")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+|\s+$")
_SAYS_WHAT = ("cannot reach ", "hostbroker data source: ")


def one_line(text: str) -> tuple[str, bool]:
    """The line worth showing of a Spark error's text, and whether it is an option error.

    An option the data source refused is named as the source named it. A
    Python traceback (from the source, on the driver or in a task) gives its
    ``SomeError: message`` line (of the first traceback in the text), without the
    class when the message says what it is (``cannot reach URI: ...``, ``hostbroker
    data source: ...``). Otherwise the first line, without a Java class name or
    Spark's ``[ERROR_CLASS]`` in front.
    """
    found = _OPTION_LINE.search(text)
    if found:
        return found.group(0).strip(), True
    # The first traceback is the error itself; later ones are pyspark's on the way out.
    for section in text.split("Traceback (most recent call last)")[1:2]:
        for line in reversed(section.splitlines()):
            match = _PY_ERROR.match(line)
            if match:
                said = match.group(2)
                if not said.startswith(_SAYS_WHAT):
                    said = f"{match.group(1)}: {said}"
                return _SQLSTATE.sub("", said)[:500], False
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else "the query failed"
    first = _ERROR_CLASS.sub("", _JAVA_PREFIX.sub("", first))
    stream_failed = re.search(r"terminated with exception: (.+)", first)
    if stream_failed:
        first = _JAVA_PREFIX.sub("", stream_failed.group(1))
    return _SQLSTATE.sub("", first)[:500], False


# Progress.

def _offsets(value: Any) -> dict[str, dict[str, int]]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {topic: {str(p): int(o) for p, o in parts.items() if isinstance(o, int)}
            for topic, parts in value.items() if isinstance(parts, dict)}


def _progress_value(progress: Any, name: str) -> Any:
    if isinstance(progress, Mapping):
        return progress.get(name)
    return getattr(progress, name, None)


class Tally:
    """The run's totals, from the query's progress reports (each batch counted once).

    Bytes are byte offsets moved: for each partition, a batch's end offset
    minus its start offset (headers and compressed sizes included). A
    partition that has no start offset in a report (the first batch of a
    query, or a partition created since) starts at ``starts`` (the offset
    the read began at, asked of the brokers), or else counts from 0.
    Partitions are ``(topic, name)``, the name as the offsets spell it
    (``"0"``, or ``"1-0"`` in cluster mode); ``starts`` may be keyed by the
    source's keys.
    """

    def __init__(self, starts: Mapping[tuple, int] | None = None):
        from hostbroker.spark.options import part_name
        from hostbroker.spark.planning import part_of

        self.starts = {(key[0], part_name(part_of(key))): offset
                       for key, offset in (starts or {}).items()}
        self.batches = 0
        self.messages = 0
        self.bytes = 0
        self.partitions: set[tuple[str, str]] = set()
        self._seen: set[int] = set()

    def add(self, progress: Any) -> bool:
        """Count one progress report; False if it adds nothing (seen, or no batch ran)."""
        batch = _progress_value(progress, "batchId")
        rows = _progress_value(progress, "numInputRows") or 0
        sources = _progress_value(progress, "sources") or []
        moved: dict[tuple[str, int], int] = {}
        for source in sources:
            start = _offsets(_progress_value(source, "startOffset"))
            end = _offsets(_progress_value(source, "endOffset"))
            for topic, parts in end.items():
                for partition, offset in parts.items():
                    key = (topic, partition)
                    begin = start.get(topic, {}).get(partition)
                    if begin is None:
                        begin = self.starts.get(key, 0)
                    if offset > begin:
                        moved[key] = offset - begin
        if batch in self._seen or (not rows and not moved):
            return False
        self._seen.add(batch)
        self.batches += 1
        self.messages += rows
        self.bytes += sum(moved.values())
        self.partitions.update(moved)
        return True

    @property
    def topics(self) -> set[str]:
        return {topic for topic, _ in self.partitions}

    def figures(self, seconds: float) -> str:
        """``2 topics, 4 partitions, 1,200 messages, 0.12 MB, 300 msg/s, 0.03 MB/s``."""
        seconds = max(seconds, 1e-3)
        return (f"{plural(len(self.topics), 'topic')}, "
                f"{plural(len(self.partitions), 'partition')}, "
                f"{plural(self.messages, 'message')}, {self.bytes / 1e6:,.2f} MB, "
                f"{self.messages / seconds:,.0f} msg/s, {self.bytes / 1e6 / seconds:,.2f} MB/s")


@dataclass(frozen=True)
class Summary:
    """What one run loaded (this run's share only) and where."""

    path: str
    batches: int
    topics: int
    partitions: int
    messages: int
    bytes: int
    seconds: float

    def line(self) -> str:
        seconds = max(self.seconds, 1e-3)
        return (f"loaded {plural(self.messages, 'message')} ({plural(self.bytes, 'byte')}) of "
                f"{plural(self.topics, 'topic')}, {plural(self.partitions, 'partition')} in "
                f"{self.batches:,} batch{'' if self.batches == 1 else 'es'}, "
                f"{self.seconds:.1f} s ({self.messages / seconds:,.0f} msg/s, "
                f"{self.bytes / 1e6 / seconds:,.2f} MB/s) into {self.path}")


def read_starts(job: LoadJob) -> dict[tuple[str, int], int]:
    """Where the read of each partition there is now begins when the checkpoint does not
    say (a new output, a partition new since the last run), as the stream reader resolves
    it: the log start, or the offset for ``from_time``. Only the byte counts use it.
    Asking it is also how a broker that cannot be reached is found before Spark starts."""
    from hostbroker.cluster.zk import ZooKeeperUnavailable
    from hostbroker.spark.cluster import make_planner
    from hostbroker.spark.options import read_options
    from hostbroker.spark.planning import DataLossError, PlanningError

    try:
        with make_planner(read_options(job.source_options(), streaming=True)) as planner:
            states = planner.partitions(must_exist=False)
            snapshot = getattr(planner, "snapshot", None)
            if job.zookeeper is not None and (snapshot is None or not snapshot.brokers):
                raise PlanningError(f"no live broker is registered in ZooKeeper at "
                                    f"{job.zookeeper}")
            return planner.resolve(states, "start")
    except (PlanningError, DataLossError, ZooKeeperUnavailable) as exc:
        raise CommandError(str(exc), EXIT_BROKER) from None


def _session(master: str) -> Any:
    """The SparkSession, its JVM started with stderr to /dev/null.

    The JVM writes its log, a Java trace for a failed query and its own
    warnings to stderr, and its Python workers inherit that; the loader says
    what went wrong in one line instead. This process's stderr is its own
    again once the JVM is up.
    """
    from hostbroker.spark.session import spark_session

    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        return spark_session(master, app_name="hostbroker-load")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _start_query(spark: Any, job: LoadJob) -> Any:
    path = output_dir(job.path)
    frame = spark.readStream.format(FORMAT).options(**job.source_options()).load()
    return (frame.writeStream.format(job.fmt).partitionBy("topic")
            .option("path", path)
            .option("checkpointLocation", path.rstrip("/") + "/" + CHECKPOINT)
            .queryName("hostbroker-load")
            .trigger(availableNow=True)
            .start())


def run(job: LoadJob, *, resumed: bool, err: TextIO | None = None,
        starts: Mapping[tuple[str, int], int] | None = None) -> Summary:
    """Run the query to its end; progress lines to ``err`` (None: quiet)."""
    if not resumed:
        keep_settings(job)
    try:
        spark = _session(job.master)
        query = _start_query(spark, job)
    except Exception as exc:  # noqa: BLE001 - pyspark's errors, reduced to one line
        raise _failed(exc) from None
    tally = Tally(starts)
    began = time.monotonic()
    last_line = 0.0
    unsaid = False  # batches ended since the last progress line
    # Ctrl-C and SIGTERM are noted and acted on between two calls into the JVM: an
    # exception raised inside a Py4J call would leave its connection half read.
    asked_to_stop: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        asked_to_stop.append(signum)
        _quiet_from_now_on()

    previous = {signum: signal.signal(signum, on_signal)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                done = query.awaitTermination(_POLL_SECONDS)
            except Exception as exc:  # noqa: BLE001
                if asked_to_stop:  # the JVM had the signal too, and is going
                    raise KeyboardInterrupt from None
                raise _failed(exc) from None
            if asked_to_stop:
                raise KeyboardInterrupt
            for progress in _progress(query):
                unsaid = tally.add(progress) or unsaid
            now = time.monotonic()
            if err is not None and unsaid and (done or now - last_line >= _LINE_SECONDS):
                print(f"batch {tally.batches}: {tally.figures(now - began)}", file=err, flush=True)
                last_line, unsaid = now, False
            if done:
                break
    except BaseException:
        _stop(query)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    seconds = time.monotonic() - began
    return Summary(path=job.path, batches=tally.batches, topics=len(tally.topics),
                   partitions=len(tally.partitions), messages=tally.messages, bytes=tally.bytes,
                   seconds=seconds)


def _quiet_from_now_on() -> None:
    """Nothing more on stderr: a stop says nothing, and pyspark and Py4J (threads and
    loggers of this process) would print the end of a JVM that had the signal too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def _progress(query: Any) -> Iterable[Any]:
    try:
        return query.recentProgress
    except Exception:  # noqa: BLE001 - progress is a nicety; the query's end decides
        return ()


def _stop(query: Any) -> None:
    try:
        query.stop()
    except Exception:  # noqa: BLE001 - already on the way out
        pass


def _failed(exc: BaseException) -> CommandError:
    line, usage = one_line(str(exc))
    return CommandError(line, EXIT_USAGE if usage else EXIT_BROKER)
