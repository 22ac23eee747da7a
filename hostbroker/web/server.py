"""The HTTP/1.1 connection machine of ``hb-http``: bytes in, answers out.

Owns: one client connection's protocol state, from the bytes it sent to the
bytes it is owed. Pure of sockets and of the broker (h11's habit): the
worker feeds it what it read (:meth:`HttpConnection.received`), writes what
:attr:`HttpConnection.output` holds and reports how much went
(:meth:`HttpConnection.sent`), asks it about time (:meth:`HttpConnection.expired`)
and closes the socket once :attr:`HttpConnection.done`. Each whole request is
answered by the :class:`~.router.Router` it was given.

What it accepts (anything else is answered with a one-line JSON error and
the connection closed, so nothing after a bad request is guessed at):

- a request line ``METHOD SP /path[?query] SP HTTP/1.1`` (or ``HTTP/1.0``;
  another version: 505), in ASCII; leading empty lines are skipped and are
  no progress (the idle timeout closes a connection that sends only them);
- header lines ``name: value``, ASCII, no line folding, no header sent
  twice among those the gate and the framing read (``Host``,
  ``Content-Length``, ``Authorization``, ``Origin``, ``Referer``,
  ``Content-Type``, ...; others sent twice are joined with ``, ``);
  ``Host`` is required (in HTTP/1.0 too);
- a ``Host`` this listener answers to (:func:`host_problem`, the defence
  against DNS rebinding): an IP address, ``localhost``, or a name of
  ``http.allowed.hosts`` (``*`` there: any), port and one trailing dot
  aside, in any case; another is answered 421 before any route is looked
  at, read-only pages included. An absolute-form target (``GET
  http://host/ HTTP/1.1``, a proxy's request) is refused (400), so the
  ``Host`` header is the only host a request names;
- a body framed by ``Content-Length`` only: ``Transfer-Encoding`` is
  answered 501 (no chunked request bodies; no ambiguity to smuggle through);
  ``Expect: 100-continue`` is honoured in HTTP/1.1 (ignored in HTTP/1.0,
  whose client would take the 100 for the answer), another expectation is
  417.

Bounds (settings ``http.*``, given as :class:`Limits`):

- the request line, headers and body together at most ``request_max_bytes``:
  headers not ended within it are 431, a ``Content-Length`` beyond it 413;
- a request must be whole ``request_timeout`` after its first byte (408);
- ``idle_timeout`` without a byte moving either way closes the connection:
  idle between requests, or an answer the client does not read;
- an answer is at most ``response_max_bytes`` (else a 500 naming the limit
  replaces it);
- a request arriving while the connection's ``overloaded`` (the worker's
  bound on the bytes owed to all its connections) gives a reason is
  answered 503 with ``Retry-After: 1``, the page not run.

Memory is bounded per connection: requests are answered one at a time, in
order (pipelining works, it is not run ahead: the next request is answered
only when the worker calls :meth:`HttpConnection.advance`, once a round of
its loop, so one connection's pipelined requests never keep the others, its
heartbeat or the timeouts waiting); while an answer is owed,
nothing more is read (:attr:`HttpConnection.wants_read`), so a client that
never reads its answers holds one answer and at most one request's bytes.

Keep-alive: HTTP/1.1 keeps the connection unless the request says
``Connection: close``; HTTP/1.0 closes after each answer. Every answer
carries ``Content-Length``, ``Cache-Control: no-store``,
``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``,
``Referrer-Policy: same-origin`` and ``Content-Security-Policy: default-src
'self'`` (a handler may set others or override the defaults, never the
framing).
"""

from __future__ import annotations

import collections
import dataclasses
import http
import ipaddress
import re
from collections.abc import Callable

from hostbroker.settings_http import ANY_HOST, allowed_hosts, normal_host_name
from hostbroker.web.router import (Request, Response, Router, error_response,
                                            parse_query)

_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)\Z")
# headers the gate or the framing read: one value each, never joined
_SINGLE = frozenset(("host", "content-length", "transfer-encoding", "authorization", "origin",
                     "referer", "content-type", "x-hostbroker-console", "expect"))
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
DEFAULT_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'self'",
}
_FRAMING = frozenset(("content-length", "transfer-encoding", "connection", "content-type"))
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_NOTHING = memoryview(b"")


