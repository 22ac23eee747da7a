"""The HTTP listener's routes: which handler answers a request, decided in one table.

Owns: :class:`Request` and :class:`Response` (the only things a handler sees
and returns), the helpers that build answers, and :class:`Router`, the table
of ``(method, path) -> handler``. The table is filled once, by
:func:`hostbroker.workers.http.routes.build_router`; one path has one route,
and :meth:`Router.add` refuses a second. Nothing here touches a socket or the
broker: :mod:`hostbroker.web.server` hands it whole requests.

Paths are matched whole, segment by segment, never by prefix and never
through the file system:

- a literal segment matches itself;
- ``{name}`` matches one non-empty segment, percent-decoded, given to the
  handler as ``request.params["name"]``;
- a last segment ``*`` matches the rest of the path (one or more segments),
  given as ``request.params["*"]``.

A literal route wins over a pattern that also matches. A path holding an
empty segment, ``.`` or ``..`` (raw or percent-encoded), a NUL, a
backslash or bytes that are not UTF-8 is answered 400 before any route is
looked at, so ``/static/../etc/passwd`` reaches no handler.

Answers: 404 (no route), 405 with ``Allow`` (the path has routes, not for
this method), the admin gate's answer (403/401, :mod:`.auth`) for a route
added with ``admin=True``, else the handler's. ``HEAD`` is answered as
``GET`` (the server leaves the body out). A handler that raises answers 500
with one line naming the exception's type (its text may carry what a client
must not see); the worker logs it.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

METHODS = ("GET", "HEAD", "POST")  # the methods a route may be added for


@dataclasses.dataclass(frozen=True)
class Request:
    """One whole request. ``headers`` keys are lower-case (a header sent twice
    is refused by the server, so each has one value); ``query`` is the decoded
    query string (a name given twice is refused). ``params`` holds what the
    route's ``{name}`` and ``*`` segments matched."""
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    peer: str
    params: dict[str, str] = dataclasses.field(default_factory=dict)

    def json(self) -> dict:
        """The body as a JSON object (see :func:`document`)."""
        return document(self)


