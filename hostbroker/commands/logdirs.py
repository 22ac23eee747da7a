"""``hostbroker logdirs list|online|forget``: a standalone broker's log dirs, as
its replicas across log dirs see them (docs/storage.md, "Replicas across log
dirs"; docs/runbook-disk.md).

- ``list``: each log dir's id (``-`` for one without: every dir of a one-dir
  or cluster broker), path and state (online, offline, or missing: known to
  the broker's replication state but not configured or not readable), with
  the replicas it holds, the partitions it leads and how many of those are
  under-replicated; from METADATA version 2.
- ``online --log-dir PATH``: bring an offline dir back while the broker runs
  (LOG_DIR_ADMIN, action online); its replicas truncate to where they left
  their leaders' logs and catch up.
- ``forget --log-dir-id N``: stop waiting for a dir that is gone (LOG_DIR_ADMIN,
  action forget): partitions left leaderless because that dir may have held a
  newer copy of the replication state elect from the replicas there are.
  Consent to losing what only that dir had.

The rest of the module is what ``topics describe`` and ``reassign
--bootstrap`` share: :class:`DirNames`, which turns dir ids into paths and
paths into ids through the broker's own dir table (a replica is named by its
dir's id on the wire and by its path to an operator), and
:func:`metadata_v2`, the read that tells an older broker apart.

Everything the broker answers is read as it comes (the codec bounds it); a
path given by the operator is checked here before anything is sent.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

from hostbroker.commands import DEFAULT_BOOTSTRAP, check_bootstrap
from hostbroker.exits import EXIT_OK, CommandError, usage_error

# METADATA v2's state of a log dir (hostbroker.protocol.logdirs: DIR_ONLINE,
# DIR_OFFLINE, DIR_MISSING), as the tools print it
STATE_NAMES = {0: "online", 1: "offline", 2: "missing"}
ONLINE = "online"
MISSING = "missing"
MISSING_PREFIX = "missing:"
MAX_DIR_ID = 2**31 - 1
MAX_PATH_CHARS = 4096


def dir_path(text: str, option: str) -> str:
    """``text`` as a log dir path (trailing slashes and ``.`` parts dropped), or a
    usage error naming ``option``: empty, over 4096 characters, or holding a NUL
    or a line break."""
    if not isinstance(text, str) or not text.strip():
        raise usage_error(f"{option}: give a log dir path")
    if len(text) > MAX_PATH_CHARS or any(c in text for c in "\0\n\r"):
        raise usage_error(f"{option}: {text[:80]!r} is not a log dir path")
    return os.path.normpath(text)


def dir_id(text: str, option: str) -> int:
    """``text`` as a log dir id (1 to 2^31-1), or a usage error naming ``option``."""
    if not text.isascii() or not text.isdigit() or len(text) > 10 \
            or not 1 <= int(text) <= MAX_DIR_ID:
        raise usage_error(f"{option}: {text!r} is not a log dir id (1 to {MAX_DIR_ID})")
    return int(text)


@dataclass(frozen=True)
class LogDir:
    dir_id: int
    path: str | None
    state: str

    def as_json(self) -> dict:
        return {"id": self.dir_id, "path": self.path, "state": self.state}


class DirNames:
    """The broker's log dirs by id and by path, from METADATA v2's dir table.

    A configured dir (online or offline) is named by its path. A missing one
    is ``missing:<id>``, as is an id the table does not hold: the path a
    missing dir was last seen at may be a new disk's now, under another id.
    A configured dir without an id (-1: every dir of a one-dir or cluster
    broker) is listed, but no replica can be named on it.
    """

    def __init__(self, dirs: Iterable[LogDir]):
        self.dirs = sorted(dirs, key=lambda d: d.dir_id)  # (stable: the broker's order)
        self.by_id = {d.dir_id: d for d in self.dirs if d.dir_id > 0}
        self.by_path = {os.path.normpath(d.path): d.dir_id for d in self.dirs
                        if d.path and d.state != MISSING}

    @classmethod
    def from_response(cls, response) -> DirNames:
        return cls(LogDir(d.dir_id, d.path, STATE_NAMES.get(d.state, f"state {d.state}"))
                   for d in response.log_dirs)

    def name(self, dir_id: int) -> str:
        found = self.by_id.get(dir_id)
        if found is None or not found.path or found.state == MISSING:
            return f"{MISSING_PREFIX}{dir_id}"
        return found.path

    def names(self, ids: Sequence[int]) -> list[str]:
        return [self.name(i) for i in ids]

    def state(self, dir_id: int) -> str:
        found = self.by_id.get(dir_id)
        return found.state if found is not None else MISSING

    def id_of(self, path: str, where: str) -> int:
        """The id of the dir at ``path``; a one-line refusal (status 1) naming
        ``where`` and the broker's dirs for a path the broker does not have."""
        found = self.by_path.get(os.path.normpath(path))
        if found is None:
            known = ", ".join(d.path for d in self.dirs
                              if d.path and d.state != MISSING) or "none"
            raise CommandError(f"{where}: {path} is not a log dir of the broker "
                               f"(its log dirs: {known})")
        if found <= 0:
            raise CommandError(f"{where}: log dir {path} has no log dir id (the broker "
                               "keeps no replicas across log dirs there)")
        return found

    def online_id(self, path: str, where: str) -> int:
        """:meth:`id_of`, refusing a dir that is not online."""
        found = self.id_of(path, where)
        state = self.state(found)
        if state != ONLINE:
            raise CommandError(f"{where}: log dir {path} is {state}")
        return found


