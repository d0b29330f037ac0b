"""`moldau acls`: kafka-acls.sh's flags and output (AclCommand): --add, --remove and --list of ACLs on topics,
groups, the cluster and transactional ids (CreateAcls, DeleteAcls, DescribeAcls), with --producer / --consumer
shorthands. --remove asks before it deletes unless --force, as Kafka's tool does.
"""

from __future__ import annotations

from . import command
from .client import OPERATIONS, PATTERN_TYPES, PERMISSIONS, RESOURCE_TYPES, AclBinding, AdminClient
from .command import UsageError

TOOL = "acls"
CLUSTER_NAME = "kafka-cluster"
WILDCARD_HOST = "*"
_NAMES = {code: name.upper() for name, code in RESOURCE_TYPES.items()}
_OPERATION_NAMES = {code: name.upper() for name, code in OPERATIONS.items()}
_PATTERN_NAMES = {code: name.upper() for name, code in PATTERN_TYPES.items()}
_PERMISSION_NAMES = {code: name.upper() for name, code in PERMISSIONS.items()}


def add_parser(sub) -> None:
    parser = command.tool_parser(sub, TOOL, help="add, remove and list ACLs (like kafka-acls.sh)",
                                 description="Add, remove and list ACLs, as kafka-acls.sh does.")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--add", action="store_true", help="add ACLs")
    actions.add_argument("--remove", action="store_true", help="remove ACLs")
    actions.add_argument("--list", action="store_true", help="list ACLs (of the resources named, or all)")
    for flag, text in (("--topic", "a topic"), ("--group", "a consumer group"),
                       ("--transactional-id", "a transactional id")):
        parser.add_argument(flag, action="append", default=[], help=f"{text} (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster")
    parser.add_argument("--resource-pattern-type", default="literal", type=str.lower,
                        choices=["any", "match", "literal", "prefixed"],
                        help="literal or prefixed names; any or match also as filters for --list and --remove "
                             "(default %(default)s)")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                        help="principal (User:alice) allowed (repeatable)")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                        help="principal denied (repeatable)")
    parser.add_argument("--allow-host", action="append", default=[], help="hosts allowed (default *)")
    parser.add_argument("--deny-host", action="append", default=[], help="hosts denied (default *)")
    parser.add_argument("--operation", action="append", default=[],
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                             "AlterConfigs, IdempotentWrite, All (repeatable; default All)")
    parser.add_argument("--producer", action="store_true", help="the ACLs a producer needs (with --topic, "
                                                                "--transactional-id, --idempotent)")
    parser.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --topic, --group)")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    parser.add_argument("--principal", action="append", default=[], help="with --list: only this principal's ACLs")
    parser.add_argument("--force", action="store_true", help="with --remove: do not ask")


def run(args) -> int:
    try:
        plan = _plan(args)
    except UsageError as exc:
        return command.fail(TOOL, str(exc))
    return command.run(TOOL, args, lambda admin: _ACTIONS[_action(args)](admin, args, plan))


def _action(args) -> str:
    return "add" if args.add else "remove" if args.remove else "list"


def _operation(text: str) -> int:
    code = {name.replace("_", ""): code for name, code in OPERATIONS.items()}.get(text.strip().lower().replace("_", ""))
    if code is None or code < 2:
        raise UsageError(f"--operation {text}: expected one of Read, Write, Create, Delete, Alter, Describe, "
                         "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All")
    return code


def _principal(text: str) -> str:
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind or not name:
        raise UsageError(f"principal {text!r} is not Type:name (User:alice)")
    return text.strip()


def _plan(args) -> dict[tuple[int, str | None], set[tuple[str, str, int, int]]]:
    """Resource (type, name) -> entries (principal, host, operation, permission) the arguments name."""
    pattern = args.resource_pattern_type
    if args.add and pattern in ("any", "match"):
        raise UsageError(f"a --resource-pattern-type value of '{pattern}' is not valid when adding acls")
    resources = [(RESOURCE_TYPES["topic"], t) for t in args.topic] + \
                [(RESOURCE_TYPES["group"], g) for g in args.group] + \
                [(RESOURCE_TYPES["transactional_id"], t) for t in args.transactional_id]
    if args.cluster or (args.idempotent and args.producer):
        resources.append((RESOURCE_TYPES["cluster"], CLUSTER_NAME))
    if not resources and not args.list:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")

    def entries(operations) -> set:
        allowed = [_principal(p) for p in args.allow_principal]
        denied = [_principal(p) for p in args.deny_principal]
        found = set()
        for principals, hosts, permission in ((allowed, args.allow_host, "allow"), (denied, args.deny_host, "deny")):
            for principal in principals:
                for host in hosts or [WILDCARD_HOST]:
                    found |= {(principal, host.strip(), op, PERMISSIONS[permission]) for op in operations}
        return found

    plan: dict = {}
    if args.producer or args.consumer:
        shorthand = {RESOURCE_TYPES["topic"]: set(), RESOURCE_TYPES["group"]: set(),
                     RESOURCE_TYPES["transactional_id"]: set(), RESOURCE_TYPES["cluster"]: set()}
        if args.producer:
            shorthand[RESOURCE_TYPES["topic"]] |= {"write", "describe", "create"}
            shorthand[RESOURCE_TYPES["transactional_id"]] |= {"write", "describe"}
            shorthand[RESOURCE_TYPES["cluster"]] |= {"idempotent_write"} if args.idempotent else set()
        if args.consumer:
            shorthand[RESOURCE_TYPES["topic"]] |= {"read", "describe"}
            shorthand[RESOURCE_TYPES["group"]] |= {"read"}
        for resource in resources:
            if shorthand[resource[0]]:
                plan[resource] = entries({OPERATIONS[o] for o in shorthand[resource[0]]})
    else:
        operations = {_operation(o) for o in args.operation} or {OPERATIONS["all"]}
        plan = {resource: entries(operations) for resource in resources}
    if args.add and any(not acls for acls in plan.values()):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    return plan


