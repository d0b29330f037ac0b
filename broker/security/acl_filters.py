"""ACL binding filters of DescribeAcls and DeleteAcls (Kafka's AclBindingFilter), and the checks a new
binding of CreateAcls must pass."""

from __future__ import annotations

from .authorizer import (
    CLUSTER,
    CLUSTER_NAME,
    LITERAL,
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    PREFIXED,
    RESOURCE_TYPES,
    WILDCARD,
    AclBinding,
)

ANY = 1
MATCH = PATTERN_TYPES["Match"]


def matches(f: dict, acl: AclBinding) -> bool:
    """Does the filter (a request's *_filter fields, operation, permission_type) select this binding?"""
    if f["resource_type_filter"] not in (ANY, acl.resource_type):
        return False
    name, pattern = f["resource_name_filter"], f["pattern_type_filter"]
    if pattern == MATCH:  # every binding that applies to a resource of that name
        if name is not None and not (
            (acl.pattern_type == LITERAL and acl.resource_name in (name, WILDCARD))
            or (acl.pattern_type == PREFIXED and name.startswith(acl.resource_name))
        ):
            return False
    elif pattern not in (ANY, acl.pattern_type) or (name is not None and name != acl.resource_name):
        return False
    return (f["principal_filter"] in (None, acl.principal) and f["host_filter"] in (None, acl.host)
            and f["operation"] in (ANY, acl.operation) and f["permission_type"] in (ANY, acl.permission))


def creation_problem(c: dict) -> str | None:
    """Why CreateAcls refuses this creation (INVALID_REQUEST), or None."""
    if c["resource_type"] not in RESOURCE_TYPES.values() or c["resource_type"] == ANY:
        return f"invalid resource type {c['resource_type']}"
    if c["resource_pattern_type"] not in (LITERAL, PREFIXED):
        return "the pattern type must be LITERAL or PREFIXED"
    if c["operation"] not in OPERATIONS.values() or c["operation"] == ANY:
        return f"invalid operation {c['operation']}"
    if c["permission_type"] not in (PERMISSIONS["Allow"], PERMISSIONS["Deny"]):
        return "the permission must be ALLOW or DENY"
    kind, sep, name = (c["principal"] or "").partition(":")
    if not sep or not kind or not name:
        return f"principal {c['principal']!r} is not <type>:<name>"
    if not c["resource_name"]:
        return "the resource name must not be empty"
    if c["resource_type"] == CLUSTER and c["resource_name"] != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME}"
    if not c["host"]:
        return "the host must not be empty (* for any)"
    return None


def binding(c: dict) -> AclBinding:
    return AclBinding(c["resource_type"], c["resource_name"], c["resource_pattern_type"], c["principal"], c["host"],
                      c["operation"], c["permission_type"])
