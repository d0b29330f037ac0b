"""Authorization as Kafka's StandardAuthorizer does it, with ACLs kept behind a small store interface.

Without `authorizer.class.name` every request is allowed (AllowAll), as in Kafka. With it, a principal
may perform an operation on a resource when an ALLOW ACL matches (its principal or `User:*`, its host
or `*`, the operation or `All`; Read, Write, Delete and Alter imply Describe, AlterConfigs implies
DescribeConfigs) and no DENY ACL does (deny wins); a resource that no ACL names at all is open only
with `allow.everyone.if.no.acl.found`. `super.users` may do everything. Resource patterns are LITERAL
(the name, or `*` for all) or PREFIXED.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from storage.files import atomic_write

from ..config.broker_config import BrokerConfig, ConfigError

log = logging.getLogger("moldau.security")

# Kafka's codes (org.apache.kafka.common.resource / acl)
RESOURCE_TYPES = {"Any": 1, "Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5, "DelegationToken": 6,
                  "User": 7}
PATTERN_TYPES = {"Any": 1, "Match": 2, "Literal": 3, "Prefixed": 4}
OPERATIONS = {"Any": 1, "All": 2, "Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8,
              "ClusterAction": 9, "DescribeConfigs": 10, "AlterConfigs": 11, "IdempotentWrite": 12,
              "CreateTokens": 13, "DescribeTokens": 14}
PERMISSIONS = {"Any": 1, "Deny": 2, "Allow": 3}
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (RESOURCE_TYPES[n] for n in ("Topic", "Group", "Cluster", "TransactionalId"))
LITERAL, PREFIXED = PATTERN_TYPES["Literal"], PATTERN_TYPES["Prefixed"]
ALLOW, DENY = PERMISSIONS["Allow"], PERMISSIONS["Deny"]
ALL = OPERATIONS["All"]
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# an ALLOW of any of these also allows the key (Kafka's implied operations)
_IMPLIED_BY = {OPERATIONS["Describe"]: {OPERATIONS[o] for o in ("Read", "Write", "Delete", "Alter")},
               OPERATIONS["DescribeConfigs"]: {OPERATIONS["AlterConfigs"]}}

# what each resource type supports: the authorized operations Metadata and friends report
SUPPORTED_OPERATIONS = {
    TOPIC: [OPERATIONS[o] for o in ("Read", "Write", "Create", "Delete", "Alter", "Describe", "DescribeConfigs",
                                    "AlterConfigs")],
    GROUP: [OPERATIONS[o] for o in ("Read", "Describe", "Delete", "DescribeConfigs", "AlterConfigs")],
    CLUSTER: [OPERATIONS[o] for o in ("Create", "ClusterAction", "DescribeConfigs", "AlterConfigs",
                                      "IdempotentWrite", "Alter", "Describe")],
    TRANSACTIONAL_ID: [OPERATIONS[o] for o in ("Describe", "Write")],
}
STANDARD_AUTHORIZERS = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "kafka.security.authorizer.AclAuthorizer")


@dataclass(frozen=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def matches_resource(self, resource_type: int, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return name.startswith(self.resource_name)


class AclStore:
    """Where ACLs live: this file in the log directory; a cluster swaps in etcd (cluster/etcd_security.py)."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> set[AclBinding]:
        if not self.path.exists():
            return set()
        try:
            return {AclBinding(**entry) for entry in json.loads(self.path.read_text())}
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{self.path}: cannot read the ACLs ({exc})") from None

    async def save_acls(self, acls: set[AclBinding], added: set[AclBinding], removed: set[AclBinding]) -> None:
        """Persist ``acls``, the set after adding ``added`` and removing ``removed``."""
        entries = sorted((asdict(a) for a in acls), key=lambda e: tuple(e.values()))
        atomic_write(self.path, json.dumps(entries, indent=1).encode())


def principal_of(header) -> tuple[str, str] | None:
    """(principal, host) of a request's sender; None for the broker's own requests."""
    session = header.session
    return None if session is None else (session.principal, session.host)


class AllowAll:
    """No authorizer configured: every principal may perform every operation."""

    enabled = False

    def authorize(self, header, operation: str, resource_type: int, name: str, log_denied: bool = True) -> bool:
        return True

    def authorize_cluster(self, header, operation: str) -> bool:
        return True

    def authorized_operations(self, header, resource_type: int, name: str) -> int:
        return _bits(SUPPORTED_OPERATIONS[resource_type])

    def is_super_user(self, header) -> bool:
        return True


