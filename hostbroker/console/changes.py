"""The console's changes: create and delete a topic, add partitions, change its config.

Each is a ``POST`` route added with ``admin=True``: hb-http's Router asks the
admin gate (``hostbroker/web/auth.py``: ``http.admin.enable``, the
token, the cross-site checks) before the function here runs, so nothing
here sees a request the gate refused. Each change is the wire request the
CLI sends for it, over hb-http's broker connection
(:meth:`hostbroker.console.api.Console.ask`):

======================================  =======================================
``POST /api/topics``                    CREATE_TOPIC (version 1 with a
                                        ``replication_factor``)
``POST /api/topics/{topic}/delete``     DELETE_TOPIC
``POST /api/topics/{topic}/partitions`` ALTER_TOPIC ``partitions``
``POST /api/topics/{topic}/config``     ALTER_TOPIC ``set_configs`` /
                                        ``delete_configs``
======================================  =======================================

Bodies are JSON objects of the fields each route names (``FIELDS``); a field
the route does not take (a typo such as ``partitons``), a field of the wrong
type, a bad topic name, a number out of range, or a config key or value that
is not UTF-8 text or is longer than the wire carries (a key at most
``CONFIG_KEY_MAX`` bytes, a value ``CONFIG_VALUE_MAX``) is a 400 naming it,
before any request is sent. ``partitions`` of a create is 1 when the body does
not have it. What
the broker refuses comes back with its error code's name and message
(404 for an unknown topic, 409 for one that exists, 400 for what is
invalid, 501 for a request the broker does not serve).
"""

from __future__ import annotations

from hostbroker.console.answers import answer, broker_refused, topic_name
from hostbroker.errors import ErrorCode
from hostbroker.web.router import HttpError, document

INT32_MAX = 2**31 - 1
CONFIG_KEY_MAX = 255  # bytes: the broker's own config keys are short
CONFIG_VALUE_MAX = 2**15 - 1  # bytes: a wire string (int16 length)
# the fields each change's body may hold
FIELDS = {"create": ("topic", "partitions", "config", "replication_factor"),
          "delete": (), "partitions": ("partitions",), "config": ("set", "delete")}


def add_routes(router, console) -> None:
    router.add("POST", "/api/topics", lambda r: create(console, r), admin=True)
    router.add("POST", "/api/topics/{topic}/delete", lambda r: delete(console, r), admin=True)
    router.add("POST", "/api/topics/{topic}/partitions",
               lambda r: add_partitions(console, r), admin=True)
    router.add("POST", "/api/topics/{topic}/config", lambda r: alter_config(console, r),
               admin=True)


def body_of(request, kind: str) -> dict:
    """The body as a JSON object (the router's one parser: an empty body is
    ``{}``) holding only the fields ``FIELDS[kind]`` names; 400 otherwise."""
    found = document(request)
    for field in found:
        if field not in FIELDS[kind]:
            raise HttpError(400, f"unknown field {_shown(field)}: this change takes "
                                 + (", ".join(FIELDS[kind]) or "no fields"))
    return found


def _shown(text: str) -> str:
    """``text`` as an error message may quote it: short, one line."""
    return ascii(text[:60]) if len(text) <= 60 else ascii(text[:60]) + "..."


def config_text(text, what: str, most: int) -> str:
    """A config key or value: UTF-8 text of 1 (a key) or 0 (a value) to ``most``
    bytes; 400 naming ``what`` otherwise."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise HttpError(400, f"{what} {_shown(text)} is not UTF-8 text") from None
    if size > most:
        raise HttpError(400, f"{what} {_shown(text)} is longer than {most} bytes")
    return text


def whole(body: dict, key: str, default=None, low: int = 1, high: int = INT32_MAX) -> int:
    value = body.get(key, default)
    if value is None:
        raise HttpError(400, f"{key} is required")
    if type(value) is not int or not low <= value <= high:
        raise HttpError(400, f"{key} must be a whole number from {low} to {high}")
    return value


def _config_pairs(value, key: str) -> tuple[tuple[str, str], ...]:
    """``{"retention.bytes": "1024", ...}`` as pairs of strings (numbers become text)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise HttpError(400, f"{key} must be an object of config keys and values")
    pairs = []
    for k, v in value.items():
        if not k:
            raise HttpError(400, f"{key}: a config key is empty")
        config_text(k, f"{key}: config key", CONFIG_KEY_MAX)
        if type(v) is int:
            v = str(v)
        if not isinstance(v, str):
            raise HttpError(400, f"{key}: {_shown(k)} must have a string or whole-number value")
        config_text(v, f"{key}: the value of", CONFIG_VALUE_MAX)
        pairs.append((k, v))
    return tuple(pairs)


