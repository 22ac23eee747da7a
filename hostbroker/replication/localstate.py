"""The replication state of replicas across log dirs: the document hb-logdirs
keeps in ``<log dir>/log-dirs-state`` on every online log dir (docs/storage.md,
"Replicas across log dirs"), in place of ZooKeeper.

One JSON document holds, for every dir-placed topic, its config overrides and
per partition the replicas (by log dir id), leader, leader epoch, ISR,
``version`` (the partition's ``isr_version``, grown at every change of it)
and, while a reassignment runs, its ``target``; the topics being deleted; the
ids of the dirs the document was written on (``online``) and the path each
dir had when last seen; ``seq``, grown at every write; and its lineage:
``history``, a random id that changes whenever the broker goes on without a
copy it could not reconcile, and ``refused``, the copies refused that way (log
dir id -> the refused copy's ``seq`` and ``history``)::

    {"version": 1, "seq": 7, "online": [1, 2], "history": "5f0c1d2e3a4b6978",
     "refused": {"3": {"seq": 6, "history": "0123456789abcdef"}},
     "dirs": {"1": "/srv/d1", "2": "/srv/d2", "3": "/srv/d3"},
     "topics": {"t": {"config": {"retention.ms": "60000"},
                      "partitions": {"0": {"replicas": [1, 2], "leader": 1,
                                           "leader_epoch": 3, "isr": [1, 2],
                                           "version": 5}}}},
     "deleting": []}

Every copy is written whole (hb-logdirs' ``statefile.py``); at start
(:func:`start_copy`) the copy with the highest ``seq`` wins, leaving out a
copy that another copy records as refused, and it is *certain* only when
every dir of its ``online`` list holds a copy that decodes now (a dir that
is missing, or whose copy is absent or damaged, may hold a newer copy, so an
uncertain document elects no leader from an ISR that names such a dir) and
no copy is *foreign*: refused, or of another ``history``, or on a dir the
winner records as refused. A document without ``history`` (written before
it existed) is of the current lineage.

Pure: :func:`encode_state` gives the bytes, :func:`decode_state` reads bytes
as hostile input (at most ``logdirs.state.max.bytes``, ``online`` and
``refused`` at most ``logdirs.state.max.online`` ids, the settings' defaults
unless :class:`StateLimits` says otherwise; every field's type, range and
agreement checked: ids 1 to 2^31-1, replicas 1 to 8 and distinct, ISR and
leader among them, valid topic names, ``history`` 16 hex digits) and raises
:class:`StorageError` naming the file and the problem. Reading and writing
the files is hb-logdirs'.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from hostbroker.errors import InvalidTopicError, StorageError
from hostbroker.log.segments import validate_topic_name
from hostbroker.protocol.replica_fields import MAX_REPLICAS
from hostbroker.settings_logdirs import setting_default

__all__ = [
    "MAX_DIR_ID",
    "NO_LEADER",
    "STATE_FILE",
    "STATE_MAX_BYTES",
    "STATE_VERSION",
    "LocalState",
    "PartitionState",
    "StartCopy",
    "StateLimits",
    "TopicState",
    "decode_state",
    "encode_state",
    "new_history",
    "newest",
    "start_copy",
]

STATE_FILE = "log-dirs-state"
# (the settings' defaults; a broker reads and writes with its own settings)
STATE_MAX_BYTES = setting_default("logdirs.state.max.bytes")
STATE_MAX_ONLINE = setting_default("logdirs.state.max.online")
HISTORY_CHARS = 16  # a history id: 16 lowercase hex digits (64 random bits)
STATE_VERSION = 1
MAX_DIR_ID = 2**31 - 1
MAX_PARTITION = 2**31 - 1
MAX_INT = 2**63 - 1  # seq
# leader epochs and versions: int32, as the partition table's fields and the
# writers' OP_REPLICA_STATE take them
MAX_EPOCH = 2**31 - 1
NO_LEADER = -1


@dataclass(frozen=True)
class StateLimits:
    """The limits a copy is read and written under (``logdirs.state.max.bytes``,
    ``logdirs.state.max.online``)."""

    max_bytes: int = STATE_MAX_BYTES
    max_online: int = STATE_MAX_ONLINE

    @classmethod
    def of(cls, config) -> StateLimits:
        return cls(config["logdirs.state.max.bytes"], config["logdirs.state.max.online"])


DEFAULT_LIMITS = StateLimits()


def new_history() -> str:
    """A fresh history id."""
    import secrets

    return secrets.token_hex(HISTORY_CHARS // 2)


@dataclass(frozen=True)
class PartitionState:
    """One partition: replicas by log dir id (the preferred leader first),
    ``leader`` (-1: none), ``leader_epoch``, ``isr``, ``version`` and, only
    while it is being reassigned, ``target`` (else empty)."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    version: int = 0
    target: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicState:
    config: Mapping[str, str]
    partitions: Mapping[int, PartitionState]


