"""The options of the ``hostbroker`` Spark data source, checked before any job starts.

Pure: no Spark, no sockets. Spark hands a data source its options with the
keys lower-cased; :func:`read_options` and :func:`write_options` take that
mapping and return frozen, fully checked settings, or raise
:class:`OptionError` with one line that names the option (in the spelling of
docs/spark.md) and what is wrong with it. Names follow Spark's Kafka source
where the meaning is the same; offsets are byte positions, so the limits are
in bytes (``maxBytesPerPartition``, ``maxBytesPerTrigger``).

Cluster mode (``zookeeper.connect`` instead of ``bootstrap``): the brokers
come from ZooKeeper, a partition of the cluster is a (broker id, partition)
pair, named ``BROKER-PARTITION`` (``"1-0"``) in the offsets JSON and in
``assign``, where a plain partition number is refused, as a pair is without
``zookeeper.connect``.

Client settings pass through with the prefix ``hostbroker.`` (as Spark's Kafka
source passes ``kafka.*`` to its consumer): ``hostbroker.fetch.size`` sets the
consumer's ``fetch.size`` for a read, ``hostbroker.batch.size`` the
producer's for a write. They are checked against the client's declared
settings here too.

TLS (``ssl://`` broker URIs): the client's settings ``ssl.truststore.location``,
``ssl.keystore.location``, ``ssl.key.password`` and
``ssl.endpoint.identification.algorithm`` are options of their own, under
the names of the clients and of a command's ``--command-config``. Checked
here, their files included (read once on the driver: a file that is missing,
a symbolic link, not PEM, a key that does not match or does not decrypt is
one line naming the option), and then carried with the other client
settings (``client``) to every consumer and producer of the job, on the
driver and in every task.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from hostbroker.client.consumer import CONSUMER_SETTINGS
from hostbroker.client.producer_settings import PRODUCER_SETTINGS
from hostbroker.client.settings import TLS_SETTINGS, broker_uris, redacted, resolve
from hostbroker.client.tls import tls_context
from hostbroker.cluster.paths import REPLICATED
from hostbroker.config import checked
from hostbroker.errors import ConfigError
from hostbroker.log.message import CODEC_NAMES
from hostbroker.zkconnect import parse_connect

FORMAT = "hostbroker"  # the name Spark knows the data source by
EARLIEST = -2  # in an offsets JSON, as in Spark's Kafka source
LATEST = -1
CLIENT_PREFIX = "hostbroker."
# Consumer settings the source sets itself: a read never resets past lost data
# silently (failOnDataLoss decides), and the brokers come from `bootstrap`.
_READ_OWNED = {"broker.list", "auto.offset.reset"}
_WRITE_OWNED = {"broker.list", "compression.codec", "request.required.acks", "producer.type",
                "zookeeper.connect", "zookeeper.connection.timeout.ms"}
ZK_TIMEOUT_MS = 6000  # zookeeper.connection.timeout.ms unless given

# The client's TLS settings, options of their own (of reads and writes alike).
TLS_OPTIONS = tuple(s.key for s in TLS_SETTINGS)
_READ_OWNED |= set(TLS_OPTIONS)
_WRITE_OWNED |= set(TLS_OPTIONS)

# Every option, in its documented spelling; Spark lower-cases the keys it passes.
READ_OPTIONS = ("bootstrap", "zookeeper.connect", "zookeeper.connection.timeout.ms",
                "subscribe", "subscribePattern", "assign",
                "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
                "failOnDataLoss", "maxBytesPerPartition", "maxBytesPerTrigger") + TLS_OPTIONS
WRITE_OPTIONS = ("bootstrap", "zookeeper.connect", "zookeeper.connection.timeout.ms", "topic",
                 "compression", "acks") + TLS_OPTIONS
ALL_OPTIONS = tuple(dict.fromkeys(READ_OPTIONS + WRITE_OPTIONS))
_SPELLING = {name.lower(): name for name in ALL_OPTIONS}
# Options Spark itself sets on a streaming sink or source; they are Spark's, not ours.
_SPARK_OWN = {"checkpointlocation", "queryname"}
_INT64_MAX = 2**63 - 1


class OptionError(ConfigError, ValueError):
    """An option of the data source that cannot be used; the message names it."""


def _fail(name: str, problem: str) -> OptionError:
    return OptionError(f"hostbroker data source: option {name}: {problem}")


# A partition of a read: its number, or in cluster mode the (broker id, partition) pair.
Part = int | tuple[int, int]


# The broker of a replicated topic's partitions in cluster mode: a replicated partition
# is read from whichever broker leads it, named ``-1-P``.
REPLICATED_BROKER = REPLICATED


def part_name(part: Part) -> str:
    """``"0"``, or ``"1-0"`` for broker 1's partition 0 (the seed's ZooKeeper naming),
    ``"-1-0"`` for a replicated topic's partition 0."""
    return f"{part[0]}-{part[1]}" if isinstance(part, tuple) else str(part)


