"""A consume-transform-produce application of its own, for the crash tests: exactly once through transactions.

    txn_transform_app.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PROGRESS_FILE

Reads INPUT with read_committed as a static member of GROUP (so a restarted
incarnation takes its old place without a rebalance), writes ``transform``
of each record to the same partition of OUTPUT, and commits each batch
together with the group's offsets (send_offsets_to_transaction). After each
step PROGRESS_FILE holds "<transactions committed> open|committed", so the
test knows when to SIGKILL the app inside a transaction. Exits 0 once its
position is at the end of every input partition.
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer

BATCH = 20
# a transaction stays open this long after its records are sent: the window the test kills in
IN_TRANSACTION_PAUSE_S = 0.1
TIMEOUT_S = 30


def transform(value: bytes) -> bytes:
    return value.upper() + b"!"


def report(path: str, committed: int, state: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(f"{committed} {state}")
    os.replace(path + ".tmp", path)


def caught_up(consumer: Consumer) -> bool:
    assignment = consumer.assignment()
    if not assignment:
        return False
    for tp in consumer.position(assignment):
        _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        if tp.offset < high:
            return False
    return True


def main(bootstrap: str, input_topic: str, output_topic: str, group: str, transactional_id: str,
         progress_path: str) -> int:
    common = {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log.connection.close": False}
    producer = Producer({**common, "transactional.id": transactional_id, "linger.ms": 5})
    consumer = Consumer({
        **common,
        "group.id": group,
        "group.instance.id": f"{transactional_id}-member",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
    })
    producer.init_transactions(TIMEOUT_S)  # aborts what an earlier incarnation left open
    consumer.subscribe([input_topic])
    committed = 0
    while True:
        messages = consumer.consume(num_messages=BATCH, timeout=0.5)
        for m in messages:
            if m.error():
                raise KafkaException(m.error())
        if not messages:
            if caught_up(consumer):
                break
            continue
        producer.begin_transaction()
        for m in messages:
            producer.produce(output_topic, key=m.key(), value=transform(m.value()), partition=m.partition())
        producer.flush(TIMEOUT_S)  # the records are in the log: "open" means an open transaction there
        report(progress_path, committed, "open")
        time.sleep(IN_TRANSACTION_PAUSE_S)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        committed += 1
        report(progress_path, committed, "committed")
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