@dataclass(frozen=True)
class LocalState:
    """The whole document. Build a changed one with :func:`dataclasses.replace`
    (or :meth:`next`); never change one in place."""

    seq: int = 0
    online: tuple[int, ...] = ()
    dirs: Mapping[int, str] = field(default_factory=dict)
    topics: Mapping[str, TopicState] = field(default_factory=dict)
    deleting: tuple[str, ...] = ()
    history: str = ""  # "": written before histories existed (of the current lineage)
    # log dir id -> (seq, history) of the copy refused there
    refused: Mapping[int, tuple[int, str]] = field(default_factory=dict)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def next(self, online: Iterable[int]) -> LocalState:
        """This document as the next write on ``online``: ``seq`` + 1."""
        return replace(self, seq=self.seq + 1, online=tuple(sorted(set(online))))

    def known_ids(self) -> set[int]:
        """Every log dir id the document names: ``assign_dir_ids`` gives a new disk
        none of them, so a dead disk's id is never reused."""
        ids = set(self.online) | set(self.dirs) | set(self.refused)
        for t in self.topics.values():
            for p in t.partitions.values():
                ids.update(p.replicas)
                ids.update(p.target)
        return ids


# -- encoding -----------------------------------------------------------------


def _partition_doc(p: PartitionState) -> dict:
    doc = {"replicas": list(p.replicas), "leader": p.leader, "leader_epoch": p.leader_epoch,
           "isr": list(p.isr), "version": p.version}
    if p.target:
        doc["target"] = list(p.target)
    return doc


def encode_state(state: LocalState, limits: StateLimits = DEFAULT_LIMITS) -> bytes:
    """The bytes of ``state``'s file (not checked again here: hb-logdirs builds
    it from checked parts, and a failover must not wait on a second parse).
    ValueError when they would be over ``limits``."""
    doc = {
        "version": STATE_VERSION,
        "seq": state.seq,
        "online": sorted(state.online),
        "dirs": {str(d): path for d, path in sorted(state.dirs.items())},
        "topics": {
            name: {"config": dict(t.config),
                   "partitions": {str(p): _partition_doc(s)
                                  for p, s in sorted(t.partitions.items())}}
            for name, t in sorted(state.topics.items())
        },
        "deleting": sorted(state.deleting),
    }
    if state.history:
        doc["history"] = state.history
    if state.refused:
        doc["refused"] = {str(d): {"seq": seq, "history": history}
                          for d, (seq, history) in sorted(state.refused.items())}
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    problem = size_problem(len(data), len(state.online), len(state.refused), limits)
    if problem:
        raise ValueError(problem)
    return data


def size_problem(size: int, online: int, refused: int, limits: StateLimits) -> str | None:
    """Why a document of ``size`` bytes naming ``online`` dirs online and ``refused``
    refused cannot be written under ``limits`` (None: it can)."""
    if size > limits.max_bytes:
        return (f"the replication state would be {size} bytes, over "
                f"logdirs.state.max.bytes {limits.max_bytes}")
    if max(online, refused) > limits.max_online:
        return (f"the replication state would name {max(online, refused)} log dirs in one "
                f"list, over logdirs.state.max.online {limits.max_online}")
    return None


# -- decoding (hostile) -------------------------------------------------------


