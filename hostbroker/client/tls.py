"""The TLS of a client's ``ssl://`` connections: its settings, its context,
and a handshake bounded by a deadline.

- :data:`TLS_DEFAULTS`: the client's ``ssl.*`` settings (Kafka's names) and
  their built-in defaults.
- :func:`set_tls_defaults` / :func:`tls_defaults`: the process's own
  defaults, which a command's ``--command-config`` file sets before anything
  connects. :func:`hostbroker.client.settings.resolve` starts a client's
  ``ssl.*`` settings from them, so any value given to the client itself
  (``--property``, a keyword, a settings mapping) wins over the file. A
  process that starts others (``perf --processes N``) hands them on.
- :func:`tls_settings`: the ``ssl.*`` values a connection uses: those a
  mapping holds, the process's defaults for the keys it lacks.
- :func:`tls_context`: the client ``SSLContext`` of those values (cached by
  value and by the files' inode, mtime and size, so a rotated certificate is
  read again); the PEM files are read through :mod:`hostbroker.pemfile`. A
  keystore that others may read, or not owned by this process's user, is
  warned of once per path.
- :func:`load_truststore`: the CAs of ``ssl.truststore.location`` into a
  context (a client's, or a broker's listener's: one way to read them).
- :func:`handshake`: the TLS handshake of a connected socket within a
  deadline for the whole handshake, not for each of its reads.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any

from hostbroker.pemfile import PemFileError, open_pem, read_pem

TLS_DEFAULTS: dict[str, str] = {
    "ssl.truststore.location": "",
    "ssl.keystore.location": "",
    "ssl.key.password": "",
    "ssl.endpoint.identification.algorithm": "https",
}
_tls_defaults: dict[str, str] = dict(TLS_DEFAULTS)
_log = logging.getLogger(__name__)
_warned: set[str] = set()  # keystores said to be readable by others


def set_tls_defaults(values: Mapping[str, str]) -> None:
    """The TLS settings of this process's ``ssl://`` connections where the
    client's own settings do not name them (a command's ``--command-config``)."""
    _tls_defaults.clear()
    _tls_defaults.update(TLS_DEFAULTS)
    _tls_defaults.update({k: str(v) for k, v in values.items() if k in TLS_DEFAULTS})


def tls_defaults() -> dict[str, str]:
    """A copy of the process's TLS defaults (to hand to another process)."""
    return dict(_tls_defaults)


def tls_settings(values: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``ssl.*`` settings of a connection: those ``values`` holds (as
    given, a default included), the process's defaults for the others."""
    found = dict(_tls_defaults)
    for key in TLS_DEFAULTS:
        if values is not None and values.get(key) is not None:
            found[key] = str(values[key])
    return found


def load_truststore(ctx: ssl.SSLContext, truststore: str) -> None:
    """The CA certificates of the PEM file ``truststore`` into ``ctx`` (a
    client's or a listener's); ValueError (a PemFileError for the file) names
    the problem in one line."""
    cadata = read_pem("ssl.truststore.location", truststore)
    try:
        ctx.load_verify_locations(cadata=cadata)
    except (ssl.SSLError, ValueError) as e:
        reason = (getattr(e, "reason", None) or str(e)).replace("_", " ").lower()
        raise ValueError(f"ssl.truststore.location: {truststore}: no CA certificate "
                         f"in it ({reason})") from None


def _stamp(path: str) -> tuple[int, int, int] | None:
    """What tells a file's new content from its old: (inode, mtime, size)."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except (OSError, ValueError):
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


@functools.lru_cache(maxsize=16)
def _context(truststore: str, keystore: str, password: str, algorithm: str,
             *stamps: Any) -> ssl.SSLContext:
    if algorithm not in ("https", ""):
        raise ValueError(f"ssl.endpoint.identification.algorithm: {algorithm!r}: "
                         "expected https or empty")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = algorithm == "https"
    if truststore:
        load_truststore(ctx, truststore)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if keystore:
        fd = open_pem("ssl.keystore.location", keystore)
        info = os.fstat(fd)
        if (info.st_mode & 0o077 or info.st_uid != os.geteuid()) and keystore not in _warned:
            _warned.add(keystore)
            _log.warning("ssl.keystore.location: %s: readable by others (mode %o) or not "
                         "owned by this user: its key should be mode 0600",
                         keystore, info.st_mode & 0o777)
        try:
            # through the descriptor opened above: the file checked is the file read
            ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=lambda: password.encode())
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"ssl.keystore.location: {keystore}: not a usable certificate "
                             f"chain and key ({getattr(e, 'reason', None) or e})") from None
        finally:
            os.close(fd)
    return ctx


def tls_context(values: Mapping[str, Any] | None = None) -> ssl.SSLContext:
    """The client SSLContext of the ``ssl.*`` settings (:func:`tls_settings`):
    ``ssl.truststore.location`` (PEM CAs; empty: the system's),
    ``ssl.keystore.location`` (PEM: this client's certificate chain, then its
    key), ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``
    (``https``: the certificate must name the host; empty: not checked).
    ValueError (a PemFileError for a file) names a bad one in one line."""
    found = tls_settings(values)
    return _context(found["ssl.truststore.location"], found["ssl.keystore.location"],
                    found["ssl.key.password"], found["ssl.endpoint.identification.algorithm"],
                    _stamp(found["ssl.truststore.location"]),
                    _stamp(found["ssl.keystore.location"]))


def handshake(context: ssl.SSLContext, sock: socket.socket, host: str,
              timeout: float) -> ssl.SSLSocket:
    """``sock`` (connected) wrapped by ``context`` for ``host``, its handshake
    done within ``timeout`` seconds in all (a peer that trickles its handshake
    does not get a fresh timeout for each read): TimeoutError then. The
    socket comes back with ``timeout`` as its per-operation timeout."""
    deadline = time.monotonic() + timeout
    sock.setblocking(False)
    wrapped = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    while True:
        try:
            wrapped.do_handshake()
            break
        except ssl.SSLWantReadError:
            wanted = ([wrapped], [])
        except ssl.SSLWantWriteError:
            wanted = ([], [wrapped])
        left = deadline - time.monotonic()
        if left <= 0 or not any(select.select(*wanted, [], left)[:2]):
            raise TimeoutError("the TLS handshake did not end in time")
    wrapped.settimeout(timeout)
    return wrapped


__all__ = ["TLS_DEFAULTS", "PemFileError", "handshake", "load_truststore", "set_tls_defaults",
           "tls_context",
           "tls_defaults", "tls_settings"]
