"""``hostbroker replicas verify``: replicas compared byte for byte below the high watermark.

Replicas are byte-identical (byte offsets), so a replica is right when its
log's bytes below the high watermark equal the leader's. For every partition
of the replicated topics named (all without ``--topic``), each live replica
broker is asked METADATA v1 of its own copy (log start, its view of the high
watermark), then each copy is read over the wire, wherever its broker runs:
FETCH v1 with replica id -2, the debugging consumer, which any replica
serves from its own log below its own high watermark (docs/spec/protocol.md).
The range compared is the same for every copy: from the latest log start of
them all to the smallest of their high watermarks (a follower's view trails
the leader's), read in chunks of at most ``_CHUNK`` bytes into a SHA-256
digest each.

Prints one line per partition: ``t-0: 3 replicas equal below 4096`` or what
differs; status 1 when a copy differs or cannot be read.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from typing import TextIO

from hostbroker.exits import EXIT_BROKER, EXIT_OK
from hostbroker.errors import ProtocolError

# Bytes asked of a copy per FETCH; an answer past _MAX_ANSWER_BYTES is refused.
_CHUNK = 1 << 20
_MAX_ANSWER_BYTES = 64 << 20
_CLIENT_ID = "hostbroker-replicas"


class _Wire:
    """One connection to a registered broker (its Unix socket when on this host;
    over TLS, with the process's ssl.* settings, to an ``ssl://`` listener), one
    request at a time."""

    def __init__(self, info, timeout: float = 10.0):
        from hostbroker.client.connection import BrokerConnection
        from hostbroker.commands.brokers import broker_uri

        self.connection = BrokerConnection(broker_uri(info), timeout=timeout,
                                           client_id=_CLIENT_ID,
                                           max_response_bytes=_MAX_ANSWER_BYTES).connect()

    def close(self) -> None:
        self.connection.close()

    def ask(self, body, cls):
        """``body``'s answer (of class ``cls``); OSError for an error frame, a closed
        connection or an answer out of bounds (ProtocolError: one that does not decode)."""
        from hostbroker.client.errors import BrokerError

        try:
            answer = self.connection.request(body)
        except BrokerError as exc:
            raise OSError(f"broker error {exc.code}") from None
        if not isinstance(answer, cls):
            raise OSError(f"answered {type(answer).__name__}, not {cls.__name__}")
        return answer


def _code_name(code: int) -> str:
    from hostbroker.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def _digest(wire: _Wire, topic: str, partition: int, start: int, end: int) -> str:
    """SHA-256 of the copy's log bytes ``[start, end)``, read with the debugging
    consumer's FETCH; OSError naming what stopped it."""
    from hostbroker.errors import ErrorCode
    from hostbroker.protocol import replication as rp

    digest = hashlib.sha256()
    at = start
    while at < end:
        asked = min(_CHUNK, end - at)
        answer = wire.ask(rp.FetchRequestV1(rp.DEBUG_REPLICA_ID, 0, 0, (
            rp.FetchPartitionV1(topic, partition, rp.NO_EPOCH, at, asked),)),
            rp.FetchResponseV1)
        if len(answer.partitions) != 1:
            raise OSError(f"{len(answer.partitions)} partitions answered, not 1")
        (got,) = answer.partitions
        if (got.topic, got.partition) != (topic, partition):
            raise OSError(f"answered for {got.topic[:80]!r} {got.partition}")
        if got.error_code != ErrorCode.NONE:
            raise OSError(f"{_code_name(got.error_code)} at byte {at}")
        data = bytes(got.message_set)[:asked]
        if not data:
            raise OSError(f"its copy ends at byte {at} (high watermark "
                          f"{got.high_watermark}), below {end}")
        digest.update(data)
        at += len(data)
    return digest.hexdigest()


def verify(topics: Iterable[str] = (), *, zookeeper: str, out: TextIO = sys.stdout,
           err: TextIO = sys.stderr) -> int:
    """Compare the replicas of ``topics`` (every replicated topic when empty)."""
    from hostbroker.commands import replicated
    from hostbroker.commands.brokers import live_brokers

    named = list(dict.fromkeys(topics))
    status = EXIT_OK
    with replicated.zookeeper_client(zookeeper) as client:
        found = replicated.replicated_topics(client, err, "replicas verify")
        views = {t: replicated.partitions(client, t, a, err, "replicas verify")
                 for t, a in sorted(found.items()) if not named or t in named}
    for topic in named:
        if topic not in found:
            print(f"hostbroker replicas verify: no replicated topic {topic}", file=err)
            status = EXIT_BROKER
    brokers = {b.broker_id: b for b in live_brokers(zookeeper)}
    wires: dict[int, _Wire] = {}
    try:
        copies, answered = _ask_copies(brokers, views, wires, err)
        if answered < len([b for b in brokers
                           if any(b in v.replicas for vs in views.values() for v in vs)]):
            status = EXIT_BROKER
        for topic, parts in sorted(views.items()):
            for view in parts:
                if not _compare(topic, view, copies, wires, out):
                    status = EXIT_BROKER
    finally:
        for wire in wires.values():
            wire.close()
    return status


def _ask_copies(brokers, views, wires: dict, err: TextIO) -> tuple[dict, int]:
    """``({(topic, partition, broker): METADATA v1 partition of its copy}, brokers
    that answered)``; ``wires`` gets a connection to each of them."""
    from hostbroker.errors import ErrorCode
    from hostbroker.protocol import replication as rp

    copies: dict[tuple[str, int, int], object] = {}
    answered = 0
    for broker_id, info in sorted(brokers.items()):
        wanted = [t for t, vs in views.items() if any(broker_id in v.replicas for v in vs)]
        if not wanted:
            continue
        try:
            wire = _Wire(info)
        except (OSError, ValueError, ProtocolError) as exc:
            print(f"hostbroker replicas verify: broker {broker_id}: {exc}", file=err)
            continue
        wires[broker_id] = wire
        try:
            answer = wire.ask(rp.MetadataRequestV1(tuple(wanted)), rp.MetadataResponseV1)
        except (OSError, ValueError, ProtocolError) as exc:
            print(f"hostbroker replicas verify: broker {broker_id}: {exc}", file=err)
            wires.pop(broker_id).close()
            continue
        answered += 1
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE and 0 <= p.log_start_offset <= p.high_watermark:
                    copies[(t.topic, p.partition, broker_id)] = p
    return copies, answered


def _compare(topic: str, view, copies: dict, wires: dict, out: TextIO) -> bool:
    """Print the partition's line; False when a copy differs or cannot be read."""
    name = f"{topic}-{view.partition}"
    leader = copies.get((topic, view.partition, view.leader))
    if leader is None or view.leader not in wires:
        print(f"{name}: no answer from its leader ({view.leader}); not compared", file=out)
        return False
    held = {b: copies[(topic, view.partition, b)] for b in view.replicas
            if (topic, view.partition, b) in copies and b in wires}
    start = max(c.log_start_offset for c in held.values())
    end = min(c.high_watermark for c in held.values())
    ok = True
    digests, problems = {}, []
    if end < start:
        # retention on one copy passed another's high watermark: no common range
        print(f"{name}: no range held by every copy (log starts up to {start}, "
              f"high watermarks from {end}); not compared", file=out)
        return True
    for b in sorted(held):
        try:
            digests[b] = _digest(wires[b], topic, view.partition, start, end)
        except (OSError, ValueError, ProtocolError) as exc:
            problems.append(f"broker {b}: {exc}")
            ok = False
    problems += [f"broker {b}: no answer" for b in view.replicas if b not in held]
    reference = digests.get(view.leader)
    if reference is None:
        print(f"{name}: the leader's copy could not be read; not compared ("
              + "; ".join(problems) + ")", file=out)
        return False
    differ = sorted(b for b, d in digests.items() if d != reference)
    if differ:
        problems.insert(0, f"broker{'s' if len(differ) > 1 else ''} "
                           f"{', '.join(map(str, differ))} "
                           f"differ{'' if len(differ) > 1 else 's'} from the leader "
                           f"({view.leader})")
        print(f"{name}: below {end}: " + "; ".join(problems), file=out)
        return False
    line = f"{name}: {len(digests)} replicas equal below {end}"
    if problems:
        line += " (" + "; ".join(problems) + ")"
    print(line, file=out)
    return ok
