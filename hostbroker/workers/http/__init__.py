"""The HTTP listener process, ``hb-http`` (one per broker, when ``http.listeners`` is set).

Owns: the HTTP listening sockets (bound by the supervisor before the fork, as
``listeners`` are, and kept in ``plan.http_listeners``), every HTTP
connection, and all HTTP work: parsing, the Prometheus scrape's text, the
console's files and JSON. None of it runs in a processor, handler or writer,
so a scrape or a console page cannot slow a produce.

Reads: the broker's shared tables, read-only (:mod:`.context`). Writes:
nothing of the broker's; anything that needs a request (metadata, groups,
offsets, topic changes) is sent as a client's request to the broker's own
listener, the normal route.

Modules: :mod:`.worker` (the process loop), :mod:`.routes` (the one place
the routes are mounted), :mod:`.context` (what handlers may use). The HTTP
machine, the route table and the admin gate know nothing of the broker and
live below, in :mod:`hostbroker.web`. The worker is imported by the
supervisor only.
"""
