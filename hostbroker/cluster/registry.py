"""One broker's registration in ZooKeeper: its ``/brokers/ids`` and ``/brokers/topics`` nodes.

Owns the ephemeral nodes of one broker (layout in ``paths``,
docs/spec/zookeeper.md)::

    /brokers/ids/[broker_id]              {"version":1,"host":h,"port":p,"unix":path,
                                           "endpoints":["PLAINTEXT://h:p","SSL://h:p"]}
    /brokers/topics/[topic]/[broker_id]   number of partitions (decimal)

:class:`Registration` brings ZooKeeper in step with what the broker holds
(:meth:`Registration.sync`), on the session of the kazoo client it is given;
the ``hb-registrar`` process (hostbroker/workers/registrar.py) calls it. A
broker id held by another session raises :class:`BrokerIdTaken`, which says
whether the holder advertises the very same listeners (then it is this
broker's own previous run, whose session has not expired yet).

Every ZooKeeper call waits at most ``op_timeout_s``, so a caller never
blocks on an outage for longer; a failed call leaves the registration to be
synced again. :func:`advertised_info` turns the configuration and the bound
listening sockets into the value registered under ``/brokers/ids``.

Anyone may delete or rewrite a node of ours (ZooKeeper does not stop
another session from it): :meth:`Registration.repair` puts one back,
when the session that registered it is still ours, replacing whatever
another session put there (a live broker never takes an id it finds held,
so that is a forgery, not a second broker).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from hostbroker.cluster import paths, zkread
from hostbroker.config import parse_listener, split_list

_WILDCARDS = ("", "0.0.0.0", "::")


class BrokerIdTaken(Exception):
    """``/brokers/ids/[id]`` belongs to another ZooKeeper session."""

    def __init__(self, broker_id: int, holder: paths.BrokerInfo | None, same: bool):
        self.broker_id = broker_id
        self.holder = holder
        self.same = same
        where = ", ".join(holder.uris()) if holder else "an unreadable registration"
        super().__init__(f"broker.id {broker_id} is already registered in ZooKeeper "
                         f"by another broker ({where})")


def advertised_info(broker_id: int, advertised: str,
                    bound: list[tuple[str, socket.socket]]) -> paths.BrokerInfo:
    """What ``/brokers/ids/[broker_id]`` says: the first tcp://, ssl:// and unix://
    listener of ``advertised`` (a listeners list), or, when it is empty, of the bound
    listeners, whose wildcard host becomes this host's name and port 0 the port bound."""
    found: dict[str, tuple] = {}
    if advertised.strip():
        for uri in split_list(advertised):
            parsed = parse_listener(uri)
            found.setdefault(parsed[0], parsed[1:])
    else:
        for uri, sock in bound:
            parsed = parse_listener(uri)
            if parsed[0] in found:
                continue
            if parsed[0] == "unix":
                found["unix"] = parsed[1:]
            else:
                host = socket.getfqdn() if parsed[1] in _WILDCARDS else parsed[1]
                found[parsed[0]] = (host, sock.getsockname()[1])
    host, port = found.get("tcp", (None, None))
    ssl_host, ssl_port = found.get("ssl", (None, None))
    unix = os.path.abspath(found["unix"][0]) if "unix" in found else None
    return paths.BrokerInfo(broker_id, host, port, unix, ssl_host, ssl_port)


