"""`moldau consumer-groups`: kafka-consumer-groups.sh's flags and output (ConsumerGroupCommand): --list,
--describe (offsets and lag, --members, --state), --reset-offsets and --delete.

Lag is the partition's log end offset (ListOffsets latest, read_uncommitted, from its leader) minus the
group's committed offset (OffsetFetch from the group's coordinator). Offsets are reset, as Kafka does, only
in a group without members (Empty, or unknown), by an OffsetCommit of generation -1.
"""

from __future__ import annotations

import datetime
import sys

from ..errors import ErrorCode
from . import command
from .client import EARLIEST, LATEST, AdminClient, GroupDescription, KafkaError, PartitionLag, error_name, group_type
from .command import UsageError

TOOL = "consumer-groups"
MISSING = "-"
INACTIVE = ("Empty", "Dead")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
TYPES = ("classic", "consumer")  # the types of group kafka-consumer-groups lists (share groups: share-groups)
SCENARIOS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by")


def group_tool_parser(sub, tool: str, kind: str, help: str, description: str, verbose: str,
                      reset_scenarios: tuple[str, ...]):
    """The flags kafka-consumer-groups.sh and kafka-share-groups.sh share; the parser and its actions group."""
    parser = command.tool_parser(sub, tool, help=help, description=description)
    parser.add_argument("--timeout", type=int, metavar="MS", help="milliseconds per request (default: "
                        "request.timeout.ms of --command-config, else 30000)")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help=f"list all {kind} groups")
    actions.add_argument("--describe", action="store_true", help=f"describe {kind} groups: offsets and lag, "
                                                                 "--members or --state")
    actions.add_argument("--delete", action="store_true", help=f"delete {kind} groups (only empty ones)")
    parser.add_argument("--group", action="append", default=[], help=f"a {kind} group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help=f"every {kind} group")
    parser.add_argument("--members", action="store_true", help="with --describe: the group's members")
    parser.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag (the default)")
    parser.add_argument("--state", nargs="?", const="", metavar="STATES",
                        help="with --describe: the group's state; with --list: show states, or only groups in "
                             "these comma-separated states")
    parser.add_argument("--verbose", action="store_true", help=verbose)
    actions.add_argument("--reset-offsets", action="store_true", help="reset a group's offsets (--dry-run by "
                                                                      "default; --execute to commit; an empty group's)")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                        help="with --reset-offsets: a topic, or some of its partitions (repeatable)")
    parser.add_argument("--all-topics", action="store_true", help="with --reset-offsets: every topic the group "
                                                                  "has offsets for")
    scenarios = {
        "to_earliest": lambda: parser.add_argument("--to-earliest", action="store_true",
                                                   help="reset to each partition's first offset"),
        "to_latest": lambda: parser.add_argument("--to-latest", action="store_true",
                                                 help="reset to each partition's log end offset"),
        "to_offset": lambda: parser.add_argument("--to-offset", type=int, metavar="OFFSET",
                                                 help="reset to this offset (clamped to the log)"),
        "to_datetime": lambda: parser.add_argument(
            "--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
            help="reset to the first offset at or after this time (local time unless it names a zone)"),
        "shift_by": lambda: parser.add_argument("--shift-by", type=int, metavar="N",
                                                help="move the committed offsets by N (clamped)")}
    for scenario in reset_scenarios:
        scenarios[scenario]()
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    return parser, actions


def add_parser(sub) -> None:
    parser, actions = group_tool_parser(
        sub, TOOL, "consumer", help="list, describe, reset and delete consumer groups (like kafka-consumer-groups.sh)",
        description="List consumer groups, describe their offsets, lag and members, reset their offsets and "
                    "delete them, as kafka-consumer-groups.sh does.",
        verbose="with --members: each member's assignment (and a KIP-848 member's epoch and target); with "
                "--state: a KIP-848 group's epochs", reset_scenarios=SCENARIOS)
    parser.add_argument("--type", nargs="?", const="", metavar="TYPES",
                        help="with --list: show types (classic, consumer), or only groups of these comma-separated types")

def run(args) -> int:
    try:
        _check(args)
    except UsageError as exc:
        return command.fail(TOOL, str(exc))
    action = next(a for a in ("list", "describe", "reset_offsets", "delete") if getattr(args, a))
    return command.run(TOOL, args, lambda admin: _ACTIONS[action](admin, args))


