"""The network processor under pipelined load: frames that straddle its
receive buffer, written to the socket faster than the broker reads them."""

import pytest

from hostbroker.client.connection import BrokerConnection
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.protocol import api


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_pipelined_large_produces_straddling_the_receive_buffer(broker, kind):
    uri = getattr(broker, kind)
    topic = f"straddle-{kind}"
    with broker.client(uri) as c:
        c.create_topic(topic, 1)
    # ~110 KB frames of slightly different sizes: never a multiple of the buffer
    sets = [encode_message_set([bytes([i % 251]) * (100 + i % 7)] * 1000) for i in range(48)]
    conn = BrokerConnection(uri, timeout=60).connect()
    correlation_ids = [conn.send(api.ProduceRequest(1, 10000, (api.ProducePartition(topic, 0, s),)))
                       for s in sets]
    offsets = []
    for cid in correlation_ids:
        result = conn.receive(api.ApiKey.PRODUCE).partitions[0]
        assert result.error_code == 0
        offsets.append((result.base_offset, result.log_end_offset))
    conn.close()
    expected, position = [], 0
    for s in sets:
        expected.append((position, position + len(s)))
        position += len(s)
    assert offsets == expected
    with broker.client(uri) as c:
        for s, (base, end) in zip(sets, offsets):
            fetched = c.fetch(topic, 0, base, end - base)
            assert bytes(fetched.message_set) == s
            assert len(list(iter_messages(fetched.message_set, base))) == 1000
