"""A FETCH of one partition left at its writer (``fetch.writer.polls``) is not
answered with data once its READ is revoked: the writer gives the poll back to
its handler when the ACL generation moves, and the handler answers the refusal
(TOPIC_AUTHORIZATION_FAILED, no data) within a moment, not at the fetch's 20 s
deadline. A fetch whose READ still holds after an ACL change is given back too
and answered with its data as ever; a change of the quotas alone leaves the
poll at its writer. A real broker; clients over TCP are ``User:ANONYMOUS``."""

from __future__ import annotations

import os
import threading
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import acls as w
from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from hostbroker.security.store import write_acls
from tests.integration.broker import Broker

ANON = Principal.parse("User:ANONYMOUS")


def read(topic: str) -> AclBinding:
    return AclBinding.checked(ResourceType.TOPIC, topic, PatternType.LITERAL, ANON, "*",
                              Operation.READ, Permission.ALLOW)


@pytest.fixture
def broker(tmp_path):
    os.makedirs(tmp_path / "logs")
    write_acls(str(tmp_path / "logs"), [read("t"), read("u")])
    # the processor answers no FETCH itself: the handler leaves it at the writer
    b = Broker(tmp_path, authorizer_enable="true", processor_local_fetch="false",
               fetch_writer_polls="true").start()
    try:
        yield b
    finally:
        b.finish()


def parked(broker, anon, topic: str, offset: int) -> tuple[threading.Thread, list]:
    """A FETCH of ``topic`` at ``offset`` (the log end) with 20 s to wait, held at its writer."""
    answers: list = []
    before = broker.counter("writer", "fetch_parked")
    waiting = threading.Thread(target=lambda: answers.append(
        (anon.fetch(topic, 0, offset, 4096, max_wait_ms=20000, min_bytes=1,
                    raise_on_error=False), time.monotonic())))
    waiting.start()
    deadline = time.monotonic() + 10
    while broker.counter("writer", "fetch_parked") <= before:
        assert time.monotonic() < deadline, "the fetch never parked at its writer"
        time.sleep(0.05)
    return waiting, answers


def test_a_fetch_held_at_its_writer_is_refused_once_its_acl_is_gone(broker):
    with broker.client(broker.unix) as own, broker.client(broker.tcp) as anon:
        own.create_topic("t", 1)
        assert own.produce("t", 0, encode_message_set([b"before"])).error_code == 0
        end = own.offsets("t", 0, -1, 1)[0]
        assert anon.fetch("t", 0, 0, 4096).error_code == 0  # allowed: READ on t
        waiting, answers = parked(broker, anon, "t", end)
        revoked = time.monotonic()
        deleted = own.request(w.DeleteAclsRequest((w.AclFilterEntry(
            resource_type=ResourceType.TOPIC, resource_name="t",
            principal="User:ANONYMOUS"),)))
        assert deleted.results[0].error_code == 0 and len(deleted.results[0].deleted) == 1
        waiting.join(15)
        assert not waiting.is_alive(), "the fetch was held to its deadline"
        (answer, at), = answers
        assert answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert not bytes(answer.message_set)
        assert at - revoked < 10  # (20 s: its deadline)
        # data appended after the revocation is not sent on it either
        assert own.produce("t", 0, encode_message_set([b"after"])).error_code == 0
        again = anon.fetch("t", 0, end, 4096, raise_on_error=False)
        assert again.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_a_fetch_still_allowed_after_an_acl_change_gets_its_data(broker):
    with broker.client(broker.unix) as own, broker.client(broker.tcp) as anon:
        own.create_topic("u", 1)
        assert own.produce("u", 0, encode_message_set([b"before"])).error_code == 0
        end = own.offsets("u", 0, -1, 1)[0]
        before = broker.counter("writer", "fetch_parked")
        waiting, answers = parked(broker, anon, "u", end)
        deleted = own.request(w.DeleteAclsRequest((w.AclFilterEntry(
            resource_type=ResourceType.TOPIC, resource_name="t",
            principal="User:ANONYMOUS"),)))  # another topic's: the ACLs' stamp moves
        assert deleted.results[0].error_code == 0 and len(deleted.results[0].deleted) == 1
        deadline = time.monotonic() + 10  # given back to the handler, which keeps it
        while broker.counter("writer", "fetch_parked") > before:
            assert time.monotonic() < deadline, "the writer kept the poll after an ACL change"
            time.sleep(0.05)
        assert own.produce("u", 0, encode_message_set([b"after"])).error_code == 0
        waiting.join(15)
        (answer, _), = answers
        assert answer.error_code == ErrorCode.NONE
        assert b"after" in bytes(answer.message_set)


def test_a_change_of_the_quotas_alone_leaves_the_fetch_at_its_writer(broker):
    with broker.client(broker.unix) as own, broker.client(broker.tcp) as anon:
        own.create_topic("u", 1)
        assert own.produce("u", 0, encode_message_set([b"before"])).error_code == 0
        end = own.offsets("u", 0, -1, 1)[0]
        waiting, answers = parked(broker, anon, "u", end)
        held = broker.counter("writer", "fetch_parked")
        changed = own.request(w.AlterQuotasRequest((w.QuotaEntity("User:someone-else", (
            w.QuotaValue("request_rate", 1000),)),)))
        assert changed.results[0].error_code == 0
        time.sleep(1.0)  # ten of the writer's looks at the ACLs
        assert broker.counter("writer", "fetch_parked") == held  # still at the writer
        assert own.produce("u", 0, encode_message_set([b"after"])).error_code == 0
        waiting.join(15)
        (answer, _), = answers
        assert answer.error_code == ErrorCode.NONE and b"after" in bytes(answer.message_set)
        assert broker.counter("writer", "fetch_parked") < held  # answered