def _int(value, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{what} {value!r:.40} is not an integer from {low} to {high}")
    return value


def _object(value, what: str, keys: set[str], optional: set[str] = frozenset()) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not an object")
    missing = keys - value.keys()
    if missing:
        raise ValueError(f"{what} has no {', '.join(sorted(missing))}")
    extra = value.keys() - keys - optional
    if extra:
        raise ValueError(f"{what} has unknown keys {sorted(extra)[:3]!r:.80}")
    return value


def _ids(value, what: str, low: int = 0, high: int = MAX_REPLICAS) -> tuple[int, ...]:
    if not isinstance(value, list) or not low <= len(value) <= high:
        raise ValueError(f"{what} is not a list of {low} to {high} log dir ids")
    ids = tuple(_int(v, f"a log dir id in {what}", 1, MAX_DIR_ID) for v in value)
    if len(set(ids)) != len(ids):
        raise ValueError(f"{what} names a log dir twice")
    return ids


def _key_int(key: str, what: str, high: int, low: int = 0) -> int:
    # keys are canonical decimals: "007" or "+7" would be a second name for 7
    if not key.isascii() or not key.isdigit() or str(int(key)) != key:
        raise ValueError(f"{what} {key[:40]!r} is not a decimal number")
    return _int(int(key), what, low, high)


def _topic(name: str, what: str) -> str:
    try:
        validate_topic_name(name)
    except InvalidTopicError as e:
        raise ValueError(f"{what}: {e}") from None
    return name


def _partition(doc, where: str) -> PartitionState:
    doc = _object(doc, where, {"replicas", "leader", "leader_epoch", "isr", "version"},
                  {"target"})
    replicas = _ids(doc["replicas"], f"the replicas of {where}", 1)
    isr = _ids(doc["isr"], f"the ISR of {where}")
    if not set(isr) <= set(replicas):
        raise ValueError(f"the ISR of {where} is not among its replicas")
    leader = doc["leader"]
    if leader != NO_LEADER:
        _int(leader, f"the leader of {where}", 1, MAX_DIR_ID)
        if leader not in replicas:
            raise ValueError(f"the leader of {where} is not among its replicas")
    elif type(leader) is not int:
        raise ValueError(f"the leader of {where} is not an integer")
    epoch = _int(doc["leader_epoch"], f"the leader epoch of {where}", 0, MAX_EPOCH)
    version = _int(doc["version"], f"the version of {where}", 0, MAX_EPOCH)
    target = _ids(doc["target"], f"the target of {where}", 1) if "target" in doc else ()
    return PartitionState(replicas, leader, epoch, isr, version, target)


def _history(value, what: str) -> str:
    if not isinstance(value, str) or (value and (
            len(value) != HISTORY_CHARS or value.strip("0123456789abcdef"))):
        raise ValueError(f"{what} {value!r:.40} is not {HISTORY_CHARS} hex digits")
    return value


def _refused(value, limit: int) -> dict[int, tuple[int, str]]:
    if not isinstance(value, dict) or len(value) > limit:
        raise ValueError(f"refused is not an object of at most {limit} log dirs")
    out = {}
    for key, entry in value.items():
        dir_id = _key_int(key, "a log dir id in refused", MAX_DIR_ID, 1)
        entry = _object(entry, f"refused {dir_id}", {"seq", "history"})
        out[dir_id] = (_int(entry["seq"], f"the seq of refused {dir_id}", 0, MAX_INT),
                       _history(entry["history"], f"the history of refused {dir_id}"))
    return out


def _decode(raw: bytes, limits: StateLimits) -> LocalState:
    if len(raw) > limits.max_bytes:
        raise ValueError(f"longer than logdirs.state.max.bytes {limits.max_bytes}")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"not JSON ({type(e).__name__})") from None
    doc = _object(doc, "the document", {"version", "seq", "online", "dirs", "topics",
                                        "deleting"}, {"history", "refused"})
    if doc["version"] != STATE_VERSION or type(doc["version"]) is not int:
        raise ValueError(f"version {doc['version']!r:.40} is not {STATE_VERSION}")
    seq = _int(doc["seq"], "seq", 0, MAX_INT)
    if isinstance(doc["online"], list) and len(doc["online"]) > limits.max_online:
        raise ValueError(f"online names {len(doc['online'])} log dirs, over "
                         f"logdirs.state.max.online {limits.max_online}")
    online = _ids(doc["online"], "online", 0, limits.max_online)
    history = _history(doc.get("history", ""), "history")
    if "history" in doc and not history:
        raise ValueError("history is empty")
    refused = _refused(doc["refused"], limits.max_online) if "refused" in doc else {}
    dirs_doc = doc["dirs"]
    if not isinstance(dirs_doc, dict):
        raise ValueError("dirs is not an object")
    dirs: dict[int, str] = {}
    for key, path in dirs_doc.items():
        dir_id = _key_int(key, "a log dir id in dirs", MAX_DIR_ID, 1)
        if not isinstance(path, str) or not path or "\0" in path:
            raise ValueError(f"the path of log dir {dir_id} is not a path")
        dirs[dir_id] = path
    topics_doc = doc["topics"]
    if not isinstance(topics_doc, dict):
        raise ValueError("topics is not an object")
    topics: dict[str, TopicState] = {}
    for name, t in topics_doc.items():
        _topic(name, "a topic")
        t = _object(t, f"topic {name!r}", {"config", "partitions"})
        config = t["config"]
        if not isinstance(config, dict) or not all(
                isinstance(v, str) for v in config.values()):
            raise ValueError(f"the config of {name!r} is not an object of strings")
        parts_doc = t["partitions"]
        if not isinstance(parts_doc, dict) or not parts_doc:
            raise ValueError(f"the partitions of {name!r} are not a non-empty object")
        parts: dict[int, PartitionState] = {}
        for key, p in parts_doc.items():
            number = _key_int(key, f"a partition of {name!r}", MAX_PARTITION)
            parts[number] = _partition(p, f"{name!r} {number}")
        topics[name] = TopicState(config, parts)
    deleting_doc = doc["deleting"]
    if not isinstance(deleting_doc, list) or not all(isinstance(n, str) for n in deleting_doc):
        raise ValueError("deleting is not a list of topic names")
    deleting = tuple(_topic(n, "a topic being deleted") for n in deleting_doc)
    if len(set(deleting)) != len(deleting):
        raise ValueError("deleting names a topic twice")
    return LocalState(seq, online, dirs, topics, deleting, history, refused)


