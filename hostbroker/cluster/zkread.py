"""Checked reads of ZooKeeper: every value is bounded before anything is built from it.

ZooKeeper is shared, and anyone who may write to it may write any node: a
partition count of 10,000,000, a consumer registration asking for a million
streams, a node of nested brackets, a hundred thousand children. Every
reader of the cluster (the cluster view of producers, consumers, the Spark
planner and the commands; a consumer group's members and offsets; the
registrar's look at its own nodes) reads through this module, which checks
against :class:`Bounds`:

- a node's value is at most ``zookeeper.max.node.bytes`` long (a broker
  registration at most ``MAX_BROKER_NODE_BYTES``), and JSON in it
  nests at most ``MAX_JSON_DEPTH`` deep (checked before it is parsed, so a
  deep value cannot exhaust the parser);
- a node has at most ``zookeeper.max.children`` children that are used (the
  first ones in sorted order; the others are left out);
- a broker registration's partition count of a topic is at most
  ``zookeeper.max.partitions.per.registration``, and the whole cluster's
  partitions that a client keeps at most ``zookeeper.max.partitions``;
- a consumer registration asks for at most ``zookeeper.max.streams`` streams
  of a topic, and a topic's streams over the whole group are at most
  ``zookeeper.max.group.streams``.

What fails a check is left out and reported through a :class:`Reporter`: one
warning line per node, rate-limited so that a storm of bad nodes costs a few
lines a minute, never one per node or per refresh. The reader goes on with
the rest.

Pure but for :func:`children` and :func:`value`, which take a kazoo client;
who runs them is whoever reads (a client's refresher thread, the registrar).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hostbroker.config import Setting, between

MAX_JSON_DEPTH = 4  # every JSON value of the layout is one flat object
MAX_INT64 = (1 << 63) - 1
MAX_BROKER_ID = (1 << 31) - 1
MAX_NAME_BYTES = 255  # a topic, a host or a consumer id
MAX_UNIX_PATH_BYTES = 107  # sun_path less its NUL
MAX_BROKER_NODE_BYTES = 1024  # a broker registration: a host, a port and a path

SETTINGS = (
    Setting("zookeeper.max.node.bytes", int, 262144,
            "Longest value of a ZooKeeper node a client or the registrar reads (a broker "
            "registration: at most 1024 bytes); a longer one is left out with a warning.",
            between(1024, 1 << 20)),
    Setting("zookeeper.max.children", int, 10000,
            "Most children of one ZooKeeper node that are read (brokers, topics, a topic's "
            "brokers, a group's consumers, owners, offsets); the first ones in sorted order "
            "are used, the rest left out with a warning.", between(1, 1 << 20)),
    Setting("zookeeper.max.partitions.per.registration", int, 10000,
            "Largest partition count a broker's /brokers/topics/[topic]/[id] may say; a "
            "larger one is left out with a warning.", between(1, 1 << 24)),
    Setting("zookeeper.max.partitions", int, 200000,
            "Most partitions of the whole cluster a client keeps from ZooKeeper; the "
            "registrations past it are left out with a warning.", between(1, 1 << 26)),
    Setting("zookeeper.max.streams", int, 1024,
            "Most streams of one topic a consumer registration may ask for; a registration "
            "asking more is left out of the rebalance with a warning.", between(1, 1 << 20)),
    Setting("zookeeper.max.group.streams", int, 100000,
            "Most streams of one topic over a whole consumer group; the registrations past "
            "it are left out of the rebalance with a warning.", between(1, 1 << 24)),
)


@dataclass(frozen=True)
class Bounds:
    """The bounds of the reads (see the module docstring); defaults from SETTINGS."""

    node_bytes: int
    children: int
    partitions_per_registration: int
    partitions: int
    streams: int
    group_streams: int

    @classmethod
    def of(cls, settings: Mapping[str, Any] | None = None) -> Bounds:
        """The bounds of ``settings`` (dotted keys); a key not given takes its default."""
        given = settings or {}
        values = {s.key: given.get(s.key, s.default) for s in SETTINGS}
        return cls(values["zookeeper.max.node.bytes"], values["zookeeper.max.children"],
                   values["zookeeper.max.partitions.per.registration"],
                   values["zookeeper.max.partitions"], values["zookeeper.max.streams"],
                   values["zookeeper.max.group.streams"])


DEFAULT = Bounds.of()


class Reporter:
    """Warnings about bad nodes (``problem`` says what is wrong and what is done about
    it, in one line): once per path per ``interval_s``, and at most ``burst``
    lines per ``interval_s`` in all; what is held back is counted in the next line.
    Remembers at most ``remember`` paths (then forgets them all). Thread safe enough:
    a lost count under a race costs a line, never a crash."""

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0, burst: int = 5,
                 remember: int = 4096, clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.interval_s = interval_s
        self.burst = burst
        self.remember = remember
        self.clock = clock
        self._said: dict[str, float] = {}  # path -> when it was last said
        self._window = -interval_s  # start of the current window of ``burst`` lines
        self._lines = 0
        self._held = 0  # problems not said since the last line
        self.reported = 0  # every problem seen (for tests and counters)

    def __call__(self, path: str, problem: str) -> None:
        self.reported += 1
        now = self.clock()
        last = self._said.get(path)
        if last is not None and now - last < self.interval_s:
            return  # said lately
        if now - self._window >= self.interval_s:
            self._window, self._lines = now, 0
        if self._lines >= self.burst:
            self._held += 1
            return
        if len(self._said) >= self.remember:
            self._said.clear()
        self._said[path] = now
        self._lines += 1
        held, self._held = self._held, 0
        more = f" ({held} more bad ZooKeeper nodes not named)" if held else ""
        self.logger.warning("ZooKeeper: %s%s", problem, more)


def check_size(data: bytes, path: str, bounds: Bounds) -> None:
    if len(data) > bounds.node_bytes:
        raise ValueError(f"{path}: value of {len(data)} bytes is over zookeeper.max.node.bytes "
                         f"({bounds.node_bytes})")


# A string, or an unterminated one to the end of the text: matched from each quote
# in one pass (a string that must close, retried from every later quote, made a
# node of escaped quotes cost quadratic time).
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_PARENS = str.maketrans("[{]}", "(())")


def nested_deeper(text: str, limit: int) -> bool:
    """Whether ``[`` and ``{`` in JSON text (strings skipped) nest deeper than ``limit``
    (or do not balance). Linear, and at C speed: a node of hostile brackets costs
    no more than reading it."""
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text)).translate(_PARENS)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace("()", "")
    return bool(brackets)


def json_object(data: bytes, path: str, bounds: Bounds, what: str) -> dict:
    """The JSON object in ``data``, or ValueError naming ``path`` and ``what`` it should be."""
    import json

    check_size(data, path, bounds)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text ({what})") from None
    if nested_deeper(text, MAX_JSON_DEPTH):
        raise ValueError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} ({what})")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"{path}: not JSON ({what})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not a JSON object ({what})")
    return value


def decimal(data: bytes, path: str, bounds: Bounds, limit: int, name: str) -> int:
    """A decimal number from 0 to ``limit`` (``name`` is the bound, said when it is passed)."""
    check_size(data, path, bounds)
    text = data.decode(errors="replace").strip()
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"{path}: {text[:40]!r} is not a decimal number")
    if len(text) > len(str(limit)) or int(text) > limit:
        raise ValueError(f"{path}: {text[:40]} is over {name} ({limit})")
    return int(text)


def name_ok(name: str) -> bool:
    """A topic or consumer id as ZooKeeper may hold it: short, printable, no slash."""
    return (0 < len(name.encode(errors="replace")) <= MAX_NAME_BYTES
            and name.isprintable() and "/" not in name)


def children(client, path: str, bounds: Bounds, report: Callable[[str, str], None]) -> list[str]:
    """The sorted children of ``path`` ([] when it does not exist), at most
    ``bounds.children`` of them (the rest reported and left out)."""
    from kazoo.exceptions import NoNodeError

    try:
        names = client.get_children(path)
    except NoNodeError:
        return []
    names.sort()
    if len(names) > bounds.children:
        report(path, f"{path}: {len(names)} children are over zookeeper.max.children "
                     f"({bounds.children}); the first {bounds.children} are used")
        del names[bounds.children:]
    return names


def value(client, path: str, bounds: Bounds, report: Callable[[str, str], None]):
    """(data, stat) of ``path``; None when it does not exist or its value is too long
    (reported)."""
    from kazoo.exceptions import NoNodeError

    try:
        data, stat = client.get(path)
    except NoNodeError:
        return None
    try:
        check_size(data, path, bounds)
    except ValueError as exc:
        report(path, f"{exc}; left out")
        return None
    return data, stat


def unchecked(client, path: str):
    """(data, stat) of ``path``, None when it does not exist; the value's size is not
    checked, so a caller tells a value too long (:func:`check_size`) apart from an
    absent node, which :func:`value` takes alike."""
    from kazoo.exceptions import NoNodeError

    try:
        return client.get(path)
    except NoNodeError:
        return None
