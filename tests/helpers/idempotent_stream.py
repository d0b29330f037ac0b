"""A producer process of its own for the crash test: numbered messages, idempotence on.

    idempotent_stream.py BOOTSTRAP TOPIC COUNT PARTITIONS PROGRESS_FILE RESULT_FILE

Message i has the key ``str(i)``, a 100-byte value, and goes to partition
``i % PARTITIONS``; batches are kept small so that many requests are in
flight whenever the broker is killed.
While it runs, the number of acknowledged messages is kept in PROGRESS_FILE
(so the test knows when to kill the broker); at the end RESULT_FILE holds
``{"acked": {i: [partition, offset]}, "errors": [...], "fatal": [...]}``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from confluent_kafka import Producer

FLUSH_TIMEOUT = 150.0
VALUE = b"v" * 100


def main(bootstrap: str, topic: str, count: str, partitions: str, progress_path: str, result_path: str) -> int:
    acked: dict[int, list[int]] = {}
    errors: list[str] = []
    fatal: list[str] = []

    def on_error(err):
        errors.append(str(err))
        if err.fatal():
            fatal.append(str(err))

    def on_delivery(err, msg):
        if err is None:
            acked[int(msg.key())] = [msg.partition(), msg.offset()]
        else:
            errors.append(f"message {msg.key().decode()}: {err}")

    reported = 0

    def report_progress():
        nonlocal reported
        if len(acked) - reported >= 1000:
            with open(progress_path + ".tmp", "w") as f:
                f.write(str(len(acked)))
            os.replace(progress_path + ".tmp", progress_path)
            reported = len(acked)

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "enable.idempotence": True,
        "max.in.flight": 5,
        "linger.ms": 5,
        "batch.num.messages": 200,
        "message.timeout.ms": 120_000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "log.connection.close": False,
        "error_cb": on_error,
    })
    n, parts = int(count), int(partitions)
    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=b"%d" % i, value=VALUE, partition=i % parts, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
                report_progress()
        if i % 1000 == 0:
            producer.poll(0)
            report_progress()
    deadline = time.monotonic() + FLUSH_TIMEOUT
    while len(producer) and time.monotonic() < deadline and not fatal:
        producer.poll(0.1)
        report_progress()
    with open(result_path, "w") as f:
        json.dump({"acked": acked, "errors": errors[:50], "fatal": fatal}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
