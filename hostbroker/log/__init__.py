"""The partition log: message format, segments on disk, recovery and retention.

``message`` and ``segments`` are pure (bytes in, values out) and used by every
process; ``partition`` and ``logdir`` touch files and are owned by the writer
process of their log dir. Nothing here opens sockets or spawns processes.
"""