def parse_part(text: str, cluster: bool) -> Part | None:
    """A partition name of an offsets JSON or checkpoint, or None when it is not one of
    this mode (a number standalone, ``BROKER-PARTITION`` in cluster mode, where
    ``-1-P`` is a replicated topic's partition P)."""
    text = str(text).strip()
    if cluster:
        replicated = f"{REPLICATED_BROKER}-"
        if text.startswith(replicated) and text[len(replicated):].isdigit():
            return REPLICATED_BROKER, int(text[len(replicated):])
        broker, sep, partition = text.partition("-")
        if sep and broker.isdigit() and partition.isdigit():
            return int(broker), int(partition)
        return None
    return int(text) if text.isdigit() else None


def _part_problem(topic: str, key: Any, cluster: bool) -> str:
    if cluster:
        return (f"topic {topic!r}: {key!r} is not BROKER-PARTITION (with zookeeper.connect a "
                'partition is named by its broker, as in "1-0")')
    hint = " (BROKER-PARTITION names need zookeeper.connect)" if "-" in str(key) else ""
    return f"topic {topic!r}: {key!r} is not a partition number{hint}"


def redacted_repr(options: Any) -> str:
    """A dataclass's repr with the ``*password`` values of its mappings shown as
    ``***`` (these objects travel in every task and may be shown in a traceback)."""
    shown = (f"{f.name}={redacted(v) if isinstance(v, Mapping) else v!r}"
             for f in fields(options) for v in (getattr(options, f.name),))
    return f"{type(options).__name__}({', '.join(shown)})"


@dataclass(frozen=True)
class ReadOptions:
    """What a read (batch or stream) was asked for.

    Exactly one of ``subscribe`` (topic names), ``pattern`` (a compiled regex
    matched whole against topic names) and ``assign`` (topic -> partitions)
    is set. ``starting`` / ``ending`` are "earliest", "latest" or a mapping
    topic -> {partition: offset} whose offsets may be EARLIEST or LATEST; a
    timestamp (ms) given instead is in ``starting_timestamp`` /
    ``ending_timestamp`` and wins. ``client`` holds consumer settings.
    """

    bootstrap: tuple[str, ...]
    subscribe: tuple[str, ...] | None = None
    pattern: re.Pattern[str] | None = None
    assign: Mapping[str, tuple[Part, ...]] | None = None
    starting: str | Mapping[str, Mapping[Part, int]] = "earliest"
    ending: str | Mapping[str, Mapping[Part, int]] = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    fail_on_data_loss: bool = True
    max_bytes_per_partition: int | None = None
    max_bytes_per_trigger: int | None = None
    client: Mapping[str, Any] = field(default_factory=dict)
    zookeeper: str | None = None  # cluster mode: brokers from ZooKeeper, parts are pairs
    zookeeper_timeout_ms: int = ZK_TIMEOUT_MS

    @property
    def cluster(self) -> bool:
        return self.zookeeper is not None

    def __repr__(self) -> str:
        return redacted_repr(self)

    def wants(self, topic: str) -> bool:
        """Whether ``topic`` is one this read subscribes to (by name, pattern or assign)."""
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None
        return self.assign is not None and topic in self.assign


@dataclass(frozen=True)
class WriteOptions:
    """What a write was asked for: the default topic (when the data has no
    ``topic`` column), codec name, acks and the producer settings; in cluster
    mode the ZooKeeper the producers find the brokers through."""

    bootstrap: tuple[str, ...]
    topic: str | None = None
    compression: str = "none"
    acks: int = 1
    client: Mapping[str, Any] = field(default_factory=dict)
    zookeeper: str | None = None
    zookeeper_timeout_ms: int = ZK_TIMEOUT_MS

    @property
    def cluster(self) -> bool:
        return self.zookeeper is not None

    def __repr__(self) -> str:
        return redacted_repr(self)


