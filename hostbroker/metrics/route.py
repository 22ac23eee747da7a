"""``GET /metrics``: the route function ``hb-http``'s router mounts.

Owns: :func:`metrics_route`, which builds the scrape's
``CollectorRegistry`` once (only our collectors: no process or platform
collector of ``prometheus_client``, ours report every process of the
broker) and returns the handler that answers each scrape with
:func:`hostbroker.metrics.exposition.render` of it, content type
``CONTENT_TYPE_LATEST``.

A scrape reads shared memory and psutil, and at most once per
``http.metrics.lag.interval.ms`` asks the broker for group offsets
(:mod:`hostbroker.metrics.lag`); it runs in ``hb-http`` and nowhere else.
The query string is ignored. A scrape less than a second after another
whose answer is still being sent shares its rendered body (:data:`SHARED_S`).
"""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from hostbroker.metrics.collectors import (
    ApiCollector,
    BrokerCollector,
    GroupCollector,
    PartitionCollector,
    ProcessCollector,
    scrape_seconds,
)
from hostbroker.metrics.exposition import render
from hostbroker.metrics.lag import GroupLag
from hostbroker.web.router import Response


class Scrape:
    """The registry of one broker's collectors and what renders it."""

    def __init__(self, context):
        config = context.config
        self.lag = GroupLag(context.broker_uri,
                            interval_s=config["http.metrics.lag.interval.ms"] / 1000,
                            max_groups=config["http.metrics.max.groups"],
                            max_keys=config["http.metrics.max.partitions"],
                            max_entries=config["request.max.entries"],
                            timeout_s=context.broker_timeout_s)
        self.partitions = PartitionCollector(context, config["http.metrics.max.partitions"])
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in (self.partitions, GroupCollector(self.lag, self.partitions),
                          ApiCollector(context), ProcessCollector(context),
                          BrokerCollector(context)):
            self.registry.register(collector)

    def text(self) -> bytes:
        """One scrape's answer body."""
        started = time.monotonic()
        body = render(self.registry.collect())
        return body + render([scrape_seconds(started)])

    def close(self) -> None:
        self.lag.close()


SHARED_S = 1.0  # a scrape this close to the last one, while that one is in flight, gets its body


def shared(render, held=lambda body: False, clock=time.monotonic):
    """``render`` (which returns a body) made to return the last body it
    rendered when called again within :data:`SHARED_S` while ``held(body)``
    (the body is still owed to a client): the very object, not a copy, so many
    scrapes at once cost one rendering and one body's memory. A scrape after
    the last one was taken is rendered afresh."""
    last: list = [None, b""]  # when the body was rendered, the body

    def body() -> bytes:
        now = clock()
        if last[0] is None or not 0 <= now - last[0] < SHARED_S or not held(last[1]):
            last[:] = [None, b""]  # not kept past its use
            last[:] = [now, render()]
        return last[1]

    return body


def metrics_route(context):
    """The handler of ``GET /metrics`` over ``context`` (an ``HttpContext``);
    concurrent scrapes less than :data:`SHARED_S` apart share one body
    (:func:`shared`)."""
    scrape = Scrape(context)
    body = shared(scrape.text, getattr(context, "answer_held", lambda b: False))

    def handler(request) -> Response:
        return Response(200, CONTENT_TYPE_LATEST, body())

    handler.scrape = scrape  # for tests and the benchmark
    return handler
