"""`moldau topics`: kafka-topics.sh's flags and output (TopicCommand): --create, --list, --describe (its
"Topic: ...\tPartitionCount: ..." lines), --alter --partitions, --delete, and the partition reports
(--under-replicated-partitions, --unavailable-partitions, --under-min-isr-partitions, --at-min-isr-partitions).

--topic is a regular expression (matched against the whole name) except with --create, as in Kafka.
Partition lines show "Elr: N/A\tLastKnownElr: N/A": Metadata, which this asks, carries no eligible leader
replicas.
"""

from __future__ import annotations

import base64
import re
import uuid

from . import command
from .client import AdminClient, ClusterMetadata, NewTopic, TopicInfo, min_insync_replicas
from .command import UsageError

TOOL = "topics"
DEFAULT_CONFIG = 5  # DescribeConfigs' config source of a value nobody set
REPORTS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
           "at_min_isr_partitions")


def add_parser(sub) -> None:
    parser = command.tool_parser(
        sub, TOOL, help="create, list, describe, alter and delete topics (like kafka-topics.sh)",
        description="Create, delete, describe, or change a topic, as kafka-topics.sh does.")
    actions = parser.add_mutually_exclusive_group(required=True)
    for action, text in (("--create", "create a new topic"), ("--list", "list all available topics"),
                         ("--describe", "list details for the given topics"),
                         ("--alter", "alter the number of partitions"), ("--delete", "delete a topic")):
        actions.add_argument(action, action="store_true", help=text)
    parser.add_argument("--topic", help="the topic (a regular expression, except with --create)")
    parser.add_argument("--partitions", type=int, help="partitions of the topic created or altered")
    parser.add_argument("--replication-factor", type=int, help="replicas of each partition of the topic created")
    parser.add_argument("--config", action="append", default=[], metavar="name=value",
                        help="a topic config of the topic created (repeatable)")
    parser.add_argument("--if-exists", action="store_true", help="alter, delete or describe only if the topic exists")
    parser.add_argument("--if-not-exists", action="store_true", help="create only if the topic does not exist")
    parser.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    parser.add_argument("--topics-with-overrides", action="store_true",
                        help="describe only topics with configs of their own")
    for report in REPORTS:
        parser.add_argument("--" + report.replace("_", "-"), action="store_true",
                            help="describe only such partitions")


def run(args) -> int:
    try:
        _check(args)
    except UsageError as exc:
        return command.fail(TOOL, str(exc))
    return command.run(TOOL, args, lambda admin: _ACTIONS[_action(args)](admin, args))


def _action(args) -> str:
    return next(a for a in ("create", "list", "describe", "alter", "delete") if getattr(args, a))


def _check(args) -> None:
    action = _action(args)
    if action in ("create", "alter", "delete") and not args.topic:
        raise UsageError(f"--{action} needs --topic")
    if action == "alter" and args.partitions is None:
        raise UsageError("--alter needs --partitions")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("--partitions must be greater than 0")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise UsageError("--replication-factor must be between 1 and 32767")
    if args.config and action != "create":
        raise UsageError("--config goes with --create (moldau configs alters a topic's configs)")
    if args.replication_factor is not None and action != "create":
        raise UsageError("--replication-factor goes with --create")
    if action != "describe" and (args.topics_with_overrides or any(getattr(args, r) for r in REPORTS)):
        raise UsageError("the partition reports and --topics-with-overrides go with --describe")
    if args.topic and action != "create":
        try:
            re.compile(args.topic)
        except re.error as exc:
            raise UsageError(f"--topic {args.topic!r} is not a regular expression: {exc}") from None


def _configs(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--config {pair!r} is not name=value")
        found[name.strip()] = value.strip()
    return found


async def _matching(admin: AdminClient, args, meta: ClusterMetadata | None = None) -> list[TopicInfo]:
    """The topics --topic names (all without it), sorted; UsageError if it names none and --if-exists is absent."""
    meta = meta or await admin.metadata()
    pattern = re.compile(args.topic) if args.topic else None
    found = [t for name, t in sorted(meta.topics.items())
             if (pattern is None or pattern.fullmatch(name)) and not (args.exclude_internal and t.internal)]
    if args.topic and not found and not args.if_exists:
        raise UsageError(f"Topic '{args.topic}' does not exist as expected")
    return found


async def _create(admin: AdminClient, args) -> None:
    topic = NewTopic(args.topic, args.partitions or -1, args.replication_factor or -1, _configs(args.config))
    if args.if_not_exists and args.topic in (await admin.metadata([args.topic])).topics:
        return
    await admin.create_topics([topic])
    print(f"Created topic {args.topic}.")


async def _list(admin: AdminClient, args) -> None:
    names = [t.name for t in await _matching(admin, args)]
    if names:
        print("\n".join(names))


async def _alter(admin: AdminClient, args) -> None:
    topics = await _matching(admin, args)
    if topics:
        await admin.create_partitions({t.name: args.partitions for t in topics})


async def _delete(admin: AdminClient, args) -> None:
    topics = await _matching(admin, args)
    if topics:
        await admin.delete_topics([t.name for t in topics])


def topic_id(value) -> str:
    """Kafka's text form of a topic id: unpadded URL-safe base64."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


async def _describe(admin: AdminClient, args) -> None:
    meta = await admin.metadata()
    topics = await _matching(admin, args, meta)
    live = set(meta.brokers)
    reports = [r for r in REPORTS if getattr(args, r)]
    lines = []
    all_configs = await admin.describe_topic_configs([t.name for t in topics])
    for t in topics:
        configs = all_configs[t.name]
        overrides = [f"{c['name']}={c['value']}" for c in configs
                     if c.get("config_source", DEFAULT_CONFIG) != DEFAULT_CONFIG and not c.get("is_default")]
        min_isr = min_insync_replicas(configs)
        partitions = [t.partitions[i] for i in sorted(t.partitions)]
        if not reports and (not args.topics_with_overrides or overrides):
            id_text = "" if t.topic_id in (None, uuid.UUID(int=0)) else f"\tTopicId: {topic_id(t.topic_id)}"
            rf = len(partitions[0].replicas) if partitions else 0
            lines.append(f"Topic: {t.name}{id_text}\tPartitionCount: {len(partitions)}\tReplicationFactor: {rf}"
                         f"\tConfigs: {','.join(overrides)}")
        if args.topics_with_overrides:
            continue
        for p in partitions:
            leader = p.leader >= 0
            shown = {"under_replicated_partitions": len(p.replicas) > len(p.isr),
                     "unavailable_partitions": not leader or p.leader not in live,
                     "under_min_isr_partitions": not leader or len(p.isr) < min_isr,
                     "at_min_isr_partitions": len(p.isr) == min_isr}
            if not reports or any(shown[r] for r in reports):
                lines.append(f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader if leader else 'none'}"
                             f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
                             "\tElr: N/A\tLastKnownElr: N/A")
    if lines:
        print("\n".join(lines))


_ACTIONS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter, "delete": _delete}
