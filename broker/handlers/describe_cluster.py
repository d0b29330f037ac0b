"""DescribeCluster: the live brokers and the controller."""

from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME

NOT_REQUESTED = -2147483648

API = Api("DescribeCluster", (0, 1), acl=IN_HANDLER)


def _operations(broker, header) -> int:
    """As Kafka: anyone may describe the cluster; its operations are listed to those with Describe on it."""
    if not broker.authorizer.authorize(header, "Describe", CLUSTER, CLUSTER_NAME):
        return 0
    return broker.authorizer.authorized_operations(header, CLUSTER, CLUSTER_NAME)


def handle(broker, request, header) -> dict:
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": request["endpoint_type"],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.store.cache.controller_id,
        "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                    for b in broker.brokers(header)],
        "cluster_authorized_operations": _operations(broker, header) if request["include_cluster_authorized_operations"]
        else NOT_REQUESTED,
    }
