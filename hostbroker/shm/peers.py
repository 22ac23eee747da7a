"""The brokers this broker knows of in a replicated cluster, and the
controller it last heard from.

Owns: one shared :class:`~hostbroker.shm.table.SlotTable` of ``PEER_LAYOUT``
(layout id ``b"PEER"``), a slot per known broker (``MAX_PEERS``). Handlers
write it under the :class:`~hostbroker.shm.adminlock.AdminLock` when a
LEADER_AND_ISR names the brokers its leaders are on; ``hb-replica`` reads a
leader's endpoint from it, and METADATA v1 lists its brokers. The
supervisor creates it (``plan.peers_name``) and unlinks it with the rest.

Table header user words::

    offset  size  field
    32      4     controller_epoch  the highest controller epoch seen: a
                                    LEADER_AND_ISR or STOP_REPLICA below it
                                    is refused STALE_CONTROLLER_EPOCH
    36      4     controller_id     i32, the broker id of that controller (-1 none)
    40      8     zk_controller     what ZooKeeper says (cluster mode), one aligned
                                    u64 so a reader never sees half of it:
                                    low u32 the ``/controller_epoch`` value,
                                    high i32 the ``/controller`` broker id; all
                                    ones: not read yet, or no controller
                                    confirmed (the epoch is older than the
                                    ``/controller`` node). Written only by
                                    ``hb-registrar`` (registrar_fence.py)
    48      4     unconfirmed       u32, bumped by a handler (admin lock held)
                                    each time it refuses a controller request
                                    CONTROLLER_NOT_CONFIRMED: the registrar
                                    reads ZooKeeper again when it moves

In cluster mode a controller request is taken only when its epoch is at
least ``controller_epoch`` (else STALE_CONTROLLER_EPOCH) and at most the
published ``zk_controller`` epoch, and, at that epoch, from the published
id (else CONTROLLER_NOT_CONFIRMED): a client cannot raise the epoch past
the real controller's.

Peer slot (768 bytes: two 255-byte host names and a Unix path fit)::

    offset  size  field
    0       8     seq
    8       4     state      FREE 0, KNOWN 1
    12      4     broker_id  i32
    16      4     info_len   bytes of info used
    20      748   info       JSON {"host": .., "port": .., "unix": ..,
                             "ssl_host": .., "ssl_port": ..}

A slot holds every kind of listener the broker registered, whatever
``security.inter.broker.protocol`` says: METADATA gives a client the kind of
the listener it came on, and ``hb-replica`` takes the kind of its own
protocol (a LEADER_AND_ISR of version 0 names no ``ssl://`` listener: none
is stored).

Everything stored came from a request: it is checked here (broker id range,
the info's size) and read back with the same checks, so a reader never
trusts more than this module wrote.
"""

from __future__ import annotations

import json
import struct
from collections import namedtuple

from hostbroker.shm.region import SharedRegion
from hostbroker.shm.table import FREE, SlotLayout, SlotTable

MAX_PEERS = 1024
KNOWN = 1
INFO_MAX = 748
BROKER_ID_MAX = 2**31 - 1

PeerSlot = namedtuple("PeerSlot", "state broker_id info")
Peer = namedtuple("Peer", "broker_id host port unix ssl_host ssl_port", defaults=("", -1))

PEER_LAYOUT = SlotLayout(
    b"PEER",
    PeerSlot,
    [
        ("state", "I"),
        ("broker_id", "i"),
        ("info_len", "I"),
        ("info", f"{INFO_MAX}s"),
    ],
    slot_size=768,
)

_CONTROLLER_EPOCH_AT = 32
_CONTROLLER_ID_AT = 36
_ZK_CONTROLLER_AT = 40  # 8-aligned: one u64 store
_UNCONFIRMED_AT = 48
_ZK_NONE = 2**64 - 1
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


def _port_ok(port) -> bool:
    return isinstance(port, int) and not isinstance(port, bool) and -1 <= port <= 65535


def _info(host: str, port: int, unix: str, ssl_host: str = "", ssl_port: int = -1) -> str:
    """The stored form of an endpoint; ValueError naming what does not fit."""
    if not all(isinstance(x, str) for x in (host, unix, ssl_host)):
        raise ValueError("a peer's hosts and unix path are strings")
    for value in (port, ssl_port):
        if not _port_ok(value):
            raise ValueError(f"peer port {value!r} not in -1..65535")
    info = json.dumps({"host": host, "port": port, "unix": unix, "ssl_host": ssl_host,
                       "ssl_port": ssl_port}, separators=(",", ":"))
    if len(info.encode()) > INFO_MAX:
        raise ValueError(f"peer endpoint over {INFO_MAX} bytes")
    return info


