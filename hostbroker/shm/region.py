"""Named POSIX shared memory regions.

Owns: creating, mapping, attaching and unlinking one named segment of
``/dev/shm``, and clearing every segment of a broker after a crash. A region
is raw bytes; the structures laid out in it (rings, slot tables, the process
board) live in their own modules and are built on :class:`Structure`.

Ownership: the supervisor creates every region with :meth:`SharedRegion.create`
(it fails if the name exists) and is the only process that unlinks it; workers
:meth:`~SharedRegion.attach`. Forked children may also keep using the parent's
mapping, which ``fork`` shares.

Names are ``/hb-<token>-<kind>-<index>`` (:func:`region_name`), so that
:func:`remove_stale` with :func:`broker_prefix` removes exactly one broker's
segments, at start after a crash and at shutdown.

Leases: the segments of a broker run that was killed whole (supervisor and
workers) would stay until the same run starts again, which a broker on
temporary dirs never does. So a running broker holds a *lease*, an exclusive
``flock`` on ``/dev/shm/<token>.lease`` (:func:`take_lease`), taken before it
creates any segment and shared by every process it forks (they inherit the
open file); the kernel drops the lock when the last of them dies, however it
dies. :func:`sweep_dead_runs`, run by every starting broker, removes the
segments of each run whose lease file is ours (same owner uid) and not
locked by anyone, then the lease file. A live broker's lease is locked, so
its segments are never touched; a lease file of another user, a link or
anything but a regular file is ignored. Runs without a lease (older
versions) are left to their own next start. Only files named like a
broker's lease (``hb-<token>.lease``) are considered, so the sweep never
removes another program's segments, and a run it cannot clear (a segment
of its name that is not ours to unlink) is reported and left, never a
reason for the starting broker to fail.

Why posix_ipc and not ``multiprocessing.shared_memory``: the latter registers
every segment with the resource tracker, which can unlink a segment when an
attaching process exits. Here the descriptor is closed right after ``mmap``;
the mapping keeps the segment alive until ``close`` or process exit.

Platform: Linux x86-64 only. The structures built on regions rely on x86-64
total store order (see ``ring.py``) and all shared integers are little-endian.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import re
import secrets
import stat
import struct
import time
from collections.abc import Callable

import posix_ipc

SHM_DIR = "/dev/shm"
_NAME_MAX = 255
LEASE_SUFFIX = ".lease"
# A broker token (``hb-`` and no other '-'): a sweep then removes "/<token>-..."
# only, never another program's segments nor those of a run whose token
# this one's prefix would match.
_LEASE_TOKEN = re.compile(r"hb-[A-Za-z0-9_]{1,61}")


class LayoutError(ValueError):
    """A region does not hold the structure (magic, version or size) expected."""


def broker_prefix(token: str) -> str:
    """The prefix shared by every region of the broker run ``token``."""
    return f"/hb-{_name_part(token)}-"


def region_name(token: str, kind: str, index: int) -> str:
    """The name of region ``index`` of ``kind`` for the broker run ``token``."""
    return f"{broker_prefix(token)}{_name_part(kind)}-{int(index)}"


def _name_part(part: str) -> str:
    # A '-' inside a part would let one broker's prefix match another's names.
    if not part or "-" in part or "/" in part:
        raise ValueError(f"bad region name part {part!r}")
    return part


def new_token() -> str:
    """A fresh random broker token (8 hex digits)."""
    return secrets.token_hex(4)


def _check_name(name: str) -> None:
    if not name.startswith("/") or "/" in name[1:] or not 1 < len(name) <= _NAME_MAX:
        raise ValueError(f"shared memory names look like '/hb-...', not {name!r}")


class SharedRegion:
    """One mapped shared memory segment.

    ``buf`` is a writable (or, for a read-only attach, read-only) memoryview of
    exactly ``size`` bytes. A region is not thread safe and not process safe:
    the structures on top of it say who may write which bytes.
    """

    __slots__ = ("name", "size", "owner", "readonly", "buf", "_mmap")

    def __init__(self, name: str, mm: mmap.mmap, owner: bool, readonly: bool):
        self.name = name
        self.size = len(mm)
        self.owner = owner
        self.readonly = readonly
        self._mmap = mm
        self.buf = memoryview(mm)

    @classmethod
    def create(cls, name: str, size: int) -> SharedRegion:
        """Create and map a new zero-filled region (owner side).

        Raises FileExistsError if ``name`` exists (remove stale regions first).
        """
        _check_name(name)
        if size <= 0:
            raise ValueError("region size must be positive")
        try:
            shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
        except posix_ipc.ExistentialError:
            raise FileExistsError(f"shared memory {name} exists") from None
        try:
            mm = _map(shm, size, readonly=False)
        except BaseException:
            posix_ipc.unlink_shared_memory(name)
            raise
        return cls(name, mm, owner=True, readonly=False)

    @classmethod
    def attach(cls, name: str, readonly: bool = False) -> SharedRegion:
        """Map an existing region. Raises FileNotFoundError if there is none.

        A read-only attach (a monitor such as ``hostbroker top``) maps the
        segment without write permission, so a bug there cannot corrupt it.
        """
        _check_name(name)
        try:
            shm = posix_ipc.SharedMemory(name, read_only=readonly)
        except posix_ipc.ExistentialError:
            raise FileNotFoundError(f"no shared memory {name}") from None
        return cls(name, _map(shm, shm.size, readonly), owner=False, readonly=readonly)

    def close(self) -> None:
        """Unmap. Idempotent.

        Views handed out by the structures on this region (a ring's records)
        keep the mapping alive; if any is still referenced the unmap happens
        when the last one is released, instead of failing here.
        """
        if self._mmap is None:
            return
        self.buf.release()
        try:
            self._mmap.close()
        except BufferError:
            pass
        self._mmap = None

    def unlink(self) -> None:
        """Remove the name (owner only); existing mappings stay valid."""
        if not self.owner:
            raise PermissionError(f"{self.name}: only the creator unlinks a region")
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass

    def __repr__(self) -> str:
        return f"<SharedRegion {self.name} size={self.size} owner={self.owner}>"


def _map(shm: posix_ipc.SharedMemory, size: int, readonly: bool) -> mmap.mmap:
    try:
        access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
        return mmap.mmap(shm.fd, size, access=access)
    finally:
        shm.close_fd()


def remove_stale(prefix: str) -> list[str]:
    """Unlink every region whose name starts with ``prefix``; return their names.
    Raises PermissionError for one that is not ours to unlink.

    Used by the supervisor at start (regions left by a crashed run) and at
    shutdown. Processes that still map a removed region keep their mapping.
    """
    _check_name(prefix)
    stem = prefix[1:]
    removed = []
    for entry in sorted(os.listdir(SHM_DIR)):
        if not entry.startswith(stem):
            continue
        try:
            posix_ipc.unlink_shared_memory("/" + entry)
        except posix_ipc.ExistentialError:
            continue  # removed concurrently
        except posix_ipc.PermissionsError:
            raise PermissionError(f"{SHM_DIR}/{entry} is not ours to remove") from None
        removed.append("/" + entry)
    return removed


def _lease_path(token: str) -> str:
    if not _LEASE_TOKEN.fullmatch(token):
        raise ValueError(f"bad lease token {token!r}")
    return os.path.join(SHM_DIR, token + LEASE_SUFFIX)


def take_lease(token: str, timeout: float = 10.0) -> int:
    """Hold the lease of the broker run ``token`` (see the module docstring);
    return the descriptor, which holds it until it is closed in every process
    that shares it. Waits up to ``timeout`` s while a sweeper holds it.

    Raises TimeoutError when another live run holds it, OSError (EPERM) when
    the lease file belongs to another user and cannot be replaced.
    """
    path = _lease_path(token)
    deadline = time.monotonic() + timeout
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} is held by a live broker")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     0o600)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                os.unlink(path)  # planted by someone else: not a lease of ours
                os.close(fd)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                time.sleep(0.01)
                continue
            try:
                same = os.lstat(path).st_ino == info.st_ino
            except FileNotFoundError:
                same = False
            if not same:  # a sweeper removed it while we waited: take a fresh one
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise


def release_lease(token: str, fd: int) -> None:
    """Give the lease up at a clean stop: its file goes, then the lock."""
    try:
        os.unlink(_lease_path(token))
    except OSError:
        pass
    os.close(fd)


def sweep_dead_runs(on_dead: Callable[[str], None] | None = None,
                    on_error: Callable[[str, str], None] | None = None) -> list[str]:
    """Remove the segments of every broker run whose lease is ours and unheld.

    For each such run: its segments (prefix ``/<token>-``) are unlinked,
    ``on_dead(token)`` removes whatever else it left (the supervisor: its
    System V admin lock), and its lease file goes. Returns the tokens swept.
    A run that cannot be cleared (``on_dead`` or an unlink raises OSError)
    keeps its lease file, for the next sweep, and is
    passed to ``on_error(token, reason)``.
    """
    swept = []
    euid = os.geteuid()
    for entry in sorted(os.listdir(SHM_DIR)):
        token = entry[:-len(LEASE_SUFFIX)]
        if not entry.endswith(LEASE_SUFFIX) or not _LEASE_TOKEN.fullmatch(token):
            continue
        path = os.path.join(SHM_DIR, entry)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue  # gone, a link, or not ours to read
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != euid:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue  # a live broker holds it
                raise
            try:
                if os.lstat(path).st_ino != info.st_ino:
                    continue  # replaced by a new run meanwhile
            except FileNotFoundError:
                continue
            try:
                remove_stale("/" + token + "-")
                if on_dead is not None:
                    on_dead(token)
                os.unlink(path)
            except OSError as e:
                if on_error is not None:
                    on_error(token, str(e) or type(e).__name__)
                continue
            swept.append(token)
        finally:
            os.close(fd)
    return swept


# -- structures laid out in a region ----------------------------------------

# Every structure starts with magic u32 and version u32 at offset 0.
_MAGIC_VERSION = struct.Struct("<II")


def tag_magic(tag: bytes) -> int:
    """A u32 magic that reads as ``tag`` (4 ASCII bytes) in a hex dump."""
    return int.from_bytes(tag, "little")


class Structure:
    """Base of a structure laid out at the start of one region.

    Keeps the region and the views cast over it, and whether this handle
    opened the region itself (then :meth:`close` unmaps it) or was given one
    that its caller manages.
    """

    MAGIC: int
    VERSION: int

    def __init__(self, region: SharedRegion, opened: bool):
        self.region = region
        self._opened = opened
        self._views: list[memoryview] = []

    @staticmethod
    def _open(region_or_name: SharedRegion | str, size: int | None, readonly: bool = False):
        """(region, opened): create (``size`` given) or attach by name, or use a region."""
        if isinstance(region_or_name, SharedRegion):
            if size is not None and region_or_name.size < size:
                raise ValueError(f"{region_or_name.name}: {size} bytes needed, region has {region_or_name.size}")
            return region_or_name, False
        if size is None:
            return SharedRegion.attach(region_or_name, readonly=readonly), True
        return SharedRegion.create(region_or_name, size), True

    def _view(self, start: int, end: int, fmt: str = "B") -> memoryview:
        view = self.region.buf[start:end].cast(fmt)
        self._views.append(view)
        return view

    @classmethod
    def _attach(cls, region_or_name: SharedRegion | str, readonly: bool = False, **kwargs):
        """A handle on the existing structure in a region (or a named one)."""
        region, opened = cls._open(region_or_name, None, readonly)
        try:
            return cls(region, opened, **kwargs)
        except BaseException:
            if opened:
                region.close()
            raise

    @classmethod
    def _stamp(cls, buf: memoryview) -> None:
        _MAGIC_VERSION.pack_into(buf, 0, cls.MAGIC, cls.VERSION)

    def _check_stamp(self) -> None:
        buf = self.region.buf
        if len(buf) < _MAGIC_VERSION.size:
            raise LayoutError(f"{self.region.name}: too small for a {type(self).__name__}")
        got_magic, got_version = _MAGIC_VERSION.unpack_from(buf, 0)
        if got_magic != self.MAGIC:
            raise LayoutError(f"{self.region.name}: magic {got_magic:#x} is not a {type(self).__name__}")
        if got_version != self.VERSION:
            raise LayoutError(f"{self.region.name}: version {got_version}, expected {self.VERSION}")

    @property
    def name(self) -> str:
        return self.region.name

    def close(self) -> None:
        """Release this handle's views; unmap the region if this handle mapped it."""
        for view in self._views:
            view.release()
        self._views.clear()
        if self._opened:
            self.region.close()

    def unlink(self) -> None:
        """Remove the region's name (creator only)."""
        self.region.unlink()
