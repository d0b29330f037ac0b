"""OffsetFetch: a group's committed offsets (several groups per request from v8).

require_stable (v7+) turns offsets that an open transaction has rewritten
into UNSTABLE_OFFSET_COMMIT, so the client retries once the transaction ends.
"""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP, TOPIC

API = Api("OffsetFetch", (1, 9), acl=IN_HANDLER)


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


def _group(broker, header, group_id: str, topics, require_stable: bool, member_id: str | None = None,
           member_epoch: int = -1) -> tuple[list[dict], int]:
    """(topics, error code): Describe on the group is needed to see its offsets; a member of a
    KIP-848 group (v9+) must name its current epoch."""
    if not broker.authorizer.authorize(header, "Describe", GROUP, group_id):
        return [], ErrorCode.GROUP_AUTHORIZATION_FAILED
    if broker.groups.coordinator_error(group_id):
        return [], broker.groups.coordinator_error(group_id)
    group = broker.groups.groups.get(group_id)
    if group is not None and group.consumer is not None and (member_id is not None or member_epoch >= 0):
        if error := broker.groups.consumer.commit_error(group.consumer, member_id or "", member_epoch):
            return [], error
    return _topics(broker, header, group_id, topics, require_stable), ErrorCode.NONE


def handle(broker, request, header) -> dict:
    stable = request["require_stable"]
    if header.api_version >= 8:
        groups = []
        for g in request["groups"]:
            topics, error = _group(broker, header, g["group_id"], g["topics"], stable, g["member_id"], g["member_epoch"])
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    topics, error = _group(broker, header, request["group_id"], request["topics"], stable)
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error}
