"""A test that sends LEADER_AND_ISR / STOP_REPLICA by hand to brokers in cluster
mode must be the controller ZooKeeper names: a broker takes a controller's
request only from the ``/controller`` broker id in the ``/controller_epoch``
epoch (docs/cluster.md). :func:`be_the_controller` makes both nodes on a
kazoo session of the test's own, before the brokers start, so no broker takes
``/controller`` (they only watch it while the test's session lives)."""

from __future__ import annotations

from contextlib import contextmanager

from hostbroker.cluster import replica_nodes


@contextmanager
def be_the_controller(connect: str, broker_id: int, epoch: int = 1):
    """``/controller`` (ephemeral) naming ``broker_id`` and then ``/controller_epoch``
    set to ``epoch`` (written after, as a controller bumps it); the kazoo client
    is yielded and closed (``/controller`` gone with it) at the end."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=15)
    try:
        client.create(replica_nodes.CONTROLLER, replica_nodes.encode_controller(broker_id),
                      ephemeral=True, makepath=True)
        value = replica_nodes.encode_controller_epoch(epoch)
        if client.exists(replica_nodes.CONTROLLER_EPOCH) is None:
            client.create(replica_nodes.CONTROLLER_EPOCH, value, makepath=True)
        else:
            client.set(replica_nodes.CONTROLLER_EPOCH, value)
        yield client
    finally:
        client.stop()
        client.close()