def _check(args) -> None:
    if (args.describe or args.reset_offsets or args.delete) and not (args.group or args.all_groups):
        raise UsageError("--describe, --reset-offsets and --delete need --group or --all-groups")
    if args.group and args.all_groups:
        raise UsageError("--group and --all-groups exclude each other")
    if args.type is not None and not args.list:
        raise UsageError("--type goes with --list")
    if args.type and not {t.strip().lower() for t in args.type.split(",") if t.strip()} <= set(TYPES):
        raise UsageError(f"--type {args.type}: the types are {', '.join(TYPES)}")
    if args.describe and sum(map(bool, (args.members, args.offsets, args.state is not None))) > 1:
        raise UsageError("--describe takes one of --members, --offsets and --state")
    check_reset(args, SCENARIOS)


def check_reset(args, scenarios: tuple[str, ...]) -> None:
    """--reset-offsets takes one of ``scenarios`` and --topic or --all-topics; they go with it only."""
    if args.reset_offsets:
        chosen = [s for s in scenarios if _given(args, s)]
        if len(chosen) != 1:
            raise UsageError("--reset-offsets needs one of " + ", ".join(
                "--" + s.replace("_", "-") for s in scenarios))
        if bool(args.topic) == args.all_topics:
            raise UsageError("--reset-offsets needs --topic or --all-topics (one of them)")
        if args.to_datetime is not None:
            args.timestamp_ms = parse_datetime(args.to_datetime)
    elif args.topic or args.all_topics or any(_given(args, s) for s in scenarios) \
            or args.execute or args.dry_run:
        raise UsageError("--topic, --all-topics, the reset scenarios, --dry-run and --execute go with "
                         "--reset-offsets")


def _given(args, scenario: str) -> bool:
    value = getattr(args, scenario)
    return value is not None and value is not False  # --to-offset 0 and --shift-by 0 are given


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime (yyyy-MM-dd'T'HH:mm:ss.SSS, optionally with a zone) in ms since the epoch."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--to-datetime {text!r} is not YYYY-MM-DDTHH:mm:SS.sss[zone]") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the local zone, as Kafka's tool assumes
    return int(moment.timestamp() * 1000)


async def _groups(admin: AdminClient, args) -> list[str]:
    if not args.all_groups:
        return args.group
    return sorted(g["group_id"] for g in _consumer_groups(await admin.list_groups()))


def _consumer_groups(listed: list[dict]) -> list[dict]:
    return [g for g in listed if g["protocol_type"] in ("consumer", "") and group_type(g) in TYPES]


async def _list(admin: AdminClient, args) -> None:
    """As ConsumerGroupCommand: names only, or with --type / --state a table of the groups of those types and
    states (ListGroups filters them, KIP-1043)."""
    def values(text):
        return [v.strip() for v in (text or "").split(",") if v.strip()]

    groups = _consumer_groups(await admin.list_groups(values(args.type), values(args.state)))
    if args.state is None and args.type is None:
        for g in groups:
            print(g["group_id"])
        return
    width = max([15, *(len(g["group_id"]) for g in groups)]) + 10
    fmt = f"{{:<{width}}}" + " {:<20}" * ((args.type is not None) + (args.state is not None))
    print(fmt.format("GROUP", *(["TYPE"] if args.type is not None else []),
                     *(["STATE"] if args.state is not None else [])).rstrip())
    for g in groups:
        kind = [group_type(g).capitalize()] if args.type is not None else []
        state = [g.get("group_state") or "Unknown"] if args.state is not None else []
        print(fmt.format(g["group_id"], *kind, *state).rstrip())


def _note_state(group: GroupDescription) -> None:
    """Kafka's notes on the group's state, on stderr; a group that does not exist is an error."""
    if group.state == "Dead":
        raise UsageError(f"Consumer group '{group.group_id}' does not exist.")
    if group.state == "Empty":
        print(f"\nConsumer group '{group.group_id}' has no active members.", file=sys.stderr)
    elif group.state in REBALANCING:
        print(f"\nWarning: Consumer group '{group.group_id}' is rebalancing.", file=sys.stderr)


