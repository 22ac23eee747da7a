"""LIST_OFFSET_GROUPS filtered by the authorizer is cut after the filter, not before.

The store's list of groups passes what one message from hb-coordinator carries
(``ring.bytes`` / 16, 4 KiB here); a principal allowed to describe only the few
groups that sort last still gets every one of them, each with the topics it
may describe, and ``truncated`` 0. The broker's own user (DESCRIBE on the
cluster, no filter) gets the store's list cut to one message, ``truncated`` 1,
as before. Clients over TCP are ``User:ANONYMOUS``. A real broker.
"""

from __future__ import annotations

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from tests.access.conftest import AccessBroker

ANON = Principal.parse("User:ANONYMOUS")
BINDINGS = [
    AclBinding.checked(ResourceType.GROUP, "zz-", PatternType.PREFIXED, ANON, "*",
                       Operation.DESCRIBE, Permission.ALLOW),
    AclBinding.checked(ResourceType.GROUP, "zz-2", PatternType.LITERAL, ANON, "*",
                       Operation.DESCRIBE, Permission.DENY),
    AclBinding.checked(ResourceType.TOPIC, "pub", PatternType.LITERAL, ANON, "*",
                       Operation.DESCRIBE, Permission.ALLOW),
]
# 150 groups of about 80 bytes on the wire: about three messages of 4 KiB
HIDDEN = [f"group-{i:03d}-" + "x" * 60 for i in range(150)]
ALLOWED = ["zz-1", "zz-3", "zz-4"]


@pytest.fixture(scope="module")
def broker(users, tmp_path_factory):
    b = AccessBroker(tmp_path_factory.mktemp("offset-groups-pages"), BINDINGS,
                     ring_bytes=65536)
    b.start()
    try:
        with b.broker.client(b.unix) as own:
            for topic in ("pub", "secret"):
                own.create_topic(topic, 1)
                assert own.produce(topic, 0, encode_message_set([b"x"])).error_code == 0
            for group in [*HIDDEN, "zz-1", "zz-2", "zz-3", "zz-4"]:
                own.offset_commit(group, [("pub", 0, 1, None), ("secret", 0, 1, None)])
        yield b
    finally:
        b.finish()


def test_the_few_groups_allowed_that_sort_last_are_all_answered(broker):
    with broker.broker.client(broker.tcp) as anon:
        answer = anon.list_offset_groups(())
    assert answer.error_code == ErrorCode.NONE
    assert [(g.group, g.topics) for g in answer.groups] == [(g, ("pub",)) for g in ALLOWED]
    assert answer.truncated == 0


def test_groups_named_are_filtered_by_topic_after_every_page(broker):
    with broker.broker.client(broker.tcp) as anon:
        answer = anon.list_offset_groups(["zz-4", "zz-1"])
    assert [(g.group, g.topics) for g in answer.groups] == [("zz-1", ("pub",)),
                                                            ("zz-4", ("pub",))]
    assert answer.truncated == 0


def test_unfiltered_the_list_is_cut_to_one_message(broker):
    with broker.broker.client(broker.unix) as own:
        answer = own.list_offset_groups(())
    assert answer.error_code == ErrorCode.NONE and answer.truncated == 1
    names = [g.group for g in answer.groups]
    assert names == HIDDEN[:len(names)] and 20 < len(names) < 60


def test_one_listing_walks_at_most_offsets_list_max_pages(users, tmp_path):
    # the same store, two pages a request at most: the groups allowed, on the
    # fourth page, are not reached, and the answer says it is not whole
    b = AccessBroker(tmp_path, BINDINGS, ring_bytes=65536, offsets_list_max_pages=2)
    b.start()
    try:
        with b.broker.client(b.unix) as own:
            own.create_topic("pub", 1)
            assert own.produce("pub", 0, encode_message_set([b"x"])).error_code == 0
            for group in [*HIDDEN, *ALLOWED]:
                own.offset_commit(group, [("pub", 0, 1, None)])
            # a group name past the group requests' 255 bytes is refused, never stored
            long = "!" + "a" * 5000
            refused = own.offset_commit(long, [("pub", 0, 1, None)], raise_on_error=False)
            assert [p.error_code for p in refused] == [ErrorCode.INVALID_REQUEST]
            own.offset_commit("!" + "a" * 254, [("pub", 0, 1, None)])  # 255 bytes: taken
            assert long not in [g.group for g in own.list_offset_groups([long]).groups]
        asked = b.broker.counter("coordinator", "requests")
        with b.broker.client(b.tcp) as anon:
            answer = anon.list_offset_groups(())
        assert answer.error_code == ErrorCode.NONE
        assert answer.groups == () and answer.truncated == 1
        assert b.broker.counter("coordinator", "requests") - asked == 2  # two pages asked
    finally:
        b.finish()
