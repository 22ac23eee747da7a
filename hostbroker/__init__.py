"""hostbroker: a persistent, partitioned, replayable log broker for one large host.

Packages, from the bottom up (imports point downward only):

- ``errors``    wire error codes and the exceptions that carry them
- ``log``       the log format and partition storage (pure: no sockets)
- ``protocol``  sans-IO codecs of the wire protocol
- ``shm``       shared-memory rings, tables and counters (knows nothing of logs)
- ``config``    settings, declared once
- ``client``    the Python client, on top of ``protocol``
- ``workers``   one module per kind of broker process, and the supervisor
"""

__version__ = "0.1.0"
