#!/usr/bin/env python3
"""What do replicas across log dirs cost, and how fast do a failed dir's leaderships move,
on one standalone broker?

Run by hand (not a test), as root (the failover part mounts a tmpfs), from the repository
with its venv::

    .venv/bin/python tools/bench/logdirs.py                       # everything, defaults
    .venv/bin/python tools/bench/logdirs.py --only produce --dirs /srv/d1,/srv/d2 --repeats 4
    .venv/bin/python tools/bench/logdirs.py --only failover --fail remove --repeats 5 --json

- ``produce``: 100-byte messages from one async :class:`~hostbroker.client.Producer` to a
  topic of 3 partitions on a broker of two log dirs, in turns: replication factor 1 with
  acks=1, then replication factor 2 (one replica on each dir) with acks=-1, ``--repeats``
  pairs (a new topic each run; every other pair in the other order). Each RF 2 run is
  compared with the RF 1 run next to it; the target is every ratio >= 0.6. ``--dirs``
  names the two dirs (real mounts, for two disks); the default is two dirs under one
  scratch dir, so on one disk, and the report says so.
- ``failover``: replication factor 2, acks=-1, one message at a time on the wire (no
  retries hidden in a library, as ``replication.py failover`` does). The broker has two
  dirs on disk and a tmpfs; the partition's leader is moved onto the tmpfs
  (``reassign --bootstrap``). Then the tmpfs is filled by ``fallocate`` of a file until
  ENOSPC (``--fail fill``, the default; the leader's active segment still appends into
  the space it reserved ahead, ``log.preallocate.bytes``, so messages of
  ``--failover-size`` bytes, 1000 by default, run through that first), or unmounted
  with ``umount -l`` (``--fail remove``: only the writers' probe finds that, so its gap
  adds ``log.dir.check.interval.ms``). For ``fill`` the gap is the time from the first
  STORAGE_ERROR to the next acknowledgement. For ``remove``, where writes may go on
  succeeding on the lazily unmounted file system until the probe finds it, it is the
  longest wait for an acknowledgement from the unmount to 1 s after the leader moved
  (and the time the move took is reported). Target: at most 1 s for the slowest of
  ``--repeats`` runs. Each run has a broker and a tmpfs of its own.

Brokers are ``hostbroker serve`` with default settings but listeners and log dirs, stopped
by PID at the end; every tmpfs mounted here is unmounted here. The JSON has the shape of
``replication.py --json``: ``machine`` (with ``block_devices``, the machine's disks),
``args``, then one object per part (``produce`` names the device under each dir).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import harness  # noqa: E402

from hostbroker.errors import ErrorCode  # noqa: E402

SIZE = 100
PARTITIONS = 3
STORAGE_ERROR = int(ErrorCode.STORAGE_ERROR)
PRODUCE_TARGET = 0.6
FAILOVER_TARGET_S = 1.0


def block_device(path: str) -> str:
    """The block device holding ``path`` (``vda``, ``nvme0n1p2``), or what its file
    system is when no block device backs it (``no block device (dev 0:45)``: a tmpfs,
    an overlay)."""
    dev = os.stat(path).st_dev
    where = f"{os.major(dev)}:{os.minor(dev)}"
    sys_path = f"/sys/dev/block/{where}"
    if os.path.exists(sys_path):
        return os.path.basename(os.path.realpath(sys_path))
    return f"no block device (dev {where})"


def block_devices() -> dict[str, int]:
    """The machine's block devices that hold anything, name -> bytes (``/sys/block``;
    loop and RAM devices, and devices of size 0, left out): one entry says that two
    dirs cannot be on two disks here."""
    found = {}
    for name in sorted(os.listdir("/sys/block")):
        if name.startswith(("loop", "ram")):
            continue
        try:
            with open(f"/sys/block/{name}/size") as f:
                size = int(f.read()) * 512
        except (OSError, ValueError):
            continue
        if size:
            found[name] = size
    return found


def start_broker(workdir: str, dirs: list[str], settings: list[str]) -> harness.Broker:
    broker = harness.Broker(workdir, [f"log.dirs={','.join(dirs)}", *settings])
    broker.dirs = dirs  # what tests.logdirs.support reads a broker's dirs from
    broker.start()
    return broker


def hostbroker(*args) -> str:
    done = subprocess.run([sys.executable, "-m", "hostbroker", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    if done.returncode:
        raise harness.BenchError(f"hostbroker {' '.join(map(str, args[:2]))}: "
                                 f"{done.stderr.strip()}")
    return done.stdout


def wait(condition, what: str, timeout: float = 60.0, every: float = 0.05,
         said=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - not there yet
            pass
        if time.monotonic() > deadline:
            raise harness.BenchError(f"timed out waiting for {what} {said()}".rstrip())
        time.sleep(every)


def create(broker: harness.Broker, topic: str, partitions: int, rf: int) -> None:
    """``topics create --bootstrap`` with ``--replication-factor``; waits for every leader
    and a full ISR."""
    from hostbroker.shm.partitions import ROLE_LEADER, ROLE_PLAIN
    from tests.logdirs.support import replica_slots

    hostbroker("topics", "create", "--bootstrap", broker.uri("unix"), "--topic", topic,
               "--partitions", partitions, "--replication-factor", rf)

    def settled(p: int) -> bool:
        slots = [s for _, s in replica_slots(broker, topic, p)]
        if rf == 1:
            return len(slots) == 1 and slots[0].role in (ROLE_PLAIN, ROLE_LEADER)
        return len(slots) == rf and any(s.role == ROLE_LEADER and len(s.isr_ids) == rf
                                        for s in slots)

    wait(lambda: all(settled(p) for p in range(partitions)), f"{topic}: leaders, full ISRs")


def produce_run(broker: harness.Broker, topic: str, acks: int, messages: int) -> float:
    from hostbroker.client import Producer

    producer = Producer(broker.uri("unix"), producer_type="async", request_required_acks=acks)
    return harness.send_timed(producer, topic, messages, SIZE)


def bench_produce(args, workdir: str) -> dict:
    from tests.logdirs.support import replica_files_equal

    if args.dirs:
        dirs = [os.path.abspath(d) for d in args.dirs.split(",")]
        if len(dirs) != 2:
            raise harness.BenchError("--dirs names two log dirs")
    else:
        dirs = [os.path.join(workdir, "d0"), os.path.join(workdir, "d1")]
        for d in dirs:
            os.mkdir(d)
    same_device = os.stat(dirs[0]).st_dev == os.stat(dirs[1]).st_dev
    root = os.path.join(workdir, "produce")
    os.mkdir(root)
    broker = start_broker(root, dirs, args.set)
    runs, pairs = [], []
    try:
        harness.warm_up(broker)
        for n in range(args.repeats):
            order = ((1, 1), (2, -1)) if n % 2 == 0 else ((2, -1), (1, 1))
            pair = {}
            for rf, acks in order:
                topic = f"rf{rf}-acks{'all' if acks < 0 else acks}-{n}"
                create(broker, topic, PARTITIONS, rf)
                rate = produce_run(broker, topic, acks, args.messages)
                if rf > 1:  # not timed: the follower holds what was acknowledged
                    wait(lambda topic=topic: all(replica_files_equal(broker, topic, p)
                                                 for p in range(PARTITIONS)),
                         f"{topic}: the replicas equal below the high watermark")
                runs.append({"rf": rf, "acks": acks, "msgs_per_s": rate})
                pair[rf] = rate
                harness.log(f"RF {rf} acks={acks:>2}: {rate:>9.0f} msgs/s")
            pairs.append(pair[2] / pair[1])
    finally:
        broker.stop()
    median = {f"{rf},{acks}": statistics.median(r["msgs_per_s"] for r in runs
                                                if (r["rf"], r["acks"]) == (rf, acks))
              for rf, acks in ((1, 1), (2, -1))}
    return {"runs": runs, "median_msgs_per_s": median, "pair_ratios": pairs,
            "ratio_to_rf1_acks1": {"2,-1": statistics.median(pairs)},
            "dirs": dirs, "same_device": same_device,
            "devices": [block_device(d) for d in dirs],
            "target": PRODUCE_TARGET, "met": min(pairs) >= PRODUCE_TARGET}


class OneByOne:
    """Sends one message at a time with acks=-1 to partition 0, over the broker's Unix
    socket (one broker: the leader's dir changes, the address does not)."""

    def __init__(self, broker: harness.Broker, topic: str, size: int):
        from tests.replication.support import Wire

        self.broker, self.topic, self.Wire, self.size = broker, topic, Wire, size
        self.acks: list[float] = []  # monotonic times of acknowledgements
        self.errors: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        wire = None
        n = 0
        while not self.stop.is_set():
            try:
                if wire is None:
                    wire = self.Wire(self.broker.unix_path, timeout=30)
                code, _ = wire.produce(self.topic, 0, [f"m{n}".encode().ljust(self.size, b"x")],
                                       acks=-1)
            except Exception:  # noqa: BLE001 - a connection closed under it
                code = -1
                if wire is not None:
                    wire.close()
                wire = None
            if code == 0:
                self.acks.append(time.monotonic())
                n += 1
                continue
            self.errors.append((time.monotonic(), code))
            time.sleep(0.002)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def failover_run(args, workdir: str, n: int) -> dict:
    from tests.logdirs.support import leader_dir, replica_dirs
    from tests.mounts import fill, tmpfs

    root = os.path.join(workdir, f"failover-{n}")
    disks = [os.path.join(root, "d0"), os.path.join(root, "d1")]
    for d in disks:
        os.makedirs(d)
    with tmpfs(os.path.join(root, "small"), f"{args.tmpfs_mb}m") as small:
        broker = start_broker(root, [*disks, small], args.set)
        sender = None
        try:
            create(broker, "failover", 1, 2)
            leader = leader_dir(broker, "failover", 0)
            if leader != small:  # the leader leaves its dir: the first target leads
                keep = [d for d in disks if d != leader][0]
                plan = os.path.join(root, "plan.json")
                with open(plan, "w") as f:
                    f.write('{"version":1,"partitions":[{"topic":"failover","partition":0,'
                            f'"log_dirs":["{small}","{keep}"]}}]}}')
                hostbroker("reassign", "execute", "--bootstrap", broker.uri("unix"),
                           "--reassignment-json-file", plan)
                wait(lambda: leader_dir(broker, "failover", 0) == small
                     and replica_dirs(broker, "failover", 0) == {small, keep},
                     "the leader on the tmpfs", 60)
            sender = OneByOne(broker, "failover", args.failover_size)
            wait(lambda: len(sender.acks) > 200, "200 acknowledged")
            if args.fail == "fill":
                fill(small)
                acked = len(sender.acks)
                wait(lambda: any(c == STORAGE_ERROR for _, c in sender.errors),
                     "a STORAGE_ERROR", 30, every=0.001,
                     said=lambda: (f"{len(sender.acks) - acked} acknowledged since the fill, "
                                   f"error codes {sorted({c for _, c in sender.errors})}, "
                                   f"free {os.statvfs(small).f_bavail} blocks"))
                failed_from = next(t for t, c in sender.errors if c == STORAGE_ERROR)
                wait(lambda: sender.acks[-1] > failed_from,
                     "an acknowledgement after the failure", 60, every=0.001)
                gap = min(t for t in sender.acks if t > failed_from) - failed_from
                moved = None
            else:
                # writes may go on succeeding on the lazily unmounted file system until
                # the writers' probe finds it: the gap is the longest wait for an
                # acknowledgement from the unmount until the leader moved, and 1 s after
                failed_from = time.monotonic()
                subprocess.run(["umount", "-l", small], check=True, timeout=30)
                wait(lambda: leader_dir(broker, "failover", 0) not in (None, small),
                     "the leader off the removed dir", 30, every=0.001)
                moved = time.monotonic() - failed_from
                until = time.monotonic() + 1.0
                wait(lambda: sender.acks[-1] > until, "acknowledgements after the move", 60)
                times = [failed_from, *(t for t in sender.acks if failed_from < t <= until)]
                gap = max(b - a for a, b in zip(times, times[1:]))
            errors = sum(1 for t, _ in sender.errors if t >= failed_from)
            harness.log(f"run {n}: {args.fail}: acknowledged again after {gap * 1000:.0f} ms "
                        f"({errors} error answers"
                        + (f"; leader moved {moved * 1000:.0f} ms after the unmount)"
                           if moved is not None else ")"))
            return {"gap_s": gap, "error_answers": errors, "moved_after_s": moved}
        finally:
            if sender is not None:
                sender.close()
            broker.stop()


def bench_failover(args, workdir: str) -> dict:
    runs = [failover_run(args, workdir, n) for n in range(args.repeats)]
    gaps = [r["gap_s"] for r in runs]
    target = FAILOVER_TARGET_S + (args.check_interval_ms / 1000 if args.fail == "remove" else 0)
    return {"fail": args.fail, "runs": runs, "gap_p50_s": statistics.median(gaps),
            "gap_max_s": max(gaps), "target_s": target, "met": max(gaps) <= target}


def run(args) -> dict:
    workdir = tempfile.mkdtemp(prefix="hb-bench-logdirs-")
    try:
        report = {"machine": {**harness.machine_info(), "block_devices": block_devices()},
                  "args": vars(args)}
        for part, fn in (("produce", bench_produce), ("failover", bench_failover)):
            if args.only in (None, part):
                report[part] = fn(args, workdir)
        return report
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def print_report(report: dict) -> None:
    disks = report["machine"].get("block_devices", {})
    print("block devices: " + (", ".join(f"{name} {size / 2**30:.0f} GiB"
                                         for name, size in disks.items()) or "none found"))
    if "produce" in report:
        p = report["produce"]
        devices = p.get("devices") or ["?", "?"]
        where = (f"two dirs on ONE disk, {devices[0]} (the default; --dirs names real mounts)"
                 if p["same_device"] else f"two dirs on two devices, {' and '.join(devices)}")
        print(f"produce 100 B, {PARTITIONS} partitions, one async producer, {where}:")
        for key, rate in p["median_msgs_per_s"].items():
            rf, acks = key.split(",")
            print(f"  RF {rf} acks={acks:>2}  {rate:>9.0f} msgs/s (median)")
        ratios = ", ".join(f"{r:.2f}" for r in p["pair_ratios"])
        print(f"  RF 2 acks=-1 / the RF 1 acks=1 run beside it: {ratios} "
              f"(target >= {p['target']}: {'met' if p['met'] else 'NOT met'})")
    if "failover" in report:
        f = report["failover"]
        gaps = ", ".join(f"{r['gap_s'] * 1000:.0f}" for r in f["runs"])
        print(f"failover ({f['fail']}): acknowledged again after {gaps} ms; slowest "
              f"{f['gap_max_s'] * 1000:.0f} ms (target {f['target_s'] * 1000:.0f} ms: "
              f"{'met' if f['met'] else 'NOT met'})")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("produce", "failover"))
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--dirs", metavar="A,B",
                        help="produce: the two log dirs (default: two dirs on one disk)")
    parser.add_argument("--fail", choices=("fill", "remove"), default="fill",
                        help="failover: fill the tmpfs (ENOSPC) or unmount it")
    parser.add_argument("--failover-size", type=int, default=1000,
                        help="failover: bytes a message (the leader's segment reserves "
                             "1 MiB or more ahead, which a fill leaves it: larger messages "
                             "reach ENOSPC sooner; the gap does not depend on it)")
    parser.add_argument("--tmpfs-mb", type=int, default=64,
                        help="failover: the size of the leader's tmpfs")
    parser.add_argument("--check-interval-ms", type=int, default=200,
                        help="log.dir.check.interval.ms of the brokers (added to the "
                             "target of --fail remove)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable; tuned runs say so)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--json-out", metavar="FILE", help="also write the report here")
    args = parser.parse_args(argv)
    args.set = [f"log.dir.check.interval.ms={args.check_interval_ms}", *args.set]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    harness.output(run(args), args, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
