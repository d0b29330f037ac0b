"""The ``moldau`` streaming sink: each micro-batch's output reaches the topic exactly once.

Every Spark task writes its share of a micro-batch in one Kafka
transaction, under a transactional id of its own that outlives restarts:
``moldau-sink-<query id>-<task partition>`` (Spark keeps the query id in the
checkpoint, and the number of shuffle partitions with it). The same string
names a consumer group whose committed offset on ``<topic>[0]`` is the next
batch id this writer has to write; that offset is sent in the same
transaction as the records, so either both are committed or neither is.

A task first calls init_transactions, which fences any earlier incarnation
of the same writer (a zombie from a crashed run or a failed attempt can no
longer commit) and completes or aborts its open transaction. Only then does
it read the committed batch id: if it is already past this batch, the
records were written before Spark recorded the batch as done, and the task
writes nothing. That is the case Spark creates on restart: it re-runs the
last batch in its offset log that has no entry in its commit log, with the
same offsets and the same state, so each task would produce the same rows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from . import configure_logging
from .clients import TIMEOUT_S, client_conf, produce

log = logging.getLogger(__name__)

# local properties Spark's micro-batch engine sets on every task it runs
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"

# fault injection for tests: a task that has committed batch N or later stops dead,
# before Spark can record the batch as done, so the test can kill the job right there
HOLD_ENV = "MOLDAU_PIPELINE_HOLD_AFTER_COMMIT"


class TransactionalBatchWriter:
    """Writes one writer's part of a batch in one transaction, and never the same batch twice."""

    def __init__(self, conf: Mapping[str, str], topic: str, writer_id: str):
        self.conf = dict(conf)
        self.topic = topic
        self.writer_id = writer_id
        self.marker = TopicPartition(topic, 0)

    def write(self, batch_id: int, records: Iterable[tuple[bytes | None, bytes | None]]) -> int | None:
        """Produce ``records`` for ``batch_id``; returns how many, or None if the batch was already written."""
        producer = Producer({**self.conf, "transactional.id": self.writer_id})
        producer.init_transactions(TIMEOUT_S)
        # read_committed makes librdkafka ask for stable offsets (no pending transactional commit)
        group = Consumer({**self.conf, "group.id": self.writer_id, "isolation.level": "read_committed",
                          "enable.auto.commit": False})
        try:
            if self.next_batch(group) > batch_id:
                return None
            producer.begin_transaction()
            try:
                count = 0
                for key, value in records:
                    produce(producer, self.topic, key, value)
                    count += 1
                next_batch = TopicPartition(self.topic, 0, batch_id + 1)
                producer.send_offsets_to_transaction([next_batch], group.consumer_group_metadata(), TIMEOUT_S)
                producer.commit_transaction(TIMEOUT_S)
            except BaseException:
                # a fenced producer cannot abort: its successor's init_transactions already did
                with contextlib.suppress(KafkaException):
                    producer.abort_transaction(TIMEOUT_S)
                raise
            return count
        finally:
            group.close()

    def next_batch(self, group: Consumer) -> int:
        """The first batch id not yet written (negative when none was)."""
        [committed] = group.committed([self.marker], TIMEOUT_S)
        return committed.offset


@dataclass(frozen=True)
class TaskCommit(WriterCommitMessage):
    partition: int
    records: int | None  # None: the batch was already written by an earlier run


class MoldauStreamWriter(DataSourceStreamWriter):
    """Rows with a ``value`` and optionally a ``key`` column (string or binary), like Spark's Kafka sink."""

    def __init__(self, options: Mapping[str, str], schema: StructType):
        self.conf = client_conf(options)
        self.topic = options["topic"]
        if "value" not in schema.fieldNames():
            raise ValueError(f"the moldau sink needs a value column; got {schema.simpleString()}")
        self.has_key = "key" in schema.fieldNames()

    def write(self, rows: Iterator[Row]) -> TaskCommit:
        configure_logging()
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty(BATCH_ID_PROPERTY))
        partition = ctx.partitionId()
        first = next(rows, None)
        if first is None:  # nothing to write, so nothing to write twice either
            return TaskCommit(partition, 0)
        records = ((_bytes(row["key"]) if self.has_key else None, _bytes(row["value"]))
                   for row in chain([first], rows))
        writer_id = f"moldau-sink-{ctx.getLocalProperty(QUERY_ID_PROPERTY)}-{partition}"
        count = TransactionalBatchWriter(self.conf, self.topic, writer_id).write(batch_id, records)
        if count is None:
            log.info("batch %d partition %d: already committed by an earlier run; not written again",
                     batch_id, partition)
        else:
            log.info("batch %d partition %d: committed %d records", batch_id, partition, count)
            _hold_if_asked(batch_id, partition)
        return TaskCommit(partition, count)

    def commit(self, messages: list[TaskCommit], batchId: int) -> None:
        configure_logging()
        written = sum(m.records or 0 for m in messages)
        replayed = [m.partition for m in messages if m.records is None]
        if replayed:
            log.info("batch %d done: %d records written to %s; partitions %s had been written by an earlier run",
                     batchId, written, self.topic, replayed)
        elif written:
            log.info("batch %d done: %d records written to %s", batchId, written, self.topic)

    def abort(self, messages: list[TaskCommit | None], batchId: int) -> None:
        configure_logging()
        finished = [m.partition for m in messages if m is not None]
        log.warning("batch %d failed; what partitions %s wrote is committed, and running the batch again skips them",
                    batchId, finished)


def _bytes(v: str | bytes | bytearray | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else None if v is None else bytes(v)


def _hold_if_asked(batch_id: int, partition: int) -> None:
    at = os.environ.get(HOLD_ENV)
    if at and batch_id >= int(at):
        log.warning("batch %d partition %d: holding after commit (%s)", batch_id, partition, HOLD_ENV)
        threading.Event().wait()
