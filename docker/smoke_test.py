"""Compose smoke test: produce a few messages to the broker and read them back."""

import os
import sys
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

BOOTSTRAP = os.environ.get("BOOTSTRAP_SERVERS", "moldau:9092")
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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
