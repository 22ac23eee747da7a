"""A misspelt topic in cluster mode (``--zookeeper``): ``produce`` says it creates the
topic, ``consume --group`` says it waits for it, each in one line on stderr."""

from __future__ import annotations

from tests.cluster.test_console_zk import CHROOT, chroot_broker, registered
from tests.integration.cli import hostbroker


def test_misspelt_topic_through_zookeeper_is_said(make_broker, tmp_path, zookeeper, zk):
    broker = chroot_broker(make_broker, tmp_path, zookeeper, zk, 1)
    with broker.client() as client:
        client.create_topic("page_views", 1)
    registered(zk, CHROOT, "page_views", [1])
    connect = zookeeper.connect + CHROOT

    waited = hostbroker("consume", "--zookeeper", connect, "--topic", "page_veiws",
                        "--group", "reports", "--timeout-ms", "1000", timeout=60)
    assert waited.returncode == 0, waited.stderr
    # (then the group's own warning that its stream owns no partition of it yet)
    assert waited.stderr.decode().splitlines()[0] == (
        "hostbroker consume: no topic page_veiws yet; waiting for it (Ctrl-C stops; "
        "--timeout-ms gives up)")

    made = hostbroker("produce", "--zookeeper", connect, "--topic", "page_veiws", input=b"x\n")
    assert made.returncode == 0, made.stderr
    said = made.stderr.decode().splitlines()
    assert len(said) == 1 and said[0].startswith(
        "hostbroker produce: topic page_veiws does not exist; the first message creates it")
    known = hostbroker("produce", "--zookeeper", connect, "--topic", "page_views", input=b"y\n")
    assert (known.returncode, known.stderr) == (0, b"")
