"""The __consumer_offsets records of KIP-848 consumer groups, in Kafka's formats.

A key's int16 version names its record type: 3 group metadata (the group epoch),
5 member metadata (subscription, client), 6 target assignment metadata (the
assignment epoch), 7 a member's target assignment, 8 a member's current
assignment (epochs, state, assigned partitions, partitions pending revocation).
Values are version 0, flexible; their schemas are in protocol/messages.json and
encoded with the protocol codec. A null value is a tombstone. Record type 4
(partition metadata, dropped by Kafka 4) is skipped on replay.
"""

from __future__ import annotations

from . import coordinator_records
from .assignors import Assignment
from .consumer_group import ConsumerGroup, ConsumerMember, Current, MemberState
from .coordinator_records import Record, assignment_of, record_type, wire

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8

_SCHEMAS = {
    GROUP_METADATA: "ConsumerGroupMetadata",
    MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    TARGET_ASSIGNMENT_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
}

def _key(record_type_: int, group_id: str, member_id: str | None = None) -> bytes:
    return coordinator_records.key(_SCHEMAS[record_type_], record_type_, group_id, member_id)


def _value(record_type_: int, fields: dict) -> bytes:
    return coordinator_records.value(_SCHEMAS[record_type_], fields)


# ---- writing ------------------------------------------------------------------


def group_epoch(group_id: str, epoch: int) -> Record:
    return _key(GROUP_METADATA, group_id), _value(GROUP_METADATA, {"epoch": epoch})


def member_metadata(group_id: str, m: ConsumerMember) -> Record:
    return _key(MEMBER_METADATA, group_id, m.member_id), _value(MEMBER_METADATA, {
        "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id, "client_host": m.client_host,
        "subscribed_topic_names": list(m.subscribed_topic_names), "subscribed_topic_regex": m.subscribed_topic_regex,
        "rebalance_timeout_ms": m.rebalance_timeout_ms, "server_assignor": m.server_assignor,
        "classic_member_metadata": None if m.classic_protocols is None else {
            "session_timeout_ms": m.classic_session_timeout_ms,
            "supported_protocols": [{"name": n, "metadata": meta} for n, meta in m.classic_protocols]},
    })


def target_assignment(group_id: str, member_id: str, assignment: Assignment) -> Record:
    return _key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id), _value(
        TARGET_ASSIGNMENT_MEMBER, {"topic_partitions": wire(assignment)})


def assignment_epoch(group_id: str, epoch: int) -> Record:
    return _key(TARGET_ASSIGNMENT_METADATA, group_id), _value(TARGET_ASSIGNMENT_METADATA, {"assignment_epoch": epoch})


def current_assignment(group_id: str, m: ConsumerMember) -> Record:
    return _key(CURRENT_MEMBER_ASSIGNMENT, group_id, m.member_id), _value(CURRENT_MEMBER_ASSIGNMENT, {
        "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch, "state": int(m.state),
        "assigned_partitions": wire(m.assigned),
        "partitions_pending_revocation": wire(m.pending_revocation),
    })


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member removed: its current assignment, target and metadata (Kafka's order)."""
    return [(_key(t, group_id, member_id), None)
            for t in (CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA)]


def group_tombstones(group_id: str) -> list[Record]:
    """An empty consumer group deleted."""
    return [(_key(TARGET_ASSIGNMENT_METADATA, group_id), None), (_key(GROUP_METADATA, group_id), None)]


# ---- replay -------------------------------------------------------------------


def is_consumer_group_key(key: bytes) -> bool:
    return GROUP_METADATA <= record_type(key) <= CURRENT_MEMBER_ASSIGNMENT


def replay(key: bytes, value: bytes | None, group_of) -> None:
    """Apply one record to ``group_of(group_id)``'s ConsumerGroup (a GroupMetadata whose ``consumer``
    is set on first sight); later records of a key override earlier ones, a tombstone removes."""
    record_type_ = record_type(key)
    if record_type_ == PARTITION_METADATA:
        return
    fields, data = coordinator_records.decode(_SCHEMAS[record_type_], key, value)
    holder = group_of(fields["group_id"])
    if holder.consumer is None:
        if data is None:
            return
        holder.consumer = ConsumerGroup()
    group: ConsumerGroup = holder.consumer
    member_id = fields.get("member_id")
    if record_type_ == GROUP_METADATA:
        if data is None:
            holder.consumer = None  # deleted; what remains are offsets
        else:
            group.group_epoch = data["epoch"]
    elif record_type_ == TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = data["assignment_epoch"] if data is not None else 0
    elif record_type_ == TARGET_ASSIGNMENT_MEMBER:
        if data is None:
            group.target.pop(member_id, None)
        else:
            group.target[member_id] = assignment_of(data["topic_partitions"])
    elif record_type_ == MEMBER_METADATA:
        if data is None:
            group.remove(member_id)
            return
        member = group.members.get(member_id) or ConsumerMember(member_id)
        member.instance_id, member.rack_id = data["instance_id"], data["rack_id"]
        member.client_id, member.client_host = data["client_id"], data["client_host"]
        member.subscribed_topic_names = tuple(data["subscribed_topic_names"])
        member.subscribed_topic_regex = data["subscribed_topic_regex"]
        member.rebalance_timeout_ms, member.server_assignor = data["rebalance_timeout_ms"], data["server_assignor"]
        classic = data["classic_member_metadata"]
        member.classic_session_timeout_ms = None if classic is None else classic["session_timeout_ms"]
        member.classic_protocols = None if classic is None else [
            (p["name"], bytes(p["metadata"])) for p in classic["supported_protocols"]]
        group.add(member)
    elif record_type_ == CURRENT_MEMBER_ASSIGNMENT:
        member = group.members.get(member_id)
        if member is None:
            if data is None:
                return
            member = ConsumerMember(member_id)
            group.add(member)
        if data is None:
            member.set_current(Current(0, 0, MemberState.STABLE, frozenset(), frozenset()))
        else:
            member.set_current(Current(data["member_epoch"], data["previous_member_epoch"],
                                       MemberState(data["state"]) if data["state"] in MemberState._value2member_map_ else MemberState.UNKNOWN, assignment_of(data["assigned_partitions"]),
                                       assignment_of(data["partitions_pending_revocation"])))

