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
     "device and inode, same log-dir-id); a dir pulled, unmounted or replaced goes "
     "offline within this time and its leaderships move.", 10, 600000),
    ("logdirs.state.write.timeout.ms", int, 200,
     "Longest a write of the replication state file (log-dirs-state) may take on one "
     "log dir; a dir whose write fails or takes longer leaves the live set: its "
     "leaderships move and its replicas leave the ISRs.", 10, 60000),
    ("logdirs.writer.grace.ms", int, 300,
     "A writer dead or not ready this long counts as not live for replicas across log "
     "dirs: its leaderships move (its dir is not flagged offline; its replicas rejoin as "
     "followers once it is ready).", 0, 600000),
)


def replication_factor_problem(default_rf: int, log_dirs: int, cluster: bool) -> str | None:
    """The one line refusing a ``default.replication.factor`` above the number
    of configured log dirs (standalone only: cluster mode ignores it), or None."""
    if cluster or default_rf <= log_dirs:
        return None
    return (f"default.replication.factor {default_rf} needs {default_rf} log.dirs; "
            f"{log_dirs} {'is' if log_dirs == 1 else 'are'} configured")
