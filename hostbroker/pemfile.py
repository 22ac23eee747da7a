"""Reading a PEM file named by a setting (certificates, keys): the one way
both the broker (``ssl://`` listeners) and the clients (``ssl://`` URIs) do it.

The file is opened without following a symbolic link and without blocking
(a FIFO or a device named by mistake or malice is refused, never waited on),
must be a regular file of at most :data:`MAX_PEM_BYTES`, and is read through
that descriptor, so the file checked is the file read. Every problem is a
:class:`PemFileError` of one line naming the setting and the path.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_PEM_BYTES = 1024 * 1024


class PemFileError(ValueError):
    """A PEM file that cannot be used: one line naming the setting and the path."""


def open_pem(key: str, path: str) -> int:
    """A descriptor of the regular file ``path`` (``key`` names the setting in
    the error), opened without following a link or blocking; PemFileError
    otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
                     | os.O_NONBLOCK)
    except OSError as e:
        reason = "is a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise PemFileError(f"{key}: {path}: {reason}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PemFileError(f"{key}: {path}: not a regular file")
        if info.st_size > MAX_PEM_BYTES:
            raise PemFileError(f"{key}: {path}: larger than {MAX_PEM_BYTES} bytes")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_pem(key: str, path: str) -> str:
    """The text of the PEM file ``path`` (see :func:`open_pem`)."""
    fd = open_pem(key, path)
    try:
        data = os.pread(fd, MAX_PEM_BYTES + 1, 0)
    except OSError as e:
        raise PemFileError(f"{key}: {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_PEM_BYTES:
        raise PemFileError(f"{key}: {path}: larger than {MAX_PEM_BYTES} bytes")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise PemFileError(f"{key}: {path}: not a PEM file") from None
