"""An ACL removed while a connection holds the decision it allowed: the
connection's next request is refused, on each of the processor's routes
(a lone PRODUCE put to its writer, a FETCH and a METADATA answered there,
an OFFSET_COMMIT put to hb-coordinator) and at the handler, with no
reconnect in between."""

from __future__ import annotations

import os

import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import acls as w
from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from hostbroker.security.store import write_acls
from tests.integration.broker import Broker

ANON = Principal.parse("User:ANONYMOUS")
ROUTES = {"direct": "true", "handler": "false"}


def _binding(rtype, name, operation):
    return AclBinding.checked(rtype, name, PatternType.LITERAL, ANON, "*", operation,
                              Permission.ALLOW)


def _code(call) -> int:
    try:
        return call()
    except BrokerError as e:
        return e.code


@pytest.mark.parametrize("route", ROUTES)
def test_a_removed_acl_refuses_the_same_connection_next(tmp_path, route):
    os.makedirs(tmp_path / "logs")
    write_acls(str(tmp_path / "logs"), [_binding(ResourceType.TOPIC, "t", Operation.ALL),
                                        _binding(ResourceType.GROUP, "g", Operation.READ)])
    on = ROUTES[route]
    broker = Broker(tmp_path, authorizer_enable="true", num_processors=1,
                    processor_local_requests=on, processor_direct_produce=on,
                    processor_local_fetch=on, processor_direct_groups=on).start()
    try:
        with broker.client(broker.unix) as own, broker.client(broker.tcp) as anon:
            own.create_topic("t", 1)

            def requests() -> list:
                return [
                    _code(lambda: anon.produce("t", 0, encode_message_set([b"m"])).error_code),
                    _code(lambda: anon.fetch("t", 0, 0, 4096,
                                             raise_on_error=False).error_code),
                    anon.metadata(["t"]).topics[0].error_code,
                    _code(lambda: anon.offset_commit("g", [("t", 0, 1, None)],
                                                     raise_on_error=False)[0].error_code),
                ]

            assert requests() == [0, 0, 0, 0]  # (each decision now kept on the connection)
            deleted = own.request(w.DeleteAclsRequest((w.AclFilterEntry(
                resource_type=int(ResourceType.TOPIC)),)))
            assert len(deleted.results[0].deleted) == 1
            no = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert requests() == [no] * 4
    finally:
        broker.finish()
