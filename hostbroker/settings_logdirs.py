"""The broker settings of replicas across log dirs (docs/storage.md, "Replicas
across log dirs"), declared here and concatenated into
:data:`hostbroker.config.SETTINGS`, so ``serve --help``, validation and the
table in docs/configuration.md come from them as from every other setting.

Each row is ``(key, type, default, meaning, low, high)``: an int setting
checked to lie between ``low`` and ``high``. They are plain rows, not
:class:`~hostbroker.config.Setting` objects, because ``config`` builds its one
declaration from them at import (this module imports nothing of it).
"""

from __future__ import annotations

# The most replicas of a partition (protocol.replica_fields.MAX_REPLICAS; config
# sits below the protocol package, so the figure is repeated, and a test holds them equal).
MAX_REPLICAS = 8

LOGDIRS_SETTINGS: tuple[tuple[str, type, int, str, int, int], ...] = (
    ("default.replication.factor", int, 1,
     "Replicas, each on its own log dir, of a topic created on a standalone broker "
     "without a replication factor (auto-created, or CREATE_TOPIC v1 with -1); at most "
     "the number of log.dirs, else the broker refuses to start. Ignored in cluster mode.",
     1, MAX_REPLICAS),
    ("log.dir.check.interval.ms", int, 200,
     "How often each writer checks that its log dir is still the one it opened (same "
     "device and inode, same log-dir-id); a dir pulled, unmounted or replaced (ENOENT, "
     "ESTALE, EIO, or another device, inode or id) goes offline within this time and its "
     "leaderships move. Only on a standalone broker with two log dirs or more (where "
     "`hb-logdirs` runs).", 10, 600000),
    ("logdirs.state.write.timeout.ms", int, 200,
     "Longest a change waits for the replication state file (log-dirs-state) to be "
     "written on one log dir. A dir whose write fails (an I/O error) leaves the live set "
     "at once: its leaderships move and its replicas leave the ISRs. A dir whose write "
     "takes longer is only left out of the next writes until one returns in time; it "
     "leaves the live set when its writes have been late for "
     "logdirs.state.write.fail.ms.", 10, 60000),
    ("logdirs.state.write.fail.ms", int, 600,
     "How long a log dir's state file writes may go on being late (past "
     "logdirs.state.write.timeout.ms, or one still running) before the dir counts as "
     "failed: it leaves the live set, its leaderships move and its replicas leave the "
     "ISRs. A slow fsync on a loaded disk shorter than this moves nothing.", 0, 600000),
    ("logdirs.state.retry.ms", int, 1000,
     "How often the replication state file is written again on a log dir whose last "
     "write of it failed (a full disk, an I/O error) while its writer still serves it. "
     "Until one write succeeds the dir is offline for replicas (it holds no leader, its "
     "replicas are out of the ISRs, no new replica is placed there); once one does, it is "
     "online again and its replicas catch up.", 10, 600000),
    ("logdirs.state.max.bytes", int, 64 * 1024 * 1024,
     "Largest replication state file (log-dirs-state) a broker reads or writes. A copy "
     "longer than this is not read (the dir counts as holding no copy); a change that "
     "would make the document longer is refused.", 4096, 1024 * 1024 * 1024),
    ("logdirs.state.max.online", int, 256,
     "Most log dir ids the replication state file's online list (and its list of refused "
     "copies) may name; a copy naming more is not read. At least the number of log.dirs, "
     "else the broker refuses to start.", 2, 65536),
    ("logdirs.create.round.ms", int, 50,
     "Longest hb-logdirs makes replicas (a topic's creation, a reassignment's new "
     "replicas, a lost replica given back) in one round of its loop, holding the admin "
     "lock, before it goes on with failover and ISR commits (one replica at least); the "
     "rest are made in the next rounds, and a creation is answered once every replica is "
     "made and the topic written to the state file.", 1, 60000),
    ("logdirs.online.wait.ms", int, 20000,
     "Longest `hostbroker logdirs online` waits for the reopened log dir's writer to be "
     "back (recovered and ready); past it the tool answers that the dir is not back yet "
     "(it may still come back: `hostbroker logdirs list`). Below the tool's own 30 s "
     "timeout.", 100, 600000),
    ("logdirs.writer.grace.ms", int, 300,
     "A writer dead or not ready this long counts as not live for replicas across log "
     "dirs: its leaderships move (its dir is not flagged offline; its replicas rejoin as "
     "followers once it is ready).", 0, 600000),
)


def setting_default(key: str) -> int:
    """The default of the setting ``key`` of this module (for the modules below
    ``config`` that need it as a constant)."""
    for row in LOGDIRS_SETTINGS:
        if row[0] == key:
            return row[2]
    raise KeyError(key)


def state_online_problem(max_online: int, log_dirs: int, cluster: bool) -> str | None:
    """The one line refusing a ``logdirs.state.max.online`` below the number of
    configured log dirs (standalone with two or more: where the state file is kept)."""
    if cluster or log_dirs < 2 or log_dirs <= max_online:
        return None
    return (f"logdirs.state.max.online {max_online} is below the {log_dirs} log.dirs "
            "configured")


def replication_factor_problem(default_rf: int, log_dirs: int, cluster: bool) -> str | None:
    """The one line refusing a ``default.replication.factor`` above the number
    of configured log dirs (standalone only: cluster mode ignores it), or None."""
    if cluster or default_rf <= log_dirs:
        return None
    return (f"default.replication.factor {default_rf} needs {default_rf} log.dirs; "
            f"{log_dirs} {'is' if log_dirs == 1 else 'are'} configured")