class StandardAuthorizer(AllowAll):
    enabled = True

    def __init__(self, store: AclStore, super_users: set[str], allow_if_no_acl: bool):
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: set[AclBinding] = store.load()

    def authorize(self, header, operation: str, resource_type: int, name: str, log_denied: bool = True) -> bool:
        who = principal_of(header)
        if who is None:
            return True
        allowed = self.allowed(who[0], who[1], OPERATIONS[operation], resource_type, name)
        if not allowed and log_denied:
            log.info("denied %s from %s: %s on %s %r", who[0], who[1], operation,
                     _name(RESOURCE_TYPES, resource_type), name)
        return allowed

    def authorize_cluster(self, header, operation: str) -> bool:
        return self.authorize(header, operation, CLUSTER, CLUSTER_NAME)

    def is_super_user(self, header) -> bool:
        return header.session is None or header.session.principal in self.super_users

    def may_write_some_topic(self, header) -> bool:
        """Kafka's authorizeByResourceType(TOPIC, WRITE), what an idempotent producer needs (KIP-679): some
        topic name the principal may write, i.e. an ALLOW pattern that no DENY pattern covers."""
        who = principal_of(header)
        if who is None:
            return True
        principal, host = who
        write = OPERATIONS["Write"]
        # a name no ACL names (none can hold a NUL): super users, and allow.everyone.if.no.acl.found
        if self.allowed(principal, host, write, TOPIC, "\0"):
            return True
        mine = [a for a in self.acls if a.resource_type == TOPIC and a.operation in (write, ALL)
                and a.principal in (principal, WILDCARD_PRINCIPAL) and a.host in (host, WILDCARD)]
        denied = {(a.pattern_type, a.resource_name) for a in mine if a.permission == DENY}
        if (LITERAL, WILDCARD) in denied:
            return False
        denied_prefixes = [name for kind, name in denied if kind == PREFIXED]
        for a in mine:
            if a.permission != ALLOW or (a.pattern_type == LITERAL and (LITERAL, a.resource_name) in denied):
                continue
            if a.resource_name == WILDCARD and a.pattern_type == LITERAL:
                return True
            if not any(a.resource_name.startswith(prefix) for prefix in denied_prefixes):
                return True
        return False

    def authorized_operations(self, header, resource_type: int, name: str) -> int:
        who = principal_of(header)
        ops = SUPPORTED_OPERATIONS[resource_type]
        if who is None:
            return _bits(ops)
        return _bits([op for op in ops if self.allowed(who[0], who[1], op, resource_type, name)])

    def allowed(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        resource_acls = [a for a in self.acls if a.matches_resource(resource_type, name)]
        if not resource_acls:
            return self.allow_if_no_acl
        mine = [a for a in resource_acls if a.principal in (principal, WILDCARD_PRINCIPAL) and a.host in (host, WILDCARD)]
        if any(a.permission == DENY and a.operation in (operation, ALL) for a in mine):
            return False  # deny wins
        granting = {operation, ALL} | _IMPLIED_BY.get(operation, set())
        return any(a.permission == ALLOW and a.operation in granting for a in mine)

    # ---- CreateAcls / DeleteAcls: take effect at once and are written before the answer ----

    async def add(self, bindings: list[AclBinding]) -> None:
        await self.store.save_acls(self.acls | set(bindings), set(bindings), set())
        self.acls |= set(bindings)

    async def remove(self, bindings: set[AclBinding]) -> None:
        await self.store.save_acls(self.acls - bindings, set(), bindings)
        self.acls -= bindings


def from_config(config: BrokerConfig) -> AllowAll:
    name = str(config["authorizer.class.name"]).strip()
    if not name:
        return AllowAll()
    if name not in STANDARD_AUTHORIZERS:
        raise ConfigError(f"authorizer.class.name={name}: only Kafka's standard authorizer is implemented "
                          f"({STANDARD_AUTHORIZERS[0]})")
    super_users = {p.strip() for p in str(config["super.users"]).split(";") if p.strip()}
    return StandardAuthorizer(AclStore(config.log_dir / ACLS_FILE), super_users,
                              config["allow.everyone.if.no.acl.found"])


ACLS_FILE = "acls.json"


def _bits(operations) -> int:
    return sum(1 << op for op in set(operations))


def _name(table: dict, code: int) -> str:
    return next((k for k, v in table.items() if v == code), str(code))
