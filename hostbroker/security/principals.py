"""Who is on the other end of a connection: principals and identities.

Owns: :class:`Principal` (``User:alice``, ``Group:ops``: a type and a name,
as Kafka writes them), :class:`Identity` (the principal of one connection,
the groups it belongs to and the host it comes from), and the three ways a
connection gets one:

- **a Unix socket**: the kernel's peer credentials (``SO_PEERCRED`` and
  ``SO_PEERGROUPS``, read by the processor that holds the socket):
  :func:`from_peer_credentials` maps the uid to ``User:<login name>`` and
  the peer's groups (its gid and the supplementary groups the kernel says
  the peer had when it connected; where the kernel cannot say, those the
  user database lists for the login name) to ``Group:<group name>``; a uid
  or gid without a name is ``User:uid=1234`` or ``Group:gid=1234``. The
  host is :data:`UNIX_HOST`.
- **TLS**: the client certificate the handshake verified:
  :func:`from_certificate` takes its subject's common name, ``User:<CN>``.
- **plain TCP**: :data:`ANONYMOUS`, ``User:ANONYMOUS``, from the peer's
  address.

No sockets. The name lookups (``pwd``, ``grp``, ``os.getgrouplist``) are
remembered per process for :data:`LOOKUP_SECONDS` (at most
:data:`LOOKUP_CACHE` of them), so a renamed or removed account, or a group
change where the kernel cannot give the groups, is seen within that time;
they are made where a connection is taken, in its processor's loop (from
the local files a few microseconds; a slow directory service stalls that
processor once per uid and gid a minute).
"""

from __future__ import annotations

import dataclasses
import grp
import os
import pwd
import time
from collections.abc import Iterable

MAX_NAME_BYTES = 255  # a principal's name, in UTF-8
MAX_TYPE_BYTES = 32
LOOKUP_CACHE = 4096  # uids and gids whose names a process remembers
LOOKUP_SECONDS = 60.0  # how long it remembers one (a change is seen within this)
UNIX_HOST = "localhost"  # the host of every Unix socket connection


def _control(c: str) -> bool:
    o = ord(c)
    return (o < 0x20 or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xDFFF
            or 0x202A <= o <= 0x202E or 0x2066 <= o <= 0x2069)


def has_control(text: str) -> bool:
    """Does ``text`` hold what a name may not: a C0 or C1 control, DEL, a lone
    surrogate, or a bidirectional override or isolate (which make a line
    shown to an operator read otherwise than it is)?"""
    return any(map(_control, text))


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Principal:
    """``type:name``; both non-empty, the type letters only, the name
    without control characters. ``User:*`` in an ACL stands for every
    principal."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``Type:name``, or ValueError naming what is wrong."""
        kind, colon, name = text.partition(":")
        if not colon:
            raise ValueError(f"principal {text[:80]!r}: expected TYPE:NAME, e.g. User:alice")
        return cls.checked(kind, name)

    @classmethod
    def checked(cls, kind: str, name: str) -> Principal:
        if not kind or not kind.isascii() or not kind.isalpha() \
                or len(kind) > MAX_TYPE_BYTES:
            raise ValueError(f"principal type {kind[:40]!r}: letters only, 1 to "
                             f"{MAX_TYPE_BYTES} of them (User, Group)")
        if not name:
            raise ValueError(f"principal {kind}: the name is empty")
        if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise ValueError(f"principal {kind}:{name[:40]}...: longer than "
                             f"{MAX_NAME_BYTES} bytes")
        if has_control(name):
            raise ValueError(f"principal {kind}:{name[:40]!r}: holds a control character")
        return cls(kind, name)


ANONYMOUS = Principal("User", "ANONYMOUS")
EVERYONE = Principal("User", "*")


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    """One connection's principal, the groups it is in, and where it comes from
    (``tls``: over an ``ssl://`` listener, whose clients METADATA sends to the
    brokers' ``ssl://`` listeners)."""

    principal: Principal
    groups: tuple[Principal, ...] = ()
    host: str = UNIX_HOST
    tls: bool = False

    def principals(self) -> tuple[Principal, ...]:
        """The principal then its groups: what an ACL's principal may name."""
        return (self.principal, *self.groups)


class _Remembered:
    """Name lookups remembered for :data:`LOOKUP_SECONDS` at most (so a
    renamed or reused uid, or a changed group, is seen within that time), and
    for at most :data:`LOOKUP_CACHE` keys (forgetting the oldest past that)."""

    def __init__(self, look):
        self.look = look
        self.kept: dict = {}  # key -> (looked up at, answer), oldest first

    def __call__(self, *key):
        now = time.monotonic()
        held = self.kept.get(key)
        if held is not None and now - held[0] < LOOKUP_SECONDS:
            return held[1]
        answer = self.look(*key)
        self.kept.pop(key, None)
        if len(self.kept) >= LOOKUP_CACHE:
            del self.kept[next(iter(self.kept))]
        self.kept[key] = (now, answer)
        return answer

    def clear(self) -> None:
        self.kept.clear()


def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _group_name(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return None


def _listed_group_ids(uid: int, gid: int) -> tuple[int, ...]:
    name = user_name(uid)
    ids = {gid}
    if name is not None:
        try:
            ids.update(os.getgrouplist(name, gid))
        except OSError:  # a user database that cannot list them: the primary group only
            pass
    return tuple(sorted(ids))


user_name = _Remembered(_user_name)
group_name = _Remembered(_group_name)
_group_ids = _Remembered(_listed_group_ids)


def user_principal(uid: int) -> Principal:
    name = user_name(uid)
    return Principal("User", name if name is not None else f"uid={uid}")


def group_principal(gid: int) -> Principal:
    name = group_name(gid)
    return Principal("Group", name if name is not None else f"gid={gid}")


def from_peer_credentials(uid: int, gid: int, group_ids: Iterable[int] | None = None
                          ) -> Identity:
    """The identity of a Unix socket peer whose credentials are ``uid`` and
    ``gid``; ``group_ids``: its supplementary groups as the kernel gives them
    (``SO_PEERGROUPS``), else (None) those the user database lists for the
    uid's login name."""
    ids = (tuple(sorted({gid, *group_ids})) if group_ids is not None
           else _group_ids(uid, gid))
    return Identity(user_principal(uid), tuple(group_principal(g) for g in ids), UNIX_HOST)


def common_name(certificate: dict) -> str | None:
    """The subject's common name of a certificate as ``ssl.SSLSocket.getpeercert()``
    gives it (the last CN when there are several, as a DN is read most specific
    last), or None."""
    found = None
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                found = value
    return found


def from_certificate(certificate: dict | None, host: str) -> Identity:
    """The identity of a TLS peer: ``User:<CN>`` of its verified certificate;
    :data:`ANONYMOUS` when it sent none (``ssl.client.auth=requested``).
    ValueError when the certificate's CN is missing or not a principal's name."""
    if not certificate:
        return Identity(ANONYMOUS, (), host, tls=True)
    cn = common_name(certificate)
    if cn is None:
        raise ValueError("the client certificate has no common name (CN) to be its principal")
    return Identity(Principal.checked("User", cn), (), host, tls=True)


def from_address(host: str) -> Identity:
    """The identity of a plain TCP peer."""
    return Identity(ANONYMOUS, (), host)
