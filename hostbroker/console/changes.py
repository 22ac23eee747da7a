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

Bodies are JSON objects; a field of the wrong type, a bad topic name or a
number out of range is a 400 naming it, before any request is sent. What
the broker refuses comes back with its error code's name and message
(404 for an unknown topic, 409 for one that exists, 400 for what is
invalid, 501 for a request the broker does not serve).
"""

from __future__ import annotations


from hostbroker.console.api import answer, broker_refused, topic_name
from hostbroker.errors import ErrorCode
from hostbroker.web.router import HttpError, document

INT32_MAX = 2**31 - 1


def add_routes(router, console) -> None:
    router.add("POST", "/api/topics", lambda r: create(console, r), admin=True)
    router.add("POST", "/api/topics/{topic}/delete", lambda r: delete(console, r), admin=True)
    router.add("POST", "/api/topics/{topic}/partitions",
               lambda r: add_partitions(console, r), admin=True)
    router.add("POST", "/api/topics/{topic}/config", lambda r: alter_config(console, r),
               admin=True)


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
        if type(v) is int:
            v = str(v)
        if not isinstance(v, str) or not k:
            raise HttpError(400, f"{key}: {str(k)[:80]} must have a string or whole-number value")
        pairs.append((k, v))
    return tuple(pairs)


def _admin(console, what: str, request_or_call):
    """Send a change; its refusal as the HTTP error; the metadata read again after."""
    response = console.ask(what, request_or_call)
    console.forget_metadata()
    if response.error_code != ErrorCode.NONE:
        raise broker_refused(response.error_code, response.error_message, what)
    return response


def create(console, request):
    body = document(request)
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
    _admin(console, f"creating topic {name}", lambda c: c.create_topic(
        name, partitions, configs, replication_factor=factor, raise_on_error=False))
    return answer({"created": name, "partitions": partitions, "config": dict(configs)}, 201)


def delete(console, request):
    name = topic_name(request.params["topic"])
    _admin(console, f"deleting topic {name}",
           lambda c: c.delete_topic(name, raise_on_error=False))
    return answer({"deleted": name})


def _alter(console, what: str, topic: str, **fields):
    """ALTER_TOPIC, as ``topics alter`` sends it."""
    return _admin(console, what, lambda c: c.alter_topic(topic, raise_on_error=False, **fields))


def add_partitions(console, request):
    name = topic_name(request.params["topic"])
    body = document(request)
    partitions = whole(body, "partitions")
    _alter(console, f"adding partitions to topic {name}", name, partitions=partitions)
    return answer({"topic": name, "partitions": partitions})


def alter_config(console, request):
    name = topic_name(request.params["topic"])
    body = document(request)
    settings = _config_pairs(body.get("set"), "set")
    removed = body.get("delete") or []
    if not isinstance(removed, list) or not all(isinstance(k, str) and k for k in removed):
        raise HttpError(400, "delete must be a list of config keys")
    if not settings and not removed:
        raise HttpError(400, "nothing to change: give set or delete")
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
