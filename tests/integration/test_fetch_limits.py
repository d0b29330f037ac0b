"""Fetch size limits as stock clients rely on them (KIP-74).

Only the first partition with data may exceed a Fetch's ``max_bytes`` (by
one batch, so a consumer never gets stuck behind a batch larger than its
limits); every later partition must fit in what is left. librdkafka refuses
a response larger than ``receive.message.max.bytes`` ("Invalid response
size") and keeps refetching the same thing.
"""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from helpers.kafka import consume_until, consumer, create_topic, flush, producer

TOPIC = "kip74"
VALUE_SIZE = 900_000  # two such batches do not fit in fetch.max.bytes


@pytest.mark.timeout(90)
def test_only_the_first_partition_may_exceed_fetch_max_bytes(broker):
    create_topic(broker.bootstrap, TOPIC, partitions=2)
    p, _ = producer(broker.bootstrap)
    for partition in (0, 1):
        for i in range(2):
            p.produce(TOPIC, value=bytes([partition * 2 + i]) * VALUE_SIZE, partition=partition)
            flush(p)  # one record per batch
    # as librdkafka's own test 0082: the response may be at most fetch.max.bytes + 512
    c, errors = consumer(broker.bootstrap, fetch_max_bytes=1_000_000, max_partition_fetch_bytes=1_000_000,
                         receive_message_max_bytes=1_000_512)
    try:
        c.assign([TopicPartition(TOPIC, partition, OFFSET_BEGINNING) for partition in (0, 1)])
        got = consume_until(c, TOPIC, {0: 2, 1: 2}, timeout=30, errors=errors)
    finally:
        c.close()
    assert {part: [m[2][0] for m in msgs] for part, msgs in got.items()} == {0: [0, 1], 1: [2, 3]}
    assert not [e for e in errors if "Invalid response size" in e], errors
