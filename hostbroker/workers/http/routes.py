"""Every route of the HTTP listener, mounted in this one place.

Owns: :func:`build_router`, which makes hb-http's :class:`~.router.Router`
with its admin gate and mounts:

- ``GET /metrics``: the Prometheus scrape, ``hostbroker.metrics.route``'s
  ``metrics_route(context) -> handler``;
- ``GET /``, ``GET /static/...``, ``GET /api/...`` and the console's admin
  ``POST /api/...`` routes: ``hostbroker.console.api``'s
  ``console_routes(router, context)``, which adds them (admin routes with
  ``admin=True``, so the gate answers first).

A path has one route (``Router.add`` refuses a second). A package that is
not in this build leaves its paths unrouted (404), so the listener serves
what there is.
"""

from __future__ import annotations

import importlib
import importlib.util

from hostbroker.workers.http.auth import AdminGate
from hostbroker.workers.http.context import HttpContext
from hostbroker.workers.http.router import Router


def build_router(context: HttpContext) -> Router:
    gate = AdminGate(context.config["http.admin.enable"], context.plan.http_admin_token)
    router = Router(gate=gate)
    metrics_route = _optional("hostbroker.metrics.route", "metrics_route")
    if metrics_route is not None:
        router.add("GET", "/metrics", metrics_route(context))
    console_routes = _optional("hostbroker.console.api", "console_routes")
    if console_routes is not None:
        console_routes(router, context)
    return router


def _optional(module: str, name: str):
    """``module.name``, or None when ``module`` is not in this build (an error
    inside a module that is there is raised, not hidden)."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except ModuleNotFoundError:  # its package is not there either
        return None
    return getattr(importlib.import_module(module), name)
