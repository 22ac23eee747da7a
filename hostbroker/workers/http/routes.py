"""Every route of the HTTP listener, mounted in this one place.

Owns: :func:`build_router`, which makes hb-http's :class:`~.router.Router`
with its admin gate and mounts:

- ``GET /metrics``: the Prometheus scrape, ``hostbroker.metrics.route``'s
  ``metrics_route(context) -> handler``;
- ``GET /``, ``GET /static/...``, ``GET /api/...`` and the console's admin
  ``POST /api/...`` routes: ``hostbroker.console.api``'s
  ``console_routes(router, context)``, which adds them (admin routes with
  ``admin=True``, so the gate answers first).

A path has one route (``Router.add`` refuses a second).
"""

from __future__ import annotations

from hostbroker.console.api import console_routes
from hostbroker.metrics.route import metrics_route
from hostbroker.web.auth import AdminGate
from hostbroker.workers.http.context import HttpContext
from hostbroker.web.router import Router


def build_router(context: HttpContext) -> Router:
    gate = AdminGate(context.config["http.admin.enable"], context.plan.http_admin_token)
    router = Router(gate=gate)
    router.add("GET", "/metrics", metrics_route(context))
    console_routes(router, context)
    return router
