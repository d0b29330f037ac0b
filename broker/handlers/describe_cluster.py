"""DescribeCluster: this broker is the whole cluster and its controller."""

API = "DescribeCluster"
VERSIONS = (0, 1)


def handle(broker, request, header) -> dict:
    host, port = broker.endpoint(header)
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": request["endpoint_type"],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "brokers": [{"broker_id": broker.node_id, "host": host, "port": port, "rack": None}],
        "cluster_authorized_operations": -2147483648,
    }
