"""The standalone access control files: round trips, bounds, and hostile files."""

import json
import os

import pytest

from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from hostbroker.security.quota import DEFAULT_ENTITY, QuotaSet
from hostbroker.security.store import (ACL_FILE, QUOTA_FILE, AccessFileError, read_acls,
                                       read_quotas, write_acls, write_quotas)


def binding(i):
    return AclBinding.checked(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL,
                              Principal("User", "alice"), "*", Operation.READ, Permission.ALLOW)


def test_acls_go_and_come_back_sorted_and_once(tmp_path):
    assert read_acls(str(tmp_path), 10) == []
    write_acls(str(tmp_path), [binding(2), binding(1), binding(2)])
    assert read_acls(str(tmp_path), 10) == [binding(1), binding(2)]
    assert not os.path.exists(tmp_path / (ACL_FILE + ".tmp"))
    with pytest.raises(AccessFileError, match="more than acl.max.bindings"):
        read_acls(str(tmp_path), 1)


def test_quotas_go_and_come_back(tmp_path):
    quotas = QuotaSet().changed("User:alice", {"producer_byte_rate": 1024}) \
        .changed(DEFAULT_ENTITY, {"request_rate": 50})
    write_quotas(str(tmp_path), quotas)
    assert read_quotas(str(tmp_path), 10) == quotas
    assert read_quotas(str(tmp_path / "nowhere"), 10) == QuotaSet()


@pytest.mark.parametrize("content, says", [
    (b"\xff", "not JSON"),
    (b"[]", "version"),
    (b'{"version": 2, "acls": []}', "version"),
    (b'{"version": 1, "acls": [1]}', "ACL 0"),
    (b'{"version": 1, "acls": [{"resourceType": "Topic"}]}', "ACL 0"),
    (b"[" * 3_000 + b"]" * 3_000, "not JSON"),
    (b" " * 10_000, "longer than"),
], ids=["bytes", "list", "version", "entry", "fields", "deep", "long"])
def test_a_bad_acl_file_is_one_line_naming_it(tmp_path, content, says):
    (tmp_path / ACL_FILE).write_bytes(content)
    with pytest.raises(AccessFileError, match=says) as e:
        read_acls(str(tmp_path), 10)
    assert ACL_FILE in str(e.value) and "\n" not in str(e.value)


def test_no_link_is_read_or_written_through(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"precious")
    os.symlink(target, tmp_path / ACL_FILE)
    with pytest.raises(AccessFileError, match=ACL_FILE):
        read_acls(str(tmp_path), 10)
    os.symlink(target, tmp_path / (QUOTA_FILE + ".tmp"))
    write_quotas(str(tmp_path), QuotaSet().changed("User:a", {"request_rate": 1}))
    assert target.read_bytes() == b"precious"
    write_acls(str(tmp_path), [binding(1)])  # replaces the link itself
    assert target.read_bytes() == b"precious" and not os.path.islink(tmp_path / ACL_FILE)


def test_a_bad_quota_file_is_one_line(tmp_path):
    (tmp_path / QUOTA_FILE).write_bytes(
        b'{"version": 1, "quotas": [{"entity": "nobody", "request_rate": 1}]}')
    with pytest.raises(AccessFileError, match="principal"):
        read_quotas(str(tmp_path), 10)
    (tmp_path / QUOTA_FILE).write_bytes(
        b'{"version": 1, "quotas": [{"entity": "User:a", "request_rate": -1}]}')
    with pytest.raises(AccessFileError, match="request_rate"):
        read_quotas(str(tmp_path), 10)


def test_the_published_document_holds_both_and_is_checked():
    from hostbroker.security.store import decode_published, encode_published

    quotas = QuotaSet().changed("User:alice", {"consumer_byte_rate": 99})
    data = encode_published([binding(2), binding(1)], quotas)
    assert decode_published(data, 10, 10) == ([binding(1), binding(2)], quotas)
    with pytest.raises(ValueError, match="acl.max.bindings"):
        decode_published(data, 1, 10)
    with pytest.raises(ValueError, match="quotas"):
        decode_published(b'{"version": 2, "strings": [], "acls": []}', 10, 10)
    with pytest.raises(ValueError, match="version"):
        decode_published(b'{"version": 1, "acls": [], "quotas": []}', 10, 10)
    document = json.loads(data)
    assert len(document["strings"]) == len(set(document["strings"]))  # each string once
    good = document["acls"][0]
    for row in ([*good[:6]], [9, *good[1:]], [*good[:1], -1, *good[2:]],
                [*good[:1], 99, *good[2:]], [*good[:3], "x", *good[4:]],
                [*good[:5], 99, good[6]]):
        document["acls"] = [good, row]
        with pytest.raises(ValueError, match="published ACL 1 is malformed"):
            decode_published(json.dumps(document).encode(), 10, 10)


def test_what_a_broker_publishes_at_start_from_its_files(tmp_path):
    from hostbroker.security.store import decode_published, load_published

    said = []
    quotas = QuotaSet().changed("User:alice", {"request_rate": 7})
    write_acls(str(tmp_path), [binding(1)])
    write_quotas(str(tmp_path), quotas)
    data = load_published(str(tmp_path), 10, 10, said.append)
    assert decode_published(data, 10, 10) == ([binding(1)], quotas) and said == []
    (tmp_path / ACL_FILE).write_bytes(b"{broken")
    data = load_published(str(tmp_path), 10, 10, said.append)
    assert decode_published(data, 10, 10) == (None, quotas)  # refused: super users only
    assert len(said) == 1 and ACL_FILE in said[0] and "super.users" in said[0]
    write_acls(str(tmp_path), [binding(1)])
    (tmp_path / QUOTA_FILE).write_bytes(b"[]")
    data = load_published(str(tmp_path), 10, 10, said.append)
    assert decode_published(data, 10, 10) == ([binding(1)], QuotaSet())
    assert len(said) == 2 and QUOTA_FILE in said[1] and "no quotas" in said[1]
