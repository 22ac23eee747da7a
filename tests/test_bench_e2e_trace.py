"""tools/bench/e2e_trace.py: reading a scheduler trace into activations, and
which messages met a long one; its tracer settings put back; the kept
end-to-end messages it traces."""

import importlib.util
import os
import pathlib
import sys

import pytest

_BENCH = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench"
sys.path.insert(0, str(_BENCH))  # it imports its neighbours (harness, latency_loads)
_spec = importlib.util.spec_from_file_location("e2e_trace", _BENCH / "e2e_trace.py")
et = importlib.util.module_from_spec(_spec)
sys.modules["e2e_trace"] = et  # its dataclasses look their module up
_spec.loader.exec_module(et)


def switch(cpu: int, t: float, prev: tuple[str, int, int], next_: tuple[str, int]) -> str:
    """A ``trace`` line of a sched_switch, recorded with record-tgid."""
    comm, pid, tgid = prev
    tg = "-------" if tgid < 0 else f"{tgid:>7}"
    return (f"  {comm}-{pid}  ({tg}) [{cpu:03d}] d..2. {t:.6f}: sched_switch: prev_comm={comm}"
            f" prev_pid={pid} prev_prio=120 prev_state=S ==> next_comm={next_[0]}"
            f" next_pid={next_[1]} next_prio=120\n")


IDLE = ("swapper/0", 0, -1)

TRACE = [
    "# tracer: nop\n",
    switch(0, 10.000000, IDLE, ("hb-writer-0", 50)),
    "  <idle>-0  (-------) [001] dNh2. 10.000010: sched_wakeup: comm=python pid=70 prio=120 target_cpu=001\n",
    switch(0, 10.000100, ("hb-writer-0", 50, 50), ("python", 71)),  # writer ran 100 µs
    switch(0, 10.000300, ("python", 71, 70), ("swapper/0", 0)),  # thread 71 of group 70
    # CPU 1: what ran before the trace began is not known, so no activation
    switch(1, 10.000050, ("python", 72, 70), ("swapper/1", 0)),
    # the switch to pid 60 is not in the trace, the one away from it is
    switch(1, 10.000400, ("hb-proc-0", 60, 60), ("swapper/1", 0)),
    switch(1, 10.001000, ("swapper/1", 0, -1), ("hb-proc-0", 60)),
    switch(1, 10.003000, ("hb-proc-0", 60, 60), ("swapper/1", 0)),  # 2 ms
]


def test_switches_are_read_with_their_thread_groups():
    switches = list(et.parse_switches(TRACE))
    assert len(switches) == 7
    first, third = switches[0], switches[2]
    assert (first.cpu, first.t, first.prev_pid, first.prev_tgid, first.next_pid) == (
        0, 10.0, 0, -1, 50)
    assert (third.prev_comm, third.prev_pid, third.prev_tgid) == ("python", 71, 70)


def test_activations_by_role_and_the_switches_left_out():
    acts, missing = et.activations(et.parse_switches(TRACE), {70: "producer"})
    assert missing == 1  # hb-proc-0 left CPU 1 at 10.0004 never having come onto it
    got = [(a.name, round((a.end - a.start) * 1e6)) for a in acts]
    assert got == [("hb-writer-0", 100), ("producer", 200), ("hb-proc-0", 2000)]
    split, _ = et.activations(et.parse_switches(TRACE), {70: "naive"}, frozenset({70}))
    assert [a.name for a in split] == ["hb-writer-0", "naive-71", "hb-proc-0"]


def test_events_the_buffer_dropped_are_counted_from_the_header():
    assert et.entries_lost(["# tracer: nop\n", "#\n",
                            "# entries-in-buffer/entries-written: 900/1000   #P:2\n",
                            "#\n", "  x-1  (1) [000] ..."]) == 100
    assert et.entries_lost(TRACE) == 0  # no such header line: nothing known lost
    assert et.entries_lost(["# entries-in-buffer/entries-written: 7/7   #P:2\n"]) == 0


