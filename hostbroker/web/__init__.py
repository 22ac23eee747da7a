"""HTTP, pure of sockets and of the broker: what every HTTP route is built from.

Modules: :mod:`.router` (requests, answers, and the route table),
:mod:`.server` (the HTTP/1.1 connection machine: bytes in, answers out) and
:mod:`.auth` (the admin gate and its token file). The process that serves
them is ``hb-http`` (:mod:`hostbroker.workers.http`); the routes it mounts
come from :mod:`hostbroker.metrics` and :mod:`hostbroker.console`, which
build on this package and never on the worker.
"""
