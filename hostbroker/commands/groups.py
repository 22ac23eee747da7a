"""``hostbroker groups list|describe|reset-offsets``: a consumer group's state, shown and reset.

With ``--zookeeper`` (cluster mode, docs/cluster.md) a group is what
ZooKeeper holds under ``/consumers/[group]`` (docs/spec/zookeeper.md):
``list`` prints the children of ``/consumers``; ``describe`` prints the
members (``ids``, with their subscriptions), then one row per
(topic, ``broker_id-partition``): its owner (``owners``), the committed
offset (``offsets``), the log end (the METADATA of that partition's broker,
asked through its registered listener) and the lag (log end - committed).
``reset-offsets`` writes the ``offsets`` node of every partition of a topic
on the live brokers (each broker's OFFSETS answer for earliest, latest or a
time) and is refused while the group has a registered member.

With ``--bootstrap`` (standalone) the offsets are the ones the broker keeps:
:mod:`hostbroker.commands.groups_standalone`, which uses the table, the
listing and ``--to`` of this module.

Offsets are byte offsets, the next one to read; a partition without a
committed offset shows ``-`` (``null`` in JSON) for it and its lag.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from hostbroker.commands import check_topic
from hostbroker.exits import EXIT_BROKER, EXIT_OK, CommandError, plural, usage_error

_COLUMNS = ("topic", "partition", "owner", "committed", "log end", "lag")


@dataclass
class Row:
    """One partition of a group: ``broker`` is -1 standalone, ``owner`` None when unowned."""

    topic: str
    broker: int
    partition: int
    owner: str | None = None
    committed: int | None = None
    log_end: int | None = None

    @property
    def name(self) -> str:
        return str(self.partition) if self.broker < 0 else f"{self.broker}-{self.partition}"

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return self.log_end - self.committed

    def cells(self) -> tuple[str, ...]:
        return (self.topic, self.name, self.owner or "-", _cell(self.committed),
                _cell(self.log_end), _cell(self.lag))

    def as_json(self) -> dict:
        return {"topic": self.topic, "broker": self.broker, "partition": self.partition,
                "owner": self.owner, "committed": self.committed, "log_end": self.log_end,
                "lag": self.lag}


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_table(rows: list[Row], out: TextIO, owners: bool) -> None:
    keep = [i for i in range(len(_COLUMNS)) if owners or _COLUMNS[i] != "owner"]
    table = [[_COLUMNS[i] for i in keep], *([r.cells()[i] for i in keep] for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(keep))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip(),
              file=out)


def parse_to(text: str) -> int:
    """``--to``: earliest (-2), latest (-1), or a time (ms since the epoch or ISO-8601)."""
    from hostbroker.protocol.api import EARLIEST_TIME, LATEST_TIME
    from hostbroker.spark.loader import parse_time

    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return EARLIEST_TIME if word == "earliest" else LATEST_TIME
    try:
        return parse_time(text)
    except ValueError as exc:
        raise usage_error(f"--to: {exc}; or earliest, latest") from None


def offset_at(client, topic: str, partition: int, time: int) -> int:
    """The broker's offset for ``time``: its OFFSETS answer; a time before every
    segment has none, and gets the log start."""
    from hostbroker.protocol.api import EARLIEST_TIME

    found = client.offsets(topic, partition, time, 1)
    if not found:
        found = client.offsets(topic, partition, EARLIEST_TIME, 1)
    return found[0]


def _replicated_offsets(brokers, wanted: Iterable[tuple[str, int]], time: int, name: str,
                        err: TextIO) -> tuple[dict[tuple[str, int], int], int]:
    """(topic, partition) -> the offset for ``time`` of each replicated partition of
    ``wanted``, asked of its leader (a SimpleConsumer over the live ``brokers`` finds and
    follows it; a leader answers below its high watermark), and the status: a partition
    that cannot be asked is named on stderr (status 1) and left out."""
    from hostbroker.client.consumer import SimpleConsumer
    from hostbroker.commands import describe_error
    from hostbroker.errors import HostbrokerError
    from hostbroker.protocol.api import EARLIEST_TIME

    wanted = list(wanted)
    uris = [brokers[b].uris()[0] for b in sorted(brokers)]
    if not wanted:
        return {}, EXIT_OK
    if not uris:
        print(f"hostbroker groups {name}: no live broker to ask the leaders of replicated "
              "partitions", file=err)
        return {}, EXIT_BROKER
    out, status = {}, EXIT_OK
    with SimpleConsumer(uris, client_id="hostbroker-groups", refresh_leader_backoff_ms=100,
                        refresh_leader_max_retries=5) as consumer:
        for topic, partition in wanted:
            try:
                found = consumer.offsets_before(topic, partition, time)
                if not found:
                    found = consumer.offsets_before(topic, partition, EARLIEST_TIME)
                out[(topic, partition)] = found[0]
            except (HostbrokerError, OSError) as exc:
                message, _ = describe_error(exc, None)
                print(f"hostbroker groups {name}: {topic} partition {partition}: {message}",
                      file=err)
                status = EXIT_BROKER
    return out, status


def say_reset(group: str, topic: str, changes: list[tuple[str, int | None, int]],
               out: TextIO) -> None:
    print(f"group {group}: reset {plural(len(changes), 'partition')} of {topic}", file=out)
    for name, old, new in changes:
        print(f"  {topic} {name}: {_cell(old)} -> {new}", file=out)


# -- listing, shared by both modes ----------------------------------------------


_NO_MEMBERS = "(no members)"


def print_groups(groups: Iterable[str], as_json: bool, out: TextIO,
                  without_members: Iterable[str] | None = None) -> None:
    """One group a line, those ``without_members`` marked; in JSON, every group
    under ``groups`` and (given ``without_members``: a standalone broker's list)
    those without members again under ``without_members``."""
    groups, bare = list(groups), set(without_members or ())
    if as_json:
        document = {"groups": groups}
        if without_members is not None:
            document["without_members"] = [g for g in groups if g in bare]
        print(json.dumps(document, indent=2), file=out)
        return
    for group in groups:
        print(f"{group}  {_NO_MEMBERS}" if group in bare else group, file=out)


# -- cluster mode: the group as ZooKeeper holds it ------------------------------


def _zookeeper(zookeeper: str):
    """A started kazoo client, or a command error (usage for a bad connect string)."""
    import logging

    from hostbroker.cluster.zk import ZooKeeperUnavailable, make_client

    logging.getLogger("kazoo").setLevel(logging.ERROR)
    try:
        return make_client(zookeeper, 10000, 6000, key="--zookeeper")
    except ZooKeeperUnavailable as exc:
        raise CommandError(str(exc)) from None


def _said(path: str, problem: str) -> None:
    print(f"hostbroker groups: ZooKeeper: {problem}", file=sys.stderr)


def _children(zk, path: str) -> list[str]:
    from hostbroker.cluster import zkread

    return zkread.children(zk, path, zkread.DEFAULT, _said)


def _value(zk, path: str) -> bytes | None:
    from hostbroker.cluster import zkread

    found = zkread.value(zk, path, zkread.DEFAULT, _said)
    return None if found is None else found[0]


def _zk_offsets(zk, group: str, topic: str) -> dict[tuple[int, int], int]:
    """(broker_id, partition) -> committed offset, from the group's offsets nodes."""
    from hostbroker.cluster import paths

    out = {}
    for name in _children(zk, paths.offsets_path(group, topic)):
        path = f"{paths.offsets_path(group, topic)}/{name}"
        data = _value(zk, path)
        try:
            key = paths.parse_partition_name(name)
            if data is not None:
                out[key] = paths.decode_offset(data, path)
        except ValueError as exc:
            print(f"hostbroker groups: ZooKeeper: {exc}; left out", file=sys.stderr)
    return out


def _zk_owners(zk, group: str, topic: str) -> dict[tuple[int, int], str]:
    from hostbroker.cluster import paths

    out = {}
    for name in _children(zk, paths.owners_path(group, topic)):
        data = _value(zk, f"{paths.owners_path(group, topic)}/{name}")
        try:
            if data is not None:
                out[paths.parse_partition_name(name)] = data.decode(errors="replace")
        except ValueError:
            continue
    return out


def _members(zk, group: str) -> dict[str, dict[str, int] | None]:
    """consumer_id -> subscription (None when its value does not follow the layout)."""
    from hostbroker.cluster import paths

    out = {}
    for consumer in _children(zk, paths.group_ids_path(group)):
        path = paths.consumer_path(group, consumer)
        data = _value(zk, path)
        if data is None:
            continue  # left between the two reads
        try:
            out[consumer] = paths.decode_subscription(data, path)
        except ValueError:
            out[consumer] = None
    return out


def _each_broker(name: str, brokers, work, err: TextIO):
    """``work(client)`` on each of ``brokers`` (id -> BrokerInfo), in id order; as
    ``brokers.each_broker``: (answers by id, status), a failing broker named on stderr."""
    from hostbroker.commands.brokers import each_broker

    return each_broker(name, [info for _, info in sorted(brokers.items())],
                       lambda _info, client: work(client), err, command="groups")


def list_cluster(*, as_json: bool = False, zookeeper: str, out: TextIO = sys.stdout) -> int:
    """Every group under /consumers, one a line, sorted."""
    from hostbroker.cluster import paths

    zk = _zookeeper(zookeeper)
    try:
        groups = _children(zk, paths.CONSUMERS)
    finally:
        zk.stop()
        zk.close()
    print_groups(groups, as_json, out)
    return EXIT_OK


def _group_state(zk, group: str, topics: list[str]):
    """(members, rows, live brokers) of ``group``; rows without log ends yet."""
    from hostbroker.cluster import paths
    from hostbroker.cluster.discovery import read_snapshot

    if zk.exists(paths.group_path(group)) is None:
        raise CommandError(f"no group {group} in ZooKeeper")
    members = _members(zk, group)
    if not topics:
        named = {t for s in members.values() if s for t in s}
        named.update(_children(zk, f"{paths.group_path(group)}/offsets"))
        named.update(_children(zk, f"{paths.group_path(group)}/owners"))
        topics = sorted(named)
    snapshot = read_snapshot(zk)
    rows = []
    for topic in topics:
        committed, owners = _zk_offsets(zk, group, topic), _zk_owners(zk, group, topic)
        keys = set(snapshot.group_partitions(topic)) | set(committed) | set(owners)
        rows += [Row(topic, b, p, owners.get((b, p)), committed.get((b, p)))
                 for b, p in sorted(keys)]
    return members, rows, snapshot.brokers


def describe_cluster(group: str, topics: list[str], *, as_json: bool = False, zookeeper: str,
                     out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Members, then owner, committed offset, log end and lag of every partition of
    ``group``'s topics (``topics``, or every topic it subscribes to or has offsets or
    owners of). A broker that cannot be asked is named on stderr (status 1)."""
    zk = _zookeeper(zookeeper)
    try:
        members, rows, brokers = _group_state(zk, group, [check_topic(t) for t in topics])
    finally:
        zk.stop()
        zk.close()
    from hostbroker.cluster.paths import REPLICATED
    from hostbroker.protocol.api import LATEST_TIME

    wanted = sorted({r.topic for r in rows if r.broker != REPLICATED})
    asked = {b: i for b, i in brokers.items() if any(r.broker == b for r in rows)}
    answers, status = _each_broker("describe", asked, lambda c: c.metadata(wanted), err)
    ends = {(t.topic, broker_id, p.partition): p.log_end_offset
            for broker_id, answer in answers.items() for t in answer.topics
            for p in t.partitions}
    # A replicated partition's log end is what its leader serves: below the high watermark.
    led, failed = _replicated_offsets(
        brokers, [(r.topic, r.partition) for r in rows if r.broker == REPLICATED],
        LATEST_TIME, "describe", err)
    status = max(status, failed)
    ends.update({(t, REPLICATED, p): o for (t, p), o in led.items()})
    for row in rows:
        row.log_end = ends.get((row.topic, row.broker, row.partition))
    if as_json:
        document = {"group": group,
                    "members": [{"id": c, "subscription": s} for c, s in members.items()],
                    "partitions": [r.as_json() for r in rows]}
        print(json.dumps(document, indent=2), file=out)
        return status
    print(f"group: {group}  members: {len(members)}", file=out)
    for consumer, subscription in members.items():
        streams = ("?" if subscription is None else
                   " ".join(f"{t}={n}" for t, n in sorted(subscription.items())))
        print(f"member {consumer}  {streams}", file=out)
    print_table(rows, out, owners=True)
    return status


def reset_cluster(group: str, topic: str, to: str, *, zookeeper: str,
                  out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Write ``group``'s offsets node of every partition of ``topic`` on the live brokers,
    unless the group has a live member. A broker that cannot be asked is named on stderr
    (status 1) and its partitions are left as they were."""
    from hostbroker.cluster import paths
    from hostbroker.cluster.discovery import read_snapshot
    from hostbroker.cluster.membership import PartitionKey, ZooKeeperOffsets

    time = parse_to(to)
    check_topic(topic)
    zk = _zookeeper(zookeeper)
    try:
        _refuse_live(zk, group)
        snapshot = read_snapshot(zk)
        pairs = snapshot.group_partitions(topic)
        if not pairs:
            raise CommandError(f"no live broker holds topic {topic}")
        holders = {b: snapshot.brokers[b] for b in sorted({b for b, _ in pairs})
                   if b != paths.REPLICATED}
        new: dict[tuple[int, int], int] = {}
        led, status = _replicated_offsets(
            snapshot.brokers, [(topic, p) for b, p in pairs if b == paths.REPLICATED], time,
            "reset-offsets", err)
        new.update({(paths.REPLICATED, p): o for (_, p), o in led.items()})
        for broker_id, info in holders.items():
            mine = [p for b, p in pairs if b == broker_id]
            answers, failed = _each_broker(
                "reset-offsets", {broker_id: info},
                lambda c, mine=mine: {p: offset_at(c, topic, p, time) for p in mine}, err)
            status = max(status, failed)
            for p, offset in answers.get(broker_id, {}).items():
                new[(broker_id, p)] = offset
        _refuse_live(zk, group)  # a member that joined while the brokers were asked
        old = _zk_offsets(zk, group, topic)
        ZooKeeperOffsets(zk).commit(group, {PartitionKey(topic, p, b): o
                                            for (b, p), o in new.items()})
    finally:
        zk.stop()
        zk.close()
    say_reset(group, topic, [(paths.partition_name(b, p), old.get((b, p)), o)
                              for (b, p), o in sorted(new.items())], out)
    return status


def _refuse_live(zk, group: str) -> None:
    from hostbroker.cluster import paths

    live = _children(zk, paths.group_ids_path(group))
    if live:
        raise CommandError(f"group {group} has {plural(len(live), 'live member')} "
                           f"({', '.join(live)}); stop its consumers first")
