"""What every console route uses to read its request and build its answer.

Owns: the JSON answer, the HTTP status a broker's error code becomes, and
the readers of the query parameters the pages share (paging, filters, a
group id, a topic name), each a ``400`` naming the parameter when it is not
what it must be. Used by :mod:`.api`, :mod:`.changes` and
:mod:`.group_page`; imports nothing of them.
"""

from __future__ import annotations

from hostbroker.errors import ErrorCode
from hostbroker.web.router import HttpError, Response, json_response

DEFAULT_PAGE = 100  # rows a page holds when the request does not say
FILTER_MAX = 249  # a topic name's longest


def answer(obj, status: int = 200) -> Response:
    """A JSON answer (the server adds the headers every answer carries)."""
    return json_response(obj, status)


def error_name(code) -> str:
    return getattr(code, "name", f"error code {code}")


_STATUS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.TOPIC_ALREADY_EXISTS: 409,
    ErrorCode.INVALID_TOPIC: 400,
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.INVALID_CONFIG: 400,
    ErrorCode.INVALID_REPLICATION_FACTOR: 400,
    ErrorCode.UNSUPPORTED_VERSION: 501,
}


def broker_refused(code, message: str | None, what: str) -> HttpError:
    """The HTTP error for a broker's error code answering ``what``."""
    name = error_name(code)
    status = _STATUS.get(code, 400 if name.startswith("INVALID_") else 502)
    if status == 501:
        return HttpError(501, f"{what}: this broker does not serve it (UNSUPPORTED_VERSION)")
    return HttpError(status, f"{what}: {name}" + (f": {message}" if message else ""))


def whole_parameter(request, name: str, default: int | None) -> int | None:
    """The query's ``name`` as a whole number 0..; ``default`` when absent or
    empty; 400 naming it otherwise."""
    raw = request.query.get(name, "")
    if raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        raise HttpError(400, f"{name} must be a whole number, not {raw[:40]!r}")
    return int(raw)


def page_of(request, page_max: int) -> tuple[int, int, str]:
    """(offset, limit, filter) of a listing request: offset 0.., limit 1..``page_max``
    (more is cut to it); 400 naming the parameter otherwise."""
    query = request.query
    offset = whole_parameter(request, "offset", 0)
    limit = whole_parameter(request, "limit", min(DEFAULT_PAGE, page_max))
    if limit < 1:
        raise HttpError(400, "limit must be at least 1")
    text = query.get("filter", "")
    if len(text) > FILTER_MAX:
        raise HttpError(400, f"filter is longer than {FILTER_MAX} characters")
    return offset, min(limit, page_max), text


def group_parameter(request, most: int) -> str:
    """The ``group`` of the query: any 1 to ``most`` UTF-8 bytes; 400 otherwise."""
    name = request.query.get("group", "")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        size = 0
    if not 1 <= size <= most:
        raise HttpError(400, f"group must be a group id of 1 to {most} UTF-8 bytes")
    return name


def topic_name(name) -> str:
    from hostbroker.errors import InvalidTopicError
    from hostbroker.log.segments import validate_topic_name

    if not isinstance(name, str):
        raise HttpError(400, "topic must be a string")
    try:
        validate_topic_name(name)
    except InvalidTopicError as exc:
        raise HttpError(400, str(exc)[:FILTER_MAX + 80]) from None
    return name
