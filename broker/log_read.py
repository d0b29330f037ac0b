"""Reading a Fetch's partitions from the logs, one function per partition (Kafka's readFromLog).

A Fetch names its partitions as a map: a partition named twice is read once
(the later entry wins, the first position is kept), as Kafka's FetchRequest
builds its LinkedHashMap. The response holds at most ``max_bytes`` (the
request's, capped by the broker's ``fetch.max.bytes``), except that the first
partition with data returns at least one whole batch (KIP-74).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from storage.errors import OffsetOutOfRange
from storage.log import Log

from .errors import ErrorCode

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class TopicPartition(NamedTuple):
    topic: str  # the name; for a topic id nobody knows, the id as text
    partition: int


@dataclass(slots=True)
class FetchPartition:
    """One partition of a Fetch (Kafka's FetchRequest.PartitionData), with its log if it has one."""

    topic_id: object  # uuid.UUID; the zero id for requests that name topics
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    log: Log | None = None
    error: int = ErrorCode.NONE  # UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID when there is no log


class PartitionData(NamedTuple):
    """What a read found for one partition (Kafka's FetchPartitionData)."""

    error: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    aborted_transactions: list | None = None


def fetchable_end(log_: Log, isolation: int) -> int:
    """The offset a consumer of this isolation level may read up to (exclusive)."""
    return log_.last_stable_offset if isolation == READ_COMMITTED else log_.high_watermark


def read_partition(want: FetchPartition, isolation: int, max_bytes: int, min_one: bool) -> PartitionData:
    """Read one partition: whole batches from its fetch offset, at most ``max_bytes`` unless ``min_one``."""
    log_ = want.log
    if log_ is None:
        return PartitionData(want.error)
    records, aborted = b"", None
    read_committed = isolation == READ_COMMITTED
    if read_committed:
        aborted = []
    offset = want.fetch_offset
    if offset != log_.high_watermark and (max_bytes > 0 or min_one):
        try:
            if read_committed:
                records, aborted_txns = log_.read_committed(offset, max_bytes, min_one)
                aborted = [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted_txns]
            else:
                records = log_.read(offset, max_bytes, min_one=min_one)
        except OffsetOutOfRange:
            return _with_offsets(ErrorCode.OFFSET_OUT_OF_RANGE, log_)
    return _with_offsets(ErrorCode.NONE, log_, records, aborted)


def _with_offsets(error: int, log_: Log, records=b"", aborted=None) -> PartitionData:
    return PartitionData(error, log_.high_watermark, log_.last_stable_offset, log_.log_start_offset, records, aborted)


def read_from_logs(
    wanted: dict[TopicPartition, FetchPartition], isolation: int, max_bytes: int
) -> tuple[dict[TopicPartition, PartitionData], int]:
    """Read every wanted partition in order: (what each returned, total bytes)."""
    budget = max_bytes
    total = 0
    found = {}
    for key, want in wanted.items():
        # KIP-74: only the first partition with data may exceed the limits, by one batch
        data = read_partition(want, isolation, min(want.partition_max_bytes, budget), min_one=total == 0)
        size = len(data.records)
        budget = max(0, budget - size)
        total += size
        found[key] = data
    return found, total
