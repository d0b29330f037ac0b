"""`moldau share-groups`: kafka-share-groups.sh's flags and output (ShareGroupCommand, KIP-932): --list,
--describe (start offsets and lag per partition, --members, --state) and --delete.

A share group's position in a partition is its share-partition start offset (SPSO): every record before it
is acknowledged or archived. Its lag (DescribeShareGroupOffsets v1, KIP-1226) is the records from there on
not yet acknowledged; "-" from a broker that does not say.
"""

from __future__ import annotations

import sys

from . import command, consumer_groups
from .client import AdminClient, GroupDescription, group_type
from .command import UsageError
from .consumer_groups import MISSING, assignment_text, epoch_text

TOOL = "share-groups"
SCENARIOS = ("to_earliest", "to_latest", "to_datetime")  # kafka-share-groups.sh's


def add_parser(sub) -> None:
    consumer_groups.group_tool_parser(
        sub, TOOL, "share", help="list, describe and delete share groups (like kafka-share-groups.sh)",
        description="List share groups, describe their start offsets and lag, members and state, and delete "
                    "them, as kafka-share-groups.sh does.",
        verbose="with --members: each member's epoch; with --state: the group's epochs", reset_scenarios=SCENARIOS)


def run(args) -> int:
    try:
        _check(args)
    except UsageError as exc:
        return command.fail(TOOL, str(exc))
    action = _list if args.list else _describe if args.describe else _reset_offsets if args.reset_offsets else _delete
    return command.run(TOOL, args, lambda admin: action(admin, args))


def _check(args) -> None:
    if (args.describe or args.delete or args.reset_offsets) and not (args.group or args.all_groups):
        raise UsageError("--describe, --reset-offsets and --delete need --group or --all-groups")
    if args.group and args.all_groups:
        raise UsageError("--group and --all-groups exclude each other")
    if args.describe and sum(map(bool, (args.members, args.offsets, args.state is not None))) > 1:
        raise UsageError("--describe takes one of --members, --offsets and --state")
    if not args.describe and (args.members or args.offsets or args.verbose):
        raise UsageError("--members, --offsets and --verbose go with --describe")
    consumer_groups.check_reset(args, SCENARIOS)


def _share_groups(listed: list[dict]) -> list[dict]:
    return [g for g in listed if group_type(g) == "share"]


async def _groups(admin: AdminClient, args) -> list[str]:
    if not args.all_groups:
        return args.group
    return sorted(g["group_id"] for g in _share_groups(await admin.list_groups(["share"])))


async def _list(admin: AdminClient, args) -> None:
    states = [s.strip() for s in (args.state or "").split(",") if s.strip()]
    groups = sorted(_share_groups(await admin.list_groups(["share"], states)), key=lambda g: g["group_id"])
    if args.state is None:
        for g in groups:
            print(g["group_id"])
        return
    width = max([15, *(len(g["group_id"]) for g in groups)]) + 10
    print(f"{'GROUP':<{width}} STATE")
    for g in groups:
        print(f"{g['group_id']:<{width}} {g.get('group_state') or 'Unknown'}")


def _note_state(group: GroupDescription) -> None:
    """Kafka's notes on the group's state; a group that does not exist is an error."""
    if group.state == "Dead":
        raise UsageError(f"Share group '{group.group_id}' does not exist.")
    if group.state == "Empty":
        print(f"\nShare group '{group.group_id}' has no active members.", file=sys.stderr)


async def _describe(admin: AdminClient, args) -> None:
    for group_id in await _groups(admin, args):
        group = (await admin.describe_share_groups([group_id]))[group_id]
        _note_state(group)
        if args.members:
            _print_members(group, args.verbose)
        elif args.state is not None:
            _print_state(group, args.verbose)
        else:
            rows = [(group_id, o.topic, o.partition, epoch_text(o.leader_epoch), epoch_text(o.start_offset),
                     MISSING if o.lag is None else o.lag) for o in await admin.share_group_offsets(group_id)]
            _print_table(("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"), rows)


def _print_table(headers: tuple[str, ...], rows: list[tuple]) -> None:
    """Kafka's share-groups tables: each column as wide as its widest cell (at least 15 for names)."""
    cells = [headers, *[tuple(map(str, r)) for r in rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(len(headers))]
    print()
    for c in cells:
        print(" ".join(v.ljust(w) for v, w in zip(c, widths, strict=False)).rstrip())


def _print_members(group: GroupDescription, verbose: bool) -> None:
    rows = [(group.group_id, m.member_id, m.host, m.client_id, len(m.assignment),
             *([epoch_text(m.member_epoch)] if verbose else []), assignment_text(m.assignment)) for m in group.members]
    _print_table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", *(["MEMBER-EPOCH"] if verbose else []),
                  "ASSIGNMENT"), rows)


def _print_state(group: GroupDescription, verbose: bool) -> None:
    coordinator = f"{group.coordinator.host}:{group.coordinator.port}  ({group.coordinator.node_id})"
    epochs = ("GROUP-EPOCH", "ASSIGNMENT-EPOCH") if verbose else ()
    values = (epoch_text(group.group_epoch), epoch_text(group.assignment_epoch)) if verbose else ()
    _print_table(("GROUP", "COORDINATOR (ID)", "STATE", *epochs, "#MEMBERS"),
                 [(group.group_id, coordinator, group.state, *values, len(group.members))])


async def _reset_offsets(admin: AdminClient, args) -> None:
    """As kafka-share-groups.sh: only a group without members; AlterShareGroupOffsets with --execute."""
    plans = {}
    for group_id in await _groups(admin, args):
        group = (await admin.describe_share_groups([group_id]))[group_id]
        if group.members:
            raise UsageError(f"Share group '{group_id}' is not empty.")
        starts = {(o.topic, o.partition): o.start_offset for o in await admin.share_group_offsets(group_id)
                  if o.start_offset >= 0}
        plans[group_id] = await consumer_groups.reset_plan(admin, starts, args)
        if args.execute and plans[group_id]:
            await admin.alter_share_group_offsets(group_id, plans[group_id])
    consumer_groups.print_plans(plans)


async def _delete(admin: AdminClient, args) -> None:
    await consumer_groups.delete(admin, await _groups(admin, args), "share")