def document(request: Request) -> dict:
    """The body of ``request`` as a JSON object, the one parser of request
    bodies: an empty (or blank) body is ``{}``; a body that is not UTF-8 JSON,
    nests too deep to decode, or is not an object is :class:`HttpError` 400."""
    if not request.body.strip():
        return {}
    try:
        found = json.loads(request.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HttpError(400, f"the body is not JSON: {str(exc)[:120]}") from None
    if not isinstance(found, dict):
        raise HttpError(400, "the body must be a JSON object")
    return found


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


class HttpError(Exception):
    """Raised by a handler (or a helper it calls) to answer ``status`` with the
    one-line ``message`` as ``{"error": message}``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


Handler = Callable[[Request], Response]
# The admin gate: None to let the request through, or the answer refusing it.
Gate = Callable[[Request], "Response | None"]

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode()
    return Response(status, JSON, body, dict(headers or {}))


def text_response(text: str, status: int = 200, content_type: str = TEXT,
                  headers: dict[str, str] | None = None) -> Response:
    return Response(status, content_type, text.encode("utf-8"), dict(headers or {}))


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """``{"error": message}`` with ``status``; ``message`` is one line."""
    return json_response({"error": " ".join(message.split())}, status, headers)


@dataclasses.dataclass(frozen=True)
class _Route:
    segments: tuple[str, ...]
    handler: Handler
    admin: bool


def split_path(path: str) -> tuple[str, ...]:
    """The decoded segments of an absolute path; ValueError naming what is wrong
    (see the module doc). ``/`` is the empty tuple."""
    if not path.startswith("/"):
        raise ValueError("the path must start with /")
    if path == "/":
        return ()
    segments = []
    for raw in path[1:].split("/"):
        try:
            segment = urllib.parse.unquote(raw, errors="strict")
        except UnicodeDecodeError:
            raise ValueError("the path is not UTF-8") from None
        if segment in ("", ".", ".."):
            raise ValueError("the path holds an empty, . or .. segment")
        if any(c in segment for c in "/\\\0") or not segment.isprintable():
            raise ValueError("the path holds a /, \\ or control character in a segment")
        segments.append(segment)
    return tuple(segments)


def parse_query(query: str) -> dict[str, str]:
    """The query string as a dict; ValueError for a name given twice or bytes
    that are not UTF-8."""
    out: dict[str, str] = {}
    if not query:
        return out
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise ValueError("the query string is not UTF-8 name=value pairs") from None
    for name, value in pairs:
        if name in out:
            raise ValueError(f"the query names {name!r} twice")
        out[name] = value
    return out


class Router:
    """The route table (see the module doc). ``gate`` answers for every route
    added with ``admin=True`` before its handler runs."""

    def __init__(self, gate: Gate | None = None):
        self.gate = gate
        # called with (request, exception) when a handler raises (the worker logs it)
        self.on_error: Callable[[Request, BaseException], None] | None = None
        self._routes: dict[str, list[_Route]] = {}  # method -> routes

    def add(self, method: str, path: str, handler: Handler, *, admin: bool = False) -> None:
        """Route ``method path`` to ``handler``; ValueError for a method we do not
        serve, a malformed pattern, or a path this method already routes."""
        if method not in METHODS or method == "HEAD":
            raise ValueError(f"{method}: routes are added for GET or POST (HEAD follows GET)")
        if path == "/":
            segments: tuple[str, ...] = ()
        else:
            segments = tuple(path[1:].split("/")) if path.startswith("/") else ("",)
        if any(s == "" for s in segments) or "*" in segments[:-1]:
            raise ValueError(f"{path}: not a route pattern")
        for route in self._routes.get(method, ()):
            if _same_shape(route.segments, segments):
                raise ValueError(f"{method} {path}: already routed")
        if admin and self.gate is None:
            raise ValueError(f"{method} {path}: an admin route needs the router's gate")
        self._routes.setdefault(method, []).append(_Route(segments, handler, admin))

    def routes(self) -> list[tuple[str, str, bool]]:
        """(method, pattern, admin) of every route, in the order added."""
        return [(m, "/" + "/".join(r.segments), r.admin)
                for m, routes in self._routes.items() for r in routes]

    def _match(self, method: str, segments: tuple[str, ...]):
        best = None
        for route in self._routes.get(method, ()):
            params = _match(route.segments, segments)
            if params is not None and (best is None or _literals(route) > _literals(best[0])):
                best = (route, params)
        return best

    def dispatch(self, request: Request) -> Response:
        """The answer to ``request`` (never raises for what a client sent)."""
        try:
            segments = split_path(request.path)
        except ValueError as e:
            return error_response(400, str(e))
        method = "GET" if request.method == "HEAD" else request.method
        found = self._match(method, segments)
        if found is None:
            allowed = [m for m in ("GET", "POST") if self._match(m, segments) is not None]
            if allowed:
                if "GET" in allowed:
                    allowed.insert(1, "HEAD")
                return error_response(405, f"{request.method} is not allowed here",
                                      {"Allow": ", ".join(allowed)})
            if request.method not in METHODS:
                return error_response(501, f"{request.method[:32]} is not a method served here")
            return error_response(404, "no such page")
        route, params = found
        request = dataclasses.replace(request, params=params)
        if route.admin:
            refused = self.gate(request)
            if refused is not None:
                return refused
        try:
            return route.handler(request)
        except HttpError as e:
            return error_response(e.status, e.message)
        except Exception as e:  # noqa: BLE001 - one bad page must not end the listener
            if self.on_error is not None:
                self.on_error(request, e)
            return error_response(500, f"the page failed ({type(e).__name__}); "
                                       "the broker's log says why")


def _match(pattern: tuple[str, ...], segments: tuple[str, ...]) -> dict[str, str] | None:
    params: dict[str, str] = {}
    if pattern and pattern[-1] == "*":
        if len(segments) < len(pattern):
            return None
        params["*"] = "/".join(segments[len(pattern) - 1:])
        pattern, segments = pattern[:-1], segments[:len(pattern) - 1]
    if len(pattern) != len(segments):
        return None
    for want, got in zip(pattern, segments):
        if want.startswith("{") and want.endswith("}"):
            params[want[1:-1]] = got
        elif want != got:
            return None
    return params


def _literals(route: _Route) -> int:
    return sum(1 for s in route.segments if not (s.startswith("{") or s == "*"))


def _same_shape(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Two patterns that would match the same paths (``{x}`` is ``{y}``)."""
    def shape(segments):
        return tuple("{}" if s.startswith("{") and s.endswith("}") else s for s in segments)
    return shape(a) == shape(b)
