"""ConsumerConnector has every member its streams, fetchers and group sides
use of it (the protocols they are written against, StreamsOwner and
GroupConnector): a rename in the connector fails here, not in a consumer of
the mode that uses the member."""

from __future__ import annotations

import ast
import inspect
import textwrap

from hostbroker.client.group import ConsumerConnector
from hostbroker.client.group_assignments import GroupConnector
from hostbroker.client.streams import StreamsOwner


def protocol_members(protocol) -> tuple[set[str], set[str]]:
    """(data members, methods) a protocol class lists, its bases' included."""
    data: set[str] = set()
    methods: set[str] = set()
    for cls in protocol.__mro__:
        if not getattr(cls, "_is_protocol", False) or cls.__name__ == "Protocol":
            continue
        data.update(cls.__dict__.get("__annotations__", {}))
        methods.update(n for n, v in vars(cls).items()
                       if callable(v) and not (n.startswith("__") and n.endswith("__")))
    return data, methods


def instance_attributes(cls) -> set[str]:
    """The names ``cls``'s methods assign on ``self``, and its class attributes."""
    names = {n for c in cls.__mro__ if c is not object for n in vars(c)}
    for c in cls.__mro__:
        if c is object:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(c)))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                            and sub.value.id == "self"):
                        names.add(sub.attr)
    return names


def missing(cls) -> set[str]:
    """The members of StreamsOwner and GroupConnector that ``cls`` lacks."""
    have = instance_attributes(cls)
    lacks = set()
    for protocol in (StreamsOwner, GroupConnector):
        data, methods = protocol_members(protocol)
        lacks |= data - have
        lacks |= {n for n in methods if not callable(getattr(cls, n, None))}
    return lacks


def test_the_connector_has_every_member_of_its_protocols():
    assert missing(ConsumerConnector) == set()


class _Partial:
    def __init__(self):
        self._owned = {}

    def _room_made(self) -> None:
        pass


def test_a_member_the_connector_lacked_would_be_named():
    lacks = missing(_Partial)
    assert {"_done", "_idle_wait", "_commit", "group"} <= lacks
    assert "_owned" not in lacks and "_room_made" not in lacks
