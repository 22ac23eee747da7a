"""The encoding a handler keeps between ACL changes (hostbroker/security/store.py,
``AclEncoding``): after any run of changes it writes the very bytes
``encode_acls`` writes for the set, and a document that decodes to the set, its
quotas, its refusal and its digest; strings no binding uses any more are dropped
once they are as many as those in use."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from hostbroker.security.quota import Quota, QuotaSet
from hostbroker.security.store import AclEncoding, decode_published_snapshot, encode_acls


def binding(i: int) -> AclBinding:
    rtype = (ResourceType.TOPIC, ResourceType.GROUP)[i % 2]
    return AclBinding.checked(rtype, f"n{i % 13}-é", (PatternType.LITERAL,
                                                     PatternType.PREFIXED)[i % 3 == 0],
                              Principal.parse(f"User:u{i % 5}"), ("*", "10.0.0.1")[i % 4 == 0],
                              (Operation.READ, Operation.DESCRIBE)[i % 2 == 0],
                              (Permission.ALLOW, Permission.DENY)[i % 7 == 0])


def decoded(encoding: AclEncoding, quotas=QuotaSet(), refused=None, digest=None):
    bindings, got_quotas, got_refused, got_digest = decode_published_snapshot(
        encoding.published(quotas, refused, digest), 10_000, 100)
    return (None if bindings is None else set(bindings)), got_quotas, got_refused, got_digest


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(0, 400), max_size=60), min_size=1, max_size=8))
def test_any_run_of_changes_encodes_as_the_whole_set(sets):
    encoding = AclEncoding()
    for numbers in sets:
        wanted = {binding(i) for i in numbers}
        encoding.update(wanted)
        assert encoding.file_bytes() == encode_acls(wanted)
        assert decoded(encoding)[0] == wanted


def test_quotas_refusal_and_digest_are_in_the_document():
    encoding = AclEncoding({binding(1), binding(2)})
    quotas = QuotaSet({"User:a": Quota(request_rate=5), "<default>": Quota(producer_byte_rate=9)})
    assert decoded(encoding, quotas, None, "abc") == ({binding(1), binding(2)}, quotas, None,
                                                      "abc")
    assert decoded(AclEncoding(), quotas, "acls.json: bad", None) == (None, quotas,
                                                                      "acls.json: bad", None)


def test_a_change_costs_its_own_strings_and_unused_ones_are_dropped_in_time():
    many = {AclBinding.checked(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL,
                               Principal.parse("User:a"), "*", Operation.READ, Permission.ALLOW)
            for i in range(3000)}
    encoding = AclEncoding(many)
    assert len(encoding.table) == 3002  # 3000 names, the principal, the host
    rng = random.Random(5)
    kept = set(rng.sample(sorted(many), 100))
    encoding.update(kept)
    assert encoding.live == 102 and len(encoding.table) == 102  # made again: 2900 unused
    encoding.update(kept | {binding(3)})  # its name and principal are new, its host not
    assert len(encoding.table) == 104 and encoding.live == 104
    assert decoded(encoding)[0] == kept | {binding(3)}
    assert encoding.file_bytes() == encode_acls(kept | {binding(3)})