class Registration:
    """The nodes of one broker on one kazoo client (see the module docstring)."""

    def __init__(self, client, info: paths.BrokerInfo, op_timeout_s: float = 5.0,
                 bounds: zkread.Bounds = zkread.DEFAULT):
        self.client = client
        self.bounds = bounds
        self.info = info
        self.value = paths.encode_broker(info)
        self.op_timeout_s = op_timeout_s
        self.session: int | None = None  # the session whose nodes self.topics describes
        self.topics: dict[str, int] = {}  # topic -> partition count registered

    @property
    def broker_id(self) -> int:
        return self.info.broker_id

    def _wait(self, async_result):
        return async_result.get(timeout=self.op_timeout_s)

    def _session_id(self) -> int | None:
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    def _get(self, path: str):
        """(data, stat) of ``path``, or None when it does not exist."""
        from kazoo.exceptions import NoNodeError

        try:
            return self._wait(self.client.get_async(path))
        except NoNodeError:
            return None

    def _put(self, path: str, value: bytes, session: int) -> None:
        """Make ``path`` an ephemeral node of ``session`` holding ``value``: created
        when missing, set when ours, replaced when another session's."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        found = self._get(path)
        if found is not None and found[1].ephemeralOwner == session:
            if found[0] != value:
                self._wait(self.client.set_async(path, value))
            return
        if found is not None:
            try:
                self._wait(self.client.delete_async(path))
            except NoNodeError:
                pass
        try:
            self._wait(self.client.create_async(path, value, ephemeral=True, makepath=True))
        except NodeExistsError:
            raise RuntimeError(f"{path} was created again meanwhile") from None

    def _remove(self, topic: str) -> None:
        from kazoo.exceptions import NoNodeError, NotEmptyError

        try:
            self._wait(self.client.delete_async(paths.topic_broker_path(topic, self.broker_id)))
        except NoNodeError:
            pass
        try:  # the topic's node goes with its last broker
            self._wait(self.client.delete_async(paths.topic_path(topic)))
        except (NoNodeError, NotEmptyError):
            pass

    def register_broker(self, session: int) -> None:
        """Hold ``/brokers/ids/[id]`` on ``session``, or BrokerIdTaken."""
        from kazoo.exceptions import NodeExistsError

        path = paths.broker_path(self.broker_id)
        for _ in range(3):
            found = self._get(path)
            if found is None:
                try:
                    self._wait(self.client.create_async(path, self.value, ephemeral=True,
                                                        makepath=True))
                    return
                except NodeExistsError:
                    continue  # another session was first: look at it
            data, stat = found
            if stat.ephemeralOwner == session:
                if data != self.value:
                    self._wait(self.client.set_async(path, self.value))
                return
            try:
                holder = paths.decode_broker(self.broker_id, data, path, self.bounds)
            except ValueError:
                holder = None
            raise BrokerIdTaken(self.broker_id, holder, data == self.value)
        raise RuntimeError(f"{path} keeps changing")

    def sync(self, wanted: Mapping[str, int], verify: bool = False) -> bool:
        """Bring ZooKeeper in step with ``wanted`` (topic -> partition count); return
        whether this was a full registration (a new session, or ``verify``: after a
        reconnection every node is checked). Raises BrokerIdTaken or a kazoo error."""
        session = self._session_id()
        if session is None:
            from kazoo.exceptions import ConnectionLoss

            raise ConnectionLoss("not connected")
        full = verify or session != self.session
        if full:
            if session != self.session:
                self.topics = {}
            self.register_broker(session)
            self.session = session
            for topic, count in sorted(wanted.items()):
                self._put(paths.topic_broker_path(topic, self.broker_id),
                          paths.encode_count(count), session)
                self.topics[topic] = count
        else:
            for topic, count in sorted(wanted.items()):
                if self.topics.get(topic) != count:
                    self._put(paths.topic_broker_path(topic, self.broker_id),
                              paths.encode_count(count), session)
                    self.topics[topic] = count
        for topic in sorted(set(self.topics) - set(wanted)):
            self._remove(topic)
            del self.topics[topic]
        return full

    # -- repair ------------------------------------------------------------------
    def expected(self, path: str) -> bytes | None:
        """The value ``path`` holds while it is ours; None for a path not ours."""
        if path == paths.broker_path(self.broker_id):
            return self.value
        prefix, _, broker = path.rpartition("/")
        if broker != str(self.broker_id) or not prefix.startswith(paths.BROKER_TOPICS + "/"):
            return None
        count = self.topics.get(prefix[len(paths.BROKER_TOPICS) + 1:])
        return None if count is None else paths.encode_count(count)

    def wrong(self, path: str, data: bytes | None, stat) -> str | None:
        """What is wrong with ``path`` holding ``data`` (None: deleted) under ``stat``,
        or None when it is as we registered it (or not ours)."""
        want = self.expected(path)
        if want is None or self.session is None:
            return None
        if stat is None:
            return "deleted by someone else"
        if stat.ephemeralOwner != self.session:
            return "replaced by another session's node"
        if data != want:
            return "changed by someone else"
        return None

    def repair(self, path: str) -> str | None:
        """Put ``path`` back as we registered it; return what was wrong with it, or
        None when nothing was (or it is not ours). Only on the session that registered
        it (after a new session the full :meth:`sync` decides); raises a kazoo error."""
        session = self._session_id()
        if session is None or session != self.session:
            from kazoo.exceptions import ConnectionLoss

            raise ConnectionLoss("not the session of the registration")
        found = self._get(path)
        what = self.wrong(path, *(found if found is not None else (None, None)))
        if what is not None:
            self._put(path, self.expected(path), session)
        return what
