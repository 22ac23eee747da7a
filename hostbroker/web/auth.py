"""The admin gate of the HTTP listener: who may change the broker through it.

Owns: reading the admin token (:func:`load_admin_token`, in the supervisor at
start, so a bad token file refuses the start in one line) and
:class:`AdminGate`, which the :class:`~.router.Router` applies to every route
added with ``admin=True`` (the console's POSTs) before its handler runs.
Read-only pages never pass through it.

The gate answers, in this order:

1. 403 unless ``http.admin.enable`` is true;
2. 401 (with ``WWW-Authenticate: Bearer``) unless ``Authorization: Bearer
   TOKEN`` carries the token exactly (compared in constant time);
3. 403 unless the request comes from a page of this listener (a browser
   cannot be made to lie about these, whatever site it was on): its
   ``Origin`` (or, without one, its ``Referer``) names the host and port
   of the ``Host`` header the request came with, over http or https (a
   TLS-terminating proxy in front keeps the host); ``Content-Type`` is
   ``application/json`` (not one of the types a plain cross-site form can
   send); and ``X-Hostbroker-Console: 1`` is present (a custom header, which
   no cross-site request carries without a CORS preflight, and this
   listener answers no preflight).

The token file: when the admin is enabled, ``http.admin.token.file`` must
name a regular file (opened without following a symbolic link), owned by
the broker's user or by root (another user could rewrite the token before a
restart), readable by its owner only (no group or other permission bits), at most
:data:`MAX_TOKEN_FILE_BYTES`, holding at least :data:`MIN_TOKEN_BYTES`
visible ASCII characters (one trailing newline, or CRLF, is not part of
the token). Anything else refuses the start with one line naming the
setting and the problem.
"""

from __future__ import annotations

import errno
import hmac
import os
import stat
import urllib.parse

from hostbroker.web.router import Request, Response, error_response

MIN_TOKEN_BYTES = 16
MAX_TOKEN_FILE_BYTES = 4096
CONSOLE_HEADER = "x-hostbroker-console"


class AdminTokenError(Exception):
    """The token file refuses the start; the text is the one line to print."""


def load_admin_token(config) -> bytes | None:
    """The admin token, or None when ``http.admin.enable`` is false (the file is
    then not read at all). :class:`AdminTokenError` says why it cannot be used."""
    if not config["http.admin.enable"]:
        return None
    path = config["http.admin.token.file"]
    key = "http.admin.token.file"
    if not path:
        raise AdminTokenError(f"{key}: required when http.admin.enable is true")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise AdminTokenError(f"{key}: {path} is a symbolic link") from None
        raise AdminTokenError(f"{key}: cannot read {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AdminTokenError(f"{key}: {path} is not a regular file")
        if st.st_uid not in (os.geteuid(), 0):
            # another user could rewrite the token before a restart
            raise AdminTokenError(f"{key}: {path} is owned by uid {st.st_uid}, not by the "
                                  f"broker's user (uid {os.geteuid()}) or root")
        if st.st_mode & 0o077:
            raise AdminTokenError(f"{key}: {path} is open to group or others "
                                  f"(mode {stat.S_IMODE(st.st_mode):04o}; chmod 600 it)")
        if st.st_size > MAX_TOKEN_FILE_BYTES:
            raise AdminTokenError(f"{key}: {path} is longer than {MAX_TOKEN_FILE_BYTES} bytes")
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
    except OSError as e:
        raise AdminTokenError(f"{key}: cannot read {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    return check_token(data, f"{key}: {path}")


def check_token(data: bytes, where: str) -> bytes:
    """``data`` less one trailing newline, if it is a usable token; else
    :class:`AdminTokenError` starting with ``where``."""
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise AdminTokenError(f"{where} is longer than {MAX_TOKEN_FILE_BYTES} bytes")
    token = data.removesuffix(b"\n").removesuffix(b"\r")
    if not all(0x21 <= b <= 0x7E for b in token):
        raise AdminTokenError(f"{where}: the token must be visible ASCII characters only "
                              "(no spaces, no second line)")
    if len(token) < MIN_TOKEN_BYTES:
        raise AdminTokenError(f"{where}: the token is shorter than {MIN_TOKEN_BYTES} "
                              "characters")
    return token


class AdminGate:
    """Called by the Router with each request to an admin route: None lets it
    through, else the answer that refuses it (see the module doc)."""

    def __init__(self, enabled: bool, token: bytes | None):
        if enabled and not token:
            raise ValueError("an enabled admin gate needs its token")
        self.enabled = enabled
        self.token = token or b""

    def __call__(self, request: Request) -> Response | None:
        if not self.enabled:
            return error_response(403, "console changes are off on this broker "
                                       "(http.admin.enable is false)")
        if not self._authorized(request.headers.get("authorization", "")):
            return error_response(401, "an admin token is required "
                                       "(Authorization: Bearer TOKEN)",
                                  {"WWW-Authenticate": 'Bearer realm="hostbroker"'})
        problem = cross_site_problem(request)
        if problem is not None:
            return error_response(403, problem)
        return None

    def _authorized(self, value: str) -> bool:
        scheme, _, given = value.partition(" ")
        if scheme.lower() != "bearer":
            return False
        # compare_digest takes the same time whatever matches; a different length
        # says only that, and the length is no secret worth having
        return hmac.compare_digest(given.strip().encode("ascii", "replace"), self.token)


def cross_site_problem(request: Request) -> str | None:
    """Why ``request`` may have been sent by another site's page, or None."""
    headers = request.headers
    host = headers.get("host", "").strip().lower()
    if not host:
        return "the request names no Host"
    origin = headers.get("origin")
    if origin is not None:
        if not _same_origin(origin, host):
            return "cross-origin change refused: Origin is not this listener"
    else:
        referer = headers.get("referer")
        if referer is None:
            return "a change needs an Origin or Referer header naming this listener"
        if not _same_origin(referer, host, path_ok=True):
            return "cross-origin change refused: Referer is not this listener"
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        return "a change must be sent as Content-Type: application/json"
    if headers.get(CONSOLE_HEADER, "").strip() != "1":
        return "a change must carry the header X-Hostbroker-Console: 1"
    return None


def _same_origin(url: str, host: str, path_ok: bool = False) -> bool:
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.username or parts.password:
        return False
    if not path_ok and (parts.path or parts.query or parts.fragment):
        return False
    return parts.netloc.lower() == host
