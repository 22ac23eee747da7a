"""The controller's sender says its failures in the broker's log: the first one
for a broker and each change of reason, a refused request with its error code,
and the broker taking requests again (a socket server of the test as the
broker, as tests/cluster/test_controller_sender.py)."""

from __future__ import annotations

import time

from hostbroker.cluster import paths
from hostbroker.errors import ErrorCode
from hostbroker.workers.registrar_senders import BrokerSender
from tests.cluster.test_controller_sender import answering, notice, wait_until


def _sender(path: str) -> BrokerSender:
    return BrokerSender(paths.BrokerInfo(7, None, None, path), 1, 5.0, lambda: None,
                        lambda broker_id: None, lambda: None).start()


def _stop(sender: BrokerSender) -> None:
    sender.stop()
    sender.thread.join(5)


def test_a_refused_request_is_said_with_its_code(tmp_path, capfd):
    path = str(tmp_path / "b.sock")
    broker = answering(path, [ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.NONE])
    sender = _sender(path)
    try:
        for topic in ("a", "b", "c"):
            sender.put(notice(topic))
        wait_until(lambda: sender.sent == 3)
    finally:
        _stop(sender)
        broker.stop()
    lines = [line for line in capfd.readouterr().err.splitlines() if "broker 7" in line]
    assert lines == [
        "hostbroker: hb-registrar: controller: broker 7 refused the LEADER_AND_ISR: "
        f"CLUSTER_AUTHORIZATION_FAILED ({int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)})",
        "hostbroker: hb-registrar: controller: broker 7 takes the controller's requests again"]


def test_a_broker_not_reached_is_said_once_however_often_it_is_tried(tmp_path, capfd):
    sender = _sender(str(tmp_path / "nobody.sock"))
    try:
        sender.put(notice("a"))
        time.sleep(1.0)  # (several tries: the backoff starts at 0.1 s)
    finally:
        _stop(sender)
    lines = [line for line in capfd.readouterr().err.splitlines() if "broker 7" in line]
    assert len(lines) == 1 and "cannot reach it" in lines[0] and "trying again" in lines[0]
