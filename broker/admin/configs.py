"""`moldau configs`: kafka-configs.sh's flags and output (ConfigCommand) for topics, brokers, users and
clients: --describe [--all] and --alter --add-config k=v,k2=[v1,v2] --delete-config k,k2.

Topics and brokers go through DescribeConfigs and IncrementalAlterConfigs (a broker's to that broker;
--entity-default is the cluster-wide broker default). Users and clients are quotas (DescribeClientQuotas,
AlterClientQuotas); a user's SCRAM-SHA-256 / SCRAM-SHA-512 credentials
(`--add-config 'SCRAM-SHA-256=[iterations=8192,password=secret]'`) go through AlterUserScramCredentials,
salted here, as Kafka's tool does. `--entity-type users --entity-name U --entity-type clients --entity-name C`
names the quotas of one client of one user.
"""

from __future__ import annotations

import re

from . import command
from .client import (
    CONFIG_BROKER,
    CONFIG_TOPIC,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    SCRAM_MECHANISMS,
    AdminClient,
)
from .command import UsageError

TOOL = "configs"
ENTITY_TYPES = ("topics", "brokers", "users", "clients")
QUOTA_ENTITY = {"users": "user", "clients": "client-id"}  # ClientQuotaEntity's names
QUOTA_TEXT = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
QUOTAS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
# DescribeConfigs' config sources, by Kafka's ConfigEntry.ConfigSource names
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
DEFAULT_SCRAM_ITERATIONS = 4096
_SPLIT = re.compile(r",(?=[^\]]*(?:\[|$))")  # commas outside [...]


def add_parser(sub) -> None:
    parser = command.tool_parser(
        sub, TOOL, help="describe and alter topic, broker, user and client configs (like kafka-configs.sh)",
        description="Describe and alter the configs of topics and brokers, and the quotas and SCRAM credentials "
                    "of users and clients, as kafka-configs.sh does.")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="list the configs of the entity")
    actions.add_argument("--alter", action="store_true", help="alter the configs of the entity")
    parser.add_argument("--entity-type", action="append", default=[], choices=ENTITY_TYPES,
                        help="topics, brokers, users or clients (users and clients may go together)")
    parser.add_argument("--entity-name", action="append", dest="entity_names", default=[],
                        help="topic name, broker id, user principal name or client id")
    parser.add_argument("--entity-default", action="append_const", const="", dest="entity_names",
                        help="the default entity (brokers, users, clients)")
    parser.add_argument("--all", action="store_true", help="with --describe: every config, not only dynamic ones")
    parser.add_argument("--add-config", metavar="k=v,k2=[v1,v2]", help="configs to set")
    parser.add_argument("--delete-config", metavar="k,k2", help="configs to remove")


def run(args) -> int:
    try:
        _check(args)
        added = parse_add_config(args.add_config or "")
    except UsageError as exc:
        return command.fail(TOOL, str(exc))
    deleted = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    kind = args.entity_type[0]
    if args.describe:
        work = _describe_quotas if kind in QUOTA_ENTITY else _describe_resources
    else:
        work = _alter_quotas if kind in QUOTA_ENTITY else _alter_resource
    return command.run(TOOL, args, lambda admin: work(admin, args, added, deleted))


def _check(args) -> None:
    types, names = args.entity_type, args.entity_names
    if not types:
        raise UsageError("--entity-type is required")
    if len(types) > 1 and sorted(types) != ["clients", "users"]:
        raise UsageError("only users and clients may be given together as --entity-type")
    if len(names) > len(types):
        raise UsageError("more --entity-name / --entity-default than --entity-type")
    if args.alter and len(names) != len(types):
        raise UsageError("--alter needs an --entity-name or --entity-default for every --entity-type")
    if args.alter and not (args.add_config or args.delete_config):
        raise UsageError("--alter needs --add-config or --delete-config")
    if args.describe and (args.add_config or args.delete_config):
        raise UsageError("--add-config and --delete-config go with --alter")
    if "" in names and types[names.index("")] == "topics":
        raise UsageError("--entity-default does not apply to topics")
    for kind, name in zip(types, names, strict=False):
        if kind == "brokers" and name and not name.isdigit():
            raise UsageError(f"the entity name for brokers must be a broker id, found: {name}")


def parse_add_config(text: str) -> dict[str, str]:
    """'k1=v1,k2=[v1,v2]' -> {k1: v1, k2: 'v1,v2'} (brackets group values with commas, as in Kafka)."""
    found = {}
    for item in _SPLIT.split(text) if text.strip() else []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--add-config {item!r}: expected key=value or key=[v1,v2]")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        found[key.strip()] = value.strip()
    return found


def _resource(kind: str) -> int:
    return CONFIG_TOPIC if kind == "topics" else CONFIG_BROKER


