"""How a ``hostbroker`` client command ends: exit statuses, the error carrying one, count wording.

A command that cannot go on raises :class:`CommandError` with one line for
stderr and the status to exit with (docs/spec/operations.md): 2 for a usage or
configuration error, 1 for a broker that refused or could not be reached,
3 for a log file that is not valid all the way (``dump-log``), 130 for
Ctrl-C. :func:`plural` words the counts those lines and the commands'
summaries give. ``hostbroker.commands`` runs the commands and turns these into
a line and a status; code below it that a command calls (the Spark loader)
raises them without importing the commands. Nothing here does I/O.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BROKER = 1
EXIT_USAGE = 2
EXIT_INVALID_LOG = 3
EXIT_INTERRUPTED = 130


class CommandError(Exception):
    """A command cannot go on: one line for stderr, and the exit status."""

    def __init__(self, message: str, status: int = EXIT_BROKER):
        super().__init__(message)
        self.status = status


def usage_error(message: str) -> CommandError:
    return CommandError(message, EXIT_USAGE)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``"1 message"``, ``"2 messages"``; ``nouns`` for a plural that is not noun + s
    (``plural(n, "valid entry", "valid entries")``)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"
