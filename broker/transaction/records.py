"""Keys and values of __transaction_state records: Kafka's TransactionLog formats.

Key version 0: the transactional id. Value version 0 (the non-flexible one,
which every Kafka version reads): producer id, producer epoch, transaction
timeout, state id, the transaction's partitions by topic (null while Empty),
last update timestamp, start timestamp. Value version 1 (flexible) adds
tagged fields, written here only when transaction version 2 has a producer
id to hand over: the previous (tag 0) and next (tag 1) producer ids and the
client's transaction version (tag 2). A null value is a tombstone: the
transactional id has expired.
"""

from __future__ import annotations

from typing import NamedTuple

from broker.coordinator.record_fields import (
    I8,
    I16,
    I32,
    I64,
    Reader,
    RecordFormatError,
    encode_compact_string,
    encode_string,
    encode_uvarint,
)
from protocol.records import NO_PRODUCER_ID

from .metadata import TopicPartition, TransactionMetadata, TransactionState, TxnTransitMetadata

KEY_VERSION = 0
VALUE_VERSION = 0
TAGGED_VALUE_VERSION = 1
PREVIOUS_PRODUCER_ID_TAG, NEXT_PRODUCER_ID_TAG, CLIENT_TRANSACTION_VERSION_TAG = 0, 1, 2


class TransactionRecord(NamedTuple):
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int
    next_producer_id: int = NO_PRODUCER_ID
    previous_producer_id: int = NO_PRODUCER_ID

    def to_metadata(self, transactional_id: str) -> TransactionMetadata:
        return TransactionMetadata(transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms,
                                   self.state, self.partitions, self.start_ms, self.last_update_ms,
                                   next_producer_id=self.next_producer_id,
                                   previous_producer_id=self.previous_producer_id)


def transaction_key(transactional_id: str) -> bytes:
    return I16.pack(KEY_VERSION) + encode_string(transactional_id)


def transaction_value(t: TxnTransitMetadata) -> bytes:
    tagged = {tag: I64.pack(producer_id) for tag, producer_id in (
        (PREVIOUS_PRODUCER_ID_TAG, t.previous_producer_id), (NEXT_PRODUCER_ID_TAG, t.next_producer_id))
        if producer_id != NO_PRODUCER_ID}
    flexible = bool(tagged)
    if flexible:
        tagged[CLIENT_TRANSACTION_VERSION_TAG] = I16.pack(2)
    out = bytearray(I16.pack(TAGGED_VALUE_VERSION if flexible else VALUE_VERSION))
    out += I64.pack(t.producer_id) + I16.pack(t.producer_epoch) + I32.pack(t.timeout_ms) + I8.pack(t.state)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(t.partitions):
        by_topic.setdefault(topic, []).append(partition)
    if t.state == TransactionState.EMPTY:
        out += encode_uvarint(0) if flexible else I32.pack(-1)
    else:
        out += encode_uvarint(len(by_topic) + 1) if flexible else I32.pack(len(by_topic))
        for topic, partitions in by_topic.items():
            if flexible:
                out += encode_compact_string(topic) + encode_uvarint(len(partitions) + 1)
            else:
                out += encode_string(topic) + I32.pack(len(partitions))
            out += b"".join(I32.pack(p) for p in partitions)
            if flexible:
                out += encode_uvarint(0)  # the topic's tagged fields: none
    out += I64.pack(t.last_update_ms) + I64.pack(t.start_ms)
    if flexible:
        out += encode_uvarint(len(tagged))
        for tag, raw in sorted(tagged.items()):
            out += encode_uvarint(tag) + encode_uvarint(len(raw)) + raw
    return bytes(out)


def decode_key(data: bytes | None) -> str:
    if data is None:
        raise RecordFormatError("record without a key")
    r = Reader(data)
    version = r.int16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"transaction log key version {version}")
    return r.string()


def decode_value(data: bytes) -> TransactionRecord:
    r = Reader(data)
    version = r.int16()
    if version not in (VALUE_VERSION, TAGGED_VALUE_VERSION):
        raise RecordFormatError(f"transaction log value version {version}")
    flexible = version == TAGGED_VALUE_VERSION
    producer_id, producer_epoch, timeout_ms = r.int64(), r.int16(), r.int32()
    try:
        state = TransactionState(r.int8())
    except ValueError as exc:
        raise RecordFormatError(str(exc)) from None
    partitions = set()
    for _ in range(r.compact_count() if flexible else r.count()):
        topic = r.compact_string() if flexible else r.string()
        partitions.update((topic, r.int32()) for _ in range(r.compact_count() if flexible else r.count()))
        if flexible:
            r.tagged_fields()
    last_update_ms, start_ms = r.int64(), r.int64()
    tagged = r.tagged_fields() if flexible else {}

    def producer_id_tag(tag: int) -> int:
        raw = tagged.get(tag)
        return NO_PRODUCER_ID if raw is None else Reader(raw).int64()

    return TransactionRecord(producer_id, producer_epoch, timeout_ms, state, frozenset(partitions),
                             last_update_ms, start_ms, producer_id_tag(NEXT_PRODUCER_ID_TAG),
                             producer_id_tag(PREVIOUS_PRODUCER_ID_TAG))
