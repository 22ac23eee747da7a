"""Prometheus metrics of a running broker (``/metrics`` of ``hb-http``).

Owns: the name, type, labels and help of every metric (:mod:`.names`, the
one table docs/operations.md is generated from), the custom collectors that
read them from the broker's shared memory (:mod:`.collectors`), consumer
group lag read through the broker's own listener (:mod:`.lag`), the text
exposition of a scrape (:mod:`.exposition`) and the route function
``hb-http`` mounts (:mod:`.route`).

Runs in ``hb-http`` only. It never writes shared memory and opens no socket
of its own: the tables are attached read-only, and group offsets are asked
with ordinary requests through the broker's first listener, so every byte
of a scrape's work is ``hb-http``'s and no processor, handler or writer
does any of it beyond answering those requests. No second bookkeeping: each
figure is a counter, gauge or offset the broker already keeps (the process
board, the partition table, the log dir table, the partition and API stats
of :mod:`hostbroker.shm.stats`).
"""
