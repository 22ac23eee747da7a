"""``hostbroker groups list|describe|reset-offsets --bootstrap``: the groups of a
standalone broker, whose offsets the broker keeps (OFFSET_FETCH /
OFFSET_COMMIT; docs/tools.md "groups").

``list`` prints the groups with members (LIST_GROUPS) and those with only
committed offsets (LIST_OFFSET_GROUPS), the latter marked ``(no members)``.
``describe`` is given the topics or, without them, takes those the members
hold streams of and those LIST_OFFSET_GROUPS of the group names (the topics
it has committed offsets on); a subscribed topic the broker lacks, or one
the group committed on that is gone, is said and left out, a name no topic
can have never asked for; a group with neither members nor committed
offsets is a command error. It reads the committed offsets of those topics'
partitions only (OFFSET_FETCH, :data:`FETCH_CHUNK` partitions a request),
and shows what the broker's group coordinator holds (DESCRIBE_GROUP,
docs/spec/groups.md) for a group with members: its phase and generation,
each member (id, client id, session timeout) and, per partition, the
member's stream that owns it (``member_id-stream``); a group without
members, or a broker that does not serve groups, shows the offsets alone.
``reset-offsets`` is given the topic; a reset under a live consumer is
overwritten by its next commit, so it is refused while the group has one.

The table, the listing and ``--to`` are :mod:`hostbroker.commands.groups`'.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TextIO

from hostbroker.commands import DEFAULT_BOOTSTRAP, check_bootstrap, check_topic
from hostbroker.exits import EXIT_OK, CommandError, plural, usage_error
from hostbroker.commands.groups import Row, offset_at, parse_to, print_groups, print_table, \
    say_reset


def _client(bootstrap: str):
    from hostbroker.client.simple import SimpleClient

    return SimpleClient(check_bootstrap(bootstrap), client_id="hostbroker-groups")


def _standalone_partitions(client, topics: list[str], missing: list[str] | None = None
                           ) -> dict[str, list]:
    """topic -> its partitions as METADATA version 1 gives them (``high_watermark``:
    where consumers stop, the log end of an unreplicated partition); a topic the broker
    does not know is a command error, or, given ``missing``, added to it and left out."""
    from hostbroker.errors import ErrorCode

    if not topics:
        raise usage_error("with --bootstrap, name the group's topics with --topic")
    found = {}
    for topic in client.metadata_v1([check_topic(t) for t in topics]).topics:
        if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            if missing is None:
                raise CommandError(f"no topic {topic.topic}")
            missing.append(topic.topic)
            continue
        found[topic.topic] = sorted(topic.partitions, key=lambda p: p.partition)
    return found


def _legal(topic: str) -> bool:
    try:
        check_topic(topic)
    except CommandError:
        return False
    return True


def _committed(client, group: str, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The broker's stored offsets of ``group`` (absent where it never committed),
    asked :data:`FETCH_CHUNK` partitions at a time."""
    keys, found = list(keys), {}
    for at in range(0, len(keys), FETCH_CHUNK):
        results = client.offset_fetch(group, keys[at:at + FETCH_CHUNK])
        found.update({(r.topic, r.partition): r.offset for r in results if r.offset >= 0})
    return found


# partitions asked for in one OFFSET_FETCH by describe without --topic
FETCH_CHUNK = 1000  # partitions one OFFSET_FETCH asks for


