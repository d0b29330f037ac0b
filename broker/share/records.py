"""The __consumer_offsets records of share groups (KIP-932), in Kafka 4's formats.

Record types (the key's int16 version): 10 member metadata (rack, client, subscribed topic names),
11 group metadata (the group epoch), 12 target assignment metadata (the assignment epoch), 13 a member's
target assignment, 14 a member's current assignment (member epoch, previous epoch, state, partitions),
15 ShareGroupStatePartitionMetadata (the topics and partitions whose share state was initialized, and the
topics whose state is being deleted). Type 9 (partition metadata, dropped by Kafka 4.1) is skipped on replay.
Values are version 0, flexible (broker/group/coordinator_records.py).
"""

from __future__ import annotations

from broker.group import coordinator_records as cr
from broker.group.coordinator_records import Record, assignment_of, record_type

from .group import STABLE, ShareGroup, ShareMember, StatePartitions

PARTITION_METADATA = 9
MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15

_SCHEMAS = {
    MEMBER_METADATA: "ShareGroupMemberMetadata",
    GROUP_METADATA: "ShareGroupMetadata",
    TARGET_ASSIGNMENT_METADATA: "ShareGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ShareGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ShareGroupCurrentMemberAssignment",
    STATE_PARTITION_METADATA: "ShareGroupStatePartitionMetadata",
}


def _key(record_type_: int, group_id: str, member_id: str | None = None) -> bytes:
    return cr.key(_SCHEMAS[record_type_], record_type_, group_id, member_id)


def _record(record_type_: int, group_id: str, fields: dict, member_id: str | None = None) -> Record:
    return _key(record_type_, group_id, member_id), cr.value(_SCHEMAS[record_type_], fields)


# ---- writing ------------------------------------------------------------------


def group_epoch(group_id: str, epoch: int) -> Record:
    # MetadataHash (Kafka's hash of the subscribed topics' metadata) is not computed: 0. On load this broker
    # takes the subscribed topics from the targets instead (coordinator_records.assigned_topics).
    return _record(GROUP_METADATA, group_id, {"epoch": epoch, "metadata_hash": 0})


def member_metadata(group_id: str, m: ShareMember) -> Record:
    return _record(MEMBER_METADATA, group_id, {"rack_id": m.rack_id, "client_id": m.client_id,
                                               "client_host": m.client_host,
                                               "subscribed_topic_names": list(m.subscribed)}, m.member_id)


def assignment_epoch(group_id: str, epoch: int) -> Record:
    return _record(TARGET_ASSIGNMENT_METADATA, group_id, {"assignment_epoch": epoch})


def target_assignment(group_id: str, member_id: str, assignment: frozenset) -> Record:
    return _record(TARGET_ASSIGNMENT_MEMBER, group_id, {"topic_partitions": cr.wire(assignment)}, member_id)


def current_assignment(group_id: str, m: ShareMember) -> Record:
    return _record(CURRENT_MEMBER_ASSIGNMENT, group_id, {
        "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch, "state": STABLE,
        "assigned_partitions": cr.wire(m.assignment)}, m.member_id)


def state_partitions(group: ShareGroup) -> Record:
    def topics(entries: dict) -> list[dict]:
        return [{"topic_id": t, "topic_name": e.name, "partitions": sorted(e.partitions), "create_timestamp": e.created_ms}
                for t, e in sorted(entries.items(), key=lambda e: str(e[0]))]

    return _record(STATE_PARTITION_METADATA, group.group_id, {
        "initializing_topics": topics(group.initializing), "initialized_topics": topics(group.initialized),
        "deleting_topics": [{"topic_id": t, "topic_name": name}
                            for t, name in sorted(group.deleting.items(), key=lambda e: str(e[0]))]})


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member removed: its current assignment, target and metadata (Kafka's order)."""
    return [(_key(t, group_id, member_id), None)
            for t in (CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA)]


def group_tombstones(group_id: str) -> list[Record]:
    """An empty share group deleted."""
    return [(_key(t, group_id), None) for t in (STATE_PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA, GROUP_METADATA)]


# ---- replay -------------------------------------------------------------------


def is_share_group_key(key: bytes) -> bool:
    return PARTITION_METADATA <= record_type(key) <= STATE_PARTITION_METADATA


def replay(key: bytes, value: bytes | None, group_of) -> None:
    """Apply one record to ``group_of(group_id)``'s ShareGroup (a GroupMetadata whose ``share`` is set on first
    sight); later records of a key override earlier ones, a tombstone removes."""
    record_type_ = record_type(key)
    if record_type_ == PARTITION_METADATA:
        return
    fields, data = cr.decode(_SCHEMAS[record_type_], key, value)
    holder = group_of(fields["group_id"])
    if holder.share is None:
        if data is None:
            return
        holder.share = ShareGroup(fields["group_id"])
    group: ShareGroup = holder.share
    member_id = fields.get("member_id")
    if record_type_ == GROUP_METADATA:
        if data is None:
            holder.share = None  # deleted
        else:
            group.group_epoch = data["epoch"]
    elif record_type_ == TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = data["assignment_epoch"] if data is not None else 0
    elif record_type_ == STATE_PARTITION_METADATA:
        data = data or {"initializing_topics": [], "initialized_topics": [], "deleting_topics": []}
        group.initializing, group.initialized = (
            {t["topic_id"]: StatePartitions(t["topic_name"], frozenset(t["partitions"]), t["create_timestamp"])
             for t in data[name]} for name in ("initializing_topics", "initialized_topics"))
        group.deleting = {t["topic_id"]: t["topic_name"] for t in data["deleting_topics"]}
    elif data is None:
        if record_type_ == MEMBER_METADATA:
            group.members.pop(member_id, None)
        elif member_id in group.members and record_type_ == TARGET_ASSIGNMENT_MEMBER:
            group.members[member_id].assignment = frozenset()
    else:
        member = group.members.setdefault(member_id, ShareMember(member_id))
        if record_type_ == MEMBER_METADATA:
            member.rack_id, member.client_id, member.client_host = data["rack_id"], data["client_id"], data[
                "client_host"]
            member.subscribed = tuple(sorted(set(data["subscribed_topic_names"])))
        elif record_type_ == TARGET_ASSIGNMENT_MEMBER:
            member.assignment = assignment_of(data["topic_partitions"])
        else:  # CURRENT_MEMBER_ASSIGNMENT
            member.member_epoch, member.previous_member_epoch = data["member_epoch"], data["previous_member_epoch"]
