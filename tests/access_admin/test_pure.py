"""The pure parts of the admin requests: the index DELETE_ACLS and
DESCRIBE_ACLS look bindings up by (it finds exactly what a scan of every
binding finds), the wire entries as the model's, the messages an answer
drops to stay within its bound, and the store's refusals of a file its next
read would refuse."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls as w
from hostbroker.security.acl import AclBinding, AclFilter, Operation, PatternType, Permission
from hostbroker.security.acl import ResourceType
from hostbroker.security.admin_wire import binding_of, entity_named, entry_of, filter_of
from hostbroker.security.principals import Principal
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import (
    ACL_FILE, QUOTA_FILE, AccessFileError, decode_published_document, decode_quotas,
    encode_published, encode_quotas, read_quotas, write_acls, write_quotas)
from hostbroker.security.acl import BindingIndex
from hostbroker.security.admin_wire import fit_messages

NAMES = ["a", "ab", "abc", "b", "*", "orders", "ord"]
PRINCIPALS = [Principal("User", n) for n in ("alice", "bob", "*")]
HOSTS = ["*", "localhost", "10.0.0.1"]
TOPIC_OPS = [Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL]


@st.composite
def bindings(draw):
    pattern = draw(st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]))
    name = draw(st.sampled_from([n for n in NAMES if not (pattern is PatternType.PREFIXED
                                                         and n == "*")]))
    return AclBinding.checked(draw(st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP])),
                              name, pattern, draw(st.sampled_from(PRINCIPALS)),
                              draw(st.sampled_from(HOSTS)),
                              draw(st.sampled_from([Operation.READ, Operation.DESCRIBE,
                                                    Operation.ALL])),
                              draw(st.sampled_from([Permission.ALLOW, Permission.DENY])))


filters = st.builds(
    AclFilter,
    resource_type=st.sampled_from([None, ResourceType.TOPIC, ResourceType.GROUP]),
    name=st.sampled_from([None, *NAMES, "abcd", "orders-eu"]),
    pattern=st.sampled_from(list(PatternType)),
    principal=st.sampled_from([None, *PRINCIPALS]),
    host=st.sampled_from([None, *HOSTS]),
    operation=st.sampled_from([Operation.ANY, *TOPIC_OPS]),
    permission=st.sampled_from(list(Permission)))


@settings(max_examples=300, deadline=None)
@given(st.sets(bindings(), max_size=40), filters)
def test_the_index_finds_what_a_scan_finds(held, f):
    index = BindingIndex(held)
    assert sorted(b for b in index.candidates(f) if f.matches(b)) == \
        sorted(b for b in held if f.matches(b))


def test_wire_entries_and_the_model():
    binding = AclBinding.checked(ResourceType.TOPIC, "orders", PatternType.PREFIXED,
                                 Principal("User", "alice"), "::1", Operation.WRITE,
                                 Permission.DENY)
    assert binding_of(entry_of(binding)) == binding
    assert filter_of(w.AclFilterEntry()) == AclFilter()
    assert filter_of(w.AclFilterEntry(host="0:0::1")).host == "::1"
    with pytest.raises(ValueError, match="1 to 255 bytes"):
        filter_of(w.AclFilterEntry(resource_name=""))
    with pytest.raises(ValueError, match="TYPE:NAME"):
        filter_of(w.AclFilterEntry(principal="nobody"))
    assert entity_named("<default>") == "<default>"
    with pytest.raises(ValueError, match="quota entity"):
        entity_named("default")


def test_an_answer_of_many_messages_drops_those_past_its_bound():
    results = [w.EntryResult(ErrorCode.INVALID_REQUEST, "m" * 100)] * 10 \
        + [w.EntryResult(ErrorCode.NONE)]
    fitted = fit_messages(results, 4 * 11 + 350)
    assert [r.error_message is not None for r in fitted] == [True] * 3 + [False] * 8
    assert [r.error_code for r in fitted] == [r.error_code for r in results]


def _binding(name: str, principal: str = "alice") -> AclBinding:
    return AclBinding.checked(ResourceType.TOPIC, name, PatternType.LITERAL,
                              Principal("User", principal), "*", Operation.READ,
                              Permission.ALLOW)


def test_the_store_writes_nothing_its_next_read_refuses(tmp_path):
    d = str(tmp_path)
    write_acls(d, [_binding("a"), _binding("b")], max_bindings=2)
    before = (tmp_path / ACL_FILE).read_bytes()
    with pytest.raises(AccessFileError, match=r"3 entries would be more than acl.max.bindings"):
        write_acls(d, [_binding("a"), _binding("b"), _binding("c")], max_bindings=2)
    # names escaped in JSON take more than 512 bytes each
    wide = [_binding("\U0001F600" * 63 + str(i), "\U0001F600" * 63) for i in range(2)]
    with pytest.raises(AccessFileError, match="bytes would be more than"):
        write_acls(d, wide, max_bindings=2)
    assert (tmp_path / ACL_FILE).read_bytes() == before
    quotas = QuotaSet().changed("User:a", {"request_rate": 1}) \
        .changed("<default>", {"request_rate": 2})
    write_quotas(d, quotas, max_entities=1)  # the default besides the one principal
    assert read_quotas(d, 1) == quotas
    with pytest.raises(AccessFileError, match="quota.max.principals"):
        write_quotas(d, quotas.changed("User:b", {"request_rate": 3}), max_entities=1)
    assert read_quotas(d, 1) == quotas
    assert not [n for n in os.listdir(d) if n not in (ACL_FILE, QUOTA_FILE)]


def test_quota_max_principals_counts_principals_besides_the_default():
    two = QuotaSet().changed("User:a", {"request_rate": 1}).changed("User:b",
                                                                     {"request_rate": 1})
    with pytest.raises(ValueError, match="2 principals with quotas, more than"):
        decode_quotas(encode_quotas(two), 1)
    with_default = two.changed("<default>", {"request_rate": 1})
    assert decode_quotas(encode_quotas(with_default), 2) == with_default


def test_a_published_refusal_says_why():
    data = encode_published([], QuotaSet(), refused="acls.json: not JSON in UTF-8")
    assert decode_published_document(data, 10, 10) == (None, QuotaSet(),
                                                       "acls.json: not JSON in UTF-8")
    assert decode_published_document(encode_published([_binding("a")], QuotaSet()), 10, 10) \
        == ([_binding("a")], QuotaSet(), None)


def test_a_match_filter_looks_at_the_prefix_lengths_held_only():
    def binding(name, pattern=PatternType.LITERAL):
        return AclBinding.checked(ResourceType.TOPIC, name, pattern, Principal("User", "a"), "*",
                                  Operation.READ, Permission.ALLOW)
    long = "x" * 255
    held = {binding(long), binding("xx", PatternType.PREFIXED), binding("x" * 9)}
    index = BindingIndex(held)
    f = AclFilter(ResourceType.TOPIC, long, PatternType.MATCH)
    assert index.names(f) == ["*", "xx", long]  # not 255 prefixes
    assert set(index.candidates(f)) == {binding(long), binding("xx", PatternType.PREFIXED)}
    assert BindingIndex(set()).names(f) == ["*", long]
