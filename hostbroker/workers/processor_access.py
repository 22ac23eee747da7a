"""Who each connection of a processor is, and what it may do on the routes the
processor takes itself (a part of :mod:`hostbroker.workers.processor`;
docs/security.md, "Where the checks run").

Owns: giving a connection its identity when the processor takes it (Unix:
the kernel's peer credentials and, where the kernel gives them
(``SO_PEERGROUPS``, Linux 4.13 on), the peer's own supplementary groups
rather than the user database's list for its login name; plain TCP:
``User:ANONYMOUS`` from its address;
:func:`~hostbroker.workers.peers.peer_identity`) and telling its
handler (``REQ_PRINCIPAL``, before any frame of it; again when that handler
was replaced); and the decisions of the processor's own routes (METADATA and
OFFSETS answered here, direct FETCHes, lone PRODUCE PUTs, GROUP_PUTs). A
decision is asked of the authorizer once per connection and (operation,
resource), and kept on the connection (``Connection.decisions``, at most
``acl.connection.cache.entries``, forgotten when the ACL generation moves):
the data path pays a dict lookup per request, not an authorizer call. A
route that is refused is not taken: the request goes to the handler, which
answers the refusal as it answers every other (so the answer and its order
are the handler's).

With ``authorizer.enable`` false (``enforcing`` False) no route asks
anything: the decision is not even looked up.

:class:`ConnectionAccess` is a mixin of
:class:`~hostbroker.workers.processor.ProcessorWorker`.
"""

from __future__ import annotations

import errno
import socket
import struct
import time

from hostbroker.security.acl import Operation, ResourceType
from hostbroker.security.principals import from_peer_credentials
from hostbroker.security.requests import needs
from hostbroker.workers import envelopes as env
from hostbroker.workers.connection import Connection
from hostbroker.workers.peers import peer_credentials, peer_identity

_TOPIC = ResourceType.TOPIC
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # (Linux's number; Python may lack it)
# the groups read (gid_t, 4 bytes; 1024 bytes is the most Python's getsockopt
# reads): a peer in more is past envelopes.MAX_IDENTITY_GROUPS, refused
_GROUPS_ROOM = 256
TOO_MANY_GROUPS = "too many groups"  # peer_group_ids: more than _GROUPS_ROOM


def peer_group_ids(sock: socket.socket) -> tuple[int, ...] | str | None:
    """The supplementary groups a Unix socket's peer had when it connected, as
    the kernel recorded them (``SO_PEERGROUPS``); :data:`TOO_MANY_GROUPS`
    past 256 of them; None where the kernel cannot say (before Linux 4.13,
    or the option refused)."""
    try:
        data = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, _GROUPS_ROOM * 4)
    except OSError as e:  # (ENOPROTOOPT: an older kernel)
        return TOO_MANY_GROUPS if e.errno == errno.ERANGE else None
    return struct.unpack(f"{len(data) // 4}I", data[:len(data) // 4 * 4])


class ConnectionAccess:
    """A processor's identities and decisions; see the module doc."""

    enforcing = False  # (until _init_access: authorizer.enable)

    def _init_access(self, config) -> None:
        self.enforcing = self.access.enabled
        self.conn_cache_entries = config["acl.connection.cache.entries"]

    def _identify(self, conn: Connection, identity, refused: bool = False) -> None:
        """``conn`` is ``identity`` from now on: its handler is told before any
        of its frames (the ring keeps their order), and it may be read.
        ``refused``: an identity known to be incomplete (its groups past what
        can be read), refused everything as one too large to tell."""
        conn.identity = identity
        if refused or not env.tellable(identity):
            # its handler refuses it (more than 256 groups): so do the
            # processor's routes, which then take none of its requests
            conn.decisions = None
        self._tell(conn)
        self._quota_adopt(conn)  # metered if its principal has a quota (throttle.py)

    def _tell(self, conn: Connection) -> None:
        told = None if conn.decisions is None else conn.identity
        self.requests[conn.handler].send(env.encode_principal(conn.conn_id, told,
                                                                time.monotonic_ns()))
        self.dirty_handlers.add(conn.handler)

    def _identify_peer(self, conn: Connection) -> None:
        """A Unix or plain TCP connection just taken: its peer's identity (a
        Unix peer's groups the kernel's, where it gives them)."""
        sock = conn.sock
        if sock.family == socket.AF_UNIX:
            group_ids = peer_group_ids(sock)
            if group_ids is not None:
                try:
                    _, uid, gid = peer_credentials(sock)
                except OSError:
                    pass  # (the peer gone: peer_identity says so)
                else:
                    many = group_ids is TOO_MANY_GROUPS
                    self._identify(conn, from_peer_credentials(uid, gid, () if many
                                                               else group_ids), refused=many)
                    return
        self._identify(conn, peer_identity(sock))

    def _retell(self, handler: int) -> None:
        """Handler ``handler`` was replaced: its successor learns the identities
        of the connections it serves before their next frames."""
        for conn in self.conns.values():
            if conn.handler == handler and conn.identity is not None and not conn.lingering:
                self._tell(conn)

    # -- decisions of the processor's own routes --------------------------------
    def _conn_allows(self, conn: Connection, operation: Operation, resource_type: ResourceType,
                     name: str, keep: bool = True) -> bool:
        """The decision, kept on the connection: past
        ``acl.connection.cache.entries`` the oldest kept one is forgotten, or
        (``keep`` False: METADATA's checks, a listing of every topic among
        them) it is not kept, so a listing does not push out the decisions
        of the data path."""
        if conn.decisions is None:
            return False  # an identity its handler was not told: refused (_identify)
        return conn.decisions.decide(self.access, conn.identity, operation, resource_type,
                                     name, self.conn_cache_entries, keep)

    def _conn_may(self, conn: Connection, request) -> bool:
        """Whether every check ``request`` takes (:func:`needs`) allows ``conn``:
        only then does a processor route take it (a listing or a create
        goes to the handler)."""
        n = needs(request)
        if n.listed is not None or n.create is not None:
            return False
        allows = self._conn_allows
        return all(allows(conn, c.operation, c.resource_type, c.name) for c in n.whole) and \
            all(allows(conn, c.operation, c.resource_type, c.name) for c in n.each)

    def _conn_may_topics(self, conn: Connection, operation: Operation, topics) -> bool:
        allows = self._conn_allows
        return all(allows(conn, operation, _TOPIC, t) for t in topics)

    def _describer(self, conn: Connection):
        """Whether ``conn`` may DESCRIBE a topic, as a callable of its name
        (METADATA's filter); None with the authorizer off."""
        if not self.enforcing:
            return None
        allows = self._conn_allows
        return lambda name: allows(conn, Operation.DESCRIBE, _TOPIC, name, False)
