"""A FETCH waiting for data at its processor (``processor.local.fetch``) is
asked again when it is answered: an ACL removed while it waits refuses it
(TOPIC_AUTHORIZATION_FAILED), the data appended meanwhile is not sent."""

from __future__ import annotations

import os
import threading
import time

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import acls as w
from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from hostbroker.security.store import write_acls
from tests.integration.broker import Broker

READ_T = AclBinding.checked(ResourceType.TOPIC, "t", PatternType.LITERAL,
                            Principal.parse("User:ANONYMOUS"), "*", Operation.READ,
                            Permission.ALLOW)


def test_a_parked_fetch_is_refused_once_its_acl_is_gone(tmp_path):
    os.makedirs(tmp_path / "logs")
    write_acls(str(tmp_path / "logs"), [READ_T])
    broker = Broker(tmp_path, authorizer_enable="true", processor_local_fetch="true",
                    num_processors=1).start()
    try:
        with broker.client(broker.unix) as own, broker.client(broker.tcp) as anon:
            own.create_topic("t", 1)
            assert own.produce("t", 0, encode_message_set([b"before"])).error_code == 0
            end = own.offsets("t", 0, -1, 1)[0]
            assert anon.fetch("t", 0, 0, 4096).error_code == 0  # allowed: READ on t
            answers = []
            waiting = threading.Thread(target=lambda: answers.append(
                anon.fetch("t", 0, end, 4096, max_wait_ms=5000, min_bytes=1,
                           raise_on_error=False)))
            waiting.start()
            deadline = time.monotonic() + 5
            while broker.counter("processor", "fetch_parked") == 0:
                assert time.monotonic() < deadline, "the fetch never parked at its processor"
                time.sleep(0.05)
            deleted = own.request(w.DeleteAclsRequest((w.AclFilterEntry(
                principal="User:ANONYMOUS"),)))
            assert deleted.results[0].error_code == 0 and len(deleted.results[0].deleted) == 1
            assert own.produce("t", 0, encode_message_set([b"after"])).error_code == 0
            waiting.join(10)
            (answer,) = answers
            assert answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert not bytes(answer.message_set)
    finally:
        broker.finish()