def _offset_groups(bootstrap: str, err: TextIO) -> tuple[list[str], bool]:
    """The groups the broker's offsets store holds (LIST_OFFSET_GROUPS), and
    whether the broker could say: an older one, or a coordinator not
    answering, gives none, with one line on stderr."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.commands import describe_error
    from hostbroker.errors import ErrorCode, HostbrokerError

    try:
        with _client(bootstrap) as client:
            answer = client.list_offset_groups()
    except BrokerError as exc:
        if exc.code == ErrorCode.UNSUPPORTED_VERSION:
            return [], False  # a broker that cannot list them: as before
        print(f"hostbroker groups list: groups with only committed offsets not shown: "
              f"{describe_error(exc, bootstrap)[0]}", file=err)
        return [], False
    except (HostbrokerError, OSError) as exc:
        print(f"hostbroker groups list: groups with only committed offsets not shown: "
              f"{describe_error(exc, bootstrap)[0]}", file=err)
        return [], False
    if answer.error_code != ErrorCode.NONE:
        print(f"hostbroker groups list: groups with only committed offsets not shown: "
              f"broker error: {getattr(answer.error_code, 'name', answer.error_code)}",
              file=err)
        return [], False
    if answer.truncated:
        print(f"hostbroker groups list: only the first {len(answer.groups)} groups with "
              "committed offsets fit one answer", file=err)
    return [g.group for g in answer.groups], True


def list_standalone(*, as_json: bool = False, bootstrap: str = DEFAULT_BOOTSTRAP,
                    out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Every group of the broker, one a line, sorted: those with members
    (LIST_GROUPS) and those with only committed offsets (LIST_OFFSET_GROUPS),
    marked ``(no members)``. A broker that does not serve groups is a command
    error."""
    from hostbroker.client.coordinator_requests import CoordinatorClient
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import ErrorCode

    client = CoordinatorClient([check_bootstrap(bootstrap)], timeout=10.0,
                               client_id="hostbroker-groups")
    try:
        live = client.list_groups()
    except BrokerError as exc:
        if exc.code == ErrorCode.UNSUPPORTED_VERSION:
            raise CommandError(f"the broker at {bootstrap} does not serve consumer groups "
                               "(no LIST_GROUPS); use describe --group G --topic T") from None
        raise
    finally:
        client.close()
    stored, _ = _offset_groups(bootstrap, err)
    bare = sorted(set(stored) - set(live))
    print_groups(sorted({*live, *stored}), as_json, out, bare)
    return EXIT_OK


def _topics_with_offsets(client, group: str, bootstrap: str, err: TextIO) -> list[str]:
    """The topics ``group`` has committed offsets on, sorted: LIST_OFFSET_GROUPS
    of the group alone. A list the broker cut short is said on stderr; a broker
    that cannot list them is a usage error (name the topics)."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import ErrorCode

    try:
        answer = client.list_offset_groups([group])
    except BrokerError as exc:
        if exc.code == ErrorCode.UNSUPPORTED_VERSION:
            raise usage_error(f"the broker at {bootstrap} cannot list a group's topics: "
                              "name them with --topic") from None
        raise
    if answer.error_code != ErrorCode.NONE:
        raise BrokerError(answer.error_code, f"listing the topics of group {group}")
    topics = answer.topics_of(group)
    if answer.truncated:
        print(f"hostbroker groups describe: only the first {plural(len(topics), 'topic')} "
              f"group {group} has committed offsets on fit one answer; name others with "
              "--topic", file=err)
    return sorted(topics)


def _coordinator_state(bootstrap: str, group: str):
    """The broker's DESCRIBE_GROUP answer for ``group``; None when it does not serve groups."""
    from hostbroker.client.coordinator_requests import CoordinatorClient
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import ErrorCode

    client = CoordinatorClient([bootstrap], timeout=10.0, client_id="hostbroker-groups")
    try:
        answer = client.describe_group(group)
    except BrokerError as exc:
        if exc.code == ErrorCode.UNSUPPORTED_VERSION:
            return None
        raise
    finally:
        client.close()
    if answer.error_code != ErrorCode.NONE:
        raise BrokerError(answer.error_code, f"describing group {group}")
    return answer


def _member_json(member) -> dict:
    return {"member_id": member.member_id, "client_id": member.client_id,
            "session_timeout_ms": member.session_timeout_ms,
            "assignment": [{"topic": a.topic, "stream": a.stream,
                            "partitions": list(a.partitions)} for a in member.assignment]}


def _subscribed(state) -> list[str]:
    """The topics the members of a DESCRIBE_GROUP answer have streams of, sorted; a
    name no topic can have (any member subscribes to what it likes) left out."""
    if state is None:
        return []
    return sorted(t for t in {a.topic for m in state.members for a in m.assignment}
                  if _legal(t))