def metadata_v2(client, topics: Sequence[str] = (), *, required: str | None = None):
    """METADATA version 2 of ``topics`` (every topic when empty), or None when the
    broker does not know that version (an older broker: it refuses the request and
    closes the connection, which the client opens again on its next request). With
    ``required``, that case is the one-line error "the broker does not support
    ``required``" instead."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import ErrorCode

    try:
        return client.metadata_v2(topics)
    except BrokerError as exc:
        if exc.code != ErrorCode.UNSUPPORTED_VERSION or exc.topic is not None:
            raise
    if required is not None:
        raise CommandError(f"the broker does not support {required}")
    return None


def partition_is_short(p) -> bool:
    """A partition of a METADATA v2 answer whose ISR lacks a replica, or which
    has no leader: under-replicated (what ``top`` calls it too)."""
    if not p.replica_dirs:
        return False
    return p.leader_dir < 0 or len(p.isr_dirs) < len(p.replica_dirs)


def _client(bootstrap: str):
    from hostbroker.client.simple import SimpleClient

    return SimpleClient(check_bootstrap(bootstrap), client_id="hostbroker-logdirs")


def dir_counts(response) -> dict[int | str, dict[str, int]]:
    """Per dir id: the replicas it holds, the partitions it leads, and how many of
    those are under-replicated, counted over the topics of ``response``. The
    partitions of a dir without an id (no dir lists: one replica, on the
    ``log_dir`` that serves it) count under that dir's path: each one replica,
    led there while the partition has a leader."""
    counts: dict[int | str, dict[str, int]] = {}

    def of(key: int | str) -> dict[str, int]:
        return counts.setdefault(key, {"replicas": 0, "leaders": 0, "under_replicated": 0})

    for topic in response.topics:
        for p in topic.partitions:
            if not p.replica_dirs:
                if p.log_dir:
                    row = of(os.path.normpath(p.log_dir))
                    row["replicas"] += 1
                    row["leaders"] += p.leader >= 0
                continue
            for i in p.replica_dirs:
                of(i)["replicas"] += 1
            if p.leader_dir >= 0:
                row = of(p.leader_dir)
                row["leaders"] += 1
                row["under_replicated"] += partition_is_short(p)
    return counts


def list_dirs(*, as_json: bool = False, bootstrap: str = DEFAULT_BOOTSTRAP,
              out: TextIO = sys.stdout) -> int:
    """Print the broker's log dirs: id, path, state, replicas, leaders and
    under-replicated partitions led there."""
    with _client(bootstrap) as client:
        response = metadata_v2(client, required="log dirs listing (METADATA version 2)")
    names = DirNames.from_response(response)
    counts = dir_counts(response)
    rows = []
    for d in names.dirs:
        key = d.dir_id if d.dir_id > 0 else os.path.normpath(d.path or "")
        figures = counts.get(key, {"replicas": 0, "leaders": 0, "under_replicated": 0})
        rows.append({**d.as_json(), **figures})
    if as_json:
        print(json.dumps({"log_dirs": rows}, indent=2), file=out)
        return EXIT_OK
    table = [("id", "path", "state", "replicas", "leaders", "under-replicated")]
    table += [(str(r["id"]) if r["id"] > 0 else "-", r["path"] or "-", r["state"],
               str(r["replicas"]), str(r["leaders"]), str(r["under_replicated"]))
              for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
    return EXIT_OK


def _admin(client, action: int, path: str | None, dir_id_value: int) -> None:
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import ErrorCode

    try:
        response = client.log_dir_admin(action, path, dir_id_value)
    except BrokerError as exc:
        if exc.code == ErrorCode.UNSUPPORTED_VERSION and exc.topic is None:
            raise CommandError("the broker does not support log dir admin (LOG_DIR_ADMIN)") \
                from None
        raise
    if response.error_code != ErrorCode.NONE:
        raise BrokerError(response.error_code, response.error_message or "")


def online(path: str, *, bootstrap: str = DEFAULT_BOOTSTRAP, out: TextIO = sys.stdout) -> int:
    """Bring the offline log dir at ``path`` back; the broker answers once its
    writer has opened the dir again (at once for a dir that is online)."""
    from hostbroker.protocol.logdirs import ACTION_ONLINE, NO_DIR

    path = dir_path(path, "--log-dir")
    with _client(bootstrap) as client:
        _admin(client, ACTION_ONLINE, path, NO_DIR)
        response = metadata_v2(client)
    names = DirNames.from_response(response) if response is not None else DirNames(())
    found = names.by_path.get(path)
    if found is None:  # (an older answer, or a path relative to the broker's directory)
        print(f"log dir {path} is online", file=out)
    else:
        print(f"log dir {path} is {names.state(found)} (id {found})", file=out)
    return EXIT_OK


def forget(dir_id_text: str, *, bootstrap: str = DEFAULT_BOOTSTRAP,
           out: TextIO = sys.stdout) -> int:
    """Stop waiting for log dir ``dir_id_text``: its replicas leave the assignment's
    ISRs and partitions that waited for it elect from the replicas there are."""
    from hostbroker.protocol.logdirs import ACTION_FORGET

    number = dir_id(dir_id_text, "--log-dir-id")
    with _client(bootstrap) as client:
        _admin(client, ACTION_FORGET, None, number)
    print(f"log dir id {number} forgotten: partitions that waited for it elect leaders "
          "from the other in-sync replicas", file=out)
    return EXIT_OK
