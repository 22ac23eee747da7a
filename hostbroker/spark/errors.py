"""What the data source raises, as Spark shows it: the reason in one line, a short traceback.

Spark puts the whole Python traceback of a failed plan (driver) or task
(executor) in front of the error's own line, and every exception in the
chain of causes after it: a broker that cannot be reached read as 9 to 36
lines whose reason was the last. Each method Spark calls on the reader and
writer objects (``source``, ``stream``, ``writer``) goes through
:func:`shallow` (or, for an iterator of record batches, :func:`shallow_iter`),
which raises the same exception again with only its own frame of traceback
and no chain: Spark's text is then a few lines, the last ours, and our
messages lead with the reason (a connection's names the broker:
``cannot reach unix:///x/hb.sock: [Errno 111] Connection refused``). Only
exceptions that say why (:func:`says_why`: ours and OSError) are cut short;
any other is a fault, raised with its whole traceback.

Runs on the driver and in the executors' Python workers; it imports
nothing of pyspark.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def says_why(exc: BaseException) -> bool:
    """Whether ``exc``'s own line is the whole story: one of ours (a class of
    hostbroker's, which leads with the reason) or the system's (OSError: a
    connection's names the broker). Anything else (a TypeError, a KeyError) is a
    fault whose traceback is the story, and keeps it."""
    return isinstance(exc, OSError) or type(exc).__module__.partition(".")[0] == "hostbroker"


def shallow(method: F) -> F:
    """``method``, raising what it raises with one frame of traceback and no cause
    when the exception :func:`says_why`; unchanged otherwise."""
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the same exception, raised again
            if not says_why(exc):
                raise
            raise exc.with_traceback(None) from None
    return call  # type: ignore[return-value]


def shallow_iter(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, raising what iterating them raises as :func:`shallow` does."""
    try:
        yield from items
    except Exception as exc:  # noqa: BLE001 - the same exception, raised again
        if not says_why(exc):
            raise
        raise exc.with_traceback(None) from None
