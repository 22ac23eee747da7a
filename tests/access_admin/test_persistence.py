"""What a standalone broker keeps of its ACLs and quotas: the files in its
first log dir are the truth, published to every process at start; a file that
cannot be read refuses every change of it, naming it, until it is mended or
removed; a file is never written through a symbolic link."""

from __future__ import annotations

import os

from hostbroker.errors import ErrorCode
from hostbroker.security.acl import binding_from_json
from hostbroker.security.store import write_acls
from tests.access_admin.support import (
    acl_file, alter, create, describe, described, entry, file_acls, kill_a_publisher,
    published_now, quota_file, quotas_of)

OK = (ErrorCode.NONE, None)


def test_acls_and_quotas_outlive_a_restart(make_broker):
    broker = make_broker()
    with broker.client() as c:
        assert create(c, entry("orders"), entry("logs", "User:bob")) == [OK, OK]
        assert alter(c, ("User:bob", {"consumer_byte_rate": 77})) == [OK]
    written = file_acls(broker)
    broker.stop()
    broker.start()
    _, bindings, quotas = published_now(broker)
    assert sorted(b.name for b in bindings) == ["logs", "orders"]
    assert quotas.of("User:bob").consumer_byte_rate == 77
    with broker.client(broker.tcp) as c:
        assert described(c) == {entry("orders"), entry("logs", "User:bob")}
        assert quotas_of(c) == {"User:bob": {"consumer_byte_rate": 77}}
    assert file_acls(broker) == written


def test_a_file_written_but_not_published_is_published_at_the_next_start(make_broker):
    # what a crash between the file's write and the publish leaves: the file
    broker = make_broker(start=False)
    os.makedirs(broker.settings["log.dirs"], exist_ok=True)
    binding = binding_from_json({"resourceType": "Topic", "name": "t", "patternType": "Literal",
                                 "principal": "User:alice", "host": "*", "operation": "Read",
                                 "permissionType": "Allow"})
    write_acls(broker.settings["log.dirs"], [binding])
    broker.start()
    assert published_now(broker)[1] == [binding]
    with broker.client() as c:
        assert described(c) == {entry("t")}


def test_a_bad_acl_file_refuses_acl_changes_until_mended(make_broker):
    broker = make_broker(start=False)
    os.makedirs(broker.settings["log.dirs"], exist_ok=True)
    with open(acl_file(broker), "w") as f:
        f.write('{"version": 1, "acls": [{"resourceType": "Topic"}]}')
    broker.start()
    assert "denying all but super.users" in broker.log()
    assert published_now(broker)[1] is None  # super users only
    with broker.client() as c:
        (code, message), = create(c, entry("t"))
        assert code == ErrorCode.STORAGE_ERROR
        assert acl_file(broker) in message and "mended or removed" in message
        answer = describe(c)
        assert answer.error_code == ErrorCode.STORAGE_ERROR and acl_file(broker) in \
            answer.error_message
        # the quotas' changes go on, and keep the ACLs refused
        assert alter(c, ("User:a", {"request_rate": 5})) == [OK]
        _, bindings, quotas = published_now(broker)
        assert bindings is None and quotas.of("User:a").request_rate == 5
        with open(acl_file(broker), "rb") as f:
            assert b'"resourceType": "Topic"}' in f.read()  # untouched
        os.unlink(acl_file(broker))  # an operator removes it
        assert create(c, entry("t")) == [OK]
        assert described(c) == {entry("t")}
        assert [b.name for b in published_now(broker)[1]] == ["t"]


def test_a_bad_quota_file_refuses_quota_changes_only(make_broker):
    broker = make_broker(start=False)
    os.makedirs(broker.settings["log.dirs"], exist_ok=True)
    with open(quota_file(broker), "w") as f:
        f.write("not json")
    broker.start()
    with broker.client() as c:
        (code, message), = alter(c, ("User:a", {"request_rate": 5}))
        assert code == ErrorCode.STORAGE_ERROR and quota_file(broker) in message
        assert create(c, entry("t")) == [OK]
        assert described(c) == {entry("t")}
        assert quotas_of(c) == {}


def test_no_change_is_written_through_a_symbolic_link(make_broker, tmp_path):
    broker = make_broker(start=False)
    os.makedirs(broker.settings["log.dirs"], exist_ok=True)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"version": 1, "acls": []}')
    os.symlink(elsewhere, acl_file(broker))
    broker.start()
    with broker.client() as c:
        (code, message), = create(c, entry("t"))
        assert code == ErrorCode.STORAGE_ERROR and acl_file(broker) in message
    assert elsewhere.read_text() == '{"version": 1, "acls": []}'
    assert os.path.islink(acl_file(broker))


def test_a_file_an_operator_changed_is_the_base_of_the_next_change(make_broker):
    broker = make_broker(num_handlers=1)  # the handler that last wrote the file
    with broker.client() as c:
        assert create(c, entry("a")) == [OK]
        assert create(c, entry("b")) == [OK]
        # an operator puts another file in place while the broker runs
        binding = binding_from_json({"resourceType": "Topic", "name": "op",
                                     "patternType": "Literal", "principal": "User:alice",
                                     "host": "*", "operation": "Read",
                                     "permissionType": "Allow"})
        write_acls(broker.settings["log.dirs"], [binding])
        assert create(c, entry("c")) == [OK]
        assert described(c) == {entry("op"), entry("c")}


