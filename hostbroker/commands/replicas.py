"""``hostbroker replicas verify``: replicas compared byte for byte below the high watermark.

Replicas are byte-identical (byte offsets), so a replica is right when its
log's bytes below the leader's high watermark equal the leader's. For every
partition of the replicated topics named (all without ``--topic``), each
live replica broker is asked METADATA v1 of its own copy (log dir, log start,
its view of the high watermark); the tool then reads the segment files of
each copy on this host, from the latest log start of them all up to the
leader's high watermark, and compares SHA-256 digests of that range. A copy
whose log dir is not on this host (another host's broker) is reported
``not on this host`` and not compared.

Prints one line per partition: ``t-0: 3 replicas equal below 4096`` or what
differs; status 1 when a copy differs or cannot be read.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import sys
from collections.abc import Iterable
from typing import TextIO

from hostbroker.commands import EXIT_BROKER, EXIT_OK

_CHUNK = 1 << 20
_MAX_ANSWER_BYTES = 64 << 20


def _metadata(info, topics: list[str], timeout: float = 10.0):
    """METADATA v1 of ``topics`` from one broker (its Unix socket when on this host)."""
    from hostbroker.commands.topics import broker_uri
    from hostbroker.protocol import api
    from hostbroker.protocol import replication as rp

    uri = broker_uri(info)
    if uri.startswith("unix://"):
        sock = socket.socket(socket.AF_UNIX)
        address = uri[len("unix://"):]
    else:
        host, _, port = uri[len("tcp://"):].rpartition(":")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        address = (host.strip("[]"), int(port))
    with sock:
        sock.settimeout(timeout)
        sock.connect(address)
        sock.sendall(rp.encode_request(rp.MetadataRequestV1(tuple(topics)), 1,
                                       "hostbroker-replicas", 1))
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) != 4:
            raise OSError("connection closed by the broker")
        (size,) = struct.unpack(">i", head)
        if not 4 <= size <= _MAX_ANSWER_BYTES:
            raise OSError(f"answer of {size} bytes")
        frame = sock.recv(size, socket.MSG_WAITALL)
        if len(frame) != size:
            raise OSError("connection closed by the broker")
    if api.is_error_frame(frame):
        raise OSError(f"broker error {api.decode_error_frame(frame)[1]}")
    return api.decode_response_as(rp.MetadataResponseV1, frame)[1]


def _digest(directory: str, start: int, end: int) -> str:
    """SHA-256 of a partition dir's log bytes ``[start, end)`` (segments named by their
    base byte offset); OSError when they are not all there."""
    from hostbroker.log.segments import parse_segment_filename

    bases = sorted(b for b in (parse_segment_filename(n) for n in os.listdir(directory))
                   if b is not None)
    digest = hashlib.sha256()
    at = start
    for i, base in enumerate(bases):
        limit = bases[i + 1] if i + 1 < len(bases) else end
        if limit <= at or base >= end:
            continue
        if base > at:
            raise OSError(f"bytes {at} to {base} are missing")
        path = os.path.join(directory, f"{base:020d}.kafka")
        with open(path, "rb") as f:
            f.seek(at - base)
            while at < min(limit, end):
                chunk = f.read(min(_CHUNK, min(limit, end) - at))
                if not chunk:
                    raise OSError(f"{path} ends at byte {at}")
                digest.update(chunk)
                at += len(chunk)
    if at < end:
        raise OSError(f"the log ends at byte {at}, below {end}")
    return digest.hexdigest()


def verify(topics: Iterable[str] = (), *, zookeeper: str, out: TextIO = sys.stdout,
           err: TextIO = sys.stderr) -> int:
    """Compare the replicas of ``topics`` (every replicated topic when empty)."""
    from hostbroker.commands import replicated
    from hostbroker.commands.topics import live_brokers
    from hostbroker.errors import ErrorCode
    from hostbroker.log.segments import partition_dirname

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
    copies: dict[tuple[str, int, int], tuple] = {}  # (topic, p, broker) -> metadata partition
    for broker_id, info in sorted(brokers.items()):
        wanted = [t for t, vs in views.items() if any(broker_id in v.replicas for v in vs)]
        if not wanted:
            continue
        try:
            answer = _metadata(info, wanted)
        except (OSError, ValueError) as exc:
            print(f"hostbroker replicas verify: broker {broker_id}: {exc}", file=err)
            status = EXIT_BROKER
            continue
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE:
                    copies[(t.topic, p.partition, broker_id)] = p
    for topic, parts in sorted(views.items()):
        for view in parts:
            name = f"{topic}-{view.partition}"
            leader = copies.get((topic, view.partition, view.leader))
            if leader is None:
                print(f"{name}: no answer from its leader ({view.leader}); not compared",
                      file=out)
                status = EXIT_BROKER
                continue
            held = {b: copies[(topic, view.partition, b)] for b in view.replicas
                    if (topic, view.partition, b) in copies}
            end = leader.high_watermark
            start = max(c.log_start_offset for c in held.values())
            digests, problems = {}, []
            for b, c in sorted(held.items()):
                directory = os.path.join(c.log_dir or "", partition_dirname(topic, view.partition))
                if not os.path.isdir(directory):
                    problems.append(f"broker {b}: not on this host")
                    continue
                try:
                    digests[b] = _digest(directory, start, end)
                except OSError as exc:
                    problems.append(f"broker {b}: {exc}")
                    status = EXIT_BROKER
            missing = [b for b in view.replicas if b not in held]
            problems += [f"broker {b}: no answer" for b in missing]
            reference = digests.get(view.leader)
            if reference is None and view.leader in held:
                print(f"{name}: the leader's copy is not readable here; not compared ("
                      + "; ".join(problems) + ")", file=out)
                continue
            differ = sorted(b for b, d in digests.items() if reference and d != reference)
            if differ:
                status = EXIT_BROKER
                problems.insert(0, f"broker{'s' if len(differ) > 1 else ''} "
                                   f"{', '.join(map(str, differ))} "
                                   f"differ{'' if len(differ) > 1 else 's'} from the leader "
                                   f"({view.leader})")
                line = f"{name}: below {end}: " + "; ".join(problems)
            else:
                line = f"{name}: {len(digests)} replicas equal below {end}"
                if problems:
                    line += " (" + "; ".join(problems) + ")"
            print(line, file=out)
    return status