async def _describe_resources(admin: AdminClient, args, added, deleted) -> None:
    kind = args.entity_type[0]
    meta = await admin.metadata()
    if args.entity_names:
        name = args.entity_names[0]
        exists = name in meta.topics if kind == "topics" else (name == "" or int(name) in meta.brokers)
        if not exists:
            print(f"The {kind[:-1]} '{name}' doesn't exist and doesn't have dynamic config.")
            return
        names = [name]
    else:
        names = sorted(meta.topics) if kind == "topics" else [*map(str, sorted(meta.brokers)), ""]
    for name in names:
        if name == "":
            print(f"Default configs for {kind} in the cluster are:")
        else:
            print(f"{'All' if args.all else 'Dynamic'} configs for {kind[:-1]} {name} are:")
        dynamic = _dynamic_source(kind, name)
        configs = await admin.describe_configs(_resource(kind), name, synonyms=True)
        for c in sorted(configs, key=lambda c: c["name"]):
            if args.all or c.get("config_source") == dynamic:
                synonyms = ", ".join(f"{SOURCES.get(s['source'], 'UNKNOWN')}:{s['name']}={_text(s['value'])}"
                                     for s in c.get("synonyms", []))
                print(f"  {c['name']}={_text(c['value'])} sensitive={str(c['is_sensitive']).lower()} "
                      f"synonyms={{{synonyms}}}")


def _dynamic_source(kind: str, name: str) -> int:
    """The config source of what was set on this entity itself (DescribeConfigs' numbering)."""
    return 1 if kind == "topics" else 2 if name else 3


def _text(value) -> str:
    return "null" if value is None else value


async def _alter_resource(admin: AdminClient, args, added: dict[str, str], deleted: list[str]) -> None:
    kind, name = args.entity_type[0], args.entity_names[0]
    if deleted:  # only a config set on the entity itself can be deleted, as in Kafka
        dynamic = _dynamic_source(kind, name)
        current = {c["name"] for c in await admin.describe_configs(_resource(kind), name)
                   if c.get("config_source") == dynamic}
        unknown = [k for k in deleted if k not in current]
        if unknown:
            raise UsageError(f"Invalid config(s): {','.join(unknown)}")
    await admin.alter_configs(_resource(kind), name, added, deleted)
    _completed(kind, name)


def _completed(kind: str, name: str) -> None:
    if name:
        print(f"Completed updating config for {kind[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {kind} in the cluster.")


def _entity(args) -> list[tuple[str, str | None]]:
    """(quota entity type, name) per --entity-type: a name, None for the default, or absent: any."""
    names = args.entity_names + [None] * (len(args.entity_type) - len(args.entity_names))
    return [(QUOTA_ENTITY[k], n) for k, n in zip(args.entity_type, names, strict=False)]


async def _describe_quotas(admin: AdminClient, args, added, deleted) -> None:
    components = _entity(args)
    found = await admin.describe_client_quotas([
        (t, MATCH_SPECIFIED if n is None else MATCH_DEFAULT if n == "" else MATCH_EXACT, n or None)
        for t, n in components], strict=True)
    for entity, values in found:
        parts = [(f"the default {QUOTA_TEXT[t]}" if not entity[t] else f"{QUOTA_TEXT[t]} '{entity[t]}'")
                 for t in ("user", "client-id", "ip") if t in entity]
        print(f"Quota configs for {', '.join(parts)} are "
              + ", ".join(f"{k}={java_double(v)}" for k, v in values.items()))
    names = [n for _, n in components]
    if args.entity_type == ["users"] and "" not in names:
        by_type = {t: name for name, (t, _) in SCRAM_MECHANISMS.items()}
        for user, creds in (await admin.describe_user_scram_credentials(None if names == [None] else names)).items():
            print(f"SCRAM credential configs for user-principal '{user}' are "
                  + ", ".join(f"{by_type.get(t, t)}=iterations={n}" for t, n in sorted(creds.items())))


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (the quota values kafka-configs prints)."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    mantissa, exponent = f"{value:.16e}".split("e")
    mantissa = repr(float(mantissa))
    return f"{mantissa}E{int(exponent)}"


async def _alter_quotas(admin: AdminClient, args, added: dict[str, str], deleted: list[str]) -> None:
    entity = {t: (n or None) for t, n in _entity(args)}
    scram_add = {k: v for k, v in added.items() if k in SCRAM_MECHANISMS}
    scram_delete = [k for k in deleted if k in SCRAM_MECHANISMS]
    unknown = [k for k in [*added, *deleted] if k not in SCRAM_MECHANISMS and k not in QUOTAS]
    if unknown:
        raise UsageError(f"unexpected config names for {'/'.join(args.entity_type)}: {','.join(unknown)} "
                         f"(quotas: {', '.join(QUOTAS)}; users also SCRAM-SHA-256, SCRAM-SHA-512)")
    if scram_add or scram_delete:
        if args.entity_type != ["users"] or not args.entity_names[0]:
            raise UsageError("SCRAM credentials are set for one named user (--entity-type users --entity-name U)")
        if len(scram_add) + len(scram_delete) != len(added) + len(deleted):
            raise UsageError("cannot alter both quota and SCRAM credential configs at once")
        await admin.alter_user_scram_credentials(args.entity_names[0], {
            m: _scram_credential(m, v) for m, v in scram_add.items()}, scram_delete)
    else:
        try:
            rates = {k: float(v) for k, v in added.items()}
        except ValueError:
            raise UsageError(f"cannot parse quota values: {added}") from None
        await admin.alter_client_quotas(entity, rates, deleted)
    _completed(args.entity_type[0], args.entity_names[0])


def _scram_credential(mechanism: str, text: str) -> tuple[int, str]:
    match = re.fullmatch(r"(?:iterations=(-?[0-9]*),)?password=(.*)", text)
    if not match:
        raise UsageError(f"Invalid credential property {mechanism}={text}")
    iterations = int(match.group(1)) if match.group(1) not in (None, "", "-1") else DEFAULT_SCRAM_ITERATIONS
    return iterations, match.group(2)
