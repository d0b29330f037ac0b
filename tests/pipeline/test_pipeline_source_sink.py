"""The ``moldau`` source's offset planning and reads, and the sink's exactly-once writes, without Spark.

Spark drives the stream reader through four plain Python calls
(initialOffset, latestOffset, partitions, read); these tests make the same
calls against a real broker. The sink's ``TransactionalBatchWriter`` is what
each Spark task runs; here it is replayed and fenced the way a crash and a
restart would.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from helpers.groups import wait_until
from helpers.kafka import COMMON, create_topic, make_messages, produce_all
from helpers.pipeline import read_topic
from pipeline.sink import TransactionalBatchWriter
from pipeline.source import MoldauStreamReader, OffsetRange


def reader(bootstrap: str, topic: str, **options) -> MoldauStreamReader:
    return MoldauStreamReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **options})


def read(r: MoldauStreamReader, ranges) -> list[tuple]:
    """(partition, offset, key, value) of every row the reader returns for ``ranges``."""
    return [(row[3], row[4], row[0], row[1]) for part in ranges for row in r.read(part)]


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({**COMMON, "bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(30)
    return p


def send(p: Producer, topic: str, records: list[tuple[int, bytes]]) -> None:
    """Produce (partition, value) records inside the open transaction and wait until they are in the log."""
    for partition, value in records:
        p.produce(topic, value=value, key=value, partition=partition)
    assert p.flush(30) == 0


def values(rows) -> list[bytes]:
    return [row[3] for row in rows]


def spread(tag: bytes, n: int) -> list[tuple[int, bytes]]:
    """``n`` records alternating between partitions 0 and 1."""
    return [(i % 2, b"%s%d" % (tag, i)) for i in range(n)]


def batch(batch_id: int, n: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % i, b"batch-%d-record-%d" % (batch_id, i)) for i in range(n)]


def test_reader_plans_one_range_per_partition_and_reads_exactly_it(broker):
    topic = "source-plan"
    create_topic(broker.bootstrap, topic, 3)
    msgs = make_messages(30, 3, edge_cases=False)
    produce_all(broker.bootstrap, topic, msgs, linger_ms=50)  # several records per batch
    r = reader(broker.bootstrap, topic)

    start = r.initialOffset()
    assert start == {topic: {"0": 0, "1": 0, "2": 0}}
    end = r.latestOffset()
    assert end == {topic: {"0": 10, "1": 10, "2": 10}}
    ranges = r.partitions(start, end)
    assert ranges == [OffsetRange(topic, p, 0, 10) for p in range(3)]
    rows = read(r, ranges)
    assert rows == sorted(((m.partition, m.seq // 3, m.key, m.value) for m in msgs), key=lambda row: row[:2])

    more = make_messages(5, 2, seed=2, edge_cases=False)  # 3 records to partition 0, 2 to partition 1
    produce_all(broker.bootstrap, topic, more)
    later = r.latestOffset()
    assert later == {topic: {"0": 13, "1": 12, "2": 10}}
    assert r.partitions(end, later) == [OffsetRange(topic, 0, 10, 13), OffsetRange(topic, 1, 10, 12)]
    assert r.partitions(later, later) == []

    # a range ends where it says even with records after it
    assert [row[1] for row in read(r, [OffsetRange(topic, 0, 3, 7)])] == [3, 4, 5, 6]
    assert reader(broker.bootstrap, topic, startingOffsets="latest").initialOffset() == later


def test_reader_skips_aborted_records_and_never_plans_into_an_open_transaction(broker):
    topic = "source-txn"
    create_topic(broker.bootstrap, topic, 2)
    p, other = txn_producer(broker.bootstrap, "gen-a"), txn_producer(broker.bootstrap, "gen-b")

    for tag, commit in ((b"committed-1-", True), (b"aborted-", False), (b"committed-2-", True)):
        p.begin_transaction()
        send(p, topic, spread(tag, 6))
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    other.begin_transaction()
    send(other, topic, spread(b"open-", 4))  # stays open for now
    p.begin_transaction()
    send(p, topic, spread(b"after-open-", 4))
    p.commit_transaction(30)

    r = reader(broker.bootstrap, topic)
    start, end = r.initialOffset(), r.latestOffset()
    # per partition: 3 + 3 + 3 records, and the markers of the first three transactions
    assert end == {topic: {"0": 12, "1": 12}}, "the end must be the last stable offset: the open transaction's start"
    first_batch = read(r, r.partitions(start, end))
    want = [v for _, v in sorted(spread(b"committed-1-", 6) + spread(b"committed-2-", 6), key=lambda pv: pv[0])]
    assert values(first_batch) == want

    other.commit_transaction(30)
    # EndTxn is answered once the commit is in __transaction_state (as Kafka's); the markers that move
    # the last stable offset follow
    later = wait_until(lambda: all(o > 12 for o in r.latestOffset()[topic].values()) and r.latestOffset(), 30,
                       "the last stable offset of both partitions to pass the committed transaction")
    assert later == {topic: {"0": 18, "1": 18}}  # 2 + 2 records and 2 markers more each, after offset 12
    second_batch = read(r, r.partitions(end, later))
    assert values(second_batch) == [b"open-0", b"open-2", b"after-open-0", b"after-open-2",
                                    b"open-1", b"open-3", b"after-open-1", b"after-open-3"]
    # what Spark does after a crash: read a planned range again, now with more in the log after it
    assert read(r, r.partitions(start, end)) == first_batch


def test_writer_writes_each_batch_once_however_often_it_is_run(broker):
    topic = "sink-once"
    create_topic(broker.bootstrap, topic, 2)
    conf = {"bootstrap.servers": broker.bootstrap}

    assert TransactionalBatchWriter(conf, topic, "writer-a").write(0, batch(0, 3)) == 3
    # each call is a fresh task attempt: a new producer and a new read of the committed batch id
    assert TransactionalBatchWriter(conf, topic, "writer-a").write(0, batch(0, 3)) is None
    assert TransactionalBatchWriter(conf, topic, "writer-a").write(1, batch(1, 4)) == 4
    assert TransactionalBatchWriter(conf, topic, "writer-a").write(1, batch(1, 4)) is None
    assert TransactionalBatchWriter(conf, topic, "writer-a").write(0, batch(0, 3)) is None
    # another writer (another Spark task partition) keeps its own batch id
    assert TransactionalBatchWriter(conf, topic, "writer-b").write(1, batch(1, 2)) == 2

    got = sorted(value for _, _, _, value in read_topic(broker.bootstrap, topic))
    assert got == sorted(v for _, v in batch(0, 3) + batch(1, 4) + batch(1, 2))


def test_writer_fences_a_zombie_and_aborts_its_open_transaction(broker):
    topic = "sink-zombie"
    create_topic(broker.bootstrap, topic, 1)
    conf = {"bootstrap.servers": broker.bootstrap}
    zombie = txn_producer(broker.bootstrap, "writer-z")  # an attempt that stalled mid-batch
    zombie.begin_transaction()
    send(zombie, topic, [(0, b"zombie-%d" % i) for i in range(3)])

    assert TransactionalBatchWriter(conf, topic, "writer-z").write(7, [(None, b"new-0"), (None, b"new-1")]) == 2
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    assert [value for _, _, _, value in read_topic(broker.bootstrap, topic)] == [b"new-0", b"new-1"]


def test_writer_that_fails_mid_batch_leaves_nothing_and_its_retry_writes_once(broker):
    topic = "sink-retry"
    create_topic(broker.bootstrap, topic, 1)
    conf = {"bootstrap.servers": broker.bootstrap}
    rows = [(None, b"row-%d" % i) for i in range(5)]

    def failing():
        yield from rows[:2]
        raise RuntimeError("task failed while writing")

    with pytest.raises(RuntimeError, match="task failed"):
        TransactionalBatchWriter(conf, topic, "writer-r").write(4, failing())
    assert read_topic(broker.bootstrap, topic) == []
    assert TransactionalBatchWriter(conf, topic, "writer-r").write(4, rows) == 5
    assert TransactionalBatchWriter(conf, topic, "writer-r").write(4, rows) is None
    assert [value for _, _, _, value in read_topic(broker.bootstrap, topic)] == [v for _, v in rows]
