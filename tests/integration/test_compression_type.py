"""A topic's compression.type names the codec its batches are stored in: the leader recompresses what
producers send (Kafka's LogValidator), and consumers -- librdkafka and the Java client, which reads only
LZ4 frames of independent blocks -- read them back. confluent-kafka's admin tests create topics so."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from helpers.java_clients import every
from helpers.kafka import admin, producer
from protocol.compression import CODECS
from protocol.records import scan_batches

pytestmark = pytest.mark.timeout(180)

COUNT = 40


def _stored_codecs(broker, topic: str) -> set[int]:
    return {hdr.compression for path in broker.segment_files(topic, 0)
            for _, hdr in scan_batches(path.read_bytes())}


def _consume(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    try:
        for _ in range(60):
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
            if len(got) == COUNT:
                break
    finally:
        c.close()
    return got


def test_batches_are_recompressed_to_the_topics_codec(start_broker, java):
    broker = start_broker()
    a = admin(broker.bootstrap)
    sent = [b"value %d " % i * 20 for i in range(COUNT)]
    for codec, produced_as in [("gzip", "none"), ("snappy", "gzip"), ("lz4", "none"), ("zstd", "lz4"),
                               ("uncompressed", "zstd"), ("producer", "snappy")]:
        topic = f"codec-{codec}"
        a.create_topics([NewTopic(topic, 1, 1, config={"compression.type": codec})])[topic].result(30)
        p, _ = producer(broker.bootstrap, compression_type=produced_as, linger_ms=50)
        for value in sent:
            p.produce(topic, key=b"k", value=value)
        assert p.flush(30) == 0
        expected = CODECS.get(codec, CODECS["snappy"])  # "producer": as the producer sent it
        assert _stored_codecs(broker, topic) == {expected}, codec
        assert _consume(broker.bootstrap, topic) == sent, codec
    # the Java client reads the LZ4 frames Moldau writes
    records = every(java.run(broker.bootstrap, "consume", "codec-lz4", 0, "read_uncommitted", "-"), "record")
    assert len(records) == COUNT
