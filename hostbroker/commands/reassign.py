"""``hostbroker reassign generate|execute|verify``: moving replicas between brokers,
or between the log dirs of one standalone broker.

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

With ``--bootstrap URI`` instead of ``--zookeeper`` the same actions move
replicas between the log dirs of a standalone broker (docs/storage.md,
"Replicas across log dirs"; docs/runbook-disk.md). The files name dirs by
path (``"log_dirs": ["/srv/d3", "/srv/d1"]``, the first the preferred
leader), ``generate`` takes ``--dir-list /srv/d1,/srv/d3``, and paths become
dir ids through the broker's dir table (METADATA version 2): a path the
broker does not have, or a dir that is not online, is refused in one line.
``generate`` keeps every replica that is on a listed dir and moves the
others, in their places, to the least loaded listed dirs (fewest replicas,
then fewest bytes): listing every dir but one empties that one, and listing
the survivors of a dead disk with its replacement refills the new one. The
partitions of a topic of one replica that is not placed on log dirs (created
with a replication factor of 1) cannot move: ``generate`` leaves them out,
in one line on stderr.
``execute`` sends ALTER_REPLICA_DIRS (the broker's hb-logdirs adds the new
replicas, waits until they are in the ISR, moves leadership and deletes the
old ones; one reassignment at a time) and ``verify`` reads METADATA v2:
done when the replicas are the plan's and no move is pending.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from hostbroker.exits import EXIT_BROKER, EXIT_OK, CommandError, usage_error

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


def _broker_ids(replicas) -> list[int] | None:
    if (not isinstance(replicas, list) or not replicas
            or any(type(b) is not int or not 0 <= b < 2**31 for b in replicas)
            or len(set(replicas)) != len(replicas)):
        return None
    return replicas


def _dir_paths(dirs) -> list[str] | None:
    import os

    from hostbroker.commands.logdirs import MAX_PATH_CHARS

    if (not isinstance(dirs, list) or not dirs
            or any(not isinstance(d, str) or not d.strip() or len(d) > MAX_PATH_CHARS
                   or any(c in d for c in "\0\n\r") for d in dirs)):
        return None
    paths = [os.path.normpath(d) for d in dirs]
    return paths if len(set(paths)) == len(paths) else None


def _reassignment_file(path: str, key: str = "replicas") -> dict[tuple[str, int], list]:
    """``{(topic, partition): replicas}`` of a reassignment file: broker ids under
    ``"replicas"`` (cluster mode), or log dir paths under ``"log_dirs"`` (a
    standalone broker); every field checked, usage errors in one line."""
    from hostbroker.cluster.zkread import name_ok
    from hostbroker.commands.replicated import read_json_file

    option = "--reassignment-json-file"
    value = read_json_file(path, option)
    entries = value.get("partitions")
    if not isinstance(entries, list) or not entries or len(entries) > _MAX_ENTRIES:
        raise usage_error(f"{option}: {path} has no \"partitions\" list")
    from hostbroker.replication import MAX_REPLICAS as most

    check, kind = ((_broker_ids, "replicas must be distinct broker ids") if key == "replicas"
                   else (_dir_paths, "log_dirs must be distinct log dir paths"))
    wanted: dict[tuple[str, int], list] = {}
    for entry in entries:
        what = str(entry)[:80]
        if not isinstance(entry, dict):
            raise usage_error(f"{option}: {path}: {what} is not a partition")
        topic, partition = entry.get("topic"), entry.get("partition")
        if not isinstance(topic, str) or not name_ok(topic):
            raise usage_error(f"{option}: {path}: {what}: no topic name")
        if type(partition) is not int or not 0 <= partition < 2**31:
            raise usage_error(f"{option}: {path}: {what}: no partition number")
        replicas = check(entry.get(key))
        if replicas is None:
            raise usage_error(f"{option}: {path}: {what}: {kind}")
        if len(replicas) > most:
            raise usage_error(f"{option}: {path}: {topic}-{partition}: {len(replicas)} replicas "
                              f"are over the most a partition may have ({most})")
        if (topic, partition) in wanted:
            raise usage_error(f"{option}: {path}: {topic}-{partition} is named twice")
        wanted[(topic, partition)] = replicas
    return wanted


def _document(assignments: dict[str, dict[int, list]], key: str = "replicas") -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, key: r}
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
    from hostbroker.cluster import replica_nodes
    from hostbroker.replication import MAX_REPLICAS

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
            client, replica_nodes.encode_reassignment(wanted), replica_nodes.decode_reassignment,
            replica_nodes.REASSIGN_PARTITIONS, "split the file into smaller reassignments",
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
    from hostbroker.cluster import replica_nodes

    wanted = _reassignment_file(reassignment_file)
    with replicated.zookeeper_client(zookeeper) as client:
        current = _current(client, wanted, err, "reassign verify")
        found = client.exists(replica_nodes.REASSIGN_PARTITIONS)
        pending: dict = {}
        if found is not None:
            data, _ = client.get(replica_nodes.REASSIGN_PARTITIONS)
            try:
                pending = replica_nodes.decode_reassignment(
                    data, replica_nodes.REASSIGN_PARTITIONS)
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


# -- a standalone broker: replicas across its log dirs ----------------------------
#
# The same three actions over --bootstrap, with log dirs named by path where
# cluster mode names broker ids ("log_dirs" in the files, --dir-list). Paths
# become ids through the broker's own dir table (METADATA version 2); the
# broker's hb-logdirs runs the moves (ALTER_REPLICA_DIRS).

_DIRS = "log_dirs"


def _code_name(code) -> str:
    return getattr(code, "name", f"error code {code}")


def _dir_list(text: str) -> list[str]:
    from hostbroker.commands.logdirs import dir_path

    paths = [dir_path(item, "--dir-list") for item in text.split(",") if item.strip()]
    if not paths or len(set(paths)) != len(paths):
        raise usage_error("--dir-list: give distinct log dir paths, comma-separated")
    return paths


def _dir_client(bootstrap: str):
    from hostbroker.client.simple import SimpleClient
    from hostbroker.commands import check_bootstrap

    return SimpleClient(check_bootstrap(bootstrap), client_id="hostbroker-reassign")


def _dir_metadata(client, topics):
    """(DirNames, ``{(topic, partition): METADATA v2 partition}``) of ``topics``
    (every topic when empty); a named topic the broker does not have is a
    one-line error."""
    from hostbroker.commands.logdirs import DirNames, metadata_v2
    from hostbroker.errors import ErrorCode

    response = metadata_v2(client, sorted(topics),
                           required="reassignment across log dirs (METADATA version 2)")
    parts = {}
    known = set()
    for topic in response.topics:
        if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            continue
        known.add(topic.topic)
        for p in topic.partitions:
            parts[(topic.topic, p.partition)] = p
    for topic in sorted(topics):
        if topic not in known:
            raise CommandError(f"no topic {topic}")
    return DirNames.from_response(response), parts


def _partition(parts, topic: str, p: int):
    found = parts.get((topic, p))
    if found is None:
        raise CommandError(f"topic {topic} has no partition {p}")
    return found


def _loads(parts, listed: list[int]) -> dict:
    """What each listed dir holds now (replicas, leaderships, bytes below the
    high watermark), for :func:`place_replicas`; dirs count as separate devices
    (the tool may not run on the broker's host)."""
    from hostbroker.replication.dirplacement import DirLoad

    figures = {d: [0, 0, 0] for d in listed}
    for p in parts.values():
        size = max(0, p.high_watermark - p.log_start_offset)
        for d in p.replica_dirs:
            if d in figures:
                figures[d][0] += 1
                figures[d][2] += size
        if p.leader_dir in figures:
            figures[p.leader_dir][1] += 1
    return {d: DirLoad(r, lead, size, d) for d, (r, lead, size) in figures.items()}


def _replace(replicas: list[int], listed: list[int], factor: int, loads: dict,
             where: str) -> list[int]:
    """``replicas`` with those on dirs outside ``listed`` replaced, in their
    places, by the least loaded listed dirs (and trimmed or grown to ``factor``);
    the replicas already on listed dirs stay where they are."""
    from hostbroker.replication.dirplacement import place_replicas

    keep = [d for d in replicas if d in listed][:factor]
    need = factor - len(keep)
    fresh: list[int] = []
    if need:
        free = {d: loads[d] for d in listed if d not in keep}
        try:
            fresh = list(place_replicas(free, [0], need)[0])
        except ValueError as exc:
            raise CommandError(f"cannot place {where}: {exc}") from None
    added = iter(fresh)
    new = []
    for d in replicas:
        if d in keep:
            new.append(d)
        elif len(new) < factor:
            nxt = next(added, None)
            if nxt is not None:
                new.append(nxt)
    new.extend(added)
    return new[:factor]


def generate_on_dirs(topics_file: str, dir_list: str, *, bootstrap: str,
                     replication_factor: int | None = None, out: TextIO = sys.stdout,
                     err: TextIO = sys.stderr) -> int:
    """Print the current and a proposed log dir assignment of the topics of
    ``topics_file`` over the dirs of ``dir_list``: replicas on listed dirs stay,
    the others move to the least loaded listed dirs (with ``replication_factor``
    replicas a partition, else each partition's own number)."""
    from hostbroker.replication import MAX_REPLICAS

    topics = _topics_file(topics_file)
    paths = _dir_list(dir_list)
    if replication_factor is not None and not 1 <= replication_factor <= MAX_REPLICAS:
        raise usage_error(f"--replication-factor must be 1 to {MAX_REPLICAS}")
    with _dir_client(bootstrap) as client:
        names, everything = _dir_metadata(client, ())
        known = {t for t, _ in everything}
        for topic in topics:
            if topic not in known:
                raise CommandError(f"no topic {topic}")
    listed = [names.online_id(path, "--dir-list") for path in paths]
    loads = _loads(everything, listed)
    current: dict[str, dict[int, list[str]]] = {}
    proposed: dict[str, dict[int, list[str]]] = {}
    plain: list[str] = []
    for (topic, p), part in sorted(everything.items()):
        if topic not in topics:
            continue
        if _plain(part):
            plain.append(f"{topic}-{p}")
            continue
        replicas = list(part.replica_dirs)
        current.setdefault(topic, {})[p] = names.names(replicas)
        factor = replication_factor or len(replicas)
        if not factor:
            continue
        if factor > len(listed):
            raise CommandError(f"cannot place {topic}-{p}: {factor} replicas need {factor} "
                               f"log dirs; --dir-list names {len(listed)}")
        new = _replace(replicas, listed, factor, loads, f"{topic}-{p}")
        if new == replicas:
            continue
        proposed.setdefault(topic, {})[p] = names.names(new)
        size = max(0, part.high_watermark - part.log_start_offset)
        for d in set(new) - set(replicas):
            old = loads[d]
            loads[d] = old._replace(replicas=old.replicas + 1, bytes=old.bytes + size)
    if plain:
        more = f" and {len(plain) - 10} more" if len(plain) > 10 else ""
        print(f"hostbroker reassign generate: left out {', '.join(plain[:10])}{more}: one "
              "replica, not placed on log dirs (a topic created with a replication factor "
              "of 1 stays on its dir)", file=err)
    print("Current partition replica assignment", file=out)
    print(_document(current, _DIRS), file=out)
    print("", file=out)
    print("Proposed partition reassignment configuration", file=out)
    print(_document(proposed, _DIRS), file=out)
    return EXIT_OK


def _plain(part) -> bool:
    """Whether a METADATA v2 partition is a plain one (a topic of one replica
    on its dir, which ALTER_REPLICA_DIRS cannot move): it has no leader epoch
    (-1), where every partition placed on log dirs has one."""
    return part.leader_epoch < 0 and len(part.replica_dirs) <= 1


def execute_on_dirs(reassignment_file: str, *, bootstrap: str, out: TextIO = sys.stdout,
                    err: TextIO = sys.stderr) -> int:
    """Start moving the replicas of ``reassignment_file`` to the log dirs it names."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import ErrorCode
    from hostbroker.replication import MAX_REPLICAS

    wanted = _reassignment_file(reassignment_file, _DIRS)
    with _dir_client(bootstrap) as client:
        names, parts = _dir_metadata(client, {t for t, _ in wanted})
        moves, before = [], {}
        for (topic, p), paths in sorted(wanted.items()):
            where = f"{topic}-{p}"
            old = list(_partition(parts, topic, p).replica_dirs)
            new = [names.online_id(path, where) for path in paths]
            both = len(set(old) | set(new))
            if both > MAX_REPLICAS:
                raise CommandError(f"{where}: old and new replicas together are {both} log "
                                   f"dirs, over the most a partition may have "
                                   f"({MAX_REPLICAS}); move it in smaller steps")
            moves.append((topic, p, new))
            before.setdefault(topic, {})[p] = names.names(old)
        answer = client.alter_replica_dirs(moves)
    refused = [r for r in answer.partitions if r.error_code != ErrorCode.NONE]
    if answer.error_code != ErrorCode.NONE:
        # nothing moved; the partitions that made it so, in the same line
        named = ", ".join(f"{r.topic}-{r.partition} {_code_name(r.error_code)}"
                          for r in refused[:10] if r.error_code != answer.error_code)
        more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
        raise BrokerError(answer.error_code, (answer.error_message or "")
                          + (f" ({named}{more})" if named else ""))
    print("Current partition replica assignment (keep it to roll back)", file=out)
    print(_document(before, _DIRS), file=out)
    for r in refused:
        print(f"hostbroker reassign execute: {r.topic}-{r.partition}: "
              f"{_code_name(r.error_code)}", file=err)
    started = len(moves) - len(refused)
    print(f"started the reassignment of {started} partition{'s' if started != 1 else ''}",
          file=out)
    return EXIT_BROKER if refused else EXIT_OK


def verify_on_dirs(reassignment_file: str, *, bootstrap: str, out: TextIO = sys.stdout,
                   err: TextIO = sys.stderr) -> int:
    """Say of each partition of ``reassignment_file`` whether its move is done."""
    import os

    wanted = _reassignment_file(reassignment_file, _DIRS)
    with _dir_client(bootstrap) as client:
        names, parts = _dir_metadata(client, {t for t, _ in wanted})
    status = EXIT_OK
    for (topic, p), paths in sorted(wanted.items()):
        part = _partition(parts, topic, p)
        now = [os.path.normpath(n) for n in names.names(part.replica_dirs)]
        if part.target_dirs:
            print(f"{topic}-{p}: in progress", file=out)
            status = EXIT_BROKER
        elif now == list(paths):
            print(f"{topic}-{p}: done", file=out)
        else:
            print(f"{topic}-{p}: failed (replicas are {now})", file=out)
            status = EXIT_BROKER
    return status