def _spelled(options: Mapping[str, str]) -> dict[str, str]:
    """The options keyed by their documented spelling, client settings by ``hostbroker.KEY``."""
    out: dict[str, str] = {}
    for key, value in options.items():
        if key.lower() in _SPARK_OWN:
            continue
        if key.lower() == "path":
            raise _fail("path", "this source takes no path; name topics with subscribe, "
                        "subscribePattern or assign (reads) or topic (writes)")
        name = _SPELLING.get(key.lower())
        if name is None and not key.lower().startswith(CLIENT_PREFIX):
            raise _fail(key, f"unknown option (known: {', '.join(ALL_OPTIONS)}, and "
                        f"{CLIENT_PREFIX}* client settings)")
        out[name or key.lower()] = "" if value is None else str(value)
    return out


def _client(spelled: Mapping[str, str], declared, owned: set[str], kind: str) -> dict[str, Any]:
    raw = {k[len(CLIENT_PREFIX):]: v for k, v in spelled.items() if k.startswith(CLIENT_PREFIX)}
    for key in raw:
        if key in owned:
            raise _fail(CLIENT_PREFIX + key, f"set by this source itself ({_owner(key)})")
    try:
        checked = resolve(declared, raw)
        return {key: checked[key] for key in raw}
    except ConfigError as exc:
        text = str(exc)
        key = text.split(":", 1)[0]
        raise _fail(CLIENT_PREFIX + key, f"not a usable {kind} setting: "
                    f"{text.split(': ', 1)[-1]}") from None


def _owner(key: str) -> str:
    if key in TLS_OPTIONS:
        return f"use the option {key}"
    return {"broker.list": "use bootstrap", "auto.offset.reset": "use failOnDataLoss",
            "compression.codec": "use compression", "request.required.acks": "use acks",
            "producer.type": "each task runs its own producer and flushes it",
            "zookeeper.connect": "use zookeeper.connect",
            "zookeeper.connection.timeout.ms": "use zookeeper.connection.timeout.ms"}[key]


def _tls(spelled: Mapping[str, str]) -> dict[str, str]:
    """The ``ssl.*`` options given, checked as the client checks them, and the
    context they make built once (its files read) so that a bad one fails here.
    A file's location must be absolute: the executors read it too, from
    another working directory. The key's password is taken as given, spaces included."""
    declared = {s.key: s for s in TLS_SETTINGS}
    given: dict[str, str] = {}
    for name in TLS_OPTIONS:
        if name in spelled:
            value = spelled[name] if name == "ssl.key.password" else spelled[name].strip()
            if name.endswith(".location") and value and not os.path.isabs(value):
                raise _fail(name, f"{value!r} must be an absolute path (the executors "
                                  "read it too, from their own working directory)")
            try:
                given[name] = checked(declared[name], value)
            except ConfigError as exc:
                raise _fail(name, str(exc).split(": ", 1)[-1]) from None
    if given:
        try:
            tls_context(given)
        except ValueError as exc:  # (a PemFileError too) "KEY: FILE: problem"
            text = str(exc)
            key, sep, rest = text.partition(": ")
            raise _fail(key if sep and key in TLS_OPTIONS else "ssl.*",
                        rest if sep and key in TLS_OPTIONS else text) from None
    return given


def _brokers(spelled: Mapping[str, str]) -> dict[str, Any]:
    """``bootstrap`` (broker URIs) or, in cluster mode, ``zookeeper`` and its timeout."""
    zookeeper = spelled.get("zookeeper.connect")
    timeout = _integer(spelled, "zookeeper.connection.timeout.ms", 1, "milliseconds")
    if zookeeper is not None:
        if "bootstrap" in spelled:
            raise _fail("bootstrap", "conflicts with zookeeper.connect: give only one (with "
                        "zookeeper.connect the brokers are the ones registered there)")
        try:
            parse_connect(zookeeper)
        except ConfigError as exc:
            raise _fail("zookeeper.connect", str(exc).split(": ", 1)[-1]) from None
        if timeout is not None and timeout > 2**31 - 1:
            raise _fail("zookeeper.connection.timeout.ms", f"{timeout} is too large")
        return {"bootstrap": (), "zookeeper": zookeeper.strip(),
                "zookeeper_timeout_ms": timeout or ZK_TIMEOUT_MS}
    if timeout is not None:
        raise _fail("zookeeper.connection.timeout.ms", "only with zookeeper.connect")
    value = spelled.get("bootstrap")
    if value is None or not value.strip():
        raise _fail("bootstrap", "required: the broker URIs, comma-separated "
                    "(unix:///run/hostbroker/broker.sock, tcp://127.0.0.1:9092), or "
                    "zookeeper.connect for a cluster")
    try:
        return {"bootstrap": tuple(broker_uris(value, {}))}
    except ConfigError as exc:
        raise _fail("bootstrap", str(exc).split(": ", 1)[-1]) from None


