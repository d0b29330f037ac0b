"""TransactionStateManager: transactional ids kept in the internal topic __transaction_state.

A transactional id lives in partition abs(hashCode(id)) % partitions, as in
Kafka. Each state change is appended there through the same Log.append as
Produce (and fsynced by the same flush settings) before it takes effect. On
startup every partition is replayed with compacted-topic semantics: the
latest value per key wins, a tombstone removes the id.
"""

from __future__ import annotations

import logging
from typing import Callable

from broker.internal_topics import open_internal_topic, partition_for
from broker.errors import ErrorCode
from broker.record_fields import RecordFormatError
from protocol.records import CorruptRecord, build_batch, iter_records, read_header
from storage.errors import RecordBatchTooLarge
from storage.log_manager import LogManager

from . import records
from .metadata import TransactionMetadata, TxnTransitMetadata

TRANSACTION_STATE_TOPIC = "__transaction_state"

log = logging.getLogger("moldau.transaction")


class TransactionStateManager:
    def __init__(self, logs: LogManager, config, notify_append: Callable[[str, int], None]):
        self.logs = logs
        self.notify_append = notify_append
        self.num_partitions = config["transaction.state.log.num.partitions"]
        self.segment_bytes = config["transaction.state.log.segment.bytes"]
        self.config = config

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def load(self) -> dict[str, TransactionMetadata]:
        """Create __transaction_state if missing, then replay every partition of it."""
        topic = open_internal_topic(self.logs, TRANSACTION_STATE_TOPIC, self.num_partitions, self.segment_bytes,
                                    self.config)
        transactions: dict[str, TransactionMetadata] = {}
        if topic is None:
            return transactions
        self.num_partitions = topic.num_partitions
        for partition in range(topic.num_partitions):
            log_ = self.logs.log(TRANSACTION_STATE_TOPIC, partition)
            for hdr, data in log_.batches():
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
        return transactions

    def append(self, transactional_id: str, transit: TxnTransitMetadata | None, now: int) -> ErrorCode:
        """Write a state change (None: the id's tombstone) to the id's partition."""
        partition = self.partition_for(transactional_id)
        log_ = self.logs.log(TRANSACTION_STATE_TOPIC, partition)
        if log_ is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        value = None if transit is None else records.transaction_value(transit)
        buf = bytearray(build_batch([(records.transaction_key(transactional_id), value)]))
        try:
            log_.append(buf, [(0, read_header(buf))], now)
        except RecordBatchTooLarge:
            return ErrorCode.UNKNOWN_SERVER_ERROR
        except OSError as exc:
            log.error("append to %s failed: %s", log_.name, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.notify_append(TRANSACTION_STATE_TOPIC, partition)
        return ErrorCode.NONE
