"""Helpers for tests of the broker's connections: the processors' memory and
the open connections they report on the process board, read from outside as
``hostbroker top`` reads them."""

from __future__ import annotations

import psutil

from hostbroker.config import Config
from hostbroker.shm.procs import ProcessBoard
from hostbroker.workers.plan import BrokerPlan
from tests.integration.broker import Broker

MiB = 1024 * 1024
_PROCESSOR_KIND = 3  # hostbroker.workers.supervisor.KIND_CODES


def processor_rss(broker: Broker) -> int:
    """Resident bytes of all ``hb-proc-N`` processes together."""
    total = 0
    for name, pid in broker.workers().items():
        if name.startswith("hb-proc"):
            total += psutil.Process(pid).memory_info().rss
    return total


def open_connections(broker: Broker) -> int:
    """Connections the processors hold, from their CONNECTIONS gauges."""
    config = Config.build(overrides=[f"log.dirs={broker.settings['log.dirs']}"])
    board = ProcessBoard.attach(BrokerPlan.from_config(config).board_name, readonly=True)
    try:
        return sum(row["counters"]["connections"] for row in board.snapshot()
                   if row.get("kind") == _PROCESSOR_KIND)
    finally:
        board.close()
