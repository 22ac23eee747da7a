"""partition.json marks the replicas of replicated topics, and a hostile mark is refused."""

from __future__ import annotations

import json
import os

import pytest

from hostbroker.errors import StorageError
from hostbroker.log.config import LogConfig
from hostbroker.log.partition import PartitionLog
from hostbroker.log.partition_file import PARTITION_FILE, read_partition_meta


def test_the_replicated_mark_survives_a_reopen(tmp_path):
    log = PartitionLog.create(str(tmp_path), "r", 0, 1, {}, LogConfig(), replicated=True)
    assert log.replicated
    log.close()
    with open(os.path.join(log.path, PARTITION_FILE)) as f:
        assert json.load(f)["replicated"] is True
    assert PartitionLog.open(log.path, LogConfig()).replicated
    plain = PartitionLog.create(str(tmp_path), "p", 0, 1, {}, LogConfig())
    plain.close()
    with open(os.path.join(plain.path, PARTITION_FILE)) as f:
        assert "replicated" not in json.load(f)  # files of plain partitions are unchanged
    assert not PartitionLog.open(plain.path, LogConfig()).replicated


def test_a_replicated_mark_that_is_not_a_boolean_takes_the_partition_offline(tmp_path):
    log = PartitionLog.create(str(tmp_path), "r", 0, 1, {}, LogConfig())
    log.close()
    path = os.path.join(log.path, PARTITION_FILE)
    meta = json.load(open(path))
    meta["replicated"] = 1
    with open(path, "w") as f:
        json.dump(meta, f)
    with pytest.raises(StorageError, match="replicated 1 is not true or false"):
        read_partition_meta(log.path)


def test_min_insync_replicas_is_a_bounded_topic_config():
    assert LogConfig().with_overrides({"min.insync.replicas": "2"}).min_insync_replicas == 2
    for bad in ("0", "9", "x"):
        with pytest.raises(Exception, match="min.insync.replicas"):
            LogConfig().with_overrides({"min.insync.replicas": bad})