def lag_row(group_id: str, row: PartitionLag) -> tuple:
    """kafka-consumer-groups --describe's row: group, topic, partition, current offset, log end offset, lag,
    consumer id, host, client id; "-" where there is none."""
    member = (row.member.member_id, row.member.host, row.member.client_id) if row.member else (MISSING,) * 3
    return (group_id, row.topic, row.partition,
            *(MISSING if v is None else v for v in (row.committed, row.log_end, row.lag)), *member)


async def _describe(admin: AdminClient, args) -> None:
    for group_id in await _groups(admin, args):
        group = await admin.describe_group(group_id)
        _note_state(group)
        if args.members:
            _print_members(group, args.verbose)
        elif args.state is not None:
            _print_state(group, args.verbose)
        else:
            rows = [lag_row(group_id, r) for r in await admin.group_lag(group)]
            if rows:
                widths = [max(15, *(len(str(r[i])) for r in rows)) for i in (0, 1, 6, 7)]
                fmt = "{:<%d} {:<%d} {:<10} {:<15} {:<15} {:<15} {:<%d} {:<%d} {}" % tuple(widths)
                print()
                print(fmt.format("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                 "CONSUMER-ID", "HOST", "CLIENT-ID"))
                for r in rows:
                    print(fmt.format(*map(str, r)))
                print()


def _print_members(group: GroupDescription, verbose: bool) -> None:
    """--members: KIP-1099's columns; with --verbose a KIP-848 group's members also show their epoch, their
    current assignment and the target the coordinator reconciles them toward (at the group's assignment epoch)."""
    members = group.members
    instance = any(m.group_instance_id for m in members)
    epochs = verbose and group.type == "consumer"
    widths = {"group": max(15, len(group.group_id)), "id": max([15, *(len(m.member_id) for m in members)]),
              "instance": max([17, *(len(m.group_instance_id or "") for m in members)]),
              "host": max([15, *(len(m.host) for m in members)]),
              "client": max([15, *(len(m.client_id) for m in members)])}

    def line(g, i, gi, h, c, n, *verbose_cells) -> str:
        cells = [f"{g:<{widths['group']}}", f"{i:<{widths['id']}}"] + (
            [f"{gi:<{widths['instance']}}"] if instance else []) + [
            f"{h:<{widths['host']}}", f"{c:<{widths['client']}}", f"{n:<15}"]
        if not verbose:
            return " ".join(cells).rstrip()
        if epochs:  # CURRENT-EPOCH, CURRENT-ASSIGNMENT, TARGET-EPOCH, TARGET-ASSIGNMENT
            width = max(20, *(len(c) for c in verbose_cells))
            cells += [f"{verbose_cells[0]:<15}", f"{verbose_cells[1]:<{width}}", f"{verbose_cells[2]:<15}",
                      verbose_cells[3]]
        else:
            cells.append(verbose_cells[1])
        return " ".join(cells).rstrip()

    print()
    print(line("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
               "CURRENT-EPOCH", "CURRENT-ASSIGNMENT" if epochs else "ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"))
    for m in members:
        print(line(group.group_id, m.member_id, m.group_instance_id or "", m.host, m.client_id, str(len(m.assignment)),
                   epoch_text(m.member_epoch), assignment_text(m.assignment), epoch_text(group.assignment_epoch),
                   assignment_text(m.target or [])))


def epoch_text(value: int | None) -> str:
    return MISSING if value is None or value < 0 else str(value)


def assignment_text(assignment: list[tuple[str, int]]) -> str:
    if not assignment:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(sorted(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in by_topic.items()))


def _print_state(group: GroupDescription, verbose: bool) -> None:
    coordinator = f"{group.coordinator.host}:{group.coordinator.port}  ({group.coordinator.node_id})"
    epochs = verbose and group.type == "consumer"  # KIP-1099: a KIP-848 group's epochs with --verbose
    fmt = "{:<%d} {:<%d} {:<20} {:<20} " % (max(15, len(group.group_id)), max(25, len(coordinator)))
    fmt += "{:<15} {:<25} {}" if epochs else "{}"
    extra_head = ("GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH") if epochs else ()
    extra = (epoch_text(group.group_epoch), epoch_text(group.assignment_epoch)) if epochs else ()
    print()
    print(fmt.format("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", *extra_head, "#MEMBERS"))
    print(fmt.format(group.group_id, coordinator, group.protocol or MISSING, group.state, *extra, len(group.members)))


async def reset_plan(admin: AdminClient, committed: dict[tuple[str, int], int], args) -> dict[tuple[str, int], int]:
    """The new offsets --reset-offsets asks for, from the group's ``committed`` offsets (a share group's start
    offsets), clamped to each log's range as Kafka clamps them."""
    partitions = sorted(committed) if args.all_topics else await partitions_of(admin, args.topic)
    if not partitions:
        return {}
    earliest = await admin.list_offsets(partitions, EARLIEST)
    latest = await admin.list_offsets(partitions, LATEST)

    def clamp(tp, offset):
        return max(earliest[tp], min(latest[tp], offset))

    if args.to_earliest:
        return dict(earliest)
    if args.to_latest:
        return dict(latest)
    if _given(args, "to_offset"):
        return {tp: clamp(tp, args.to_offset) for tp in partitions}
    if args.to_datetime is not None:
        found = await admin.list_offsets(partitions, args.timestamp_ms)
        return {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in partitions}
    missing = [tp for tp in partitions if tp not in committed]
    if missing:
        raise UsageError(f"cannot shift the offset of {missing[0][0]}-{missing[0][1]}: the group has no committed "
                         "offset there")
    return {tp: clamp(tp, committed[tp] + args.shift_by) for tp in partitions}


async def partitions_of(admin: AdminClient, topics: list[str]) -> list[tuple[str, int]]:
    named, whole = [], []
    for arg in topics:
        topic, sep, partitions = arg.partition(":")
        if not sep:
            whole.append(topic)
            continue
        try:
            named += [(topic, int(p)) for p in partitions.split(",")]
        except ValueError:
            raise UsageError(f"--topic {arg!r}: expected TOPIC or TOPIC:PARTITION[,PARTITION...]") from None
    meta = await admin.metadata(sorted({t for t, _ in named} | set(whole)))
    for topic, info in meta.topics.items():
        if info.error:
            raise UsageError(f"--topic {topic}: no such topic")
    for topic, partition in named:
        if partition not in meta.topics[topic].partitions:
            raise UsageError(f"--topic {topic}: no partition {partition}")
    return sorted(set(named) | {(t, p) for t in whole for p in meta.topics[t].partitions})


async def _reset_offsets(admin: AdminClient, args) -> None:
    plans = {}
    for group_id in await _groups(admin, args):
        try:
            state = (await admin.describe_group(group_id)).state
        except KafkaError as exc:
            if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            state = "Dead"
        if state not in INACTIVE:
            raise UsageError(f"Assignments can only be reset if the group '{group_id}' is inactive, but the current "
                             f"state is {state}.")
        plans[group_id] = await reset_plan(admin, await admin.list_group_offsets(group_id), args)
        if args.execute and plans[group_id]:
            await admin.alter_group_offsets(group_id, plans[group_id])
    print_plans(plans)


def print_plans(plans: dict[str, dict[tuple[str, int], int]]) -> None:
    """--reset-offsets' table: GROUP TOPIC PARTITION NEW-OFFSET."""
    rows = [(g, t, p, o) for g, plan in plans.items() for (t, p), o in sorted(plan.items())]
    fmt = "{:<%d} {:<%d} {:<10} {}" % (max([15, *(len(r[0]) for r in rows)]), max([15, *(len(r[1]) for r in rows)]))
    print()
    if plans:
        print(fmt.format("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
    for r in rows:
        print(fmt.format(*map(str, r)))


async def delete(admin: AdminClient, groups: list[str], kind: str) -> None:
    """DeleteGroups to each group's coordinator, with Kafka's one line of success (or of the groups that failed)."""
    results = await admin.delete_groups(groups)
    failed = {g: code for g, code in results.items() if code}
    if failed:
        raise UsageError(f"Deletion of some {kind} groups failed: " + ", ".join(
            f"'{g}': {error_name(code)}" for g, code in failed.items()))
    names = ", ".join(f"'{g}'" for g in groups)
    print(f"Deletion of requested {kind} groups ({names}) was successful.")


async def _delete(admin: AdminClient, args) -> None:
    await delete(admin, await _groups(admin, args), "consumer")


_ACTIONS = {"list": _list, "describe": _describe, "reset_offsets": _reset_offsets, "delete": _delete}
