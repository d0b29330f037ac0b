"""Keys and values of __consumer_offsets records, in Kafka's formats.

Keys start with an int16 version that names the record type: 0 and 1 are
offset commits (group, topic, partition), 2 is group metadata (group). Values
start with their own int16 version. We write offset commit value v3 (v1 when
the commit carries an expire timestamp) and group metadata value v3, and read
the non-flexible versions 0-3 of both. A null value is a tombstone.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .metadata import CommittedOffset, GroupMetadata, MemberMetadata

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A record this broker cannot read (an unknown version, or damaged)."""


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


def _string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    raw = s.encode()
    return _I16.pack(len(raw)) + raw


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group_id) + _string(topic) + _I32.pack(partition)


def group_metadata_key(group_id: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group_id)


def offset_commit_value(c: CommittedOffset) -> bytes:
    if c.expire_timestamp is not None:  # only version 1 has room for it
        return (
            _I16.pack(1) + _I64.pack(c.offset) + _string(c.metadata)
            + _I64.pack(c.commit_timestamp) + _I64.pack(c.expire_timestamp)
        )
    return _I16.pack(3) + _I64.pack(c.offset) + _I32.pack(c.leader_epoch) + _string(c.metadata) + _I64.pack(c.commit_timestamp)


def group_metadata_value(group: GroupMetadata, assignment: dict[str, bytes]) -> bytes:
    """The group's generation with each member's subscription and its share of ``assignment``."""
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    out += _string(group.protocol_type or "") + _I32.pack(group.generation_id)
    out += _string(group.protocol_name) + _string(group.leader_id)
    out += _I64.pack(group.state_timestamp) + _I32.pack(len(group.members))
    for m in group.members.values():
        out += _string(m.member_id) + _string(m.group_instance_id) + _string(m.client_id) + _string(m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms) + _I32.pack(m.session_timeout_ms)
        out += _bytes(m.metadata(group.protocol_name)) + _bytes(assignment.get(m.member_id, b""))
    return bytes(out)


# ---- reading ------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def _fixed(self, s: struct.Struct) -> int:
        try:
            (v,) = s.unpack_from(self.data, self.pos)
        except struct.error:
            raise RecordFormatError("record ends early") from None
        self.pos += s.size
        return v

    def int16(self) -> int:
        return self._fixed(_I16)

    def int32(self) -> int:
        return self._fixed(_I32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise RecordFormatError("field overruns the record")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("null where a string is required")
        return s

    def bytes(self) -> bytes:
        n = self.int32()
        return b"" if n < 0 else self._take(n)


def decode_key(data: bytes | None) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key, or None for record types this broker does not use (newer coordinators' records)."""
    if data is None:
        raise RecordFormatError("record without a key")
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    return None


def decode_offset_commit_value(data: bytes, record_offset: int) -> CommittedOffset:
    r = _Reader(data)
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
    r = _Reader(data)
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


def control_type(key: bytes | None) -> int:
    """The type of a transaction marker from its control record key (version, type)."""
    if key is None or len(key) < 4:
        raise RecordFormatError("control record key too short")
    return _I16.unpack_from(key, 2)[0]


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's rule: abs(hashCode) % partitions, where abs(Integer.MIN_VALUE) is 0."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
