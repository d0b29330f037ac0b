"""OffsetFetch: a group's committed offsets (several groups per request from v8).

require_stable (v7+) turns offsets that an open transaction has rewritten
into UNSTABLE_OFFSET_COMMIT, so the client retries once the transaction ends.
"""

from broker.errors import ErrorCode
from broker.security.authorizer import GROUP, TOPIC

API = "OffsetFetch"
VERSIONS = (1, 9)


def _topics(broker, header, group_id: str, topics: list[dict] | None, require_stable: bool) -> list[dict]:
    wanted = None if topics is None else [(t["name"], p) for t in topics for p in t["partition_indexes"]]
    by_topic: dict[str, list[dict]] = {}
    described: dict[str, bool] = {}
    for (topic, partition), committed, error in broker.groups.fetch_offsets(group_id, wanted, require_stable):
        if topic not in described:
            described[topic] = broker.authorizer.authorize(header, "Describe", TOPIC, topic)
        if not described[topic]:
            if wanted is None:
                continue  # all the group's offsets: those of topics the principal may describe
            committed, error = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": committed.offset if committed else -1,
            "committed_leader_epoch": committed.leader_epoch if committed else -1,
            "metadata": committed.metadata if committed else "",
            "error_code": error,
        })
    return [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]


def _group(broker, header, group_id: str, topics, require_stable: bool) -> tuple[list[dict], int]:
    """(topics, error code): Describe on the group is needed to see its offsets."""
    if not broker.authorizer.authorize(header, "Describe", GROUP, group_id):
        return [], ErrorCode.GROUP_AUTHORIZATION_FAILED
    if broker.groups.coordinator_error(group_id):
        return [], broker.groups.coordinator_error(group_id)
    return _topics(broker, header, group_id, topics, require_stable), ErrorCode.NONE


def handle(broker, request, header) -> dict:
    stable = request["require_stable"]
    if header.api_version >= 8:
        groups = []
        for g in request["groups"]:
            topics, error = _group(broker, header, g["group_id"], g["topics"], stable)
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    topics, error = _group(broker, header, request["group_id"], request["topics"], stable)
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error}
