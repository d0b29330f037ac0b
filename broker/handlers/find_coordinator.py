"""FindCoordinator: the leader of the key's partition of __consumer_offsets or __transaction_state.

The internal topic is created on first need, as Kafka does; until it has a
leader the answer is COORDINATOR_NOT_AVAILABLE, which clients retry.
"""

from broker.coordinator.internal_topics import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    partition_for,
)
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security import authorizer
from broker.security.authorization import IN_HANDLER

API = Api("FindCoordinator", (0, 6), acl=IN_HANDLER)

GROUP, TRANSACTION = 0, 1
_TOPICS = {GROUP: OFFSETS_TOPIC, TRANSACTION: TRANSACTION_STATE_TOPIC}
# key type: what the principal must be allowed to Describe, and the error when it is not
_RESOURCE = {GROUP: (authorizer.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
             TRANSACTION: (authorizer.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}


def _coordinator(broker, header, key_type: int, key: str, ready: bool) -> dict:
    if key_type not in _TOPICS:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": f"unknown key type {key_type}",
                "node_id": -1, "host": "", "port": -1}
    resource_type, denied = _RESOURCE[key_type]
    if not broker.authorizer.authorize(header, "Describe", resource_type, key):
        return {"error_code": denied, "error_message": None, "node_id": -1, "host": "", "port": -1}
    topic = broker.logs.topic(_TOPICS[key_type]) if ready else None
    leader = broker.partition_leader(topic.name, partition_for(key, topic.num_partitions)) if topic else None
    node = next((b for b in broker.brokers(header) if b["node_id"] == leader), None)
    if node is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": None,
                "node_id": -1, "host": "", "port": -1}
    return {"error_code": ErrorCode.NONE, "error_message": None, "node_id": leader, "host": node["host"],
            "port": node["port"]}


async def handle(broker, request, header) -> dict:
    key_type = request["key_type"]
    ready = key_type in _TOPICS and await broker.store.ensure_internal_topic(_TOPICS[key_type])
    if header.api_version >= 4:  # a batch of keys, all of one type
        coordinators = [{"key": key, **_coordinator(broker, header, key_type, key, ready)}
                        for key in request["coordinator_keys"]]
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    return {"throttle_time_ms": 0, **_coordinator(broker, header, key_type, request["key"], ready)}
