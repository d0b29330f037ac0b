"""Keys and values of __consumer_offsets records, in Kafka's formats.

Keys start with an int16 version that names the record type: 0 and 1 are
offset commits (group, topic, partition), 2 is group metadata (group). Values
start with their own int16 version. We write offset commit value v3 (v1 when
the commit carries an expire timestamp) and group metadata value v3, and read
the non-flexible versions 0-3 of both. A null value is a tombstone.
"""

from __future__ import annotations

from typing import NamedTuple

from broker.coordinator.record_fields import I16, I32, I64, Reader, RecordFormatError, encode_string

from .metadata import CommittedOffset, GroupMetadata, MemberMetadata

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

class OffsetCommitKey(NamedTuple):
    group_id: str
    topic: str
    partition: int


class GroupMetadataKey(NamedTuple):
    group_id: str


class GroupRecord(NamedTuple):
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp: int  # -1: not recorded (value versions 0-1)
    members: list[MemberMetadata]  # each with its subscription as the chosen protocol's metadata


# ---- writing ------------------------------------------------------------------


def _bytes(b: bytes) -> bytes:
    return I32.pack(len(b)) + b


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return I16.pack(OFFSET_COMMIT_KEY_VERSION) + encode_string(group_id) + encode_string(topic) + I32.pack(partition)


def group_metadata_key(group_id: str) -> bytes:
    return I16.pack(GROUP_METADATA_KEY_VERSION) + encode_string(group_id)


def offset_commit_value(c: CommittedOffset) -> bytes:
    if c.expire_timestamp is not None:  # only version 1 has room for it
        return (
            I16.pack(1) + I64.pack(c.offset) + encode_string(c.metadata)
            + I64.pack(c.commit_timestamp) + I64.pack(c.expire_timestamp)
        )
    return (
        I16.pack(3) + I64.pack(c.offset) + I32.pack(c.leader_epoch)
        + encode_string(c.metadata) + I64.pack(c.commit_timestamp)
    )


def group_metadata_value(group: GroupMetadata, assignment: dict[str, bytes]) -> bytes:
    """The group's generation with each member's subscription and its share of ``assignment``."""
    out = bytearray(I16.pack(GROUP_METADATA_VALUE_VERSION))
    out += encode_string(group.protocol_type or "") + I32.pack(group.generation_id)
    out += encode_string(group.protocol_name) + encode_string(group.leader_id)
    out += I64.pack(group.state_timestamp) + I32.pack(len(group.members))
    for m in group.members.values():
        out += encode_string(m.member_id) + encode_string(m.group_instance_id)
        out += encode_string(m.client_id) + encode_string(m.client_host)
        out += I32.pack(m.rebalance_timeout_ms) + I32.pack(m.session_timeout_ms)
        out += _bytes(m.metadata(group.protocol_name)) + _bytes(assignment.get(m.member_id, b""))
    return bytes(out)


# ---- reading ------------------------------------------------------------------


def decode_key(data: bytes | None) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key, or None for record types this broker does not use (newer coordinators' records)."""
    if data is None:
        raise RecordFormatError("record without a key")
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    return None


def decode_offset_commit_value(data: bytes, record_offset: int) -> CommittedOffset:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"offset commit value version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else None
    return CommittedOffset(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp, record_offset)


def decode_group_metadata_value(data: bytes) -> GroupRecord:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"group metadata value version {version}")
    protocol_type = r.string()
    generation_id = r.int32()
    protocol_name = r.nullable_string()
    leader_id = r.nullable_string()
    state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.int32()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription, assignment = r.bytes(), r.bytes()
        members.append(MemberMetadata(
            member_id, instance_id, client_id, client_host,
            rebalance_timeout if rebalance_timeout >= 0 else session_timeout, session_timeout,
            protocol_type, [(protocol_name or "", subscription)], assignment,
        ))
    return GroupRecord(protocol_type, generation_id, protocol_name, leader_id, state_timestamp, members)
