"""``hostbroker reassign generate|execute|verify``: moving replicas between brokers.

Kafka's JSON files, so its users' files work unchanged:

- ``generate --topics-to-move-json-file F --broker-list 1,2,3``: F is
  ``{"version":1,"topics":[{"topic":"t"}]}``; prints the current assignment
  of those topics and a proposed one over the brokers listed (the same
  round-robin as ``topics create``; partitions that would stay as they are
  left out), both as reassignment JSON. ``--replication-factor N`` proposes
  N replicas a partition instead of the topic's current number.
- ``execute --reassignment-json-file F``: F is
  ``{"version":1,"partitions":[{"topic":t,"partition":p,"replicas":[ids]}]}``;
  writes ``/admin/reassign_partitions`` (the controller adds the new
  replicas, waits until they are in the ISR, moves leadership and removes
  the old ones; hostbroker/cluster/controller_admin.py) and prints the
  current assignment, to keep for a rollback. One reassignment at a time.
  A partition's new list may be longer or shorter than its old one: its
  replication factor changes. Old and new replicas together (they all hold
  a copy during the move) are at most ``MAX_REPLICAS``.
- ``verify --reassignment-json-file F``: says of each partition whether it
  is done, still moving, or failed; exit status 1 unless all are done.

Files are read as hostile input: bounded size and depth, every field
checked, every partition known to ZooKeeper, replicas distinct, at most
``MAX_REPLICAS``, on registered brokers (``execute``).
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from hostbroker.commands import EXIT_BROKER, EXIT_OK, CommandError, usage_error

_MAX_ENTRIES = 100000


def _broker_list(text: str) -> list[int]:
    ids = []
    for item in text.split(","):
        item = item.strip()
        if not item.isascii() or not item.isdigit() or len(item) > 10 or int(item) > 2**31 - 1:
            raise usage_error(f"--broker-list: {item!r} is not a broker id")
        ids.append(int(item))
    if not ids or len(set(ids)) != len(ids):
        raise usage_error("--broker-list: give distinct broker ids, comma-separated")
    return sorted(ids)


def _topics_file(path: str) -> list[str]:
    from hostbroker.cluster.zkread import name_ok
    from hostbroker.commands.replicated import read_json_file

    option = "--topics-to-move-json-file"
    value = read_json_file(path, option)
    topics = value.get("topics")
    if not isinstance(topics, list) or not topics or len(topics) > _MAX_ENTRIES:
        raise usage_error(f"{option}: {path} has no \"topics\" list")
    names = []
    for entry in topics:
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name_ok(name):
            raise usage_error(f"{option}: {path}: {str(entry)[:80]} is not {{\"topic\": name}}")
        names.append(name)
    return list(dict.fromkeys(names))


def _reassignment_file(path: str) -> dict[tuple[str, int], list[int]]:
    from hostbroker.cluster.zkread import name_ok
    from hostbroker.commands.replicated import read_json_file

    option = "--reassignment-json-file"
    value = read_json_file(path, option)
    entries = value.get("partitions")
    if not isinstance(entries, list) or not entries or len(entries) > _MAX_ENTRIES:
        raise usage_error(f"{option}: {path} has no \"partitions\" list")
    from hostbroker.replication import MAX_REPLICAS as most

    wanted: dict[tuple[str, int], list[int]] = {}
    for entry in entries:
        what = str(entry)[:80]
        if not isinstance(entry, dict):
            raise usage_error(f"{option}: {path}: {what} is not a partition")
        topic, partition, replicas = (entry.get("topic"), entry.get("partition"),
                                      entry.get("replicas"))
        if not isinstance(topic, str) or not name_ok(topic):
            raise usage_error(f"{option}: {path}: {what}: no topic name")
        if type(partition) is not int or not 0 <= partition < 2**31:
            raise usage_error(f"{option}: {path}: {what}: no partition number")
        if (not isinstance(replicas, list) or not replicas
                or any(type(b) is not int or not 0 <= b < 2**31 for b in replicas)
                or len(set(replicas)) != len(replicas)):
            raise usage_error(f"{option}: {path}: {what}: replicas must be distinct broker ids")
        if len(replicas) > most:
            raise usage_error(f"{option}: {path}: {topic}-{partition}: {len(replicas)} replicas "
                              f"are over the most a partition may have ({most})")
        if (topic, partition) in wanted:
            raise usage_error(f"{option}: {path}: {topic}-{partition} is named twice")
        wanted[(topic, partition)] = replicas
    return wanted


def _document(assignments: dict[str, dict[int, list[int]]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r}
        for t in sorted(assignments) for p, r in sorted(assignments[t].items())]},
        separators=(",", ":"))


def generate(topics_file: str, broker_list: str, *, zookeeper: str,
             replication_factor: int | None = None, out: TextIO = sys.stdout,
             err: TextIO = sys.stderr) -> int:
    """Print the current and a proposed assignment of the topics of ``topics_file``
    (with ``replication_factor`` replicas a partition, else each topic's own)."""
    from hostbroker.commands import replicated
    from hostbroker.replication import MAX_REPLICAS
    from hostbroker.replication.assignment import reassignment_plan

    topics = _topics_file(topics_file)
    brokers = _broker_list(broker_list)
    if replication_factor is not None and not 1 <= replication_factor <= MAX_REPLICAS:
        raise usage_error(f"--replication-factor must be 1 to {MAX_REPLICAS}, not "
                          f"{replication_factor}")
    with replicated.zookeeper_client(zookeeper) as client:
        current = {}
        for topic in topics:
            found = replicated.assignment(client, topic, err, "reassign generate")
            if found is None:
                raise CommandError(f"no replicated topic {topic}")
            current[topic] = found
    try:
        plan = reassignment_plan(current, brokers, rf=replication_factor)
    except ValueError as exc:
        raise CommandError(f"cannot place {exc}") from None
    proposed: dict[str, dict[int, list[int]]] = {}
    for (topic, p), replicas in plan.items():
        proposed.setdefault(topic, {})[p] = replicas
    print("Current partition replica assignment", file=out)
    print(_document(current), file=out)
    print("", file=out)
    print("Proposed partition reassignment configuration", file=out)
    print(_document(proposed), file=out)
    return EXIT_OK


def _current(client, wanted, err: TextIO, command: str) -> dict[str, dict[int, list[int]]]:
    from hostbroker.commands import replicated

    current: dict[str, dict[int, list[int]]] = {}
    for topic in sorted({t for t, _ in wanted}):
        found = replicated.assignment(client, topic, err, command)
        if found is None:
            raise CommandError(f"no replicated topic {topic}")
        current[topic] = found
    for topic, p in sorted(wanted):
        if p not in current[topic]:
            raise CommandError(f"topic {topic} has no partition {p}")
    return current


def execute(reassignment_file: str, *, zookeeper: str, out: TextIO = sys.stdout,
            err: TextIO = sys.stderr) -> int:
    """Start the reassignment of ``reassignment_file``."""
    from hostbroker.commands import replicated
    from hostbroker.replication import MAX_REPLICAS, zknodes

    wanted = _reassignment_file(reassignment_file)
    with replicated.zookeeper_client(zookeeper) as client:
        current = _current(client, wanted, err, "reassign execute")
        live = set(replicated.live_ids(client, err, "reassign execute"))
        for (topic, p), replicas in sorted(wanted.items()):
            both = len(set(replicas) | set(current[topic][p]))
            if both > MAX_REPLICAS:
                raise CommandError(f"{topic}-{p}: old and new replicas together are {both} "
                                   f"brokers, over the most a partition may have "
                                   f"({MAX_REPLICAS}); move it in smaller steps")
            gone = [b for b in replicas if b not in live]
            if gone:
                raise CommandError(f"{topic}-{p}: broker{'s' if len(gone) > 1 else ''} "
                                   f"{', '.join(map(str, gone))} not live")
        replicated.create_request(
            client, zknodes.encode_reassignment(wanted), zknodes.decode_reassignment,
            zknodes.REASSIGN_PARTITIONS, "split the file into smaller reassignments",
            "a reassignment")
    moved = {t: {p: current[t][p] for (tt, p) in wanted if tt == t} for t in current}
    print("Current partition replica assignment (keep it to roll back)", file=out)
    print(_document(moved), file=out)
    print(f"started the reassignment of {len(wanted)} partition"
          f"{'s' if len(wanted) != 1 else ''}", file=out)
    return EXIT_OK


def verify(reassignment_file: str, *, zookeeper: str, out: TextIO = sys.stdout,
           err: TextIO = sys.stderr) -> int:
    """Say of each partition of ``reassignment_file`` whether its move is done."""
    from hostbroker.commands import replicated
    from hostbroker.replication import zknodes

    wanted = _reassignment_file(reassignment_file)
    with replicated.zookeeper_client(zookeeper) as client:
        current = _current(client, wanted, err, "reassign verify")
        found = client.exists(zknodes.REASSIGN_PARTITIONS)
        pending: dict = {}
        if found is not None:
            data, _ = client.get(zknodes.REASSIGN_PARTITIONS)
            try:
                pending = zknodes.decode_reassignment(data, zknodes.REASSIGN_PARTITIONS)
            except ValueError as exc:
                print(f"hostbroker reassign verify: {exc}", file=err)
    status = EXIT_OK
    for (topic, p), replicas in sorted(wanted.items()):
        if (topic, p) in pending:
            print(f"{topic}-{p}: in progress", file=out)
            status = EXIT_BROKER
        elif list(current[topic][p]) == list(replicas):
            print(f"{topic}-{p}: done", file=out)
        else:
            print(f"{topic}-{p}: failed (replicas are {list(current[topic][p])})", file=out)
            status = EXIT_BROKER
    return status