@dataclasses.dataclass(frozen=True)
class Limits:
    request_max_bytes: int = 65536
    request_timeout: float = 10.0
    idle_timeout: float = 60.0
    response_max_bytes: int = 64 * 1024 * 1024
    # http.allowed.hosts, normalized (settings_http.allowed_hosts)
    allowed_hosts: frozenset[str] = frozenset()

    @classmethod
    def from_config(cls, config) -> "Limits":
        return cls(config["http.request.max.bytes"], config["http.request.timeout.ms"] / 1000,
                   config["http.idle.timeout.ms"] / 1000, config["http.response.max.bytes"],
                   allowed_hosts(config["http.allowed.hosts"]))


class BadRequest(Exception):
    """A request that cannot be answered normally: ``status`` and a one-line reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class _Head:
    method: str
    target: str
    version: tuple[int, int]
    headers: dict[str, str]
    length: int  # of the head, terminator included
    body_length: int
    keep_alive: bool


class HttpConnection:
    """One connection's state (see the module doc). ``now`` is a monotonic time
    in seconds, always given by the caller (tests drive the clock)."""

    def __init__(self, router: Router, limits: Limits, peer: str, now: float,
                 overloaded: Callable[[], str | None] | None = None):
        self.router = router
        # asked before each request is answered: a reason (one line) to answer
        # 503 instead of the page, or None (the worker's bound on answers owed)
        self.overloaded = overloaded
        self.limits = limits
        self.peer = peer
        self._in = bytearray()
        # what is owed, in order: views of the answers' heads and bodies as the
        # pages made them (no copy joins them); the first is cut as it is written
        self._out: collections.deque[memoryview] = collections.deque()
        self._waiting = False  # an answer went out while input waited: see ready
        self._head: _Head | None = None  # the head of the request whose body is awaited
        self._continued = False  # 100 Continue sent for the current request
        self.closing = False  # no request is read any more; done once output is written
        self.request_started: float | None = None  # first byte of the request being read
        self.last_progress = now
        self.answered = 0  # answers produced (counted by the worker)
        self.statuses: list[int] = []  # statuses produced since the worker last took them

    # -- what the worker asks ----------------------------------------------------------
    @property
    def output(self) -> memoryview:
        """Bytes to write now (may be empty)."""
        return self._out[0] if self._out else _NOTHING

    @property
    def owed(self) -> int:
        """Bytes owed that are not written yet."""
        return sum(len(view) for view in self._out)

    def owed_objects(self):
        """The objects whose bytes are owed (a body shared by several answers
        is the same object in each), for the worker's memory bound."""
        return (view.obj for view in self._out)

    @property
    def wants_read(self) -> bool:
        """Read more only when no answer is owed and no whole request waits."""
        return (not self.closing and not self._out
                and len(self._in) < self.limits.request_max_bytes)

    @property
    def done(self) -> bool:
        """The socket can be closed: closing, and everything owed is written."""
        return self.closing and not self._out

    # -- events ---------------------------------------------------------------------
    def received(self, data: bytes, now: float) -> None:
        """Bytes read from the client (``b""``: it closed its side)."""
        if self.closing:
            return
        if not data:
            # nothing more will come: answer what is whole, then close
            self._advance(now)
            self.closing = True
            return
        if not self._in:
            # empty lines between requests are no progress: a client sending
            # CRLFs holds its connection no longer than the idle timeout
            data = data.lstrip(b"\r\n")
            if not data:
                return
            self.request_started = now  # the first byte of a request
        self.last_progress = now
        self._in += data
        self._advance(now)

    @property
    def ready(self) -> bool:
        """No answer is owed and bytes of a next request wait: :meth:`advance`
        may answer it (the worker calls it once a round at most)."""
        return not self.closing and not self._out and self._waiting

    def sent(self, n: int, now: float) -> None:
        """``n`` bytes of :attr:`output` were written. A pipelined request
        waiting is not answered here but by the next :meth:`advance`, so one
        connection's requests never hold the worker's loop."""
        if n:
            self.last_progress = now
        while n and self._out:
            first = self._out[0]
            if n < len(first):
                self._out[0] = first[n:]
                return
            n -= len(first)
            self._out.popleft()
        # the input may hold a whole request, left for advance() (a part of one
        # is not worth a round: received() answers it once whole)
        self._waiting = not self._out and bool(self._in)

    def advance(self, now: float) -> None:
        """Answer the next request if it is whole and no answer is owed."""
        self._advance(now)

    def expired(self, now: float) -> bool:
        """Apply the timeouts at ``now``; True when the connection should be closed
        without more ado (a 408 to send makes it ``closing`` instead)."""
        if self._out or not self._in:
            # an answer not taken, or nothing asked: idle
            return now - self.last_progress >= self.limits.idle_timeout
        if self.closing:
            return now - self.last_progress >= self.limits.idle_timeout
        started = self.request_started if self.request_started is not None else now
        if now - started >= self.limits.request_timeout:
            self._fail(BadRequest(408, "the request did not arrive whole within "
                                       "http.request.timeout.ms"))
        return False

    # -- the machine ------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        """Answer the next whole request, if no answer is owed (one at most:
        an answer is never empty, so the loop ends once one is queued)."""
        self._waiting = False
        while not self.closing and not self._out and self._in:
            try:
                request = self._parse()
            except BadRequest as e:
                self._fail(e)
                return
            if request is None:
                return
            self._answer(request)
            self.request_started = now if self._in else None

    def _parse(self) -> Request | None:
        """The next whole request taken from the input, or None (need more)."""
        if self._head is None:
            while self._in.startswith(b"\r\n"):
                del self._in[:2]
            end = self._in.find(b"\r\n\r\n")
            if end < 0:
                if len(self._in) >= self.limits.request_max_bytes:
                    raise BadRequest(431, "the request line and headers are longer than "
                                          "http.request.max.bytes")
                return None
            if end + 4 > self.limits.request_max_bytes:
                raise BadRequest(431, "the request line and headers are longer than "
                                      "http.request.max.bytes")
            self._head = _parse_head(bytes(self._in[:end]), end + 4)
            problem = host_problem(self._head.headers["host"], self.limits.allowed_hosts)
            if problem is not None:
                raise BadRequest(421, problem)
            if self._head.length + self._head.body_length > self.limits.request_max_bytes:
                raise BadRequest(413, "the request body is larger than http.request.max.bytes")
        head = self._head
        if len(self._in) < head.length + head.body_length:
            expect = head.headers.get("expect")
            # RFC 9110 10.1.1: the expectation of an HTTP/1.0 request is ignored
            if expect is not None and not self._continued and head.version == (1, 1):
                self._continued = True
                self._out.append(memoryview(CONTINUE))
            return None
        body = bytes(self._in[head.length:head.length + head.body_length])
        del self._in[:head.length + head.body_length]
        self._head = None
        self._continued = False
        if not head.keep_alive:
            self.closing = True
        path, _, query = head.target.partition("?")
        try:
            params = parse_query(query)
        except ValueError as e:
            raise BadRequest(400, str(e)) from None
        return Request(head.method, path, params, head.headers, body, self.peer)

    def _answer(self, request: Request) -> None:
        reason = self.overloaded() if self.overloaded is not None else None
        if reason is not None:
            response = error_response(503, reason, {"Retry-After": "1"})
        else:
            response = self.router.dispatch(request)
        self._queue(response, request.method == "HEAD")

    def _fail(self, error: BadRequest) -> None:
        """Answer ``error`` and close: nothing after a bad request can be trusted.
        A HEAD request refused after its head was read gets the head of the
        answer only, as any answer to HEAD (RFC 9110 9.3.2)."""
        head_only = self._head is not None and self._head.method == "HEAD"
        self._in.clear()
        self._head = None
        self.closing = True
        if self._out and not (len(self._out) == 1 and self._out[0].obj is CONTINUE
                              and len(self._out[0]) == len(CONTINUE)):
            return  # an answer is still being written; just close after it
        self._out.clear()
        self._queue(error_response(error.status, str(error)), head_only)

    def _queue(self, response: Response, head_only: bool) -> None:
        for part in response_parts(response, self.limits.response_max_bytes,
                                   close=self.closing, head_only=head_only):
            if part:
                self._out.append(memoryview(part))
        self.answered += 1
        self.statuses.append(response.status if response.status >= 100 else 500)


def _parse_head(raw: bytes, length: int) -> _Head:
    """The request line and headers of ``raw`` (without the blank line)."""
    if any(b >= 0x80 for b in raw):
        raise BadRequest(400, "the request line and headers must be ASCII")
    lines = raw.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not all(parts):
        raise BadRequest(400, "the request line is not METHOD TARGET HTTP/VERSION")
    method, target, version = parts
    if not _TOKEN.match(method):
        raise BadRequest(400, "the request method is not a token")
    found = _VERSION.match(version)
    if found is None:
        raise BadRequest(400, "the request line names no HTTP version")
    major, minor = int(found.group(1)), int(found.group(2))
    if (major, minor) not in ((1, 0), (1, 1)):
        raise BadRequest(505, "only HTTP/1.1 and HTTP/1.0 are served")
    if not target.startswith(b"/") or b"#" in target or any(b < 0x21 for b in target):
        raise BadRequest(400, "the request target must be a path (/...)")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise BadRequest(400, "folded header lines are not accepted")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            raise BadRequest(400, "a header line is not NAME: VALUE")
        key = name.decode().lower()
        text = value.decode().strip(" \t")
        if _BAD_VALUE.search(text) or "\r" in text:
            raise BadRequest(400, f"the {key} header holds a control character")
        if key in headers:
            if key in _SINGLE:
                raise BadRequest(400, f"the {key} header is sent twice")
            headers[key] += ", " + text
        else:
            headers[key] = text
    if not headers.get("host"):
        raise BadRequest(400, "a request must name its Host (HTTP/1.0 too)")
    if "transfer-encoding" in headers:
        raise BadRequest(501, "Transfer-Encoding is not accepted in requests; send "
                              "Content-Length")
    body_length = 0
    if "content-length" in headers:
        value = headers["content-length"]
        if not value.isdigit() or len(value) > 12:
            raise BadRequest(400, "Content-Length is not a number of bytes")
        body_length = int(value)
    expect = headers.get("expect")
    if expect is not None and expect.lower() != "100-continue":
        raise BadRequest(417, "the only expectation met is 100-continue")
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = (major, minor) == (1, 1) and "close" not in tokens
    return _Head(method.decode(), target.decode(), (major, minor), headers, length,
                  body_length, keep_alive)


_PORT = re.compile(r"[0-9]{0,5}\Z")
LOCALHOST = "localhost"


def host_problem(host: str, allowed: frozenset[str]) -> str | None:
    """Why a request naming ``host`` in its Host header is not answered, or None.

    Answered: an IP address (v4, or v6 in brackets: a page on a rebound name
    names that name, never an address), ``localhost``, or a name of
    ``allowed`` (normalized by :func:`~hostbroker.settings_http.normal_host_name`);
    any Host when ``allowed`` holds ``*``. A port (up to five digits after
    the one ``:``, or after ``]``) is not looked at, anything else there
    refuses; the name is compared in lower case without one trailing dot."""
    if ANY_HOST in allowed:
        return None
    refused = ("the Host header names neither an IP address, localhost nor a name of "
               "http.allowed.hosts")
    if host.startswith("["):
        literal, bracket, port = host[1:].partition("]")
        if not bracket or (port and not (port[0] == ":" and _PORT.match(port[1:]))):
            return refused
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            return refused
        return None
    name, _, port = host.partition(":")
    if not _PORT.match(port):  # a second colon, or not a number
        return refused
    if name.endswith(".") and _is_ipv4(name[:-1]) or _is_ipv4(name):
        return None
    name = normal_host_name(name)
    if name is None or (name != LOCALHOST and name not in allowed):
        return refused
    return None


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def encode_response(response: Response, max_bytes: int, *, close: bool,
                    head_only: bool = False) -> bytes:
    """The bytes of ``response`` (status line, headers, body), as :func:`response_parts`."""
    return b"".join(response_parts(response, max_bytes, close=close, head_only=head_only))


def response_parts(response: Response, max_bytes: int, *, close: bool,
                   head_only: bool = False) -> tuple[bytes, bytes]:
    """The head (status line, headers) and the body of ``response``, the body
    the page's own object (not copied). One too large, or one whose status or
    headers cannot be sent, becomes a 500 saying so."""
    problem = None
    if not 200 <= response.status <= 599:
        problem = f"the page answered status {response.status}"
    elif len(response.body) > max_bytes:
        problem = (f"the answer ({len(response.body)} bytes) is larger than "
                   f"http.response.max.bytes ({max_bytes})")
    else:
        for name, value in response.headers.items():
            if (not _TOKEN.match(name.encode("ascii", "replace"))
                    or _BAD_VALUE.search(str(value)) or not str(value).isascii()):
                problem = f"the page set a header that cannot be sent ({name[:40]!r})"
                break
        if _BAD_VALUE.search(response.content_type) or not response.content_type.isascii():
            problem = "the page set a content type that cannot be sent"
    if problem is not None:
        response = error_response(500, problem)
    try:
        reason = http.HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Status"
    headers = dict(DEFAULT_HEADERS)
    for name, value in response.headers.items():
        if name.lower() not in _FRAMING:
            headers[_canonical(name, headers)] = str(value)
    lines = [f"HTTP/1.1 {response.status} {reason}",
             f"Content-Type: {response.content_type}",
             f"Content-Length: {len(response.body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    return head, b"" if head_only else response.body


def _canonical(name: str, existing: dict[str, str]) -> str:
    """The key of ``existing`` that names the header ``name`` (so a page overrides a
    default whatever its case), else ``name``."""
    lower = name.lower()
    for key in existing:
        if key.lower() == lower:
            return key
    return name
