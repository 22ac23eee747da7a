"""``hostbroker load``: matching topics into files at a path, on Spark, exactly once.

This module checks what it was given and reports; the Spark job is
``hostbroker.spark.loader``. Everything that can be refused is refused
before the JVM starts, with one line and status 2: the regex, ``--from-time``,
a format, the source's options (checked by ``hostbroker.spark.options``,
named here by their flags), and an output directory that is not a load's
(or, with ``--from-time``, one that holds a load started otherwise; a load
started with ``--from-time`` resumes with the time it kept). A broker that
cannot be reached is status 1 before Spark starts too. A query that fails
is one line and status 1. The summary goes to stdout, progress to stderr.

``--zookeeper`` loads from a cluster (docs/spark.md): the brokers are the
live ones registered there (``--bootstrap`` is then not used), ZooKeeper and
at least one broker must answer before Spark starts, and an output made in
the other mode is refused (status 2).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterable
from typing import TextIO

from hostbroker.commands import check_bootstrap, key_values, stop_on_sigterm
from hostbroker.exits import EXIT_OK, CommandError, usage_error

# The source's option names as the command's flags, for its one-line errors.
_FLAGS = {"bootstrap": "--bootstrap", "zookeeper.connect": "--zookeeper",
          "subscribePattern": "--topics",
          "startingTimestamp": "--from-time", "maxBytesPerTrigger": "--max-bytes-per-trigger",
          "failOnDataLoss": "--fail-on-data-loss"}
_OPTION = re.compile(r"^hostbroker data source: option (\S+?): (.*)$")


def as_flags(line: str) -> str:
    """A data source option error with the option named as this command's flag."""
    if line.startswith("zookeeper.connect: "):  # ZooKeeper did not answer
        return "--zookeeper: " + line[len("zookeeper.connect: "):]
    match = _OPTION.match(line)
    if not match:
        return line
    name, problem = match.groups()
    if name.startswith("hostbroker."):
        return f"--property {name[len('hostbroker.'):]}: {problem}"
    return f"{_FLAGS.get(name, name)}: {problem}"


def _command_tls() -> dict[str, str]:
    """The ``ssl.*`` settings ``--command-config`` gave (those not at their defaults):
    options of the Spark source, so that its tasks reach ``ssl://`` brokers with them."""
    from hostbroker.client.tls import TLS_DEFAULTS, tls_defaults

    return {k: v for k, v in tls_defaults().items() if v != TLS_DEFAULTS[k]}


def _job(bootstrap, topics_regex, path, fmt, master, from_time, fail_on_data_loss,
         max_bytes_per_trigger, properties, zookeeper=None):
    from hostbroker.spark.loader import FORMATS, LoadJob, parse_time
    from hostbroker.spark.options import OptionError, read_options

    if zookeeper is None:
        check_bootstrap(bootstrap)
    else:
        from hostbroker.commands.console import check_zookeeper

        check_zookeeper(zookeeper)  # and kazoo's retries kept off stderr
        bootstrap = None  # the brokers are the ones registered in ZooKeeper
    try:
        re.compile(topics_regex)
    except re.error as exc:
        raise usage_error(f"--topics {topics_regex!r}: not a regular expression: {exc}") from None
    if fmt not in FORMATS:
        raise usage_error(f"--format {fmt}: one of {', '.join(FORMATS)} (the value column is "
                          "binary, which csv cannot hold)")
    if not path or not path.strip():
        raise usage_error("--to: an output directory is needed")
    millis = None
    if from_time is not None:
        try:
            millis = parse_time(from_time)
        except ValueError as exc:
            raise usage_error(f"--from-time {exc}") from None
    job = LoadJob(bootstrap=bootstrap, topics=topics_regex, path=path, fmt=fmt, master=master,
                  from_time=millis, fail_on_data_loss=fail_on_data_loss,
                  max_bytes_per_trigger=max_bytes_per_trigger,
                  properties=key_values("--property", properties), zookeeper=zookeeper,
                  tls=_command_tls())
    try:
        read_options(job.source_options(), streaming=True)
    except OptionError as exc:
        raise usage_error(as_flags(str(exc))) from None
    return job


def load(*, bootstrap: str, topics_regex: str, path: str, fmt: str = "parquet",
         master: str = "local[*]", from_time: str | None = None, fail_on_data_loss: bool = True,
         max_bytes_per_trigger: int | None = None, properties: Iterable[str] = (),
         quiet: bool = False, zookeeper: str | None = None, out: TextIO = sys.stdout,
         err: TextIO = sys.stderr) -> int:
    """Load the topics matching ``topics_regex`` into ``path`` (module docstring)."""
    from hostbroker.spark import loader

    job = _job(bootstrap, topics_regex, path, fmt, master, from_time, fail_on_data_loss,
               max_bytes_per_trigger, properties, zookeeper)
    resumed, from_time_kept = loader.check_output(job.path, job.from_time,
                                                  cluster=zookeeper is not None)
    job = dataclasses.replace(job, from_time=from_time_kept)
    # The brokers answer before the JVM starts (and say where each read begins, for bytes).
    try:
        starts = loader.read_starts(job)
    except CommandError as exc:
        raise CommandError(as_flags(str(exc)), exc.status) from None
    stop_on_sigterm()
    if not quiet:
        print(f"loading {topics_regex!r} into {path} on {master}"
              f"{' (resuming where the last run ended)' if resumed else ''}", file=err, flush=True)
    try:
        summary = loader.run(job, resumed=resumed, err=None if quiet else err, starts=starts)
    except CommandError as exc:
        raise CommandError(as_flags(str(exc)), exc.status) from None
    print(summary.line(), file=out)
    return EXIT_OK
