"""A handler that is replaced learns again who the connections it serves are:
their processor tells it (REQ_PRINCIPAL) before their next frames, so a
connection that outlives its handler is not refused as nobody."""

from __future__ import annotations

import os
import signal
import time

from hostbroker.log.message import encode_message_set
from tests.integration.broker import Broker


def test_a_replaced_handler_is_told_the_identities_again(tmp_path):
    os.makedirs(tmp_path / "logs")
    broker = Broker(tmp_path, authorizer_enable="true", num_handlers=1,
                    processor_local_requests="false", processor_direct_produce="false",
                    processor_local_fetch="false", processor_direct_groups="false").start()
    try:
        # the broker's own user over the Unix socket: allowed everything, once known
        with broker.client(broker.unix) as client:
            client.create_topic("t", 1)
            assert client.produce("t", 0, encode_message_set([b"before"])).error_code == 0
            old = broker.workers()["hb-handler-0"]
            os.kill(old, signal.SIGKILL)
            broker.wait_worker_replaced("hb-handler-0", old)
            time.sleep(1.5)  # the processor's next rounds see the handler's epoch move
            assert client.produce("t", 0, encode_message_set([b"after"])).error_code == 0
    finally:
        broker.finish()
