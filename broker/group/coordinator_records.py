"""Kafka's coordinator records of modern groups in __consumer_offsets (KIP-848 consumer groups' and KIP-932
share groups'): the common encoding.

A key is an int16 record type then the key's fields (group id, and member id for a member's records); a value
is an int16 version (0 for all of these), then its fields, flexible. Their schemas are in protocol/messages.json
(key schemas at version = record type) and are encoded with the protocol codec. A null value is a tombstone.
"""

from __future__ import annotations

import uuid

from broker.coordinator.record_fields import I16, RecordFormatError
from protocol import codec

Record = tuple[bytes, bytes | None]
Assignment = frozenset  # of (topic id, partition)


def record_type(key: bytes) -> int:
    return I16.unpack_from(key)[0] if len(key) >= 2 else -1


def key(schema: str, record_type_: int, group_id: str, member_id: str | None = None) -> bytes:
    fields = {"group_id": group_id} if member_id is None else {"group_id": group_id, "member_id": member_id}
    return I16.pack(record_type_) + codec.encode_bytes(schema + "Key", record_type_, fields)


def value(schema: str, fields: dict) -> bytes:
    return I16.pack(0) + codec.encode_bytes(schema + "Value", 0, fields)


def decode(schema: str, key_: bytes, value_: bytes | None) -> tuple[dict, dict | None]:
    """(the key's fields, the value's or None for a tombstone); RecordFormatError if either is unreadable."""
    record_type_ = record_type(key_)
    try:
        fields, _ = codec.decode(schema + "Key", record_type_, key_, 2)
        if value_ is None:
            return fields, None
        version = I16.unpack_from(value_)[0]
        if version != 0:
            raise RecordFormatError(f"{schema} record: value version {version}")
        return fields, codec.decode(schema + "Value", 0, value_, 2)[0]
    except (codec.DecodeError, KeyError, ValueError, IndexError) as exc:
        raise RecordFormatError(f"{schema} record: {exc}") from None


def wire(assignment: Assignment) -> list[dict]:
    """[{topic_id, partitions}] as heartbeat responses and the records carry an assignment."""
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in assignment:
        by_topic.setdefault(topic_id, []).append(partition)
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items(), key=lambda e: str(e[0]))]


def assignment_of(topic_partitions: list[dict]) -> Assignment:
    return frozenset((t["topic_id"], p) for t in topic_partitions for p in t["partitions"])


def assigned_topics(targets, logs) -> dict[str, tuple[uuid.UUID, int]]:
    """The subscribed topics a stored target assignment was computed for, as far as it tells (each assignor
    gives every partition of a subscribed topic to some member): name -> (topic id, partitions). A topic deleted
    (or re-created under a new id) while no coordinator served the group differs from what the next heartbeat
    finds, so the group epoch is bumped then."""
    seen: dict[uuid.UUID, set[int]] = {}
    for target in targets:
        for topic_id, partition in target:
            seen.setdefault(topic_id, set()).add(partition)
    out = {}
    for topic_id, partitions in seen.items():
        topic = logs.topic_by_id(topic_id)
        out[topic.name if topic is not None else str(topic_id)] = (topic_id, len(partitions))
    return out
