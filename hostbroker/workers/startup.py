"""The supervisor's start-up steps that can fail with one line, before any fork
(part of ``hb-supervisor``, called from :meth:`Supervisor.prepare
<hostbroker.workers.supervisor.Supervisor.prepare>`).

Owns nothing for long: it checks the log dirs (as root, none that others may
write: docs/storage.md) and the unix listeners' directories without changing
anything, makes the log dirs, takes the broker lock (``<first log dir>/.broker.lock``,
held for the broker's life), gives each log dir its id (:func:`resolve_dir_ids`) and binds
the listeners (the Kafka ones not listening yet: the supervisor listens once
``broker.id`` is the broker's own; the HTTP ones listen at once, an HTTP
connection queued before hb-http runs just waits), refusing first listeners that
overlap (:func:`check_overlap`: one port on the same address, or on a
wildcard address and another, which ``SO_REUSEADDR`` lets bind twice until
the second ``listen()``). Each refusal is a
:class:`StartError` whose message is the one line to print. First of all,
:func:`take_stop_signals` makes SIGINT and SIGTERM the broker's own, whatever
its parent left it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import stat
import sys

from hostbroker.config import parse_listener
from hostbroker.settings_http import parse_http_listener
from hostbroker.log import files


def take_stop_signals() -> None:
    """SIGINT and SIGTERM stop this broker whatever it inherited: a parent's ignored
    SIGINT (a shell's ``&`` without job control, ``nohup``-like wrappers, a harness)
    and a blocked signal mask survive ``exec``, and every worker would inherit them
    through ``fork`` too. Ctrl-C raises KeyboardInterrupt again, SIGTERM has its
    default until the supervisor takes it, and no signal is blocked (the broker
    blocks only what it means to, for as long as it means to)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


class StartError(Exception):
    """The broker cannot start; the message is the one line to print."""


class StoppedWhileStarting(StartError):
    """SIGTERM or SIGINT came before the broker was serving: a stop asked for,
    which ends as any other stop does (status 0), not a refusal."""


def bind_listener(uri: str) -> socket.socket:
    """Bind ``tcp://HOST:PORT``, ``ssl://HOST:PORT`` (TLS is the processors')
    or ``unix://PATH`` (mode 0660); start() listens. The URI was checked by the
    configuration; a unix path's directory must exist."""
    parsed = parse_listener(uri)
    if parsed[0] in ("tcp", "ssl"):
        sock = _bind_tcp(uri, parsed[1], parsed[2], "listeners")
    else:
        path = os.path.abspath(parsed[1])
        _remove_stale_socket(path, uri)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o117)
        try:
            sock.bind(path)
        except OSError as e:
            sock.close()
            raise StartError(f"listeners: cannot bind {uri}: {e.strerror or e}") from None
        finally:
            os.umask(old)  # the socket was made 0660 by it: no chmod, which follows a link
    sock.set_inheritable(True)
    return sock


def bind_http_listener(uri: str) -> socket.socket:
    """Bind ``http://HOST:PORT`` (``http.listeners``) for hb-http;
    :func:`listen_http` listens once :func:`check_overlap` passed."""
    host, port = parse_http_listener(uri)
    sock = _bind_tcp(uri, host, port, "http.listeners")
    sock.set_inheritable(True)
    return sock


def listen_http(uri: str, sock: socket.socket) -> None:
    """Listen on a bound HTTP listener, before any fork (a connection queued
    before hb-http runs just waits); a failure is the one-line refusal."""
    try:
        sock.listen(HTTP_BACKLOG)
    except OSError as e:
        raise StartError(f"http.listeners: cannot listen on {uri}: {e.strerror}") from None


HTTP_BACKLOG = 128


def check_overlap(bound: list[tuple[str, str, socket.socket]]) -> None:
    """Refuse listeners (``(setting, uri, bound socket)``, Kafka and HTTP alike)
    two of which take one TCP port on overlapping addresses: the same address,
    or a wildcard (``0.0.0.0``, ``::``) and any address of a family it covers.
    Compared as bound (``getsockname``), so names that resolve alike and port 0
    are judged by what was bound."""
    seen: list[tuple[str, str, tuple[int, str, bool], int]] = []
    for key, uri, sock in bound:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            continue
        host, port = sock.getsockname()[:2]
        v6only = bool(sock.family == socket.AF_INET6
                      and sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))
        address = (sock.family, host, v6only)
        for other_key, other_uri, other, other_port in seen:
            if port == other_port and _overlap(address, other):
                where = key if key == other_key else f"{other_key} and {key}"
                raise StartError(f"{where}: {other_uri} and {uri} take one port on "
                                 "overlapping addresses")
        seen.append((key, uri, address, port))


def _overlap(a: tuple, b: tuple) -> bool:
    """Whether two bound addresses ``(family, host, v6only)`` on one port overlap."""
    wild = {socket.AF_INET: "0.0.0.0", socket.AF_INET6: "::"}
    if a[0] == b[0]:
        return a[1] == b[1] or wild[a[0]] in (a[1], b[1])
    six, four = (a, b) if a[0] == socket.AF_INET6 else (b, a)
    # an IPv6 wildcard without IPV6_V6ONLY takes the port on every IPv4 address too
    return (six[1] == "::" and not six[2]) or (
        four[1] == "0.0.0.0" and six[1].startswith("::ffff:"))


def _bind_tcp(uri: str, host: str, port: int, key: str) -> socket.socket:
    host = host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise StartError(f"{key}: cannot bind {uri}: {e.strerror}") from None
    return sock


