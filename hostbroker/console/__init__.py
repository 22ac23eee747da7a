"""The web console served by hb-http: its page (``static/``: plain HTML, CSS and
JavaScript, no build step, nothing loaded from elsewhere) and the JSON API the
page reads (``api.py``; changes in ``changes.py``, rates in ``rates.py``).

Nothing here runs in a processor, handler or writer: hb-http mounts it with
:func:`hostbroker.console.api.console_routes`, and every request it makes of
the broker goes through the broker's own listener like any client's.
"""
