"""What needs a wait to happen: REQUEST_TIMED_OUT for an acks=-1 produce not
flushed in time, BROKER_NOT_AVAILABLE for a topic change that cannot get the
admin lock, the close of an idle connection (``connections.max.idle.ms``)."""

import select
import time

from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.protocol import api
from hostbroker.shm.adminlock import AdminLock
from hostbroker.workers.plan import shm_token
from tests.integration.wire_helpers import RawSocket


def test_acks_all_not_flushed_within_timeout_is_request_timed_out(broker):
    with broker.client() as c:
        c.create_topic("slow", 1)
        # timeout 0: the flush cannot have finished when the answer is due
        r = c.produce("slow", 0, encode_message_set([b"late"]), acks=-1, timeout_ms=0,
                      raise_on_error=False)
        assert r.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert (r.base_offset, r.log_end_offset) == (-1, -1)
        # timed out is "not known durable", not "not appended": the data is there
        fetched = c.fetch("slow", 0, 0, 1024)
        assert [m.payload for m in iter_messages(fetched.message_set, 0)] == [b"late"]
        r = c.produce("slow", 0, encode_message_set([b"ok"]), acks=-1, timeout_ms=10000)
        assert r.error_code == ErrorCode.NONE


def test_topic_admin_while_the_admin_lock_is_held_is_broker_not_available(make_broker):
    broker = make_broker(**{"admin.lock.timeout.ms": 300})
    token = shm_token(Config.build(overrides=[f"log.dirs={broker.settings['log.dirs']}"]))
    lock = AdminLock.attach(token)
    lock.acquire()
    try:
        with broker.client() as c:
            t = time.monotonic()
            r = c.create_topic("blocked", 1, raise_on_error=False)
            assert r.error_code == ErrorCode.BROKER_NOT_AVAILABLE
            assert 0.25 < time.monotonic() - t < 5
            r = c.produce("auto-blocked", 0, encode_message_set([b"x"]), raise_on_error=False)
            assert r.error_code == ErrorCode.BROKER_NOT_AVAILABLE
    finally:
        lock.release()
    with broker.client() as c:
        assert c.create_topic("blocked", 1).error_code == ErrorCode.NONE


def _closed(raw: RawSocket) -> bool:
    """True once the broker has closed ``raw`` (readable with nothing to read)."""
    if not select.select([raw.sock], [], [], 0)[0]:
        return False
    raw.assert_closed()
    return True


def test_an_idle_connection_is_closed_and_a_busy_or_waiting_one_is_not(make_broker):
    broker = make_broker(connections_max_idle_ms=1500)
    with broker.client() as c:
        c.create_topic("quiet", 1)
    fetch = api.FetchRequest(4000, 1, (api.FetchPartition("quiet", 0, 0, 1024),))
    with RawSocket(broker.tcp) as idle, RawSocket(broker.unix) as busy, \
            RawSocket(broker.tcp) as waiting:
        idle.send(api.encode_request(api.MetadataRequest(()), 1))
        assert idle.read_response(api.ApiKey.METADATA)[0] == 1
        started = time.monotonic()
        waiting.send(api.encode_request(fetch, 2))  # a long poll at its processor: not idle
        n = 10
        while time.monotonic() - started < 3.5:  # a request every 0.3 s: not idle
            busy.send(api.encode_request(api.MetadataRequest(()), n))
            assert busy.read_response(api.ApiKey.METADATA)[0] == n
            if time.monotonic() - started < 1.2:
                assert not _closed(idle)
            n += 1
            time.sleep(0.3)
        assert _closed(idle)
        correlation_id, fetched = waiting.read_response(api.ApiKey.FETCH)
        assert correlation_id == 2
        assert time.monotonic() - started > 3.5
        busy.send(api.encode_request(api.MetadataRequest(()), 0))
        assert busy.read_response(api.ApiKey.METADATA)[0] == 0
