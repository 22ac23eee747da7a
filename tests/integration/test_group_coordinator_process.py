"""The group coordinator's own process, ``hb-coordinator``
(hostbroker/workers/coordinator/): it runs under its name beside the
writers, ``hostbroker top`` shows it, and it dies and comes back alone: a
SIGKILLed coordinator's replacement has the groups and the committed
offsets, produce and fetch go on meanwhile, and no writer is replaced; a
writer that dies takes no group with it."""

from __future__ import annotations

import os
import pathlib
import signal
import threading
import time

import psutil

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import groups as gp
from hostbroker.workers.coordinator.groups import STATE_FILE
from tests.integration.coordinator_wire import GroupWire, poll
from tests.integration.wire_helpers import created_topic, new_topic


def test_the_coordinator_runs_as_its_own_process_and_top_shows_it(make_broker, tmp_path):
    broker = make_broker(**{"log.dirs": f"{tmp_path}/a,{tmp_path}/b"})
    names = broker.workers()
    assert "hb-coordinator" in names
    assert {"hb-writer-0", "hb-writer-1"} <= names.keys()
    assert psutil.Process(names["hb-coordinator"]).ppid() == broker.proc.pid
    from hostbroker.config import Config
    from hostbroker.top import attach, sample

    board, table, log_dirs = attach(Config.build(overrides=[
        f"log.dirs={broker.settings['log.dirs']}"]))
    try:
        rows = sample(board, {}, table, log_dirs)["workers"]
    finally:
        board.close()
        table.close()
    coordinators = [r for r in rows if r["kind"] == "coordinator"]
    assert len(coordinators) == 1
    assert coordinators[0]["name"] == "hb-coordinator"
    assert coordinators[0]["pid"] == names["hb-coordinator"]
    assert coordinators[0]["state"] == "ready"


class _Traffic(threading.Thread):
    """Produce (acks=1) and fetch one partition in a loop until stopped; every
    answer's error code is kept."""

    def __init__(self, broker, topic: str):
        super().__init__(daemon=True)
        self.broker, self.topic = broker, topic
        self.halt = threading.Event()
        self.produced = 0
        self.errors: list = []

    def run(self) -> None:
        data = encode_message_set([b"traffic"])
        with self.broker.client(self.broker.tcp, timeout=30) as client:
            while not self.halt.is_set():
                result = client.produce(self.topic, 0, data, raise_on_error=False)
                if result.error_code != ErrorCode.NONE:
                    self.errors.append(("produce", result.error_code))
                fetched = client.fetch(self.topic, 0, 0, 1 << 20)
                if fetched.error_code != ErrorCode.NONE:
                    self.errors.append(("fetch", fetched.error_code))
                self.produced += 1
                time.sleep(0.005)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


def test_a_killed_coordinator_comes_back_with_the_groups_and_offsets(make_broker):
    broker = make_broker()
    topic, group = created_topic(broker.tcp, 2), new_topic("group")
    traffic = _Traffic(broker, created_topic(broker.tcp))
    traffic.start()
    try:
        with GroupWire(broker.tcp, timeout=30) as wire:
            joined = wire.join(group, {topic: 2}, session_ms=30000)
            generation, member = joined.generation, joined.member_id
            assert joined.error_code == ErrorCode.NONE
            assert wire.sync(group, generation, member).error_code == ErrorCode.NONE
            assert wire.commit(group, [(topic, 0, 41), (topic, 1, 42)], generation, member) == [
                ErrorCode.NONE] * 2
            state = os.path.join(broker.settings["log.dirs"], STATE_FILE)
            # the file exists from the start: wait for the group's record in it
            poll(lambda: group.encode() in pathlib.Path(state).read_bytes())
            before = broker.workers()
            coordinator = before["hb-coordinator"]
            produced = traffic.produced
            os.kill(coordinator, signal.SIGKILL)
            broker.wait_worker_replaced("hb-coordinator", coordinator)
            poll(lambda: traffic.produced > produced + 20, 20, "produce and fetch to go on")
            after = broker.workers()
            # no writer, handler or processor went with it
            assert {k: v for k, v in after.items() if k != "hb-coordinator"} == {
                k: v for k, v in before.items() if k != "hb-coordinator"}
            # the same member of the same generation, its offsets committed before
            assert wire.heartbeat(group, generation, member) == ErrorCode.NONE
            described = wire.describe(group)
            assert described.generation == generation
            assert [m.member_id for m in described.members] == [member]
            assert wire.fetch_offsets(group, [(topic, 0), (topic, 1)]) == [41, 42]
            assert wire.commit(group, [(topic, 0, 43)], generation, member) == [ErrorCode.NONE]
            assert wire.fetch_offsets(group, [(topic, 0)]) == [43]
    finally:
        traffic.stop()
    assert traffic.errors == []
    assert "coordinator 0" in broker.log()  # the supervisor said what it replaced


def test_a_killed_writer_takes_no_group_with_it(make_broker):
    broker = make_broker()
    topic, group = created_topic(broker.tcp), new_topic("group")
    with GroupWire(broker.tcp, timeout=30) as wire:
        joined = wire.join(group, {topic: 1}, session_ms=30000)
        generation, member = joined.generation, joined.member_id
        assert wire.sync(group, generation, member).error_code == ErrorCode.NONE
        assert wire.commit(group, [(topic, 0, 7)], generation, member) == [ErrorCode.NONE]
        coordinator = broker.workers()["hb-coordinator"]
        writer = broker.workers()["hb-writer-0"]
        os.kill(writer, signal.SIGKILL)
        broker.wait_worker_replaced("hb-writer-0", writer)
        assert broker.workers()["hb-coordinator"] == coordinator
        assert wire.heartbeat(group, generation, member) == ErrorCode.NONE
        assert wire.fetch_offsets(group, [(topic, 0)]) == [7]
        assert wire.describe(group).generation == generation


def test_a_join_parked_at_a_killed_coordinator_is_answered(make_broker):
    """The handler fails the join it held for the dead coordinator
    (BROKER_NOT_AVAILABLE: the member joins again); the replacement has the
    group, and both connections go on."""
    broker = make_broker()
    topic, group = created_topic(broker.tcp, 2), new_topic("group")
    with GroupWire(broker.tcp, timeout=30) as a, GroupWire(broker.unix, timeout=30) as b:
        first = a.join(group, {topic: 1}, session_ms=30000, rebalance_ms=30000)
        a.sync(group, first.generation, first.member_id)
        b.send_join(group, {topic: 1}, session_ms=30000, rebalance_ms=30000)
        poll(lambda: a.describe(group).phase != "STABLE")  # b's join waits for a's
        coordinator = broker.workers()["hb-coordinator"]
        os.kill(coordinator, signal.SIGKILL)
        broker.wait_worker_replaced("hb-coordinator", coordinator)
        assert b.join_answer().error_code == ErrorCode.BROKER_NOT_AVAILABLE
        assert first.member_id in [m.member_id for m in b.describe(group).members]
        again = a.join(group, {topic: 1}, member_id=first.member_id,
                       session_ms=30000, rebalance_ms=30000)
        assert again.error_code == ErrorCode.NONE and again.generation > first.generation
        assert isinstance(a.sync(group, again.generation, again.member_id), gp.SyncGroupResponse)