def _only(spelled: Mapping[str, str], names: Iterable[str], mode: str) -> None:
    for name in names:
        if name in spelled:
            raise _fail(name, f"not an option of {mode}")


def _integer(spelled: Mapping[str, str], name: str, lowest: int, what: str) -> int | None:
    """The option ``name`` as a whole number of at least ``lowest`` (``what`` it counts)."""
    value = spelled.get(name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise _fail(name, f"{value!r} is not {what}") from None
    if not lowest <= number <= _INT64_MAX:
        raise _fail(name, f"{number} is not {what} (at least {lowest})")
    return number


def _positive(spelled: Mapping[str, str], name: str) -> int | None:
    return _integer(spelled, name, 1, "a whole number of bytes")


def _timestamp(spelled: Mapping[str, str], name: str) -> int | None:
    return _integer(spelled, name, 0, "milliseconds since the epoch")


def _boolean(spelled: Mapping[str, str], name: str, default: bool) -> bool:
    value = spelled.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise _fail(name, f"{value!r} must be true or false")
    return lowered == "true"


def _topic_name(name: str, where: str) -> str:
    if not name or name != name.strip():
        raise _fail(where, f"{name!r} is not a topic name")
    return name


def parse_offsets(value: str, name: str, *, allow_latest: bool = True,
                  allow_earliest: bool = True, cluster: bool = False
                  ) -> str | dict[str, dict[Part, int]]:
    """``earliest``, ``latest`` or JSON topic -> partition -> offset (-2 earliest, -1 latest);
    in cluster mode the partitions are ``BROKER-PARTITION`` names, as (broker, partition)."""
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        word = text.lower()
        if (word == "latest" and not allow_latest) or (word == "earliest" and not allow_earliest):
            raise _fail(name, f"{word} cannot be used here")
        return word
    try:
        parsed = json.loads(text)
    except ValueError:
        raise _fail(name, f"{value!r} is not earliest, latest or JSON "
                    '{"topic": {"partition": offset}}') from None
    if not isinstance(parsed, dict) or not parsed:
        raise _fail(name, 'expected earliest, latest or JSON {"topic": {"partition": offset}}')
    out: dict[str, dict[Part, int]] = {}
    for topic, parts in parsed.items():
        _topic_name(topic, name)
        if not isinstance(parts, dict) or not parts:
            raise _fail(name, f"topic {topic!r}: expected {{\"partition\": offset}}")
        out[topic] = {}
        for key, offset in parts.items():
            partition = parse_part(key, cluster)
            if partition is None:
                raise _fail(name, _part_problem(topic, key, cluster))
            where = f"{topic}/{part_name(partition)}"
            if type(offset) is not int or not -2 <= offset <= _INT64_MAX:
                raise _fail(name, f"{where}: {offset!r} is not a byte offset "
                            f"(or -2 earliest, -1 latest)")
            if (offset == LATEST and not allow_latest) or (offset == EARLIEST and not allow_earliest):
                raise _fail(name, f"{where}: {offset} cannot be used here")
            out[topic][partition] = offset
    return out


def _subscription(spelled: Mapping[str, str], cluster: bool) -> dict[str, Any]:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name in spelled]
    if len(given) != 1:
        problem = ("exactly one of subscribe, subscribePattern and assign is needed"
                   if not given else f"conflicts with {given[1]}: give only one")
        raise _fail(given[0] if given else "subscribe", problem)
    name = given[0]
    value = spelled[name]
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise _fail(name, "names no topic")
        return {"subscribe": topics}
    if name == "subscribePattern":
        try:
            return {"pattern": re.compile(value)}
        except re.error as exc:
            raise _fail(name, f"{value!r} is not a regular expression: {exc}") from None
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise _fail(name, 'expected JSON {"topic": [partition, ...]}'
                    + (' with "BROKER-PARTITION" names' if cluster else ""))
    assign: dict[str, tuple[Part, ...]] = {}
    for topic, parts in parsed.items():
        _topic_name(topic, name)
        if not isinstance(parts, list) or not parts:
            raise _fail(name, f"topic {topic!r}: expected a list of partition numbers"
                        + (' ("BROKER-PARTITION")' if cluster else ""))
        found: set[Part] = set()
        for p in parts:
            if cluster:
                part = parse_part(p, True) if isinstance(p, str) else None
                if part is None:
                    raise _fail(name, _part_problem(topic, p, True))
            else:
                if type(p) is not int or p < 0:
                    raise _fail(name, f"topic {topic!r}: expected a list of partition numbers"
                                + (" (BROKER-PARTITION names need zookeeper.connect)"
                                   if isinstance(p, str) and "-" in p else ""))
                part = p
            found.add(part)
        assign[topic] = tuple(sorted(found))
    return {"assign": assign}


