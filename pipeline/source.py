"""The ``moldau`` streaming source: a topic read exactly between the offsets in Spark's checkpoint.

Offsets are ``{"<topic>": {"<partition>": <next offset>}}`` (JSON keys are
strings), the shape Spark's Kafka source checkpoints too. ``latestOffset``
asks the broker for every partition's last stable offset in one ListOffsets,
so a micro-batch's end never falls inside an undecided transaction: reading
the same range again, after a restart, gives the same records.

A micro-batch becomes one Spark task per partition that has new records. A
task reads ``[start, end)`` with assign and seek. Under read_committed the
broker's aborted records and transaction markers never reach the
application, so a task cannot count records: it stops at the first record,
end-of-partition event or consumer position at or past ``end``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from .clients import admin_client, client_conf, isolation, list_offsets

# the columns of Spark's Kafka source, so both formats feed the same parsing
SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
READ_TIMEOUT_S = 120.0  # a task whose read gets no record in this long fails (and Spark retries it)
POLL_S = 0.5


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One task's share of a micro-batch: ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


def plan(topic: str, start: Mapping, end: Mapping) -> list[OffsetRange]:
    """One range per partition with records between the two offsets (a partition new since ``start`` reads from 0)."""
    before, after = start.get(topic, {}), end.get(topic, {})
    ranges = []
    for partition, stop in sorted(after.items(), key=lambda item: int(item[0])):
        first = before.get(partition, 0)
        if stop < first:
            raise ValueError(f"{topic}[{partition}] went back from offset {first} to {stop}: recreated or truncated?")
        if stop > first:
            ranges.append(OffsetRange(topic, int(partition), first, stop))
    return ranges


def read_range(conf: Mapping[str, str], r: OffsetRange) -> Iterator[tuple]:
    """The records of ``r`` as rows of ``SCHEMA``, in offset order."""
    consumer = Consumer({
        "isolation.level": "read_committed",
        **conf,
        "group.id": "moldau-spark-source",  # librdkafka wants one; nothing is ever committed to it
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",  # a range that is no longer there fails the task
    })
    tp = TopicPartition(r.topic, r.partition, r.start)
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            messages = consumer.consume(1000, POLL_S)
            if messages:  # a slow read that moves is not stuck (a loaded machine)
                deadline = time.monotonic() + READ_TIMEOUT_S
            for m in messages:
                error = m.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                if m.offset() >= r.end:
                    return
                if error is None:
                    yield _row(m)
            if not messages and consumer.position([tp])[0].offset >= r.end:
                return
            if time.monotonic() > deadline:
                position = consumer.position([tp])[0].offset
                raise TimeoutError(f"{r}: stuck at offset {position} for {READ_TIMEOUT_S:.0f}s")
    finally:
        consumer.close()


def _row(m) -> tuple:
    timestamp_type, ms = m.timestamp()
    timestamp = datetime.fromtimestamp(ms / 1000, timezone.utc)
    # librdkafka numbers "not available" 0 and CreateTime 1; Kafka, and Spark, number CreateTime 0
    return m.key(), m.value(), m.topic(), m.partition(), m.offset(), timestamp, timestamp_type - 1


class MoldauStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]):
        self.conf = client_conf(options)
        self.topic = options["subscribe"]
        self.starting = options.get("startingOffsets", "earliest")
        if self.starting not in ("earliest", "latest"):
            raise ValueError(f"startingOffsets must be earliest or latest, not {self.starting!r}")
        self._admin: AdminClient | None = None

    def __getstate__(self) -> dict:
        # Spark ships the reader to the tasks, which only read(); an AdminClient does not pickle
        return {**self.__dict__, "_admin": None}

    def initialOffset(self) -> dict:
        return self._offsets(OffsetSpec.earliest() if self.starting == "earliest" else OffsetSpec.latest())

    def latestOffset(self) -> dict:
        return self._offsets(OffsetSpec.latest())

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        return plan(self.topic, start, end)

    def read(self, partition: OffsetRange) -> Iterator[tuple]:
        return read_range(self.conf, partition)

    def _offsets(self, spec: OffsetSpec) -> dict:
        if self._admin is None:  # one for the life of the query: latestOffset runs every trigger
            self._admin = admin_client(self.conf)
        offsets = list_offsets(self._admin, self.topic, spec, isolation(self.conf))
        return {self.topic: {str(p): offset for p, offset in offsets.items()}}
