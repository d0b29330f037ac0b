"""Which ACL each API needs (Kafka's authorization table), checked before the handler runs.

Each handler module declares its requirement in its ``API = Api(..., acl=...)`` (broker/handlers/__init__.py):

- a tuple of ``Check``s: APIs about one group, one transactional id or the cluster are checked here, in
  order, and a refusal is their response with only the error code set;
- ``IN_HANDLER``: APIs about several resources check each in their handler;
- ``ANYONE``: no ACL at all (ApiVersions and the SASL exchange, before there is a principal);
- ``SUPER_USERS``, the default: for everyone else it closes the connection with a log line, so an API
  whose checks are missing can never serve what an ACL would forbid.

An inter-broker API (``inter_broker=True``) needs ClusterAction on the cluster.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ErrorCode
from .authorizer import CLUSTER, CLUSTER_NAME, GROUP, TOPIC, TRANSACTIONAL_ID


class Check(NamedTuple):
    operation: str
    resource_type: int
    field: str | None  # the request field naming the resource; None: the cluster
    error: int


ANYONE = "anyone"
IN_HANDLER = "checked in the handler"
SUPER_USERS = "super users only"

GROUP_READ = (Check("Read", GROUP, "group_id", ErrorCode.GROUP_AUTHORIZATION_FAILED),)
TXN_WRITE = (Check("Write", TRANSACTIONAL_ID, "transactional_id", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),)


def on_cluster(operation: str) -> tuple[Check]:
    return (Check(operation, CLUSTER, None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),)


CLUSTER_ACTION = on_cluster("ClusterAction")
CLOSE = object()

# DescribeConfigs / AlterConfigs resource types: the ACL resource and the error of a refusal
_CONFIG_RESOURCES = {2: (TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),  # TOPIC
                     4: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # BROKER
                     8: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # BROKER_LOGGER
                     32: (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED)}  # GROUP


def config_refusal(authorizer, header, operation: str, resource_type: int, name: str) -> int | None:
    """The error of a DescribeConfigs/AlterConfigs resource the principal may not touch, else None."""
    acl_type, error = _CONFIG_RESOURCES.get(resource_type, (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    allowed = authorizer.authorize(header, operation, acl_type, CLUSTER_NAME if acl_type == CLUSTER else name)
    return None if allowed else error


def gate(authorizer, acl, request: dict, header):
    """None to go ahead; a response dict that refuses the request; or CLOSE. ``acl``: the API's declared one."""
    if acl in (IN_HANDLER, ANYONE):
        return None
    if acl == SUPER_USERS:
        return None if authorizer.is_super_user(header) else CLOSE
    for operation, resource_type, field, error in acl:
        name = CLUSTER_NAME if field is None else request[field]
        if not authorizer.authorize(header, operation, resource_type, name):
            return {"error_code": error}
    return None
