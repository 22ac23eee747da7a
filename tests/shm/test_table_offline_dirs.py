"""The partition table's offline log dir flags (header user words)."""

from hostbroker.shm.partitions import MAX_FLAGGED_LOG_DIRS, PartitionTable


def test_offline_log_dirs_are_flagged_and_cleared_apart(created, names):
    table = created(PartitionTable, "partitions", 4)
    assert table.offline_log_dirs() == set()
    for index in (0, 7, 8, MAX_FLAGGED_LOG_DIRS - 1):
        table.set_log_dir_offline(index)
    table.set_log_dir_offline(MAX_FLAGGED_LOG_DIRS)  # past the bitmap: not flagged
    assert table.offline_log_dirs() == {0, 7, 8, MAX_FLAGGED_LOG_DIRS - 1}
    table.set_log_dir_offline(7, False)
    table.set_log_dir_offline(9, False)  # clearing a clear flag changes nothing
    assert table.offline_log_dirs() == {0, 8, MAX_FLAGGED_LOG_DIRS - 1}
    # the slots and the generation are untouched; a read-only attach sees the flags
    assert table.generation == 0 and table.scan() == []
    reader = PartitionTable.attach(names("partitions"), readonly=True)
    assert reader.offline_log_dirs() == {0, 8, MAX_FLAGGED_LOG_DIRS - 1}
    reader.close()
