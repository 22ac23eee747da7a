"""The log dir table's states as shown (``shm/logdirs.shown_state``, ``top``'s
rows): a dir without an id is filled ONLINE, and any dir its writer flags
offline shows offline."""

from __future__ import annotations

from hostbroker import top
from hostbroker.shm.logdirs import (LD_OFFLINE, LD_ONLINE, LD_REOPENING, NO_DIR_ID,
                                    LogDirTable, shown_state)


def test_the_writers_flag_makes_an_online_dir_offline_and_nothing_else():
    assert shown_state(LD_ONLINE, False) == LD_ONLINE
    assert shown_state(LD_ONLINE, True) == LD_OFFLINE
    assert shown_state(LD_OFFLINE, False) == LD_OFFLINE  # (hb-logdirs' word stands)
    assert shown_state(LD_REOPENING, True) == LD_REOPENING


def test_dirs_without_an_id_are_filled_online_and_shown_as_their_writers_say(created):
    dirs = created(LogDirTable, "logdirs", [NO_DIR_ID, NO_DIR_ID])
    assert [dirs.read(i).state for i in range(2)] == [LD_ONLINE, LD_ONLINE]
    assert dirs.ids() == {}
    rows = top.log_dir_rows(dirs, ["/a", "/b"], flagged={1})
    assert [(r["id"], r["path"], r["state"]) for r in rows] == [
        (-1, "/a", "online"), (-1, "/b", "offline")]
    text = top.render({"broker_state": "running", "supervisor_pid": 1, "workers": [],
                       "log_dirs": rows}, None, 1.0).splitlines()
    assert [line.split()[:3] for line in text[-2:]] == [["/a", "-", "online"],
                                                       ["/b", "-", "offline"]]
