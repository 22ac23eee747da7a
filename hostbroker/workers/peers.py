"""Who is on the other end of an accepted socket, as the kernel says.

Owns: :func:`peer_identity`, the identity a processor gives a connection it
takes (docs/security.md, "Principals"): for a Unix socket the peer's
credentials (``SO_PEERCRED``: its uid and gid when it connected, which no
later ``setuid`` of the peer changes), mapped by
:func:`hostbroker.security.principals.from_peer_credentials`; for TCP the
peer's address and ``User:ANONYMOUS`` (TLS gives its certificate's name once
its handshake is done, not here). A socket whose peer cannot be told
(``getpeername``/``SO_PEERCRED`` failing: the peer already gone) is
``User:ANONYMOUS`` from ``unknown``.
"""

from __future__ import annotations

import socket
import struct

from hostbroker.security.acl import normal_host
from hostbroker.security.principals import (ANONYMOUS, Identity, from_address,
                                            from_peer_credentials)

_UCRED = struct.Struct("3i")  # pid, uid, gid
UNKNOWN_HOST = "unknown"


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of a Unix socket's peer. OSError when it cannot be read."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


def peer_host(sock: socket.socket) -> str:
    """The peer's address in the form ACL hosts are kept in
    (:func:`hostbroker.security.acl.normal_host`: an IPv4-mapped IPv6 one as
    its IPv4 form, no scope id)."""
    host = sock.getpeername()[0]
    try:
        return normal_host(host, peer=True)
    except ValueError:
        return host


def peer_identity(sock: socket.socket) -> Identity:
    try:
        if sock.family == socket.AF_UNIX:
            _, uid, gid = peer_credentials(sock)
            return from_peer_credentials(uid, gid)
        return from_address(peer_host(sock))
    except OSError:
        return Identity(ANONYMOUS, (), UNKNOWN_HOST)
