"""Test helpers: a running broker's collectors read as hb-http reads them,
and a scrape's text parsed by ``prometheus_client``'s own parser."""

from __future__ import annotations

import http.client

import pytest

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from hostbroker.config import Config
from hostbroker.metrics.exposition import render
from hostbroker.workers.plan import BrokerPlan


def config_of(broker) -> Config:
    """The configuration ``broker`` was started with."""
    return Config.build(overrides=[f"{k}={v}" for k, v in broker.settings.items()])


def context_of(broker):
    """An ``HttpContext`` over ``broker``'s shared memory (attached read-only,
    as hb-http attaches it)."""
    from hostbroker.workers.http.context import HttpContext

    return HttpContext(BrokerPlan.from_config(config_of(broker)))


def collected(*collectors) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    for c in collectors:
        registry.register(c)
    return render(registry.collect())


class Parsed:
    """A scrape's samples: ``value(name, **labels)``, ``series(name)``."""

    def __init__(self, text: bytes | str):
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[str, list] = {}
        for family in self.families.values():
            for s in family.samples:
                self.samples.setdefault(s.name, []).append(s)

    def series(self, name: str, **labels) -> list:
        """The samples of ``name`` whose labels include ``labels`` (values as str)."""
        want = {k: str(v) for k, v in labels.items()}
        return [s for s in self.samples.get(name, [])
                if all(s.labels.get(k) == v for k, v in want.items())]

    def value(self, name: str, **labels) -> float:
        found = self.series(name, **labels)
        assert len(found) == 1, f"{name} {labels}: {len(found)} series: {found}"
        return found[0].value

    def has(self, name: str, **labels) -> bool:
        return bool(self.series(name, **labels))


def scraped(broker) -> Parsed:
    """One ``GET /metrics`` of ``broker``'s HTTP listener, parsed (200 asserted)."""
    host, port = broker.settings["http.listeners"].removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/metrics")
        answer = conn.getresponse()
        body = answer.read()
        assert answer.status == 200, body
        return Parsed(body)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def context(served):
    """An ``HttpContext`` over the module's broker ``served`` (import it as a fixture)."""
    ctx = context_of(served)
    yield ctx
    ctx.close()
