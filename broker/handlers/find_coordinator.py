"""FindCoordinator: this broker coordinates every group and every transactional id."""

from broker.errors import ErrorCode

API = "FindCoordinator"
VERSIONS = (0, 6)

GROUP, TRANSACTION = 0, 1


def _coordinator(broker, header, key_type: int) -> dict:
    if key_type not in (GROUP, TRANSACTION):
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": f"unknown key type {key_type}",
                "node_id": -1, "host": "", "port": -1}
    host, port = broker.endpoint(header)
    return {"error_code": ErrorCode.NONE, "error_message": None, "node_id": broker.node_id, "host": host, "port": port}


def handle(broker, request, header) -> dict:
    if header.api_version >= 4:  # a batch of keys, all of one type
        coordinators = [{"key": key, **_coordinator(broker, header, request["key_type"])} for key in request["coordinator_keys"]]
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    return {"throttle_time_ms": 0, **_coordinator(broker, header, request["key_type"])}
