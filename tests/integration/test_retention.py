"""Retention (retention.ms, retention.bytes) and DeleteRecords, driven with confluent-kafka.

Old segments go, the log start offset follows (ListOffsets earliest, fetch
responses), a consumer positioned below it gets OFFSET_OUT_OF_RANGE and
recovers through auto.offset.reset, and the log start offset survives a
restart.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from helpers.kafka import admin, consumer, flush, producer, watermarks

HOUR_MS = 3_600_000


def _create(bootstrap: str, topic: str, **configs: str) -> None:
    a = admin(bootstrap)
    futures = a.create_topics([NewTopic(topic, 1, 1, config=configs)], operation_timeout=30)
    futures[topic].result(30)


def _produce(bootstrap: str, topic: str, count: int, *, timestamp_ms: int | None = None, start: int = 0) -> list[int]:
    """``count`` records of ~200 bytes, one batch each (so segments roll between them); their offsets."""
    p, _ = producer(bootstrap, linger_ms=0, enable_idempotence=True)
    offsets: list[int] = []
    for i in range(start, start + count):
        kwargs = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
        p.produce(topic, key=b"k%d" % i, value=b"v%d-" % i + b"x" * 200, partition=0,
                  on_delivery=lambda err, m: offsets.append(-1 if err else m.offset()), **kwargs)
        p.flush(30)
    flush(p)
    assert len(offsets) == count and -1 not in offsets
    return offsets


def _earliest(bootstrap: str, topic: str) -> int:
    c, _ = consumer(bootstrap)
    try:
        return watermarks(c, topic, 0)[0]
    finally:
        c.close()


def _wait_earliest(bootstrap: str, topic: str, at_least: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        earliest = _earliest(bootstrap, topic)
        if earliest >= at_least or time.monotonic() > deadline:
            return earliest
        time.sleep(0.2)


def _segment_bases(broker, topic: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in broker.partition_dir(topic, 0).glob("*.log"))


def _read_with_reset(bootstrap: str, topic: str, start: int, end: int) -> list[int]:
    """Offsets a consumer assigned at ``start`` reads up to ``end``, with auto.offset.reset=earliest."""
    c, errors = consumer(bootstrap, auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition(topic, 0, start)])
        got: list[int] = []
        deadline = time.monotonic() + 30
        while (not got or got[-1] < end - 1) and time.monotonic() < deadline:
            message = c.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.offset())
        return got
    finally:
        c.close()


def test_time_retention_deletes_expired_segments_and_consumers_reset(start_broker):
    broker = start_broker({"log.retention.check.interval.ms": 300, "log.segment.delete.delay.ms": 0})
    topic = "retained-by-time"
    _create(broker.bootstrap, topic, **{"segment.bytes": "1000", "retention.ms": str(HOUR_MS)})
    old = _produce(broker.bootstrap, topic, 20, timestamp_ms=int(time.time() * 1000) - 2 * HOUR_MS)
    recent = _produce(broker.bootstrap, topic, 20, start=20)
    end = recent[-1] + 1

    earliest = _wait_earliest(broker.bootstrap, topic, at_least=1)
    assert earliest > 0, broker.log_tail()
    time.sleep(1)  # a few more checks: nothing else may go
    bases = _segment_bases(broker, topic)
    # exactly the segments holding only expired records are gone: the first left holds the first recent record
    assert bases[0] == earliest == _earliest(broker.bootstrap, topic)
    following = bases[1] if len(bases) > 1 else end
    assert earliest <= recent[0] < following
    assert earliest > old[0]
    assert not list(broker.partition_dir(topic, 0).glob("*.deleted"))  # log.segment.delete.delay.ms=0

    got = _read_with_reset(broker.bootstrap, topic, 0, end)
    assert got == list(range(earliest, end))

    broker.restart()
    assert _earliest(broker.bootstrap, topic) == earliest


def test_size_retention_keeps_partition_under_retention_bytes(start_broker):
    broker = start_broker({"log.retention.check.interval.ms": 300})
    topic = "retained-by-size"
    _create(broker.bootstrap, topic, **{"segment.bytes": "1000", "retention.bytes": "3000"})
    offsets = _produce(broker.bootstrap, topic, 40)
    assert _wait_earliest(broker.bootstrap, topic, at_least=1) > 0
    time.sleep(1)
    directory = broker.partition_dir(topic, 0)
    sizes = [p.stat().st_size for p in sorted(directory.glob("*.log"))]
    # Kafka's rule: delete the oldest segment while what remains would still be at least retention.bytes
    assert sum(sizes) - sizes[0] < 3000 <= sum(sizes)
    # the segments went as *.deleted files that wait for log.segment.delete.delay.ms (default 60 s)
    assert list(directory.glob("*.log.deleted"))
    earliest = _earliest(broker.bootstrap, topic)
    assert _read_with_reset(broker.bootstrap, topic, 0, offsets[-1] + 1) == list(range(earliest, offsets[-1] + 1))


def test_delete_records_moves_log_start_and_survives_restart(start_broker):
    broker = start_broker()
    topic = "deleted-records"
    _create(broker.bootstrap, topic, **{"segment.bytes": "1000"})
    offsets = _produce(broker.bootstrap, topic, 30)
    end = offsets[-1] + 1
    a = admin(broker.bootstrap)

    (result,) = a.delete_records([TopicPartition(topic, 0, 12)], operation_timeout=30).values()
    assert result.result(30).low_watermark == 12
    assert _earliest(broker.bootstrap, topic) == 12
    assert _segment_bases(broker, topic)[0] <= 12 < _segment_bases(broker, topic)[1]  # wholly-below segments went
    assert _read_with_reset(broker.bootstrap, topic, 3, end) == list(range(12, end))

    (too_far,) = a.delete_records([TopicPartition(topic, 0, end + 5)], operation_timeout=30).values()
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        too_far.result(30)

    broker.restart()
    assert _earliest(broker.bootstrap, topic) == 12
    more = _produce(broker.bootstrap, topic, 2, start=30)
    assert more == [end, end + 1]  # idempotent producing continues after the restart

    # -1 (OFFSET_END in the client) is the high watermark
    a = admin(broker.bootstrap)
    (to_end,) = a.delete_records([TopicPartition(topic, 0, -1)], operation_timeout=30).values()
    assert to_end.result(30).low_watermark == end + 2
    broker.kill()
    broker.start()  # an unclean start keeps it too
    assert _earliest(broker.bootstrap, topic) == end + 2
