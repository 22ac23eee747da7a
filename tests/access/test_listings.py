"""What a principal may not describe stays hidden in every listing and every
METADATA version: LIST_OFFSET_GROUPS leaves out a group's topics it may not
describe (and cuts the list after that filter), METADATA v1 and v2 answer a
refused named topic in its place (33) as v0 does and leave it out of a
listing, DESCRIBE_TOPIC_CONFIGS of every topic shows only those it may
describe. Clients over TCP are ``User:ANONYMOUS``; the broker's own user
over the Unix socket may do everything."""

from __future__ import annotations

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from tests.access.conftest import AccessBroker

ANON = Principal.parse("User:ANONYMOUS")
BINDINGS = [
    AclBinding.checked(ResourceType.GROUP, "g", PatternType.LITERAL, ANON, "*",
                       Operation.DESCRIBE, Permission.ALLOW),
    AclBinding.checked(ResourceType.TOPIC, "pub", PatternType.LITERAL, ANON, "*",
                       Operation.READ, Permission.ALLOW),
]


@pytest.fixture(scope="module")
def broker(users, tmp_path_factory):
    b = AccessBroker(tmp_path_factory.mktemp("listings"), BINDINGS)
    b.start()
    try:
        with b.broker.client(b.unix) as own:
            for topic in ("pub", "secret-payroll"):
                own.create_topic(topic, 1)
                assert own.produce(topic, 0, encode_message_set([b"x"])).error_code == 0
            own.offset_commit("g", [("secret-payroll", 0, 1, None), ("pub", 0, 1, None)])
            own.offset_commit("h", [("pub", 0, 1, None)])
        yield b
    finally:
        b.finish()


def test_list_offset_groups_hides_the_topics_it_may_not_describe(broker):
    with broker.broker.client(broker.tcp) as anon:
        answer = anon.list_offset_groups(())
        assert answer.error_code == ErrorCode.NONE and answer.truncated == 0
        assert [(g.group, g.topics) for g in answer.groups] == [("g", ("pub",))]
        named = anon.list_offset_groups(("g",))
        assert [(g.group, g.topics) for g in named.groups] == [("g", ("pub",))]
    with broker.broker.client(broker.unix) as own:  # (the filter is the principal's)
        assert [(g.group, g.topics) for g in own.list_offset_groups(()).groups] == \
            [("g", ("pub", "secret-payroll")), ("h", ("pub",))]


@pytest.mark.parametrize("version", [1, 2])
def test_metadata_v1_and_v2_answer_per_topic(broker, version):
    with broker.broker.client(broker.tcp) as anon:
        ask = anon.metadata_v1 if version == 1 else anon.metadata_v2
        named = ask(["pub", "secret-payroll"])
        assert [(t.topic, t.error_code, len(t.partitions)) for t in named.topics] == \
            [("pub", ErrorCode.NONE, 1),
             ("secret-payroll", ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0)]
        assert [t.topic for t in ask([]).topics] == ["pub"]  # a listing: filtered


def test_describe_topic_configs_of_every_topic_is_filtered(broker):
    with broker.broker.client(broker.tcp) as anon:
        assert [t.topic for t in anon.describe_topic_configs(())] == ["pub"]
