"""``hostbroker topics describe --zookeeper``: every topic of a cluster, both kinds.

The live brokers are read from ZooKeeper (``/brokers/ids``), then:

- replicated topics (docs/cluster.md, "Replicated topics") come from ZooKeeper
  alone (:func:`hostbroker.commands.replicated.describe`): each partition's
  leader, replicas and ISR from the state nodes, the topic's config overrides
  from ``/config/topics/[topic]``, where the cluster keeps them;
- 0.7-style topics (per-broker partitions) come from each live broker that
  holds them: its METADATA for the partitions, and its DESCRIBE_TOPIC_CONFIGS
  for the overrides, which are that broker's (``topics alter --zookeeper``
  changes every broker holding the topic; ``--bootstrap`` one broker only).

Overrides are printed as standalone ``describe`` prints them, a line
``  config: KEY=VALUE ...`` under the topic's line (``config`` in
``--json``). A 0.7 topic whose brokers hold different overrides (one was
altered alone, or was down during an alter) gets one line per broker
(``  config on broker N: ...``; ``"config": null`` and every broker's under
``broker_configs`` in ``--json``). Everything read is hostile: a config node
that does not decode, or a broker that cannot say, is one line on stderr
naming it (that topic's overrides are not shown: ``"config": null``), a
value that would break its line is shown escaped, and the other topics are
still described; the status is what the partitions' answers give.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from hostbroker.exits import EXIT_BROKER, EXIT_OK

_COMMAND = "topics describe"


def _broker_configs(client, broker_id: int, topics: list[str],
                    err: TextIO) -> dict[str, dict[str, str]] | None:
    """topic -> the overrides broker ``broker_id`` holds (DESCRIBE_TOPIC_CONFIGS);
    None, with one line on stderr unless the broker is one that cannot say
    (no DESCRIBE_TOPIC_CONFIGS), when it does not answer."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.commands import describe_error
    from hostbroker.errors import ErrorCode, HostbrokerError

    try:
        found = client.describe_topic_configs(topics)
    except (HostbrokerError, OSError) as exc:
        if isinstance(exc, BrokerError) and exc.code == ErrorCode.UNSUPPORTED_VERSION:
            return None
        print(f"hostbroker {_COMMAND}: broker {broker_id}: configs not shown: "
              f"{describe_error(exc, None)[0]}", file=err)
        return None
    return {t.topic: {e.key: e.value for e in t.configs} for t in found
            if t.error_code == ErrorCode.NONE}


def _plain_config(name: str, holders: list[int], configs: dict[int, dict | None]):
    """(the overrides every holder of ``name`` agrees on, or None when they differ
    or none could say; each holder's that could say, by broker id)."""
    said = {b: configs[b][name] for b in holders if name in (configs.get(b) or {})}
    distinct = {json.dumps(c, sort_keys=True) for c in said.values()}
    return (next(iter(said.values())) if len(distinct) == 1 else None), said


def describe_cluster(topics: list[str], *, as_json: bool = False, zookeeper: str,
                     out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """The live brokers, then ``topics`` (every topic when empty) over the whole
    cluster; see the module docstring. A named topic that no live broker holds
    is named on stderr and makes the exit status 1."""
    from hostbroker.commands import replicated
    from hostbroker.commands.replicated import overrides_text
    from hostbroker.commands import topics_shown as shown
    from hostbroker.commands.brokers import each_broker, live_brokers
    from hostbroker.errors import ErrorCode

    with replicated.zookeeper_client(zookeeper) as client:
        copies = replicated.replicated_topics(client, err, _COMMAND)
        if topics:
            copies = {t: a for t, a in copies.items() if t in topics}
        documents = replicated.describe(client, copies, as_json=True, out=out, err=err) \
            if as_json else None
        brokers = live_brokers(zookeeper)
        if not as_json:
            for b in brokers:
                print(f"broker {b.broker_id}: {' '.join(b.uris())}", file=out)
            replicated.describe(client, copies, as_json=False, out=out, err=err)
    rest = [t for t in topics if t not in copies]
    if topics and not rest:
        if as_json:
            print(json.dumps({"brokers": [{"broker": b.broker_id, "uris": b.uris()}
                                          for b in brokers], "topics": documents}, indent=2),
                  file=out)
        return EXIT_OK

    def work(info, c):
        answer = c.metadata(rest)
        names = sorted({t.topic for t in answer.topics if t.topic not in copies
                        and t.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
        return answer, (_broker_configs(c, info.broker_id, names, err) if names else {})

    answers, status = each_broker("describe", brokers, work, err)
    configs = {b: answer[1] for b, answer in answers.items()}
    held: dict[str, list] = {}
    holders: dict[str, list[int]] = {}
    for broker_id in sorted(answers):
        for topic in answers[broker_id][0].topics:
            if topic.topic in copies:
                continue
            held.setdefault(topic.topic, [])
            holders.setdefault(topic.topic, [])
            if topic.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                held[topic.topic].append(topic)
                holders[topic.topic].append(broker_id)
    for name in sorted(held):
        if not held[name]:
            print(f"hostbroker {_COMMAND}: no topic {name}", file=err)
            status = EXIT_BROKER
            del held[name]
    if as_json:
        plain = []
        for name in sorted(held):
            common, said = _plain_config(name, holders[name], configs)
            plain.append({"topic": name, "config": common,
                          "broker_configs": [{"broker": b, "config": c}
                                             for b, c in sorted(said.items())],
                          "partitions": [p for part in held[name]
                                         for p in shown.as_json(part)["partitions"]]})
        document = {
            "brokers": [{"broker": b.broker_id, "uris": b.uris()} for b in brokers],
            "topics": sorted(plain + documents, key=lambda t: t["topic"]),
        }
        print(json.dumps(document, indent=2), file=out)
        return status
    for name in sorted(held):
        parts = held[name]
        errors = sorted({shown.error_name(t.error_code) for t in parts if t.error_code != ErrorCode.NONE})
        count = sum(len(t.partitions) for t in parts)
        print(f"topic: {name}  brokers: {len(parts)}  partitions: {count}"
              + (f"  error: {', '.join(errors)}" if errors else ""), file=out)
        common, said = _plain_config(name, holders[name], configs)
        if common is not None:
            if common:
                print(f"  config: {overrides_text(common)}", file=out)
        else:
            for b, config in sorted(said.items()):
                print(f"  config on broker {b}: {overrides_text(config)}", file=out)
        shown.table([row for t in parts for row in shown.rows(t)], out)
    return status