def check_unix_listener_dir(uri: str, log_dirs: list[str]) -> None:
    """A unix socket's directory must exist (nothing is created for it), unless a
    log dir about to be created makes it (the default ./data/hostbroker.sock)."""
    parsed = parse_listener(uri)
    if parsed[0] != "unix":
        return
    parent = os.path.dirname(os.path.abspath(parsed[1]))
    if os.path.isdir(parent):
        return
    if any(os.path.abspath(d).startswith(parent + os.sep) for d in log_dirs):
        return
    if os.path.exists(parent):
        raise StartError(f"listeners: {uri}: {parent} is not a directory")
    raise StartError(f"listeners: {uri}: directory {parent} does not exist")


def _remove_stale_socket(path: str, uri: str) -> None:
    """A socket file left by a crashed broker is removed; one in use is an error."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise StartError(f"listeners: {uri}: {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)  # a listener that never accepts (its queue full) must not hang the start
    try:
        probe.connect(path)
    except OSError:
        if not _bound_elsewhere(path):
            os.unlink(path)
            return
    finally:
        probe.close()
    raise StartError(f"listeners: {uri}: another broker is listening on {path}")


def _bound_elsewhere(path: str) -> bool:
    """Whether a socket is bound at ``path`` (a broker still starting binds before it
    listens, so a refused connection alone does not make the file stale)."""
    try:
        with open("/proc/net/unix", "rb") as f:
            return any(line.rstrip(b"\n").split(None, 7)[7:] == [os.fsencode(path)]
                       for line in f)
    except OSError:
        return False


def check_log_dir(path: str) -> None:
    """Refuse, with one line, a log dir that cannot be used; change nothing."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):  # the nearest ancestor that exists
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        where = "" if probe == os.path.abspath(path) else f"{probe} "
        what = "is a file, not a directory" if os.path.isfile(probe) else "is not a directory"
        raise StartError(f"log.dirs: cannot use {path}: {where}{what}")
    if not os.access(probe, os.R_OK | os.W_OK | os.X_OK):
        raise StartError(f"log.dirs: cannot use {path}: {probe} is not writable")
    if os.geteuid() == 0:  # docs/storage.md, "Who may touch the files"
        problem = files.writable_by_others(path)
        if problem:
            raise StartError(f"log.dirs: refusing {path} as root: {problem}; make it "
                             "root's alone (chmod go-w) or run the broker as its own user")


def make_log_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise StartError(f"log.dirs: cannot use {path}: {e.strerror}") from None


def claim_broker_lock(log_dir: str) -> int:
    """Hold ``<first log dir>/.broker.lock`` for the broker's life (flock, with
    our pid in it), or fail with one line naming the broker that holds it."""
    path = os.path.join(log_dir, ".broker.lock")
    try:
        fd = files.open_lock_file(path, "the broker lock")
    except OSError as e:
        raise StartError(f"log.dirs: cannot use {path}: {files.describe(e)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StartError(f"log.dirs: {log_dir} is in use by another broker (pid {holder})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def resolve_dir_ids(plan) -> None:
    """Set ``plan.dir_ids``: each log dir's id from its ``log-dir-id`` file; a dir
    without one (a fresh disk, or one used before ids) is given the next id above
    every id found and every id the newest state file names (so a fresh disk never
    takes a dead disk's id), written now (``log/dirids.assign_dir_ids``). A dir
    whose id file is bad gets -1 and starts offline (one line). Two dirs holding
    one id refuse the start, as does a ``default.replication.factor`` above the
    number of log dirs (standalone). Also ``plan.dir_devices``: each dir's
    ``st_dev`` now (-1: unknown), which hb-logdirs places replicas by, so that
    a hung disk never stalls it on a stat.

    Only where hb-logdirs runs (``plan.logdirs``: standalone, two log dirs or
    more). Elsewhere (one log dir, or cluster mode) no id file is read or
    written: every id is -1 and no dir starts offline for its id file."""
    from hostbroker.log.dirids import DuplicateDirIdError, assign_dir_ids
    from hostbroker.settings_logdirs import replication_factor_problem, state_online_problem

    problem = replication_factor_problem(plan.config["default.replication.factor"],
                                         len(plan.log_dirs), plan.registrar) \
        or state_online_problem(plan.config["logdirs.state.max.online"], len(plan.log_dirs),
                                plan.registrar)
    if problem:
        raise StartError(problem)
    if not plan.logdirs:
        plan.dir_ids = [-1] * len(plan.log_dirs)
        return

    def report(line: str) -> None:
        print(f"hostbroker: {line}", file=sys.stderr, flush=True)

    try:
        ids = assign_dir_ids(plan.log_dirs, _state_file_ids(plan.log_dirs, plan.config),
                             report)
    except DuplicateDirIdError as e:
        raise StartError(str(e)) from None
    plan.dir_ids = [-1 if dir_id is None else dir_id for dir_id in ids]
    plan.dir_devices = [_device(path) for path in plan.log_dirs]


def _device(path: str) -> int:
    try:
        return os.stat(path).st_dev
    except OSError:
        return -1


def _state_file_ids(log_dirs: list[str], config) -> set[int]:
    """Every dir id the newest readable state file copy names (empty: none)."""
    from hostbroker.errors import HostbrokerError
    from hostbroker.replication.localstate import STATE_FILE, StateLimits, decode_state
    from hostbroker.replication.localstate import newest

    limits = StateLimits.of(config)
    copies = {}
    for index, path in enumerate(log_dirs):
        name = os.path.join(path, STATE_FILE)
        try:
            data = files.read_file(name, limits.max_bytes)
            if len(data) <= limits.max_bytes:
                copies[index] = decode_state(data, name, limits)
        except (OSError, HostbrokerError):
            continue  # (hb-logdirs says why when it reads the copies)
    state, _ = newest(copies)
    return set() if state is None else state.known_ids()
