"""Compose smoke test: produce a few messages to the broker and read them back; with PIPELINE_OUTPUT set,
wait for the Spark pipeline's first closed window in that topic too."""

import os
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

BOOTSTRAP = os.environ.get("BOOTSTRAP_SERVERS", "moldau:29092")
PIPELINE_OUTPUT = os.environ.get("PIPELINE_OUTPUT")
PIPELINE_TIMEOUT_S = 600  # Spark's start and first micro-batches in a fresh container
COUNT = 100


def main() -> int:
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all"})
    for i in range(COUNT):
        producer.produce(topic, value=f"message-{i}".encode())
    if producer.flush(30):
        print("smoke: produce did not complete", file=sys.stderr)
        return 1
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "smoke", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    while len(seen) < COUNT:
        msg = consumer.poll(10)
        if msg is None:
            break
        if not msg.error():
            seen.append(msg.value().decode())
    consumer.close()
    ok = seen == [f"message-{i}" for i in range(COUNT)]
    print(f"smoke: {'ok' if ok else 'FAILED'} ({len(seen)}/{COUNT} messages read back)")
    if ok and PIPELINE_OUTPUT:
        ok = pipeline_wrote(PIPELINE_OUTPUT)
    return 0 if ok else 1


def pipeline_wrote(topic: str) -> bool:
    """True once the pipeline has committed a window total to ``topic``."""
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "smoke-pipeline", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "topic.metadata.refresh.interval.ms": 5000})  # the pipeline creates the topic later
    consumer.subscribe([topic])
    deadline = time.monotonic() + PIPELINE_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(5)
            if msg is not None and not msg.error():
                print(f"smoke: pipeline ok (first window total in {topic}: {msg.value().decode()})")
                return True
    finally:
        consumer.close()
    print(f"smoke: FAILED (no pipeline output in {topic} within {PIPELINE_TIMEOUT_S} s)", file=sys.stderr)
    return False


if __name__ == "__main__":
    sys.exit(main())
