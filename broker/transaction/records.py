"""Keys and values of __transaction_state records: Kafka's TransactionLog formats.

Key version 0: the transactional id. Value version 0 (the non-flexible one,
which every Kafka version reads): producer id, producer epoch, transaction
timeout, state id, the transaction's partitions by topic (null while Empty),
last update timestamp, start timestamp. A null value is a tombstone: the
transactional id has expired.
"""

from __future__ import annotations

from typing import NamedTuple

from broker.record_fields import I8, I16, I32, I64, Reader, RecordFormatError, encode_string

from .metadata import TopicPartition, TransactionMetadata, TransactionState, TxnTransitMetadata

KEY_VERSION = 0
VALUE_VERSION = 0


class TransactionRecord(NamedTuple):
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int

    def to_metadata(self, transactional_id: str) -> TransactionMetadata:
        return TransactionMetadata(transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms,
                                   self.state, self.partitions, self.start_ms, self.last_update_ms)


def transaction_key(transactional_id: str) -> bytes:
    return I16.pack(KEY_VERSION) + encode_string(transactional_id)


def transaction_value(t: TxnTransitMetadata) -> bytes:
    out = bytearray(I16.pack(VALUE_VERSION))
    out += I64.pack(t.producer_id) + I16.pack(t.producer_epoch) + I32.pack(t.timeout_ms) + I8.pack(t.state)
    if t.state == TransactionState.EMPTY:
        out += I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(t.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out += I32.pack(len(by_topic))
        for topic, partitions in by_topic.items():
            out += encode_string(topic) + I32.pack(len(partitions))
            out += b"".join(I32.pack(p) for p in partitions)
    out += I64.pack(t.last_update_ms) + I64.pack(t.start_ms)
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
    if version != VALUE_VERSION:
        raise RecordFormatError(f"transaction log value version {version}")
    producer_id, producer_epoch, timeout_ms = r.int64(), r.int16(), r.int32()
    try:
        state = TransactionState(r.int8())
    except ValueError as exc:
        raise RecordFormatError(str(exc)) from None
    partitions = set()
    for _ in range(r.count()):
        topic = r.string()
        partitions.update((topic, r.int32()) for _ in range(r.count()))
    last_update_ms, start_ms = r.int64(), r.int64()
    return TransactionRecord(producer_id, producer_epoch, timeout_ms, state, frozenset(partitions),
                             last_update_ms, start_ms)
