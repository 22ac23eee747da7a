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
``cannot reach unix:///x/hb.sock: [Errno 111] Connection refused``).

Runs on the driver and in the executors' Python workers; it imports
nothing of pyspark.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def shallow(method: F) -> F:
    """``method``, raising what it raises with one frame of traceback and no cause."""
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the same exception, raised again
            raise exc.with_traceback(None) from None
    return call  # type: ignore[return-value]


def shallow_iter(items: Iterator[Any]) -> Iterator[Any]:
    """``items``, raising what iterating them raises as :func:`shallow` does."""
    try:
        yield from items
    except Exception as exc:  # noqa: BLE001 - the same exception, raised again
        raise exc.with_traceback(None) from None
