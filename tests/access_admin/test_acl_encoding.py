"""The encoding a handler keeps between ACL changes (hostbroker/security/store.py,
``AclEncoding``): after any run of changes it writes the very bytes
``encode_acls`` writes for the set, and a document that decodes to the set, its
quotas, its refusal and its digest; strings no binding uses any more are dropped
once they pass a quarter of those in use or STALE_MAX_BYTES, and then the
document is the very bytes ``encode_published`` makes of the set."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from hostbroker.security.quota import Quota, QuotaSet
from hostbroker.security.store import (AclEncoding, decode_published_snapshot, encode_acls,
                                       encode_published)


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


def long_named(i: int) -> AclBinding:
    return AclBinding.checked(ResourceType.TOPIC, f"{i:06d}-" + "x" * 240, PatternType.LITERAL,
                              Principal.parse("User:a"), "*", Operation.READ, Permission.ALLOW)


def test_one_layout_a_fresh_encoding_is_the_bytes_encode_published_makes():
    quotas = QuotaSet({"User:a": Quota(request_rate=5)})
    for wanted in ({binding(i) for i in range(40)}, set()):
        for refused, digest in ((None, None), ("acls.json: bad", None), (None, "abc")):
            assert AclEncoding(wanted).published(quotas, refused, digest) == \
                encode_published(wanted, quotas, refused, digest)


def test_after_churn_the_document_is_no_longer_than_a_fresh_one_by_much():
    encoding = AclEncoding({long_named(i) for i in range(3000)})
    rng = random.Random(7)
    names = list(range(3000))
    for round_ in range(40):  # each round: 75 bindings of new long names for 75 others
        gone = set(rng.sample(names, 75))
        names = [n for n in names if n not in gone] + list(range(3000 + 75 * round_,
                                                               3075 + 75 * round_))
        wanted = {long_named(i) for i in names}
        encoding.update(wanted)
        fresh = encode_published(wanted, QuotaSet())
        assert encoding.stale <= encoding.live // 4  # (else compacted)
        assert len(encoding.published(QuotaSet())) <= len(fresh) * 5 // 4 + 1024
    encoding.compact()
    assert encoding.published(QuotaSet()) == encode_published(wanted, QuotaSet())


def test_stale_strings_are_bounded_in_bytes_too():
    few = {long_named(i) for i in range(200)}
    encoding = AclEncoding(few)
    encoding.STALE_MAX_BYTES = 4096  # (an instance's own, for the test)
    encoding.update(set(sorted(few)[20:]))  # 20 names of about 250 bytes: under a quarter
    assert encoding.stale == 0 and encoding.stale_bytes == 0  # but past the bytes: compacted
    encoding.update(set(sorted(few)[30:]))
    assert encoding.stale == 10 and 2400 < encoding.stale_bytes < 4096  # kept, for now
    encoding.update(set(sorted(few)[25:]))  # five used again
    assert encoding.stale == 5 and encoding.stale_bytes < 1500
