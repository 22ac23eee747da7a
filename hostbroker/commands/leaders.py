"""``hostbroker leaders elect``: preferred replica election of replicated topics.

Writes ``/admin/preferred_replica_election`` with every partition of the
replicated topics named (``--topic``, repeatable; all of them without it)
whose leader is not its preferred replica (the first of its replicas). The
controller moves each leadership back to the preferred replica where that
replica is live and in the ISR, then removes the node
(hostbroker/cluster/controller.py). One election at a time: a node still
there is a refusal in one line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from hostbroker.exits import EXIT_BROKER, EXIT_OK


def elect(topics: Iterable[str] = (), *, zookeeper: str, out: TextIO = sys.stdout,
          err: TextIO = sys.stderr) -> int:
    """Start a preferred replica election of ``topics`` (every replicated topic when
    empty). A named topic that is not replicated makes the exit status 1."""
    from hostbroker.commands import replicated
    from hostbroker.cluster import replica_nodes

    named = list(dict.fromkeys(topics))
    status = EXIT_OK
    with replicated.zookeeper_client(zookeeper) as client:
        found = replicated.replicated_topics(client, err, "leaders elect")
        for topic in named:
            if topic not in found:
                print(f"hostbroker leaders elect: no replicated topic {topic}", file=err)
                status = EXIT_BROKER
        chosen = {t: a for t, a in found.items() if not named or t in named}
        moves = []
        for topic, parts in sorted(chosen.items()):
            for view in replicated.partitions(client, topic, parts, err, "leaders elect"):
                if view.replicas and view.leader != view.replicas[0]:
                    moves.append((topic, view.partition))
        if not moves:
            print("every partition is led by its preferred replica", file=out)
            return status
        replicated.create_request(
            client, replica_nodes.encode_preferred_election(moves),
            replica_nodes.decode_preferred_election, replica_nodes.PREFERRED_REPLICA_ELECTION,
            "name fewer topics with --topic", "a preferred replica election")
    print(f"preferred replica election started for {len(moves)} partition"
          f"{'s' if len(moves) != 1 else ''}", file=out)
    return status
