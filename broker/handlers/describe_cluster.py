"""DescribeCluster: the live brokers and the controller."""

API = "DescribeCluster"
VERSIONS = (0, 1)


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
        "cluster_authorized_operations": -2147483648,
    }
