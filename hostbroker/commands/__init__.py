"""The work of the ``hostbroker`` client commands, one module per command.

- ``topics``   create, list, describe, alter and delete topics (``replicated``: the
  ZooKeeper side of replicated topics; ``topics_alter_zk``: ``topics alter --zookeeper``;
  ``topics_describe_zk``: ``topics describe --zookeeper``; ``topics_shown``: how a topic
  is shown)
- ``brokers``  reaching every live broker of a cluster (used by the cluster commands)
- ``leaders``  preferred replica election of replicated topics
- ``reassign`` generate, execute and verify partition reassignments (between brokers,
  or between the log dirs of a standalone broker)
- ``logdirs``  a standalone broker's log dirs: list, bring one back online, forget one
- ``replicas`` verify that replicas equal their leader below the high watermark
- ``groups``   consumer groups: list, describe (owners, offsets, lag), reset offsets
- ``acls``     a standalone broker's ACLs: add, remove, list (Kafka's kafka-acls.sh shape)
- ``quotas``   a standalone broker's quotas per principal: set, remove, list
- ``console``  ``produce`` (stdin lines to a topic) and ``consume`` (a topic to stdout)
- ``dumplog``  read segment files entry by entry and say where they stop being valid
- ``mirror``   copy topics from one broker or cluster to another
- ``perf``     producer and consumer throughput and latency
- ``perf_latency``  per-API request latency percentiles at three loads (``perf latency``)
- ``load``     topics into Parquet/ORC/JSON files on Spark, exactly once
  (the Spark side is ``hostbroker.spark.loader``)
- ``cpulatency``  ``cpu-latency``: the CPU wake-up latency target, or a request held
- ``whoami``   the principal, groups and host a broker sees for this connection

``hostbroker.cli`` parses the arguments and calls one function here with
plain values; nothing in this package parses a command line. Importing a
module here has no side effect and pulls in no client code: each command
imports what it needs when it runs, so ``hostbroker --help`` stays fast.

Every command ends through :func:`run`, which turns what went wrong into one
line on stderr and an exit status (``hostbroker.exits`` holds the statuses and
:class:`CommandError`). A closed stdout (``| head``) ends a command quietly
with status 0.
The long-running commands (``produce``, ``consume``, ``mirror``) take SIGTERM
as Ctrl-C (:func:`stop_on_sigterm`; ``mirror`` through :class:`StopRequests`,
which never cuts a commit short) and stop the normal way: producer flushed,
offsets committed, status 0.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterable

from hostbroker.errors import ConfigError, HostbrokerError
from hostbroker.exits import (
    EXIT_BROKER, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CommandError, usage_error,
)

DEFAULT_BOOTSTRAP = "tcp://127.0.0.1:9092"

class Stopped(Exception):
    """SIGTERM asked a long-running command to stop, as Ctrl-C would."""


def stop_on_sigterm() -> None:
    """Make SIGTERM raise :class:`Stopped` in the main thread, so a command that catches
    it (with KeyboardInterrupt) commits its offsets and flushes its producer first."""
    def handler(signum, frame):
        raise Stopped

    signal.signal(signal.SIGTERM, handler)


class StopRequests:
    """SIGTERM and Ctrl-C for a command whose main thread talks to brokers between
    its waits (``mirror``): a stop is raised as :class:`Stopped` only while the main
    thread is inside :meth:`waiting`; one that comes elsewhere (in the middle of a
    commit, whose connection it would leave half-read) is remembered and raised when
    the thread next enters :meth:`waiting`. Only the first one counts."""

    def __init__(self) -> None:
        self.requested = False
        self._waiting = False
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handler)

    def _handler(self, signum, frame) -> None:
        if self.requested:
            return
        self.requested = True
        if self._waiting:
            self._waiting = False
            raise Stopped

    def waiting(self):
        """A context in which a stop is raised at once (and at entry, if one came)."""
        return _Waiting(self)


class _Waiting:
    def __init__(self, requests: StopRequests) -> None:
        self.requests = requests

    def __enter__(self) -> None:
        if self.requests.requested:
            raise Stopped
        self.requests._waiting = True

    def __exit__(self, *exc) -> None:
        self.requests._waiting = False


def check_bootstrap(uri: str, option: str = "--bootstrap") -> str:
    """``uri`` if it names a broker (see ``parse_uri``), else a usage error naming ``option``."""
    from hostbroker.client.connection import parse_uri

    try:
        parse_uri(uri)
    except ValueError as exc:
        raise usage_error(f"{option}: {exc}") from None
    return uri


def check_topic(topic: str) -> str:
    """``topic`` if it is a legal topic name, else a usage error naming the rule."""
    from hostbroker.errors import InvalidTopicError
    from hostbroker.log.segments import validate_topic_name

    try:
        validate_topic_name(topic)
    except InvalidTopicError as exc:
        raise usage_error(str(exc)) from None
    return topic


def key_values(option: str, items: Iterable[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` strings given to ``option`` as a mapping; a usage error names a bad one."""
    from hostbroker.client.settings import parse_properties

    result: dict[str, str] = {}
    for item in items or ():
        try:
            result.update(parse_properties([item]))
        except ConfigError:
            raise usage_error(f"{option} {item!r}: expected KEY=VALUE") from None
    return result


def _quiet_stdout() -> None:
    # Whatever is still buffered for the closed pipe would fail again at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def describe_error(exc: BaseException, bootstrap: str | None) -> tuple[str, int]:
    """The one line and exit status for an error a command did not handle itself."""
    from hostbroker.client.errors import BrokerError, ConnectionClosedError

    if isinstance(exc, ConfigError):
        return str(exc), EXIT_USAGE
    if isinstance(exc, BrokerError):
        return f"broker error: {exc}", EXIT_BROKER
    if isinstance(exc, ConnectionClosedError):
        return str(exc), EXIT_BROKER
    if isinstance(exc, TimeoutError):
        return "no answer from the broker in time", EXIT_BROKER
    if isinstance(exc, OSError):
        # the client's connect names the broker it tried (hostbroker.client.connection)
        uri = getattr(exc, "broker_uri", None) or bootstrap
        reason = getattr(exc, "broker_reason", None) or exc.strerror or exc
        where = f" at {uri}" if uri else ""
        return f"cannot reach the broker{where}: {reason}", EXIT_BROKER
    return str(exc), EXIT_BROKER


def run(name: str, work: Callable[..., int], *args, bootstrap: str | None = None,
        **kwargs) -> int:
    """Call ``work`` and turn any failure into one line on stderr and a status.

    ``bootstrap``, when given, is passed on to ``work`` as a keyword and named
    in the line for a broker that cannot be reached. Only our own errors, the
    client's and the socket's are translated; a bug still shows its traceback.
    """
    if bootstrap is not None:
        kwargs["bootstrap"] = bootstrap
    try:
        return work(*args, **kwargs)
    except CommandError as exc:
        message, status = str(exc), exc.status
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK
    except (KeyboardInterrupt, Stopped):
        return EXIT_INTERRUPTED
    except (HostbrokerError, OSError) as exc:
        message, status = describe_error(exc, bootstrap)
    print(f"hostbroker {name}: {message}", file=sys.stderr)
    return status
