"""TransactionStateManager: transactional ids kept in the internal topic __transaction_state.

A transactional id lives in partition abs(hashCode(id)) % partitions, as in
Kafka. Each state change is appended there as the partition's leader before
it takes effect, and the request is answered once the append is committed.
A partition is replayed when this broker becomes its leader, with
compacted-topic semantics: the latest value per key wins, a tombstone removes
the id.
"""

from __future__ import annotations

import logging
from typing import Callable

from broker.coordinator import partitions as coordinator_partitions
from broker.coordinator.internal_topics import (
    TRANSACTION_STATE_TOPIC,
    open_internal_topic,
    partition_for,
)
from broker.coordinator.record_fields import RecordFormatError
from broker.errors import ErrorCode
from protocol.errors import CorruptRecord
from protocol.records import BatchHeader, build_batch, iter_records
from storage.log_manager import LogManager

from . import records
from .metadata import TransactionMetadata, TxnTransitMetadata

log = logging.getLogger("moldau.transaction")


class TransactionStateManager:
    def __init__(self, logs: LogManager, replicas, config, notify_append: Callable[[str, int], None]):
        self.logs = logs
        self.replicas = replicas
        self.notify_append = notify_append
        self.num_partitions = config["transaction.state.log.num.partitions"]
        self.segment_bytes = config["transaction.state.log.segment.bytes"]
        self.config = config

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def open_topic(self) -> None:
        """Create __transaction_state here if missing (a standalone broker's start)."""
        open_internal_topic(self.logs, TRANSACTION_STATE_TOPIC, self.num_partitions, self.segment_bytes, self.config)

    async def load_partition(self, partition: int) -> dict[str, TransactionMetadata]:
        """The transactional ids of one partition, replayed from its log in steps."""
        self.num_partitions = self.logs.topic(TRANSACTION_STATE_TOPIC).num_partitions
        log_ = self.logs.log(TRANSACTION_STATE_TOPIC, partition)
        transactions: dict[str, TransactionMetadata] = {}

        def feed(hdr: BatchHeader, data: bytes) -> None:
            try:
                for record in iter_records(data):
                    transactional_id = records.decode_key(record.key)
                    if record.value is None:
                        transactions.pop(transactional_id, None)
                    else:
                        transactions[transactional_id] = records.decode_value(record.value).to_metadata(
                            transactional_id)
            except (CorruptRecord, RecordFormatError) as exc:
                log.warning("%s: skipped unreadable batch at offset %d (%s)", log_.name, hdr.base_offset, exc)

        await coordinator_partitions.replay(log_, feed)
        log.log(logging.INFO if log_.log_end_offset > log_.log_start_offset else logging.DEBUG,
                "loaded %d transactional ids from %s", len(transactions), log_.name)
        return transactions

    def append(self, transactional_id: str, transit: TxnTransitMetadata | None, now: int) -> ErrorCode:
        """Write a state change (None: the id's tombstone) to the id's partition, as its leader."""
        partition = self.partition_for(transactional_id)
        value = None if transit is None else records.transaction_value(transit)
        buf = bytearray(build_batch([(records.transaction_key(transactional_id), value)]))
        error, _ = coordinator_partitions.append(self.replicas, TRANSACTION_STATE_TOPIC, partition, buf, now)
        if error == ErrorCode.NONE:
            self.notify_append(TRANSACTION_STATE_TOPIC, partition)
        elif error == ErrorCode.MESSAGE_TOO_LARGE:
            return ErrorCode.UNKNOWN_SERVER_ERROR
        return coordinator_partitions.client_error(error)

    def is_committed(self, transactional_id: str) -> bool:
        return coordinator_partitions.is_committed(self.replicas, TRANSACTION_STATE_TOPIC,
                                                   self.partition_for(transactional_id))

    def committed(self, transactional_id: str) -> coordinator_partitions.Pending:
        """Once what was written for the id so far is committed (acks=all, up to request.timeout.ms): NONE,
        else COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR."""
        return coordinator_partitions.committed(self.replicas, TRANSACTION_STATE_TOPIC,
                                                self.partition_for(transactional_id), self.config["request.timeout.ms"])