def describe_standalone(group: str, topics: list[str], *, as_json: bool = False,
                        bootstrap: str = DEFAULT_BOOTSTRAP, out: TextIO = sys.stdout,
                        err: TextIO = sys.stderr) -> int:
    """Committed offset, log end and lag of ``group`` on every partition of ``topics``
    (without topics, those its members subscribe to and those it has committed
    offsets on), with the members and owners the broker's group coordinator
    holds. A group the broker knows nothing of (no member, no committed offset
    of those topics) is a command error."""
    check_bootstrap(bootstrap)
    topics = [check_topic(t) for t in topics]
    state = _coordinator_state(bootstrap, group)
    members = list(state.members) if state is not None else []
    given = bool(topics)
    if not topics:
        if state is None:
            raise usage_error(f"the broker at {bootstrap} does not serve consumer groups: "
                              "name the group's topics with --topic")
        with _client(bootstrap) as client:
            stored = [t for t in _topics_with_offsets(client, group, bootstrap, err)
                      if _legal(t)]
        topics = sorted({*_subscribed(state), *stored})
        if not topics and members:
            raise CommandError(f"group {group} is rebalancing ({state.phase}): its members "
                               "hold no streams yet; try again, or name its topics with --topic")
        if not topics:
            raise CommandError(f"no group {group} on the broker at {bootstrap}: no members "
                               "and no committed offset")
    missing: list[str] = []
    with _client(bootstrap) as client:
        # a topic a member subscribes to need not exist: said, and left out
        held = _standalone_partitions(client, topics, None if given else missing)
        keys = [(t, p.partition) for t in sorted(held) for p in held[t]]
        committed = _committed(client, group, keys)
    subscribed = set(_subscribed(state))
    for how, names in (("subscribed to", [t for t in missing if t in subscribed]),
                       ("committed on", [t for t in missing if t not in subscribed])):
        if names:
            print(f"hostbroker groups describe: no topic {', '.join(names)} on the broker "
                  f"({how} by group {group})", file=err)
    if not members and not committed:
        raise CommandError(f"no group {group} on the broker at {bootstrap}: no members, and no "
                           f"offset committed on {', '.join(sorted(held))}")
    owners = {(a.topic, p): f"{m.member_id}-{a.stream}"
              for m in members for a in m.assignment for p in a.partitions}
    rows = [Row(t, -1, p.partition, owners.get((t, p.partition)),
                committed.get((t, p.partition)), p.high_watermark)
            for t in sorted(held) for p in held[t]]
    if as_json:
        shown = {"group": group}
        if members:
            shown.update({"phase": state.phase, "generation": state.generation,
                          "members": [_member_json(m) for m in members]})
        print(json.dumps({**shown, "partitions": [r.as_json() for r in rows]}, indent=2),
              file=out)
        return EXIT_OK
    if not members:
        print(f"group: {group}  (offsets kept by the broker at {bootstrap})", file=out)
        print_table(rows, out, owners=False)
        return EXIT_OK
    print(f"group: {group}  generation {state.generation}, {state.phase}, "
          f"{plural(len(members), 'member')}  (offsets kept by the broker at {bootstrap})",
          file=out)
    for m in members:
        streams = ", ".join(f"{a.topic} {a.stream}: {len(a.partitions)}" for a in m.assignment)
        print(f"  {m.member_id}  client {m.client_id}  session {m.session_timeout_ms} ms"
              f"  partitions per stream: {streams or '-'}", file=out)
    print_table(rows, out, owners=True)
    return EXIT_OK


def reset_standalone(group: str, topic: str, to: str, *, bootstrap: str = DEFAULT_BOOTSTRAP,
                     out: TextIO = sys.stdout) -> int:
    """Store the offset for ``to`` as ``group``'s on every partition of ``topic`` (OFFSET_COMMIT)."""
    time = parse_to(to)
    state = _coordinator_state(bootstrap, group)
    if state is not None and state.members:
        # The broker would refuse the commit (a group with members takes commits only
        # from its current generation), and the members would read on from their own.
        live = [m.member_id for m in state.members]
        raise CommandError(f"group {group} has {plural(len(live), 'live member')} "
                           f"({', '.join(live)}); stop its consumers first")
    with _client(bootstrap) as client:
        partitions = _standalone_partitions(client, [topic])[topic]
        old = _committed(client, group, [(topic, p.partition) for p in partitions])
        new = {p.partition: offset_at(client, topic, p.partition, time) for p in partitions}
        client.offset_commit(group, [(topic, p, o, None) for p, o in sorted(new.items())])
    say_reset(group, topic, [(str(p), old.get((topic, p)), o) for p, o in sorted(new.items())],
               out)
    return EXIT_OK
