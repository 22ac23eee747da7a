"""The replication state of replicas across log dirs: the document hb-logdirs
keeps in ``<log dir>/log-dirs-state`` on every online log dir (docs/storage.md,
"Replicas across log dirs"), in place of ZooKeeper.

One JSON document holds, for every dir-placed topic, its config overrides and
per partition the replicas (by log dir id), leader, leader epoch, ISR,
``version`` (the partition's ``isr_version``, grown at every change of it)
and, while a reassignment runs, its ``target``; the topics being deleted; the
ids of the dirs the document was written on (``online``) and the path each
dir had when last seen; and ``seq``, grown at every write::

    {"version": 1, "seq": 7, "online": [1, 2],
     "dirs": {"1": "/srv/d1", "2": "/srv/d2", "3": "/srv/d3"},
     "topics": {"t": {"config": {"retention.ms": "60000"},
                      "partitions": {"0": {"replicas": [1, 2], "leader": 1,
                                           "leader_epoch": 3, "isr": [1, 2],
                                           "version": 5}}}},
     "deleting": []}

Every copy is written whole (hb-logdirs' ``statefile.py``); at start the copy
with the highest ``seq`` wins (:func:`newest`), and it is *certain* only when
every dir of its ``online`` list holds a copy that decodes now: a dir that
is missing, or whose copy is absent or damaged, may hold a newer copy, so an
uncertain document elects no leader from an ISR that names such a dir.

Pure: :func:`encode_state` gives the bytes, :func:`decode_state` reads bytes
as hostile input (at most :data:`STATE_MAX_BYTES`; every field's type, range
and agreement checked: ids 1 to 2^31-1, replicas 1 to 8 and distinct, ISR and
leader among them, valid topic names) and raises :class:`StorageError`
naming the file and the problem. Reading and writing the files is hb-logdirs'.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from hostbroker.errors import InvalidTopicError, StorageError
from hostbroker.log.segments import validate_topic_name
from hostbroker.protocol.replica_fields import MAX_REPLICAS

__all__ = [
    "MAX_DIR_ID",
    "NO_LEADER",
    "STATE_FILE",
    "STATE_MAX_BYTES",
    "STATE_VERSION",
    "LocalState",
    "PartitionState",
    "TopicState",
    "decode_state",
    "encode_state",
    "newest",
]

STATE_FILE = "log-dirs-state"
STATE_MAX_BYTES = 64 * 1024 * 1024
STATE_VERSION = 1
MAX_DIR_ID = 2**31 - 1
MAX_PARTITION = 2**31 - 1
MAX_INT = 2**63 - 1  # seq
# leader epochs and versions: int32, as the partition table's fields and the
# writers' OP_REPLICA_STATE take them
MAX_EPOCH = 2**31 - 1
NO_LEADER = -1


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

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def next(self, online: Iterable[int]) -> LocalState:
        """This document as the next write on ``online``: ``seq`` + 1."""
        return replace(self, seq=self.seq + 1, online=tuple(sorted(set(online))))

    def known_ids(self) -> set[int]:
        """Every log dir id the document names: ``assign_dir_ids`` gives a new disk
        none of them, so a dead disk's id is never reused."""
        ids = set(self.online) | set(self.dirs)
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


def encode_state(state: LocalState) -> bytes:
    """The bytes of ``state``'s file (not checked again here: hb-logdirs builds
    it from checked parts, and a failover must not wait on a second parse).
    ValueError when they would be over :data:`STATE_MAX_BYTES`."""
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
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    if len(data) > STATE_MAX_BYTES:
        raise ValueError(f"the replication state is {len(data)} bytes, over "
                         f"{STATE_MAX_BYTES}")
    return data


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


def _decode(raw: bytes) -> LocalState:
    if len(raw) > STATE_MAX_BYTES:
        raise ValueError(f"longer than {STATE_MAX_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"not JSON ({type(e).__name__})") from None
    doc = _object(doc, "the document", {"version", "seq", "online", "dirs", "topics",
                                        "deleting"})
    if doc["version"] != STATE_VERSION or type(doc["version"]) is not int:
        raise ValueError(f"version {doc['version']!r:.40} is not {STATE_VERSION}")
    seq = _int(doc["seq"], "seq", 0, MAX_INT)
    online = _ids(doc["online"], "online", 0, MAX_DIR_ID)
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
    return LocalState(seq, online, dirs, topics, deleting)


def decode_state(raw: bytes, path: str) -> LocalState:
    """The document in ``raw``, the content of the file ``path``; StorageError
    naming ``path`` and the problem for anything that is not a valid one."""
    try:
        return _decode(raw)
    except ValueError as e:
        raise StorageError(f"{path}: {e}") from None


def newest(copies: Mapping[int, LocalState | None]) -> tuple[LocalState | None, bool]:
    """The copy to start from, and whether it is certain.

    ``copies`` maps the id of every log dir present now to the copy read
    there (None: absent, damaged or unreadable). The copy with the highest
    ``seq`` wins (the lowest dir id among equals). It is certain when every
    dir of its ``online`` list has a copy here: a dir that is missing, or
    whose copy could not be read, may hold a newer one. ``(None, False)``
    when no copy was read.
    """
    best: LocalState | None = None
    for dir_id in sorted(copies):
        copy = copies[dir_id]
        if copy is not None and (best is None or copy.seq > best.seq):
            best = copy
    if best is None:
        return None, False
    return best, set(best.online) <= {d for d, c in copies.items() if c is not None}