def decode_state(raw: bytes, path: str, limits: StateLimits = DEFAULT_LIMITS) -> LocalState:
    """The document in ``raw``, the content of the file ``path``; StorageError
    naming ``path`` and the problem for anything that is not a valid one
    (``limits``: the broker's, else the settings' defaults)."""
    try:
        return _decode(raw, limits)
    except ValueError as e:
        raise StorageError(f"{path}: {e}") from None


@dataclass(frozen=True)
class StartCopy:
    """What :func:`start_copy` found: the copy to start from (None: none read),
    whether it is certain, and the *foreign* dirs: id -> why that dir's copy is
    not of the lineage started from (refused, another history, or the dir is
    recorded as refused)."""

    state: LocalState | None
    certain: bool
    foreign: Mapping[int, str]


def _refused_by_another(dir_id: int, copy: LocalState, present: Mapping[int, LocalState]) -> bool:
    return any(dir_id in other.refused and other.refused[dir_id] == (copy.seq, copy.history)
               and other.history != copy.history
               for d, other in present.items() if d != dir_id)


def start_copy(copies: Mapping[int, LocalState | None]) -> StartCopy:
    """The copy to start from, whether it is certain, and the foreign dirs.

    ``copies`` maps the id of every log dir present now to the copy read
    there (None: absent, damaged or unreadable). A copy another copy records
    as refused (same dir, ``seq`` and ``history``) never wins; of the others
    the highest ``seq`` wins (the lowest dir id among equals). Foreign: a
    refused copy, a copy whose ``history`` differs from the winner's (both
    set), and every dir the winner records as refused. Certain: no dir is
    foreign, and every dir of the winner's ``online`` list has a copy here
    (a dir that is missing, or whose copy could not be read, may hold a newer
    one).
    """
    present = {d: c for d, c in copies.items() if c is not None}
    refused = {d for d, c in present.items() if _refused_by_another(d, c, present)}
    best: LocalState | None = None
    for dir_id in sorted(present):
        copy = present[dir_id]
        if dir_id not in refused and (best is None or copy.seq > best.seq):
            best = copy
    if best is None:
        return StartCopy(None, False, {})
    foreign: dict[int, str] = {}
    for dir_id, copy in sorted(present.items()):
        if dir_id in refused:
            foreign[dir_id] = f"its state file (seq {copy.seq}) was refused"
        elif copy.history and best.history and copy.history != best.history:
            foreign[dir_id] = (f"its state file (seq {copy.seq}) is of another history "
                               f"({copy.history}, not {best.history})")
    for dir_id, (seq, _) in sorted(best.refused.items()):
        foreign.setdefault(dir_id, f"its state file (seq {seq}) was refused")
    certain = not foreign and set(best.online) <= set(present)
    return StartCopy(best, certain, foreign)


def newest(copies: Mapping[int, LocalState | None]) -> tuple[LocalState | None, bool]:
    """:func:`start_copy`'s copy and whether it is certain."""
    found = start_copy(copies)
    return found.state, found.certain
