"""What the new-user commands take from the broker, when another client wrote it.

``groups describe`` without ``--topic`` asks the topics of the group's members'
subscriptions (DESCRIBE_GROUP): any local client can join a group subscribing
to names no topic has, or could have. The command shows what exists, says in
one line what does not, and passes no illegal name on to the broker.
"""

from __future__ import annotations

import json

import pytest

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.errors import ErrorCode
from tests.integration.broker import Broker
from tests.integration.cli import hostbroker, lines
from tests.integration.wire_helpers import stop_or_kill

HOSTILE_NAMES = ("ghost", "../../etc/passwd", "a/b", "spaces in it", "\u00e9\u00e8", "\x00", "..")


@pytest.fixture
def broker(tmp_path):
    started = Broker(tmp_path).start()
    yield started
    stop_or_kill(started)


def test_describe_of_a_group_subscribed_to_hostile_names(broker):
    with broker.client() as client:
        client.create_topic("page_views", 2)
    member = CoordinatorClient([broker.unix], timeout=30, client_id="hostile")
    try:
        subscription = {"page_views": 1, **{name: 1 for name in HOSTILE_NAMES}}
        joined = member.join_group("mixed", "", subscription, session_timeout_ms=30000,
                                   rebalance_timeout_ms=5000)
        assert joined.error_code == ErrorCode.NONE, joined
        code, _ = member.sync_group("mixed", joined.generation, joined.member_id)
        assert code == ErrorCode.NONE
        shown = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "mixed")
        as_json = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group",
                             "mixed", "--json")
    finally:
        member.leave_group("mixed", joined.member_id)
        member.close()
    assert shown.returncode == 0, shown.stderr
    rows = [line.split()[:2] for line in lines(shown) if line.startswith("page_views")]
    assert rows == [["page_views", "0"], ["page_views", "1"]]
    # The one name a topic could have is named as missing; the others never reach the broker.
    assert shown.stderr.decode() == ("hostbroker groups describe: no topic ghost on the broker "
                                     "(subscribed to by group mixed)\n")
    assert as_json.returncode == 0
    document = json.loads(as_json.stdout)
    assert {p["topic"] for p in document["partitions"]} == {"page_views"}
    with broker.client() as client:
        (ghost,) = client.metadata(["ghost"]).topics
    assert ghost.partitions == ()  # describing created nothing
