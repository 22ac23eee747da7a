"""Reaching every live broker of a cluster from a tool.

Owns: the live brokers registered in ZooKeeper (:func:`live_brokers`), the
listener a tool reaches one by (:func:`broker_uri`), a piece of work done
on each with every failure named in one line (:func:`each_broker`), and
how a change names the brokers it was made on (:func:`on_brokers`). Used
by the commands of cluster mode (``topics``, ``groups``, ``replicas``,
``mirror``, ``perf``); imports none of them.
"""

from __future__ import annotations

from typing import TextIO

from hostbroker.exits import EXIT_BROKER, EXIT_OK, CommandError


def live_brokers(zookeeper: str) -> list:
    """The live brokers registered under ``zookeeper`` (BrokerInfo, by id), or a
    command error: usage for a bad connect string, 1 when ZooKeeper does not
    answer or no broker is registered."""
    from hostbroker.cluster.discovery import read_snapshot
    from hostbroker.commands.replicated import zookeeper_client

    with zookeeper_client(zookeeper) as client:
        brokers = read_snapshot(client).brokers
    if not brokers:
        raise CommandError(f"no live broker is registered in ZooKeeper at {zookeeper}")
    return [brokers[b] for b in sorted(brokers)]


def broker_uri(info) -> str:
    """The listener to reach a registered broker by: its Unix socket when that exists
    on this host, else its TCP one."""
    import os

    uris = info.uris()
    if info.unix and not os.path.exists(info.unix) and len(uris) > 1:
        return uris[1]
    return uris[0]


def each_broker(name: str, brokers, work, err: TextIO, command: str = "topics",
                tls: dict | None = None):
    """``work(info, client)`` for every broker; (results by broker id, status). A
    broker that fails is named on stderr (``hostbroker COMMAND NAME: broker N: ...``)
    with its one line; the others go on. ``tls``: ssl.* settings over the process's."""
    from hostbroker.client.simple import SimpleClient
    from hostbroker.commands import describe_error
    from hostbroker.errors import HostbrokerError

    results, status = {}, EXIT_OK
    for info in brokers:
        uri = broker_uri(info)
        try:
            with SimpleClient(uri, client_id=f"hostbroker-{command}", tls=tls) as client:
                results[info.broker_id] = work(info, client)
        except (HostbrokerError, OSError) as exc:
            message, _ = describe_error(exc, uri)
            print(f"hostbroker {command} {name}: broker {info.broker_id}: {message}", file=err)
            status = EXIT_BROKER
    return results, status


def on_brokers(ids) -> str:
    """` on broker 1` / ` on brokers 1, 2`: where a change was made."""
    ids = sorted(ids)
    return f" on broker{'s' if len(ids) != 1 else ''} {', '.join(map(str, ids))}"
