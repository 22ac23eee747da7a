"""Listener URIs: what ``tcp://HOST:PORT``, ``ssl://HOST:PORT`` (TCP with TLS)
and ``unix://PATH`` say, checked.

Owns: :func:`parse_listener`, the one reading of a listener URI, used by the
settings that name listeners (``listeners``, ``http.listeners``), the
supervisor that binds them and the tools that reach them. Pure: nothing is
looked up or bound.
"""

from __future__ import annotations

UNIX_PATH_MAX = 107  # sun_path holds 108 bytes, the last one a NUL


def parse_listener(uri: str) -> tuple[str, str, int] | tuple[str, str]:
    """``("tcp", host, port)``, ``("ssl", host, port)`` or ``("unix", path)`` of
    a listener URI, or ValueError saying what is wrong with it. Pure: nothing is
    looked up or bound."""
    scheme, sep, rest = uri.partition("://")
    if scheme in ("tcp", "ssl") and sep:
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isascii() or not port.isdigit():
            raise ValueError(f"{uri}: expected {scheme}://HOST:PORT")
        if int(port) > 65535:
            raise ValueError(f"{uri}: port {int(port)} is not between 0 and 65535")
        if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
            raise ValueError(f"{uri}: an IPv6 host goes in brackets: {scheme}://[::1]:PORT")
        host = host[1:-1] if host.startswith("[") else host
        if any(c.isspace() or c in "/[]" for c in host):
            raise ValueError(f"{uri}: {host!r} is not a host name or address")
        return scheme, host, int(port)
    if scheme == "unix" and sep:
        if not rest:
            raise ValueError(f"{uri}: expected unix://PATH")
        if "\0" in rest:
            raise ValueError(f"{uri}: the path holds a NUL byte")
        if len(rest.encode(errors="surrogateescape")) > UNIX_PATH_MAX:
            raise ValueError(f"{uri}: the path is longer than {UNIX_PATH_MAX} bytes")
        return "unix", rest
    raise ValueError(f"{uri}: expected tcp://HOST:PORT, ssl://HOST:PORT or unix://PATH")