def _authorized(console, request, what: str, *checks) -> None:
    """403 unless ``http.admin.principal`` may make the change: one of
    ``checks`` (operation, resource type, name) allows it (docs/security.md)."""
    from hostbroker.security.acl import Operation, ResourceType

    context = console.context
    if not any(context.admin_may(Operation[op], ResourceType[rtype], name, request.peer)
               for op, rtype, name in checks):
        op, rtype, name = checks[-1]
        raise HttpError(403, f"{what}: {console.config['http.admin.principal']} may not "
                             f"({op.title()} on {rtype.title()} {name})")


def _admin(console, what: str, request_or_call):
    """Send a change; its refusal as the HTTP error; the metadata read again after."""
    response = console.ask(what, request_or_call)
    console.forget_metadata()
    if response.error_code != ErrorCode.NONE:
        raise broker_refused(response.error_code, response.error_message, what)
    return response


def create(console, request):
    body = body_of(request, "create")
    name = topic_name(body.get("topic"))
    partitions = whole(body, "partitions", 1)
    configs = _config_pairs(body.get("config"), "config")
    factor = body.get("replication_factor")
    if factor is not None:
        from hostbroker.replication import MAX_REPLICAS

        if factor != -1:
            factor = whole(body, "replication_factor", None, 1, MAX_REPLICAS)
        elif type(factor) is not int:
            raise HttpError(400, "replication_factor must be a whole number")
    _authorized(console, request, f"creating topic {name}",
                ("CREATE", "CLUSTER", "kafka-cluster"), ("CREATE", "TOPIC", name))
    _admin(console, f"creating topic {name}", lambda c: c.create_topic(
        name, partitions, configs, replication_factor=factor, raise_on_error=False))
    return answer({"created": name, "partitions": partitions, "config": dict(configs)}, 201)


def delete(console, request):
    name = topic_name(request.params["topic"])
    body_of(request, "delete")
    _authorized(console, request, f"deleting topic {name}", ("DELETE", "TOPIC", name))
    _admin(console, f"deleting topic {name}",
           lambda c: c.delete_topic(name, raise_on_error=False))
    return answer({"deleted": name})


def _alter(console, what: str, topic: str, **fields):
    """ALTER_TOPIC, as ``topics alter`` sends it."""
    return _admin(console, what, lambda c: c.alter_topic(topic, raise_on_error=False, **fields))


def add_partitions(console, request):
    name = topic_name(request.params["topic"])
    body = body_of(request, "partitions")
    partitions = whole(body, "partitions")
    _authorized(console, request, f"adding partitions to topic {name}", ("ALTER", "TOPIC", name))
    _alter(console, f"adding partitions to topic {name}", name, partitions=partitions)
    return answer({"topic": name, "partitions": partitions})


def alter_config(console, request):
    name = topic_name(request.params["topic"])
    body = body_of(request, "config")
    settings = _config_pairs(body.get("set"), "set")
    removed = body.get("delete") or []
    if not isinstance(removed, list) or not all(isinstance(k, str) and k for k in removed):
        raise HttpError(400, "delete must be a list of config keys")
    for key in removed:
        config_text(key, "delete: config key", CONFIG_KEY_MAX)
    if not settings and not removed:
        raise HttpError(400, "nothing to change: give set or delete")
    _authorized(console, request, f"changing the config of topic {name}",
                ("ALTER", "TOPIC", name))
    _alter(console, f"changing the config of topic {name}", name,
           set_configs=dict(settings), delete_configs=tuple(removed))
    return answer({"topic": name, "set": dict(settings), "deleted": removed})


def topic_overrides(console, topic: str) -> dict[str, str] | None:
    """The topic's config overrides (DESCRIBE_TOPIC_CONFIGS, as ``topics describe``
    shows them); None where the broker does not say (an older broker, or the
    topic's config could not be read)."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import HostbrokerError

    try:
        found = console.context.broker_client().describe_topic_configs([topic])
    except (BrokerError, HostbrokerError, OSError):
        console.context.drop_client()
        return None
    for entry in found:
        if entry.topic == topic and entry.error_code == ErrorCode.NONE:
            return {c.key: c.value for c in entry.configs}
    return None