def _peer(broker_id: int, info: str) -> Peer | None:
    """A stored endpoint read back, None when it is not one this module wrote."""
    try:
        d = json.loads(info)
        host, port, unix = d["host"], d["port"], d["unix"]
        ssl_host, ssl_port = d["ssl_host"], d["ssl_port"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (all(isinstance(x, str) for x in (host, unix, ssl_host))
            and _port_ok(port) and _port_ok(ssl_port)):
        return None
    return Peer(broker_id, host, port, unix, ssl_host, ssl_port)


class PeersTable(SlotTable):
    """One slot per known broker: its endpoint. Written under the admin lock."""

    LAYOUT = PEER_LAYOUT

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, slots: int = MAX_PEERS,
               layout: SlotLayout | None = None) -> "PeersTable":
        table = super().create(region_or_name, slots, layout)
        table._set_i32(_CONTROLLER_ID_AT, -1)
        table._u64[_ZK_CONTROLLER_AT >> 3] = _ZK_NONE
        return table

    def _set_i32(self, at: int, value: int) -> None:
        _I32.pack_into(self._buf, at, value)

    # -- the controller ---------------------------------------------------
    @property
    def controller_epoch(self) -> int:
        return _U32.unpack_from(self._buf, _CONTROLLER_EPOCH_AT)[0]

    def set_controller_epoch(self, epoch: int) -> None:
        """Raise the highest controller epoch seen (hold the admin lock)."""
        if not 0 <= epoch < 2**32:
            raise ValueError(f"controller epoch {epoch} not in 0..2^32-1")
        _U32.pack_into(self._buf, _CONTROLLER_EPOCH_AT, epoch)

    @property
    def controller_id(self) -> int:
        return _I32.unpack_from(self._buf, _CONTROLLER_ID_AT)[0]

    def set_controller_id(self, broker_id: int) -> None:
        if not -1 <= broker_id <= BROKER_ID_MAX:
            raise ValueError(f"controller id {broker_id} not in -1..{BROKER_ID_MAX}")
        self._set_i32(_CONTROLLER_ID_AT, broker_id)

    # -- what ZooKeeper says (cluster mode) -----------------------------------
    @property
    def zk_controller(self) -> tuple[int, int] | None:
        """``(zk_controller_epoch, zk_controller_id)`` as the registrar last
        published them; None before the first read or while no controller is
        confirmed."""
        word = self._u64[_ZK_CONTROLLER_AT >> 3]
        if word == _ZK_NONE:
            return None
        epoch, broker_id = word & 0xFFFFFFFF, word >> 32
        return epoch, broker_id - (1 << 32) if broker_id >= 1 << 31 else broker_id

    @property
    def zk_controller_epoch(self) -> int:
        """The published ``/controller_epoch`` (-1: none confirmed)."""
        zk = self.zk_controller
        return -1 if zk is None else zk[0]

    @property
    def zk_controller_id(self) -> int:
        """The published ``/controller`` broker id (-1: none confirmed)."""
        zk = self.zk_controller
        return -1 if zk is None else zk[1]

    def set_zk_controller(self, epoch: int | None, broker_id: int | None) -> None:
        """Publish what ZooKeeper says, in one store (the registrar only); None:
        no controller confirmed."""
        if epoch is None or broker_id is None:
            self._u64[_ZK_CONTROLLER_AT >> 3] = _ZK_NONE
            return
        if not 0 <= epoch < 2**31:
            raise ValueError(f"controller epoch {epoch} not in 0..2^31-1")
        if not 0 <= broker_id <= BROKER_ID_MAX:
            raise ValueError(f"controller id {broker_id} not in 0..{BROKER_ID_MAX}")
        self._u64[_ZK_CONTROLLER_AT >> 3] = epoch | broker_id << 32

    @property
    def unconfirmed(self) -> int:
        """How many controller requests handlers refused CONTROLLER_NOT_CONFIRMED
        (wraps at 2^32)."""
        return _U32.unpack_from(self._buf, _UNCONFIRMED_AT)[0]

    def note_unconfirmed(self) -> None:
        """A handler refused a controller request unconfirmed (hold the admin lock)."""
        _U32.pack_into(self._buf, _UNCONFIRMED_AT, (self.unconfirmed + 1) & 0xFFFFFFFF)

    # -- peers ---------------------------------------------------------------
    def _find(self, broker_id: int) -> int | None:
        for i, s in self.scan():
            if s.broker_id == broker_id:
                return i
        return None

    def put(self, broker_id: int, host: str, port: int, unix: str, ssl_host: str = "",
            ssl_port: int = -1) -> None:
        """Store (or replace) a broker's endpoints (hold the admin lock).
        ValueError for an id or endpoint out of range, or a full table."""
        self._put(self._where(), broker_id, host, port, unix, ssl_host, ssl_port)

    def put_all(self, peers) -> int:
        """:meth:`put` each ``(broker_id, host, port, unix, ssl_host, ssl_port)``
        of ``peers``, the
        table scanned once for all of them (a LEADER_AND_ISR may name 10,000
        brokers; a scan of a full table costs about a millisecond). Returns
        how many were refused (out of range, or no room left)."""
        where = self._where()
        refused = 0
        for peer in peers:
            try:
                self._put(where, *peer)
            except ValueError:
                refused += 1
        return refused

    def _where(self) -> dict[int, int]:
        """Broker id -> slot, of every known broker."""
        return {s.broker_id: i for i, s in self.scan()}

    def _put(self, where: dict[int, int], broker_id: int, host: str, port: int,
             unix: str, ssl_host: str = "", ssl_port: int = -1) -> None:
        if not 0 <= broker_id <= BROKER_ID_MAX:
            raise ValueError(f"broker id {broker_id} not in 0..{BROKER_ID_MAX}")
        info = _info(host, port, unix, ssl_host, ssl_port)
        i = where.get(broker_id)
        if i is None:
            i = self.find_free() if len(where) < self.slot_count else None
            if i is None:
                raise ValueError(f"more than {self.slot_count} peers")
            self.write(i, state=KNOWN, broker_id=broker_id, info=info)
            self.bump_generation()
            where[broker_id] = i
        else:
            self.write(i, info=info)

    def get(self, broker_id: int) -> Peer | None:
        i = self._find(broker_id)
        if i is None:
            return None
        s = self.read(i)
        return _peer(s.broker_id, s.info) if s.state == KNOWN else None

    def all(self) -> list[Peer]:
        """Every known broker, by id."""
        peers = [_peer(s.broker_id, s.info) for _, s in self.scan() if s.state == KNOWN]
        return sorted((p for p in peers if p is not None), key=lambda p: p.broker_id)

    def remove(self, broker_id: int) -> None:
        i = self._find(broker_id)
        if i is not None:
            self.write(i, state=FREE)
            self.bump_generation()
