"""A TLS connection's principal is its certificate's CN (docs/security.md): WHOAMI
says so, and the ACLs are checked against it — over a real ``ssl://`` listener
with certificates made by the tests."""

from __future__ import annotations

import os

from hostbroker.client.errors import BrokerError
from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import acls as w
from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from hostbroker.security.store import write_acls


def allow(principal: str, operation: Operation, resource: ResourceType, name: str):
    return AclBinding.checked(resource, name, PatternType.LITERAL, Principal.parse(principal),
                              "*", operation, Permission.ALLOW)


def produce_code(client: SimpleClient, topic: str) -> int:
    try:
        client.produce(topic, 0, encode_message_set([b"m"]))
    except BrokerError as exc:
        return exc.code
    return ErrorCode.NONE


def test_the_certificate_names_the_principal_the_acls_check(make_tls_broker, certs):
    broker = make_tls_broker(start=False, **{"authorizer.enable": "true",
                                             "ssl.client.auth": "requested"})
    log_dir = broker.settings["log.dirs"]
    os.makedirs(log_dir, exist_ok=True)
    write_acls(log_dir, [allow("User:alice", Operation.ALL, ResourceType.TOPIC, "mine"),
                         allow("User:alice", Operation.CREATE, ResourceType.CLUSTER,
                               "kafka-cluster")])
    broker.start()
    with SimpleClient(broker.ssl, tls=certs.client("alice")) as alice:
        who = alice.request(w.WhoamiRequest())
        assert (who.principal, who.host, who.authorizer) == ("User:alice", "127.0.0.1", 1)
        assert produce_code(alice, "mine") == ErrorCode.NONE
        assert produce_code(alice, "theirs") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with SimpleClient(broker.ssl, tls=certs.client(None)) as nobody:  # no certificate
        who = nobody.request(w.WhoamiRequest())
        assert who.principal == "User:ANONYMOUS"
        assert produce_code(nobody, "mine") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with SimpleClient(broker.tcp) as plain:  # plain TCP at the same broker: anonymous
        assert plain.request(w.WhoamiRequest()).principal == "User:ANONYMOUS"
        assert produce_code(plain, "mine") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
