"""The live brokers of a cluster as ZooKeeper holds them, for the console's broker page.

Runs in hb-http, only in cluster mode (``zookeeper.connect`` set), when the
broker page is asked for and the last read (or its failure) is older than
``BROKERS_TTL_S`` (:mod:`hostbroker.console.api`), so ZooKeeper sees at most
one session of hb-http's per that time whatever the page's callers do: a
kazoo client is started, ``/brokers/ids`` and each
child's value are read (every value checked and bounded as the broker's own
discovery reads it: :mod:`hostbroker.cluster.zkread`), and the client is closed
again. No watch is left and no session outlives the request, so hb-http holds
no ZooKeeper session of its own between pages. The connection is given at most
``CONNECT_TIMEOUT_MS`` (hb-http answers one request at a time: a ZooKeeper that
does not answer must not hold the metrics behind it for long); then the page
says ZooKeeper did not answer and shows the brokers this broker knows of.
"""

from __future__ import annotations

import logging

CONNECT_TIMEOUT_MS = 2000
SESSION_TIMEOUT_MS = 6000


def live_brokers(connect: str) -> tuple[list, str | None]:
    """(the registered brokers, by id; the problem that kept them from being read, or None)."""
    from hostbroker.cluster import paths, zkread
    from hostbroker.cluster.zk import ZooKeeperUnavailable, make_client

    logging.getLogger("kazoo").setLevel(logging.ERROR)
    problems: list[str] = []

    def bad(path: str, problem: str) -> None:
        problems.append(problem)

    try:
        client = make_client(connect, SESSION_TIMEOUT_MS, CONNECT_TIMEOUT_MS)
    except (ZooKeeperUnavailable, ValueError) as exc:
        return [], str(exc)
    except Exception as exc:  # noqa: BLE001 - kazoo's own errors: the page says it
        return [], f"ZooKeeper: {type(exc).__name__}"
    try:
        found = []
        for name in zkread.children(client, paths.BROKER_IDS, zkread.DEFAULT, bad):
            if not name.isascii() or not name.isdigit() or len(name) > 10:
                continue
            path = paths.broker_path(int(name))
            value = zkread.value(client, path, zkread.DEFAULT, bad)
            if value is None:
                continue  # gone between the two reads, or refused (said in problems)
            try:
                found.append(paths.decode_broker(int(name), value[0], path))
            except ValueError as exc:
                problems.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - a connection lost mid-read: said, not raised
        return [], f"ZooKeeper: {type(exc).__name__}"
    finally:
        client.stop()
        client.close()
    return sorted(found, key=lambda b: b.broker_id), (problems[0] if problems else None)
