"""OffsetCommit: store a group's consumed positions (versions 2+, as Kafka 4 serves)."""

from broker.coordinator.partitions import then
from broker.errors import ErrorCode
from broker.group.metadata import CommittedOffset
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from storage import clock

from .group_partitions import group_refusal, partition_errors, requested_partitions

API = Api("OffsetCommit", (2, 9), acl=IN_HANDLER)


def handle(broker, request, header):
    now = clock.wall_ms()
    retention = request["retention_time_ms"]  # v2-4; -1: the broker's offsets.retention.minutes
    refusal = group_refusal(broker, header, request)
    if refusal:
        errors = {(t["name"], p["partition_index"]): refusal for t in request["topics"] for p in t["partitions"]}
        return {"throttle_time_ms": 0, "topics": partition_errors(request["topics"], errors)}
    known, errors = requested_partitions(broker, request["topics"], header)
    expire = now + retention if retention >= 0 else None
    offsets = {
        tp: CommittedOffset(p["committed_offset"], p["committed_leader_epoch"], p["committed_metadata"] or "", now, expire)
        for tp, p in known
    }
    if not offsets:
        return {"throttle_time_ms": 0, "topics": partition_errors(request["topics"], errors)}

    def respond(committed: dict) -> dict:
        if header.api_version < 9:  # older clients know an unknown group only as a stale generation
            committed = {tp: ErrorCode.ILLEGAL_GENERATION if e == ErrorCode.GROUP_ID_NOT_FOUND else e
                         for tp, e in committed.items()}
        return {"throttle_time_ms": 0, "topics": partition_errors(request["topics"], {**errors, **committed})}

    # answered once the commit is committed (acks=all), when it also takes effect
    return then(broker.groups.commit_offsets(request["group_id"], request["member_id"], request["group_instance_id"],
                                             request["generation_id_or_member_epoch"], offsets), respond)