def _binding(name: str):
    return binding_from_json({"resourceType": "Topic", "name": name, "patternType": "Literal",
                              "principal": "User:alice", "host": "*", "operation": "Read",
                              "permissionType": "Allow"})


def test_a_file_written_but_not_published_while_running_is_published_by_the_retry(make_broker):
    # what a handler killed between the file's write and the publish leaves; the
    # client's retry finds its change in the file already, and publishes it
    broker = make_broker()
    with broker.client() as c:
        assert create(c, entry("a")) == [OK]
        write_acls(broker.settings["log.dirs"], [_binding("a"), _binding("b")])
        assert [b.name for b in published_now(broker)[1]] == ["a"]
        assert create(c, entry("b")) == [OK]
        assert sorted(b.name for b in published_now(broker)[1]) == ["a", "b"]
        assert described(c) == {entry("a"), entry("b")}
        generation = published_now(broker)[0]
        assert create(c, entry("b")) == [OK]  # a true no-op publishes nothing
        assert published_now(broker)[0] == generation


def test_a_publisher_killed_mid_write_leaves_the_document_and_its_retry_publishes(
        make_broker):
    broker = make_broker()
    with broker.client() as c:
        assert create(c, entry("a")) == [OK]
        # killed having written {a, b} to the file, and half of its publish
        write_acls(broker.settings["log.dirs"], [_binding("a"), _binding("b")])
        kill_a_publisher(broker)
        assert [b.name for b in published_now(broker)[1]] == ["a"]  # whole, readable
        assert described(c) == {entry("a")}
        assert create(c, entry("b")) == [OK]  # the retry of that change
        assert sorted(b.name for b in published_now(broker)[1]) == ["a", "b"]
        assert described(c) == {entry("a"), entry("b")}


def test_a_quota_change_keeps_the_published_acls_when_their_file_went_bad(make_broker):
    broker = make_broker()
    with broker.client() as c:
        assert create(c, entry("a")) == [OK]
        with open(acl_file(broker), "w") as f:  # an operator's typo while it runs
            f.write('{"version": 1, "acls": [{"resourceType": "Topic"}]}')
        assert alter(c, ("User:x", {"request_rate": 5})) == [OK]
        _, bindings, quotas = published_now(broker)
        assert [b.name for b in bindings] == ["a"] and quotas.of("User:x").request_rate == 5
        assert described(c) == {entry("a")}
        (code, message), = create(c, entry("b"))  # its own change still says it
        assert code == ErrorCode.STORAGE_ERROR and acl_file(broker) in message


def test_an_acl_change_keeps_the_published_quotas_when_their_file_went_bad(make_broker):
    broker = make_broker()
    with broker.client() as c:
        assert alter(c, ("User:x", {"request_rate": 5})) == [OK]
        with open(quota_file(broker), "w") as f:
            f.write("not json")
        assert create(c, entry("a")) == [OK]
        _, bindings, quotas = published_now(broker)
        assert [b.name for b in bindings] == ["a"] and quotas.of("User:x").request_rate == 5
        assert quotas_of(c) == {"User:x": {"request_rate": 5}}


def test_acls_left_in_another_log_dir_are_refused_not_taken_for_none(make_broker, tmp_path):
    # log.dirs reordered (or a new disk put first): the file is in the second dir now
    first, second = str(tmp_path / "new"), str(tmp_path / "old")
    broker = make_broker(start=False, log_dirs=f"{first},{second}")
    os.makedirs(first)
    os.makedirs(second)
    write_acls(second, [_binding("a")])
    broker.start()
    assert "is there: the ACLs and quotas are kept in the first log dir" in broker.log()
    assert published_now(broker)[1] is None  # the super users only, said
    with broker.client() as c:
        (code, message), = create(c, entry("t"))
        assert code == ErrorCode.STORAGE_ERROR and os.path.join(second, "acls.json") in message
    assert not os.path.exists(os.path.join(first, "acls.json"))
    os.rename(os.path.join(second, "acls.json"), os.path.join(first, "acls.json"))
    with broker.client() as c:
        assert create(c, entry("t")) == [OK]
        assert described(c) == {entry("a"), entry("t")}


def test_the_published_document_names_the_acl_file_it_was_made_from(make_broker):
    # what lets a change take the ACLs of an unchanged file from the document,
    # not decode the file again (seconds at 100,000 ACLs, under the admin lock)
    import hashlib
    import json

    from tests.access_admin.support import published

    def published_digest():
        with published(broker) as document:
            return json.loads(document.read()[1])["aclsDigest"]

    broker = make_broker()
    assert published_digest() == "-"  # no file yet
    with broker.client() as c:
        assert create(c, entry("a")) == [OK]
        with open(acl_file(broker), "rb") as f:
            assert published_digest() == hashlib.sha256(f.read()).hexdigest()
        assert alter(c, ("User:x", {"request_rate": 5})) == [OK]  # the ACLs' digest kept
        with open(acl_file(broker), "rb") as f:
            assert published_digest() == hashlib.sha256(f.read()).hexdigest()
    broker.stop()
    broker.start()
    with open(acl_file(broker), "rb") as f:
        assert published_digest() == hashlib.sha256(f.read()).hexdigest()
