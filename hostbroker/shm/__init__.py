"""Shared memory between the broker's processes.

Rings carry requests, appends and answers between processes; doorbells wake
the processes that wait on them; slot tables hold the partition table and the
process board; the admin lock serializes the rare changes to them. Nothing
here knows about logs, messages or the wire protocol: the broker's packages
decide what the bytes mean.

Linux x86-64 only: the lock-free structures rely on x86-64 total store order
and 8-byte atomic aligned stores (see ``ring.py``), and doorbells on eventfd.

Modules: ``region`` (named segments, stale clean-up), ``ring`` (SPSC byte
ring), ``channel`` (messages of any size over a ring), ``doorbell``
(eventfd wake-ups), ``table`` (seqlock slot tables), ``partitions`` (the partition table),
``adminlock`` (the admin lock), ``procs`` (the process board), ``stats``
(per-partition and per-API counters, one region per process), ``quotas``
(rate counters per principal, a part per processor).
"""

import platform
import sys

if sys.platform != "linux" or platform.machine() != "x86_64":
    raise ImportError("hostbroker.shm runs on Linux x86-64 only: its rings and tables rely on x86-64 store ordering")

from hostbroker.shm.adminlock import AdminLock  # noqa: E402
from hostbroker.shm.channel import Receiver, Sender  # noqa: E402
from hostbroker.shm.doorbell import Doorbell  # noqa: E402
from hostbroker.shm.procs import BrokerState, ProcessBoard, WorkerState  # noqa: E402
from hostbroker.shm.region import (  # noqa: E402
    LayoutError,
    SharedRegion,
    broker_prefix,
    new_token,
    region_name,
    remove_stale,
)
from hostbroker.shm.partitions import PartitionSlot, PartitionState, PartitionTable  # noqa: E402
from hostbroker.shm.ring import Ring  # noqa: E402
from hostbroker.shm.table import SlotLayout, SlotTable, TornSlotError  # noqa: E402

__all__ = [
    "AdminLock",
    "BrokerState",
    "Doorbell",
    "LayoutError",
    "PartitionSlot",
    "PartitionState",
    "PartitionTable",
    "ProcessBoard",
    "Receiver",
    "Ring",
    "Sender",
    "SharedRegion",
    "SlotLayout",
    "SlotTable",
    "TornSlotError",
    "WorkerState",
    "broker_prefix",
    "new_token",
    "region_name",
    "remove_stale",
]
