"""Fetch size limits as stock clients rely on them (KIP-74).

Only the first partition with data may exceed a Fetch's ``max_bytes`` (by
one batch, so a consumer never gets stuck behind a batch larger than its
limits); every later partition must fit in what is left. librdkafka refuses
a response larger than ``receive.message.max.bytes`` ("Invalid response
size") and keeps refetching the same thing.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from helpers import fetch_requests, wire
from helpers.bystander import produce_body
from helpers.kafka import consume_until, consumer, create_topic, flush, producer
from protocol import frames
from protocol.records import build_batch

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


@pytest.mark.timeout(60)
def test_a_fetch_waits_for_min_bytes_across_appends(broker):
    """A parked Fetch sizes each append by the segment's growth and answers once min_bytes are there,
    long before max_wait_ms, with everything appended meanwhile."""
    create_topic(broker.bootstrap, TOPIC, partitions=1)
    request = fetch_requests.fetch_request(1, TOPIC, [0], max_wait_ms=30_000, min_bytes=5_000)
    with wire.connect(broker.port) as consumer_socket, wire.WireClient(broker.port) as c:
        consumer_socket.sendall(request)
        for _ in range(3):
            time.sleep(0.3)
            consumer_socket.settimeout(0)
            with pytest.raises(BlockingIOError):  # not answered before 5,000 bytes are there
                consumer_socket.recv(1)
            r = c.request("Produce", 9, produce_body(TOPIC, build_batch([(None, bytes(2000))])))
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
        consumer_socket.settimeout(10)
        _, response = frames.decode_response("Fetch", 11, wire.recv_frame(consumer_socket))
    records = response["responses"][0]["partitions"][0]["records"]
    assert len(records) > 6000