def test_long_activations_are_past_their_own_process_percentile():
    acts = [et.Activation("w", float(i), i + d) for i, d in enumerate([1e-4] * 99 + [1e-3])]
    acts += [et.Activation("p", 200.0 + i, 200.0 + i + 5e-5) for i in range(10)]
    procs = et.per_process(acts, 95.0)
    assert procs["w"]["n"] == 100 and round(procs["w"]["p50_us"]) == 100
    assert [a.end - a.start for a in procs["w"]["long"]] == [pytest.approx(1e-3)]
    assert procs["p"]["long"] == []  # all alike: none past its own percentile


def test_slow_messages_are_told_by_whether_a_long_activation_overlaps_them():
    # 100 messages a ms apart, 0.5 ms each, but for the one sent at 50 ms (3 ms)
    messages = [(i * 1_000_000, 3_000_000 if i == 50 else 500_000) for i in range(100)]
    long = [et.Activation("w", 0.0513, 0.0522),  # inside the slow one's window
            et.Activation("w", 0.0902, 0.0903)]  # inside message 90's
    w = et.slow_windows(messages, long)
    assert w["slowest 1 %"] == {"messages": 1, "with_long": 1}
    # message 90 (90.0-90.5 ms), and 51 and 52, which overlap the first one
    assert w["the rest"] == {"messages": 99, "with_long": 3}
    assert et.slow_windows([], long) == {}


def test_the_slowest_are_told_whose_long_activations_they_overlap():
    messages = [(i * 1_000_000, 3_000_000 if i == 50 else 500_000) for i in range(100)]
    procs = {"writer": {"long": [et.Activation("writer", 0.0513, 0.0522)]},
             "producer": {"long": [et.Activation("producer", 0.0525, 0.0526),
                                   et.Activation("producer", 0.0902, 0.0903)]},
             "consumer": {"long": [et.Activation("consumer", 0.0100, 0.0101)]}}
    # the one slowest message (50.0-53.0 ms) overlaps the writer's and one of the producer's
    assert et.slow_by_process(messages, procs) == {"producer": 1, "writer": 1}
    assert et.slow_by_process([], procs) == {}


def test_the_tracer_puts_back_what_it_found(tmp_path):
    before = {"tracing_on": "1\n", "trace_clock": "[local] global mono\n",
              "buffer_size_kb": "7 (expanded: 1408)\n", "set_event": "irq:irq_handler_entry\n",
              "options/record-tgid": "0\n", "trace": ""}
    (tmp_path / "options").mkdir()
    for name, value in before.items():
        (tmp_path / name).write_text(value)
    with et.Tracer(4096, root=str(tmp_path)) as tracer:
        assert (tmp_path / "trace_clock").read_text() == "mono"
        assert (tmp_path / "options/record-tgid").read_text() == "1"
        assert (tmp_path / "set_event").read_text() == et.EVENTS
        tracer.start()
        assert (tmp_path / "tracing_on").read_text() == "1"
        (tmp_path / "trace").write_text("recorded\n")
        tracer.stop(str(tmp_path / "copy"))
        assert (tmp_path / "copy").read_text() == "recorded\n"
    after = {name: (tmp_path / name).read_text() for name in before if name != "trace"}
    assert after == {"tracing_on": "1", "trace_clock": "local", "buffer_size_kb": "7",
                     "set_event": "irq:irq_handler_entry\n", "options/record-tgid": "0"}


def test_arguments():
    a = et.parse_args(["--target", "naive", "--messages", "500", "--percentile", "95"])
    assert (a.target, a.messages, a.percentile, a.socket) == ("naive", 500, 95.0, "tcp")
    for bad in (["--messages", "10"], ["--percentile", "100"], ["--buffer-kib", "1"],
                ["--buffer-kib", str(2 << 20)]):
        with pytest.raises(SystemExit):
            et.parse_args(bad)


def test_the_end_to_end_load_keeps_each_message_and_both_clients(tmp_path):
    from latency_loads import create_topics, run_e2e

    from tests.integration.broker import Broker

    broker = Broker(tmp_path).start()
    try:
        create_topics(broker.unix)
        r = run_e2e(broker.tcp, et.TOPIC, 0.5, 200, keep=True)
    finally:
        broker.stop()
    assert r["received"] == r["sent"] == 100 == len(r["messages"])
    sends = [s for s, _ in r["messages"]]
    assert sends == sorted(sends) and all(lat > 0 for _, lat in r["messages"])
    assert r["pids"][0] == os.getpid() and r["pids"][1] != os.getpid()
