"""docs/limits.md names every broker setting that bounds something, with its real
default, so a new limit cannot land without saying what a client sees at it."""

import pathlib
import re

from hostbroker.config import SETTINGS

# Identity, layout and policy: what they set is not a bound a client can hit.
NOT_LIMITS = {
    "broker.id", "listeners", "log.dirs", "num.processors", "num.handlers",
    "num.partitions", "auto.create.topics.enable", "log.segment.bytes",
    "log.retention.hours", "log.retention.bytes", "log.flush.interval.messages",
    "log.flush.interval.ms", "log.flush.offset.checkpoint.interval.ms", "zookeeper.connect",
    "advertised.listeners", "processor.local.requests", "produce.direct.answers",
    "produce.ring.append.min.bytes", "processor.direct.produce", "fetch.writer.polls",
    "processor.direct.groups", "processor.direct.lone.after",
    "processor.direct.produce.max.bytes", "processor.direct.produce.busy.max.bytes",
    "processor.ring.receive", "cpu.wakeup.latency.us", "cpu.realtime.priority",
    "processor.local.fetch", "log.umask",
    "http.listeners", "http.admin.enable", "http.admin.token.file", "http.allowed.hosts",
    "authorizer.enable", "super.users", "allow.everyone.if.no.acl.found", "http.admin.principal",
    "ssl.key.password", "ssl.cipher.suites",
}
TOPIC_CONFIGS = {"max.message.bytes"}

PAGE = (pathlib.Path(__file__).parent.parent / "docs" / "limits.md").read_text()


def broker_rows():
    """(setting names, default cell) of each row of the broker's tables."""
    for line in PAGE.split("## Clients")[0].splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 6 and cells[1] not in ("limit", "---"):
            yield re.findall(r"`([a-z.]+)`", cells[2]), cells[3]


def test_every_limit_setting_is_in_limits_md():
    named = {key for keys, _ in broker_rows() for key in keys}
    missing = [s.key for s in SETTINGS if s.key not in NOT_LIMITS and s.key not in named]
    assert missing == [], f"add these to docs/limits.md (or to NOT_LIMITS): {missing}"


def test_documented_defaults_are_the_declared_ones():
    declared = {s.key: s.default for s in SETTINGS}
    checked = 0
    for keys, default_cell in broker_rows():
        keys = [k for k in keys if k not in TOPIC_CONFIGS]
        defaults = [d.split(" ")[0] for d in default_cell.split(", ")]
        if keys and len(keys) == len(defaults):
            for key, default in zip(keys, defaults):
                assert default == str(declared[key]), (key, default_cell)
                checked += 1
    assert checked >= 25


def test_no_unknown_setting_in_limits_md():
    known = {s.key for s in SETTINGS} | TOPIC_CONFIGS
    assert {key for keys, _ in broker_rows() for key in keys} - known == set()
