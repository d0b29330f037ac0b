"""Reading a Fetch's partitions from the logs, one function per partition (Kafka's readFromLog).

A Fetch names its partitions as a map: a partition named twice is read once
(the later entry wins, the first position is kept), as Kafka's FetchRequest
builds its LinkedHashMap. The response holds at most ``max_bytes`` (the
request's, capped by the broker's ``fetch.max.bytes``), except that the first
partition with data returns at least one whole batch (KIP-74).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from storage.errors import OffsetOutOfRange
from storage.log import Log
from storage.log_manager import LogManager

from ..errors import ErrorCode

READ_COMMITTED = 1
FOLLOWER = -1  # a replica's fetch: up to the log end, not the high watermark


class TopicPartition(NamedTuple):
    topic: str | uuid.UUID  # the name, or the topic id in Fetch v13+
    partition: int


@dataclass(slots=True)
class FetchPartition:
    """One partition of a Fetch (Kafka's FetchRequest.PartitionData)."""

    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1  # a follower's (v12+): checked against this log's epochs on every fetch
    # v13+ names the topic by id: the name that id had when the request (or the session) named it
    topic_name: str | None = None


class PartitionData(NamedTuple):
    """What a read found for one partition (Kafka's FetchPartitionData)."""

    error: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    aborted_transactions: list | None = None
    diverging_epoch: dict | None = None  # a follower's log parts from the leader's here (nothing is read)


def fetchable_end(log_: Log, isolation: int) -> int:
    """The offset a consumer of this isolation level (or a follower) may read up to (exclusive)."""
    if isolation == FOLLOWER:
        return log_.log_end_offset
    return log_.last_stable_offset if isolation == READ_COMMITTED else log_.high_watermark


def partition_log(logs: LogManager, key: TopicPartition, name: str | None = None) -> Log | None:
    return find_log(logs, key, name)[0]


def find_log(logs: LogManager, key: TopicPartition, name: str | None = None) -> tuple[Log | None, PartitionData | None]:
    """The partition's log, or the answer when there is none (KIP-516 for a topic id): an id never known
    here is UNKNOWN_TOPIC_ID; an id a fetch session learned under ``name`` whose topic was since recreated
    under that name is INCONSISTENT_TOPIC_ID (Kafka resolves the name, then checks the log's id)."""
    topic = key.topic
    if not isinstance(topic, uuid.UUID):
        log_ = logs.log(topic, key.partition)
        return log_, (None if log_ is not None else _UNKNOWN_TOPIC)
    found = logs.topic_by_id(topic)
    if found is None and name is None:
        return None, _UNKNOWN_ID
    log_ = logs.log(found.name if found is not None else name, key.partition)
    if log_ is None:
        return None, _UNKNOWN_TOPIC
    if log_.topic_id != topic:
        return None, _INCONSISTENT_ID
    return log_, None


def read_partition(log_: Log, want: FetchPartition, isolation: int, max_bytes: int, min_one: bool) -> PartitionData:
    """Read one partition: whole batches from its fetch offset, at most ``max_bytes`` unless ``min_one``."""
    records, aborted = b"", None
    read_committed = isolation == READ_COMMITTED
    if read_committed:
        aborted = []
    offset = want.fetch_offset
    end = log_.log_end_offset if isolation == FOLLOWER else log_.high_watermark
    if offset != end and (max_bytes > 0 or min_one):
        try:
            if read_committed:
                records, aborted_txns = log_.read_committed(offset, max_bytes, min_one)
                aborted = [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted_txns]
            else:
                records = log_.read(offset, max_bytes, end, min_one=min_one)
        except OffsetOutOfRange:
            return _with_offsets(ErrorCode.OFFSET_OUT_OF_RANGE, log_)
    return _with_offsets(ErrorCode.NONE, log_, records, aborted)


def _with_offsets(error: int, log_: Log, records=b"", aborted=None) -> PartitionData:
    return PartitionData(error, log_.high_watermark, log_.last_stable_offset, log_.log_start_offset, records, aborted)


def read_from_logs(
    logs: LogManager, wanted: dict[TopicPartition, FetchPartition], isolation: int, max_bytes: int,
    answered: dict[TopicPartition, PartitionData] | None = None,
) -> tuple[dict[TopicPartition, PartitionData], int]:
    """Read every wanted partition in order: (what each returned, total bytes). Partitions in
    ``answered`` (not led here, a fenced epoch, a diverging follower) get that answer unread."""
    budget = max_bytes
    total = 0
    found = {}
    for key, want in wanted.items():
        if answered and key in answered:
            found[key] = answered[key]
            continue
        log_, missing = find_log(logs, key, want.topic_name)
        if log_ is None:
            found[key] = missing
            continue
        # KIP-74: only the first partition with data may exceed the limits, by one batch
        data = read_partition(log_, want, isolation, min(want.partition_max_bytes, budget), min_one=total == 0)
        size = len(data.records)
        budget = max(0, budget - size)
        total += size
        found[key] = data
    return found, total


_UNKNOWN_ID = PartitionData(ErrorCode.UNKNOWN_TOPIC_ID)
_UNKNOWN_TOPIC = PartitionData(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
_INCONSISTENT_ID = PartitionData(ErrorCode.INCONSISTENT_TOPIC_ID)


class IdleAnswer:
    """A led partition's answer while a consumer at its high watermark has nothing to read there."""

    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "leader_epoch", "encoded")

    def __init__(self, log_: Log, leader_epoch: int) -> None:
        self.high_watermark = log_.high_watermark
        self.last_stable_offset = log_.last_stable_offset
        self.log_start_offset = log_.log_start_offset
        self.leader_epoch = leader_epoch
        self.encoded: dict = {}  # the answer as a response version and isolation level encode it


class IdleAnswers:
    """The IdleAnswer of each partition sessionless consumers read, dropped when its log tells of a change
    (``Log.watchers``: an append, a moved high watermark or log start, a truncation, a new leadership state,
    the log deleted), so a fetch answers a partition with nothing new by one lookup, not a read."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, int], IdleAnswer] = {}

    def remember(self, name: str, log_: Log, leader_epoch: int) -> IdleAnswer:
        key = (name, log_.partition)
        answer = self.answers[key] = IdleAnswer(log_, leader_epoch)
        log_.watchers[self] = partial(self.answers.pop, key, None)  # (one per log: the same key each time)
        return answer
