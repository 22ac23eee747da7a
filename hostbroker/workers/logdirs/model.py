"""hb-logdirs' document in memory: the replication state of the dir-placed topics.

A mutable mirror of the state file (format in docs/storage.md, "Replicas
across log dirs"; decoded hostile by ``replication/localstate.py``): per
topic its config and per partition its replicas, leader, leader epoch, ISR,
version and, while a reassignment runs, its target (all log dir ids); the
topics being deleted; the dirs known (id -> path when last seen); the
sequence number of the last write; the lineage (``history``, and the copies
``refused``: dir id -> their seq and history). Only ``hb-logdirs`` holds one. It is
turned into the file's bytes by :meth:`Document.encode` and built from a
decoded copy by :meth:`Document.from_state`, both through the file's JSON
form, so this module depends on the format, not on the decoder's classes.
"""

from __future__ import annotations

import dataclasses
import json

TP = tuple[str, int]
FORMAT_VERSION = 1


@dataclasses.dataclass
class Part:
    replicas: list[int]
    leader: int = -1
    leader_epoch: int = 0
    isr: list[int] = dataclasses.field(default_factory=list)
    version: int = 0
    target: list[int] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        out = {"replicas": list(self.replicas), "leader": self.leader,
               "leader_epoch": self.leader_epoch, "isr": list(self.isr),
               "version": self.version}
        if self.target:
            out["target"] = list(self.target)
        return out


@dataclasses.dataclass
class Document:
    seq: int = 0
    online: list[int] = dataclasses.field(default_factory=list)
    dirs: dict[int, str] = dataclasses.field(default_factory=dict)
    configs: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    parts: dict[TP, Part] = dataclasses.field(default_factory=dict)
    deleting: list[str] = dataclasses.field(default_factory=list)
    history: str = ""  # "": none yet (a document from before histories): given at a write
    refused: dict[int, tuple[int, str]] = dataclasses.field(default_factory=dict)

    # -- the file's JSON form ------------------------------------------------
    def to_json(self) -> dict:
        topics: dict[str, dict] = {}  # (a topic is written with its partitions only)
        for (topic, p), part in sorted(self.parts.items()):
            entry = topics.setdefault(topic, {"config": dict(self.configs.get(topic, {})),
                                              "partitions": {}})
            entry["partitions"][str(p)] = part.to_json()
        out = {"version": FORMAT_VERSION, "seq": self.seq, "online": sorted(self.online),
               "dirs": {str(i): path for i, path in sorted(self.dirs.items())},
               "topics": topics, "deleting": list(self.deleting)}
        if self.history:
            out["history"] = self.history
        if self.refused:
            out["refused"] = {str(d): {"seq": seq, "history": history}
                              for d, (seq, history) in sorted(self.refused.items())}
        return out

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, doc: dict) -> Document:
        """From the JSON form of a copy the decoder accepted (so well formed)."""
        out = cls(seq=int(doc["seq"]), online=[int(i) for i in doc.get("online", [])],
                  dirs={int(i): str(path) for i, path in doc.get("dirs", {}).items()},
                  deleting=[str(t) for t in doc.get("deleting", [])],
                  history=str(doc.get("history", "")),
                  refused={int(d): (int(r["seq"]), str(r["history"]))
                           for d, r in doc.get("refused", {}).items()})
        for topic, entry in doc.get("topics", {}).items():
            out.configs[topic] = {str(k): str(v) for k, v in entry.get("config", {}).items()}
            for p, part in entry.get("partitions", {}).items():
                out.parts[(topic, int(p))] = Part(
                    [int(r) for r in part["replicas"]], int(part["leader"]),
                    int(part["leader_epoch"]), [int(r) for r in part["isr"]],
                    int(part.get("version", 0)), [int(r) for r in part.get("target", [])])
        return out

    @classmethod
    def from_state(cls, state) -> Document:
        """From a ``LocalState`` that ``replication/localstate.py`` decoded."""
        from hostbroker.replication.localstate import StateLimits, encode_state

        # (read under the broker's limits already: not checked against the defaults)
        unbounded = StateLimits(max_bytes=2**62, max_online=2**31)
        return cls.from_json(json.loads(encode_state(state, unbounded)))

    def to_state(self):
        """As a ``LocalState`` (the decoder's checks applied: a bug here is refused)."""
        from hostbroker.replication.localstate import decode_state

        return decode_state(self.encode(), "<hb-logdirs>")

    # -- questions -------------------------------------------------------------
    def topic_parts(self, topic: str) -> list[tuple[int, Part]]:
        return sorted((p, part) for (t, p), part in self.parts.items() if t == topic)

    def known_ids(self) -> set[int]:
        """Every dir id this document names: a fresh disk never gets one of them."""
        ids = set(self.dirs) | set(self.online) | set(self.refused)
        for part in self.parts.values():
            ids.update(part.replicas)
            ids.update(part.target)
        return ids

    def moving(self) -> bool:
        """Whether a reassignment runs (a target set anywhere)."""
        return any(part.target for part in self.parts.values())