def _check_offsets_topics(opts: ReadOptions, name: str, offsets) -> None:
    """A JSON offsets option may only name topics (and partitions) the read takes."""
    if not isinstance(offsets, dict):
        return
    for topic, parts in offsets.items():
        if not opts.wants(topic):
            raise _fail(name, f"topic {topic!r} is not one this read subscribes to")
        if opts.assign is not None:
            extra = sorted(set(parts) - set(opts.assign[topic]))
            if extra:
                raise _fail(name, f"{topic}/{part_name(extra[0])} is not assigned")


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """The checked options of a batch (``streaming=False``) or streaming read."""
    spelled = _spelled(options)
    mode = "a streaming read" if streaming else "a batch read"
    _only(spelled, ("topic", "compression", "acks"), "a read (only of a write)")
    if streaming:
        _only(spelled, ("endingOffsets", "endingTimestamp"), mode)
    else:
        _only(spelled, ("maxBytesPerTrigger",), mode)
    if "startingOffsets" in spelled and "startingTimestamp" in spelled:
        raise _fail("startingTimestamp", "conflicts with startingOffsets: give only one")
    if "endingOffsets" in spelled and "endingTimestamp" in spelled:
        raise _fail("endingTimestamp", "conflicts with endingOffsets: give only one")
    values: dict[str, Any] = _brokers(spelled)
    cluster = "zookeeper" in values
    values.update(_subscription(spelled, cluster))
    if "startingOffsets" in spelled:
        # As in Spark's Kafka source, a batch cannot start at latest (it would read nothing).
        values["starting"] = parse_offsets(spelled["startingOffsets"], "startingOffsets",
                                           allow_latest=streaming, cluster=cluster)
    else:
        values["starting"] = "latest" if streaming else "earliest"
    if "endingOffsets" in spelled:
        values["ending"] = parse_offsets(spelled["endingOffsets"], "endingOffsets",
                                         allow_earliest=False, cluster=cluster)
    values["starting_timestamp"] = _timestamp(spelled, "startingTimestamp")
    values["ending_timestamp"] = _timestamp(spelled, "endingTimestamp")
    if (values["starting_timestamp"] is not None and values["ending_timestamp"] is not None
            and values["ending_timestamp"] < values["starting_timestamp"]):
        raise _fail("endingTimestamp", "is before startingTimestamp")
    values["fail_on_data_loss"] = _boolean(spelled, "failOnDataLoss", True)
    values["max_bytes_per_partition"] = _positive(spelled, "maxBytesPerPartition")
    values["max_bytes_per_trigger"] = _positive(spelled, "maxBytesPerTrigger")
    values["client"] = {**_client(spelled, CONSUMER_SETTINGS, _READ_OWNED, "consumer"),
                        **_tls(spelled)}
    opts = ReadOptions(**values)
    _check_offsets_topics(opts, "startingOffsets", opts.starting)
    _check_offsets_topics(opts, "endingOffsets", opts.ending)
    return opts


def write_options(options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    """The checked options of a batch or streaming write."""
    spelled = _spelled(options)
    mode = "a streaming write" if streaming else "a batch write"
    _only(spelled, [n for n in READ_OPTIONS if n not in WRITE_OPTIONS], mode + " (only of a read)")
    values: dict[str, Any] = _brokers(spelled)
    if "topic" in spelled:
        values["topic"] = _topic_name(spelled["topic"].strip(), "topic")
    if "compression" in spelled:
        codec = spelled["compression"].strip().lower()
        if codec not in CODEC_NAMES.values():
            raise _fail("compression", f"{spelled['compression']!r} must be one of "
                        f"{', '.join(CODEC_NAMES.values())}")
        values["compression"] = codec
    if "acks" in spelled:
        raw = spelled["acks"].strip()
        acks = {"0": 0, "1": 1, "-1": -1, "all": -1}.get(raw.lower())
        if acks is None:
            raise _fail("acks", f"{raw!r} must be 0, 1, -1 or all")
        values["acks"] = acks
    values["client"] = {**_client(spelled, PRODUCER_SETTINGS, _WRITE_OWNED, "producer"),
                        **_tls(spelled)}
    return WriteOptions(**values)


def check_known(options: Mapping[str, str]) -> None:
    """Fail on an option no mode of the source knows (the data source's constructor)."""
    _spelled(options)
