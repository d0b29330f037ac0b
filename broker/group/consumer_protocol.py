"""The consumer embedded protocol of classic groups: ConsumerProtocolSubscription and -Assignment.

Read and written by the broker only for classic members of a KIP-848 group
(online upgrade): their JoinGroup metadata gives their subscription and the
partitions they own, and their SyncGroup answer carries the assignment the
broker computed. Versions past those known here are read as the highest known,
as Kafka does (fields are only ever appended).
"""

from __future__ import annotations

from typing import NamedTuple

from broker.coordinator.record_fields import I16, I32, Reader, RecordFormatError, encode_string


class Subscription(NamedTuple):
    topics: list[str]
    owned: list[tuple[str, int]]  # v1+
    rack_id: str | None  # v3+


def parse_subscription(data: bytes) -> Subscription:
    """RecordFormatError if it does not parse."""
    r = Reader(data)
    version = r.int16()
    if version < 0:
        raise RecordFormatError(f"subscription version {version}")
    topics = [r.string() for _ in range(r.count())]
    r.bytes()  # user data: the client-side assignor's, of no use to the broker's
    owned: list[tuple[str, int]] = []
    rack = None
    if version >= 1:
        for _ in range(r.count()):
            topic = r.string()
            owned += [(topic, r.int32()) for _ in range(r.count())]
    if version >= 2:
        r.int32()  # generation
    if version >= 3:
        rack = r.nullable_string()
    return Subscription(topics, owned, rack)


def parse_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a ConsumerProtocolAssignment (empty bytes: none); RecordFormatError if it does not parse."""
    if not data:
        return []
    r = Reader(data)
    if r.int16() < 0:
        raise RecordFormatError("negative assignment version")
    out = []
    for _ in range(r.count()):
        topic = r.string()
        out += [(topic, r.int32()) for _ in range(r.count())]
    return out


def encode_assignment(partitions: list[tuple[str, int]]) -> bytes:
    """A ConsumerProtocolAssignment v0 without user data."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(I16.pack(0) + I32.pack(len(by_topic)))
    for topic, ps in sorted(by_topic.items()):
        out += encode_string(topic) + I32.pack(len(ps)) + b"".join(I32.pack(p) for p in sorted(ps))
    return bytes(out + I32.pack(-1))