def pattern_text(resource_type: int, name: str | None, pattern_type: int) -> str:
    return (f"ResourcePattern(resourceType={_NAMES.get(resource_type, 'UNKNOWN')}, "
            f"name={'<any>' if name is None else name}, patternType={_PATTERN_NAMES.get(pattern_type, 'UNKNOWN')})")


def entry_text(principal: str, host: str, operation: int, permission: int) -> str:
    return (f"(principal={principal}, host={host}, operation={_OPERATION_NAMES.get(operation, 'UNKNOWN')}, "
            f"permissionType={_PERMISSION_NAMES.get(permission, 'UNKNOWN')})")


async def _add(admin: AdminClient, args, plan) -> None:
    pattern = PATTERN_TYPES[args.resource_pattern_type]
    for (rtype, name), acls in plan.items():
        existing = {(b.principal, b.host, b.operation, b.permission) for b in await admin.describe_acls(
            AclBinding(rtype, name, pattern, None, None, OPERATIONS["any"], PERMISSIONS["any"]))}
        new = []
        for entry in sorted(acls):
            if entry in existing:
                print(f"Acl (pattern={pattern_text(rtype, name, pattern)}, entry={entry_text(*entry)}) already exists.")
            else:
                new.append(entry)
        if new:
            print(f"Adding ACLs for resource `{pattern_text(rtype, name, pattern)}`: \n "
                  + "\n".join(f"\t{entry_text(*e)}" for e in new) + "\n")
            await admin.create_acls([AclBinding(rtype, name, pattern, *e) for e in new])


async def _remove(admin: AdminClient, args, plan) -> None:
    pattern = PATTERN_TYPES[args.resource_pattern_type]
    for (rtype, name), acls in plan.items():
        shown = pattern_text(rtype, name, pattern)
        question = (f"Are you sure you want to delete all ACLs for resource filter `{shown}`? (y/n)" if not acls else
                    "Are you sure you want to remove ACLs: \n " + "\n".join(f"\t{entry_text(*e)}" for e in sorted(acls))
                    + f"\n from resource filter `{shown}`? (y/n)")
        if not args.force and not _confirm(question):
            continue
        filters = [AclBinding(rtype, name, pattern, *e) for e in sorted(acls)] or [
            AclBinding(rtype, name, pattern, None, None, OPERATIONS["any"], PERMISSIONS["any"])]
        await admin.delete_acls(filters)


def _confirm(question: str) -> bool:
    print(question)
    try:
        return input().strip().lower() == "y"
    except EOFError:
        return False


async def _list(admin: AdminClient, args, plan) -> None:
    pattern = PATTERN_TYPES[args.resource_pattern_type]
    filters = [AclBinding(rtype, name, pattern, None, None, OPERATIONS["any"], PERMISSIONS["any"])
               for rtype, name in plan] or [AclBinding(RESOURCE_TYPES["any"], None, PATTERN_TYPES["any"], None, None,
                                                       OPERATIONS["any"], PERMISSIONS["any"])]
    by_resource: dict[tuple, set] = {}
    for f in filters:
        for b in await admin.describe_acls(f):
            by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), set()).add(
                (b.principal, b.host, b.operation, b.permission))
    principals = [_principal(p) for p in args.principal]
    for principal in principals or [None]:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for resource, acls in sorted(by_resource.items()):
            shown = sorted(a for a in acls if principal is None or a[0] == principal)
            if shown:
                print(f"Current ACLs for resource `{pattern_text(*resource)}`:\n"
                      + "\n".join(f"\t{entry_text(*a)}" for a in shown) + "\n")


_ACTIONS = {"add": _add, "remove": _remove, "list": _list}
