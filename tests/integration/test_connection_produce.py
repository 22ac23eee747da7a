"""``BrokerConnection.send_produce``: message sets handed to the kernel as they are.

More sets than one ``sendmsg`` takes (1024 buffers) and more bytes than a
socket buffer holds (partial writes) must still arrive as one request, in
order, next to requests sent the ordinary way on the same connection.
"""

from hostbroker.client import BrokerConnection, SimpleClient
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.protocol import api
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    created_topic,
    log_end,
    module_broker,
    read_log,
    uri,
    wait_for,
)

served = module_broker()


def payloads_of(client: SimpleClient, topic: str, partition: int) -> list[bytes]:
    end = log_end(client, topic, partition)
    data = read_log(client, topic, partition, 0, end, max_bytes=8 << 20)
    return [m.payload for m in iter_messages(data, 0)]


def test_many_sets_and_large_sets_arrive_whole_and_in_order(uri):
    topic = created_topic(uri, 2)
    small = [encode_message_set([b"s%d" % i]) for i in range(3000)]  # > 2 x 1024 buffers
    large = [encode_message_set([bytes([65 + i]) * 900_000]) for i in range(6)]  # ~5.4 MB
    with BrokerConnection(uri, timeout=30) as connection:
        first = connection.send_produce(1, 10_000, [(topic, 0, small), (topic, 1, large)])
        # An ordinary request right behind it on the same connection.
        second = connection.send(api.ProduceRequest(1, 10_000, (
            api.ProducePartition(topic, 0, encode_message_set([b"after"])),)))
        assert second == first + 1
        answer = connection.receive(api.ApiKey.PRODUCE)
        assert sorted((r.partition, r.error_code, r.base_offset) for r in answer.partitions) \
            == [(0, 0, 0), (1, 0, 0)]
        (after,) = connection.receive(api.ApiKey.PRODUCE).partitions
        assert after.error_code == 0
        # acks=0 has no answer and holds no place.
        connection.send_produce(0, 10_000, [(topic, 0, [encode_message_set([b"last"])])])
        assert connection.pending == 0
    with SimpleClient(uri) as client:
        # acks=0 has no answer: wait for its one entry (4 + 6 + 4 bytes).
        wait_for(lambda: log_end(client, topic, 0) == after.log_end_offset + 14)
        assert payloads_of(client, topic, 0) == [b"s%d" % i for i in range(3000)] + [
            b"after", b"last"]
        assert payloads_of(client, topic, 1) == [bytes([65 + i]) * 900_000 for i in range(6)]
